"""Watermarks placed by position (``watermarks = "position"``): where :class:`Marks` puts
a window's watermarks among the items the binary log reader hands over."""

from __future__ import annotations

import pytest

from dblog_worker.errors import ProtocolError
from dblog_worker.events import Checkpoint, LogItem, Watermark
from dblog_worker.mysql.snapshot import Marks, Snapshot, WindowSnapshots
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
