"""What the worker is doing, for people and for Prometheus: status, metrics, and a feed.

The worker thread writes through the hooks below, a few calls per poll, per window
and per flush, never per event (the log runs at >100k events/s). HTTP threads read:

* :meth:`Telemetry.snapshot`: the runtime status as JSON-ready values;
* :meth:`Telemetry.prometheus`: the metrics in the Prometheus text format 0.0.4
  (every name, type and label is in ``docs/observability.md``);
* :meth:`Telemetry.feed`: a bounded, ordered ring of what happened (log batches,
  windows opening and closing, durable writes, dumps, sessions), each entry with a
  sequence number, so that a reader asks for what came after the last one it saw.

One lock guards both sides. Event counts come from the output buffer's per-table
totals (:meth:`OutputBuffer.log_events_by_table`) and from what a write made durable,
so nothing here looks at single events except a few samples per feed line.
"""

from __future__ import annotations

import itertools
import json
import math
import re
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from dblog_worker import __version__
from dblog_worker.dialect import dialect
from dblog_worker.dump import ActiveDump
from dblog_worker.events import ChangeEvent, Encoded, LogItem, Watermark
from dblog_worker.kinds import DEFAULT
from dblog_worker.position import Position
from dblog_worker.requests import DumpKind
from dblog_worker.window import WindowClosed

FEED_SIZE = 2000
LAG_POINTS = 300  # durable writes kept for the charts (5 minutes at one a second)
LAG_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
LOG_FEED_INTERVAL_S = 0.25  # at most four log lines a second; counts add up in between
LOG_SAMPLES = 3  # sample events per log line
QUIET_CHECKPOINT_S = 10.0  # an idle log's checkpoint moves: say so in the feed this often
RATE_WINDOW_S = 10.0
PROGRESS_POINTS = 20  # progress samples per table for its ETA
KEY_TEXT_MAX = 80


def describe_position(kind: str) -> Callable[[Position], str]:
    """How people read a log position of this source kind."""
    return dialect(kind).describe_position


@dataclass(slots=True)
class _Window:
    table: str
    dump_id: str
    low: str
    selected: int
    opened_at: float
    chunk: Future[Encoded] | None  # a table's first chunk: its first key starts the range


@dataclass(slots=True)
class _TableDump:
    """What the view knows of one table of the running dump, beyond its progress."""

    low: float | str | None = None  # the first key, as a number or a string
    points: deque[tuple[float, float]] = field(
        default_factory=lambda: deque(maxlen=PROGRESS_POINTS))


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
        self._seq = 0
        self._feed: deque[dict[str, Any]] = deque(maxlen=feed_size)
        # status
        self._connected = False
        self._run_id: str | None = None
        self._last_error: str | None = None
        self._last_error_at: float | None = None
        self._position: str | None = None
        self._checkpoint: str | None = None
        self._checkpoint_at: float | None = None
        self._checkpoint_fed_at = 0.0
        self._lag_bytes: int | None = None
        self._lag_s: float | None = None
        self._lag_history: deque[tuple[float, float]] = deque(maxlen=lag_points)
        self._rate_history: deque[tuple[float, float]] = deque(maxlen=lag_points)
        self._windows: deque[_Window] = deque()
        self._dump: dict[str, Any] | None = None
        self._dump_tables: dict[tuple[str, str], _TableDump] = {}
        # log lines of the feed
        self._read: dict[str, int] = {}  # log events read per table, at the last log line
        self._read_fed_at = 0.0
        self._newest_commit_us = 0  # of the last event read
        self._submitted_commit_us = 0  # of the last event in the write in flight
        self._landed_samples: deque[tuple[float, int]] = deque(maxlen=64)
        # the lease
        self._role = "starting"
        self._token: int | None = None
        self._leader: dict[str, str] = {}  # the lease as last seen by a standby
        self._acquired = 0
        self._lost = 0
        # metrics
        self._sessions = 0
        self._reconnects = 0
        self._errors: dict[str, int] = {}
        self._events: dict[tuple[str, str], int] = {}  # (table, origin) -> durable events
        self._landed_total = 0
        self._windows_opened: dict[str, int] = {}
        self._windows_closed: dict[str, int] = {}
        self._rows_selected: dict[str, int] = {}
        self._rows_dropped: dict[str, int] = {}
        self._rows_emitted: dict[str, int] = {}
        self._lag_buckets = [0] * (len(LAG_BUCKETS) + 1)
        self._lag_sum = 0.0
        self._lag_count = 0

    # -- hooks: called by the worker thread ----------------------------------------------

    def role(self, role: str, token: int | None, leader: Mapping[str, str] | None = None
             ) -> None:
        """``leader`` (holds the lease with ``token``), ``standby`` or ``stopped``."""
        with self._lock:
            if role != self._role:
                if role == "leader":
                    self._acquired += 1
                elif self._role == "leader":
                    self._lost += 1
                self._add("lease", role=role, token=token)
            self._role, self._token = role, token
            self._leader = dict(leader or {})

    @property
    def is_leader(self) -> bool:
        return self._role == "leader"

    def session_started(self, run_id: str, checkpoint: str | None) -> None:
        with self._lock:
            now = self._clock()
            if self._sessions:
                self._reconnects += 1
            self._sessions += 1
            self._connected = True
            self._run_id = run_id
            self._windows.clear()
            self._submitted_commit_us = 0
            self._read = {}  # a new session counts from 0 in a new output buffer
            if checkpoint is not None and checkpoint != self._checkpoint:
                self._checkpoint, self._checkpoint_at = checkpoint, now
            self._add("session", state="connected", run_id=run_id, checkpoint=checkpoint)

    def session_ended(self, error: BaseException | None) -> None:
        """The session stopped: on request (no error) or on a failure (then the next retries)."""
        with self._lock:
            self._connected = False
            self._windows.clear()
            if error is None:
                self._add("session", state="stopped", run_id=self._run_id)
                return
            kind = type(error).__name__
            self._errors[kind] = self._errors.get(kind, 0) + 1
            self._last_error, self._last_error_at = f"{kind}: {error}", self._clock()
            self._add("session", state="lost", run_id=self._run_id, error=self._last_error)

    def error(self, kind: str, message: str, request_id: str | None = None) -> None:
        """Something failed that the worker goes on after (a dump failed or was refused)."""
        with self._lock:
            self._errors[kind] = self._errors.get(kind, 0) + 1
            self._last_error, self._last_error_at = f"{kind}: {message}", self._clock()
            self._add("error", kind=kind, message=message, request_id=request_id)

    def polled(
        self,
        items: Sequence[LogItem],
        position: str | None,
        read: Callable[[], Mapping[str, int]],
    ) -> None:
        """One poll of the log: ``read()`` gives the log events read so far, per table.

        It is called for a feed line only, at most every :data:`LOG_FEED_INTERVAL_S`.
        """
        if not items:
            return
        for item in reversed(items[-8:]):  # a commit is the last or next-to-last item
            if type(item) is ChangeEvent or type(item) is Watermark:
                self._newest_commit_us = item.commit_ts_us
                break
        now = self._clock()
        if now - self._read_fed_at < LOG_FEED_INTERVAL_S:
            self._position = position
            return
        totals = read()
        counts = {t: n - self._read.get(t, 0) for t, n in totals.items()
                  if n != self._read.get(t, 0)}
        with self._lock:
            self._position = position
            if not counts:
                return
            self._read_fed_at = now
            self._read = dict(totals)
            samples = []
            for item in reversed(items):
                if type(item) is ChangeEvent:
                    samples.append({
                        "table": item.table, "op": item.op.value,
                        "key": _short(item.key), "position": self._position_text(item.position),
                    })
                    if len(samples) == LOG_SAMPLES:
                        break
            samples.reverse()
            self._add("log", events=sum(counts.values()), tables=counts, samples=samples,
                      position=position)

    def window_opened(
        self,
        table: str,
        dump_id: str,
        low: str,
        selected: int,
        first_chunk: Future[Encoded] | None = None,
    ) -> None:
        """LW and HW written and the chunk selected between them; ``first_chunk``: the
        rows of a table's first chunk, whose first key starts the table's key range."""
        with self._lock:
            self._windows.append(_Window(table, dump_id, low, selected, self._clock(),
                                         first_chunk))
            self._windows_opened[table] = self._windows_opened.get(table, 0) + 1
            self._add("window_opened", table=table, dump_id=dump_id, low=low, selected=selected,
                      window=low.rsplit(".", 1)[0])

    def window_closed(self, closed: WindowClosed) -> None:
        """HW came back: the chunk rows no log event touched are released."""
        table = closed.table
        emitted = len(closed.survivors)
        with self._lock:
            window = self._windows.popleft() if self._windows else None
            if window is not None and window.chunk is not None:
                self._first_key(closed.dump_id, table, window.chunk)
            self._windows_closed[table] = self._windows_closed.get(table, 0) + 1
            self._rows_selected[table] = self._rows_selected.get(table, 0) + closed.selected
            self._rows_dropped[table] = self._rows_dropped.get(table, 0) + closed.dropped
            self._rows_emitted[table] = self._rows_emitted.get(table, 0) + emitted
            high = closed.high
            self._add("window_closed", table=table, dump_id=closed.dump_id,
                      window=high.token.rsplit(".", 1)[0], high=high.token,
                      position=self._position_text(high.position), selected=closed.selected,
                      dropped=closed.dropped, emitted=emitted,
                      open_s=None if window is None else round(self._clock() - window.opened_at,
                                                                 3))

    def submitted(self) -> None:
        """The buffered output was handed to the writer."""
        self._submitted_commit_us = self._newest_commit_us

    def durable(self, landed: Mapping[str, tuple[int, int]], checkpoint: str | None) -> None:
        """The write in flight is durable: ``landed`` is (log events, dump rows) per table;
        ``checkpoint`` is saved when it is not None."""
        with self._lock:
            now = self._clock()
            total = 0
            for table, (log_events, dump_rows) in landed.items():
                if log_events:
                    key = (table, "log")
                    self._events[key] = self._events.get(key, 0) + log_events
                if dump_rows:
                    key = (table, "dump")
                    self._events[key] = self._events.get(key, 0) + dump_rows
                total += log_events + dump_rows
            self._landed_total += total
            self._landed_samples.append((now, self._landed_total))
            self._rate_history.append((round(now, 3), round(self._events_per_s(now), 1)))
            lag = None
            if total and self._submitted_commit_us:
                lag = max(0.0, now - self._submitted_commit_us / 1e6)
                self._observe_lag(now, lag)
            if checkpoint is not None and checkpoint != self._checkpoint:
                self._checkpoint, self._checkpoint_at = checkpoint, now
                if total or now - self._checkpoint_fed_at >= QUIET_CHECKPOINT_S:
                    self._checkpoint_fed_at = now
                    self._add("durable", events=total, checkpoint=checkpoint,
                              lag_s=None if lag is None else round(lag, 3))
            elif total:
                self._add("durable", events=total, checkpoint=None,
                          lag_s=None if lag is None else round(lag, 3))

    def log_lag(self, lag_bytes: int) -> None:
        self._lag_bytes = lag_bytes

    def dump_started(self, dump: ActiveDump) -> None:
        """The worker took the request up: it starts, or goes on in a new session."""
        request = dump.request
        with self._lock:
            resumed = self._dump is not None and self._dump["request_id"] == dump.id
            self._dump_tables = {k: v for k, v in self._dump_tables.items() if k[0] == dump.id}
            self._dump = self._dump_view(dump)
            self._add("dump", state="resumed" if resumed else "started", request_id=dump.id,
                      kind=request.kind.value, tables=list(request.tables),
                      progress=self._dump["tables"], eta_s=self._dump["eta_s"])

    def dump_progress(self, dump: ActiveDump) -> None:
        """Progress after a window closed or the request changed; ratios and ETAs."""
        with self._lock:
            before = self._dump
            self._dump = self._dump_view(dump)
            if before is None or before["tables"] != self._dump["tables"] or \
                    before["state"] != self._dump["state"]:
                self._add("dump", state="progress", request_id=dump.id,
                          request_state=self._dump["state"], progress=self._dump["tables"],
                          eta_s=self._dump["eta_s"])

    def dump_ended(self, request_id: str, state: str, error: str | None = None) -> None:
        """The dump completed, failed, or is no longer this worker's (paused elsewhere,
        cancelled)."""
        with self._lock:
            progress = None
            if self._dump is not None and self._dump["request_id"] == request_id:
                progress = [dict(table) for table in self._dump["tables"]]
                if state == "completed":
                    for table in progress:
                        table["ratio"], table["eta_s"] = 1.0, 0.0
                self._dump = None
            self._dump_tables = {}
            self._add("dump", state=state, request_id=request_id, error=error,
                      progress=progress)

    # -- readers: called by any thread ------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            now = self._clock()
            window = self._windows[0] if self._windows else None
            return {
                "source": self.source,
                "version": __version__,
                "now": round(now, 3),
                "connected": self._connected,
                "role": self._role,
                "lease_token": self._token,
                "leader": None if self._role == "leader" else dict(self._leader) or None,
                "run_id": self._run_id,
                "last_error": self._last_error,
                "last_error_at": self._last_error_at,
                "position": self._position,
                "checkpoint": self._checkpoint,
                "checkpoint_age_s": None if self._checkpoint_at is None
                else round(now - self._checkpoint_at, 3),
                "lag_bytes": self._lag_bytes,
                "lag_s": None if self._lag_s is None else round(self._lag_s, 3),
                "lag_history": list(self._lag_history),
                "rate_history": list(self._rate_history),
                "window": None if window is None else {
                    "table": window.table, "dump_id": window.dump_id,
                    "opened_at": window.opened_at, "low": window.low,
                },
                "open_windows": len(self._windows),
                "active_request": None if self._dump is None else self._dump["request_id"],
                "events_per_s": round(self._events_per_s(now), 1),
                "events_landed": self._landed_total,
                "uptime_s": round(now - self._started, 3),
                "sessions": self._sessions,
                "reconnects": self._reconnects,
                "errors": dict(self._errors),
                "dump": None if self._dump is None else dict(
                    self._dump, tables=[dict(t) for t in self._dump["tables"]]),
            }

    def feed(self, after: int, limit: int = 500) -> dict[str, Any]:
        """Entries with ``seq > after``, oldest first, at most ``limit``; ``next`` is the
        ``after`` of the next call (entries pushed out of the ring meanwhile are lost)."""
        with self._lock:
            if not self._feed or after >= self._seq:
                return {"next": self._seq, "events": []}
            first = self._feed[0]["seq"]
            start = max(0, after + 1 - first)
            events = list(itertools.islice(self._feed, start, start + max(0, limit)))
            return {"next": events[-1]["seq"] if events else after, "events": events}

    def prometheus(self) -> str:
        with self._lock:
            now = self._clock()
            out = _Exposition(self.source)
            out.metric("dblog_build_info", "gauge", "The worker's version.",
                       [({"version": __version__}, 1)])
            out.metric("dblog_start_time_seconds", "gauge",
                       "When the worker started, in seconds since the Unix epoch.",
                       [({}, self._started)])
            out.metric("dblog_connected", "gauge",
                       "1 while a session streams the log, else 0.",
                       [({}, int(self._connected))])
            out.metric("dblog_leader", "gauge",
                       "1 while this worker holds the source's lease (it leads), 0 while it "
                       "stands by.", [({}, int(self._role == "leader"))])
            out.metric("dblog_lease_token", "gauge",
                       "The fencing token of the lease this worker holds.",
                       [] if self._token is None else [({}, self._token)])
            out.metric("dblog_lease_acquired_total", "counter",
                       "Times this worker took the lease (became the leader).",
                       [({}, self._acquired)])
            out.metric("dblog_lease_lost_total", "counter",
                       "Times this worker stopped leading (lease lost, or released at a stop).",
                       [({}, self._lost)])
            out.metric("dblog_sessions_total", "counter", "Sessions started.",
                       [({}, self._sessions)])
            out.metric("dblog_reconnects_total", "counter",
                       "Sessions started after an earlier one ended.",
                       [({}, self._reconnects)])
            out.metric("dblog_errors_total", "counter",
                       "Failures the worker went on after, by kind (the error class).",
                       [({"kind": k}, n) for k, n in sorted(self._errors.items())])
            out.metric("dblog_events_total", "counter",
                       "Events made durable in the landing zone, by table and origin "
                       "(log: change events; dump: chunk rows).",
                       [({"table": t, "origin": o}, n)
                        for (t, o), n in sorted(self._events.items())])
            out.metric("dblog_last_batch_lag_seconds", "gauge",
                       "Source commit of the newest event of the last durable write to the "
                       "write being durable.",
                       [] if self._lag_s is None else [({}, self._lag_s)])
            out.histogram("dblog_end_to_end_lag_seconds",
                          "Source commit of the newest event of a write to the write being "
                          "durable, one observation per durable write.",
                          self._lag_buckets, self._lag_sum, self._lag_count)
            out.metric("dblog_log_lag_bytes", "gauge",
                       "Log the server has written that the worker has not read yet.",
                       [] if self._lag_bytes is None else [({}, self._lag_bytes)])
            out.metric("dblog_checkpoint_age_seconds", "gauge",
                       "Time since the saved checkpoint last moved.",
                       [] if self._checkpoint_at is None
                       else [({}, now - self._checkpoint_at)])
            out.metric("dblog_checkpoint_saved_timestamp_seconds", "gauge",
                       "When the saved checkpoint last moved, in seconds since the Unix epoch.",
                       [] if self._checkpoint_at is None else [({}, self._checkpoint_at)])
            out.metric("dblog_windows_opened_total", "counter",
                       "Watermark windows opened (LW written, chunk selected, HW written).",
                       _by_table(self._windows_opened))
            out.metric("dblog_windows_closed_total", "counter",
                       "Watermark windows closed (HW read back from the log).",
                       _by_table(self._windows_closed))
            out.metric("dblog_windows_open", "gauge", "Windows open now.",
                       [({}, len(self._windows))])
            out.metric("dblog_chunk_rows_selected_total", "counter",
                       "Rows selected by the chunks of closed windows.",
                       _by_table(self._rows_selected))
            out.metric("dblog_chunk_rows_dropped_total", "counter",
                       "Chunk rows dropped because a log event in the window had their key.",
                       _by_table(self._rows_dropped))
            out.metric("dblog_chunk_rows_emitted_total", "counter",
                       "Chunk rows released to the output at their high watermark.",
                       _by_table(self._rows_emitted))
            dump = self._dump
            progress: list[tuple[dict[str, str], float]] = []
            eta: list[tuple[dict[str, str], float]] = []
            state: list[tuple[dict[str, str], float]] = []
            if dump is not None:
                request = dump["request_id"]
                state.append(({"request": request, "state": dump["state"]}, 1))
                for table in dump["tables"]:
                    labels = {"request": request, "table": table["table"]}
                    if table["ratio"] is not None:
                        progress.append((labels, table["ratio"]))
                    if table["eta_s"] is not None:
                        eta.append((labels, table["eta_s"]))
            out.metric("dblog_dump_state", "gauge",
                       "1 for the dump request this worker runs, labelled with its state.", state)
            out.metric("dblog_dump_progress_ratio", "gauge",
                       "Estimated share of a table's dump done (0 to 1).", progress)
            out.metric("dblog_dump_eta_seconds", "gauge",
                       "Estimated seconds until a table's dump is done.", eta)
            return out.text()

    # -- inside the lock -------------------------------------------------------------------

    def _add(self, entry_type: str, **fields: Any) -> None:
        self._seq += 1
        self._feed.append({"seq": self._seq, "ts": round(self._clock(), 3), "type": entry_type,
                           **fields})

    def _observe_lag(self, now: float, lag: float) -> None:
        self._lag_s = lag
        self._lag_history.append((round(now, 3), round(lag, 3)))
        self._lag_sum += lag
        self._lag_count += 1
        for i, bound in enumerate(LAG_BUCKETS):
            if lag <= bound:
                self._lag_buckets[i] += 1
                return
        self._lag_buckets[-1] += 1

    def _events_per_s(self, now: float) -> float:
        samples = self._landed_samples
        if not samples:
            return 0.0
        since = next((s for s in samples if now - s[0] <= RATE_WINDOW_S), None)
        if since is None or now - since[0] <= 0:
            return 0.0
        return (self._landed_total - since[1]) / max(now - since[0], 1.0)

    def _first_key(self, dump_id: str, table: str, chunk: Future[Encoded]) -> None:
        if not chunk.done() or chunk.exception() is not None:
            return
        keys = chunk.result()[0]
        if len(keys):
            try:
                first = json.loads(keys[0].as_py())
            except (TypeError, ValueError):
                return
            if isinstance(first, list) and first:
                entry = self._dump_tables.setdefault((dump_id, table), _TableDump())
                entry.low = _scalar(first[0])

    def _dump_view(self, dump: ActiveDump) -> dict[str, Any]:
        now = self._clock()
        request = dump.request
        tables = []
        remaining: float | None = 0.0
        for name in request.tables:
            progress = dump.progress[name]
            entry = self._dump_tables.setdefault((dump.id, name), _TableDump())
            ratio: float | None
            if progress.done:
                ratio = 1.0
            elif request.kind is DumpKind.KEYS:
                ratio = min(1.0, progress.next_key_index / max(request.key_count, 1))
            elif progress.last_key is None or progress.upper_bound is None:
                ratio = 0.0 if progress.started and progress.upper_bound is not None else None
            else:
                ratio = key_ratio(entry.low, progress.last_key[0], progress.upper_bound[0])
            eta = None
            if ratio is not None:
                points = entry.points
                if not points or points[-1][1] != ratio:
                    points.append((now, ratio))
                eta = 0.0 if ratio >= 1.0 else _eta(points)
            if not progress.done:
                remaining = None if eta is None or remaining is None else remaining + eta
            tables.append({
                "table": name, "done": progress.done, "started": progress.started,
                "chunks": progress.chunks, "selected": progress.selected, "rows": progress.rows,
                "dropped": progress.dropped, "missing": progress.missing,
                "ratio": None if ratio is None else round(ratio, 4),
                "eta_s": None if eta is None else round(eta, 1),
            })
        return {"request_id": dump.id, "kind": request.kind.value, "state": request.state.value,
                "chunk_size": request.chunk_size, "delay_ms": request.delay_ms,
                "tables": tables, "eta_s": None if remaining is None else round(remaining, 1)}


def _eta(points: deque[tuple[float, float]]) -> float | None:
    """Seconds left at the pace of the recent progress samples."""
    if len(points) < 2:
        return None
    (t0, r0), (t1, r1) = points[0], points[-1]
    if r1 <= r0 or t1 <= t0:
        return None
    return (1.0 - r1) * (t1 - t0) / (r1 - r0)


def _scalar(value: object) -> float | str | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value
    return None


HEX = re.compile(r"[0-9a-fA-F-]+")


def _string_number(text: str, hexadecimal: bool) -> float:
    """A string as a number that keeps the order of its first characters: hex digits
    (UUIDs, hashes) as such, other strings by their first bytes in base 256."""
    if hexadecimal:
        digits = text.replace("-", "")[:12].ljust(12, "0")
        return float(int(digits, 16))
    number = 0.0
    for byte in text.encode()[:8].ljust(8, b"\0"):
        number = number * 256 + byte
    return number


def key_ratio(low: float | str | None, last: str, upper: str) -> float | None:
    """Where ``last`` lies between the first key ``low`` and ``upper``, from 0 to 1.

    Keys are compared by their first column: numbers as numbers, strings by their first
    bytes. Without a known first key, numbers count from 0 and strings from "".
    """
    last_value, upper_value = _scalar(last), _scalar(upper)
    if isinstance(last_value, float) and isinstance(upper_value, float):
        start = low if isinstance(low, float) else min(0.0, last_value)
        lo, hi, at = start, upper_value, last_value
    elif last_value is None or upper_value is None:
        return None
    else:
        texts = [str(v) for v in (low, upper, last) if v is not None]
        hexadecimal = all(HEX.fullmatch(text) for text in texts)
        lo = _string_number(str(low), hexadecimal) if low is not None else 0.0
        hi, at = _string_number(str(upper), hexadecimal), _string_number(str(last), hexadecimal)
    if hi <= lo:
        return None
    ratio = (at - lo) / (hi - lo)
    return None if math.isnan(ratio) else min(1.0, max(0.0, ratio))


def _short(key: str | None) -> str | None:
    if key is None or len(key) <= KEY_TEXT_MAX:
        return key
    return key[:KEY_TEXT_MAX - 1] + "…"


def _by_table(counts: Mapping[str, int]) -> list[tuple[dict[str, str], float]]:
    return [({"table": table}, n) for table, n in sorted(counts.items())]


def escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(value: float) -> str:
    if isinstance(value, int):
        return str(value)
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(round(value, 6))


class _Exposition:
    """Writes metrics in the Prometheus text format 0.0.4; every sample carries ``source``."""

    def __init__(self, source: str) -> None:
        self._source = escape_label(source)
        self._lines: list[str] = []

    def _labels(self, labels: Mapping[str, str]) -> str:
        parts = [f'source="{self._source}"']
        parts += [f'{name}="{escape_label(value)}"' for name, value in labels.items()]
        return "{" + ",".join(parts) + "}"

    def _head(self, name: str, kind: str, help_text: str) -> None:
        help_text = help_text.replace("\\", "\\\\").replace("\n", "\\n")
        self._lines.append(f"# HELP {name} {help_text}")
        self._lines.append(f"# TYPE {name} {kind}")

    def metric(self, name: str, kind: str, help_text: str,
               samples: Iterable[tuple[Mapping[str, str], float]]) -> None:
        self._head(name, kind, help_text)
        for labels, value in samples:
            self._lines.append(f"{name}{self._labels(labels)} {_number(value)}")

    def histogram(self, name: str, help_text: str, buckets: Sequence[int], total: float,
                  count: int) -> None:
        self._head(name, "histogram", help_text)
        cumulative = 0
        for bound, n in zip((*LAG_BUCKETS, math.inf), buckets, strict=True):
            cumulative += n
            le = "+Inf" if math.isinf(bound) else repr(bound)
            self._lines.append(f"{name}_bucket{self._labels({'le': le})} {cumulative}")
        self._lines.append(f"{name}_sum{self._labels({})} {_number(total)}")
        self._lines.append(f"{name}_count{self._labels({})} {count}")

    def text(self) -> str:
        return "\n".join(self._lines) + "\n"
