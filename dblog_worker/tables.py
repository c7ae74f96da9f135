"""What every source keeps of the tables it captures, and the names all sources share."""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from dblog_worker.errors import ConfigError, RequestRejected
from dblog_worker.masking import ColumnRules, MaskConflict
from dblog_worker.names import WATERMARK_SCHEMA
from dblog_worker.source import Problem
from dblog_worker.table_patterns import Candidate, Rescan, Selection, TableSelector

REFRESH_S = 1.0  # how old the catalog description of a table being dumped may be
HEARTBEAT = "heartbeat"  # a watermark value of no window: the reconciler ignores it
__all__ = ["HEARTBEAT", "REFRESH_S", "WATERMARK_SCHEMA", "CapturedSet", "TableCache", "listed",
           "not_ready"]

_T = TypeVar("_T")


def not_ready(problems: Sequence[Problem]) -> ConfigError:
    """The error that stops capture: every problem, each with its fix."""
    return ConfigError("the source is not ready for capture:\n"
                       + "\n".join(f"- {p.what}\n  fix: {p.fix}" for p in problems))


@dataclass(frozen=True, slots=True)
class UniqueIndex:
    """A unique index a table's key can be: on whole columns, not partial."""

    name: str
    primary: bool
    identity: bool  # PostgreSQL: REPLICA IDENTITY USING INDEX names it
    columns: tuple[str, ...]
    not_null: bool


def choose_key(indexes: Sequence[UniqueIndex], configured: Sequence[str] | None
               ) -> tuple[tuple[str, ...], str]:
    """The key of a table and where it comes from, for every kind (docs/configuration.md):
    the columns ``source.keys`` names; else the primary key; else the unique index on NOT
    NULL columns with the fewest columns, then the first by name. ``()`` if none."""
    if configured:
        return tuple(configured), "source.keys"
    for index in indexes:
        if index.primary:
            return index.columns, "primary key"
    usable = sorted((len(i.columns), i.name, i.columns) for i in indexes if i.not_null)
    if usable:
        return usable[0][2], f"unique index {usable[0][1]}"
    return (), ""


class CapturedSet:
    """The tables ``source.tables`` captures now: the catalog's tables (``candidates``, a
    query of the source) run through the selector, read once and again at each
    :meth:`rescan`. A rule of ``[source.columns]`` that would mask a key column leaves a
    table a pattern matches out (a named one stays: preflight reports it)."""

    def __init__(self, selector: TableSelector, rules: ColumnRules,
                 candidates: Callable[[], Sequence[Candidate]]) -> None:
        self.selector = selector
        self._rules = rules
        self._candidates = candidates
        self._selection: Selection | None = None

    def selection(self) -> Selection:
        if self._selection is None:
            self._selection = self._select()
        return self._selection

    def rescan(self) -> Rescan:
        """The catalog again: the tables that exist and are captured now and were not at
        the last look (created, renamed into a pattern, a named table created again), and
        those that were and are not (dropped, renamed out)."""
        before = self._selection
        now = self._selection = self._select()
        if before is None:
            return Rescan(now)
        was, is_now = set(before.existing), set(now.existing)
        return Rescan(now, tuple(t for t in now.existing if t not in was),
                      tuple(t for t in before.existing if t not in is_now))

    def set(self, selection: Selection) -> None:
        self._selection = selection

    def __contains__(self, table: object) -> bool:
        return table in self.selection().captured

    def tables(self) -> Collection[str]:
        return self.selection().captured.keys()

    def _select(self) -> Selection:
        candidates = self._candidates()
        selection = self.selector.select(candidates)
        if not self._rules:
            return selection
        keys = {c.table: c.key for c in candidates}
        captured, excluded = dict(selection.captured), dict(selection.excluded)
        for table in list(captured):
            if self.selector.named(table) or table not in keys:
                continue
            try:
                self._rules.for_table(table, keys[table], keys[table])
            except MaskConflict as exc:
                excluded[table] = f"{captured.pop(table)}, but {exc}"
        return Selection(captured, dict(sorted(excluded.items())), selection.missing)


def listed(tables: Collection[str], most: int = 10) -> str:
    """Up to ``most`` table names, and how many more."""
    names = sorted(tables)
    more = f" and {len(names) - most} more" if len(names) > most else ""
    return ", ".join(names[:most]) + more


class TableCache(Generic[_T]):
    """The captured tables as a source described them (``load``: from its catalog);
    ``captured`` gives the tables captured now."""

    def __init__(self, source: str, captured: Callable[[], Collection[str]],
                 load: Callable[[str], _T]) -> None:
        self._source = source
        self._captured = captured
        self._load = load
        self._tables: dict[str, _T] = {}
        self._refreshed: dict[str, float] = {}

    def check(self, table: str) -> None:
        """RequestRejected unless ``table`` is captured."""
        captured = self._captured()
        if table not in captured:
            raise RequestRejected(
                f"table {table} is not captured by source {self._source} (now); captured: "
                + (listed(captured) or "none")
            )

    def get(self, table: str) -> _T:
        self.check(table)
        return self._tables.get(table) or self._load(table)

    def known(self, table: str) -> _T | None:
        """The description already read, if any: no check, no catalog read."""
        return self._tables.get(table)

    def put(self, table: str, loaded: _T) -> None:
        self._tables[table] = loaded

    def forget(self, table: str) -> None:
        self._tables.pop(table, None)

    def refresh(self, table: str) -> None:
        """Read the table's description again (before a window, not in it); at most every
        REFRESH_S: a column added since is in the next chunks."""
        self.check(table)
        now = time.monotonic()
        if now - self._refreshed.get(table, 0.0) >= REFRESH_S:
            self._load(table)
            self._refreshed[table] = now
