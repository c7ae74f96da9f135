"""The session's side of automatic throttling (:mod:`dblog_worker.dump.throttle`): when each
running dump's throttle decides, and the signals it reads for them.

A dump's throttle decides after every window of it that closed and, while the dump waits
for its next window, about once a second. The signals are read once for every dump: the
source at most every ``SAMPLE_S`` (active sessions, the replica's lag, the log lag), on
the worker's own connections, between windows (the session never calls this between a
window's LW and HW). A signal that cannot be read (a privilege missing, the replica
unreachable) is left out and said once in the log; a source that is gone ends the session
as any other query would.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Protocol

from dblog_worker.dump.active import ActiveDump
from dblog_worker.dump.throttle import SAMPLE_S, Signals
from dblog_worker.errors import TransientError
from dblog_worker.source import Pressure

log = logging.getLogger(__name__)


class Lagging(Protocol):
    """The worker's log reader, as the throttle reads it: how far behind the log it is."""

    def lag_bytes(self) -> int: ...


class Pacer:
    """Reads the signals and has each running dump's throttle decide."""

    def __init__(self, pressure: Pressure, log: Lagging) -> None:
        self.pressure = pressure
        self.log = log
        self.decided_at: dict[str, float] = {}  # per dump
        self.read_at = -math.inf
        self.sessions: int | None = None
        self.replica_lag_ms: float | None = None
        self.log_lag: int | None = None
        self.failed = ""  # why the last reading failed, logged once

    def due(self, dump: ActiveDump, now: float) -> bool:
        return dump.runnable and (dump.unpaced
                                  or now - self.decided_at.get(dump.id, 0.0) >= SAMPLE_S)

    def forget(self, dump_id: str) -> None:
        self.decided_at.pop(dump_id, None)

    def pace(self, dump: ActiveDump, now: float) -> None:
        """The throttle's decision: after a window closed (``dump.unpaced``: it may step
        up), or while the dump waits (it may only hold or ease)."""
        policy = dump.request.throttle
        window, dump.unpaced, self.decided_at[dump.id] = dump.unpaced, False, now
        if not policy.on and not dump.throttle.delay_ms and not dump.throttle.reason:
            return
        if now - self.read_at >= SAMPLE_S:
            self.read_at = now
            sessions = self._read(self.pressure.active_sessions, policy.max_active_sessions)
            self.sessions = None if sessions is None else int(sessions)
            self.replica_lag_ms = self._read(self.pressure.replica_lag_ms,
                                             policy.max_replica_lag_ms)
            self.log_lag = self.log.lag_bytes() if policy.max_log_lag_mb else None
        dump.throttle.decide(policy, Signals(
            chunk_ms=dump.chunk_ms,
            active_sessions=self.sessions if policy.max_active_sessions else None,
            replica_lag_ms=self.replica_lag_ms if policy.max_replica_lag_ms else None,
            log_lag_bytes=self.log_lag if policy.max_log_lag_mb else None,
        ), window=window)

    def _read(self, read: Callable[[], float | None], limit: int) -> float | None:
        if not limit:
            return None
        try:
            return read()
        except TransientError:
            raise
        except Exception as exc:  # the throttle reads; it never stops the dump
            if str(exc) != self.failed:
                log.warning("throttle: %s cannot be read, left out: %s",
                            read.__name__.replace("_", " "), exc)
                self.failed = str(exc)
            return None
