"""Rows of a lake target by key, without Spark: what the repair DAG's removal of extra rows
(``dblog_dags/extras.py``) asks a target — the position a key's row has, and its delete
where it still has that position (:func:`dblog_worker.lake.read.delete_rows`).

Keys come as their texts (verify's and a key dump's form); they are cast to the table's
column types with Arrow's casts (``"7"`` to an integer, ``"1.5"`` to a decimal, an ISO
text to a date or a timestamp).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from dblog_worker.config import TargetConfig
from dblog_worker.errors import TargetError
from dblog_worker.lake.read import POSITION, LakeTable, delete_rows, open_table

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["LakeRows"]


class LakeRows:
    """One lake target's tables, read and deleted from by key."""

    def __init__(self, config: TargetConfig) -> None:
        if config.lake is None:
            raise TargetError(f"target kind {config.kind} has no lake options")
        self.lake = config.lake
        self._tables: dict[str, LakeTable | None] = {}
        self._rows: dict[str, dict[tuple[Any, ...], str | None]] = {}

    def connect(self) -> None:
        return None

    def close(self) -> None:
        self._tables.clear()
        self._rows.clear()

    def _table(self, table: str) -> LakeTable | None:
        if table not in self._tables:
            self._tables[table] = open_table(self.lake, table)
        return self._tables[table]

    def table_columns(self, table: str) -> dict[str, str] | None:
        found = self._table(table)
        if found is None:
            return None
        return {f.name: str(f.type) for f in found.batches().schema}

    def primary_key(self, table: str) -> list[str]:
        found = self._table(table)
        return [] if found is None else found.key()

    def _typed(self, schema: pa.Schema, key_columns: Sequence[str], key: Sequence[str]
               ) -> tuple[Any, ...]:
        import pyarrow as pa
        import pyarrow.compute as pc

        typed = []
        for column, text in zip(key_columns, key, strict=True):
            kind = schema.field(column).type
            value = bytes.fromhex(text.removeprefix("\\x")) if pa.types.is_binary(kind) \
                else pc.cast(pa.array([text]), kind)[0].as_py()
            typed.append(value)
        return tuple(typed)

    def _positions(self, table: str, key_columns: Sequence[str]
                   ) -> dict[tuple[Any, ...], str | None]:
        if table not in self._rows:
            found = self._table(table)
            rows = {} if found is None else {
                tuple(r[c] for c in key_columns): r[POSITION]
                for r in found.arrow().select([*key_columns, POSITION]).to_pylist()}
            self._rows[table] = rows
        return self._rows[table]

    def row_position(self, table: str, key_columns: Sequence[str], types: object,
                     key: Sequence[str]) -> tuple[bool, object]:
        found = self._table(table)
        if found is None:
            return False, None
        typed = self._typed(found.batches().schema, key_columns, key)
        rows = self._positions(table, key_columns)
        return (True, rows[typed]) if typed in rows else (False, None)

    def delete_row(self, table: str, key_columns: Sequence[str], types: object,
                   key: Sequence[str], position: object) -> bool:
        """Delete the row of ``key`` where its position is still ``position``."""
        found = self._table(table)
        if found is None:
            return False
        typed = self._typed(found.batches().schema, key_columns, key)
        done = delete_rows(self.lake, table, key_columns,
                           {typed: None if position is None else str(position)})
        self._tables.pop(table, None)
        self._rows.pop(table, None)
        return bool(done)
