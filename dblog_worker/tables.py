"""What every source keeps of the tables it captures, and the names all sources share."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from dblog_worker.errors import ConfigError, RequestRejected
from dblog_worker.source import Problem

REFRESH_S = 1.0  # how old the catalog description of a table being dumped may be
HEARTBEAT = "heartbeat"  # a watermark value of no window: the reconciler ignores it
WATERMARK_SCHEMA = "dblog"  # the schema (database) of the watermark table

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


class TableCache(Generic[_T]):
    """The captured tables as a source described them (``load``: from its catalog)."""

    def __init__(self, source: str, captured: Sequence[str], load: Callable[[str], _T]) -> None:
        self._source = source
        self._captured = captured
        self._load = load
        self._tables: dict[str, _T] = {}
        self._refreshed: dict[str, float] = {}

    def check(self, table: str) -> None:
        """RequestRejected unless ``table`` is captured."""
        if table not in self._captured:
            raise RequestRejected(
                f"table {table} is not captured by source {self._source}; captured: "
                + ", ".join(self._captured)
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
