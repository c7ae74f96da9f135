"""The one object the worker writes its telemetry through, and the HTTP threads read.

It owns the clock and the lock; the collaborators it is made of hold the state, each
its own part, and render their own metrics.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest

from dblog_worker import __version__
from dblog_worker.dump import ActiveDump
from dblog_worker.events import Encoded, LogItem
from dblog_worker.kinds import DEFAULT
from dblog_worker.telemetry.checkpoint import CheckpointStatus
from dblog_worker.telemetry.dump_progress import DumpProgress
from dblog_worker.telemetry.exposition import MetricWriter, TelemetryCollector, render
from dblog_worker.telemetry.feed import FEED_SIZE, Feed
from dblog_worker.telemetry.lag import LAG_POINTS, Lag
from dblog_worker.telemetry.landed import Landed
from dblog_worker.telemetry.landing_files import LandingFiles
from dblog_worker.telemetry.lifecycle import Lifecycle
from dblog_worker.telemetry.log_lines import LogLines
from dblog_worker.telemetry.positions import describe_position
from dblog_worker.telemetry.windows import OpenWindow, Windows
from dblog_worker.window import WindowClosed


class Telemetry:
    def __init__(
        self,
        source: str,
        *,
        kind: str = DEFAULT,
        feed_size: int = FEED_SIZE,
        lag_points: int = LAG_POINTS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.source = source
        self._clock = clock
        self._position_text = describe_position(kind)
        self._lock = threading.Lock()
        self._started = clock()
        self._feed = Feed(clock, feed_size)
        self._life = Lifecycle()
        self._checkpoint = CheckpointStatus()
        self._log_lines = LogLines(self._position_text)
        self._lag = Lag(lag_points)
        self._landed = Landed(lag_points)
        self._windows = Windows()
        self._dump = DumpProgress()
        self._tables: dict[str, Any] = {}  # the selection: captured and excluded, with why
        self._landing_files = LandingFiles()
        self.registry = CollectorRegistry()  # the worker's own, not prometheus_client's global
        self.registry.register(TelemetryCollector(source, self.write_metrics))

    # -- hooks: called by the worker thread ----------------------------------------------

    def role(self, role: str, token: int | None, leader: Mapping[str, str] | None = None
             ) -> None:
        """``leader`` (holds the lease with ``token``), ``standby`` or ``stopped``."""
        with self._lock:
            if self._life.change_role(role, token, leader):
                self._feed.add("lease", role=role, token=token)

    @property
    def is_leader(self) -> bool:
        return self._life.role == "leader"

    def session_started(self, run_id: str, checkpoint: str | None,
                        readers: Mapping[str, str] | None = None) -> None:
        with self._lock:
            now = self._clock()
            self._life.session_started(run_id, readers or {})
            self._windows.clear()
            self._lag.restart()
            self._log_lines.restart()
            self._checkpoint.save(checkpoint, now)
            self._feed.add("session", state="connected", run_id=run_id, checkpoint=checkpoint)

    def session_ended(self, error: BaseException | None) -> None:
        """The session stopped: on request (no error) or on a failure (then the next retries)."""
        with self._lock:
            self._life.connected = False
            self._windows.clear()
            self._dump.clear()
            if error is None:
                self._feed.add("session", state="stopped", run_id=self._life.run_id)
                return
            text = self._life.failed(type(error).__name__, str(error), self._clock())
            self._feed.add("session", state="lost", run_id=self._life.run_id, error=text)

    def error(self, kind: str, message: str, request_id: str | None = None) -> None:
        """Something failed that the worker goes on after (a dump failed or was refused)."""
        with self._lock:
            self._life.failed(kind, message, self._clock())
            self._feed.add("error", kind=kind, message=message, request_id=request_id)

    def polled(
        self,
        items: Sequence[LogItem],
        position: str | None,
        read: Callable[[], Mapping[str, int]],
    ) -> None:
        """One poll of the log: ``read()`` gives the log events read so far, per table.

        It is called for a feed line only, at most every ``LOG_FEED_INTERVAL_S``.
        """
        if not items:
            return
        self._lag.read(items)
        now = self._clock()
        if not self._log_lines.due(now):
            self._checkpoint.position = position
            return
        totals = read()
        counts = self._log_lines.counts(totals)
        with self._lock:
            self._checkpoint.position = position
            if counts:
                self._feed.add("log", **self._log_lines.line(now, totals, counts, items,
                                                             position))

    def window_opened(
        self,
        table: str,
        dump_id: str,
        low: str,
        selected: int,
        first_chunk: Future[Encoded] | None = None,
        *,
        priority: str = "normal",
    ) -> None:
        """LW and HW written and the chunk selected between them; ``first_chunk``: the
        rows of a table's first chunk, whose first key starts the table's key range;
        ``priority``: the dump request's."""
        with self._lock:
            self._windows.opened(OpenWindow(table, dump_id, low, selected, self._clock(),
                                            first_chunk))
            self._dump.window_opened(priority)
            self._feed.add("window_opened", table=table, dump_id=dump_id, low=low,
                           selected=selected, window=low.rsplit(".", 1)[0])

    def window_closed(self, closed: WindowClosed) -> None:
        """HW came back: the chunk rows no log event touched are released."""
        with self._lock:
            window = self._windows.closed(closed)
            if window is not None and window.chunk is not None:
                self._dump.first_key(closed.dump_id, closed.table, window.chunk)
            high = closed.high
            self._feed.add("window_closed", table=closed.table, dump_id=closed.dump_id,
                           window=high.token.rsplit(".", 1)[0], high=high.token,
                           position=self._position_text(high.position),
                           selected=closed.selected, dropped=closed.dropped,
                           emitted=len(closed.survivors),
                           open_s=None if window is None
                           else round(self._clock() - window.opened_at, 3))

    def submitted(self) -> None:
        """The buffered output was handed to the writer."""
        self._lag.submitted()

    def durable(self, landed: Mapping[str, tuple[int, int]], checkpoint: str | None) -> None:
        """The write in flight is durable: ``landed`` is (log events, dump rows) per table;
        ``checkpoint`` is saved when it is not None."""
        with self._lock:
            now = self._clock()
            total = self._landed.add(now, landed)
            lag = self._lag.durable(now, total)
            lag_s = None if lag is None else round(lag, 3)
            if self._checkpoint.save(checkpoint, now):
                if self._checkpoint.worth_a_line(now, total):
                    self._feed.add("durable", events=total, checkpoint=checkpoint, lag_s=lag_s)
            elif total:
                self._feed.add("durable", events=total, checkpoint=None, lag_s=lag_s)

    def log_lag(self, lag_bytes: int) -> None:
        self._lag.log_bytes = lag_bytes

    def dump_started(self, dump: ActiveDump) -> None:
        """The worker took the request up: it starts, or goes on in a new session."""
        request = dump.request
        with self._lock:
            resumed = self._dump.runs(dump.id)
            view = self._dump.start(dump, self._clock())
            self._feed.add("dump", state="resumed" if resumed else "started",
                           request_id=dump.id, kind=request.kind.value,
                           priority=request.priority.value,
                           tables=list(request.tables), progress=view["tables"],
                           eta_s=view["eta_s"])

    def dump_progress(self, dump: ActiveDump) -> None:
        """Progress after a window closed or the request changed; ratios and ETAs."""
        with self._lock:
            view = self._dump.update(dump, self._clock())
            if view is not None:
                self._feed.add("dump", state="progress", request_id=dump.id,
                               request_state=view["state"], priority=view["priority"],
                               progress=view["tables"],
                               eta_s=view["eta_s"], waiting=view["waiting"],
                               throttle=view["throttle"])

    def dump_ended(self, request_id: str, state: str, error: str | None = None) -> None:
        """The dump completed, failed, or is no longer this worker's (paused elsewhere,
        cancelled)."""
        with self._lock:
            progress = self._dump.end(request_id, state)
            self._feed.add("dump", state=state, request_id=request_id, error=error,
                           progress=progress)

    def tables(self, selection: Mapping[str, Any]) -> None:
        """What the source captures now (``Selection.to_json``)."""
        with self._lock:
            self._tables = dict(selection)

    def tables_changed(self, joined: Sequence[str], left: Sequence[str]) -> None:
        """Tables joined or left capture while the worker ran."""
        with self._lock:
            self._feed.add("tables", joined=list(joined), left=list(left))

    # -- readers: called by any thread ------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        """The runtime status as JSON-ready values."""
        with self._lock:
            now = self._clock()
            life, checkpoint, lag = self._life, self._checkpoint, self._lag
            window = self._windows.open[0] if self._windows.open else None
            dumps = self._dump.copies()
            return {
                "source": self.source,
                "version": __version__,
                "now": round(now, 3),
                "connected": life.connected,
                "role": life.role,
                "lease_token": life.token,
                "leader": None if life.role == "leader" else dict(life.leader) or None,
                "run_id": life.run_id,
                "readers": dict(life.readers),
                "last_error": life.last_error,
                "last_error_at": life.last_error_at,
                "position": checkpoint.position,
                "checkpoint": checkpoint.saved,
                "checkpoint_age_s": None if checkpoint.saved_at is None
                else round(now - checkpoint.saved_at, 3),
                "lag_bytes": lag.log_bytes,
                "lag_s": None if lag.last_s is None else round(lag.last_s, 3),
                "lag_history": list(lag.history),
                "rate_history": list(self._landed.rate_history),
                "window": None if window is None else {
                    "table": window.table, "dump_id": window.dump_id,
                    "opened_at": window.opened_at, "low": window.low,
                },
                "open_windows": len(self._windows.open),
                "active_requests": [view["request_id"] for view in dumps],
                # the first of them, for readers of one dump at a time
                "active_request": dumps[0]["request_id"] if dumps else None,
                "events_per_s": round(self._landed.per_s(now), 1),
                "events_landed": self._landed.total,
                "uptime_s": round(now - self._started, 3),
                "sessions": life.sessions,
                "reconnects": life.reconnects,
                "errors": dict(life.errors),
                "dumps": dumps,
                "dump": dumps[0] if dumps else None,
                "tables": dict(self._tables),
            }

    def feed(self, after: int, limit: int = 500) -> dict[str, Any]:
        """Entries with ``seq > after``, oldest first, at most ``limit``; ``next`` is the
        ``after`` of the next call (entries pushed out of the ring meanwhile are lost)."""
        with self._lock:
            return self._feed.after(after, limit)

    def landing_scanned(self, rows: Sequence[Mapping[str, Any]]) -> None:
        """The landing zone's files per table, as just listed (HTTP threads)."""
        with self._lock:
            self._landing_files.scanned(self._clock(), rows)

    def landing_scanned_at(self) -> float | None:
        with self._lock:
            return self._landing_files.scanned_at

    def prometheus(self) -> str:
        """The metrics in the Prometheus text format 0.0.4 (docs/observability.md)."""
        return generate_latest(self.registry).decode()

    def exposition(self, accept: str = "") -> tuple[bytes, str]:
        """The metrics in the format an HTTP ``Accept`` header asks for (OpenMetrics or
        the text format 0.0.4), and its content type."""
        return render(self.registry, accept)

    def write_metrics(self, out: MetricWriter) -> None:
        """Every metric's current values, all read under the lock (one scrape)."""
        with self._lock:
            now = self._clock()
            out.info("dblog_build_info", "The worker's version.", {"version": __version__})
            out.metric("dblog_start_time_seconds", "gauge",
                       "When the worker started, in seconds since the Unix epoch.",
                       [({}, self._started)], unit="seconds")
            self._life.metrics(out)
            self._landed.metrics(out)
            self._lag.metrics(out)
            self._checkpoint.metrics(out, now)
            self._windows.metrics(out)
            self._dump.metrics(out)
            captured = self._tables.get("captured")
            if isinstance(captured, dict):
                out.metric("dblog_captured_tables", "gauge",
                           "The tables the source captures now (source.tables, its patterns "
                           "matched against the catalog).", [({}, float(len(captured)))])
            self._landing_files.metrics(out)
