"""When a consistent snapshot's binary log position is used as a window's watermark
(``watermarks = "position"``, :mod:`dblog_worker.mysql.visibility`): table-driven cases of
the positions MariaDB reports around rotations, binlog checkpoints and groups not yet
visible, and of a reader ahead of the snapshots."""

from __future__ import annotations

import pytest

from dblog_worker.mysql.visibility import KEPT_ENDS, Floor, LogFacts, key
from dblog_worker.position import Position

HEADER = 344  # where a file's first group starts
START = Position(1, 4000)  # where the reader starts: the end of file 1's last transaction


def at(file: int, offset: int, sub: int = 0) -> Position:
    return Position(file, offset, sub)


def facts(*groups: list[tuple[int, int]], named: int = 1) -> LogFacts:
    """A reader that started at the end of file 1 (named by a checkpoint: complete) and
    received the groups ``groups`` (each a list of transaction ends; group commit ids 7,
    8, ...; a file's first group starts at HEADER) and up to the last of them."""
    log = LogFacts()
    log.started(START)
    log.checkpoint(named)
    for commit_id, group in enumerate(groups, start=7):
        for file, offset in group:
            log.group_starts(file, HEADER if offset < 500 else offset - 50, commit_id)
            log.transaction_end(file, offset)
    return log


def floor(log: LogFacts, taken: Position = START) -> Floor:
    return log.floor(taken)


ROTATED = ([(2, 400)], [(2, 500), (2, 600)], [(2, 700)])  # file 2: three groups, then 3


@pytest.mark.parametrize(("groups", "named", "taken", "reported", "used"), [
    # the end of a transaction: a group made visible there
    (ROTATED, 2, START, at(2, 600), True),
    (ROTATED, 2, START, at(2, 500), True),
    # before what the loop has already taken (the reader got a group before it was visible)
    (ROTATED, 2, at(2, 600, 4), at(2, 500), False),
    # inside a transaction the loop has taken part of: only the end of it will do
    (ROTATED, 2, at(2, 550, 2), at(2, 500), False),
    (ROTATED, 2, at(2, 550, 2), at(2, 600), True),
    # a new file's start while the old file's last group may not be visible (rotation)
    (ROTATED, 2, START, at(3, HEADER), False),
    # ... and once a binlog checkpoint named the new file: every group before it committed
    (ROTATED, 3, START, at(3, HEADER), True),
    # the end of a checkpoint event written mid-file, after a group that may wait
    ((*ROTATED, [(3, 500)]), 3, START, at(3, 560), False),
    # the mixed form: the new file's name, the offset of one of the old file's last groups
    ((*ROTATED, [(3, 600)]), 2, START, at(3, 600), False),
    ((*ROTATED, [(3, 700)]), 2, START, at(3, 700), False),
    ((*ROTATED, [(3, 700)]), 3, START, at(3, 700), True),
    # ... not an earlier group's: the mixed form is set by the last two groups only
    ((*ROTATED, [(3, 400)]), 2, START, at(3, 400), True),
    ((*ROTATED, [(3, 800)]), 2, START, at(3, 800), True),
    # ... nor the header end of a file that held one group
    (([(2, 400)], [(3, 400)], [(4, HEADER)]), 2, START, at(4, HEADER), False),
])
def test_which_positions_are_used(groups: tuple[list[tuple[int, int]], ...], named: int,
                                  taken: Position, reported: Position, used: bool) -> None:
    log = facts(*groups, named=named)
    log.read(reported.major, reported.minor)
    assert (log.confirm(reported, floor(log, taken)) is None) is used


def test_an_idle_log_after_a_confirmed_snapshot_needs_no_checkpoint() -> None:
    """FLUSH BINARY LOGS on an idle log: the new file's start is used once a snapshot
    confirmed the last transaction before it (nothing lies between)."""
    log = facts(*ROTATED, named=2)
    assert log.confirm(at(2, 700), floor(log)) is None
    log.read(3, HEADER)
    assert log.confirm(at(3, HEADER), floor(log)) is None
    log.group_starts(3, HEADER, 0)
    log.transaction_end(3, 500)  # a transaction of the new file, not yet confirmed
    log.read(3, 560)
    assert log.confirm(at(3, 560), floor(log)) is not None  # a checkpoint event's end


def test_a_position_before_one_already_confirmed_is_not_used() -> None:
    log = facts(*ROTATED, named=2)
    assert log.confirm(at(2, 600), floor(log)) is None
    assert log.confirm(at(2, 500), floor(log)) is not None


def test_a_checkpoint_received_after_the_snapshot_started_does_not_count() -> None:
    log = facts(*ROTATED, named=2)
    before = floor(log)
    log.checkpoint(3)
    log.read(3, HEADER)
    assert log.confirm(at(3, HEADER), before) is not None
    assert log.confirm(at(3, HEADER), floor(log)) is None


def test_a_file_the_reader_never_saw_the_start_of_needs_its_checkpoint() -> None:
    """The reader started inside file 1: the end of a transaction in file 1 is used only
    once file 1 is known complete before it (a checkpoint names it)."""
    log = facts([(1, 4100)], [(1, 4200)], named=0)
    assert log.confirm(at(1, 4200), floor(log)) is not None
    log.checkpoint(1)
    assert log.confirm(at(1, 4200), floor(log)) is None


def test_ends_older_than_those_kept_are_not_assumed_absent() -> None:
    log = facts(named=2)
    for offset in range(1, 2 * KEPT_ENDS + 2):
        log.group_starts(2, 1000 + offset, 0)
        log.transaction_end(2, 1000 + offset)
    assert log.confirm(at(2, 1000 + 2 * KEPT_ENDS + 1), floor(log)) is None
    stale = Floor(seen=key(at(2, 1001)), taken=key(at(2, 1001)), named=2)
    log.read(2, 10**6)
    assert log.confirm(at(2, 10**6), stale) is not None
