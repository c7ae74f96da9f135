"""A window of several chunk SELECTs (``KeyRanges``): consecutive ranges, the prefix a
window keeps, and the progress it makes. The reader is an in-memory table of integer
keys (the plan's logic; the SELECTs themselves run against real servers in
tests/integration/test_scenarios.py)."""

from __future__ import annotations

import bisect
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future

import pyarrow as pa
import pytest

from dblog_worker.dump.plans import KeyRange, KeyRanges, TablePlanner, whole_prefix
from dblog_worker.dump.requests import DumpKind, DumpRequest, KeyTexts, RequestState, TableProgress
from dblog_worker.errors import ChunkStale
from dblog_worker.events import Encoded
from dblog_worker.source import Chunk, ChunkReader, KeysChunk

TABLE = "public.t"


class Table:
    """Integer keys; ``grow`` adds keys when a given lane starts its SELECT."""

    def __init__(self, keys: Sequence[int]) -> None:
        self.keys = sorted(keys)
        self.grow: dict[int, list[int]] = {}
        self.versions: dict[int, int] = {}
        self.barrier: threading.Barrier | None = None
        self.lock = threading.Lock()

    def select(self, lane: int, after: KeyTexts | None, upper: KeyTexts, limit: int) -> Chunk:
        if self.barrier is not None:
            self.barrier.wait(timeout=10)  # broken unless every lane's SELECT runs at once
        with self.lock:
            for key in self.grow.pop(lane, []):
                bisect.insort(self.keys, key)
            low = -1 if after is None else int(after[0])
            rows = [k for k in self.keys if low < k <= int(upper[0])][:limit]
        last = (str(rows[-1]),) if rows else None

        def encode() -> Encoded:
            texts = pa.array([f"[{k}]" for k in rows], pa.string())
            return texts, texts

        return Chunk(len(rows), last, self.versions.get(lane, 1), encode)


class Lane:
    def __init__(self, table: Table, index: int) -> None:
        self.table, self.index = table, index

    def upper_bound(self, table: str, row_filter: object = None) -> KeyTexts | None:
        return (str(self.table.keys[-1]),) if self.table.keys else None

    def read_chunk(self, table: str, after: KeyTexts | None, upper: KeyTexts,
                   limit: int, row_filter: object = None) -> Chunk:
        return self.table.select(self.index, after, upper, limit)

    def read_keys(self, table: str, keys: Sequence[KeyTexts]) -> KeysChunk:
        raise AssertionError("not a key dump")

    def key_after(self, table: str, after: KeyTexts | None, upper: KeyTexts,
                  offset: int, row_filter: object = None) -> KeyTexts | None:
        low = -1 if after is None else int(after[0])
        keys = [k for k in self.table.keys if low < k <= int(upper[0])]
        return (str(keys[offset - 1]),) if len(keys) >= offset else None


class Reader(Lane):
    def __init__(self, table: Table) -> None:
        super().__init__(table, 0)

    def lane(self, index: int) -> ChunkReader:
        return self if index == 0 else Lane(self.table, index)


def no_keys(start: int, count: int) -> list[KeyTexts]:
    raise AssertionError("a table dump reads no key list")


def encode_now(run: Callable[[], Encoded]) -> Future[Encoded]:
    future: Future[Encoded] = Future()
    future.set_result(run())
    return future


def request(parallelism: int, chunk_size: int = 10) -> DumpRequest:
    return DumpRequest("dump-1", DumpKind.TABLES, (TABLE,), chunk_size, 0,
                       RequestState.RUNNING, 0.0, 0.0, parallelism=parallelism)


def keys_of(read_rows: Future[Encoded]) -> list[int]:
    return [int(k[1:-1]) for k in read_rows.result()[0].to_pylist()]


def test_consecutive_ranges_read_at_once_on_their_own_connections() -> None:
    table = Table(range(1, 101))
    table.barrier = threading.Barrier(4)
    read = KeyRanges(TABLE, 10, None, ("100",), 4).read(Reader(table), encode_now)
    assert keys_of(read.rows) == list(range(1, 41))
    assert (read.selected, read.last_key, read.all_read) == (40, ("40",), False)


def test_the_last_ranges_reach_the_upper_bound() -> None:
    table = Table(range(1, 26))
    read = KeyRanges(TABLE, 10, ("0",), ("25",), 4).read(Reader(table), encode_now)
    assert keys_of(read.rows) == list(range(1, 26))
    assert (read.selected, read.last_key, read.all_read) == (25, ("25",), True)


def test_a_range_that_grew_is_cut_and_later_ranges_are_dropped() -> None:
    table = Table(range(0, 200, 2))
    table.grow[1] = [21, 23]  # rows inserted in the second range after its end was found
    read = KeyRanges(TABLE, 10, None, ("198",), 3).read(Reader(table), encode_now)
    # ranges: 0..18, 20..38 (cut at 10 rows: 20, 21, 22, 23, ..., 34), 40..58 (dropped)
    assert keys_of(read.rows) == [*range(0, 20, 2), 20, 21, 22, 23, *range(24, 35, 2)]
    assert (read.selected, read.last_key, read.all_read) == (20, ("34",), False)


def test_a_schema_change_between_the_selects_makes_the_window_stale() -> None:
    table = Table(range(100))
    table.versions[2] = 2
    with pytest.raises(ChunkStale, match="changed between the window's chunk SELECTs"):
        KeyRanges(TABLE, 10, None, ("99",), 3).read(Reader(table), encode_now)


@pytest.mark.parametrize(("reads", "kept"), [
    ([(10, ("9",)), (10, ("19",)), (4, ("23",))], 3),  # all whole; the last short
    ([(10, ("9",)), (10, ("17",)), (10, ("29",))], 2),  # the second cut before its end 19
    ([(7, ("9",)), (10, ("19",))], 2),  # rows deleted from the first: whole
    ([(10, ("5",)), (10, ("19",))], 1),  # the first cut
])
def test_whole_prefix(reads: list[tuple[int, KeyTexts | None]], kept: int) -> None:
    assert whole_prefix(reads, [("9",), ("19",), ("29",)][:len(reads)], 10) == kept


def test_the_planner_reads_ranges_when_the_request_asks_and_ends_on_the_upper_bound() -> None:
    planner, table = TablePlanner(), Table(range(1, 36))
    progress = planner.start(TableProgress(TABLE), Reader(table), request(1))
    assert progress is not None
    assert isinstance(planner.next(progress, None, request(1), no_keys), KeyRange)
    cursor = None
    for expected_done in (False, True):
        plan = planner.next(progress, cursor, request(2), no_keys)
        assert isinstance(plan, KeyRanges) and plan.lanes == 2
        read = plan.read(Reader(table), encode_now)
        cursor, all_read = planner.opened(plan, read, request(2))
        progress = planner.completed(progress, plan, read, request(2))
        assert all_read is expected_done and progress.done is expected_done
    assert progress.last_key == ["35"]
