"""The running dump: which chunk comes next, and what a closed window changes.

A dump walks its tables in order. A table dump captures the table's largest key
once (the upper bound), then reads chunks of keys after the last completed key up
to that bound, until a chunk comes back short. A primary-key dump reads its keys in
batches of the chunk size. Progress changes only when a window closes, and is
saved to Redis only after the window's rows are durable (``take_unsaved``).

A window can end *to be read again* (its chunk was stale, or the log held more unseen
changes than the worker keeps): its progress is not taken, reading goes back to the
last completed key, and a later window of the same table already open (read ahead of
it) emits its rows but does not move the progress either.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from dblog_worker.requests import DumpKind, DumpRequest, KeyTexts, RequestState, TableProgress
from dblog_worker.window import WindowClosed

# After a chunk to be read again (stale, its table locked, its window discarded), the next
# window waits RETRY_S, doubling while it keeps happening, up to RETRY_MAX_S: a table locked
# for minutes by a DDL costs the log a short lock wait now and then, not its pace.
RETRY_S = 0.2
RETRY_MAX_S = 5.0


@dataclass(frozen=True, slots=True)
class ChunkPlan:
    """What the next window reads."""

    table: str
    limit: int
    after: KeyTexts | None = None  # table dumps: the last completed key
    upper: KeyTexts | None = None  # table dumps: the upper bound
    key_index: int = 0  # primary-key dumps: index of the batch's first key


@dataclass(slots=True)
class WindowRead:
    """What the open window selected; applied to progress when it closes."""

    plan: ChunkPlan
    selected: int
    last_key: KeyTexts | None
    keys_read: int = 0
    missing: list[KeyTexts] = field(default_factory=list)
    failure: str | None = None
    stale: bool = False  # the source said the chunk cannot be used: read it again
    superseded: bool = False  # read ahead of a window read again: progress not taken


class ActiveDump:
    def __init__(self, request: DumpRequest, progress: dict[str, TableProgress]) -> None:
        self.request = request
        self.progress = {t: progress.get(t) or TableProgress(t) for t in request.tables}
        self.next_window_at = 0.0
        self.open_reads: deque[WindowRead] = deque()  # windows open, oldest first
        self.failure: str | None = None
        self._unsaved: set[str] = set(request.tables)
        self._missing: list[KeyTexts] = []
        # Where reading goes on while windows are open: it runs ahead of progress, which
        # changes only when a window closes.
        self._read_after: dict[str, KeyTexts] = {}
        self._read_key_index: dict[str, int] = {}
        self._read_all: set[str] = set()
        self.reread = 0  # windows read again
        self._again = 0  # chunks read again in a row

    @property
    def id(self) -> str:
        return self.request.id

    @property
    def runnable(self) -> bool:
        return self.request.state is RequestState.RUNNING and self.failure is None

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

    def set_upper_bound(self, table: TableProgress, upper: KeyTexts | None) -> None:
        table.started = True
        table.upper_bound = None if upper is None else list(upper)
        if upper is None:
            table.done = True
        self._unsaved.add(table.table)

    def plan(self) -> ChunkPlan | None:
        """The next chunk to read, or None when the current table needs its upper bound."""
        table = self.current_table()
        if table is None:
            return None
        limit = self.request.chunk_size
        if self.request.kind is DumpKind.KEYS:
            index = self._read_key_index.get(table.table, table.next_key_index)
            return ChunkPlan(table.table, limit, key_index=index)
        if not table.started or table.upper_bound is None:
            return None
        after = self._read_after.get(table.table)
        if after is None and table.last_key is not None:
            after = tuple(table.last_key)
        return ChunkPlan(table.table, limit, after=after, upper=tuple(table.upper_bound))

    def window_opened(self, read: WindowRead) -> None:
        """A window was opened with this read: the next chunk starts after it."""
        self.open_reads.append(read)
        table = read.plan.table
        if read.failure is not None:
            self.failure = read.failure  # no more windows; the request fails once this closes
        elif self.request.kind is DumpKind.KEYS:
            self._read_key_index[table] = read.plan.key_index + read.keys_read
            if self._read_key_index[table] >= self.request.key_count:
                self._read_all.add(table)
        else:
            if read.last_key is not None:
                self._read_after[table] = read.last_key
            if read.selected < read.plan.limit:
                self._read_all.add(table)

    def window_closed(self, closed: WindowClosed, now: float) -> None:
        if not self.open_reads or closed.dump_id != self.id:
            return
        read = self.open_reads.popleft()
        table = self.progress[read.plan.table]
        self.next_window_at = now + self.request.delay_ms / 1000
        if read.stale or closed.retry:
            self._read_again(read.plan.table)
            self.read_later(now)
            return
        self._again = 0
        table.rows += len(closed.survivors)
        self._unsaved.add(table.table)
        if read.superseded:
            return
        table.chunks += 1
        table.selected += closed.selected
        table.dropped += closed.dropped
        if read.failure is not None:  # counted; the position in the table does not move
            self.failure = read.failure
        elif self.request.kind is DumpKind.KEYS:
            table.next_key_index += read.keys_read
            table.missing += len(read.missing)
            self._missing.extend(read.missing)
            table.done = table.next_key_index >= self.request.key_count
        else:
            if read.last_key is not None:
                table.last_key = list(read.last_key)
            table.done = read.selected < read.plan.limit

    def read_later(self, now: float) -> None:
        """The next chunk cannot be read now (stale, locked): wait, longer each time."""
        self._again += 1
        pause = min(RETRY_S * 2 ** (self._again - 1), RETRY_MAX_S)
        self.next_window_at = max(self.next_window_at, now + pause)

    def _read_again(self, table: str) -> None:
        """The chunk of a closed window is read again: from the table's progress."""
        self.reread += 1
        self._read_after.pop(table, None)
        self._read_key_index.pop(table, None)
        self._read_all.discard(table)
        for later in self.open_reads:
            if later.plan.table == table:
                later.superseded = True

    def take_unsaved(self) -> tuple[list[TableProgress], list[KeyTexts]]:
        """Progress and missing keys changed since the last save; call after a flush."""
        tables = [self.progress[t] for t in self.request.tables if t in self._unsaved]
        missing = self._missing
        self._unsaved = set()
        self._missing = []
        return tables, missing
