"""When a transaction logged before the low watermark is not yet visible to the chunk SELECT.

PostgreSQL writes a transaction's commit record to the WAL (and, behind a synchronous
standby, waits for its acknowledgement) *before* the transaction becomes visible to other
snapshots. So a transaction T can lie in the log before the low watermark (LW) while the
chunk SELECT that follows LW still reads the row T changed as it was before. T's change
is emitted from the log before LW; the stale chunk row would be emitted at the high
watermark, after it: time travel. The paper's rule assumes log order is visibility order.

The window is therefore defined by the snapshot as well as by log order: a transaction
whose commit precedes LW in the log but which LW's own snapshot did not see counts as a
change *inside* the window. The snapshot is the LW write's (``INSERT ... RETURNING
pg_current_snapshot()``): it is taken before the chunk SELECT's, so whatever the SELECT
did not see, the LW write did not see either (or the transaction began after it).

:class:`RecentCommits` keeps the changes of the transactions read from the log that some
snapshot may not see yet -- their tables and keys, strings, which the garbage collector
does not walk -- and forgets a transaction once a snapshot sees it. Memory is
bounded: at most ``limit`` changes are kept; beyond that a transaction is remembered by
its xid and tables only, and a window it touches is read again (its chunk discarded).
The checkpoint never passes a transaction still kept (:meth:`RecentCommits.oldest`): a
new session reads it again from the log, so it knows its changes too.

Pure: no I/O, no clock. Transaction ids are the 32-bit xids of pgoutput's Begin message,
compared modulo 2**32 like PostgreSQL does.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from dblog_worker.events import Unseen

_XID_MASK = 0xFFFF_FFFF


def _precedes(a: int, b: int) -> bool:
    """xid ``a`` was assigned before ``b`` (modulo 2**32, as TransactionIdPrecedes)."""
    return ((a - b) & _XID_MASK) >= 0x8000_0000


@dataclass(frozen=True, slots=True)
class Snapshot:
    """A PostgreSQL snapshot: which transactions it sees as committed or not."""

    xmin: int
    xmax: int
    xip: frozenset[int]  # in progress when it was taken

    @classmethod
    def parse(cls, text: str) -> Snapshot:
        """``pg_current_snapshot()::text``: ``xmin:xmax:xip,xip,...`` (64-bit xids)."""
        try:
            xmin, xmax, xip = text.split(":")
            return cls(int(xmin) & _XID_MASK, int(xmax) & _XID_MASK,
                       frozenset(int(x) & _XID_MASK for x in xip.split(",") if x))
        except ValueError:
            raise ValueError(f"not a snapshot: {text!r}") from None

    def sees(self, xid: int) -> bool:
        """Whether a committed transaction ``xid`` is visible to this snapshot."""
        return _precedes(xid, self.xmax) and xid not in self.xip


@dataclass(slots=True)
class _Commit:
    lsn: int  # where its commit record starts: a stream started there sends it again
    tables: Sequence[str]  # of each change kept; or, when keys is None, every table
    keys: Sequence[str | None] | None  # of each change (None: a truncate); None: too many


class RecentCommits:
    """The changes of recently committed transactions, until a snapshot sees them."""

    def __init__(self, limit: int = 10_000) -> None:
        self.limit = limit
        self._commits: OrderedDict[int, _Commit] = OrderedDict()  # in log order
        self._kept = 0  # changes kept, over all transactions

    def __len__(self) -> int:
        return len(self._commits)

    @property
    def kept(self) -> int:
        return self._kept

    @property
    def over_limit(self) -> bool:
        return self._kept > self.limit

    def committed(self, xid: int, lsn: int, tables: Sequence[str],
                  keys: Sequence[str | None], more: Iterable[str] = ()) -> None:
        """Transaction ``xid``, whose commit record is at ``lsn``, committed with changes of
        captured tables: the table and key of each (and, if ``more`` names tables, more
        changes of those than were kept)."""
        if more or len(keys) > self.limit:
            self._commits[xid] = _Commit(lsn, tuple({*tables, *more}), None)
            return
        self._commits[xid] = _Commit(lsn, tables, keys)
        self._kept += len(keys)

    def oldest(self) -> int | None:
        """Where the oldest kept transaction's commit record starts (they are kept in log
        order): the log must be read again from there, if it is read again."""
        for commit in self._commits.values():
            return commit.lsn
        return None

    def unseen(self, snapshot: Snapshot) -> Unseen | None:
        """The kept changes of the transactions ``snapshot`` did not see, in log order."""
        changes: list[tuple[str, str | None]] = []
        overflow: set[str] = set()
        for xid, commit in self._commits.items():
            if snapshot.sees(xid):
                continue
            if commit.keys is None:
                overflow.update(commit.tables)
            else:
                changes.extend(zip(commit.tables, commit.keys, strict=True))
        if not changes and not overflow:
            return None
        return Unseen(tuple(changes), frozenset(overflow))

    def forget(self, snapshots: Sequence[Snapshot]) -> None:
        """Forget the transactions every one of ``snapshots`` sees (no later one can miss
        them), then keep at most ``limit`` changes: the largest are dropped, their
        transactions kept by xid and tables.

        The oldest go first, and usually all of them: the rest is looked through only
        when an older transaction, still unseen, keeps more than ``limit`` changes."""
        if not snapshots:
            return
        commits = self._commits
        while commits:
            xid = next(iter(commits))
            if not all(s.sees(xid) for s in snapshots):
                break
            self._drop(xid)
        if self._kept <= self.limit:
            return
        for xid in [x for x in commits if all(s.sees(x) for s in snapshots)]:
            self._drop(xid)
        if self._kept > self.limit:
            largest = sorted((c for c in commits.values() if c.keys),
                             key=lambda c: len(c.keys or ()), reverse=True)
            for commit in largest:
                assert commit.keys is not None
                self._kept -= len(commit.keys)
                commit.tables, commit.keys = tuple(set(commit.tables)), None
                if self._kept <= self.limit:
                    break

    def _drop(self, xid: int) -> None:
        commit = self._commits.pop(xid)
        if commit.keys is not None:
            self._kept -= len(commit.keys)
