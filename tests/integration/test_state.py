"""StateStore against a real Redis: requests, transitions, knobs, keys, progress, outages."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

from dblog_worker.admission import queue_prunes
from dblog_worker.errors import ConfigError, RequestRejected, StateUnavailable
from dblog_worker.requests import (
    TRANSITIONS,
    DumpKind,
    DumpRequest,
    KeyTexts,
    MalformedRequest,
    Priority,
    RequestState,
    TableProgress,
)
from dblog_worker.state import StateStore
from tests.services import RedisServer

SOURCE = "shop"
A, B = "public.a", "public.b"
Q = RequestState.QUEUED
R = RequestState.RUNNING
P = RequestState.PAUSED
DONE = RequestState.COMPLETED
F = RequestState.FAILED
C = RequestState.CANCELLED

# How to bring a new (queued) request into each state through allowed transitions.
PATHS: dict[RequestState, list[RequestState]] = {
    Q: [], R: [R], P: [R, P], DONE: [R, DONE], F: [F], C: [C],
}


@pytest.fixture
def store(redis_url: str) -> Iterator[StateStore]:
    state = StateStore(redis_url, SOURCE, socket_timeout=2.0)
    yield state
    state.close()


def tables_dump(store: StateStore, *tables: str, **kwargs: Any) -> DumpRequest:
    return store.create_request(DumpKind.TABLES, tables or (A,), chunk_size=kwargs.pop(
        "chunk_size", 100), delay_ms=kwargs.pop("delay_ms", 0), **kwargs)


def walk(store: StateStore, request_id: str, states: list[RequestState]) -> None:
    for state in states:
        store.transition(request_id, state)


# -- requests ----------------------------------------------------------------


def test_create_get_list(store: StateStore) -> None:
    assert not store.has_layout()
    before = time.time()
    first = store.create_request(DumpKind.TABLES, [A, B], chunk_size=500, delay_ms=25)
    second = store.create_request(DumpKind.ALL, [A, B], chunk_size=1, delay_ms=0)
    assert store.has_layout()

    assert first == DumpRequest(
        id="dump-1", kind=DumpKind.TABLES, tables=(A, B), chunk_size=500, delay_ms=25,
        state=Q, created_at=first.created_at, updated_at=first.created_at,
    )
    assert before <= first.created_at <= second.created_at <= time.time()
    assert (second.id, second.kind, second.state) == ("dump-2", DumpKind.ALL, Q)
    assert store.get_request("dump-1") == first
    assert store.get_request("dump-2") == second
    assert store.list_requests() == [first, second]
    assert store.list_requests(active_only=True) == [first, second]
    assert store.redis.hgetall(store.key("meta"))["layout"] == "2"
    assert store.key("request", "dump-1") == "dblog:v1:shop:request:dump-1"


def test_sources_are_separate(store: StateStore, redis_url: str) -> None:
    other = StateStore(redis_url, "other")
    try:
        tables_dump(store)
        assert other.list_requests() == []
        assert tables_dump(other).id == "dump-1"
        assert [r.id for r in store.list_requests()] == ["dump-1"]
    finally:
        other.close()


@pytest.mark.parametrize(
    ("kind", "tables", "kwargs", "message"),
    [
        (DumpKind.TABLES, [A], {"chunk_size": 0, "delay_ms": 0},
         "chunk size must be an integer from 1 to 100000, got 0"),
        (DumpKind.TABLES, [A], {"chunk_size": 100_001, "delay_ms": 0},
         "chunk size must be an integer from 1 to 100000, got 100001"),
        (DumpKind.TABLES, [A], {"chunk_size": 10, "delay_ms": -1},
         "delay must be an integer number of milliseconds from 0 to 3600000, got -1"),
        (DumpKind.TABLES, [], {"chunk_size": 10, "delay_ms": 0},
         "a dump needs at least one table"),
        (DumpKind.KEYS, [A, B], {"chunk_size": 10, "delay_ms": 0, "keys": [("1",)]},
         "a primary-key dump names exactly one table and some keys"),
        (DumpKind.KEYS, [A], {"chunk_size": 10, "delay_ms": 0},
         "a primary-key dump names exactly one table and some keys"),
    ],
)
def test_create_refused(
    store: StateStore, kind: DumpKind, tables: list[str], kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(RequestRejected) as info:
        store.create_request(kind, tables, **kwargs)
    assert str(info.value) == message
    assert store.list_requests() == []
    assert tables_dump(store).id == "dump-1"  # no number was used up


def test_unknown_request(store: StateStore) -> None:
    message = "no dump request 'dump-9' for source 'shop'; `dblog list` shows the known ones"
    with pytest.raises(RequestRejected) as info:
        store.get_request("dump-9")
    assert str(info.value) == message
    with pytest.raises(RequestRejected) as info:
        store.transition("dump-9", C)
    assert str(info.value) == message
    with pytest.raises(RequestRejected) as info:
        store.set_knobs("dump-9", chunk_size=5)
    assert str(info.value) == "no dump request 'dump-9' for source 'shop'"
    assert store.redis.exists(store.key("request", "dump-9")) == 0


def ids_of(records: list[DumpRequest | MalformedRequest]) -> list[str]:
    return [r.id for r in records]


def test_the_queue_is_by_priority_then_age(store: StateStore) -> None:
    assert store.queue_head(4) == []
    ids = [tables_dump(store).id for _ in range(3)]
    assert ids == ["dump-1", "dump-2", "dump-3"]
    assert ids_of(store.queue_head(1)) == ["dump-1"]
    assert ids_of(store.queue_head(5)) == ids

    walk(store, "dump-1", [R, P])  # a paused request stays listed, but takes no slot
    assert ids_of(store.queue_head(1)) == ["dump-1", "dump-2"]
    # a repair comes first, a backfill last; priorities change while they wait
    keys = store.create_request(DumpKind.KEYS, [A], chunk_size=10, delay_ms=0, keys=[("1",)])
    backfill = tables_dump(store, priority=Priority.BACKGROUND)
    assert (keys.priority, backfill.priority) == (Priority.URGENT, Priority.BACKGROUND)
    assert ids_of(store.queue_head(9)) == ["dump-4", "dump-1", "dump-2", "dump-3", "dump-5"]
    store.set_knobs("dump-5", priority=Priority.URGENT)
    store.set_knobs("dump-4", priority=Priority.NORMAL)
    assert ids_of(store.queue_head(9)) == ["dump-5", "dump-1", "dump-2", "dump-3", "dump-4"]
    assert store.get_request("dump-5").priority is Priority.URGENT

    store.transition("dump-1", C)
    walk(store, "dump-2", [R, DONE])
    assert ids_of(store.queue_head(9)) == ["dump-5", "dump-3", "dump-4"]
    for request_id in ("dump-3", "dump-4", "dump-5"):
        store.transition(request_id, F, error="boom")
    assert store.queue_head(4) == []
    assert store.list_requests(active_only=True) == []
    with pytest.raises(RequestRejected, match="knobs are final"):
        store.set_knobs("dump-5", priority=Priority.NORMAL)
    assert store.redis.zcard(store.key("active")) == 0  # a final request is not queued again


def test_the_queue_is_read_page_by_page(store: StateStore, monkeypatch: pytest.MonkeyPatch
                                        ) -> None:
    monkeypatch.setattr("dblog_worker.request_store.QUEUE_PAGE", 3)
    for _ in range(8):
        tables_dump(store)
    for request_id in ("dump-1", "dump-2", "dump-3", "dump-4"):
        walk(store, request_id, [R, P])
    assert ids_of(store.queue_head(2)) == [f"dump-{n}" for n in range(1, 7)]
    assert ids_of(store.queue_head(20)) == [f"dump-{n}" for n in range(1, 9)]
    assert store.get_records(["dump-8", "dump-99"]) == {
        "dump-8": store.get_request("dump-8"), "dump-99": None}


def test_layout_1_is_migrated(store: StateStore) -> None:
    """State written by a dblog of layout 1: the queue scored by number, requests without a
    priority. The first store of this dblog to use it gives each request not yet final its
    kind's priority (urgent for a pruning dump) and its place by priority, once; a dblog of
    layout 1 refuses it then."""
    client = store.redis
    client.hset(store.key("meta"), mapping={"layout": "1", "created_at": "1.0"})
    for number, kind in ((1, "tables"), (2, "keys"), (3, "all"), (4, "tables")):
        fields: dict[str | bytes | bytearray | memoryview | int | float, str] = {
            "id": f"dump-{number}", "kind": kind, "chunk_size": "10", "delay_ms": "0",
            "state": "queued", "created_at": "1.0", "updated_at": "1.0",
            "tables": json.dumps([A]), "key_count": "1" if kind == "keys" else "0"}
        if number == 4:
            fields["prune"] = "1"  # a pruning dump a foreign-key cascade queued
        client.hset(store.key("request", f"dump-{number}"), mapping=fields)
        client.zadd(store.key("requests"), {f"dump-{number}": number})
        client.zadd(store.key("active"), {f"dump-{number}": number})
    client.hset(store.key("request", "dump-1"), "state", "completed")  # ended, not queued
    client.zrem(store.key("active"), "dump-1")
    client.set(store.key("seq"), 4)
    assert [r.priority for r in store.list_requests()] == [
        Priority.NORMAL, Priority.URGENT, Priority.NORMAL, Priority.URGENT]  # read as-is

    store.ensure_layout()
    assert client.hget(store.key("meta"), "layout") == "2"
    assert client.hget(store.key("request", "dump-2"), "priority") == "urgent"
    assert client.hget(store.key("request", "dump-3"), "priority") == "normal"
    assert client.hget(store.key("request", "dump-4"), "priority") == "urgent"
    assert client.hget(store.key("request", "dump-1"), "priority") is None  # final: as it was
    queue = [("dump-2", 2.0), ("dump-4", 4.0), ("dump-3", 2.0**40 + 3)]
    assert client.zrange(store.key("active"), 0, -1, withscores=True) == queue
    assert store.get_request("dump-4").prune
    store.ensure_layout()  # again: nothing changes
    assert client.zrange(store.key("active"), 0, -1, withscores=True) == queue
    assert tables_dump(store, priority=Priority.URGENT).id == "dump-5"
    assert ids_of(store.queue_head(9)) == ["dump-2", "dump-4", "dump-5", "dump-3"]


def test_transitions_return_the_previous_state(store: StateStore) -> None:
    request = tables_dump(store)
    assert store.transition(request.id, R) is Q
    assert store.transition(request.id, P) is R
    assert store.transition(request.id, R) is P
    assert store.transition(request.id, F, error="table public.a was dropped") is R
    failed = store.get_request(request.id)
    assert (failed.state, failed.error) == (F, "table public.a was dropped")
    assert failed.updated_at >= request.updated_at
    assert failed.created_at == request.created_at


@pytest.mark.parametrize(
    ("source", "target"),
    [(s, t) for s in RequestState for t in RequestState],
    ids=lambda s: s.value,
)
def test_every_transition(store: StateStore, source: RequestState, target: RequestState) -> None:
    request = tables_dump(store)
    walk(store, request.id, PATHS[source])
    allowed = sorted(s.value for s in RequestState if target in TRANSITIONS[s])
    if target in TRANSITIONS[source]:
        assert store.transition(request.id, target) is source
        assert store.get_request(request.id).state is target
    else:
        with pytest.raises(RequestRejected) as info:
            store.transition(request.id, target)
        assert str(info.value) == (
            f"dump request dump-1 is {source.value}; it cannot become {target.value} "
            f"(allowed from: {', '.join(allowed) or 'nothing'})"
        )
        assert store.get_request(request.id).state is source
    state = store.get_request(request.id).state
    active = [r.id for r in store.list_requests(active_only=True)]
    assert active == ([] if state.terminal else ["dump-1"])


@pytest.mark.parametrize(
    ("target", "message"),
    [
        (P, "dump request dump-1 is queued; it cannot become paused (allowed from: running)"),
        (DONE, "dump request dump-1 is queued; it cannot become completed "
               "(allowed from: running)"),
        (Q, "dump request dump-1 is queued; it cannot become queued (allowed from: nothing)"),
    ],
)
def test_refused_transition_messages(
    store: StateStore, target: RequestState, message: str
) -> None:
    tables_dump(store)
    with pytest.raises(RequestRejected) as info:
        store.transition("dump-1", target)
    assert str(info.value) == message


def test_refused_from_terminal_names_the_allowed_states(store: StateStore) -> None:
    tables_dump(store)
    walk(store, "dump-1", [R, DONE])
    with pytest.raises(RequestRejected) as info:
        store.transition("dump-1", R)
    assert str(info.value) == (
        "dump request dump-1 is completed; it cannot become running "
        "(allowed from: paused, queued)"
    )


def test_error_kept_when_a_later_transition_has_none(store: StateStore) -> None:
    tables_dump(store)
    store.transition("dump-1", R, error="retrying after an outage")
    store.transition("dump-1", P)
    assert store.get_request("dump-1").error == "retrying after an outage"
    store.transition("dump-1", C, error="cancelled by alice")
    assert store.get_request("dump-1").error == "cancelled by alice"


# -- knobs -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("knobs", "expected"),
    [
        ({"chunk_size": 10}, (10, 0)),
        ({"delay_ms": 3_600_000}, (100, 3_600_000)),
        ({"chunk_size": 1, "delay_ms": 7}, (1, 7)),
        ({"chunk_size": 100_000, "delay_ms": 0}, (100_000, 0)),
    ],
)
def test_set_knobs(store: StateStore, knobs: dict[str, Any], expected: tuple[int, int]) -> None:
    tables_dump(store)
    updated = store.set_knobs("dump-1", **knobs)
    assert (updated.chunk_size, updated.delay_ms) == expected
    assert store.get_request("dump-1") == updated
    assert updated.state is Q


@pytest.mark.parametrize("state", [R, P])
def test_set_knobs_on_running_and_paused(store: StateStore, state: RequestState) -> None:
    tables_dump(store)
    walk(store, "dump-1", PATHS[state])
    assert store.set_knobs("dump-1", delay_ms=5).delay_ms == 5


@pytest.mark.parametrize(
    ("knobs", "message"),
    [
        ({}, "give a chunk size, a delay, a parallelism, a throttle limit or a priority"),
        ({"chunk_size": 0}, "chunk size must be an integer from 1 to 100000, got 0"),
        ({"chunk_size": True}, "chunk size must be an integer from 1 to 100000, got True"),
        ({"chunk_size": 5, "delay_ms": 3_600_001},
         "delay must be an integer number of milliseconds from 0 to 3600000, got 3600001"),
    ],
)
def test_set_knobs_refused(store: StateStore, knobs: dict[str, Any], message: str) -> None:
    request = tables_dump(store)
    with pytest.raises(RequestRejected) as info:
        store.set_knobs("dump-1", **knobs)
    assert str(info.value) == message
    assert store.get_request("dump-1") == request


@pytest.mark.parametrize("state", [DONE, F, C])
def test_set_knobs_refused_when_terminal(store: StateStore, state: RequestState) -> None:
    tables_dump(store)
    walk(store, "dump-1", PATHS[state])
    before = store.get_request("dump-1")
    with pytest.raises(RequestRejected) as info:
        store.set_knobs("dump-1", chunk_size=5)
    assert str(info.value) == f"dump request dump-1 is {state.value}; knobs are final"
    assert store.get_request("dump-1") == before


# -- client tokens -----------------------------------------------------------


def test_client_token_is_idempotent(store: StateStore) -> None:
    first = tables_dump(store, client_token="tok-1")
    again = tables_dump(store, B, client_token="tok-1", chunk_size=7)
    assert again == first
    assert first.client_token == "tok-1"
    assert store.list_requests() == [first]
    assert tables_dump(store, client_token="tok-2").id == "dump-2"
    assert tables_dump(store).id == "dump-3"
    assert tables_dump(store).id == "dump-4"  # no token: always a new request
    assert store.redis.hgetall(store.key("tokens")) == {"tok-1": "dump-1", "tok-2": "dump-2"}


def test_client_token_race_keeps_one_request(
    store: StateStore, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two clients with the same token: the loser's request is cancelled, both get the winner."""
    winner = tables_dump(StateStore(redis_url, SOURCE), client_token="tok")
    real_hget = store.redis.hget
    tokens = store.key("tokens")
    looked: list[str] = []

    def hget(name: str, key: str) -> Any:
        if name == tokens and not looked:  # the first look misses: the race
            looked.append(key)
            return None
        return real_hget(name, key)

    monkeypatch.setattr(store.redis, "hget", hget)
    assert tables_dump(store, client_token="tok") == winner
    assert looked == ["tok"]
    loser = store.get_request("dump-2")
    assert (loser.state, loser.error) == (C, "duplicate of dump-1 (same client token)")
    assert [r.id for r in store.list_requests(active_only=True)] == ["dump-1"]


# -- keys --------------------------------------------------------------------


def test_keys_stored_and_paged(store: StateStore) -> None:
    keys: list[KeyTexts] = [(f"r{i % 3}", str(i)) for i in range(25)]
    request = store.create_request(DumpKind.KEYS, [A], chunk_size=10, delay_ms=0, keys=keys)
    assert (request.kind, request.key_count) == (DumpKind.KEYS, 25)
    assert store.get_request(request.id).key_count == 25
    assert store.request_keys(request.id, 0, 10) == keys[:10]
    assert store.request_keys(request.id, 10, 10) == keys[10:20]
    assert store.request_keys(request.id, 20, 10) == keys[20:]
    assert store.request_keys(request.id, 25, 10) == []
    assert store.request_keys("dump-9", 0, 10) == []
    assert store.redis.lindex(store.key("request", request.id, "keys"), 0) == '["r0", "0"]'


def test_many_keys_span_several_pushes(store: StateStore) -> None:
    keys: list[KeyTexts] = [(str(i),) for i in range(20_005)]
    request = store.create_request(DumpKind.KEYS, [A], chunk_size=10, delay_ms=0, keys=keys)
    assert store.redis.llen(store.key("request", request.id, "keys")) == 20_005
    assert store.request_keys(request.id, 9_998, 4) == keys[9_998:10_002]
    assert store.request_keys(request.id, 20_000, 100) == keys[20_000:]


# -- progress ----------------------------------------------------------------


def test_save_progress(store: StateStore) -> None:
    a = TableProgress(A, started=True, upper_bound=["9"], last_key=["4"], chunks=2, rows=8)
    b = TableProgress(B, done=True, next_key_index=3, missing=1)
    store.save_progress("0/16B3748", {"dump-1": [a, b]}, {"dump-1": [("3",)]})
    assert store.checkpoint() == "0/16B3748"
    assert set(store.redis.hgetall(store.key("checkpoint"))) == {"value", "updated_at"}
    assert store.progress("dump-1") == {A: a, B: b}
    assert store.missing_keys("dump-1") == [("3",)]

    a = dataclasses.replace(a, done=True)
    store.save_progress(None, {"dump-1": [a]}, {"dump-1": [("7",), ("8",)], "dump-2": []})
    assert store.checkpoint() == "0/16B3748"  # no checkpoint: the old one stays
    assert store.progress("dump-1") == {A: a, B: b}
    assert store.missing_keys("dump-1") == [("3",), ("7",), ("8",)]
    assert store.missing_keys("dump-2") == []
    assert store.redis.exists(store.key("request", "dump-2", "missing")) == 0

    store.save_progress("0/2000000", {}, {})
    assert store.checkpoint() == "0/2000000"
    assert store.progress("dump-1") == {A: a, B: b}


def test_a_pruning_dump_is_urgent_and_keeps_its_prune_start(store: StateStore) -> None:
    """The pruning dumps a foreign-key cascade queues (``queue_prunes``): urgent, ahead of
    the dumps queued before them, one per table while one waits; the low watermark a
    pruning dump prunes from is saved with its progress and read back."""
    backfill = tables_dump(store, B, priority=Priority.BACKGROUND)
    normal = tables_dump(store, B)
    queued = queue_prunes(store, [A, B])
    assert [(r.tables, r.prune, r.priority) for r in queued] == [
        ((A,), True, Priority.URGENT), ((B,), True, Priority.URGENT)]
    assert queue_prunes(store, [A]) == []  # one waits already: it prunes from later on
    assert ids_of(store.queue_head(9)) == [*(r.id for r in queued), normal.id, backfill.id]
    pruning = queued[0]
    assert store.transition(pruning.id, RequestState.RUNNING) is RequestState.QUEUED
    start = "0" * 32 + "00000000000000a1"
    read = TableProgress(A, started=True, upper_bound=["9"], last_key=["4"], chunks=1,
                         prune_from=start)
    store.save_progress(None, {pruning.id: [read]}, {})
    assert store.progress(pruning.id) == {A: read}
    assert store.get_request(pruning.id).prune
    assert [r.tables for r in queue_prunes(store, [A])] == [(A,)]  # it runs: a new one waits


def test_save_progress_is_one_transaction(
    store: StateStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    pipelines: list[tuple[bool, list[str]]] = []
    real_pipeline = store.redis.pipeline

    def pipeline(transaction: bool = True, shard_hint: str | None = None) -> Any:
        pipe = real_pipeline(transaction=transaction, shard_hint=shard_hint)
        real_execute = pipe.execute

        def execute(raise_on_error: bool = True) -> Any:
            pipelines.append((transaction, [str(c[0][0]) for c in pipe.command_stack]))
            return real_execute(raise_on_error)

        pipe.execute = execute  # type: ignore[method-assign]
        return pipe

    monkeypatch.setattr(store.redis, "pipeline", pipeline)
    progress = {"dump-1": [TableProgress(A, chunks=1)], "dump-2": [TableProgress(B)]}
    store.save_progress("0/1", progress, {"dump-1": [("1",), ("2",)]})
    assert pipelines == [(True, ["HSET", "HSET", "HSET", "RPUSH"])]


def test_checkpoint_none_at_first(store: StateStore) -> None:
    assert store.checkpoint() is None
    assert store.progress("dump-1") == {}
    assert store.missing_keys("dump-1") == []


def test_status(store: StateStore) -> None:
    store.publish_status({"position": "0/1", "window": None, "lag": 3})
    assert store.status() == {"position": "0/1", "window": "None", "lag": "3"}


# -- layout ------------------------------------------------------------------


def test_ensure_layout(store: StateStore) -> None:
    assert not store.has_layout()
    store.ensure_layout()
    created = store.redis.hget(store.key("meta"), "created_at")
    assert created is not None
    store.ensure_layout()  # again: nothing changes
    assert store.redis.hgetall(store.key("meta")) == {"layout": "2", "created_at": created}


def test_ensure_layout_refuses_another_version(store: StateStore) -> None:
    store.redis.hset(store.key("meta"), "layout", "3")
    message = (
        "Redis holds state of layout '3' for source 'shop'; this dblog reads layout 2 (and "
        "migrates layouts 1). Upgrade dblog, or use another Redis database or source name."
    )
    with pytest.raises(ConfigError) as info:
        store.ensure_layout()
    assert str(info.value) == message
    with pytest.raises(ConfigError):
        tables_dump(store)
    assert store.redis.exists(store.key("seq")) == 0


# -- Redis unavailable -------------------------------------------------------

CALLS: list[tuple[str, Callable[[StateStore], object]]] = [
    ("has_layout", lambda s: s.has_layout()),
    ("ensure_layout", lambda s: s.ensure_layout()),
    ("checkpoint", lambda s: s.checkpoint()),
    ("save_progress", lambda s: s.save_progress("0/1", {"dump-1": [TableProgress(A)]},
                                                {"dump-1": [("1",)]})),
    ("create_request", lambda s: tables_dump(s)),
    ("create_request_with_token", lambda s: tables_dump(s, client_token="t")),
    ("get_request", lambda s: s.get_request("dump-1")),
    ("list_requests", lambda s: s.list_requests()),
    ("queue_head", lambda s: s.queue_head(4)),
    ("transition", lambda s: s.transition("dump-1", C)),
    ("set_knobs", lambda s: s.set_knobs("dump-1", chunk_size=5)),
    ("request_keys", lambda s: s.request_keys("dump-1", 0, 10)),
    ("missing_keys", lambda s: s.missing_keys("dump-1")),
    ("progress", lambda s: s.progress("dump-1")),
    ("publish_status", lambda s: s.publish_status({"a": 1})),
    ("status", lambda s: s.status()),
]


def _assert_unavailable(store: StateStore) -> None:
    for name, call in CALLS:
        with pytest.raises(StateUnavailable) as info:
            call(store)
        assert str(info.value).startswith("Redis is unreachable: "), name
        assert isinstance(info.value.__cause__, redis.RedisError), name


def test_redis_down(redis_server: RedisServer, redis_url: str) -> None:
    store = StateStore(redis_url, SOURCE, socket_timeout=0.5)
    try:
        tables_dump(store)  # a live connection in the pool
        redis_server.kill()  # the redis_url fixture of a later test restarts it
        started = time.monotonic()
        _assert_unavailable(store)
        assert time.monotonic() - started < 10
        redis_server.restart()  # empty again: the server keeps nothing
        assert store.list_requests() == []  # the same store recovers
    finally:
        store.close()


def test_redis_hangs(redis_server: RedisServer, redis_url: str) -> None:
    store = StateStore(redis_url, SOURCE, socket_timeout=0.2)
    try:
        tables_dump(store)
        os.kill(redis_server.pid, signal.SIGSTOP)
        try:
            with pytest.raises(StateUnavailable):
                store.get_request("dump-1")
            with pytest.raises(StateUnavailable):
                store.transition("dump-1", C)
        finally:
            os.kill(redis_server.pid, signal.SIGCONT)
        assert store.get_request("dump-1").state in (Q, C)
    finally:
        store.close()


def test_key_encoding_is_json(store: StateStore) -> None:
    store.save_progress(None, {}, {"dump-1": [("a\"b", "é")]})
    raw = store.redis.lrange(store.key("request", "dump-1", "missing"), 0, -1)
    assert raw == [json.dumps(["a\"b", "é"])]
    assert store.missing_keys("dump-1") == [("a\"b", "é")]


def test_save_progress_with_no_tables_for_a_request(store: StateStore) -> None:
    """Like an empty list of missing keys, an empty list of tables writes nothing."""
    store.save_progress("0/1", {"dump-1": []}, {"dump-1": []})
    assert store.checkpoint() == "0/1"
    assert store.progress("dump-1") == {}


def test_a_silent_worker_is_named_while_waiting(store: StateStore) -> None:
    """`dblog dump --wait` / `dblog wait` say when no worker takes the request."""
    from dblog_worker.cli_dumps import WORKER_SILENT_S, worker_silence

    assert worker_silence(store) == "no worker of this source has ever reported"
    store.publish_status({"pid": 1, "updated_at": time.time()})
    assert worker_silence(store) is None
    store.publish_status({"pid": 1, "updated_at": time.time() - WORKER_SILENT_S - 1})
    assert worker_silence(store) == (
        f"no worker of this source has reported for over {WORKER_SILENT_S} s")
    store.publish_status({"pid": 1, "updated_at": time.time() - 185})
    assert worker_silence(store) == "no worker of this source has reported for 3 min"
