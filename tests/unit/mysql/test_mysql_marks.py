"""Watermarks placed by position (``watermarks = "position"``): where :class:`Marks` puts
a window's watermarks among the items the binary log reader hands over."""

from __future__ import annotations

import time

import pytest

from dblog_worker.errors import ProtocolError
from dblog_worker.events import EVERY_TABLE, Checkpoint, LogItem, Unseen, Watermark
from dblog_worker.mysql.snapshot import LATER, Marks, Snapshot, WindowSnapshots
from dblog_worker.position import Position


def at(minor: int, sub: int = 0) -> Position:
    return Position(1, minor, sub)


def checkpoint(minor: int) -> Checkpoint:
    return Checkpoint(at(minor), f"resume {minor}")


def tokens(items: list[LogItem]) -> list[str]:
    return [item.token if isinstance(item, Watermark) else str(item.position.minor)
            for item in items if isinstance(item, (Watermark, Checkpoint))]


def test_a_mark_goes_after_its_position_and_before_the_first_item_past_it() -> None:
    marks = Marks()
    marks.add(Watermark("r.1.lw", at(200), 0))
    marks.add(Watermark("r.1.hw", at(300), 0))
    out: list[LogItem] = [checkpoint(100), checkpoint(200), checkpoint(250), checkpoint(300),
                          checkpoint(400)]
    marks.place(out, 0, at(0))
    assert tokens(out) == ["100", "200", "r.1.lw", "250", "300", "r.1.hw", "400"]
    assert not marks


def test_equal_positions_keep_low_before_high() -> None:
    marks = Marks()
    marks.add(Watermark("r.1.lw", at(200), 0))
    marks.add(Watermark("r.1.hw", at(200), 0))
    out: list[LogItem] = [checkpoint(200), checkpoint(201)]
    marks.place(out, 0, at(0))
    assert tokens(out) == ["200", "r.1.lw", "r.1.hw", "201"]


def test_a_mark_waits_until_the_reader_has_handed_over_its_position() -> None:
    marks = Marks()
    marks.add(Watermark("r.1.lw", at(200), 0))
    out: list[LogItem] = [checkpoint(100)]
    marks.place(out, 0, at(150))  # the reader has not read up to 200 yet
    assert tokens(out) == ["100"] and not marks.due(at(150)) and marks.due(at(200))
    out = []
    marks.place(out, 0, at(200))  # an idle log: everything up to 200 handed over
    assert tokens(out) == ["r.1.lw"] and not marks


def test_a_mark_with_a_sub_is_placed_at_the_end_of_its_transaction() -> None:
    marks = Marks()
    marks.add(Watermark("r.1.lw", at(200, 1_795_000_000_000_000), 0))
    out: list[LogItem] = [checkpoint(200)]
    marks.place(out, 0, at(200))  # idle: the transaction ending at 200 is handed over
    assert tokens(out) == ["200", "r.1.lw"]
    marks.add(Watermark("r.2.lw", at(300, 5), 0))
    out = [checkpoint(300), checkpoint(301)]
    marks.place(out, 0, at(0))
    assert tokens(out) == ["300", "r.2.lw", "301"]


def test_only_the_items_just_taken_are_searched() -> None:
    marks = Marks()
    marks.add(Watermark("r.1.lw", at(200), 0))
    out: list[LogItem] = [checkpoint(500), checkpoint(210)]  # the first was taken earlier
    marks.place(out, 1, at(0))
    assert tokens(out) == ["500", "r.1.lw", "210"]


def test_items_without_a_position_do_not_place_a_mark() -> None:
    marks = Marks()
    marks.add(Watermark("r.1.lw", at(200), 0))
    out: list[LogItem] = [checkpoint(100)]
    marks.place(out, 0, at(100))
    assert len(marks) == 1


def test_a_mark_before_a_pending_one_is_a_protocol_error() -> None:
    marks = Marks()
    marks.add(Watermark("r.1.hw", at(300), 0))
    with pytest.raises(ProtocolError, match="before the one pending"):
        marks.add(Watermark("r.2.lw", at(299), 0))


def test_window_snapshots_keep_what_was_read_inside_a_window_only() -> None:
    snapshots = WindowSnapshots()
    snapshots.taken(Snapshot(at(10), 1), 5)  # no window: no watermark needed
    snapshots.open("r.1.lw", at(5))
    snapshots.taken(Snapshot(at(30), 2), 20)
    snapshots.taken(Snapshot(at(20), 3), 7)
    low, taken, rows, after = snapshots.close()
    assert low == "r.1.lw" and min(taken).position == at(20) and max(taken).position == at(30)
    assert rows == 27 and after == at(5)
    assert snapshots.close()[:3] == (None, [], 0)


def test_a_high_mark_whose_check_fails_is_preceded_by_an_unseen_of_every_table() -> None:
    """A window's snapshot confirmed later (the reader was behind): checked when its high
    watermark is placed; one that may not be used discards the window's chunk."""
    reasons: list[str | None] = ["a rotation's offset", None]
    marks = Marks()
    marks.add(Watermark("r.1.lw", at(200), 0))
    marks.add(Watermark("r.1.hw", at(300), 0), lambda: reasons[0])
    marks.add(Watermark("r.2.lw", at(400), 0))
    marks.add(Watermark("r.2.hw", at(500), 0), lambda: reasons[1])
    out: list[LogItem] = [checkpoint(250)]
    marks.place(out, 0, at(250))
    assert tokens(out) == ["r.1.lw", "250"] and len(marks) == 3  # HW not reached: no check
    out = [checkpoint(350), checkpoint(600)]
    marks.place(out, 0, at(0))
    assert [type(item).__name__ for item in out] == [
        "Unseen", "Watermark", "Checkpoint", "Watermark", "Watermark", "Checkpoint"]
    unseen = out[0]
    assert isinstance(unseen, Unseen) and unseen.overflow == frozenset({EVERY_TABLE})
    assert tokens(out) == ["r.1.hw", "350", "r.2.lw", "r.2.hw", "600"]


def test_a_snapshot_past_what_the_reader_received_is_confirmed_later() -> None:
    """The loop takes nothing from the reader while a window's SELECTs run: a snapshot
    the reader has not reached is used, and checked once the log reaches it."""
    snapshots = WindowSnapshots()
    snapshots.facts.started(at(100))
    snapshots.facts.checkpoint(1)  # file 1 is the first: nothing before it to be visible
    snapshots.open("r.1.lw", at(100))
    floor = snapshots.floor()
    assert floor is not None
    deadline = time.monotonic() + 1
    assert snapshots.confirm(at(300), floor, deadline) == LATER
    assert snapshots.confirm(at(50), floor, deadline) == "the worker has already read past it"
    deferred = [Snapshot(at(300), 1, floor=floor)]
    snapshots.facts.transaction_end(1, 200)
    snapshots.facts.transaction_end(1, 300)
    assert snapshots.check(deferred) is None  # the end of a transaction, no rotation
    snapshots.facts.transaction_end(1, 400)
    assert "not the end of a transaction" in str(
        snapshots.check([Snapshot(at(350), 1, floor=floor)]))
