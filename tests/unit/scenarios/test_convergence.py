"""Seeded random histories on the fake kind: writes, deletes, key changes, DDL, commits
held invisible, dumps of every kind and worker restarts, interleaved with the worker's
loop. After each, the replayed landing zone equals the fake's tables, and no event of a key
is older than one before it (no time travel)."""

from __future__ import annotations

import random
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import fakeredis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fakedb import DATABASES
from tests.fakedb.database import FakeDatabase
from tests.unit.scenarios.capture import Capture, items_table, race_chunks, random_write
from tests.unit.scenarios.test_dumps import T1, T2

Step = tuple[str, int, int]
PRIORITIES = ("urgent", "normal", "background")

STEPS = st.one_of(
    st.tuples(st.just("writes"), st.integers(1, 40), st.integers(0, 2**16)),
    st.tuples(st.just("held writes"), st.integers(1, 10), st.integers(0, 2**16)),
    # a dump's seed: its variant (seed % 2) and its priority (PRIORITIES[seed // 2])
    st.tuples(st.sampled_from(["all", "tables", "parallel", "filtered", "keys"]),
              st.integers(3, 60), st.integers(0, 5)),
    st.tuples(st.sampled_from(["add column", "drop column", "restart", "truncate"]),
              st.just(0), st.integers(0, 1)),
)


class History:
    """Applies steps to a capture (the database stamps each row's version with its commit)."""

    def __init__(self, capture: Capture) -> None:
        self.capture = capture
        self.db: FakeDatabase = capture.db
        self.columns = 0
        self.requests: list[str] = []

    def writes(self, count: int, seed: int) -> None:
        rnd = random.Random(seed)
        for _ in range(count):
            with self.db.transaction() as tx:
                for _ in range(rnd.choice([1, 1, 3])):
                    random_write(tx, self.db, rnd, rnd.choice([T1, T2]), 120, f"v{seed}")

    def apply(self, step: Step) -> None:
        name, size, seed = step
        capture, db = self.capture, self.db
        db.publish()  # what an earlier step held becomes visible
        if name == "writes":
            self.writes(size, seed)
        elif name == "held writes":
            with db.hold_visibility():
                self.writes(size, seed)
        elif name == "add column":
            self.columns += 1
            db.add_column([T1, T2][seed], f"c{self.columns}", "text")
        elif name == "drop column":
            table = db.table([T1, T2][seed])
            extra = [c.name for c in table.columns if c.name not in ("id", "version")]
            if extra:
                db.drop_column(table.name, extra[-1])
        elif name == "truncate":
            with db.transaction() as tx:
                tx.truncate([T1, T2][seed])
        elif name == "restart":
            capture.stop()
            capture.start()
        else:  # a dump: several run at once (max_active_dumps), their windows by priority
            self.dump(name, size, seed % 2, PRIORITIES[seed // 2])

    def dump(self, name: str, size: int, variant: int, priority: str) -> None:
        capture = self.capture
        if name == "all":
            self.requests.append(capture.dump("all", chunk_size=size, priority=priority))
        elif name == "tables":
            self.requests.append(capture.dump("tables", [T2, T1][variant:], chunk_size=size,
                                              priority=priority))
        elif name == "parallel":
            self.requests.append(capture.dump("tables", [T1, T2], chunk_size=size,
                                              parallelism=2 + variant, priority=priority))
        elif name == "filtered":
            self.requests.append(capture.dump("tables", [T1, T2], chunk_size=size,
                                              where=[["version", ">=", "0"]],
                                              priority=priority))
        else:
            keys = [k[0] for k in self.db.rows(T1)] + [9999]
            self.requests.append(capture.dump("keys", [T1], keys, chunk_size=size,
                                              priority=priority))


@contextmanager
def fresh_capture(server: fakeredis.FakeServer) -> Iterator[Capture]:
    fakeredis.FakeRedis(server=server).flushall()
    with tempfile.TemporaryDirectory(prefix="dblog-fake-") as tmp:
        capture = Capture(Path(tmp))
        try:
            yield capture
        finally:
            if capture.thread is not None and capture.thread.is_alive():
                capture.stop()
            DATABASES.clear()


@settings(max_examples=12, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(steps=st.lists(STEPS, min_size=2, max_size=8))
def test_random_histories_converge_without_time_travel(
        fake_kind: str, fake_redis: fakeredis.FakeServer, steps: list[Step]) -> None:
    with fresh_capture(fake_redis) as capture:
        capture.tables = [T1, T2]
        capture.start()  # before the tables exist: every row goes through the log, so the
        items_table(capture.db, T1, 60)  # output converges only if no dump lands a stale row
        items_table(capture.db, T2, 40)
        race_chunks(capture.db, seed=len(steps))
        history = History(capture)
        history.requests.append(capture.dump("tables", [T1], chunk_size=7))
        for step in steps:
            history.apply(step)
        capture.db.publish()
        capture.wait_completed(*history.requests, timeout=30)
        capture.assert_converged(T1, T2)
