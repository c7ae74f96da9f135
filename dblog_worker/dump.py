"""The running dump: which chunk comes next, and what a closed window changes.

A dump walks its tables in order; its kind's planner (:mod:`dblog_worker.chunks`)
says how a table's dump starts and which chunk comes next. Progress changes only when a
window closes, and is saved to Redis only after the window's rows are durable
(``take_unsaved``).

A window can end *to be read again* (its chunk was stale, or the log held more unseen
changes than the worker keeps): its progress is not taken, reading goes back to the
last completed key, and a later window of the same table already open (read ahead of
it) emits its rows but does not move the progress either.
"""

from __future__ import annotations

import dataclasses
import math
from collections import deque
from dataclasses import dataclass

from dblog_worker.chunks import (
    PLANNERS,
    ChunkPlan,
    ChunkRead,
    Cursor,
    KeyFetch,
    Planner,
)
from dblog_worker.requests import DumpRequest, KeyTexts, RequestState, TableProgress
from dblog_worker.source import ChunkReader
from dblog_worker.throttle import Throttle
from dblog_worker.window import WindowClosed

# After a chunk to be read again (stale, its table locked, its window discarded), the next
# window waits RETRY_S, doubling while it keeps happening, up to RETRY_MAX_S: a table locked
# for minutes by a DDL costs the log a short lock wait now and then, not its pace.
RETRY_S = 0.2
RETRY_MAX_S = 5.0


@dataclass(frozen=True, slots=True)
class WindowRead:
    """What the open window read; applied to progress when it closes."""

    plan: ChunkPlan
    chunk: ChunkRead
    failure: str | None = None
    stale: bool = False  # the source said the chunk cannot be used: read it again
    superseded: bool = False  # read ahead of a window read again: progress not taken


def _no_keys(start: int, count: int) -> list[KeyTexts]:
    raise AssertionError("this dump kind reads no key list")


class ActiveDump:
    def __init__(self, request: DumpRequest, progress: dict[str, TableProgress]) -> None:
        self.request = request
        self.planner: Planner = PLANNERS[request.kind]
        self.progress = {t: progress.get(t) or TableProgress(t) for t in request.tables}
        self.closed_at = -math.inf  # when the last window closed
        self.retry_at = 0.0  # a chunk to read again waits until then
        self.throttle = Throttle()  # the delay it adds, decided by the session
        self.unpaced = False  # a window closed since the throttle last decided
        self.chunk_ms: float | None = None  # the last window's chunk SELECT wall time
        self.open_reads: deque[WindowRead] = deque()  # windows open, oldest first
        self.failure: str | None = None
        self._unsaved: set[str] = set(request.tables)
        self._missing: list[KeyTexts] = []
        # Where reading goes on while windows are open: it runs ahead of progress, which
        # changes only when a window closes.
        self._cursors: dict[str, Cursor] = {}
        self._read_all: set[str] = set()
        self.reread = 0  # windows read again
        self._again = 0  # chunks read again in a row
        # why the last window read nothing (a read replica behind, a table locked, ...);
        # None once a window reads
        self.waiting: str | None = None
        # why it runs no window although running: more urgent requests hold every slot
        # ([worker] max_active_dumps); None while it has one
        self.parked: str | None = None

    @property
    def id(self) -> str:
        return self.request.id

    @property
    def next_window_at(self) -> float:
        """The request's delay and the throttle's after the last window closed (both as they
        are now: a knob set at runtime counts at once), or a retry's pause."""
        pause_ms = self.request.delay_ms + self.throttle.delay_ms
        return max(self.closed_at + pause_ms / 1000, self.retry_at)

    @property
    def runnable(self) -> bool:
        return (self.request.state is RequestState.RUNNING and self.failure is None
                and self.parked is None)

    @property
    def paced(self) -> bool:
        """A delay between its windows (its own, or its throttle's): one open at a time."""
        return bool(self.request.delay_ms or self.throttle.delay_ms)

    @property
    def why_waiting(self) -> str | None:
        """What keeps it from reading, as the status shows it: no slot, or its last window
        read nothing."""
        return self.parked or self.waiting

    @property
    def finished(self) -> bool:
        return all(p.done for p in self.progress.values())

    @property
    def ending(self) -> bool:
        """Every window closed and nothing more to read: the next write can end the dump."""
        return not self.open_reads and (self.finished or self.failure is not None)

    def current_table(self) -> TableProgress | None:
        """The first table with chunks left to read (its last windows may still be open)."""
        return next(
            (p for p in self.progress.values() if not p.done and p.table not in self._read_all),
            None,
        )

    def start(self, source: ChunkReader) -> bool:
        """Start the current table's dump if it needs to (a table dump reads its upper
        bound); whether it did, so that its first window comes next time."""
        table = self.current_table()
        started = None if table is None else self.planner.start(table, source, self.request)
        if started is None:
            return False
        self._set(started)
        return True

    def plan(self, keys: KeyFetch = _no_keys) -> ChunkPlan | None:
        """The next chunk to read, or None when the current table needs to start."""
        table = self.current_table()
        if table is None:
            return None
        return self.planner.next(table, self._cursors.get(table.table), self.request, keys)

    def window_opened(self, read: WindowRead) -> None:
        """A window was opened with this read: the next chunk starts after it."""
        self.open_reads.append(read)
        if read.failure is not None:
            self.failure = read.failure  # no more windows; the request fails once this closes
            return
        cursor, all_read = self.planner.opened(read.plan, read.chunk, self.request)
        if cursor is not None:
            self._cursors[read.plan.table] = cursor
        if all_read:
            self._read_all.add(read.plan.table)

    def window_closed(self, closed: WindowClosed, now: float) -> TableProgress | None:
        """Take a closed window's read into the progress; the table's progress if this
        window read the rest of a table of a pruning dump (its prune event comes next)."""
        if not self.open_reads or closed.dump_id != self.id:
            return None
        read = self.open_reads.popleft()
        table = self.progress[read.plan.table]
        self.closed_at = now
        self.unpaced = True
        if read.stale or closed.retry:
            self._read_again(read.plan.table)
            if read.stale:  # a chunk read but discarded at HW can be read again at once
                self.read_later(now)
            return None
        self._again = 0
        was_done = table.done
        table = dataclasses.replace(table, rows=table.rows + len(closed.survivors))
        if not read.superseded:
            table = dataclasses.replace(
                table, chunks=table.chunks + 1, selected=table.selected + closed.selected,
                dropped=table.dropped + closed.dropped)
            if read.failure is not None:  # counted; the position in the table does not move
                self.failure = read.failure
            else:
                table = self.planner.completed(table, read.plan, read.chunk, self.request)
                self._missing.extend(read.chunk.missing)
                if self.request.prune and table.prune_from is None and closed.low is not None:
                    # the first window of the table (it read the upper bound): the prune's start
                    table = dataclasses.replace(table, prune_from=closed.low.encode())
        self._set(table)
        pruned = self.request.prune and table.done and not was_done and self.failure is None
        return table if pruned else None

    def read_later(self, now: float) -> None:
        """The next chunk cannot be read now (stale, locked): wait, longer each time."""
        self._again += 1
        pause = min(RETRY_S * 2 ** (self._again - 1), RETRY_MAX_S)
        self.retry_at = max(self.retry_at, now + pause)

    def _set(self, table: TableProgress) -> None:
        self.progress[table.table] = table
        self._unsaved.add(table.table)

    def _read_again(self, table: str) -> None:
        """The chunk of a closed window is read again: from the table's progress."""
        self.reread += 1
        self._cursors.pop(table, None)
        self._read_all.discard(table)
        self.open_reads = deque(dataclasses.replace(r, superseded=True) if r.plan.table == table
                                else r for r in self.open_reads)

    def take_unsaved(self) -> tuple[list[TableProgress], list[KeyTexts]]:
        """Progress and missing keys changed since the last save; call after a flush."""
        tables = [self.progress[t] for t in self.request.tables if t in self._unsaved]
        missing = self._missing
        self._unsaved = set()
        self._missing = []
        return tables, missing
