"""The worker and its MariaDB: several databases, a dropped binlog connection, the binlog
purged under the checkpoint, and resuming by file/position or by GTID.

The scenarios both sources share run against MariaDB in test_scenarios.py; these are about
what only a MySQL source has.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pymysql
import pytest

from dblog_worker.control.store import StateStore
from dblog_worker.mysql.checkpoint import BinlogCheckpoint
from tests.integration.harness import (
    SOURCE,
    Backend,
    MariaDatabase,
    WorkerProcess,
    assert_converged,
    checkpoint,
    dump,
    events_of,
    outage_mid_dump,
    wait_for,
    wait_request,
)
from tests.services import MariaDBServer

# the integration suites' backend fixture, of this kind only
pytestmark = pytest.mark.parametrize("backend", ["mariadb"], indirect=True)


@pytest.fixture
def second_database(mariadb_server: MariaDBServer) -> Iterator[MariaDatabase]:
    name = mariadb_server.create_database(f"t_{uuid.uuid4().hex[:16]}")
    yield MariaDatabase(mariadb_server, name)
    mariadb_server.drop_database(name)


def admin(server: MariaDBServer, *statements: str) -> list[tuple[Any, ...]]:
    """Run statements as root; the rows of the last one."""
    with pymysql.connect(**server.connect_args()) as conn, conn.cursor() as cursor:
        for statement in statements:
            cursor.execute(statement)
        return list(cursor.fetchall())


def binlog_files(server: MariaDBServer) -> list[str]:
    return [str(row[0]) for row in admin(server, "SHOW BINARY LOGS")]


def keys_of(backend: Backend, table: str) -> set[str]:
    return {str(e["key"]) for e in events_of(backend, table)}


def save_checkpoint(redis_url: str, value: BinlogCheckpoint) -> None:
    store = StateStore(redis_url, SOURCE)
    try:
        store.save_progress(value.encode(), {}, {})
    finally:
        store.close()


def one_row_then_stop(backend: Backend, worker_process: Callable[..., WorkerProcess],
                      payload: str) -> Path:
    """Capture the test table; insert row 1 and stop the worker once it has landed (so
    the checkpoint is past it). The worker's configuration."""
    backend.create(backend.t1, 0)
    config = backend.config_path([backend.t1])
    worker = worker_process(config)
    backend.execute(f"INSERT INTO {backend.t1} VALUES (1, {backend.next_version}, %s)",
                    (payload,))
    wait_for(lambda: "[1]" in keys_of(backend, backend.t1), 30, "the first insert",
             worker.log)
    assert worker.stop() == 0
    return config


# -- several databases ------------------------------------------------------------------


def test_two_databases_in_one_source(
    backend: Backend, second_database: MariaDatabase,
    worker_process: Callable[..., WorkerProcess]
) -> None:
    """Tables of two databases, with the same name, captured by one worker under a random
    workload and dumped: each converges, under its own ``database.table`` name; a table of
    the same database that is not captured stays out of the output."""
    first, second = backend.t1, second_database.table("items")
    uncaptured = backend.db.table("orders")
    backend.create(first, 600)
    second_database.create_test_table(second, 400)
    backend.create(uncaptured, 10)
    config = backend.config_path([first, second])
    worker = worker_process(config)
    workload = backend.workload([first, second, uncaptured], seed=7)
    workload.start()
    try:
        request_id = dump(config, "--all", "--chunk-size", "29")
        state = wait_request(backend.redis_url, SOURCE, request_id, ["completed", "failed"],
                             60, worker)
        assert state["state"] == "completed", state
        single = dump(config, "--table", second, "--chunk-size", "50")
        state = wait_request(backend.redis_url, SOURCE, single, ["completed", "failed"], 60,
                             worker)
        assert state["state"] == "completed", state
        wait_for(lambda: workload.transactions > 20, 60, "the workload's writes")
    finally:
        workload.stop()
    assert workload.transactions > 20
    assert_converged(backend, first)
    assert_converged(Backend(second_database, backend.redis_url, backend.tmp,
                             backend.restart_source), second)
    directories = sorted(p.name for p in (backend.landing / SOURCE).iterdir()
                         if not p.name.startswith("."))  # the writer's staging directory
    assert directories == sorted([first, second])
    dumped = [e for e in events_of(backend, second) if e["dump_id"] == single]
    assert dumped and {e["origin"] for e in dumped} == {"dump"}


# -- the binlog connection drops --------------------------------------------------------


def test_binlog_connection_killed_mid_dump(
    backend: Backend, mariadb_server: MariaDBServer,
    worker_process: Callable[..., WorkerProcess]
) -> None:
    """The server kills the worker's binlog connection while a dump runs: the session ends
    (the open window is abandoned), the next one resumes from the checkpoint and redoes the
    window; the dump completes and the output converges."""

    def kill() -> None:
        threads = admin(mariadb_server, "SELECT ID FROM information_schema.PROCESSLIST "
                                        "WHERE COMMAND LIKE 'Binlog Dump%'")
        assert threads, "no binlog dump thread"
        for (thread,) in threads:
            admin(mariadb_server, f"KILL {int(thread)}")
        backend.execute(f"UPDATE {backend.t1} SET version = {backend.next_version} "
                        "WHERE mod(id, 70) = 0")

    outage_mid_dump(backend, worker_process, kill, "session ended")


# -- the binlog is gone ---------------------------------------------------------------


@pytest.mark.parametrize("resume", ["gtid", "file"])
def test_purged_binlog_stops_the_worker(
    backend: Backend, mariadb_server: MariaDBServer, resume: str,
    worker_process: Callable[..., WorkerProcess]
) -> None:
    """The binlog at the checkpoint is purged while the worker is stopped: it exits 1 and
    says the log is gone and that a full dump is needed, and how to ask for it, instead of
    going on without the changes it lost."""
    t1, v = backend.t1, backend.next_version
    config = one_row_then_stop(backend, worker_process, "kept")
    saved = checkpoint(backend.redis_url)
    assert saved is not None
    at = BinlogCheckpoint.decode(saved)
    assert at.gtid, "MariaDB checkpoints carry the GTID state"
    if resume == "file":
        save_checkpoint(backend.redis_url, BinlogCheckpoint(at.file, at.pos))
    backend.execute(f"INSERT INTO {t1} VALUES (2, {v}, 'lost')")
    admin(mariadb_server, "FLUSH BINARY LOGS")

    def purged() -> bool:  # a binlog dump thread of a killed client may hold it a moment
        newest = binlog_files(mariadb_server)[-1]
        admin(mariadb_server, f"PURGE BINARY LOGS TO '{newest}'")
        return binlog_files(mariadb_server) == [newest]

    wait_for(purged, 30, "the old binlogs to be purged")
    again = worker_process(config, streaming=False)
    wait_for(lambda: not again.alive(), 30, "the worker to stop", again.log)
    assert again.proc is not None and again.proc.returncode == 1
    log = again.log()
    assert "binary log" in log and "gone" in log, log[-3000:]
    assert "dblog dump --all" in log, log[-3000:]
    assert "Traceback" not in log, log[-3000:]
    assert "[2]" not in keys_of(backend, t1)


# -- where the log resumes --------------------------------------------------------------


def master_status(server: MariaDBServer) -> BinlogCheckpoint:
    file, pos, *_ = admin(server, "SHOW MASTER STATUS")[0]
    (gtid,) = admin(server, f"SELECT BINLOG_GTID_POS('{file}', {int(pos)})")[0]
    return BinlogCheckpoint(str(file), int(pos), str(gtid))


@pytest.mark.parametrize("resume", ["file", "gtid"])
def test_resume_from_a_checkpoint(
    backend: Backend, mariadb_server: MariaDBServer, resume: str,
    worker_process: Callable[..., WorkerProcess]
) -> None:
    """A checkpoint without GTID resumes at its file and position; one with a GTID state
    resumes after that GTID (its position, here the start of the file, is not used). Either
    way the change before the checkpoint is not read and the change after it is."""
    t1, v = backend.t1, backend.next_version
    config = one_row_then_stop(backend, worker_process, "first")
    admin(mariadb_server, "FLUSH BINARY LOGS")
    backend.execute(f"INSERT INTO {t1} VALUES (100, {v}, 'before the checkpoint')")
    at = master_status(mariadb_server)
    assert at.gtid
    save_checkpoint(backend.redis_url, BinlogCheckpoint(at.file, at.pos) if resume == "file"
                    else BinlogCheckpoint(at.file, 4, at.gtid))
    backend.execute(f"INSERT INTO {t1} VALUES (200, {v}, 'after the checkpoint')")
    worker = worker_process(config)
    backend.execute(f"INSERT INTO {t1} VALUES (300, {v}, 'while running')")
    wait_for(lambda: "[300]" in keys_of(backend, t1), 30, "the insert while running",
             worker.log)
    assert keys_of(backend, t1) == {"[1]", "[200]", "[300]"}
    after = [json.loads(str(e["after"]))["payload"] for e in events_of(backend, t1)]
    assert after == ["first", "after the checkpoint", "while running"]
    # A GTID state again, once the checkpoint of the last write is saved (after it is durable).
    def gtid_saved() -> bool:
        saved = checkpoint(backend.redis_url)
        return saved is not None and bool(BinlogCheckpoint.decode(saved).gtid)

    wait_for(gtid_saved, 15, "a checkpoint with a GTID state", worker.log)


# -- a column's definition changes ------------------------------------------------------


def test_column_definitions_changed_mid_stream(
    backend: Backend, worker_process: Callable[..., WorkerProcess]
) -> None:
    """ALTER TABLE changes a DECIMAL's scale, a DATETIME's fraction digits and an ENUM's
    members (names and binlog types stay): the events after it are written with the new
    definitions, the same bytes as a dump reads."""
    table = backend.db.table("measures")
    backend.execute(f"CREATE TABLE {table} (id int PRIMARY KEY, d decimal(10,4), "
                    "t datetime(0), e enum('a','b'))")
    config = backend.config_path([table])
    worker = worker_process(config)
    backend.execute(f"INSERT INTO {table} VALUES (1, 1.2345, '2024-01-01 10:00:00', 'a')")
    wait_for(lambda: "[1]" in keys_of(backend, table), 30, "the first insert", worker.log)
    backend.execute(f"ALTER TABLE {table} MODIFY d decimal(10,2), MODIFY t datetime(6), "
                    "MODIFY e enum('a','b','c')")
    backend.execute(f"INSERT INTO {table} VALUES (2, 9.87, '2024-01-01 10:00:00.123456', 'c')")
    backend.execute(f"UPDATE {table} SET e = 'c' WHERE id = 1")
    wait_for(lambda: {("c", "[2]"), ("u", "[1]")} <= {(str(e["op"]), str(e["key"]))
                                                      for e in events_of(backend, table)},
             30, "the changes after the ALTER", worker.log)
    logged = {str(e["key"]): str(e["after"]) for e in events_of(backend, table)}
    assert logged["[1]"] == '{"id":1,"d":"1.23","t":"2024-01-01 10:00:00.000000","e":"c"}'
    assert logged["[2]"] == '{"id":2,"d":"9.87","t":"2024-01-01 10:00:00.123456","e":"c"}'
    request_id = dump(config, "--table", table)
    state = wait_request(backend.redis_url, SOURCE, request_id, ["completed", "failed"], 30,
                         worker)
    assert state["state"] == "completed", state
    dumped = {str(e["key"]): str(e["after"]) for e in events_of(backend, table)
              if e["dump_id"] == request_id}
    assert dumped == logged


# -- minimal source impact --------------------------------------------------------------


def tables_written(server: MariaDBServer, start: tuple[str, int]) -> set[str]:
    """The tables of every row event in the binary log from ``start`` on (its Table_map
    events say ``table_id: N (database.table)``)."""
    files = binlog_files(server)
    written: set[str] = set()
    for file in files[files.index(start[0]):]:
        position = start[1] if file == start[0] else 4
        for row in admin(server, f"SHOW BINLOG EVENTS IN '{file}' FROM {int(position)}"):
            if row[2] == "Table_map":
                written.add(str(row[5]).rsplit("(", 1)[1].rstrip(")"))
    return written


def lock_statements(server: MariaDBServer) -> dict[str, int]:
    rows = admin(server, "SHOW GLOBAL STATUS WHERE Variable_name IN "
                         "('Com_lock_tables', 'Com_flush', 'Com_lock_tables_for_backup', "
                         "'Com_backup_lock')")
    return {str(name): int(value) for name, value in rows}


def test_the_worker_writes_only_its_watermark_row(
    backend: Backend, mariadb_server: MariaDBServer,
    worker_process: Callable[..., WorkerProcess]
) -> None:
    """Invariant 6 on MariaDB: a dump of every kind writes nothing but dblog.watermark (the
    binary log, which records every write, maps no other table), and no statement locks or
    flushes tables."""
    backend.create(backend.t1, 500)
    config = backend.config_path([backend.t1])
    worker = worker_process(config)
    start = admin(mariadb_server, "SHOW MASTER STATUS")[0]
    locks = lock_statements(mariadb_server)
    keys = ["--table", backend.t1, "--keys", "[10, 20, 7]"]
    for scope in (["--all"], ["--table", backend.t1], keys):
        request_id = dump(config, *scope, "--chunk-size", "50")
        state = wait_request(backend.redis_url, SOURCE, request_id, ["completed", "failed"],
                             60, worker)
        assert state["state"] == "completed", state
    assert tables_written(mariadb_server, (str(start[0]), int(start[1]))) == {"dblog.watermark"}
    assert lock_statements(mariadb_server) == locks
    dumped = [e for e in events_of(backend, backend.t1) if e["origin"] == "dump"]
    assert len(dumped) == 500 + 500 + 2
