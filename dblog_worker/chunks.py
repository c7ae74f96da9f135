"""Chunk plans: what one window reads, and one planner per dump kind.

A plan is frozen: the table, how many rows, and where (a key range of a table dump, a
batch of requested keys of a primary-key dump); it reads itself from the source. A
planner knows its kind's progress: how a table's dump starts, the next plan, where
reading goes on after a window opened, and what a closed window completed. Adding a
dump kind is a planner and a line in :data:`PLANNERS`.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Protocol

import pyarrow as pa

from dblog_worker.errors import ChunkStale
from dblog_worker.events import Encoded
from dblog_worker.requests import MAX_PARALLELISM, DumpKind, DumpRequest, KeyTexts, TableProgress
from dblog_worker.row_filter import RowFilter
from dblog_worker.source import Chunk, ChunkReader, DumpReader

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
    """What a window's chunk SELECT selected (``all_read``: a table dump's read reached
    the upper bound; None: the planner judges by the count; ``upper``: the upper bound a
    pruning dump's first window read)."""

    rows: Future[Encoded]
    selected: int = 0
    last_key: KeyTexts | None = None
    missing: tuple[KeyTexts, ...] = ()
    schema_version: int = 0
    all_read: bool | None = None
    upper: KeyTexts | None = None


NOTHING_READ = ChunkRead(done((EMPTY, EMPTY)))


class ChunkPlan(Protocol):
    @property
    def table(self) -> str: ...

    @property
    def limit(self) -> int: ...

    @property
    def first(self) -> bool:
        """The table's first chunk (the live view shows its rows)."""

    def read(self, source: DumpReader, encode: Encode) -> ChunkRead: ...


@dataclass(frozen=True, slots=True)
class KeyRange:
    """A table dump's chunk: up to ``limit`` keys after ``after``, up to ``upper``."""

    table: str
    limit: int
    after: KeyTexts | None
    upper: KeyTexts
    row_filter: RowFilter | None = None

    @property
    def first(self) -> bool:
        return self.after is None

    def read(self, source: DumpReader, encode: Encode) -> ChunkRead:
        chunk = source.read_chunk(self.table, self.after, self.upper, self.limit,
                                  self.row_filter)
        return ChunkRead(encode(chunk.encode), chunk.rows, chunk.last_key,
                         schema_version=chunk.schema_version)


@dataclass(frozen=True, slots=True)
class KeyRanges:
    """A table dump's window of ``lanes`` chunk SELECTs at once, each on a source connection
    of its own: consecutive key ranges of ``limit`` keys from ``after`` on, up to ``upper``.

    The ranges' ends are found first (each the ``limit``-th key after the last: key
    predicates, read before the chunks); the chunks are then selected together, all
    after LW and before HW, so the paper's rule holds for each. A range that holds more
    keys by then (rows inserted meanwhile) is cut at ``limit``: the window keeps the ranges
    up to that one, and reading goes on after its last key; rows of later ranges are
    selected again by a later window."""

    table: str
    limit: int
    after: KeyTexts | None
    upper: KeyTexts
    lanes: int
    row_filter: RowFilter | None = None

    @property
    def first(self) -> bool:
        return self.after is None

    def read(self, source: DumpReader, encode: Encode) -> ChunkRead:
        starts: list[KeyTexts | None] = [self.after]
        ends: list[KeyTexts] = []
        while len(starts) < self.lanes:
            end = source.key_after(self.table, starts[-1], self.upper, self.limit,
                                   self.row_filter)
            if end is None:
                break
            ends.append(end)
            starts.append(end)
        ends.append(self.upper)
        readers = [source.lane(i) for i in range(len(starts))]
        chunks = in_parallel([
            functools.partial(reader.read_chunk, self.table, start, end, self.limit,
                              self.row_filter)
            for reader, start, end in zip(readers, starts, ends, strict=True)])
        kept = whole_prefix([(c.rows, c.last_key) for c in chunks], ends, self.limit)
        used = chunks[:kept]
        if len({c.schema_version for c in used}) > 1:
            raise ChunkStale(f"the columns of {self.table} changed between the window's "
                             "chunk SELECTs: the window is read again")
        last = next((c.last_key for c in reversed(used) if c.last_key is not None), None)
        all_read = kept == len(chunks) and chunks[-1].rows < self.limit
        return ChunkRead(encode(functools.partial(_joined, [c.encode for c in used])),
                         sum(c.rows for c in used), last,
                         schema_version=used[0].schema_version, all_read=all_read)


def whole_prefix(reads: Sequence[tuple[int, KeyTexts | None]], ends: Sequence[KeyTexts],
                 limit: int) -> int:
    """How many of a window's consecutive ranges to keep: up to the first that was cut (it
    selected ``limit`` rows that stop before its end), that one included."""
    for index, ((count, last), end) in enumerate(zip(reads, ends, strict=True)):
        if count >= limit and last != end:
            return index + 1
    return len(reads)


_LANES = ThreadPoolExecutor(MAX_PARALLELISM - 1, thread_name_prefix="dblog-lane")


def in_parallel(reads: Sequence[Callable[[], Chunk]]) -> list[Chunk]:
    """Run the reads at once: the first in this thread, the others in the lane threads;
    the first error (in the reads' order) is raised once all have ended."""
    futures = [_LANES.submit(read) for read in reads[1:]]
    first: Chunk | BaseException
    try:
        first = reads[0]()
    except Exception as exc:
        first = exc
    wait(futures)
    if isinstance(first, BaseException):
        raise first
    return [first, *(future.result() for future in futures)]


def _joined(encodes: Sequence[Callable[[], Encoded]]) -> Encoded:
    parts = [encoded() for encoded in encodes]
    if len(parts) == 1:
        return parts[0]
    return (pa.concat_arrays([keys for keys, _ in parts]),
            pa.concat_arrays([rows for _, rows in parts]))


@dataclass(frozen=True, slots=True)
class BoundRead:
    """A pruning dump's first window of a table: it reads the table's upper bound, between
    LW and HW, and no row. Every row inserted after that read is logged after LW, so LW is
    where the dump's prune begins: once the table is read, a row no event wrote since LW
    is not at the source (``TableProgress.prune_from``)."""

    table: str
    limit: int = 0

    @property
    def first(self) -> bool:
        return False

    def read(self, source: DumpReader, encode: Encode) -> ChunkRead:
        upper = source.upper_bound(self.table)
        return ChunkRead(done((EMPTY, EMPTY)), upper=upper, all_read=upper is None)


@dataclass(frozen=True, slots=True)
class Bounded:
    """Where a pruning dump's reading goes on before its upper bound is in the progress."""

    after: KeyTexts | None
    upper: KeyTexts


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

    def read(self, source: DumpReader, encode: Encode) -> ChunkRead:
        batch = source.read_keys(self.table, self.keys)
        return ChunkRead(done((batch.keys, batch.afters)), len(batch.keys),
                         missing=tuple(batch.missing), schema_version=batch.schema_version)


Cursor = KeyTexts | int | Bounded
"""Where reading of a table goes on while windows are open (ahead of its progress)."""


class Planner(Protocol):
    def start(self, table: TableProgress, source: ChunkReader,
              request: DumpRequest) -> TableProgress | None:
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
    """ALL and TABLES: keyset chunks up to the largest key, captured once per table (by a
    pruning dump, inside its first window: :class:`BoundRead`)."""

    def start(self, table: TableProgress, source: ChunkReader,
              request: DumpRequest) -> TableProgress | None:
        if table.started or request.prune:
            return None
        upper = source.upper_bound(table.table, request.row_filter)
        return dataclasses.replace(table, started=True, done=upper is None,
                                   upper_bound=None if upper is None else list(upper))

    def next(self, table: TableProgress, cursor: Cursor | None, request: DumpRequest,
             keys: KeyFetch) -> KeyRange | KeyRanges | BoundRead | None:
        upper: KeyTexts | None = None
        after = cursor if isinstance(cursor, tuple) else None
        if isinstance(cursor, Bounded):
            after, upper = cursor.after, cursor.upper
        elif table.started and table.upper_bound is not None:
            upper = tuple(table.upper_bound)
        if upper is None:
            return BoundRead(table.table) if request.prune and not table.started else None
        if after is None and table.last_key is not None:
            after = tuple(table.last_key)
        if request.parallelism > 1:
            return KeyRanges(table.table, request.chunk_size, after, upper,
                             request.parallelism, request.row_filter)
        return KeyRange(table.table, request.chunk_size, after, upper, request.row_filter)

    def opened(self, plan: ChunkPlan, read: ChunkRead,
               request: DumpRequest) -> tuple[Cursor | None, bool]:
        if isinstance(plan, BoundRead):
            return None if read.upper is None else Bounded(None, read.upper), read.upper is None
        if request.prune and isinstance(plan, KeyRange | KeyRanges):
            return Bounded(read.last_key or plan.after, plan.upper), _all_read(plan, read)
        return read.last_key, _all_read(plan, read)

    def completed(self, table: TableProgress, plan: ChunkPlan, read: ChunkRead,
                  request: DumpRequest) -> TableProgress:
        if isinstance(plan, BoundRead):
            return dataclasses.replace(
                table, started=True, done=read.upper is None,
                upper_bound=None if read.upper is None else list(read.upper))
        last_key = table.last_key if read.last_key is None else list(read.last_key)
        return dataclasses.replace(table, last_key=last_key, done=_all_read(plan, read))

    def check(self, request: DumpRequest, key_count: Callable[[], int]) -> str | None:
        return None


def _all_read(plan: ChunkPlan, read: ChunkRead) -> bool:
    return read.selected < plan.limit if read.all_read is None else read.all_read


class KeysPlanner:
    """KEYS: the requested keys, a chunk size at a time."""

    def start(self, table: TableProgress, source: ChunkReader,
              request: DumpRequest) -> TableProgress | None:
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
    """The chunk's keys (``column`` 0) or row images (1) for the reconciler: encoded in
    another thread, turned into Python strings only if it asks (an event touched the table
    in the window)."""

    def __init__(self, count: int, rows: Future[Encoded], column: int = 0) -> None:
        self._count = count
        self._rows = rows
        self._column = column
        self._list: list[str] | None = None

    def __len__(self) -> int:
        return self._count

    def _strings(self) -> list[str]:
        if self._list is None:
            try:
                self._list = self._rows.result()[self._column].to_pylist()
            except Exception:  # no row survives; the dump fails at HW (_emit_survivors)
                self._list = []
        return self._list

    def __getitem__(self, index: int) -> str:  # type: ignore[override]
        return self._strings()[index]

    def __iter__(self) -> Iterator[str]:
        return iter(self._strings())
