"""Watermarks without a table on MariaDB (``watermarks = "position"``): binary log
positions of consistent snapshots.

``START TRANSACTION WITH CONSISTENT SNAPSHOT`` on MariaDB reports, in the session status
``binlog_snapshot_file`` / ``binlog_snapshot_position``, the binary log position that its
snapshot matches: it sees every transaction logged before that position and none after,
once the position is confirmed (:mod:`dblog_worker.mysql.visibility`: around a rotation
and while a group waits to become visible the server reports a later one). A chunk read in
such a transaction is the table's state at that position. A window's chunk SELECTs (one
per lane) each run in a snapshot of their own; the window's low watermark is the smallest
of their positions and its high watermark the largest, so each chunk is a state between
LW and HW, which is what the paper's rule needs. The watermarks are not written anywhere:
:class:`Marks` places them among the items read from the binary log, where the log passes
their positions.

Positions read around a plain SELECT (``SHOW MASTER STATUS`` before and after) would not
do: a transaction is written to the binary log before the engine commits it, so the log
can be past a transaction the SELECT does not see yet (docs/operations.md).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from dblog_worker.errors import ChunkStale, ProtocolError
from dblog_worker.events import EVERY_TABLE, LogItem, Unseen, Watermark
from dblog_worker.mysql.checkpoint import file_number
from dblog_worker.mysql.visibility import CONFIRM_S, Floor, LogFacts, key
from dblog_worker.position import Position

__all__ = ["LATER", "Check", "Marks", "Snapshot", "WindowSnapshots", "select_in_snapshot"]

log = logging.getLogger(__name__)

# REPEATABLE READ for the transaction: under READ COMMITTED each statement would take a
# read view of its own, later than the snapshot's position.
_BEGIN = ("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ",
          "START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY")
_POSITION = "SHOW SESSION STATUS LIKE 'binlog\\_snapshot\\_%'"
_RETAKE_S = (0.0005, 0.02)  # the pause before a snapshot is taken again: first, longest
_READER_WAIT_S = 0.02  # a reader that has not moved for this long is not waited for
Check = Callable[[], "str | None"]  # why a window's chunk may not be used, when placed
LATER = "confirmed later"  # WindowSnapshots.confirm: once the log reaches the snapshot


class Snapshot(NamedTuple):
    """Where a chunk SELECT's snapshot sits in the binary log, and when it was taken."""

    position: Position  # (file number, end of the last transaction it sees, 0)
    at_us: int
    retaken: int = 0  # snapshots rolled back before this one was confirmed
    # not confirmed yet (the reader had not received the log up to it): what it is
    # confirmed against once the log reaches it
    floor: Floor | None = None


def select_in_snapshot(cursor: Any, sql: str | None, params: Sequence[Any] = (),
                       window: WindowSnapshots | None = None
                       ) -> tuple[list[tuple[Any, ...]], Snapshot]:
    """Run one SELECT (or none) in a read-only consistent snapshot; its rows and the
    snapshot's binary log position. Inside a window, the position is checked first
    (:meth:`WindowSnapshots.confirm`): a snapshot that may not be used is rolled back and
    taken again, for :data:`~dblog_worker.mysql.visibility.CONFIRM_S` at most, then
    ChunkStale. A snapshot past what the binary log reader has received is used and
    confirmed later, when the log reaches the window's high watermark (its ``floor``).
    The transaction ends before this returns, whatever happens."""
    deadline = time.monotonic() + CONFIRM_S
    retaken = 0
    while True:
        floor = None if window is None else window.floor()
        for statement in _BEGIN:
            cursor.execute(statement)
        try:
            snapshot = _position(cursor, retaken)
            why = None if window is None or floor is None \
                else window.confirm(snapshot.position, floor, deadline)
            if why is None or why == LATER:
                rows: list[tuple[Any, ...]] = []
                if sql is not None:
                    cursor.execute(sql, params)
                    rows = list(cursor.fetchall())
                cursor.execute("COMMIT")
                return rows, snapshot._replace(floor=floor if why == LATER else None)
            cursor.execute("ROLLBACK")
        except BaseException:
            with contextlib.suppress(Exception):  # the connection may be gone already
                cursor.execute("ROLLBACK")
            raise
        retaken += 1
        log.debug("snapshot at %s not used (%s): taken again", snapshot.position, why)
        if time.monotonic() >= deadline:
            raise ChunkStale(
                f"the binary log position of the chunk's snapshot was not confirmed within "
                f"{CONFIRM_S * 1000:.0f} ms ({why}; a rotation or a commit in progress): the "
                "chunk is read again later")
        time.sleep(min(_RETAKE_S[0] * 2 ** retaken, _RETAKE_S[1]))


def _position(cursor: Any, retaken: int) -> Snapshot:
    cursor.execute(_POSITION)
    status = {str(name).lower(): str(value) for name, value in cursor.fetchall()}
    at_us = time.time_ns() // 1000
    try:
        return Snapshot(Position(file_number(status["binlog_snapshot_file"]),
                                 int(status["binlog_snapshot_position"])), at_us, retaken)
    except (KeyError, ValueError):
        raise ProtocolError(
            f"the server gave no binary log position for its snapshot ({status}): "
            'watermarks = "position" needs MariaDB with the binary log on; set '
            'watermarks = "table"') from None


class WindowSnapshots:
    """The snapshots of the open window's chunk SELECTs (several lanes' threads add to it),
    and what they are confirmed against: the reader's :class:`LogFacts`, and the last item
    the worker's loop took before the window (``after``)."""

    def __init__(self, facts: LogFacts | None = None) -> None:
        self._lock = threading.Lock()
        self._taken: list[Snapshot] = []
        self._rows = 0
        self.low_token: str | None = None
        self.facts = facts or LogFacts()
        self._after = Position(0, 0)

    def open(self, low_token: str, after: Position) -> None:
        """A window opens; the loop has taken every item of the log up to ``after``."""
        with self._lock:
            self._taken, self._rows = [], 0
            self.low_token = low_token
            self._after = after

    def floor(self) -> Floor | None:
        """Read before a snapshot starts (None outside a window: nothing to confirm)."""
        if self.low_token is None:
            return None
        return self.facts.floor(self._after)

    def confirm(self, position: Position, floor: Floor, deadline: float) -> str | None:
        """Why a snapshot that reports ``position`` may not be used (None: it may;
        :data:`LATER`: it may, confirmed once the log reaches it). Waits for the reader to
        receive the log up to it while the reader moves, until ``deadline``: the loop does
        not take the reader's items while the window's SELECTs run, so a reader that is
        behind stops once its queue is full, and past a queue's worth of the log it cannot
        reach the position then."""
        facts, at = self.facts, key(position)
        early = facts.too_early(at, floor)
        if early is not None:
            return early
        last, moved = facts.read_to(), time.monotonic()
        while (read_to := facts.read_to()) < at:
            now = time.monotonic()
            if read_to != last:
                last, moved = read_to, now
            if now >= deadline or now - moved >= _READER_WAIT_S:  # too far, or blocked
                return LATER
            time.sleep(0.001)
        return facts.confirm(position, floor)

    def check(self, deferred: Sequence[Snapshot]) -> str | None:
        """Why one of a closed window's deferred snapshots may not be used (None: each
        may); the log has been received up to every one of them."""
        for snapshot in deferred:
            assert snapshot.floor is not None
            why = self.facts.confirm(snapshot.position, snapshot.floor)
            if why is not None:
                return f"the snapshot at {snapshot.position}: {why}"
        return None

    def taken(self, snapshot: Snapshot, rows: int) -> None:
        with self._lock:
            if self.low_token is not None:  # a read outside a window needs no watermark
                self._taken.append(snapshot)
                self._rows += rows

    def close(self) -> tuple[str | None, list[Snapshot], int, Position]:
        """The window's low watermark token, its snapshots (in no order), how many rows
        they read, and where the loop was when it opened; then no window is open."""
        with self._lock:
            token, taken, rows = self.low_token, self._taken, self._rows
            self.low_token, self._taken, self._rows = None, [], 0
            return token, taken, rows, self._after


class Marks:
    """Watermarks to place among the binary log's items where the log passes their positions.

    The reader's thread runs ahead of the worker's loop, so by the time a window's
    positions are known its thread may have read past them; but the loop has not taken any
    item past them yet: it took nothing while the window's SELECTs ran, and a snapshot is
    used only at or after everything it took before (:meth:`WindowSnapshots.confirm`).
    A high watermark may carry a check of the window's snapshots that were confirmed
    later: run when it is placed (the log is received up to it by then); if one may not
    be used, an :class:`Unseen` of every table goes before it, and the window's chunk is
    read again. :meth:`place` runs in the loop, on the items it takes.
    """

    def __init__(self) -> None:
        self._pending: deque[tuple[Watermark, Check | None]] = deque()

    def __len__(self) -> int:
        return len(self._pending)

    def due(self, delivered: Position) -> bool:
        """Whether the first watermark goes out once what is queued is taken: the reader
        has handed over every item up to its place in the log."""
        return bool(self._pending) and _passed(delivered, self._pending[0][0].position)

    def add(self, watermark: Watermark, check: Check | None = None) -> None:
        if self._pending and watermark.position < self._pending[-1][0].position:
            raise ProtocolError(f"watermark {watermark.token} at {watermark.position} is "
                                f"before the one pending at {self._pending[-1][0].position}")
        self._pending.append((watermark, check))

    def place(self, out: list[LogItem], start: int, delivered: Position) -> None:
        """Insert the pending watermarks into ``out[start:]``, the items just taken: each
        before the first item past its position, or at the end once the reader has handed
        over every item up to its position (``delivered``: an idle log)."""
        index = start
        while self._pending:
            mark, check = self._pending[0]
            at = mark.position
            while index < len(out):
                position = getattr(out[index], "position", None)
                if position is not None and position > at:
                    break
                index += 1
            if index == len(out) and not _passed(delivered, at):
                return
            self._pending.popleft()
            why = None if check is None else check()
            if why is not None:
                log.info("window %s: %s; its chunk is read again", mark.token, why)
                out.insert(index, Unseen((), frozenset({EVERY_TABLE})))
                index += 1
            out.insert(index, mark)
            index += 1


def _passed(delivered: Position, mark: Position) -> bool:
    """Whether the log is handed over up to a watermark's place: the end of a transaction
    (its ``sub`` orders rows there, not the log)."""
    return (delivered.major, delivered.minor) >= (mark.major, mark.minor)
