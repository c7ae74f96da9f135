"""XA transactions on MariaDB, with a running worker.

The server writes an XA transaction's rows to the binary log at ``XA PREPARE``, and
its ``XA COMMIT`` or ``XA ROLLBACK`` later, as a group of its own. The rows must reach
the output only at the commit, at the commit's positions, once; never after a rollback;
not lost by a restart between the two; and a chunk read while the transaction is
prepared (the old rows) must not outlive its changes.
"""

from __future__ import annotations

import dataclasses
import json
import random
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pymysql
import pytest

from dblog_worker.mysql.checkpoint import BinlogCheckpoint, file_number
from tests.integration.harness import (
    SOURCE,
    Backend,
    MariaDatabase,
    Session,
    WorkerProcess,
    Workers,
    assert_converged,
    checkpoint,
    dump,
    events_of,
    wait_for,
    wait_request,
)
from tests.services import MariaDBServer

# the integration suites' backend fixture, of this kind only
pytestmark = pytest.mark.parametrize("backend", ["mariadb"], indirect=True)


class Xa:
    """One XA transaction on a connection of its own: prepared, then committed or rolled
    back; rolled back at the end of the test if it is still prepared (its locks would
    keep the test database from being dropped)."""

    def __init__(self, backend: Backend) -> None:
        self.session: Session = backend.connect()
        self.name = f"xa-{uuid.uuid4().hex[:12]}"
        self.prepared = False

    def prepare(self, *statements: str) -> None:
        self.session.execute(f"XA START '{self.name}'")
        for statement in statements:
            self.session.execute(statement)
        self.session.execute(f"XA END '{self.name}'")
        self.session.execute(f"XA PREPARE '{self.name}'")
        self.prepared = True

    def commit(self) -> None:
        self.session.execute(f"XA COMMIT '{self.name}'")
        self.prepared = False

    def rollback(self) -> None:
        self.session.execute(f"XA ROLLBACK '{self.name}'")
        self.prepared = False

    def close(self) -> None:
        if self.prepared:
            self.rollback()
        self.session.close()


@pytest.fixture
def xa(backend: Backend) -> Iterator[Callable[[], Xa]]:
    started: list[Xa] = []

    def new() -> Xa:
        started.append(Xa(backend))
        return started[-1]

    yield new
    for transaction in started:
        transaction.close()


def keyed(backend: Backend) -> list[tuple[str, str, str]]:
    """The landed events of the test table: (key, op, position), in position order."""
    return [(str(e["key"]), str(e["op"]), str(e["position"]))
            for e in events_of(backend, backend.t1)]


def landed(backend: Backend, key: str) -> bool:
    return any(k == key for k, _, _ in keyed(backend))


def insert(backend: Backend, *ids: int) -> None:
    for id_ in ids:
        backend.execute(f"INSERT INTO {backend.t1} VALUES ({id_}, {backend.next_version}, "
                        "'plain')")


SHORT_LEASE = "[lease]\nttl_s = 1\nstandby_poll_s = 0.1\n"  # a killed worker's, soon expired


def capture(backend: Backend, worker_process: Callable[..., WorkerProcess],
            *ids: int) -> tuple[Path, WorkerProcess]:
    """The worker runs on an empty test table; rows ``ids`` inserted and landed."""
    backend.create(backend.t1, 0)
    config = backend.config_path([backend.t1], extra=SHORT_LEASE)
    worker = worker_process(config)
    insert(backend, *ids)
    wait_for(lambda: landed(backend, f"[{ids[-1]}]"), 30, "the first inserts", worker.log)
    return config, worker


def xa_changes(backend: Backend) -> tuple[str, ...]:
    """Keys 10 and 30 updated, 60 inserted, 20 deleted, 40 moved to 70."""
    t1, v = backend.t1, backend.next_version
    return (f"UPDATE {t1} SET version = {v}, payload = 'xa' WHERE id IN (10, 30)",
            f"INSERT INTO {t1} VALUES (60, {v}, 'xa')",
            f"DELETE FROM {t1} WHERE id = 20",
            f"UPDATE {t1} SET id = 70, version = {v}, payload = 'xa' WHERE id = 40")


XA_EVENTS = [("[10]", "u"), ("[30]", "u"), ("[60]", "c"), ("[20]", "d"), ("[40]", "d"),
             ("[70]", "c")]
XA_KEYS = {key for key, _ in XA_EVENTS}


def assert_landed_at_commit(backend: Backend, after: str, before: str) -> None:
    """Before the last event of key ``after`` (logged after the prepare), nothing of the XA
    transaction landed; after it and before key ``before`` (logged after the commit), its
    events landed once each, in order, all at one binlog event (the commit's), at twice
    the row's index in the transaction (+1 for a key change's create)."""
    events = keyed(backend)
    prepared = max(p for k, _, p in events if k == after)
    committed = min(p for k, _, p in events if k == before)
    assert [(k, op) for k, op, p in events if k in XA_KEYS and p < prepared] == [
        ("[10]", "c"), ("[20]", "c"), ("[30]", "c"), ("[40]", "c")], events
    ours = [(k, op, p) for k, op, p in events if k in XA_KEYS and p > prepared]
    assert [(k, op) for k, op, _ in ours] == XA_EVENTS, events
    positions = [p for _, _, p in ours]
    assert len({p[:32] for p in positions}) == 1, positions
    assert [int(p[32:], 16) for p in positions] == [0, 2, 4, 6, 8, 9]
    assert positions[-1] < committed


def test_xa_rows_land_at_their_commit(
    backend: Backend, worker_process: Callable[..., WorkerProcess], xa: Callable[[], Xa]
) -> None:
    """XA START; UPDATE, INSERT, DELETE, a key change; XA END; XA PREPARE; other
    transactions meanwhile; XA COMMIT: nothing lands at the prepare, every row lands once
    after the commit, at the commit's positions and in order; the output converges."""
    worker = capture(backend, worker_process, 10, 20, 30, 40, 50)[1]
    transaction = xa()
    transaction.prepare(*xa_changes(backend))
    insert(backend, 100)
    backend.execute(f"UPDATE {backend.t1} SET version = {backend.next_version} WHERE id = 50")
    wait_for(lambda: ("[50]", "u") in {(k, op) for k, op, _ in keyed(backend)}, 30,
             "the transactions after the prepare", worker.log)
    assert [k for k, op, _ in keyed(backend) if op != "c"] == ["[50]"], keyed(backend)
    transaction.commit()
    insert(backend, 110)
    wait_for(lambda: landed(backend, "[110]"), 30, "the insert after the commit", worker.log)
    assert_landed_at_commit(backend, after="[50]", before="[110]")
    assert_converged(backend, backend.t1)


def test_xa_rollback_lands_nothing(
    backend: Backend, worker_process: Callable[..., WorkerProcess], xa: Callable[[], Xa]
) -> None:
    """A prepared XA transaction rolled back leaves no trace in the output, while another
    one prepared meanwhile and committed after it lands whole."""
    worker = capture(backend, worker_process, 10, 20, 30, 40, 50)[1]
    rolled_back, committed = xa(), xa()
    rolled_back.prepare(f"UPDATE {backend.t1} SET version = {backend.next_version}, "
                        "payload = 'never' WHERE id = 50",
                        f"INSERT INTO {backend.t1} VALUES (90, {backend.next_version}, 'never')")
    committed.prepare(*xa_changes(backend))
    insert(backend, 100)
    rolled_back.rollback()
    committed.commit()
    insert(backend, 110)
    wait_for(lambda: landed(backend, "[110]"), 30, "the insert after the rollback",
             worker.log)
    payloads = [json.loads(str(e["after"]))["payload"] for e in events_of(backend, backend.t1)
                if e["after"]]
    assert "never" not in payloads
    assert not landed(backend, "[90]")
    assert_landed_at_commit(backend, after="[100]", before="[110]")
    assert_converged(backend, backend.t1)


def admin(server: MariaDBServer, statement: str) -> list[tuple[Any, ...]]:
    with pymysql.connect(**server.connect_args()) as conn, conn.cursor() as cursor:
        cursor.execute(statement)
        return list(cursor.fetchall())


def test_a_large_xa_transaction_lands_in_batches(
    backend: Backend, worker_process: Callable[..., WorkerProcess], xa: Callable[[], Xa]
) -> None:
    """An XA transaction of 5000 rows (many rows events, several of the reader's batches)
    is read again at its commit: every row lands once, in order, at the commit's event."""
    worker = capture(backend, worker_process, 1)[1]
    transaction = xa()
    transaction.prepare(f"INSERT INTO {backend.t1} SELECT g, {backend.next_version}, 'bulk' "
                        f"FROM {backend.db.series(10, 5009)}")
    insert(backend, 9000)
    transaction.commit()
    insert(backend, 9001)
    wait_for(lambda: landed(backend, "[9001]"), 30, "the insert after the commit", worker.log)
    events = keyed(backend)
    bulk = [(k, p) for k, _, p in events if k not in ("[1]", "[9000]", "[9001]")]
    assert [k for k, _ in bulk] == [f"[{i}]" for i in range(10, 5010)]
    assert {p[:32] for _, p in bulk} == {bulk[0][1][:32]}
    assert [int(p[32:], 16) for _, p in bulk] == list(range(0, 10000, 2))
    assert_converged(backend, backend.t1)


def xa_group_start(server: MariaDBServer, name: str) -> tuple[int, int]:
    """(file number, position) of the GTID event that opens XA transaction ``name``."""
    opening = f"XA START X'{name.encode().hex()}'"
    for (file, *_) in reversed(admin(server, "SHOW BINARY LOGS")):
        for row in admin(server, f"SHOW BINLOG EVENTS IN '{file}'"):
            if row[2] == "Gtid" and str(row[5]).startswith(opening):
                return file_number(str(file)), int(row[1])
    raise AssertionError(f"no {opening} in the binary log")


def test_xa_prepared_survives_a_worker_crash(
    backend: Backend, mariadb_server: MariaDBServer,
    worker_process: Callable[..., WorkerProcess], xa: Callable[[], Xa]
) -> None:
    """The worker is killed (kill -9) while an XA transaction is prepared; it commits
    while the worker is down. The saved checkpoint never passed the start of the prepared
    transaction, so the restarted worker reads it again: its rows land once, after the
    commit, and the changes before the crash do not land twice."""
    config, worker = capture(backend, worker_process, 10, 20, 30, 40, 50)
    transaction = xa()
    transaction.prepare(*xa_changes(backend))
    insert(backend, 100)
    wait_for(lambda: landed(backend, "[100]"), 30, "the insert after the prepare", worker.log)
    time.sleep(1.0)  # the checkpoint that covers it is saved (flush interval 0.2 s)
    saved = checkpoint(backend.redis_url)
    assert saved is not None
    at = BinlogCheckpoint.decode(saved)
    assert (file_number(at.file), at.pos) <= xa_group_start(mariadb_server,
                                                            transaction.name), saved
    assert [k for k, op, _ in keyed(backend) if op != "c" or k in ("[60]", "[70]")] == []
    worker.kill()
    transaction.commit()
    insert(backend, 110)
    again = worker_process(config)
    wait_for(lambda: landed(backend, "[110]"), 30, "the insert after the restart", again.log)
    assert_landed_at_commit(backend, after="[100]", before="[110]")
    assert [k for k, _, _ in keyed(backend)].count("[100]") == 1
    assert_converged(backend, backend.t1)


def test_xa_prepared_during_a_dump(
    backend: Backend, worker_process: Callable[..., WorkerProcess], xa: Callable[[], Xa]
) -> None:
    """A table dump runs while an XA transaction that changes rows of every chunk is
    prepared (the chunks read the old rows), and it commits after the dump: its changes
    land after the dump's rows, and the output converges without time travel."""
    t1, v = backend.t1, backend.next_version
    backend.create(t1, 300)
    config = backend.config_path([t1])
    worker = worker_process(config)
    transaction = xa()
    transaction.prepare(f"UPDATE {t1} SET version = {v}, payload = 'xa' WHERE mod(id, 70) = 0",
                        f"DELETE FROM {t1} WHERE id IN (15, 1500)",
                        f"UPDATE {t1} SET id = 3005, version = {v} WHERE id = 2990")
    request_id = dump(config, "--table", t1, "--chunk-size", "50")
    state = wait_request(backend.redis_url, SOURCE, request_id, ["completed", "failed"], 30,
                         worker)
    assert state["state"] == "completed", state
    transaction.commit()
    assert_converged(backend, t1)
    versions: dict[str, Any] = {}
    for event in events_of(backend, t1):
        if event["after"] and json.loads(str(event["after"]))["payload"] == "xa":
            versions[str(event["key"])] = event["origin"]
    assert len(versions) == 42 and set(versions.values()) == {"log"}


@pytest.fixture(scope="module")
def group_commit() -> Iterator[MariaDBServer]:
    """Commits wait for two more to be written with them (up to 5 ms): an XA COMMIT is
    often a follower in a group, committed in InnoDB only once the leader wakes it."""
    with MariaDBServer(settings={"binlog-commit-wait-count": "3",
                                 "binlog-commit-wait-usec": "5000"}).start() as server:
        yield server


@pytest.mark.parametrize("watermarks", ["table", "position"])
def test_xa_commits_of_the_rows_being_dumped_converge(
    backend: Backend, group_commit: MariaDBServer, watermarks: str
) -> None:
    """XA transactions update rows of the table being dumped and commit (XA COMMIT logs
    the commit before InnoDB makes it visible: a chunk SELECT that starts in between reads
    the old row of a change logged before its window), on a server with group commit.
    Dumps again and again, in both watermark modes: the output never goes back in time
    and converges."""
    backend = dataclasses.replace(
        backend, db=MariaDatabase(group_commit, group_commit.create_database(
            f"t_{uuid.uuid4().hex[:16]}")),
        source_extra='watermarks = "position"' if watermarks == "position" else "")
    with Workers(backend.tmp / "worker.log") as workers:
        _dump_under_xa_commits(backend, workers.start)


def _dump_under_xa_commits(backend: Backend,
                           worker_process: Callable[..., WorkerProcess]) -> None:
    t1 = backend.t1
    backend.create(t1, 300)
    config = backend.config_path([t1])
    worker = worker_process(config)
    stop = threading.Event()
    committed = [0]

    def write(seed: int) -> None:
        rnd = random.Random(seed)
        with backend.connect() as session:
            while not stop.is_set():
                name = f"xa-{seed}-{committed[0]}"
                session.execute(f"XA START '{name}'")
                session.run(backend.db.update(t1), (10 * rnd.randrange(1, 301),))
                session.execute(f"XA END '{name}'")
                session.execute(f"XA PREPARE '{name}'")
                session.execute(f"XA COMMIT '{name}'")
                committed[0] += 1
                # the reader reads each group again (two connections a commit): about 15
                # commits a second in all, which it keeps up with on a loaded machine too
                time.sleep(0.12)

    writers = [threading.Thread(target=write, args=(seed,)) for seed in range(2)]
    for thread in writers:
        thread.start()
    try:
        dumps = 0
        while dumps < 4 or committed[0] <= 40:  # four dumps at least, 40 XA commits among them
            assert dumps < 20, f"{committed[0]} XA commits in {dumps} dumps"
            request_id = dump(config, "--table", t1, "--chunk-size", "15")
            state = wait_request(backend.redis_url, SOURCE, request_id,
                                 ["completed", "failed"], 120, worker)
            assert state["state"] == "completed", state
            dumps += 1
    finally:
        stop.set()
        for thread in writers:
            thread.join(30)
    assert committed[0] > 40
    assert_converged(backend, t1)
