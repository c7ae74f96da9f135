"""What every merge target does; each kind's ``target.py`` (``pg/``, ``mysql/``) says it
in its SQL.

A target table holds the source table's columns plus ``_dblog_position``, the
position of the event that wrote the row. Deleted keys are remembered in the
state schema's ``tombstones`` table with the delete's position; the
``merge_log`` table records what has been merged. A batch is applied in one
transaction that also advances the merge log, so a batch applies entirely and
once, or not at all.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dblog_worker import kinds
from dblog_worker.config import TargetConfig, name_problem
from dblog_worker.errors import TargetError
from dblog_worker.merge.column_types import SourceColumn, target_type
from dblog_worker.merge.plan import Batch, MergeLogEntry
from dblog_worker.names import split_table

__all__ = ["POSITION_COLUMN", "Applied", "Target"]

POSITION_COLUMN = "_dblog_position"
TARGET_GONE = "the connection to the target database is gone; re-run the merge"


@dataclass(frozen=True, slots=True)
class Applied:
    """What one batch changed in its target table."""

    upserted: int
    deleted: int
    truncated: bool
    derived: int = 0  # rows a foreign-key action or prune event deleted or changed


class Target(abc.ABC):
    """One target database, seen through one connection of the Spark driver."""

    kind: str

    def __init__(self, config: TargetConfig) -> None:
        self.config = config
        self.state = config.state_schema

    # -- connection, state tables, locks ----------------------------------------------------

    @abc.abstractmethod
    def connect(self) -> None: ...

    @abc.abstractmethod
    def close(self) -> None: ...

    @abc.abstractmethod
    def ensure_state(self) -> None:
        """Create the state schema, ``merge_log`` and ``tombstones`` if missing."""

    @abc.abstractmethod
    def merge_log_rows(self, sql: str, params: Sequence[str]) -> list[tuple[Any, ...]]:
        """Rows of a read of the state tables: ``sql`` names the state schema as ``{s}``
        (quoted by the target) and binds ``%s`` parameters."""

    def merged(self, source: str, source_table: str, target_table: str) -> MergeLogEntry:
        """What the merge log says of one (source, source table, target table)."""
        rows = self.merge_log_rows(
            "SELECT last_segment, last_position, truncated_at FROM {s}.merge_log"
            " WHERE source = %s AND source_table = %s AND target_table = %s",
            (source, source_table, target_table))
        return MergeLogEntry(*rows[0]) if rows else MergeLogEntry()

    @abc.abstractmethod
    def try_lock(self, stage: str) -> bool:
        """Hold the session lock of one table's merge; False if another job holds it."""

    @abc.abstractmethod
    def unlock(self, stage: str) -> None: ...

    # -- target tables ----------------------------------------------------------------------

    @abc.abstractmethod
    def table_columns(self, table: str) -> dict[str, str] | None:
        """Column name -> type as the target spells it, in table order; None if no table."""

    @abc.abstractmethod
    def primary_key(self, table: str) -> list[str]: ...

    @abc.abstractmethod
    def create_table(self, table: str, columns: Sequence[tuple[str, str]],
                     key: Sequence[str]) -> None: ...

    @abc.abstractmethod
    def add_columns(self, table: str, columns: Sequence[tuple[str, str]]) -> None: ...

    @abc.abstractmethod
    def widened(self, table: str, column: SourceColumn, existing: str) -> str | None:
        """The type an ``existing`` target column must grow to, so that the values of
        ``column`` (the source's newest definition) fit; None when they fit already or
        when ``existing`` is a type the merge does not know how to grow."""

    @abc.abstractmethod
    def modify_columns(self, table: str, columns: Sequence[tuple[str, str]]) -> None:
        """Change the types of existing columns to the (wider) given ones."""

    @abc.abstractmethod
    def prepare_stage(self, stage: str) -> None:
        """An empty staging table (``key_json``, ``op``, ``position``, ``after_json``,
        ``before_json``): the latest keyed event per key, and every foreign-key action and
        prune event (:mod:`dblog_worker.merge.derived`; no key)."""

    @abc.abstractmethod
    def stage_table(self, stage: str) -> str:
        """The staging table's name as SQL (quoted, qualified): Spark's ``dbtable``."""

    @abc.abstractmethod
    def jdbc(self) -> tuple[str, dict[str, str]]:
        """The JDBC URL and properties (driver, user, password) Spark stages with."""

    @abc.abstractmethod
    def apply(self, batch: Batch, types: Mapping[str, str], retention_h: float) -> Applied:
        """Apply the staged batch and advance the merge log, in one transaction."""

    def finish(self, source: str, source_table: str, target_table: str,
               retention_h: float) -> None:
        """After the batches of a table that applied at least one (a lake target copies its
        merge log and drops old tombstones here; a database does both per batch)."""
        return None

    # -- shared -----------------------------------------------------------------------------

    def prepare_table(self, batch: Batch) -> dict[str, str]:
        """Create the target table, add the columns it lacks and widen those the source
        widened (:meth:`widened`); its column types after.

        Raises TargetError, having changed nothing, when the target's primary key is not
        the source's or a source type has no target type.
        """
        table = batch.target_table
        self._check_names(batch)
        if any(c.name == POSITION_COLUMN for c in batch.columns):
            raise TargetError(f"{batch.source_table}: a source column is named {POSITION_COLUMN},"
                              " which the merge keeps for itself")
        existing = self.table_columns(table)
        if existing is None:
            columns = self._types(batch, batch.columns)
            self.create_table(table, [*columns, (POSITION_COLUMN, self.position_type)],
                              batch.key)
        else:
            key = self.primary_key(table)
            if set(key) != set(batch.key):
                shown = ", ".join(key) if key else "none"
                raise TargetError(
                    f"target table {table} has primary key ({shown}) but source table"
                    f" {batch.source_table} has ({', '.join(batch.key)}); give the target the"
                    " source's primary key, or map the source table to another target table"
                    " (target.tables)"
                )
            missing = [c for c in batch.columns if c.name not in existing]
            added = self._types(batch, missing)
            if POSITION_COLUMN not in existing:
                added.append((POSITION_COLUMN, self.position_type))
            if added:
                self.add_columns(table, added)
            widened = [(c.name, wider) for c in batch.columns if c.name in existing
                       and (wider := self.widened(table, c, existing[c.name])) is not None]
            if widened:
                self.modify_columns(table, widened)
        found = self.table_columns(table)
        assert found is not None
        return found

    def _check_names(self, batch: Batch) -> None:
        """TargetError unless the target table's and every column's name fit this kind of
        database (a name too long for PostgreSQL would be truncated, silently)."""
        target = kinds.rules(self.kind).title
        for part in split_table(batch.target_table):
            problem = name_problem(self.kind, part)
            if problem is not None:
                raise TargetError(f"target table {batch.target_table!r} cannot be a {target}"
                                  f" table: {problem}; map it to another name (target.tables)")
        for column in batch.columns:
            problem = name_problem(self.kind, column.name)
            if problem is not None:
                raise TargetError(
                    f"{batch.source_table}: column {column.name!r} cannot be a column of a"
                    f" {target} target table: {problem}; leave the table out of the merge"
                    " (--table)")

    def _types(self, batch: Batch, columns: Sequence[SourceColumn]) -> list[tuple[str, str]]:
        return [
            (c.name, target_type(batch.source_table, c, self.kind,
                                 len(batch.key) if c.name in batch.key else 0))
            for c in columns
        ]

    @property
    @abc.abstractmethod
    def position_type(self) -> str: ...

    # -- one row by its key (removing rows the source does not have) -----------------------

    @abc.abstractmethod
    def row_position(self, table: str, key_columns: Sequence[str], types: Mapping[str, str],
                     key: Sequence[str]) -> tuple[bool, object]:
        """Whether ``table`` has the row of ``key`` (texts, as a key dump's), and the
        position that wrote it (None for a row the merge did not write)."""

    @abc.abstractmethod
    def delete_row(self, table: str, key_columns: Sequence[str], types: Mapping[str, str],
                   key: Sequence[str], position: object) -> bool:
        """Delete the row of ``key`` if it still has ``position``; whether it did."""
