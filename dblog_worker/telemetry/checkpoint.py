"""Where the worker reads the log, and the checkpoint it saved: when it last moved."""

from __future__ import annotations

from dblog_worker.telemetry.exposition import MetricWriter

QUIET_CHECKPOINT_S = 10.0  # an idle log's checkpoint moves: say so in the feed this often


class CheckpointStatus:
    def __init__(self) -> None:
        self.position: str | None = None  # read up to, as people read it
        self.saved: str | None = None
        self.saved_at: float | None = None
        self._fed_at = 0.0

    def save(self, checkpoint: str | None, now: float) -> bool:
        """Whether ``checkpoint`` moved the saved one."""
        if checkpoint is None or checkpoint == self.saved:
            return False
        self.saved, self.saved_at = checkpoint, now
        return True

    def worth_a_line(self, now: float, events: int) -> bool:
        """Whether the feed tells of a move that made ``events`` durable: always when
        there are some, else every :data:`QUIET_CHECKPOINT_S`."""
        if events or now - self._fed_at >= QUIET_CHECKPOINT_S:
            self._fed_at = now
            return True
        return False

    def metrics(self, out: MetricWriter, now: float) -> None:
        out.metric("dblog_checkpoint_age_seconds", "gauge",
                   "Time since the saved checkpoint last moved.",
                   [] if self.saved_at is None else [({}, now - self.saved_at)],
                   unit="seconds")
        out.metric("dblog_checkpoint_saved_timestamp_seconds", "gauge",
                   "When the saved checkpoint last moved, in seconds since the Unix epoch.",
                   [] if self.saved_at is None else [({}, self.saved_at)], unit="seconds")
