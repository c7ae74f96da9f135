"""OutputBuffer over a real LandingZone: replay dropping, and one segment per table per flush."""

from __future__ import annotations

from concurrent.futures import Future
from pathlib import Path

import pyarrow as pa
import pytest

from dblog_worker.capture.output import OutputBuffer, landing_errors
from dblog_worker.errors import OutputUnavailable
from dblog_worker.events import ChangeEvent, Encoded, Op, Origin, PendingRows
from dblog_worker.landing.parquet import LandingZone, read_events
from dblog_worker.position import Position
from tests.unit.helpers import flush

A, B, C = "public.a", "public.b", "public.c"
SOURCE = "shop"


def event(table: str, major: int, minor: int = 0, sub: int = 0) -> ChangeEvent:
    return ChangeEvent(
        table=table, op=Op.CREATE, position=Position(major, minor, sub),
        key=f"[{major}]", after=f'{{"id":{major}}}', before=None, origin=Origin.LOG,
        commit_ts_us=1_700_000_000_000_000, schema_version=1,
    )


Ev = tuple[str, int, int, int]  # table, major, minor, sub


CASES: list[tuple[str, dict[str, Position], list[Ev], list[Ev], int]] = [
    (
        "nothing-landed-keeps-everything",
        {},
        [(A, 1, 0, 0), (B, 1, 1, 0), (A, 2, 0, 0)],
        [(A, 1, 0, 0), (B, 1, 1, 0), (A, 2, 0, 0)],
        0,
    ),
    (
        "at-or-before-landed-dropped",
        {A: Position(100, 5)},
        [(A, 100, 3, 0), (A, 100, 5, 0), (A, 100, 5, 1), (A, 101, 0, 0)],
        [(A, 100, 5, 1), (A, 101, 0, 0)],
        2,
    ),
    (
        "per-table-positions",
        {A: Position(100, 5), B: Position(200, 0)},
        [
            (A, 90, 0, 0),  # dropped: before A's landed position
            (A, 150, 0, 0),  # kept: after A's, before B's
            (B, 150, 1, 0),  # dropped
            (C, 180, 0, 0),  # kept: C has nothing landed
            (B, 200, 0, 0),  # dropped: exactly B's landed position
            (B, 201, 0, 0),  # kept: newer than everything landed
            (A, 202, 0, 0),  # kept
        ],
        [(A, 150, 0, 0), (C, 180, 0, 0), (B, 201, 0, 0), (A, 202, 0, 0)],
        3,
    ),
    (
        "dump-rows-after-the-landed-high-watermark",
        {A: Position(100, 0)},
        [(A, 100, 0, 0), (A, 100, 0, 1), (A, 100, 0, 2)],
        [(A, 100, 0, 1), (A, 100, 0, 2)],
        1,
    ),
]


@pytest.mark.parametrize(("landed", "added", "kept", "replayed"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_replayed_events_are_dropped(
    tmp_path: Path, landed: dict[str, Position], added: list[Ev], kept: list[Ev], replayed: int
) -> None:
    zone = LandingZone(tmp_path, SOURCE)
    buffer = OutputBuffer(zone, landed)
    for item in added:
        buffer.add(event(*item))
    assert buffer.replayed == replayed
    assert buffer.count == len(kept)
    assert flush(buffer) == len(kept)
    tables = sorted({t for t, *_ in kept})
    assert zone.tables() == tables
    for table in tables:
        assert len(zone.segments(table)) == 1
        positions = [row["position"] for row in read_events(zone, table)]
        assert positions == [Position(*p).encode() for t, *p in kept if t == table]


def test_checks_stop_after_the_first_newer_event(tmp_path: Path) -> None:
    buffer = OutputBuffer(LandingZone(tmp_path, SOURCE), {A: Position(100, 5), B: Position(50, 0)})
    buffer.add(event(A, 100, 1))  # dropped
    buffer.add(event(A, 100, 6))  # newer than everything landed: checks stop here
    buffer.add(event(A, 100, 1))  # would be a replay, but is no longer checked
    buffer.add(event(B, 10))
    assert (buffer.replayed, buffer.count) == (1, 3)


def test_the_landed_mapping_is_copied(tmp_path: Path) -> None:
    landed = {A: Position(100, 0)}
    buffer = OutputBuffer(LandingZone(tmp_path, SOURCE), landed)
    landed[A] = Position(0, 0)
    buffer.add(event(A, 50))
    assert (buffer.replayed, buffer.count) == (1, 0)


def test_flush_commits_one_segment_per_table(tmp_path: Path) -> None:
    zone = LandingZone(tmp_path, SOURCE)
    buffer = OutputBuffer(zone, {})
    for item in [(A, 1), (B, 2), (A, 3), (C, 4), (A, 5), (B, 6)]:
        buffer.add(event(*item))
    assert buffer.count == 6
    assert flush(buffer) == 6
    assert (buffer.count, buffer.emitted) == (0, 6)
    segments = {table: zone.segments(table) for table in (A, B, C)}
    assert {t: [(s.seq, s.first, s.last) for s in segs] for t, segs in segments.items()} == {
        A: [(1, Position(1, 0), Position(5, 0))],
        B: [(1, Position(2, 0), Position(6, 0))],
        C: [(1, Position(4, 0), Position(4, 0))],
    }
    # Nothing buffered: nothing written.
    assert flush(buffer) == 0
    assert [len(zone.segments(t)) for t in (A, B, C)] == [1, 1, 1]
    assert buffer.emitted == 6

    buffer.add(event(B, 7))
    buffer.add(event(B, 8))
    assert flush(buffer) == 2
    assert buffer.emitted == 8
    assert [s.seq for s in zone.segments(B)] == [1, 2]
    assert [len(zone.segments(t)) for t in (A, C)] == [1, 1]
    assert [row["position"] for row in read_events(zone, B)] == [
        Position(p, 0).encode() for p in (2, 6, 7, 8)
    ]


def test_flush_advances_the_landed_positions(tmp_path: Path) -> None:
    zone = LandingZone(tmp_path, SOURCE)
    buffer = OutputBuffer(zone, {A: Position(100, 0), B: Position(300, 0)})
    buffer.add(event(A, 150))
    assert flush(buffer) == 1
    buffer.add(event(A, 150))  # the same event again (a replay): A has landed it now
    buffer.add(event(A, 120))
    assert (buffer.replayed, buffer.count) == (2, 0)
    buffer.add(event(A, 151))
    assert flush(buffer) == 1


def test_resume_from_what_the_landing_zone_recovers(tmp_path: Path) -> None:
    first = OutputBuffer(LandingZone(tmp_path, SOURCE), {})
    for item in [(A, 10), (B, 11), (A, 12)]:
        first.add(event(*item))
    assert flush(first) == 3

    zone = LandingZone(tmp_path, SOURCE)  # a restart
    landed = zone.recover()
    assert landed == {A: Position(12, 0), B: Position(11, 0)}
    buffer = OutputBuffer(zone, landed)
    for item in [(A, 10), (B, 11), (A, 12), (B, 13), (A, 14)]:  # the log replayed from 10
        buffer.add(event(*item))
    assert (buffer.replayed, buffer.count) == (3, 2)
    assert flush(buffer) == 2
    assert [row["position"] for row in read_events(zone, A)] == [
        Position(p, 0).encode() for p in (10, 12, 14)
    ]
    assert [row["position"] for row in read_events(zone, B)] == [
        Position(p, 0).encode() for p in (11, 13)
    ]


def pending(table: str, high: int, keys: list[int], survivors: list[int]) -> PendingRows:
    chunk: Future[Encoded] = Future()
    chunk.set_result((pa.array([f"[{k}]" for k in keys]),
                      pa.array([f'{{"id":{k}}}' for k in keys])))
    return PendingRows(table, chunk, survivors, len(survivors), Position(high, 0),
                       1_700_000_000_000_000, 1, "dump-1")


def test_pending_rows_keep_their_survivors_in_chunk_order(tmp_path: Path) -> None:
    zone = LandingZone(tmp_path, SOURCE)
    buffer = OutputBuffer(zone, {})
    buffer.add(event(A, 10))
    buffer.add_rows(pending(A, 20, [1, 2, 3, 4], [0, 2, 3]))  # a log event touched [2]
    buffer.add_rows(pending(A, 30, [5, 6], [0, 1]))
    buffer.add(event(A, 40))
    assert buffer.count == 7
    assert flush(buffer) == 7
    assert [(row["key"], row["position"]) for row in read_events(zone, A)] == [
        ("[10]", Position(10, 0).encode()),
        ("[1]", Position(20, 0).dump_row(0).encode()),
        ("[3]", Position(20, 0).dump_row(1).encode()),
        ("[4]", Position(20, 0).dump_row(2).encode()),
        ("[5]", Position(30, 0).dump_row(0).encode()),
        ("[6]", Position(30, 0).dump_row(1).encode()),
        ("[40]", Position(40, 0).encode()),
    ]


def test_a_chunk_that_failed_to_encode_fails_its_dump_not_the_write(tmp_path: Path) -> None:
    """The encoder's error is the dump's: the log events of the batch are written, the
    rows left out, and ``failed`` names the dump with the error (the dump fails, the log
    goes on)."""
    zone = LandingZone(tmp_path, SOURCE)
    buffer = OutputBuffer(zone, {})
    chunk: Future[Encoded] = Future()
    chunk.set_exception(ValueError("malformed bool 'x'"))
    buffer.add(event(A, 10))
    buffer.add_rows(PendingRows(A, chunk, [0], 1, Position(20, 0), 0, 1, "dump-1"))
    buffer.add(event(A, 30))
    buffer.submit()
    buffer.wait()
    assert list(buffer.failed) == ["dump-1"]
    assert "malformed bool 'x'" in buffer.failed["dump-1"]
    events = read_events(zone, A)
    assert [e["origin"] for e in events] == ["log", "log"]
    buffer.submit()
    buffer.wait()
    assert buffer.failed == {}


def test_a_landing_directory_that_came_back_ends_the_session_not_the_worker(
    tmp_path: Path,
) -> None:
    """The table's directory was away when the session recovered the landing zone (so
    nothing of it is a replay) and is back with output past the events to write: the
    write fails as the storage's failure does, so the session starts again and looks
    again, instead of the worker stopping on an error."""
    zone = LandingZone(tmp_path, SOURCE)
    zone.commit_segment(A, [event(A, 10)])
    buffer = OutputBuffer(LandingZone(tmp_path, SOURCE), {})  # recovered without A
    buffer.add(event(A, 10))
    buffer.add(event(A, 20))
    buffer.submit()
    with pytest.raises(OutputUnavailable, match="not after the last committed position"), \
            landing_errors():
        buffer.wait()
