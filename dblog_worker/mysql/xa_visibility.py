"""When an XA transaction's commit is in the binary log before its rows are visible.

``XA COMMIT`` of a prepared transaction (from another connection, or of one recovered
after a restart; MariaDB takes the same path for a connection's own) writes its commit to
the binary log through group commit, and only then commits it in InnoDB, outside the
section that orders commits with snapshots (``sql/xa.cc``: ``ha_commit_or_rollback_by_xid``
logs it, then runs the engines' ``commit_by_xid``). So a chunk SELECT can start after the
commit is logged -- before the low watermark, in both watermark modes -- and still read
the rows as they were before it: the commit's events go out before the window and the
stale chunk row after them (time travel).

The window is therefore defined by visibility as well as by log order, as on PostgreSQL
(:mod:`dblog_worker.pg.visibility`): the changes of an XA commit that no chunk SELECT is
known to see count as inside every window until one is. One is known to when the
transaction is no longer listed by ``XA RECOVER``: the server forgets a prepared XA
transaction only after its engines committed it (``xid_cache_delete`` after
``ha_commit_or_rollback_by_xid``), so a SELECT that starts later sees it. The worker runs
``XA RECOVER`` before a window's SELECT while it keeps such commits (and once a second
without windows): nothing is written, and a role that may read the binary log may run it.

:class:`XaCommits` keeps those commits (the reader's thread adds, the loop reads): their
tables and keys, at most ``limit`` changes in all; a commit past that is kept by its tables
only, and a window of one of them is read again (its chunk discarded), as on PostgreSQL. A
restart must know them too: while any is kept, the checkpoint resumes before the oldest
one's prepared group (:meth:`XaCommits.resume`), so a new session reads it again.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass

from dblog_worker.events import Unseen
from dblog_worker.mysql.checkpoint import BinlogCheckpoint, Xid
from dblog_worker.position import Position

__all__ = ["LIMIT", "XaCommits", "XaCommitted", "xids_listed"]

LIMIT = 10_000  # changes of XA commits kept, in all


@dataclass(frozen=True, slots=True)
class XaCommitted:
    """An XA transaction's commit, read from the log: its changes of captured tables
    ((table, key) each; ``overflow``: tables with changes not kept), where it sits, and
    where a restart must read from to see it again (before its prepared group)."""

    xid: Xid
    position: Position
    resume: BinlogCheckpoint
    changes: tuple[tuple[str, str | None], ...]
    overflow: frozenset[str] = frozenset()


class XaCommits:
    """The XA commits read from the log that a chunk SELECT may not see yet."""

    def __init__(self, limit: int = LIMIT) -> None:
        self._lock = threading.Lock()
        self._limit = limit
        self._kept: list[XaCommitted] = []  # in log order
        self._changes = 0

    def __len__(self) -> int:
        return len(self._kept)

    def add(self, commit: XaCommitted) -> None:
        """The reader read ``commit`` (its thread)."""
        with self._lock:
            if self._changes + len(commit.changes) > self._limit:
                tables = {table for table, _ in commit.changes}
                commit = XaCommitted(commit.xid, commit.position, commit.resume, (),
                                     commit.overflow | tables)
            self._kept.append(commit)
            self._changes += len(commit.changes)

    def confirm(self, listed: Iterable[Xid]) -> None:
        """``listed`` is what ``XA RECOVER`` returned: every kept commit not among it is
        visible to a SELECT that starts from now on, and is forgotten."""
        prepared = set(listed)
        with self._lock:
            self._kept = [c for c in self._kept if c.xid in prepared]
            self._changes = sum(len(c.changes) for c in self._kept)

    def unseen(self, before: Position) -> Unseen | None:
        """The changes of the kept commits logged before ``before`` (a low watermark):
        inside its window; None if there are none."""
        with self._lock:
            earlier = [c for c in self._kept if c.position < before]
        if not earlier:
            return None
        return Unseen(tuple(change for c in earlier for change in c.changes),
                      frozenset().union(*(c.overflow for c in earlier)))

    def resume(self) -> BinlogCheckpoint | None:
        """Where a restart must begin so that it reads every kept commit again."""
        with self._lock:
            return min((c.resume for c in self._kept),
                       key=lambda r: r.position, default=None)


def xids_listed(rows: Iterable[tuple[object, ...]]) -> list[Xid]:
    """The xids of ``XA RECOVER``'s rows: (formatID, gtrid_length, bqual_length, data)."""
    xids = []
    for format_id, gtrid_length, bqual_length, data in rows:
        raw = data if isinstance(data, bytes) else str(data).encode("utf-8", "surrogateescape")
        gtrid, bqual = int(str(gtrid_length)), int(str(bqual_length))
        xids.append((int(str(format_id)), raw[:gtrid], raw[gtrid:gtrid + bqual]))
    return xids
