"""The leader lease and fenced state writes, against a real Redis server."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest
import redis

from dblog_worker.control.lease import Lease
from dblog_worker.control.store import StateStore
from dblog_worker.dump.requests import DumpKind, RequestState, TableProgress
from dblog_worker.errors import LeaseLost, StateUnavailable
from tests.services import free_port

SOURCE = "shop"


@pytest.fixture
def leases(redis_url: str) -> Iterator[tuple[Lease, Lease]]:
    first = Lease(redis_url, SOURCE, ttl_s=0.6, holder="a")
    second = Lease(redis_url, SOURCE, ttl_s=0.6, holder="b")
    yield first, second
    first.close()
    second.close()


def test_one_holder_at_a_time_and_tokens_grow(leases: tuple[Lease, Lease]) -> None:
    a, b = leases
    assert a.acquire() == 1
    assert b.acquire() is None
    assert a.acquire() == 1  # kept, same token
    assert b.current()["holder"] == "a"
    a.renew()
    a.release()
    assert b.acquire() == 2
    with pytest.raises(LeaseLost):
        a.renew()


def test_an_expired_lease_is_taken_over_and_the_old_holder_cannot_renew(
    leases: tuple[Lease, Lease],
) -> None:
    a, b = leases
    assert a.acquire() == 1
    time.sleep(0.3)
    a.renew()  # renewed: still held after the first TTL
    time.sleep(0.4)
    assert b.acquire() is None
    time.sleep(0.8)  # not renewed: it expires
    assert b.acquire() == 2
    with pytest.raises(LeaseLost, match="held by b with token 2"):
        a.renew()
    assert a.token is None
    a.release()  # a no-op: it holds nothing
    assert b.current()["token"] == "2"


def test_tokens_never_go_back_even_if_redis_lost_its_counter(
    redis_url: str, leases: tuple[Lease, Lease]
) -> None:
    a, b = leases
    assert a.acquire() == 1
    a.release()
    with redis.Redis.from_url(redis_url) as client:
        client.flushall()
    assert b.acquire(min_token=8) == 8  # the landing zone's writers went up to 7
    b.release()
    assert a.acquire() == 9


def test_a_fenced_store_writes_only_while_its_token_holds(
    redis_url: str, leases: tuple[Lease, Lease]
) -> None:
    a, b = leases
    old, new, user = (StateStore(redis_url, SOURCE) for _ in range(3))
    try:
        request = user.create_request(DumpKind.TABLES, ["public.t"], chunk_size=10, delay_ms=0)
        old.fence(a.acquire() or 0)
        old.save_progress("0/10", {request.id: [TableProgress("public.t", chunks=1)]}, {})
        old.transition(request.id, RequestState.RUNNING)
        old.publish_status({"run_id": "old"})
        a.release()
        new.fence(b.acquire() or 0)
        with pytest.raises(LeaseLost, match="token 1 was refused"):
            old.save_progress("0/20", {request.id: [TableProgress("public.t", chunks=2)]}, {})
        with pytest.raises(LeaseLost):
            old.transition(request.id, RequestState.COMPLETED)
        with pytest.raises(LeaseLost):
            old.publish_status({"run_id": "old again"})
        with pytest.raises(LeaseLost):
            old.create_request(DumpKind.KEYS, ["public.t"], chunk_size=10, delay_ms=0,
                               keys=[("1",)])
        # nothing of the refused writes is there; the new leader's go through
        assert user.checkpoint() == "0/10"
        assert user.progress(request.id)["public.t"].chunks == 1
        assert user.get_request(request.id).state is RequestState.RUNNING
        assert user.status()["run_id"] == "old"
        assert [r.id for r in user.list_requests()] == [request.id]
        new.save_progress("0/30", {}, {})
        new.transition(request.id, RequestState.COMPLETED)
        assert user.checkpoint() == "0/30"
        with redis.Redis.from_url(redis_url, decode_responses=True) as client:
            assert client.hget(f"dblog:v1:{SOURCE}:checkpoint", "token") == "2"
        # a user's commands are not fenced: they come from no worker
        second = user.create_request(DumpKind.TABLES, ["public.t"], chunk_size=10, delay_ms=0)
        user.transition(second.id, RequestState.CANCELLED)
    finally:
        for store in (old, new, user):
            store.close()


def test_members_list_leader_first(redis_url: str, leases: tuple[Lease, Lease]) -> None:
    a, b = leases
    a.acquire()
    b.publish_member("standby", "http://127.0.0.1:2", ttl_s=5)
    a.publish_member("leader", "http://127.0.0.1:1", ttl_s=5)
    store = StateStore(redis_url, SOURCE)
    try:
        found = store.members()
        assert [(m["holder"], m["role"], m["token"]) for m in found] == [
            ("a", "leader", "1"), ("b", "standby", "")]
        b.forget_member()
        assert [m["holder"] for m in store.members()] == ["a"]
    finally:
        store.close()


def test_leaving_the_members_list_without_redis_only_warns(
    caplog: pytest.LogCaptureFixture,
) -> None:
    lease = Lease(f"redis://127.0.0.1:{free_port()}/0", SOURCE, ttl_s=0.6, holder="a")
    try:
        lease.forget_member()  # a stop with Redis gone: the entry expires by itself
    finally:
        lease.close()
    assert "could not leave the members list" in caplog.text


def test_a_read_only_replica_is_unavailable_not_an_error(redis_url: str,
                                                        leases: tuple[Lease, Lease]) -> None:
    """A Redis that became a replica (a failover under way) refuses writes: the lease and
    the state store say so as StateUnavailable, which the worker waits out."""
    lease, _ = leases
    store = StateStore(redis_url, "src")
    admin = redis.Redis.from_url(redis_url)
    admin.replicaof("127.0.0.1", str(free_port()))  # nothing answers there
    try:
        writes: list[tuple[str, Callable[[], object]]] = [
            ("acquire", lease.acquire),
            ("publish_member", lambda: lease.publish_member("standby", "", 5)),
            ("save_progress", lambda: store.save_progress("0/1", {}, {})),
        ]
        for name, write in writes:
            with pytest.raises(StateUnavailable, match="Redis is a read-only replica") as info:
                write()
            assert isinstance(info.value.__cause__, redis.ReadOnlyError), name
        assert lease.current() == {}  # reads still work
    finally:
        admin.replicaof("NO", "ONE")
        admin.close()
        store.close()
    assert lease.acquire() == 1  # the primary again: the lease is taken as usual


def test_a_connection_cut_inside_a_fenced_write_is_unavailable_not_lost(
    redis_url: str, leases: tuple[Lease, Lease]
) -> None:
    """redis-py reports a connection dropped while watching as a WatchError, as it does a
    lease that changed: the store tells them apart (Redis away is retried; the lease is
    still held)."""
    a, _ = leases
    store = StateStore(redis_url, SOURCE)
    try:
        store.fence(a.acquire() or 0)
        store.publish_status({"run_id": "before"})

        def cut(pipe: redis.client.Pipeline) -> None:
            pipe.hset(store.key("worker"), mapping={"run_id": "cut"})
            with redis.Redis.from_url(redis_url) as other:  # the store's connection dies
                other.execute_command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")

        with pytest.raises(StateUnavailable, match="Redis is unreachable"):
            store._write(cut)
        assert store.status()["run_id"] == "before", "nothing of the cut write is there"
        store.publish_status({"run_id": "after"})  # the lease holds: the next write goes in
        assert store.status()["run_id"] == "after"
    finally:
        store.close()
