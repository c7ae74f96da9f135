"""What the fake-kind scenarios share: a fake database, a worker in a thread of this process
(its Redis a fakeredis server), dump requests, and the landing zone replayed."""

from __future__ import annotations

import contextlib
import itertools
import json
import random
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dblog_worker import config as config_module
from dblog_worker.capture.worker import Worker
from dblog_worker.config import Config
from dblog_worker.control.commands import create_dump
from dblog_worker.control.store import StateStore
from dblog_worker.dump.spec import DumpSpec
from dblog_worker.landing.parquet import LandingZone, read_events
from tests.fakedb import DATABASES, KIND
from tests.fakedb.database import DatabaseError, FakeDatabase, Key, Row, Transaction
from tests.fakedb.source import key_json

SOURCE = "src"
_names = itertools.count(1)


def wait_for(predicate: Callable[[], bool], timeout: float, what: str,
             on_timeout: Callable[[], str] = lambda: "") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}\n"
                                 f"{on_timeout()}")
        time.sleep(0.01)


def items_table(db: FakeDatabase, name: str, rows: int = 0) -> str:
    """A test table ``name``: ``id`` (the key), ``version`` (the commit that wrote the row,
    with a database made by :class:`Capture`), ``payload``; rows 10, 20, ..."""
    db.create_table(name, [("id", "int"), ("version", "int"), ("payload", "text")], ["id"])
    with db.transaction() as tx:
        for i in range(1, rows + 1):
            tx.upsert(name, {"id": i * 10, "version": 0, "payload": f"p{i}"})
    return name


@dataclass
class Replay:
    rows: dict[str, dict[str, Any]] = field(default_factory=dict)
    time_travel: list[str] = field(default_factory=list)
    events: int = 0


def replay(landing: Path, table: str) -> Replay:
    """The table's landed events applied in position order; a key's ``version`` must never
    go back (no time travel): every write takes a larger version than the last."""
    result = Replay()
    last = ""
    seen: dict[str, int] = {}
    for event in read_events(LandingZone(landing, SOURCE), table):
        position = str(event["position"])
        assert position >= last, f"output out of order at {position}"
        last = position
        result.events += 1
        op, key = event["op"], event["key"]
        if op == "t":
            result.rows.clear()
            continue
        assert isinstance(key, str)
        image = json.loads(str(event["before"] if op == "d" else event["after"]))
        version = image.get("version")
        if version is not None:
            if version < seen.get(key, -1):
                result.time_travel.append(f"{key}: {op} of version {version} at {position} "
                                          f"after version {seen[key]}")
            seen[key] = max(version, seen.get(key, -1))
        if op == "d":
            result.rows.pop(key, None)
        else:
            result.rows[key] = image
    return result


def texts(db: FakeDatabase, table: str, text: str) -> Row:
    """``text`` in each text column the table has now (the test's writes follow DDL)."""
    return {c.name: text for c in db.table(table).columns if c.type == "text"}


def random_write(tx: Transaction, db: FakeDatabase, rnd: random.Random, table: str,
                 key_space: int, text: str) -> bool:
    """One random write in ``tx``: an upsert, an update of the text columns, a delete, or a
    key change (then True) of a key below ``key_space``."""
    key = rnd.randrange(1, key_space)
    action = rnd.random()
    if action < 0.35:
        tx.upsert(table, {"id": key, **texts(db, table, text)})
    elif action < 0.7:
        tx.update(table, (key,), texts(db, table, text))
    elif action < 0.85:
        tx.delete(table, (key,))
    else:
        tx.update(table, (key,), {"id": rnd.randrange(1, key_space)})
        return True
    return False


def race_chunks(db: FakeDatabase, seed: int, share: float = 0.3) -> None:
    """After a ``share`` of the chunk SELECTs, before their high watermark: update, delete
    or move (a key change) one to three of the rows just read, in one transaction. A chunk
    row the window does not drop would land after the log's newer image: stale."""
    rnd = random.Random(seed)

    def race(table: str, keys: list[Key]) -> None:
        if rnd.random() >= share:
            return
        # a race that met a DROP COLUMN of the test's thread is refused, as the writers' are
        with contextlib.suppress(DatabaseError), db.transaction() as tx:
            for key in rnd.sample(keys, min(len(keys), rnd.randint(1, 3))):
                action = rnd.random()
                if action < 0.6:
                    tx.update(table, key, texts(db, table, f"race {rnd.random():.6f}"))
                elif action < 0.8:
                    tx.delete(table, key)
                else:
                    tx.update(table, key, {"id": rnd.randrange(1, 5000)})

    db.on_read = race


def landed_as(rows: Mapping[Key, Row]) -> dict[str, dict[str, Any]]:
    return {key_json(k): dict(r) for k, r in rows.items()}


class Capture:
    """One source ``src`` of kind ``fake`` over a new fake database: its configuration, the
    worker (started and stopped in threads of this process), requests, and checks."""

    def __init__(self, tmp: Path, tables: Sequence[str] = (), *, flush_s: float = 0.02,
                 source_extra: Mapping[str, object] | None = None) -> None:
        self.db = FakeDatabase(stamp="version")  # a key's versions grow in log order
        self.db_name = f"db{next(_names)}"
        DATABASES[self.db_name] = self.db
        self.tmp = tmp
        self.tables = list(tables)
        self.flush_s = flush_s
        self.source_extra = dict(source_extra or {})
        self.max_active_dumps: int | None = None  # [worker] max_active_dumps; None: default
        self.worker: Worker | None = None
        self.thread: threading.Thread | None = None
        self.failure: BaseException | None = None
        self.workers = 0

    @property
    def landing(self) -> Path:
        return self.tmp / "landing"

    def config(self) -> Config:
        return config_module.parse({
            "source": {"name": SOURCE, "kind": KIND, "dsn": f"fake:{self.db_name}",
                       "tables": self.tables, **self.source_extra},
            "redis": {"url": "redis://fake.invalid:6379/0"},
            "landing": {"path": str(self.landing), "flush_interval_s": self.flush_s},
            "worker": {"heartbeat_interval_s": 0.2, "control_interval_s": 0.02,
                       "status_interval_s": 0.1, "reconnect_max_s": 0.1,
                       "shutdown_timeout_s": 5,
                       **({} if self.max_active_dumps is None
                          else {"max_active_dumps": self.max_active_dumps})},
            "lease": {"ttl_s": 5, "renew_interval_s": 1, "standby_poll_s": 0.05},
            "http": {"enabled": False},
        }, {})

    # -- the worker ------------------------------------------------------------------------

    def start(self) -> Capture:
        assert self.thread is None or not self.thread.is_alive(), "a worker runs already"
        self.worker = worker = Worker(self.config())
        self.workers += 1
        sessions = worker.sessions

        def run() -> None:
            try:
                worker.run_forever(handle_signals=False)
            except BaseException as exc:
                self.failure = exc

        self.thread = threading.Thread(target=run, name=f"worker-{self.workers}", daemon=True)
        self.thread.start()
        wait_for(lambda: worker.sessions > sessions and self.streaming(), 10,
                 "the worker to stream", self.why)
        return self

    def streaming(self) -> bool:
        slot = self.db.slots.get(SOURCE)
        return slot is not None and self.failure is None

    def stop(self) -> None:
        """A clean stop: open windows close (or are abandoned), the output flushes."""
        assert self.worker is not None and self.thread is not None
        self.worker.stopping = True
        self.thread.join(15)
        assert not self.thread.is_alive(), "the worker did not stop"
        self.check_alive()

    def check_alive(self) -> None:
        if self.failure is not None:
            raise AssertionError(f"the worker failed: {self.failure!r}") from self.failure

    def why(self) -> str:
        return f"worker failure: {self.failure!r}; requests: {self.requests()}"

    # -- requests ----------------------------------------------------------------------------

    def state(self) -> StateStore:
        return StateStore(self.config().redis_url, SOURCE)

    def dump(self, kind: str, tables: Sequence[str] | None = None,
             keys: Sequence[object] | None = None, **options: Any) -> str:
        config = self.config()
        state = self.state()
        try:
            spec = DumpSpec.of(kind, tables, keys, **options)
            return create_dump(config, state, spec).id
        finally:
            state.close()

    def request(self, request_id: str) -> dict[str, str]:
        state = self.state()
        try:
            return {str(k): str(v) for k, v in
                    state.redis.hgetall(state.key("request", request_id)).items()}
        finally:
            state.close()

    def requests(self) -> list[dict[str, str]]:
        state = self.state()
        try:
            return [{str(f): str(v) for f, v in state.redis.hgetall(k).items()}
                    for k in state.redis.keys(state.key("request", "*"))
                    if state.redis.type(k) == "hash"]
        finally:
            state.close()

    def chunks(self, request_id: str) -> int:
        state = self.state()
        try:
            return sum(p.chunks for p in state.progress(request_id).values())
        finally:
            state.close()

    def wait_request(self, request_id: str, timeout: float = 20) -> dict[str, str]:
        def ended() -> bool:
            self.check_alive()
            return self.request(request_id).get("state") in ("completed", "failed")

        wait_for(ended, timeout, f"request {request_id} to end", self.why)
        return self.request(request_id)

    def wait_completed(self, *request_ids: str, timeout: float = 20) -> None:
        for request_id in request_ids:
            state = self.wait_request(request_id, timeout)
            assert state["state"] == "completed", state

    # -- the output --------------------------------------------------------------------------

    def caught_up(self) -> bool:
        """The checkpoint covers the whole log: everything committed so far has landed."""
        state = self.state()
        try:
            saved = state.checkpoint()
        finally:
            state.close()
        return saved is not None and int(saved) >= self.db.next_seq()

    def assert_converged(self, *tables: str, timeout: float = 20) -> None:
        """Once everything committed has landed, the replayed output equals each table
        (a column the output lacks counts as NULL), and no key went back in time."""
        def caught_up() -> bool:
            self.check_alive()
            return self.caught_up()

        wait_for(caught_up, timeout,
                 "the checkpoint to reach the end of the log", self.why)
        for table in tables:
            expected = landed_as(self.db.rows(table))
            result = replay(self.landing, table)
            got = {key: {c: row.get(c) for c in expected.get(key, row)}
                   for key, row in result.rows.items()}
            missing = sorted(set(expected) - set(got))[:10]
            extra = sorted(set(got) - set(expected))[:10]
            wrong = [(k, got[k], expected[k]) for k in expected
                     if k in got and got[k] != expected[k]][:5]
            assert got == expected, (f"{table}: missing {missing}, extra {extra}, "
                                     f"different {wrong}")
            assert result.time_travel == [], result.time_travel[:10]

    def events(self, table: str) -> list[dict[str, object]]:
        return read_events(LandingZone(self.landing, SOURCE), table)
