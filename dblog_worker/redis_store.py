"""The Redis side of the control plane that every part of it shares: one source's key
prefix, the connection, fenced transactional writes, the layout version, and what is
read back decoded and checked. :class:`~dblog_worker.state.StateStore` builds on it."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import redis
from redis.client import NEVER_DECODE

from dblog_worker.errors import ConfigError, LeaseLost, StateUnavailable

NAMESPACE = "dblog:v1"  # every key's prefix, the same for every layout version so far
LAYOUT_VERSION = 2  # what the records look like: meta's ``layout``, migrated step by step


def as_str(value: object) -> str:
    return value if isinstance(value, str) else str(value)


def fields_of(mapping: Mapping[str, str]) -> Any:
    """A str mapping for redis-py, whose stubs want a wider key type."""
    return dict(mapping)


def decode(raw: object) -> str:
    """Bytes read with NEVER_DECODE as text; ValueError if they are not UTF-8."""
    if not isinstance(raw, bytes):
        return str(raw)
    try:
        return raw.decode()
    except UnicodeDecodeError:
        raise ValueError(f"{raw[:60]!r} is not UTF-8 text") from None


def decode_hash(raw: Mapping[Any, Any], bad: Callable[[str, str], Exception]
                 ) -> dict[str, str]:
    """A hash read with NEVER_DECODE as text; ``bad(field, reason)`` names what is not UTF-8."""
    decoded = {}
    for raw_name, raw_value in raw.items():
        try:
            name = decode(raw_name)
        except ValueError as exc:
            raise bad("", f"a field's name {exc}") from None
        try:
            decoded[name] = decode(raw_value)
        except ValueError as exc:
            raise bad(name, str(exc)) from None
    return decoded


def shown(raw: Mapping[Any, Any]) -> dict[str, str]:
    """A hash as text to show, whatever its bytes."""
    def text(value: object) -> str:
        return value.decode(errors="backslashreplace") if isinstance(value, bytes) else str(
            value)
    return {text(name): text(value) for name, value in raw.items()}


def unreachable(exc: BaseException) -> str:
    """Why Redis could not be reached, on one line, and where to look."""
    reason = " ".join(str(exc).split()).rstrip(".")
    return (f"Redis is unreachable: {reason} (check that it runs, and that [redis] url, or "
            "the variable [redis] url_env names, points at it)")


@contextmanager
def redis_errors() -> Iterator[None]:
    """Redis unreachable (refused, reset, timed out) or read-only (a replica: a failover
    under way) becomes StateUnavailable: the caller tries again later."""
    try:
        yield
    except (redis.ConnectionError, redis.TimeoutError) as exc:
        raise StateUnavailable(unreachable(exc)) from exc
    except redis.ReadOnlyError as exc:
        raise StateUnavailable(f"Redis is a read-only replica (point [redis] at the primary, "
                               f"or wait for the failover to end): {exc}") from exc


OLDER_LAYOUTS = ("1",)  # layouts this dblog migrates to LAYOUT_VERSION


class RedisStore:
    """One source's keys in Redis, and writes fenced by the leader's lease token."""

    def __init__(self, url: str, source: str, *, socket_timeout: float = 5.0) -> None:
        self.source = source
        self.prefix = f"{NAMESPACE}:{source}:"
        self.redis: redis.Redis = redis.Redis.from_url(
            url, decode_responses=True, socket_timeout=socket_timeout,
            socket_connect_timeout=socket_timeout, health_check_interval=30,
        )
        self._fence: int | None = None

    def key(self, *parts: str) -> str:
        return self.prefix + ":".join(parts)

    def fence(self, token: int) -> None:
        """From now on, write only while the lease carries ``token`` (else LeaseLost)."""
        self._fence = token

    def _write(self, fill: Callable[[Any], object]) -> list[Any]:
        """Run the commands ``fill`` queues as one transaction, fenced if this store is."""
        with redis_errors():
            if self._fence is None:
                pipe = self.redis.pipeline(transaction=True)
                fill(pipe)
                return pipe.execute()
            lease = self.key("lease")
            try:
                with self.redis.pipeline(transaction=True) as pipe:
                    pipe.watch(lease)  # type: ignore[no-untyped-call]
                    holder = pipe.hget(lease, "token")
                    if holder != str(self._fence):
                        raise LeaseLost(self._fenced_out(holder))
                    pipe.multi()
                    fill(pipe)
                    return pipe.execute()
            except redis.WatchError as exc:
                # redis-py raises WatchError also when the connection drops while watching
                lost = exc.__context__
                if isinstance(lost, (redis.ConnectionError, redis.TimeoutError)):
                    raise StateUnavailable(unreachable(lost)) from exc
                raise LeaseLost(self._fenced_out(None)) from None

    def _fenced_out(self, holder: object) -> str:
        now = "nobody holds it" if holder is None else f"token {holder} holds it"
        return (f"a write of token {self._fence} was refused: the lease changed hands "
                f"({now} now)")

    def close(self) -> None:
        self.redis.close()

    def _raw(self, *command: str | int) -> Any:
        """One read whose answer stays bytes, for the caller to decode and check."""
        with redis_errors():
            return self.redis.execute_command(  # type: ignore[no-untyped-call]
                *command, **{NEVER_DECODE: True})

    # -- layout ---------------------------------------------------------------

    def has_layout(self) -> bool:
        with redis_errors():
            return bool(self.redis.exists(self.key("meta")))

    def ensure_layout(self) -> None:
        """Create the layout on first use; migrate an older one, one version at a time
        (:meth:`_migrate`); refuse a layout this dblog does not know (a newer dblog's)."""
        with redis_errors():
            pipe = self.redis.pipeline(transaction=True)
            pipe.hsetnx(self.key("meta"), "layout", str(LAYOUT_VERSION))
            pipe.hsetnx(self.key("meta"), "created_at", repr(time.time()))
            pipe.hget(self.key("meta"), "layout")
            found = pipe.execute()[-1]
        while found != str(LAYOUT_VERSION):
            if found not in OLDER_LAYOUTS:
                raise ConfigError(
                    f"Redis holds state of layout {found!r} for source {self.source!r}; this "
                    f"dblog reads layout {LAYOUT_VERSION} (and migrates layouts "
                    f"{', '.join(OLDER_LAYOUTS)}). Upgrade dblog, or use another Redis "
                    "database or source name."
                )
            self._migrate(int(found))
            with redis_errors():
                found = self.redis.hget(self.key("meta"), "layout")

    def _migrate(self, version: int) -> None:
        """Rewrite the records of layout ``version`` as the next layout has them and set
        ``layout`` to it, atomically (a store that knows the records overrides this)."""
        raise ConfigError(f"Redis holds state of layout {version} for source "
                          f"{self.source!r}, which this part of dblog cannot migrate")
