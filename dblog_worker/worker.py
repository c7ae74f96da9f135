"""The capture worker: leads its source (or stands by), and runs sessions until stopped.

A session (:mod:`dblog_worker.session`) runs only while the worker holds the source's
lease (:mod:`dblog_worker.lease`); the session's loop renews it, and every write carries
its token. A worker without the lease stands by and takes over once the lease expires.
A session that ends on a transient failure is followed by another, after a back-off.
SIGTERM ends the session cleanly: no new window, the open one closed (or abandoned after
a few seconds: its chunk is read again), the output flushed, the checkpoint saved, the
lease released. SIGHUP (or ``POST /api/v1/reload``) reads the configuration file again
(:mod:`dblog_worker.reload`): once it is accepted, the session ends the same way and the
next one starts at once with it, the lease kept.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType

from dblog_worker import reload as reload_module
from dblog_worker.config import Config
from dblog_worker.dialect import open_source
from dblog_worker.errors import DblogError, LeaseLost, StateUnavailable, TransientError
from dblog_worker.http.server import ControlServer
from dblog_worker.landing.sink import open_sink
from dblog_worker.lease import Lease
from dblog_worker.reload import ReloadResult
from dblog_worker.schemas import SchemaRegistry
from dblog_worker.session import Session
from dblog_worker.source import SchemaVersion, Source
from dblog_worker.telemetry import Telemetry

log = logging.getLogger(__name__)

SourceFactory = Callable[[Config, SchemaVersion], Source]


def default_source(config: Config, schema_version: SchemaVersion) -> Source:
    return open_source(config.source, schema_version)


class Worker:
    def __init__(
        self, config: Config, *, adopt_slot: bool = False, source: SourceFactory = default_source,
        config_path: Path | None = None,
    ) -> None:
        self.config = config
        self.config_path = config_path  # read again on SIGHUP and POST /api/v1/reload
        self.pending: Config | None = None  # a reloaded configuration, for the next session
        self._reloading = threading.Lock()
        self._http: ControlServer | None = None
        self.adopt_slot = adopt_slot
        self.source_factory = source
        self.sink = open_sink(config.landing_path, config.source.name, config.landing_format)
        self.schemas = SchemaRegistry(self.sink)
        self.stopping = False
        self.sessions = 0
        self.telemetry = Telemetry(config.source.name, kind=config.source.kind)
        self.http_url = ""  # where the HTTP API listens, once it does
        self.lease = Lease(config.redis_url, config.source.name, ttl_s=config.lease.ttl_s)
        self._member_at = 0.0
        self._member_role = ""

    # -- lifetime ---------------------------------------------------------------

    def run_forever(self, *, handle_signals: bool = True) -> None:
        """Serve the HTTP API (unless disabled) while the sessions run."""
        http = None
        if self.config.http.enabled:  # refuses to start if it cannot listen
            http = ControlServer(self.config, self.telemetry, self.reload).start()
            self.http_url = http.url
            self._http = http
        try:
            self._run_sessions(handle_signals=handle_signals)
        finally:
            led = self.lease.token is not None
            self.lease.release()
            self.lease.forget_member()
            self.lease.close()
            self.telemetry.role("stopped", None)
            if led:
                log.info("lease released")
            if http is not None:
                http.stop()

    def _run_sessions(self, *, handle_signals: bool) -> None:
        """Lead (or stand by until it may), run sessions; back off on transient failures."""
        if handle_signals:
            signal.signal(signal.SIGTERM, self._stop)
            signal.signal(signal.SIGINT, self._stop)
            signal.signal(signal.SIGHUP, self._reload_signal)
        delay = 0.5
        while not self.stopping and self._lead():
            started = time.monotonic()
            self.sessions += 1
            self._take_reloaded()
            try:
                Session(self).run()
                self.telemetry.session_ended(None)
            except LeaseLost as exc:
                self.telemetry.session_ended(exc)
                log.warning("lease lost: %s; standing by", exc)
                self.lease.token = None
                self.telemetry.role("standby", None)
                self._sleep(self.config.lease.standby_poll_s)
            except TransientError as exc:
                self.telemetry.session_ended(exc)
                if time.monotonic() - started > 60:
                    delay = 0.5
                log.warning("session ended: %s; retrying in %.1f s", " ".join(str(exc).split()),
                            delay)
                self._sleep(delay, renew=True)
                delay = min(delay * 2, self.config.reconnect_max_s)
            except DblogError as exc:
                self.telemetry.session_ended(exc)
                raise

    def _lead(self) -> bool:
        """Hold the lease: keep it, take it, or stand by until it is free. False at a stop."""
        seen: tuple[str, str] | None = None
        while not self.stopping:
            try:
                token = self.lease.acquire(min_token=self._min_token(), http=self.http_url)
                if token is not None:
                    if not self.telemetry.is_leader:
                        log.info("lease acquired: token %d", token)
                    self.telemetry.role("leader", token)
                    return True
                current = self.lease.current()
                holder = (current.get("holder", ""), current.get("token", ""))
                if self.telemetry.is_leader:  # a session ended before the loop noticed
                    log.warning("lease lost: another worker took over; standing by")
                if holder != seen:
                    log.info("standing by: lease held by %s (token %s)", *holder)
                    seen = holder
                self.telemetry.role("standby", None, current)
                self.publish_member("standby")
            except StateUnavailable as exc:
                if seen != ("", "unreachable"):
                    log.warning("cannot read the lease: %s; trying again", exc)
                    seen = ("", "unreachable")
            self._sleep(self.config.lease.standby_poll_s)
        return False

    def _min_token(self) -> int:
        """Tokens only grow, even if Redis lost its counter: past the landing zone's writers."""
        try:
            return max(self.sink.writer_tokens(), default=0) + 1
        except OSError:
            return 0

    def publish_member(self, role: str) -> None:
        """This worker's entry in the members list: at a new role, then once a status
        interval."""
        now = time.monotonic()
        if role != self._member_role or now - self._member_at >= self.config.status_interval_s:
            self._member_at, self._member_role = now, role
            self.lease.publish_member(role, self.http_url,
                                      max(5.0, 3 * self.config.status_interval_s))

    # -- reload ---------------------------------------------------------------

    @property
    def ending(self) -> bool:
        """The session should end: the worker stops, or a reloaded configuration waits."""
        return self.stopping or self.pending is not None

    def reload(self) -> ReloadResult:
        """Read the configuration file again; once accepted (checked against the source),
        the session ends and the next one runs with it. One reload at a time."""
        if self.config_path is None:
            return ReloadResult(False, reason="reload refused: this worker was not started "
                                "from a configuration file")
        with self._reloading:
            current = self.pending or self.config
            result, new = reload_module.reload(self.config_path, current)
            if new is not None:
                self.pending = new
            (log.info if result.accepted else log.warning)("%s", result.describe())
            return result

    def _take_reloaded(self) -> None:
        with self._reloading:
            if self.pending is None:
                return
            self.config, self.pending = self.pending, None
            if self._http is not None:
                self._http.api.config = self.config
            log.info("running with the reloaded configuration: tables %s",
                     ", ".join(self.config.source.tables))

    def _reload_signal(self, signum: int, frame: FrameType | None) -> None:
        threading.Thread(target=self.reload, name="dblog-reload", daemon=True).start()

    def _stop(self, signum: int, frame: FrameType | None) -> None:
        if self.stopping:
            log.error("signal %s again: exiting now, without a final flush", signum)
            os._exit(1)
        log.info("signal %s: stopping after the current step", signum)
        self.stopping = True
        watchdog = threading.Timer(self.config.shutdown_timeout_s, self._overdue)
        watchdog.daemon = True
        watchdog.start()

    def _overdue(self) -> None:
        log.error("the worker did not stop within %.0f s (worker.shutdown_timeout_s): exiting "
                  "without a final flush; the next leader goes on from the saved checkpoint",
                  self.config.shutdown_timeout_s)
        os._exit(1)

    def _sleep(self, seconds: float, *, renew: bool = False) -> None:
        end = time.monotonic() + seconds
        renewed = time.monotonic()
        while not self.stopping and time.monotonic() < end:
            time.sleep(min(0.1, max(0.0, end - time.monotonic())))
            if renew and time.monotonic() - renewed >= self.config.lease.renew_interval_s:
                renewed = time.monotonic()
                try:  # between sessions the lease is kept; lost, the next _lead says so
                    self.lease.renew()
                except (LeaseLost, StateUnavailable):
                    return
