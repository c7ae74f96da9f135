"""A dump request read, and steered (:meth:`AsyncRequests.command`), with
``redis.asyncio``: for callers that run in an event loop they must not block (Airflow's
triggerer). The same keys, checks and errors as
:class:`~dblog_worker.state.StateStore`: a malformed record is :class:`CorruptRequest`,
Redis unreachable is :class:`StateUnavailable`, an unknown id :class:`RequestRejected`."""

from __future__ import annotations

from typing import Any, cast

import redis
import redis.asyncio
from redis.client import NEVER_DECODE

from dblog_worker.errors import CorruptRequest, RequestRejected
from dblog_worker.redis_store import NAMESPACE, redis_errors
from dblog_worker.request_store import (
    _TRANSITION,
    parse_progress,
    parse_request,
    transition_args,
)
from dblog_worker.requests import COMMANDS, DumpRequest, RequestState, TableProgress

__all__ = ["AsyncRequests"]


class AsyncRequests:
    """One source's dump requests and worker status, through an asyncio Redis client."""

    def __init__(self, url: str, source: str, *, socket_timeout: float = 5.0) -> None:
        self.source = source
        self.prefix = f"{NAMESPACE}:{source}:"
        self.redis: redis.asyncio.Redis = redis.asyncio.Redis.from_url(
            url, decode_responses=True, socket_timeout=socket_timeout,
            socket_connect_timeout=socket_timeout, health_check_interval=30,
        )
        self._transition = self.redis.register_script(_TRANSITION)

    def key(self, *parts: str) -> str:
        return self.prefix + ":".join(parts)

    async def _hash(self, key: str) -> Any:
        """``HGETALL`` as bytes; the error itself when the key is no hash."""
        with redis_errors():
            try:
                return await self.redis.execute_command(  # type: ignore[no-untyped-call]
                    "HGETALL", key, **{NEVER_DECODE: True})
            except redis.ResponseError as exc:
                return exc

    async def get_request(self, request_id: str) -> DumpRequest:
        """The request, checked, as :meth:`StateStore.get_request` reads it."""
        key = self.key("request", request_id)
        request = parse_request(key, request_id, await self._hash(key), listed=False)
        if request is None:
            raise RequestRejected(f"no dump request {request_id!r} for source "
                                  f"{self.source!r}; `dblog list` shows the known ones")
        return request

    async def progress(self, request_id: str) -> dict[str, TableProgress]:
        key = self.key("request", request_id, "progress")
        reply = await self._hash(key)
        if isinstance(reply, redis.ResponseError):
            raise CorruptRequest(request_id, key, "", f"is not a hash ({reply})")
        return parse_progress(key, request_id, reply)

    async def status(self) -> dict[str, str]:
        """The worker's status hash (the leader's ``http`` among its fields)."""
        with redis_errors():
            return cast(dict[str, str], await self.redis.hgetall(self.key("worker")))

    async def command(self, request_id: str, name: str) -> RequestState | None:
        """Pause, resume or cancel the request (``name``) if its state allows it; the state
        it was in, None if it does not (a cancel of a request that has ended)."""
        target, only_from = COMMANDS[name]
        with redis_errors():
            result = await self._transition(
                keys=[self.key("request", request_id), self.key("active"), ""],
                args=transition_args(target, None, None, only_from))
        outcome, previous = cast(list[str], result)
        if outcome == "missing":
            raise RequestRejected(f"no dump request {request_id!r} for source "
                                  f"{self.source!r}; `dblog list` shows the known ones")
        return None if outcome == "refused" else RequestState(previous)

    async def close(self) -> None:
        await self.redis.aclose()
