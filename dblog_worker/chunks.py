"""Chunk plans: what one window reads, and one planner per dump kind.

A plan is frozen: the table, how many rows, and where (a key range of a table dump, a
batch of requested keys of a primary-key dump); it reads itself from the source. A
planner knows its kind's progress: how a table's dump starts, the next plan, where
reading goes on after a window opened, and what a closed window completed. Adding a
dump kind is a planner and a line in :data:`PLANNERS`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Protocol

import pyarrow as pa

from dblog_worker.events import Encoded
from dblog_worker.requests import DumpKind, DumpRequest, KeyTexts, TableProgress
from dblog_worker.source import ChunkReader

Encode = Callable[[Callable[[], Encoded]], "Future[Encoded]"]
"""Runs a chunk's encoding (in the encoder thread) and gives its future rows."""

KeyFetch = Callable[[int, int], list[KeyTexts]]
"""Keys ``start`` to ``start + count - 1`` of the request's key list."""

EMPTY = pa.array([], pa.string())


def done(rows: Encoded) -> Future[Encoded]:
    future: Future[Encoded] = Future()
    future.set_result(rows)
    return future


@dataclass(frozen=True, slots=True)
class ChunkRead:
    """What a window's chunk SELECT selected."""

    rows: Future[Encoded]
    selected: int = 0
    last_key: KeyTexts | None = None
    missing: tuple[KeyTexts, ...] = ()
    schema_version: int = 0


NOTHING_READ = ChunkRead(done((EMPTY, EMPTY)))


class ChunkPlan(Protocol):
    @property
    def table(self) -> str: ...

    @property
    def limit(self) -> int: ...

    @property
    def first(self) -> bool:
        """The table's first chunk (the live view shows its rows)."""

    def read(self, source: ChunkReader, encode: Encode) -> ChunkRead: ...


@dataclass(frozen=True, slots=True)
class KeyRange:
    """A table dump's chunk: up to ``limit`` keys after ``after``, up to ``upper``."""

    table: str
    limit: int
    after: KeyTexts | None
    upper: KeyTexts

    @property
    def first(self) -> bool:
        return self.after is None

    def read(self, source: ChunkReader, encode: Encode) -> ChunkRead:
        chunk = source.read_chunk(self.table, self.after, self.upper, self.limit)
        return ChunkRead(encode(chunk.encode), chunk.rows, chunk.last_key,
                         schema_version=chunk.schema_version)


@dataclass(frozen=True, slots=True)
class KeyBatch:
    """A primary-key dump's chunk: the requested keys from ``key_index`` on."""

    table: str
    limit: int
    key_index: int
    keys: tuple[KeyTexts, ...]

    @property
    def first(self) -> bool:
        return False

    def read(self, source: ChunkReader, encode: Encode) -> ChunkRead:
        batch = source.read_keys(self.table, self.keys)
        return ChunkRead(done((batch.keys, batch.afters)), len(batch.keys),
                         missing=tuple(batch.missing), schema_version=batch.schema_version)


Cursor = KeyTexts | int
"""Where reading of a table goes on while windows are open (ahead of its progress)."""


class Planner(Protocol):
    def start(self, table: TableProgress, source: ChunkReader) -> TableProgress | None:
        """The table's progress once its dump can start; None if it can already."""

    def next(self, table: TableProgress, cursor: Cursor | None, request: DumpRequest,
             keys: KeyFetch) -> ChunkPlan | None:
        """The next chunk, reading on from ``cursor`` (else from the progress)."""

    def opened(self, plan: ChunkPlan, read: ChunkRead,
               request: DumpRequest) -> tuple[Cursor | None, bool]:
        """Where reading goes on after this window, and whether the table is all read."""

    def completed(self, table: TableProgress, plan: ChunkPlan, read: ChunkRead,
                  request: DumpRequest) -> TableProgress:
        """The progress once this window's rows are emitted."""

    def check(self, request: DumpRequest, key_count: Callable[[], int]) -> str | None:
        """What is wrong with what Redis holds for the request beyond its record (the
        length of its key list: ``key_count``), or None."""


class TablePlanner:
    """ALL and TABLES: keyset chunks up to the largest key, captured once per table."""

    def start(self, table: TableProgress, source: ChunkReader) -> TableProgress | None:
        if table.started:
            return None
        upper = source.upper_bound(table.table)
        return dataclasses.replace(table, started=True, done=upper is None,
                                   upper_bound=None if upper is None else list(upper))

    def next(self, table: TableProgress, cursor: Cursor | None, request: DumpRequest,
             keys: KeyFetch) -> KeyRange | None:
        if not table.started or table.upper_bound is None:
            return None
        after = cursor if isinstance(cursor, tuple) else None
        if after is None and table.last_key is not None:
            after = tuple(table.last_key)
        return KeyRange(table.table, request.chunk_size, after, tuple(table.upper_bound))

    def opened(self, plan: ChunkPlan, read: ChunkRead,
               request: DumpRequest) -> tuple[Cursor | None, bool]:
        return read.last_key, read.selected < plan.limit

    def completed(self, table: TableProgress, plan: ChunkPlan, read: ChunkRead,
                  request: DumpRequest) -> TableProgress:
        last_key = table.last_key if read.last_key is None else list(read.last_key)
        return dataclasses.replace(table, last_key=last_key, done=read.selected < plan.limit)

    def check(self, request: DumpRequest, key_count: Callable[[], int]) -> str | None:
        return None


class KeysPlanner:
    """KEYS: the requested keys, a chunk size at a time."""

    def start(self, table: TableProgress, source: ChunkReader) -> TableProgress | None:
        return None

    def next(self, table: TableProgress, cursor: Cursor | None, request: DumpRequest,
             keys: KeyFetch) -> KeyBatch:
        index = cursor if isinstance(cursor, int) else table.next_key_index
        return KeyBatch(table.table, request.chunk_size, index,
                        tuple(keys(index, request.chunk_size)))

    def opened(self, plan: ChunkPlan, read: ChunkRead,
               request: DumpRequest) -> tuple[Cursor | None, bool]:
        assert isinstance(plan, KeyBatch)
        index = plan.key_index + len(plan.keys)
        return index, index >= request.key_count

    def completed(self, table: TableProgress, plan: ChunkPlan, read: ChunkRead,
                  request: DumpRequest) -> TableProgress:
        assert isinstance(plan, KeyBatch)
        index = table.next_key_index + len(plan.keys)
        return dataclasses.replace(table, next_key_index=index,
                                   missing=table.missing + len(read.missing),
                                   done=index >= request.key_count)

    def check(self, request: DumpRequest, key_count: Callable[[], int]) -> str | None:
        held = key_count()
        if held != request.key_count:
            return f"holds {held} keys, but the request's key_count is {request.key_count}"
        return None


PLANNERS: dict[DumpKind, Planner] = {
    DumpKind.ALL: TablePlanner(),
    DumpKind.TABLES: TablePlanner(),
    DumpKind.KEYS: KeysPlanner(),
}


class KeyColumn(Sequence[str]):
    """The chunk's keys for the reconciler: encoded in another thread, turned into Python
    strings only if it asks (an event touched the table in the window)."""

    def __init__(self, count: int, rows: Future[Encoded]) -> None:
        self._count = count
        self._rows = rows
        self._list: list[str] | None = None

    def __len__(self) -> int:
        return self._count

    def _strings(self) -> list[str]:
        if self._list is None:
            try:
                self._list = self._rows.result()[0].to_pylist()
            except Exception:  # no row survives; the dump fails at HW (_emit_survivors)
                self._list = []
        return self._list

    def __getitem__(self, index: int) -> str:  # type: ignore[override]
        return self._strings()[index]

    def __iter__(self) -> Iterator[str]:
        return iter(self._strings())
