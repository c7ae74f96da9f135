"""Dump requests in Redis: created once per client token, moved through their states by
one Lua script that checks :data:`~dblog_worker.requests.TRANSITIONS`, their knobs, keys,
missing keys and progress, every record checked as it is read back."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any, cast

import redis
from redis.client import NEVER_DECODE

from dblog_worker.errors import CorruptRequest, LeaseLost, RequestRejected
from dblog_worker.redis_store import (
    RedisStore,
    as_str,
    decode,
    decode_hash,
    fields_of,
    redis_errors,
    shown,
)
from dblog_worker.requests import (
    QUEUE_NUMBERS,
    DumpKind,
    DumpRequest,
    KeyTexts,
    MalformedRequest,
    Priority,
    RequestState,
    TableProgress,
    check_chunk_size,
    check_delay_ms,
    check_parallelism,
    key_record,
    queue_score,
    sources_of,
)
from dblog_worker.row_filter import RowFilter
from dblog_worker.throttle import NO_THROTTLE, RECORD_PREFIX, ThrottlePolicy, check_limit

log = logging.getLogger(__name__)

_TRANSITION = """
if KEYS[3] ~= '' and redis.call('HGET', KEYS[3], 'token') ~= ARGV[5] then return {'fenced', ''} end
local state = redis.call('HGET', KEYS[1], 'state')
if not state then return {'missing', ''} end
for i = 6, #ARGV do
  if ARGV[i] == state then
    redis.call('HSET', KEYS[1], 'state', ARGV[1], 'updated_at', ARGV[2])
    if ARGV[3] ~= '' then redis.call('HSET', KEYS[1], 'error', ARGV[3]) end
    if ARGV[4] == '1' then redis.call('ZREM', KEYS[2], redis.call('HGET', KEYS[1], 'id')) end
    return {'ok', state}
  end
end
return {'refused', state}
"""

# A request whose record is malformed leaves the queue whatever its fields hold (the
# transition script refuses a state it does not know): failed, with the error; one that
# has ended already keeps its state; a key that is not a hash is left as it is.
_QUARANTINE = """
if KEYS[3] ~= '' and redis.call('HGET', KEYS[3], 'token') ~= ARGV[4] then return 'fenced' end
redis.call('ZREM', KEYS[2], ARGV[1])
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind ~= 'hash' then return kind end
local state = redis.call('HGET', KEYS[1], 'state')
if state == 'completed' or state == 'failed' or state == 'cancelled' then return 'ended' end
redis.call('HSET', KEYS[1], 'state', 'failed', 'updated_at', ARGV[2], 'error', ARGV[3])
return 'failed'
"""

# Knobs change together; a new priority also moves the request in the queue (``active``
# is scored by priority rank, then number: requests.queue_score).
_SET_KNOBS = """
local state = redis.call('HGET', KEYS[1], 'state')
if not state then return {'missing', ''} end
if state == 'completed' or state == 'failed' or state == 'cancelled' then
  return {'refused', state}
end
for i = 4, #ARGV - 1, 2 do redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) end
redis.call('HSET', KEYS[1], 'updated_at', ARGV[3])
if ARGV[2] ~= '' then
  local score = redis.call('ZSCORE', KEYS[2], ARGV[1])
  if score then
    local number = tonumber(score) % NUMBERS
    redis.call('ZADD', KEYS[2], 'XX', tonumber(ARGV[2]) * NUMBERS + number, ARGV[1])
  end
end
return {'ok', state}
""".replace("NUMBERS", str(QUEUE_NUMBERS))

QUEUE_PAGE = 100  # request ids read at a time when the worker walks the queue



def parse_request(key: str, request_id: str, reply: Any, *, listed: bool
                  ) -> DumpRequest | None:
    """The request of an ``HGETALL`` reply read with NEVER_DECODE (a reply that is an error:
    the key is no hash); None if there is no hash (:class:`CorruptRequest` if ``listed``:
    the id is in a list of requests)."""
    if isinstance(reply, redis.ResponseError):
        raise CorruptRequest(request_id, key, "", f"is not a hash ({reply})")
    if not reply:
        if listed:
            raise CorruptRequest(request_id, key, "", "is listed as a request, but the "
                                 "key does not exist")
        return None
    fields = decode_hash(reply, lambda field, reason: CorruptRequest(
        request_id, key, field, reason))
    return DumpRequest.from_fields(fields, key=key, request_id=request_id)


def parse_progress(key: str, request_id: str, raw: Mapping[Any, Any]
                   ) -> dict[str, TableProgress]:
    """The progress of each table of a request, from its progress hash (NEVER_DECODE)."""
    fields = decode_hash(raw, lambda field, reason: CorruptRequest(
        request_id, key, field, reason))
    return {table: TableProgress.from_json(text, key=key, request_id=request_id,
                                           table=table)
            for table, text in fields.items()}


def transition_args(target: RequestState, error: str | None, fence: int | None,
                    only_from: frozenset[RequestState] | None) -> list[str]:
    """The arguments of the transition script (its keys: the request, active, lease)."""
    sources = sources_of(target) if only_from is None else sources_of(target) & only_from
    return [target.value, repr(time.time()), error or "", "1" if target.terminal else "0",
            str(fence or ""), *sorted(state.value for state in sources)]


class RequestStore(RedisStore):
    """The dump requests of one source."""

    def __init__(self, url: str, source: str, *, socket_timeout: float = 5.0) -> None:
        super().__init__(url, source, socket_timeout=socket_timeout)
        self._transition = self.redis.register_script(_TRANSITION)
        self._quarantine = self.redis.register_script(_QUARANTINE)
        self._set_knobs = self.redis.register_script(_SET_KNOBS)

    def create_request(
        self,
        kind: DumpKind,
        tables: Sequence[str],
        *,
        chunk_size: int,
        delay_ms: int,
        keys: Sequence[KeyTexts] = (),
        client_token: str | None = None,
        parallelism: int = 1,
        row_filter: RowFilter | None = None,
        throttle: ThrottlePolicy = NO_THROTTLE,
        prune: bool = False,
        priority: Priority | None = None,
    ) -> DumpRequest:
        """Queue a request; with a ``client_token`` already used, return that request.
        Without a ``priority``, the kind's (:meth:`Priority.default_for`)."""
        check_chunk_size(chunk_size)
        check_delay_ms(delay_ms)
        check_parallelism(parallelism)
        if not tables:
            raise RequestRejected("a dump needs at least one table")
        if kind is DumpKind.KEYS and (len(tables) != 1 or not keys):
            raise RequestRejected("a primary-key dump names exactly one table and some keys")
        if row_filter is not None and kind is DumpKind.KEYS:
            raise RequestRejected("a primary-key dump reads the keys it names: it takes no filter")
        if prune and (kind is DumpKind.KEYS or row_filter is not None):
            raise RequestRejected("a pruning dump reads whole tables: no keys, no filter")
        with redis_errors():
            self.ensure_layout()
            if client_token is not None:
                existing = self.redis.hget(self.key("tokens"), client_token)
                if existing is not None:
                    return self.get_request(as_str(existing))
            number = int(self.redis.incr(self.key("seq")))
            now = time.time()
            request = DumpRequest(
                id=f"dump-{number}", kind=kind, tables=tuple(tables), chunk_size=chunk_size,
                delay_ms=delay_ms, state=RequestState.QUEUED, created_at=now, updated_at=now,
                key_count=len(keys), client_token=client_token, parallelism=parallelism,
                row_filter=row_filter,
                throttle=throttle,
                prune=prune,
                priority=priority or Priority.default_for(kind, prune),
            )

            def fill(pipe: Any) -> None:
                if keys:
                    keys_key = self.key("request", request.id, "keys")
                    for start in range(0, len(keys), 10_000):
                        pipe.rpush(keys_key,
                                   *(json.dumps(list(k)) for k in keys[start:start + 10_000]))
                pipe.hset(self.key("request", request.id), mapping=fields_of(request.to_fields()))
                pipe.zadd(self.key("requests"), {request.id: number})
                pipe.zadd(self.key("active"), {request.id: queue_score(request.priority,
                                                                        number)})
                if client_token is not None:
                    pipe.hsetnx(self.key("tokens"), client_token, request.id)

            self._write(fill)
            if client_token is not None:
                winner = self.redis.hget(self.key("tokens"), client_token)
                if winner is not None and as_str(winner) != request.id:
                    self.transition(request.id, RequestState.CANCELLED,
                                    error=f"duplicate of {as_str(winner)} (same client token)")
                    return self.get_request(as_str(winner))
        return request

    def _migrate(self, version: int) -> None:
        """Layout 1 to 2: every request not yet terminal gets its ``priority`` (its kind's
        default) and its place in ``active`` by priority, then number (it was by number
        alone). One transaction, done again if a request was queued meanwhile."""
        if version != 1:
            super()._migrate(version)
        meta, active = self.key("meta"), self.key("active")
        with redis_errors(), self.redis.pipeline(transaction=True) as pipe:
            while True:
                try:
                    pipe.watch(meta, active)  # type: ignore[no-untyped-call]
                    if pipe.hget(meta, "layout") != "1":
                        return  # another process migrated it
                    queued = cast(list[tuple[str, float]], pipe.zrange(active, 0, -1,
                                                                        withscores=True))
                    priorities = self._priorities([request_id for request_id, _ in queued])
                    pipe.multi()
                    for (request_id, score), (priority, absent) in zip(
                            queued, priorities, strict=True):
                        if absent:
                            pipe.hset(self.key("request", request_id), "priority",
                                      priority.value)
                        pipe.zadd(active, {request_id: queue_score(priority, int(score))})
                    pipe.hset(meta, "layout", "2")
                    pipe.execute()
                    log.info("Redis state of source %s migrated from layout 1 to 2: %d "
                             "request(s) queued by priority", self.source, len(queued))
                    return
                except redis.WatchError:
                    continue

    def _priorities(self, request_ids: Sequence[str]) -> list[tuple[Priority, bool]]:
        """Each request's priority as its hash says, or its kind's default (urgent for a
        pruning dump; and whether the field must be written); a hash that is not one (the
        worker quarantines it) or a field that is garbage: normal, nothing written."""
        pipe = self.redis.pipeline(transaction=False)
        for request_id in request_ids:
            pipe.execute_command(  # type: ignore[no-untyped-call]
                "HMGET", self.key("request", request_id), "kind", "priority", "prune",
                **{NEVER_DECODE: True})
        found: list[tuple[Priority, bool]] = []
        for reply in pipe.execute(raise_on_error=False):
            if not isinstance(reply, list) or reply[0] is None:
                found.append((Priority.NORMAL, False))
                continue
            kind, priority, prune = (None if v is None else v.decode(errors="replace")
                                     for v in reply)
            if priority in {p.value for p in Priority}:
                found.append((Priority(priority), False))
            elif priority is None and kind in {k.value for k in DumpKind}:
                found.append((Priority.default_for(DumpKind(kind), prune == "1"), True))
            else:
                found.append((Priority.NORMAL, False))
        return found

    def token_request(self, client_token: str) -> str | None:
        """The id of the request made with ``client_token``, if any."""
        with redis_errors():
            found = self.redis.hget(self.key("tokens"), client_token)
        return None if found is None else as_str(found)

    def get_request(self, request_id: str) -> DumpRequest:
        """The request, checked: :class:`CorruptRequest` if its record is malformed."""
        [reply] = self._request_replies([request_id])
        request = self._parse_request(request_id, reply, listed=False)
        if request is None:
            raise RequestRejected(
                f"no dump request {request_id!r} for source {self.source!r}; "
                "`dblog list` shows the known ones"
            )
        return request

    def get_record(self, request_id: str) -> DumpRequest | MalformedRequest:
        """Like :meth:`get_request`, but a malformed request is returned as such (an id
        listed as a request without its hash too)."""
        [reply] = self._request_replies([request_id])
        listed = False
        if not reply:
            with redis_errors():
                listed = self.redis.zscore(self.key("requests"), request_id) is not None
        return self._record(request_id, reply, listed=listed)

    def list_requests(self, *, active_only: bool = False) -> list[DumpRequest]:
        """Every request, oldest first; :class:`CorruptRequest` at the first malformed one
        (:meth:`list_records` shows those too)."""
        records = self.list_records(active_only=active_only)
        for record in records:
            if isinstance(record, MalformedRequest):
                raise record.error
        return cast(list[DumpRequest], records)

    def list_records(self, *, active_only: bool = False
                     ) -> list[DumpRequest | MalformedRequest]:
        """Every request, oldest first, a malformed one as :class:`MalformedRequest`."""
        with redis_errors():
            ids = cast(list[str], self.redis.zrange(
                self.key("active" if active_only else "requests"), 0, -1))
        replies = self._request_replies(ids)
        return [self._record(i, reply, listed=True) for i, reply in zip(ids, replies,
                                                                         strict=True)]

    def queue_head(self, runnable: int) -> list[DumpRequest | MalformedRequest]:
        """The requests not yet terminal in the order the worker takes them up (priority,
        then age), up to the ``runnable``-th that is queued or running: the paused ones
        before it are among them; a malformed record (or an id without its hash) as a
        :class:`MalformedRequest`."""
        found: list[DumpRequest | MalformedRequest] = []
        start = 0
        while runnable > 0:
            with redis_errors():
                ids = cast(list[str], self.redis.zrange(self.key("active"), start,
                                                        start + QUEUE_PAGE - 1))
            for request_id, reply in zip(ids, self._request_replies(ids), strict=True):
                record = self._record(request_id, reply, listed=True)
                found.append(record)
                if isinstance(record, DumpRequest) and record.state in (
                        RequestState.QUEUED, RequestState.RUNNING):
                    runnable -= 1
                    if runnable == 0:
                        break
            if len(ids) < QUEUE_PAGE:
                break
            start += QUEUE_PAGE
        return found

    def get_records(self, request_ids: Sequence[str]
                    ) -> dict[str, DumpRequest | MalformedRequest | None]:
        """Several requests at once (one round trip), as :meth:`get_record` reads them;
        None for an id without a request."""
        records: dict[str, DumpRequest | MalformedRequest | None] = {}
        for request_id, reply in zip(request_ids, self._request_replies(request_ids),
                                     strict=True):
            records[request_id] = None if not reply else self._record(request_id, reply,
                                                                      listed=False)
        return records

    def _request_replies(self, ids: Sequence[str]) -> list[Any]:
        """The request hashes, as bytes (a reply that is an error: the key is no hash)."""
        with redis_errors():
            pipe = self.redis.pipeline(transaction=False)
            for request_id in ids:
                pipe.execute_command(  # type: ignore[no-untyped-call]
                    "HGETALL", self.key("request", request_id), **{NEVER_DECODE: True})
            replies: list[Any] = pipe.execute(raise_on_error=False)
            return replies

    def _parse_request(self, request_id: str, reply: Any, *, listed: bool
                       ) -> DumpRequest | None:
        return parse_request(self.key("request", request_id), request_id, reply,
                             listed=listed)

    def _record(self, request_id: str, reply: Any, *, listed: bool
                ) -> DumpRequest | MalformedRequest:
        try:
            request = self._parse_request(request_id, reply, listed=listed)
        except CorruptRequest as exc:
            fields = shown(reply) if isinstance(reply, dict) else {}
            return MalformedRequest(request_id, exc, fields)
        if request is None:
            raise RequestRejected(
                f"no dump request {request_id!r} for source {self.source!r}; "
                "`dblog list` shows the known ones"
            )
        return request

    def quarantine(self, request_id: str, error: str) -> str:
        """Take a request out of the queue, whatever its record holds: unless it has ended,
        it becomes failed with ``error``. Returns ``failed``, ``ended`` (its state was
        final already), or the type of its key if that is no hash (``none``: missing)."""
        with redis_errors():
            outcome = self._quarantine(
                keys=[self.key("request", request_id), self.key("active"),
                      "" if self._fence is None else self.key("lease")],
                args=[request_id, repr(time.time()), error, str(self._fence or "")])
        if outcome == "fenced":
            raise LeaseLost(self._fenced_out("another token"))
        return str(outcome)

    def transition(
        self, request_id: str, target: RequestState, *, error: str | None = None,
        only_from: frozenset[RequestState] | None = None,
    ) -> RequestState:
        """Move a request to ``target`` if its current state allows it; return the old state."""
        args = transition_args(target, error, self._fence, only_from)
        allowed = args[5:]
        with redis_errors():
            result = self._transition(
                keys=[self.key("request", request_id), self.key("active"),
                      "" if self._fence is None else self.key("lease")],
                args=args,
            )
        outcome, previous = cast(list[str], result)
        if outcome == "fenced":
            raise LeaseLost(self._fenced_out("another token"))
        if outcome == "missing":
            raise RequestRejected(
                f"no dump request {request_id!r} for source {self.source!r}; "
                "`dblog list` shows the known ones"
            )
        if outcome == "refused":
            raise RequestRejected(
                f"dump request {request_id} is {previous}; it cannot become {target.value} "
                f"(allowed from: {', '.join(allowed) or 'nothing'})"
            )
        return RequestState(previous)

    def set_knobs(
        self, request_id: str, *, chunk_size: int | None = None, delay_ms: int | None = None,
        parallelism: int | None = None, throttle: Mapping[str, int] | None = None,
        priority: Priority | None = None,
    ) -> DumpRequest:
        """Change chunk size, delay, parallelism, throttle limits and/or priority (only
        those given) of a request that is not finished; a new priority moves it in the
        queue at once."""
        args: list[str] = []
        if chunk_size is not None:
            args += ["chunk_size", str(check_chunk_size(chunk_size))]
        if delay_ms is not None:
            args += ["delay_ms", str(check_delay_ms(delay_ms))]
        if parallelism is not None:
            args += ["parallelism", str(check_parallelism(parallelism))]
        for name, value in (throttle or {}).items():
            args += [RECORD_PREFIX + name, str(check_limit(name, value))]
        rank = ""
        if priority is not None:
            args += ["priority", Priority(priority).value]
            rank = str(Priority(priority).rank)
        if not args:
            raise RequestRejected("give a chunk size, a delay, a parallelism, a throttle limit "
                                  "or a priority")
        self.ensure_layout()  # the queue's scores are of this layout
        with redis_errors():
            outcome, previous = cast(
                list[str],
                self._set_knobs(keys=[self.key("request", request_id), self.key("active")],
                                args=[request_id, rank, repr(time.time()), *args]),
            )
        if outcome == "missing":
            raise RequestRejected(f"no dump request {request_id!r} for source {self.source!r}")
        if outcome == "refused":
            raise RequestRejected(f"dump request {request_id} is {previous}; knobs are final")
        return self.get_request(request_id)

    def request_keys(self, request_id: str, start: int, count: int) -> list[KeyTexts]:
        """Keys ``start`` to ``start + count - 1`` of a primary-key dump, checked."""
        return self._key_list(request_id, "keys", start, start + count - 1)

    def missing_keys(self, request_id: str) -> list[KeyTexts]:
        """The keys a primary-key dump did not find, checked."""
        return self._key_list(request_id, "missing", 0, -1)

    def key_count(self, request_id: str) -> int:
        """How many keys the list of a primary-key dump holds."""
        key = self.key("request", request_id, "keys")
        try:
            return int(self._raw("LLEN", key))
        except redis.ResponseError as exc:
            raise CorruptRequest(request_id, key, "", f"is not a list ({exc})") from None

    def _key_list(self, request_id: str, name: str, first: int, last: int) -> list[KeyTexts]:
        key = self.key("request", request_id, name)
        try:
            items = self._raw("LRANGE", key, first, last)
        except redis.ResponseError as exc:
            raise CorruptRequest(request_id, key, "", f"is not a list ({exc})") from None
        keys = []
        for index, item in enumerate(items, start=first):
            try:
                text = decode(item)
            except ValueError as exc:
                raise CorruptRequest(request_id, key, f"#{index}", str(exc)) from None
            keys.append(key_record(text, request_id=request_id, key=key, index=index))
        return keys

    def progress(self, request_id: str) -> dict[str, TableProgress]:
        """The progress of each table of a request, checked."""
        key = self.key("request", request_id, "progress")
        try:
            raw = self._raw("HGETALL", key)
        except redis.ResponseError as exc:
            raise CorruptRequest(request_id, key, "", f"is not a hash ({exc})") from None
        return parse_progress(key, request_id, raw)
