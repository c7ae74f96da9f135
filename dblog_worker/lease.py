"""The leader lease: one worker of a source leads, the others stand by.

Any number of workers may run for one source. The one holding the lease in Redis
streams the log, runs the dumps and writes the landing zone and the state; the others
poll the lease and take it once it has expired (the leader died, lost Redis, or was
paused for longer than the lease). Keys, under ``dblog:v1:<source>:``::

    lease           hash    holder, token, host, pid, http, acquired_at; expires
                            ``ttl_s`` after the leader's last renewal
    lease:epoch     int     the last token given
    members         zset    holder -> last seen (unix seconds)
    member:<holder> hash    role, host, pid, http, token, updated_at; expires

Each acquisition gives a new **token**, one more than the last (the fencing token).
Every write of the leader carries it: Redis writes check it against the lease
(:meth:`dblog_worker.state.StateStore.fence`) and landing segments are published
through the token's writer directory (:meth:`dblog_worker.landing.sink.Sink.fence`),
so a worker that lost the lease cannot change anything once another has taken over.
The lease is renewed by the capture loop itself: a leader whose loop is stuck stops
renewing, and a standby takes over.
"""

from __future__ import annotations

import logging
import os
import socket
import time
import uuid
from typing import cast

import redis

from dblog_worker.errors import LeaseLost, StateUnavailable
from dblog_worker.state import NAMESPACE, redis_errors

log = logging.getLogger(__name__)

_ACQUIRE = """
local holder = redis.call('HGET', KEYS[1], 'holder')
if holder == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return tonumber(redis.call('HGET', KEYS[1], 'token'))
end
if holder then return 0 end
local token = redis.call('INCR', KEYS[2])
if token < tonumber(ARGV[3]) then
  token = tonumber(ARGV[3])
  redis.call('SET', KEYS[2], token)
end
redis.call('HSET', KEYS[1], 'holder', ARGV[1], 'token', token, 'host', ARGV[4],
           'pid', ARGV[5], 'http', ARGV[6], 'acquired_at', ARGV[7])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return token
"""

_RENEW = """
if redis.call('HGET', KEYS[1], 'holder') == ARGV[1]
   and redis.call('HGET', KEYS[1], 'token') == ARGV[2] then
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  return 1
end
return 0
"""

_RELEASE = """
if redis.call('HGET', KEYS[1], 'holder') == ARGV[1]
   and redis.call('HGET', KEYS[1], 'token') == ARGV[2] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""


def new_holder_id() -> str:
    """A worker's id in the lease: host, process and a random part (pids are reused)."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class Lease:
    """This worker's side of the lease of one source."""

    def __init__(self, url: str, source: str, *, ttl_s: float, holder: str | None = None
                 ) -> None:
        self.prefix = f"{NAMESPACE}:{source}:"
        self.key = self.prefix + "lease"
        self.ttl_ms = max(1, round(ttl_s * 1000))
        self.holder = holder or new_holder_id()
        self.token: int | None = None  # while this worker holds the lease
        timeout = min(2.0, max(0.2, ttl_s / 3))  # a hung Redis must not outlast the lease
        self.redis: redis.Redis = redis.Redis.from_url(
            url, decode_responses=True, socket_timeout=timeout, socket_connect_timeout=timeout,
        )
        self._acquire = self.redis.register_script(_ACQUIRE)
        self._renew = self.redis.register_script(_RENEW)
        self._release = self.redis.register_script(_RELEASE)

    def close(self) -> None:
        self.redis.close()

    def acquire(self, *, min_token: int = 0, http: str = "") -> int | None:
        """Take the lease if it is free (or keep it if this worker holds it): the token,
        at least ``min_token``; None while another worker holds it."""
        with redis_errors():
            token = int(cast(int, self._acquire(
                keys=[self.key, self.prefix + "lease:epoch"],
                args=[self.holder, self.ttl_ms, min_token, socket.gethostname(), os.getpid(),
                      http, repr(time.time())],
            )))
        self.token = token or None
        return self.token

    def renew(self) -> None:
        """Extend the lease; LeaseLost if another worker holds it now (or it expired)."""
        if self.token is None:
            raise LeaseLost("this worker does not hold the lease")
        with redis_errors():
            kept = self._renew(keys=[self.key], args=[self.holder, self.token, self.ttl_ms])
        if not kept:
            token, self.token = self.token, None
            raise LeaseLost(f"the lease of token {token} expired or was taken over "
                            f"({self.describe_holder()})")

    def release(self) -> None:
        """Give the lease up at once (a clean stop): a standby need not wait for it to expire."""
        if self.token is None:
            return
        token, self.token = self.token, None
        try:
            self._release(keys=[self.key], args=[self.holder, token])
        except redis.RedisError as exc:
            log.warning("could not release the lease (it expires by itself): %s", exc)

    def current(self) -> dict[str, str]:
        """The lease as Redis holds it ({} when nobody holds it)."""
        with redis_errors():
            return cast(dict[str, str], self.redis.hgetall(self.key))

    def describe_holder(self) -> str:
        try:
            current = self.current()
        except StateUnavailable:
            return "holder unknown: Redis is unreachable"
        if not current:
            return "nobody holds it now"
        return f"held by {current.get('holder')} with token {current.get('token')}"

    def publish_member(self, role: str, http: str, ttl_s: float) -> None:
        """This worker's own entry in the members list (leader or standby)."""
        now = time.time()
        member = self.prefix + "member:" + self.holder
        fields = {"role": role, "host": socket.gethostname(), "pid": str(os.getpid()),
                  "http": http, "token": str(self.token or ""), "updated_at": repr(now)}
        with redis_errors():
            pipe = self.redis.pipeline(transaction=True)
            pipe.hset(member, mapping=fields)  # type: ignore[arg-type]
            pipe.pexpire(member, max(1, round(ttl_s * 1000)))
            pipe.zadd(self.prefix + "members", {self.holder: now})
            pipe.zremrangebyscore(self.prefix + "members", "-inf", now - 3600)
            pipe.execute()

    def forget_member(self) -> None:
        """Leave the members list at a stop; with Redis unreachable the entry expires."""
        try:
            pipe = self.redis.pipeline(transaction=True)
            pipe.delete(self.prefix + "member:" + self.holder)
            pipe.zrem(self.prefix + "members", self.holder)
            pipe.execute()
        except redis.RedisError as exc:
            log.warning("could not leave the members list (the entry expires by itself "
                        "within a few status intervals): %s", exc)

