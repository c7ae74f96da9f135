"""When the binary log position of a consistent snapshot can be trusted (MariaDB,
``watermarks = "position"``).

MariaDB reports, for ``START TRANSACTION WITH CONSISTENT SNAPSHOT``, the position it keeps
as "the last commit" (``binlog_snapshot_file`` / ``_position``). Group commit sets it to
the end of a group of transactions in the same critical section that makes them visible,
so a snapshot that reports the end of a transaction sees exactly the log up to there. But
the server also sets it outside that section, to the end of what it has just written,
while the last one or two groups written (the group that holds the log file, and the one
waiting for a semi-synchronous acknowledgement) may not be visible yet (``sql/log.cc``):

* opening a new binary log file (a rotation by size, ``FLUSH BINARY LOGS``): the new
  file's start, before the old file's last group is visible;
* writing a ``Binlog_checkpoint`` (or incident) event: the end of that event;
* a group that was written before such a rotation sets only the offset when it becomes
  visible: the new file's name with an offset of the old file.

A snapshot taken then claims a position past a group it did not see: its low watermark
would come after that group's events, whose keys the window then keeps in the chunk, and
a stale row lands after a newer change. And a binary log reader is sent a group before it
is visible (a rotation's fsync, semi-sync ``AFTER_SYNC`` widen the gap), so a snapshot
taken after the worker has read a group may report a position before it.

So a window's snapshot is used only if its position ``P`` is:

1. at or after everything the worker's loop has already taken from the log (``taken``:
   those events are out; a window cannot start before them), and
2. *confirmed*, with what the reader has received up to ``P`` (:class:`LogFacts`):

   * ``P`` is the end of a transaction: the server set it as a group became visible.
     Not the mixed form, whose offset is the end of one of the previous file's last two
     groups, or of its header: while that file is not known complete (no checkpoint
     names ``P``'s file), such an offset is not used (groups are told apart by the GTID
     events' commit id, which a group's transactions share).
   * or no transaction ends between a position every snapshot now sees and ``P``: then
     the snapshot sees everything before ``P``. Such a position is the end of a
     transaction reported by an earlier confirmed snapshot, or the start of file ``F``
     once a ``Binlog_checkpoint`` event names ``F`` (MariaDB writes one only after every
     transaction of the earlier files has committed in the engine, which makes it
     visible first; an idle log after a rotation is confirmed so).

Otherwise the snapshot is rolled back and taken again (no chunk was read yet), for a
short while (:data:`CONFIRM_S`); past it the window reads nothing and its chunk is read
again later: the log never waits longer than one window. A snapshot past what the reader
has received is confirmed when the log reaches the window's high watermark instead
(:class:`dblog_worker.mysql.snapshot.Marks`): the loop takes nothing from the reader while
the window's SELECTs run, so a reader far enough behind could not reach it then.

Positions are kept as one integer, ``file number << 32 | offset`` (an event's offset is
32 bits in the binary log). Memory is bounded: the last :data:`KEPT_ENDS` transaction ends.
"""

from __future__ import annotations

import threading
from array import array
from bisect import bisect_left, bisect_right
from dataclasses import dataclass

from dblog_worker.position import Position

__all__ = ["CONFIRM_S", "KEPT_ENDS", "Floor", "LogFacts", "key", "unconfirmed"]

CONFIRM_S = 0.2  # how long a window's lane retakes snapshots before its chunk waits
KEPT_ENDS = 1 << 16  # transaction ends kept: far more than any snapshot can be behind


def key(position: Position) -> int:
    """A position's (file, offset) as one integer; its ``sub`` does not count."""
    return position.major << 32 | position.minor


@dataclass(frozen=True, slots=True)
class Floor:
    """What a snapshot taken from now on sees at least: every transaction before ``seen``
    (a key), every file before ``named`` whole; everything the worker's loop took is
    before ``taken`` (a key)."""

    seen: int
    taken: int
    named: int = 0


class LogFacts:
    """What the binary log reader has received (its thread writes, the lanes read): the
    recent transaction ends, the header end of each recent file, the newest file a
    ``Binlog_checkpoint`` event named, and how far it has read."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ends = array("Q")  # transaction ends, in log order
        self._known_from = 0  # every transaction end at or after this key is in _ends
        self._files: dict[int, _File] = {}  # the recent files' headers and first groups
        self._named = 0  # newest file named by a Binlog_checkpoint event
        self._read_to = 0  # key of the end of the last event (or heartbeat) received
        self._confirmed = 0  # the end of a transaction an earlier snapshot confirmed

    # -- the reader's thread ----------------------------------------------------

    def started(self, at: Position) -> None:
        """The reader starts at ``at``, the end of a transaction."""
        with self._lock:
            self._ends = array("Q", [key(at)])
            self._known_from = key(at)
            self._read_to = max(self._read_to, key(at))

    def transaction_end(self, file: int, offset: int) -> None:
        end = file << 32 | offset
        with self._lock:
            known = self._files.get(file)
            if known is not None:
                known.end = offset
            ends = self._ends
            if not ends or end > ends[-1]:
                ends.append(end)
            if len(ends) > 2 * KEPT_ENDS:
                del ends[:KEPT_ENDS]
                self._known_from = ends[0]
            if end > self._read_to:
                self._read_to = end

    def group_starts(self, file: int, offset: int, commit_id: int) -> None:
        """A transaction's first event starts at ``offset``; ``commit_id`` is its group's
        (0: a group of its own)."""
        with self._lock:
            known = self._files.get(file)
            if known is None:
                known = self._files[file] = _File(offset)
                for old in [f for f in self._files if f < file - 2]:
                    del self._files[old]
            if commit_id == 0 or commit_id != known.group:
                known.group_ends = (known.group_ends[1], known.end)  # the last group ended
                known.group = commit_id

    def checkpoint(self, named: int) -> None:
        """A ``Binlog_checkpoint`` event names file ``named``: every transaction of the
        files before it has committed in the engine."""
        if named > self._named:
            with self._lock:
                self._named = max(self._named, named)

    def read(self, file: int, offset: int) -> None:
        """Every event up to ``offset`` of ``file`` is received."""
        at = file << 32 | offset
        if at > self._read_to:
            with self._lock:
                self._read_to = max(self._read_to, at)

    # -- a lane's thread --------------------------------------------------------

    def floor(self, taken: Position) -> Floor:
        """Read before a snapshot starts: what it will see at least."""
        with self._lock:
            return Floor(max(self._confirmed, self._named << 32), key(taken), self._named)

    def read_to(self) -> int:
        return self._read_to

    def too_early(self, at: int, floor: Floor) -> str | None:
        """Why a snapshot reporting key ``at`` may not be used whatever the log holds up
        to it (None: that depends on the log)."""
        return _too_early(at, floor)

    def confirm(self, position: Position, floor: Floor) -> str | None:
        """None if a snapshot taken after ``floor`` was read, reporting ``position``, sees
        exactly the log up to it; else why it may not. The reader must have received the
        log up to ``position`` (:meth:`read_to`)."""
        at = key(position)
        with self._lock:
            reason = unconfirmed(at, floor, self._ends, self._known_from, self._files)
            if reason is None and at > self._confirmed and _is_end(self._ends, at):
                self._confirmed = at
            return reason


class _File:
    """A binary log file as the reader received it: where its header ends (its first
    group starts), the group being read (commit id), its last transaction end so far, and
    the ends of the two groups before."""

    __slots__ = ("end", "group", "group_ends", "header")

    def __init__(self, header: int) -> None:
        self.header = header
        self.group = -1
        self.end = 0
        self.group_ends = (0, 0)

    def last_groups(self) -> tuple[int, int]:
        """The ends of the file's last two groups, once it is rotated."""
        return self.group_ends[1], self.end


def _is_end(ends: array[int], at: int) -> bool:
    index = bisect_left(ends, at)
    return index < len(ends) and ends[index] == at


def _too_early(at: int, floor: Floor) -> str | None:
    if at < floor.taken:
        return "the worker has already read past it"
    if at < floor.seen:
        return "before a position the snapshots have already reached"
    return None


def unconfirmed(at: int, floor: Floor, ends: array[int], known_from: int,
                files: dict[int, _File]) -> str | None:
    """The rule of the module docstring, on keys: None if a snapshot reporting ``at``
    sees exactly the log up to it, else why not. ``ends`` are the transaction ends
    received, complete from ``known_from`` on; ``files`` the recent files' headers and
    groups."""
    early = _too_early(at, floor)
    if early is not None:
        return early
    file, offset = at >> 32, at & 0xFFFF_FFFF
    if _is_end(ends, at):
        previous = files.get(file - 1)
        if floor.named < file and (previous is None or offset == previous.header
                                   or offset in previous.last_groups()):
            return "an offset the previous file's last groups, not known visible, may have set"
        return None
    if floor.seen < known_from:
        return "not the end of a transaction"
    if bisect_right(ends, at) > bisect_right(ends, floor.seen):
        return "not the end of a transaction, and a transaction before it may not be visible"
    return None
