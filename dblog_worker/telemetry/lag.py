"""How far behind the source the worker is: end-to-end lag of durable writes, log bytes."""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

from dblog_worker.events import ChangeEvent, LogItem, Watermark
from dblog_worker.telemetry.exposition import MetricWriter

LAG_POINTS = 300  # durable writes kept for the charts (5 minutes at one a second)
LAG_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)


class Lag:
    """End-to-end lag: from the source commit of the newest event of a write to the
    write being durable, one observation per durable write; and the log not read yet."""

    def __init__(self, points: int = LAG_POINTS) -> None:
        self.last_s: float | None = None
        self.history: deque[tuple[float, float]] = deque(maxlen=points)
        self.log_bytes: int | None = None
        self._newest_commit_us = 0  # of the last event read
        self._submitted_commit_us = 0  # of the last event in the write in flight
        self._buckets = [0] * (len(LAG_BUCKETS) + 1)
        self._sum = 0.0

    def read(self, items: Sequence[LogItem]) -> None:
        """A poll read ``items`` (not empty)."""
        for item in reversed(items[-8:]):  # a commit is the last or next-to-last item
            if type(item) is ChangeEvent or type(item) is Watermark:
                self._newest_commit_us = item.commit_ts_us
                break

    def submitted(self) -> None:
        """The buffered output was handed to the writer."""
        self._submitted_commit_us = self._newest_commit_us

    def restart(self) -> None:
        """A new session: no write in flight."""
        self._submitted_commit_us = 0

    def durable(self, now: float, events: int) -> float | None:
        """The write in flight, of ``events``, is durable: its lag, observed, if it has one."""
        if not events or not self._submitted_commit_us:
            return None
        lag = max(0.0, now - self._submitted_commit_us / 1e6)
        self.last_s = lag
        self.history.append((round(now, 3), round(lag, 3)))
        self._sum += lag
        for i, bound in enumerate(LAG_BUCKETS):
            if lag <= bound:
                self._buckets[i] += 1
                return lag
        self._buckets[-1] += 1
        return lag

    def metrics(self, out: MetricWriter) -> None:
        out.metric("dblog_last_batch_lag_seconds", "gauge",
                   "Source commit of the newest event of the last durable write to the "
                   "write being durable.",
                   [] if self.last_s is None else [({}, self.last_s)], unit="seconds")
        out.histogram("dblog_end_to_end_lag_seconds",
                      "Source commit of the newest event of a write to the write being "
                      "durable, one observation per durable write.",
                      LAG_BUCKETS, self._buckets, self._sum, unit="seconds")
        out.metric("dblog_log_lag_bytes", "gauge",
                   "Log the server has written that the worker has not read yet.",
                   [] if self.log_bytes is None else [({}, self.log_bytes)], unit="bytes")
