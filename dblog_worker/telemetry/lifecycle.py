"""The worker's lifecycle: the lease it holds or waits for, its sessions, its failures."""

from __future__ import annotations

from collections.abc import Mapping

from dblog_worker.telemetry.exposition import MetricWriter


class Lifecycle:
    def __init__(self) -> None:
        self.role = "starting"
        self.token: int | None = None
        self.leader: dict[str, str] = {}  # the lease as last seen by a standby
        self.connected = False
        self.run_id: str | None = None
        self.sessions = 0
        self.reconnects = 0
        self.errors: dict[str, int] = {}
        self.last_error: str | None = None
        self.last_error_at: float | None = None
        self.readers: dict[str, str] = {}  # which implementation reads what (Setup.readers)
        self._acquired = 0
        self._lost = 0

    def change_role(self, role: str, token: int | None, leader: Mapping[str, str] | None
                    ) -> bool:
        """Whether ``role`` is a new one (taking or losing the lease is counted)."""
        changed = role != self.role
        if changed:
            if role == "leader":
                self._acquired += 1
            elif self.role == "leader":
                self._lost += 1
        self.role, self.token = role, token
        self.leader = dict(leader or {})
        return changed

    def session_started(self, run_id: str, readers: Mapping[str, str]) -> None:
        if self.sessions:
            self.reconnects += 1
        self.sessions += 1
        self.connected = True
        self.run_id = run_id
        self.readers = dict(readers)

    def failed(self, kind: str, message: str, now: float) -> str:
        """Count a failure of ``kind``; returns how the status shows it."""
        self.errors[kind] = self.errors.get(kind, 0) + 1
        self.last_error, self.last_error_at = f"{kind}: {message}", now
        return self.last_error

    def metrics(self, out: MetricWriter) -> None:
        out.metric("dblog_connected", "gauge",
                   "1 while a session streams the log, else 0.",
                   [({}, int(self.connected))])
        out.metric("dblog_leader", "gauge",
                   "1 while this worker holds the source's lease (it leads), 0 while it "
                   "stands by.", [({}, int(self.role == "leader"))])
        out.metric("dblog_lease_token", "gauge",
                   "The fencing token of the lease this worker holds.",
                   [] if self.token is None else [({}, self.token)])
        out.metric("dblog_lease_acquired_total", "counter",
                   "Times this worker took the lease (became the leader).",
                   [({}, self._acquired)])
        out.metric("dblog_lease_lost_total", "counter",
                   "Times this worker stopped leading (lease lost, or released at a stop).",
                   [({}, self._lost)])
        if self.readers:
            out.info("dblog_reader_info",
                     "Which implementation reads each part of the source (a label per part).",
                     self.readers)
        out.metric("dblog_sessions_total", "counter", "Sessions started.",
                   [({}, self.sessions)])
        out.metric("dblog_reconnects_total", "counter",
                   "Sessions started after an earlier one ended.",
                   [({}, self.reconnects)])
        out.metric("dblog_errors_total", "counter",
                   "Failures the worker went on after, by kind (the error class).",
                   [({"kind": k}, n) for k, n in sorted(self.errors.items())])
