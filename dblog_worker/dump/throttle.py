"""Automatic throttling: a dump slows down by itself when the source is under pressure.

A request's :class:`ThrottlePolicy` sets a limit on some signals (0: that signal is off):
the wall time of a window's chunk SELECT, the source's active sessions, the read
replica's replay lag, and the worker's own lag reading the log. After each window, and
about once a second while it waits for the next one, the dump's :class:`Throttle` reads
them and decides how long the next window waits beyond the request's delay:

- a signal over its limit (after a window): twice as long, at least ``FLOOR_MS``, at most
  ``MAX_THROTTLE_MS``; the reason names the signal furthest over its limit;
- every signal under ``EASE_BELOW`` of its limit: a quarter shorter, down to nothing;
- in between: as it is (no see-saw around a limit).

Only the opening of the next window waits: the log streams all along, and progress,
durability and the order of events are those of any window.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields

from dblog_worker.errors import RequestRejected

FLOOR_MS = 100.0  # the first step up
MAX_THROTTLE_MS = 30_000.0  # the most a window waits beyond the request's delay
EASE_BELOW = 0.8  # every signal under this share of its limit: the delay eases
EASE_FACTOR = 0.75  # ... by a quarter each time
SAMPLE_S = 1.0  # source signals are read at most this often, outside any window
MB = 1024 * 1024

# policy field: (largest value, unit, what it limits)
LIMITS: Mapping[str, tuple[int, str, str]] = {
    "max_chunk_ms": (3_600_000, "milliseconds", "a window's chunk SELECT wall time"),
    "max_active_sessions": (100_000, "sessions", "the source's active sessions, the "
                                                 "worker's own left out"),
    "max_replica_lag_ms": (86_400_000, "milliseconds", "the read replica's replay lag"),
    "max_log_lag_mb": (1_048_576, "MiB", "the worker's lag reading the log"),
}
RECORD_PREFIX = "throttle_"  # the fields of a request's hash in Redis: throttle_max_chunk_ms


def check_limit(name: str, value: object) -> int:
    """A limit as a user gives it: RequestRejected with the range and what it limits."""
    if name not in LIMITS:
        raise RequestRejected(f"unknown throttle limit {name!r}: the limits are "
                              f"{', '.join(LIMITS)}")
    high, unit, what = LIMITS[name]
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= high:
        raise RequestRejected(f"throttle {name} ({what}) must be an integer number of {unit} "
                              f"from 0 (off) to {high}, got {value!r}")
    return value


@dataclass(frozen=True, slots=True)
class ThrottlePolicy:
    """The limits of one dump request; 0 turns a signal off, all 0 the throttle."""

    max_chunk_ms: int = 0
    max_active_sessions: int = 0
    max_replica_lag_ms: int = 0
    max_log_lag_mb: int = 0

    def __post_init__(self) -> None:
        for name, value in self.limits().items():
            check_limit(name, value)

    @classmethod
    def of(cls, given: Mapping[str, object] | None) -> ThrottlePolicy:
        """A policy from a front end's values (a JSON object, a form): limits left out are
        off; RequestRejected for an unknown name or a bad value."""
        if given is None:
            return cls()
        if not isinstance(given, Mapping):
            raise RequestRejected(f"throttle must be an object of limits ({', '.join(LIMITS)}),"
                                  f" got {given!r}")
        return cls(**{name: check_limit(name, value) for name, value in given.items()})

    def limits(self) -> dict[str, int]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @property
    def on(self) -> bool:
        return any(self.limits().values())

    def to_fields(self) -> dict[str, str]:
        """The limits that are on, as a request's hash holds them (the others read as off)."""
        return {RECORD_PREFIX + name: str(value) for name, value in self.limits().items()
                if value}

    @classmethod
    def from_fields(cls, record: Mapping[str, str],
                    bad: Callable[[str, str], Exception]) -> ThrottlePolicy:
        """The policy a request's hash holds; a limit left out is off (requests written
        before the throttle existed). ``bad(field, reason)`` is raised for a bad value."""
        values = {}
        for name in LIMITS:
            field = RECORD_PREFIX + name
            text = record.get(field, "0")
            if not text.isascii() or not text.isdigit() or len(text) > 12:
                raise bad(field, f"is {text[:80]!r}, not an integer")
            try:
                values[name] = check_limit(name, int(text))
            except RequestRejected as exc:
                raise bad(field, str(exc)) from None
        return cls(**values)

    def describe(self) -> str:
        """The limits that are on, as `dblog show` prints them."""
        parts = []
        if self.max_chunk_ms:
            parts.append(f"chunk SELECT <= {self.max_chunk_ms} ms")
        if self.max_active_sessions:
            parts.append(f"active sessions <= {self.max_active_sessions}")
        if self.max_replica_lag_ms:
            parts.append(f"replica lag <= {self.max_replica_lag_ms} ms")
        if self.max_log_lag_mb:
            parts.append(f"log lag <= {self.max_log_lag_mb} MiB")
        return ", ".join(parts) if parts else "off"

    @classmethod
    def record_fields(cls) -> tuple[str, ...]:
        return tuple(RECORD_PREFIX + name for name in LIMITS)


NO_THROTTLE = ThrottlePolicy()


@dataclass(frozen=True, slots=True)
class Signals:
    """What the throttle read; None where it did not (off, or not known)."""

    chunk_ms: float | None = None
    active_sessions: int | None = None
    replica_lag_ms: float | None = None
    log_lag_bytes: int | None = None


@dataclass(frozen=True, slots=True)
class Reading:
    """One signal against its limit."""

    signal: str  # chunk_ms, active_sessions, replica_lag_ms, log_lag
    value: float
    limit: float
    text: str  # "chunk SELECT 412 ms", "37 active sessions"
    unit: str  # " ms", "", " MiB"

    @property
    def ratio(self) -> float:
        return self.value / self.limit

    def __str__(self) -> str:
        op = ">" if self.value > self.limit else "<="
        limit = f"{self.limit:.0f}" if self.limit >= 10 else f"{self.limit:g}"
        return f"{self.text} {op} {limit}{self.unit}"


def readings(policy: ThrottlePolicy, signals: Signals) -> list[Reading]:
    """The signals the policy limits and that were read."""
    out = []
    if policy.max_chunk_ms and signals.chunk_ms is not None:
        out.append(Reading("chunk_ms", signals.chunk_ms, policy.max_chunk_ms,
                           f"chunk SELECT {signals.chunk_ms:.0f} ms", " ms"))
    if policy.max_active_sessions and signals.active_sessions is not None:
        out.append(Reading("active_sessions", signals.active_sessions,
                           policy.max_active_sessions,
                           f"{signals.active_sessions} active session"
                           f"{'' if signals.active_sessions == 1 else 's'}", ""))
    if policy.max_replica_lag_ms and signals.replica_lag_ms is not None:
        out.append(Reading("replica_lag_ms", signals.replica_lag_ms, policy.max_replica_lag_ms,
                           f"replica lag {signals.replica_lag_ms:.0f} ms", " ms"))
    if policy.max_log_lag_mb and signals.log_lag_bytes is not None:
        mib = signals.log_lag_bytes / MB
        out.append(Reading("log_lag", mib, policy.max_log_lag_mb,
                           f"log lag {mib:.1f} MiB", " MiB"))
    return out


class Throttle:
    """The delay a running dump adds before its next window, and why (AIMD-like)."""

    def __init__(self) -> None:
        self.delay_ms = 0.0
        self.reason = ""  # what the last decision saw: "chunk SELECT 412 ms > 100 ms"
        self.over: tuple[str, ...] = ()  # the signals over their limit
        self.readings: list[Reading] = []

    def decide(self, policy: ThrottlePolicy, signals: Signals, *, window: bool) -> float:
        """The new delay after a window closed (``window``) or while waiting for the next
        one (then it only holds or eases: the chunk SELECT is measured by windows)."""
        if not policy.on:
            self.delay_ms, self.reason, self.over, self.readings = 0.0, "", (), []
            return 0.0
        self.readings = readings(policy, signals)
        over = sorted((r for r in self.readings if r.value > r.limit),
                      key=lambda r: r.ratio, reverse=True)
        self.over = tuple(r.signal for r in over)
        if over:
            if window:
                self.delay_ms = min(MAX_THROTTLE_MS, max(FLOOR_MS, self.delay_ms * 2))
            self.reason = str(over[0])
        elif all(r.ratio < EASE_BELOW for r in self.readings):
            self.delay_ms *= EASE_FACTOR
            if self.delay_ms < FLOOR_MS / 2:
                self.delay_ms = 0.0
            self.reason = "" if not self.delay_ms else "easing: every signal under its limit"
        else:
            near = max(self.readings, key=lambda r: r.ratio)
            self.reason = "" if not self.delay_ms else f"holding: {near}"
        return self.delay_ms

    def describe(self) -> str:
        """The decision as `dblog show` prints it: ``+800 ms (chunk SELECT 412 ms > 100 ms)``;
        without a delay, what the signals read (``none (chunk SELECT 12 ms)``)."""
        if self.delay_ms:
            return f"+{self.delay_ms:.0f} ms" + (f" ({self.reason})" if self.reason else "")
        seen = self.reason or ", ".join(r.text for r in self.readings)
        return "none" + (f" ({seen})" if seen else "")
