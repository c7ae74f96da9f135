"""Dumps of every kind through the real Worker and Session, on the fake kind, while the
test writes: the replayed landing zone equals the tables, and no key goes back in time."""

from __future__ import annotations

import contextlib
import random
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from dblog_worker import kinds
from dblog_worker.requests import RequestState
from tests.fakedb.database import DatabaseError, FakeDatabase
from tests.unit.scenarios.capture import (
    Capture,
    items_table,
    race_chunks,
    random_write,
    wait_for,
)

T1, T2 = "shop.items", "shop.orders"


class Writer(threading.Thread):
    """Seeded random transactions on ``tables``: upserts, updates, deletes, key changes (the
    database stamps each row's ``version`` with its commit)."""

    def __init__(self, db: FakeDatabase, tables: list[str], seed: int,
                 key_space: int = 400) -> None:
        super().__init__(daemon=True)
        self.db, self.tables, self.random = db, tables, random.Random(seed)
        self.key_space = key_space
        self.stopped = threading.Event()
        self.transactions = self.key_changes = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while not self.stopped.wait(0.0005):
                self.step()
        except BaseException as exc:
            self.error = exc

    def step(self) -> None:
        with contextlib.suppress(DatabaseError):  # a write that raced a DROP COLUMN: refused
            self._transaction()

    def _transaction(self) -> None:
        rnd = self.random
        with self.db.transaction() as tx:
            for _ in range(rnd.choice([1, 1, 2, 4])):
                if random_write(tx, self.db, rnd, rnd.choice(self.tables), self.key_space,
                                f"w{self.transactions}"):
                    self.key_changes += 1
        self.transactions += 1

    def stop(self) -> None:
        self.stopped.set()
        self.join(10)
        assert self.error is None, repr(self.error)


@contextmanager
def writing(capture: Capture, tables: list[str], seed: int) -> Iterator[Writer]:
    writer = Writer(capture.db, tables, seed)
    writer.start()
    try:
        yield writer
        # a dump may end before the writer has done much: it writes on a while, then stops
        wait_for(lambda: writer.transactions > 20 and writer.key_changes > 0, 10,
                 "the writer's transactions")
    finally:
        writer.stop()


@pytest.fixture
def shop(capture: Capture) -> Capture:
    items_table(capture.db, T1, 300)
    items_table(capture.db, T2, 200)
    capture.tables = [T1, T2]
    return capture.start()


@pytest.mark.parametrize("kind", ["all", "tables", "parallel", "filtered", "keys", "range"])
def test_a_dump_of_every_kind_converges_under_writes(shop: Capture, kind: str) -> None:
    race_chunks(shop.db, seed=len(kind))
    with writing(shop, [T1, T2], seed=len(kind)):
        if kind == "all":
            ids = [shop.dump("all", chunk_size=37)]
        elif kind == "tables":
            ids = [shop.dump("tables", [T2, T1], chunk_size=53)]
        elif kind == "parallel":
            ids = [shop.dump("tables", [T1, T2], chunk_size=29, parallelism=3)]
        elif kind == "filtered":  # conditions every row meets: the whole table converges
            ids = [shop.dump("tables", [T1, T2], chunk_size=47, parallelism=2,
                             where=[["version", ">=", "0"], ["payload", "is not null"]])]
        elif kind == "range":  # the whole key space, as a key range (one table's)
            ids = [shop.dump("tables", [T1], chunk_size=31, from_key=0, to_key=1_000_000),
                   shop.dump("tables", [T2], chunk_size=31, from_key=0, to_key=1_000_000)]
        else:
            keys = [key[0] for key in shop.db.rows(T1)]
            ids = [shop.dump("keys", [T1], [*keys, 999_999], chunk_size=41),
                   shop.dump("tables", [T2], chunk_size=64)]
        shop.wait_completed(*ids)
    shop.assert_converged(T1, T2)
    dumped = [e for e in shop.events(T1) if e["op"] == "r"]
    assert dumped, "the dump landed no row"


def test_a_filtered_dump_lands_only_the_rows_it_selects(shop: Capture) -> None:
    """A dump of the rows whose payload is p1..p9 (the log's changes land whatever they are)."""
    wanted = [f"p{i}" for i in range(1, 10)]
    request = shop.dump("tables", [T1], chunk_size=4, where=[["payload", "in", *wanted]])
    shop.wait_completed(request)
    dumped = {e["key"] for e in shop.events(T1) if e["op"] == "r"}
    assert dumped == {f"[{i * 10}]" for i in range(1, 10)}


@pytest.mark.parametrize("slots", [1, 4])
def test_several_requests_run_by_priority(capture: Capture, slots: int) -> None:
    """Requests of every priority, queued before the worker starts: with one slot
    (``max_active_dumps``) they run one at a time, the most urgent first, then the oldest;
    with four, side by side, their windows shared by weight. Each completes, under writes,
    and the output converges."""
    items_table(capture.db, T1, 300)
    items_table(capture.db, T2, 200)
    capture.tables = [T1, T2]
    capture.max_active_dumps = slots
    ids = [capture.dump("tables", [T1], chunk_size=50, priority="background"),
           capture.dump("tables", [T2], chunk_size=30),
           capture.dump("keys", [T2], [10, 20, 30]),  # urgent: a key dump's default
           capture.dump("all", chunk_size=100, priority="urgent")]
    assert [capture.request(i)["priority"] for i in ids] == [
        "background", "normal", "urgent", "urgent"]
    capture.start()
    with writing(capture, [T1, T2], seed=7):
        capture.wait_completed(*ids)
    capture.assert_converged(T1, T2)
    if slots == 1:
        ended = sorted(ids, key=lambda i: float(capture.request(i)["updated_at"]))
        assert ended == [ids[2], ids[3], ids[1], ids[0]], ended


def test_the_fake_kind_is_not_one_the_product_ships() -> None:
    """The worker above ran on a kind the product does not register: adding a database is
    its package and one registry line (the fixture's)."""
    assert "fake" not in kinds.REGISTRY


def test_a_malformed_request_is_failed_and_the_next_one_runs(capture: Capture) -> None:
    """The quarantine script (Lua: TYPE's status reply, ZREM, HSET) on fakeredis: a request
    whose record cannot be read leaves the queue failed; the log and the next request go on."""
    items_table(capture.db, T1, 30)
    capture.tables = [T1]
    bad, good = capture.dump("tables", [T1]), capture.dump("tables", [T1], chunk_size=7)
    state = capture.state()
    try:
        state.redis.hset(state.key("request", bad), "chunk_size", "many")
    finally:
        state.close()
    capture.start()
    failed = capture.wait_request(bad)
    assert failed["state"] == "failed" and "chunk_size" in failed["error"], failed
    capture.wait_completed(good)
    capture.assert_converged(T1)


def test_a_dump_paused_retuned_and_resumed(shop: Capture) -> None:
    """The operator's commands (Lua transitions and knob changes, on fakeredis) mid-dump."""
    request = shop.dump("tables", [T1], chunk_size=5, delay_ms=5)
    wait_for(lambda: shop.chunks(request) >= 3, 10, "three chunks", shop.why)
    state = shop.state()
    try:
        assert state.transition(request, RequestState.PAUSED) is RequestState.RUNNING
        assert state.set_knobs(request, chunk_size=40, delay_ms=0).chunk_size == 40
        with writing(shop, [T1], seed=17):
            state.transition(request, RequestState.RUNNING)
            shop.wait_completed(request)
    finally:
        state.close()
    shop.assert_converged(T1)
