"""The output buffer: events wait here, per table and in order, until the next flush.

A flush commits one segment per table to the landing zone; when it returns, every
event added so far is durable. Events at or before a table's last committed
position are dropped: they are a replay of output that is already durable (the log
restarts from the checkpoint, which trails the landing zone after a crash).
"""

from __future__ import annotations

from dblog_worker.events import ChangeEvent, DumpRows
from dblog_worker.landing import Item, LandingZone
from dblog_worker.position import Position


class OutputBuffer:
    def __init__(self, landing: LandingZone, landed: dict[str, Position]) -> None:
        self._landing = landing
        self._landed = dict(landed)
        self._replay_until = max(landed.values(), default=None)
        self._events: dict[str, list[Item]] = {}
        self.count = 0
        self.replayed = 0  # events dropped as already durable
        self.emitted = 0  # events made durable by this buffer

    def add(self, event: ChangeEvent) -> None:
        if self._replay_until is not None and self._is_replay(event):
            return
        events = self._events.get(event.table)
        if events is None:
            events = self._events[event.table] = []
        events.append(event)
        self.count += 1

    def add_rows(self, rows: DumpRows) -> None:
        """A window's surviving rows (never a replay: every window is new)."""
        events = self._events.get(rows.table)
        if events is None:
            events = self._events[rows.table] = []
        events.append(rows)
        self.count += len(rows)

    def _is_replay(self, event: ChangeEvent) -> bool:
        assert self._replay_until is not None
        if event.position > self._replay_until:
            self._replay_until = None
            return False
        last = self._landed.get(event.table)
        if last is not None and event.position <= last:
            self.replayed += 1
            return True
        return False

    def flush(self) -> int:
        """Commit every buffered event; returns how many became durable."""
        flushed = 0
        for table, events in self._events.items():
            if events:
                segment = self._landing.commit_segment(table, events)
                self._landed[table] = segment.last
                flushed += sum(len(e) if type(e) is DumpRows else 1 for e in events)
        self._events.clear()
        self.count = 0
        self.emitted += flushed
        return flushed
