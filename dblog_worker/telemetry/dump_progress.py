"""The running dumps as people see them: per table, the share done and the time to go."""

from __future__ import annotations

import json
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from dblog_worker.dump import ActiveDump
from dblog_worker.events import Encoded
from dblog_worker.requests import DumpKind
from dblog_worker.telemetry.exposition import MetricWriter, Samples
from dblog_worker.telemetry.key_ratio import key_ratio, scalar

PROGRESS_POINTS = 20  # progress samples per table for its ETA


@dataclass(slots=True)
class _TableDump:
    """What the view knows of one table of the running dump, beyond its progress."""

    low: float | str | None = None  # the first key, as a number or a string
    points: deque[tuple[float, float]] = field(
        default_factory=lambda: deque(maxlen=PROGRESS_POINTS))


class DumpProgress:
    """The views of the dump requests this worker runs (queue order: priority, then age),
    JSON-ready, as the status shows them."""

    def __init__(self) -> None:
        self.views: dict[str, dict[str, Any]] = {}
        self._tables: dict[tuple[str, str], _TableDump] = {}
        self._windows: dict[str, int] = {}  # windows opened, by priority
        self._before: set[str] = set()  # the dumps of the last session, which may resume

    @property
    def view(self) -> dict[str, Any] | None:
        """The first running dump's view (for readers of one dump at a time)."""
        return next(iter(self.views.values()), None)

    def runs(self, request_id: str) -> bool:
        """Whether the dump ran here already (in this session, or the last one)."""
        return request_id in self.views or request_id in self._before

    def copies(self) -> list[dict[str, Any]]:
        return [dict(view, tables=[dict(t) for t in view["tables"]])
                for view in self.views.values()]

    def start(self, dump: ActiveDump, now: float) -> dict[str, Any]:
        """The worker took ``dump`` up: it starts, or goes on in a new session."""
        view = self.views[dump.id] = self._view(dump, now)
        return view

    def update(self, dump: ActiveDump, now: float) -> dict[str, Any] | None:
        """The new view, if its tables or its request's state changed."""
        before = self.views.get(dump.id)
        self.views[dump.id] = view = self._view(dump, now)
        if before is None or before["tables"] != view["tables"] or \
                before["state"] != view["state"] or before["waiting"] != view["waiting"] or \
                before["priority"] != view["priority"] or \
                _decision(before["throttle"]) != _decision(view["throttle"]):
            return view
        return None

    def end(self, request_id: str, state: str) -> list[dict[str, Any]] | None:
        """The dump ended in ``state``: its last progress, if it was running here."""
        progress = None
        view = self.views.pop(request_id, None)
        if view is not None:
            progress = [dict(table) for table in view["tables"]]
            if state == "completed":
                for table in progress:
                    table["ratio"], table["eta_s"] = 1.0, 0.0
        self._tables = {k: v for k, v in self._tables.items() if k[0] != request_id}
        return progress

    def clear(self) -> None:
        """The session ended: the next one takes its requests up again (they resume)."""
        self._before = set(self.views)
        self.views.clear()

    def window_opened(self, priority: str) -> None:
        self._windows[priority] = self._windows.get(priority, 0) + 1

    def first_key(self, dump_id: str, table: str, chunk: Future[Encoded]) -> None:
        """``chunk``, a table's first, starts the table's key range with its first key."""
        if not chunk.done() or chunk.exception() is not None:
            return
        keys = chunk.result()[0]
        if len(keys):
            try:
                first = json.loads(keys[0].as_py())
            except (TypeError, ValueError):
                return
            if isinstance(first, list) and first:
                entry = self._tables.setdefault((dump_id, table), _TableDump())
                entry.low = scalar(first[0])

    def metrics(self, out: MetricWriter) -> None:
        progress: Samples = []
        eta: Samples = []
        state: Samples = []
        waiting: Samples = []
        throttle_delay: Samples = []
        throttle_over: Samples = []
        for view in self.views.values():
            request = view["request_id"]
            state.append(({"request": request, "state": view["state"],
                           "priority": view["priority"]}, 1))
            waiting.append(({"request": request}, 1 if view["waiting"] else 0))
            throttle = view["throttle"]
            if throttle is not None:
                throttle_delay.append(({"request": request}, throttle["delay_ms"] / 1000))
                for signal in throttle["signals"]:
                    throttle_over.append(({"request": request, "signal": signal},
                                          1 if signal in throttle["over"] else 0))
            for table in view["tables"]:
                labels = {"request": request, "table": table["table"]}
                if table["ratio"] is not None:
                    progress.append((labels, table["ratio"]))
                if table["eta_s"] is not None:
                    eta.append((labels, table["eta_s"]))
        out.metric("dblog_dump_state", "gauge",
                   "1 for each dump request this worker runs, labelled with its state and "
                   "priority.", state)
        out.metric("dblog_dump_windows_total", "counter",
                   "Watermark windows opened for dumps, by the requests' priority (their "
                   "share of windows).",
                   [({"priority": p}, n) for p, n in sorted(self._windows.items())])
        out.metric("dblog_dump_waiting", "gauge",
                   "1 while a running dump reads nothing: its last window read nothing (a "
                   "read replica behind, a table locked) or more urgent requests hold every "
                   "slot; the status says why. Else 0.", waiting)
        out.metric("dblog_dump_throttle_delay_seconds", "gauge",
                   "The running dump's automatic throttle: what it adds to the delay before "
                   "the next window (its policy on).", throttle_delay, unit="seconds")
        out.metric("dblog_dump_throttle_over_limit", "gauge",
                   "1 for each throttle signal over its limit at the last decision, else 0 "
                   "(chunk_ms, active_sessions, replica_lag_ms, log_lag).", throttle_over)
        out.metric("dblog_dump_progress_ratio", "gauge",
                   "Estimated share of a table's dump done (0 to 1).", progress, unit="ratio")
        out.metric("dblog_dump_eta_seconds", "gauge",
                   "Estimated seconds until a table's dump is done.", eta, unit="seconds")

    def _view(self, dump: ActiveDump, now: float) -> dict[str, Any]:
        request = dump.request
        tables = []
        remaining: float | None = 0.0
        for name in request.tables:
            progress = dump.progress[name]
            entry = self._tables.setdefault((dump.id, name), _TableDump())
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
                "priority": request.priority.value,
                "chunk_size": request.chunk_size, "delay_ms": request.delay_ms,
                "parallelism": request.parallelism, "waiting": dump.why_waiting,
                "throttle": _throttle(dump), "tables": tables,
                "eta_s": None if remaining is None else round(remaining, 1)}


def _throttle(dump: ActiveDump) -> dict[str, Any] | None:
    """The throttle's policy and last decision; None while its policy is off."""
    policy, throttle = dump.request.throttle, dump.throttle
    if not policy.on:
        return None
    return {"limits": policy.limits(), "delay_ms": round(throttle.delay_ms),
            "reason": throttle.reason, "over": list(throttle.over),
            "signals": {r.signal: round(r.value, 1) for r in throttle.readings},
            "text": throttle.describe()}


def _decision(throttle: dict[str, Any] | None) -> object:
    """What makes a new feed event: the delay or the signals over their limit changed."""
    return None if throttle is None else (throttle["delay_ms"], throttle["over"])


def _eta(points: deque[tuple[float, float]]) -> float | None:
    """Seconds left at the pace of the recent progress samples."""
    if len(points) < 2:
        return None
    (t0, r0), (t1, r1) = points[0], points[-1]
    if r1 <= r0 or t1 <= t0:
        return None
    return (1.0 - r1) * (t1 - t0) / (r1 - r0)
