"""What the writes made durable: events by table and origin, and the rate they land at."""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping

from dblog_worker.telemetry.exposition import MetricWriter
from dblog_worker.telemetry.lag import LAG_POINTS

RATE_WINDOW_S = 10.0


class Landed:
    def __init__(self, points: int = LAG_POINTS) -> None:
        self.total = 0
        self.rate_history: deque[tuple[float, float]] = deque(maxlen=points)
        self._events: dict[tuple[str, str], int] = {}  # (table, origin) -> durable events
        self._samples: deque[tuple[float, int]] = deque(maxlen=64)

    def add(self, now: float, landed: Mapping[str, tuple[int, int]]) -> int:
        """A write is durable: ``landed`` is (log events, dump rows) per table; returns
        how many events it made durable."""
        total = 0
        for table, (log_events, dump_rows) in landed.items():
            if log_events:
                key = (table, "log")
                self._events[key] = self._events.get(key, 0) + log_events
            if dump_rows:
                key = (table, "dump")
                self._events[key] = self._events.get(key, 0) + dump_rows
            total += log_events + dump_rows
        self.total += total
        self._samples.append((now, self.total))
        self.rate_history.append((round(now, 3), round(self.per_s(now), 1)))
        return total

    def per_s(self, now: float) -> float:
        """Events landed per second over the last :data:`RATE_WINDOW_S`."""
        samples = self._samples
        if not samples:
            return 0.0
        since = next((s for s in samples if now - s[0] <= RATE_WINDOW_S), None)
        if since is None or now - since[0] <= 0:
            return 0.0
        return (self.total - since[1]) / max(now - since[0], 1.0)

    def metrics(self, out: MetricWriter) -> None:
        out.metric("dblog_events_total", "counter",
                   "Events made durable in the landing zone, by table and origin "
                   "(log: change events; dump: chunk rows).",
                   [({"table": t, "origin": o}, n)
                    for (t, o), n in sorted(self._events.items())])
