"""ActiveDump: which chunk comes next, and what a closed window changes."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from dblog_worker.capture.window import WindowClosed
from dblog_worker.dump.active import RETRY_S, ActiveDump, WindowRead
from dblog_worker.dump.plans import EMPTY, BoundRead, ChunkRead, KeyBatch, KeyRange, done
from dblog_worker.dump.requests import DumpKind, DumpRequest, KeyTexts, RequestState, TableProgress
from dblog_worker.events import ChangeEvent, Op, Origin, Watermark
from dblog_worker.position import Position


class Bounds:
    """The largest key a table dump reads when it starts (what the source's catalog says)."""

    def __init__(self, upper: KeyTexts | None) -> None:
        self.upper = upper

    def upper_bound(self, table: str, row_filter: object = None) -> KeyTexts | None:
        return self.upper

    def read_chunk(self, *args: object) -> Any:
        raise AssertionError("not read here")

    def read_keys(self, *args: object) -> Any:
        raise AssertionError("not read here")

    def key_after(self, *args: object) -> Any:
        raise AssertionError("not read here")

    def lane(self, index: int) -> Any:
        raise AssertionError("not read here")


def set_upper_bound(dump: ActiveDump, upper: KeyTexts | None) -> None:
    assert dump.start(Bounds(upper))


def plan_of(dump: ActiveDump) -> Any:
    """The next plan; a primary-key dump's keys are "0", "1", ... up to its key count."""
    count = dump.request.key_count
    return dump.plan(lambda start, n: [(str(i),) for i in range(start, min(start + n, count))])


def key_index(dump: ActiveDump) -> int:
    plan = plan_of(dump)
    assert isinstance(plan, KeyBatch)
    return plan.key_index


def read(plan: Any, *, selected: int, last_key: KeyTexts | None = None,
         missing: list[KeyTexts] | None = None, failure: str | None = None,
         stale: bool = False, keys_read: int = 0) -> WindowRead:
    """What a window read (``keys_read``: what a primary-key batch had, checked)."""
    if isinstance(plan, KeyBatch):
        assert len(plan.keys) == keys_read, (plan, keys_read)
    chunk = ChunkRead(done((EMPTY, EMPTY)), selected, last_key, tuple(missing or ()))
    return WindowRead(plan, chunk, failure=failure, stale=stale)


A = "public.a"
B = "public.b"
DUMP = "dump-1"


def request(
    kind: DumpKind = DumpKind.TABLES,
    tables: tuple[str, ...] = (A, B),
    *,
    chunk_size: int = 2,
    delay_ms: int = 250,
    state: RequestState = RequestState.RUNNING,
    key_count: int = 0,
) -> DumpRequest:
    return DumpRequest(
        id=DUMP, kind=kind, tables=tables, chunk_size=chunk_size, delay_ms=delay_ms,
        state=state, created_at=1.0, updated_at=1.0, key_count=key_count,
    )


def rows(table: str, *keys: int) -> tuple[ChangeEvent, ...]:
    return tuple(
        ChangeEvent(
            table=table, op=Op.READ, position=Position(10, 0, 1 + i), key=f"[{k}]",
            after=f'{{"id":{k}}}', before=None, origin=Origin.DUMP, commit_ts_us=5,
            schema_version=1, dump_id=DUMP,
        )
        for i, k in enumerate(keys)
    )


def closed(
    table: str, events: tuple[ChangeEvent, ...], selected: int, dump_id: str = DUMP
) -> WindowClosed:
    """A window of ``selected`` rows of which ``events`` survived (the first ones)."""
    return WindowClosed(
        table=table, dump_id=dump_id, high=Watermark("run.1.hw", Position(10, 0), 5),
        survivors=range(len(events)), selected=selected, schema_version=1,
    )


def read_and_close(
    dump: ActiveDump,
    *,
    selected: int,
    last_key: KeyTexts | None,
    kept: tuple[int, ...],
    now: float,
    keys_read: int = 0,
    missing: list[KeyTexts] | None = None,
    failure: str | None = None,
) -> Any:
    plan = plan_of(dump)
    assert plan is not None
    dump.window_opened(read(plan, selected=selected, last_key=last_key, keys_read=keys_read,
                            missing=missing, failure=failure))
    dump.window_closed(closed(plan.table, rows(plan.table, *kept), selected), now)
    assert not dump.open_reads
    return plan


def test_table_dump_sequence() -> None:
    dump = ActiveDump(request(), {})
    assert dump.id == DUMP
    assert not dump.finished
    table = dump.current_table()
    assert table == TableProgress(A)

    # The upper bound comes first.
    assert plan_of(dump) is None
    set_upper_bound(dump, ("10",))
    assert dump.progress[A] == TableProgress(A, started=True, upper_bound=["10"])
    assert plan_of(dump) == KeyRange(A, 2, None, ("10",))

    # A full chunk; one row removed by a log event in the window.
    plan = read_and_close(dump, selected=2, last_key=("2",), kept=(1,), now=100.0)
    assert plan == KeyRange(A, 2, None, ("10",))
    assert dump.progress[A] == TableProgress(
        A, started=True, upper_bound=["10"], last_key=["2"], chunks=1, selected=2, rows=1,
        dropped=1,
    )
    assert dump.next_window_at == 100.25
    assert plan_of(dump) == KeyRange(A, 2, ("2",), ("10",))

    # Another full chunk.
    read_and_close(dump, selected=2, last_key=("7",), kept=(5, 7), now=101.0)
    assert dump.progress[A] == TableProgress(
        A, started=True, upper_bound=["10"], last_key=["7"], chunks=2, selected=4, rows=3,
        dropped=1,
    )
    assert dump.next_window_at == 101.25
    assert plan_of(dump) == KeyRange(A, 2, ("7",), ("10",))

    # A short chunk: the table is done and the next one needs its upper bound.
    read_and_close(dump, selected=1, last_key=("10",), kept=(10,), now=102.0)
    assert dump.progress[A] == TableProgress(
        A, done=True, started=True, upper_bound=["10"], last_key=["10"], chunks=3, selected=5,
        rows=4, dropped=1,
    )
    assert dump.current_table() is dump.progress[B]
    assert plan_of(dump) is None
    assert not dump.finished

    set_upper_bound(dump, ("3",))
    assert plan_of(dump) == KeyRange(B, 2, None, ("3",))
    read_and_close(dump, selected=0, last_key=None, kept=(), now=103.0)
    assert dump.progress[B] == TableProgress(
        B, done=True, started=True, upper_bound=["3"], chunks=1,
    )
    assert dump.finished
    assert dump.current_table() is None
    assert plan_of(dump) is None
    assert dump.failure is None


def test_composite_key_plan() -> None:
    dump = ActiveDump(request(tables=(A,), chunk_size=100), {})
    table = dump.current_table()
    assert table is not None
    set_upper_bound(dump, ("us", "9"))
    read_and_close(dump, selected=100, last_key=("eu", "42"), kept=(), now=0.0)
    assert plan_of(dump) == KeyRange(A, 100, ("eu", "42"), ("us", "9"))
    assert dump.progress[A].last_key == ["eu", "42"]


def test_empty_table_is_done_at_once() -> None:
    dump = ActiveDump(request(), {})
    set_upper_bound(dump, None)
    assert dump.progress[A] == TableProgress(A, done=True, started=True)
    assert dump.current_table() is dump.progress[B]
    set_upper_bound(dump, None)
    assert dump.finished
    assert plan_of(dump) is None


@pytest.mark.parametrize(
    ("delay_ms", "now", "expected"),
    [(0, 50.0, 50.0), (1, 50.0, 50.001), (250, 50.0, 50.25), (3_600_000, 0.0, 3600.0)],
)
def test_next_window_at_uses_the_delay(delay_ms: int, now: float, expected: float) -> None:
    dump = ActiveDump(request(delay_ms=delay_ms), {})
    assert dump.next_window_at == 0.0
    set_upper_bound(dump, ("10",))
    read_and_close(dump, selected=2, last_key=("2",), kept=(1, 2), now=now)
    assert dump.next_window_at == pytest.approx(expected)


def test_next_window_at_adds_the_throttle_and_follows_knobs_set_at_runtime() -> None:
    dump = ActiveDump(request(delay_ms=100), {})
    set_upper_bound(dump, ("10",))
    read_and_close(dump, selected=2, last_key=("2",), kept=(1, 2), now=50.0)
    assert dump.unpaced
    dump.throttle.delay_ms = 800.0
    assert dump.next_window_at == pytest.approx(50.9)
    dump.request = request(delay_ms=0)  # `dblog set --delay-ms 0`: counts at once
    assert dump.next_window_at == pytest.approx(50.8)


def test_failure_recorded_in_the_read() -> None:
    dump = ActiveDump(request(), {})
    set_upper_bound(dump, ("10",))
    assert dump.runnable
    read_and_close(dump, selected=1, last_key=("1",), kept=(1,), now=7.0,
                   failure="table public.a was dropped")
    assert dump.failure == "table public.a was dropped"
    assert not dump.runnable
    # The window is counted, but the position in the table does not move.
    assert dump.progress[A] == TableProgress(
        A, started=True, upper_bound=["10"], chunks=1, selected=1, rows=1,
    )


def test_resume_from_saved_progress() -> None:
    saved = {
        A: TableProgress(A, done=True, started=True, upper_bound=["3"], chunks=2),
        B: TableProgress(B, started=True, upper_bound=["9"], last_key=["4"], chunks=1),
    }
    dump = ActiveDump(request(), saved)
    assert dump.current_table() is dump.progress[B]
    assert plan_of(dump) == KeyRange(B, 2, ("4",), ("9",))


def test_progress_of_tables_not_in_the_request_is_ignored() -> None:
    dump = ActiveDump(request(tables=(A,)), {"public.gone": TableProgress("public.gone")})
    assert list(dump.progress) == [A]


def test_keys_dump() -> None:
    dump = ActiveDump(request(DumpKind.KEYS, (A,), chunk_size=2, key_count=5), {})
    # No upper bound for a primary-key dump.
    assert key_index(dump) == 0

    read_and_close(dump, selected=1, last_key=None, kept=(1,), now=1.0, keys_read=2,
                   missing=[("3",)])
    assert dump.progress[A] == TableProgress(
        A, next_key_index=2, chunks=1, selected=1, rows=1, missing=1,
    )
    assert key_index(dump) == 2

    read_and_close(dump, selected=2, last_key=None, kept=(4,), now=2.0, keys_read=2)
    assert dump.progress[A] == TableProgress(
        A, next_key_index=4, chunks=2, selected=3, rows=2, dropped=1, missing=1,
    )
    assert not dump.finished
    assert key_index(dump) == 4

    read_and_close(dump, selected=0, last_key=None, kept=(), now=3.0, keys_read=1,
                   missing=[("9",)])
    assert dump.progress[A] == TableProgress(
        A, done=True, next_key_index=5, chunks=3, selected=3, rows=2, dropped=1, missing=2,
    )
    assert dump.finished
    assert plan_of(dump) is None
    tables, missing = dump.take_unsaved()
    assert tables == [dump.progress[A]]
    assert missing == [("3",), ("9",)]


def test_take_unsaved_returns_changes_once() -> None:
    dump = ActiveDump(request(), {})
    # A new dump: every table is unsaved.
    assert dump.take_unsaved() == ([TableProgress(A), TableProgress(B)], [])
    assert dump.take_unsaved() == ([], [])

    set_upper_bound(dump, ("10",))
    tables, missing = dump.take_unsaved()
    assert tables == [TableProgress(A, started=True, upper_bound=["10"])]
    assert tables[0] is dump.progress[A]
    assert missing == []
    assert dump.take_unsaved() == ([], [])

    read_and_close(dump, selected=1, last_key=("10",), kept=(10,), now=0.0)
    set_upper_bound(dump, ("1",))
    tables, _ = dump.take_unsaved()
    assert [t.table for t in tables] == [A, B]  # in the request's order
    assert dump.take_unsaved() == ([], [])


def test_take_unsaved_missing_keys_once() -> None:
    dump = ActiveDump(request(DumpKind.KEYS, (A,), chunk_size=2, key_count=10), {})
    dump.take_unsaved()
    read_and_close(dump, selected=0, last_key=None, kept=(), now=0.0, keys_read=2,
                   missing=[("1",), ("2",)])
    assert dump.take_unsaved() == ([dump.progress[A]], [("1",), ("2",)])
    assert dump.take_unsaved() == ([], [])


@pytest.mark.parametrize(
    ("state", "runnable"),
    [
        (RequestState.QUEUED, False),
        (RequestState.RUNNING, True),
        (RequestState.PAUSED, False),
        (RequestState.COMPLETED, False),
        (RequestState.FAILED, False),
        (RequestState.CANCELLED, False),
    ],
)
def test_runnable_follows_the_request_state(state: RequestState, runnable: bool) -> None:
    assert ActiveDump(request(state=state), {}).runnable is runnable


def test_closed_window_of_another_dump_is_ignored() -> None:
    dump = ActiveDump(request(), {})
    set_upper_bound(dump, ("10",))
    dump.take_unsaved()
    plan = plan_of(dump)
    assert plan is not None
    dump.window_opened(read(plan, selected=2, last_key=("2",)))
    dump.window_closed(closed(A, rows(A, 1, 2), 2, dump_id="dump-9"), 100.0)
    assert dump.progress[A] == TableProgress(A, started=True, upper_bound=["10"])
    assert dump.next_window_at == 0.0
    assert dump.take_unsaved() == ([], [])
    assert len(dump.open_reads) == 1  # still waiting for its own window


def test_closed_window_without_open_read_is_ignored() -> None:
    dump = ActiveDump(request(), {})
    set_upper_bound(dump, ("10",))
    dump.take_unsaved()
    dump.window_closed(closed(A, rows(A, 1), 1), 100.0)
    assert dump.progress[A] == TableProgress(A, started=True, upper_bound=["10"])
    assert dump.next_window_at == 0.0
    assert dump.take_unsaved() == ([], [])


def test_reading_runs_ahead_of_progress() -> None:
    """A second chunk is planned after the first one's last key while its window is open;
    progress moves only as the windows close, in order."""
    dump = ActiveDump(request(), {})
    set_upper_bound(dump, ("10",))
    first = plan_of(dump)
    assert first is not None and first.after is None
    dump.window_opened(read(first, selected=2, last_key=("2",)))
    second = plan_of(dump)
    assert second is not None and second.after == ("2",)
    dump.window_opened(read(second, selected=1, last_key=("3",)))  # short: A is read
    assert dump.current_table() is not None and dump.current_table() is not dump.progress[A]
    assert dump.progress[A].last_key is None
    dump.window_closed(closed(A, rows(A, 1, 2), 2), 1.0)
    assert (dump.progress[A].last_key, dump.progress[A].done) == (["2"], False)
    dump.window_closed(closed(A, rows(A, 3), 1), 2.0)
    assert (dump.progress[A].last_key, dump.progress[A].done) == (["3"], True)
    assert not dump.open_reads


def test_ending_waits_for_the_last_window_to_close() -> None:
    dump = ActiveDump(request(tables=(A,)), {})
    set_upper_bound(dump, ("10",))
    assert not dump.ending
    plan = plan_of(dump)
    assert plan is not None
    dump.window_opened(read(plan, selected=1, last_key=("10",), keys_read=0))
    assert not dump.ending  # read to the end, but its last window is still open
    dump.window_closed(closed(A, rows(A, 10), 1), 5.0)
    assert dump.finished and dump.ending


def test_a_failed_dump_ends_once_its_windows_close() -> None:
    dump = ActiveDump(request(tables=(A,)), {})
    set_upper_bound(dump, ("10",))
    plan = plan_of(dump)
    assert plan is not None
    dump.window_opened(read(plan, selected=0, last_key=None, keys_read=0,
                                  failure="table public.a was dropped"))
    assert not dump.ending
    dump.window_closed(closed(A, (), 0), 5.0)
    assert not dump.finished and dump.ending


def _retried(table: str, selected: int) -> WindowClosed:
    """A window the reconciler says is to be read again."""
    return WindowClosed(
        table=table, dump_id=DUMP, high=Watermark("run.1.hw", Position(10, 0), 5),
        survivors=(), selected=selected, schema_version=1, retry=True,
    )


def test_a_stale_chunk_is_read_again_from_the_progress() -> None:
    """The source found the chunk stale (its columns changed): nothing is read after it
    until its window closes; then the next plan starts from the last completed key, a
    moment later."""
    dump = ActiveDump(request(tables=(A,), delay_ms=0), {})
    set_upper_bound(dump, ("10",))
    read_and_close(dump, selected=2, last_key=("2",), kept=(1, 2), now=1.0)
    first = plan_of(dump)
    assert first is not None and first.after == ("2",)
    dump.window_opened(read(first, selected=0, last_key=None, stale=True))
    assert plan_of(dump) is None
    dump.window_closed(closed(A, (), 0), 2.0)
    assert dump.reread == 1 and not dump.ending
    assert dump.next_window_at == pytest.approx(2.0 + RETRY_S)
    assert dump.progress[A].last_key == ["2"] and dump.progress[A].chunks == 1
    again = plan_of(dump)
    assert again is not None and again.after == ("2",)


def test_a_window_read_again_does_not_let_a_read_ahead_move_the_progress() -> None:
    """The reconciler discards a window (unseen changes too many to keep): progress stays;
    the window read ahead of it emits its rows but does not move the progress; reading
    goes on from the last completed key."""
    dump = ActiveDump(request(tables=(A,), delay_ms=0), {})
    set_upper_bound(dump, ("10",))
    read_and_close(dump, selected=2, last_key=("2",), kept=(1, 2), now=1.0)
    first = plan_of(dump)
    assert first is not None
    dump.window_opened(read(first, selected=2, last_key=("4",)))
    ahead = plan_of(dump)
    assert ahead is not None and ahead.after == ("4",)
    dump.window_opened(read(ahead, selected=2, last_key=("6",)))
    dump.window_closed(_retried(A, 2), 2.0)
    assert dump.reread == 1
    assert dump.progress[A].last_key == ["2"] and dump.progress[A].chunks == 1
    dump.window_closed(closed(A, rows(A, 5, 6), 2), 3.0)
    assert dump.progress[A].last_key == ["2"] and dump.progress[A].chunks == 1
    assert dump.progress[A].rows == 4
    again = plan_of(dump)
    assert again is not None and again.after == ("2",)
    read_and_close(dump, selected=2, last_key=("4",), kept=(3, 4), now=4.0)
    assert dump.progress[A].last_key == ["4"] and dump.progress[A].chunks == 2


def test_a_keys_batch_read_again_is_read_from_its_first_key() -> None:
    dump = ActiveDump(request(DumpKind.KEYS, (A,), key_count=6), {})
    plan = plan_of(dump)
    assert plan is not None and plan.key_index == 0
    dump.window_opened(read(plan, selected=2, last_key=None, keys_read=2))
    assert (p := plan_of(dump)) is not None and p.key_index == 2
    dump.window_closed(_retried(A, 2), 1.0)
    again = plan_of(dump)
    assert again is not None and again.key_index == 0
    assert dump.progress[A].next_key_index == 0 and not dump.progress[A].done


# -- pruning dumps -------------------------------------------------------------------------


def pruning() -> ActiveDump:
    return ActiveDump(dataclasses.replace(request(tables=(A,)), prune=True), {})


def closed_at(low: int, survivors: int = 0, retry: bool = False) -> WindowClosed:
    return WindowClosed(table=A, dump_id=DUMP, high=Watermark("run.1.hw", Position(low + 1, 0),
                                                              5),
                        survivors=range(survivors), selected=survivors, schema_version=1,
                        retry=retry, low=Position(low, 0))


def test_a_pruning_dump_reads_the_upper_bound_in_its_first_window() -> None:
    dump = pruning()
    assert not dump.start(Bounds(("9",)))  # nothing outside a window
    bound = plan_of(dump)
    assert isinstance(bound, BoundRead)
    dump.window_opened(WindowRead(bound, bound.read(Bounds(("9",)), done_rows)))
    first = plan_of(dump)  # read ahead, before the bound's window closed
    assert isinstance(first, KeyRange) and (first.after, first.upper) == (None, ("9",))
    dump.window_opened(read(first, selected=2, last_key=("4",)))
    assert dump.window_closed(closed_at(100), 1.0) is None
    progress = dump.progress[A]
    assert (progress.started, progress.upper_bound, progress.done) == (True, ["9"], False)
    assert progress.prune_from == Position(100, 0).encode()  # the bound's window's LW
    assert dump.window_closed(closed_at(200, 2), 2.0) is None
    last = plan_of(dump)
    assert isinstance(last, KeyRange) and (last.after, last.upper) == (("4",), ("9",))
    dump.window_opened(read(last, selected=1, last_key=("9",)))
    finished = dump.window_closed(closed_at(300, 1), 3.0)
    assert finished is not None and finished.done
    assert finished.prune_from == Position(100, 0).encode()  # kept: the first window's


def test_a_pruning_dump_of_an_empty_table_ends_in_its_first_window() -> None:
    dump = pruning()
    bound = plan_of(dump)
    dump.window_opened(WindowRead(bound, bound.read(Bounds(None), done_rows)))
    assert dump.current_table() is None  # all read
    finished = dump.window_closed(closed_at(100), 1.0)
    assert finished is not None and finished.prune_from == Position(100, 0).encode()


def test_a_bound_window_read_again_starts_the_prune_later() -> None:
    dump = pruning()
    bound = plan_of(dump)
    dump.window_opened(WindowRead(bound, bound.read(Bounds(("9",)), done_rows)))
    assert dump.window_closed(closed_at(100, retry=True), 1.0) is None
    assert dump.progress[A].prune_from is None and not dump.progress[A].started
    again = plan_of(dump)
    assert isinstance(again, BoundRead)
    dump.window_opened(WindowRead(again, again.read(Bounds(("9",)), done_rows)))
    dump.window_closed(closed_at(150), 2.0)
    assert dump.progress[A].prune_from == Position(150, 0).encode()


def test_a_failed_pruning_dump_does_not_prune() -> None:
    dump = pruning()
    bound = plan_of(dump)
    dump.window_opened(WindowRead(bound, bound.read(Bounds(("9",)), done_rows)))
    dump.window_closed(closed_at(100), 1.0)
    last = plan_of(dump)
    dump.window_opened(read(last, selected=1, last_key=("9",)))
    dump.failure = "the rows could not be encoded"
    assert dump.window_closed(closed_at(200, 1), 2.0) is None


def done_rows(encode: Any) -> Any:
    return done((EMPTY, EMPTY))
