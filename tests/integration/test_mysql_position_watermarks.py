"""Watermarks without a table on MariaDB (``watermarks = "position"``), on a real server set
up as production ones often are: group commit (transactions wait to be written to the
binary log together) and ``READ-COMMITTED`` as the server's isolation level.

Each chunk SELECT runs in a consistent snapshot; the binary log positions of a window's
snapshots are its LW and HW. Dumps of every kind converge under a concurrent workload;
writes to the chunk's rows before and after its snapshot come out in commit order; a user
that may only read the tables and the binary log runs them; kill -9 mid-dump resumes; the
DDL-mid-dump and truncate-mid-dump scenarios (imported, run here in this mode); preflight
tells which modes the server allows and refuses a table that the snapshots do not cover.
"""

from __future__ import annotations

import json
import random
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pymysql
import pytest

from dblog_worker import config as config_module
from dblog_worker.control.store import StateStore
from dblog_worker.events import DumpRows
from dblog_worker.landing.parquet import LandingZone
from dblog_worker.position import Position
from dblog_worker.tables import WATERMARK_SCHEMA
from tests.integration.harness import (
    HOSTILE,
    KILLED_LEASE,
    PARTITIONED,
    PLAIN,
    SOURCE,
    Backend,
    MariaDatabase,
    TableFlavour,
    WorkerProcess,
    Workers,
    assert_converged,
    chunks,
    cli,
    dump,
    dump_through_kills,
    dumps_under_load,
    events_of,
    wait_for,
    wait_request,
)
from tests.integration.test_ddl_mid_dump import (  # noqa: F401 (run here, in this mode)
    test_ddl_right_before_a_parallel_window,
    test_ddl_right_before_a_window,
)
from tests.integration.test_scenarios import (  # noqa: F401 (run here, in this mode)
    hook_write,
    run_in_thread,
    test_truncate_mid_dump_converges,
)
from tests.services import MariaDBReplica, MariaDBServer

POSITION = 'watermarks = "position"'
# Group commit: a commit waits up to 5 ms for two more to be written with it.
PRODUCTION_LIKE = {"binlog-commit-wait-count": "3", "binlog-commit-wait-usec": "5000",
                   "transaction-isolation": "READ-COMMITTED"}


@pytest.fixture(scope="module")
def server() -> Iterator[MariaDBServer]:
    with MariaDBServer(settings=PRODUCTION_LIKE).start() as started:
        yield started


@pytest.fixture
def backend(server: MariaDBServer, redis_url: str, tmp_path: Path) -> Iterator[Backend]:
    if not server.running:
        server.restart()
    name = server.create_database(f"t_{uuid.uuid4().hex[:16]}")
    admin(server, f"DROP DATABASE IF EXISTS {WATERMARK_SCHEMA}")
    yield Backend(MariaDatabase(server, name), redis_url, tmp_path, server.restart,
                  source_extra=POSITION)
    server.drop_database(name)


@pytest.fixture
def worker_process(backend: Backend) -> Iterator[Callable[..., WorkerProcess]]:
    with Workers(backend.tmp / "worker.log") as workers:
        yield workers.start


def admin(server: MariaDBServer, *statements: str) -> list[tuple[Any, ...]]:
    connection = pymysql.connect(**server.connect_args())
    rows: list[tuple[Any, ...]] = []
    with connection, connection.cursor() as cursor:
        for statement in statements:
            cursor.execute(statement)
            rows = list(cursor.fetchall())
    return rows


def no_watermark_table(server: MariaDBServer) -> None:
    assert admin(server, "SELECT SCHEMA_NAME FROM information_schema.SCHEMATA WHERE "
                 f"SCHEMA_NAME = '{WATERMARK_SCHEMA}'") == []


def test_the_server_is_set_up_as_production_ones_are(server: MariaDBServer) -> None:
    assert admin(server, "SELECT @@global.binlog_commit_wait_count, @@global.tx_isolation, "
                 "@@global.binlog_commit_wait_usec") == [(3, "READ-COMMITTED", 5000)]


@pytest.mark.parametrize(("kind", "flavour"), [
    ("tables", PLAIN), ("keys", PLAIN), ("parallel", PLAIN), ("parallel", HOSTILE),
    ("all", PARTITIONED), ("filtered", HOSTILE), ("prune", PLAIN),
], ids=["tables", "keys", "parallel", "parallel-hostile-names", "partitioned-all",
        "filtered-hostile-names", "prune"])
def test_dumps_converge_under_load_with_position_watermarks(
        backend: Backend, server: MariaDBServer, kind: str, flavour: TableFlavour,
        worker_process: Callable[..., WorkerProcess]) -> None:
    backend.use(flavour)
    t1, t2 = backend.t1, backend.t2
    backend.create(t1, 1200)
    backend.create(t2, 700)
    config = backend.config_path([t1, t2])
    ids = dumps_under_load(backend, config, worker_process(config), kind)
    assert_converged(backend, t1, t2)
    assert chunks(backend, ids[-1]) > 5
    no_watermark_table(server)


@pytest.mark.parametrize("moment", ["after_low", "after_select"])
@pytest.mark.parametrize("write", ["delete", "insert", "key change", "update"])
@pytest.mark.parametrize("kind", ["table", "keys"])
def test_writes_around_the_snapshot(backend: Backend, moment: str, write: str,
                                    kind: str) -> None:
    """Writes to rows of the chunk being read, before its snapshot (``after_low``) or after
    its SELECT, while the binary log reader has read past the snapshot's position: the
    chunk's rows go out at the snapshot's position, between the two writes' events."""
    t1 = backend.t1
    backend.create(t1, 200)
    path = backend.config_path([t1])
    config = config_module.load(path)
    windows: list[int] = []
    writer = backend.connect()

    def hook(_: str) -> None:
        number = len(windows)
        windows.append(number)
        low = 200 * number + 10  # window n reads ids 200n+10 .. 200n+200: touch two
        writer.execute(hook_write(backend, write, t1, low + 50, low + 120))
        time.sleep(0.01)  # the reader has read the write before the window's marks

    worker, thread = run_in_thread(config, {moment: hook})
    try:
        if kind == "table":
            request_id = dump(path, "--table", t1, "--chunk-size", "20")
        else:
            request_id = dump(path, "--table", t1, "--keys",
                              json.dumps(list(range(10, 2001, 10))), "--chunk-size", "20")
        state = wait_request(backend.redis_url, SOURCE, request_id, ["completed", "failed"], 60)
        assert state["state"] == "completed", state
        assert_converged(backend, t1)
        store = StateStore(backend.redis_url, SOURCE)
        try:
            progress = store.progress(request_id)[t1]
        finally:
            store.close()
        assert len(windows) >= 8
        # one snapshot a window: LW = HW, nothing to drop; the writes after the SELECT
        # come after the rows, as their events follow the snapshot's position
        assert progress.dropped == 0, progress
    finally:
        worker.stopping = True
        thread.join(30)
        writer.close()
    assert not thread.is_alive()


def test_a_user_that_may_only_read_and_replicate_runs_dumps(
        backend: Backend, server: MariaDBServer,
        worker_process: Callable[..., WorkerProcess]) -> None:
    t1, t2 = backend.t1, backend.t2
    backend.create(t1, 500)
    backend.create(t2, 0)
    user = f"reader_{uuid.uuid4().hex[:8]}"
    database = t1.split(".")[0]
    admin(server, f"CREATE USER '{user}'@'%'",
          f"GRANT REPLICATION SLAVE, BINLOG MONITOR ON *.* TO '{user}'@'%'",
          f"GRANT SELECT ON `{database}`.* TO '{user}'@'%'")
    try:
        config = backend.config_path([t1, t2])
        text = config.read_text().replace(server.url(), server.url(user=user))
        config.write_text(text)
        result = cli(config, "preflight", check=False)
        assert result.returncode == 0, result.stdout + result.stderr
        assert 'watermarks = "position" (configured): available' in result.stdout
        assert 'watermarks = "table": upserts' in result.stdout
        worker = worker_process(config)
        request_id = dump(config, "--all", "--chunk-size", "50")
        backend.execute(f"INSERT INTO {t2} VALUES (1, {backend.next_version}, 'live')")
        state = wait_request(backend.redis_url, SOURCE, request_id, ["completed", "failed"],
                             60, worker)
        assert state["state"] == "completed", state
        assert_converged(backend, t1, t2)
        no_watermark_table(server)
    finally:
        admin(server, f"DROP USER '{user}'@'%'")


def test_kill_9_during_a_dump_with_position_watermarks_resumes(
        backend: Backend, worker_process: Callable[..., WorkerProcess]) -> None:
    t1, t2 = backend.t1, backend.t2
    backend.create(t1, 6000)
    backend.create(t2, 2000)  # about 40 windows of two ranges
    dump_through_kills(backend, backend.config_path([t1, t2], flush_interval_s=0.1,
                                                   extra=KILLED_LEASE),
                       worker_process, ["--all", "--chunk-size", "100", "--delay-ms", "20",
                                        "--parallelism", "2"],
                       [8, 20], random.Random(11))


def test_an_idle_source_closes_windows_without_writes(
        backend: Backend, server: MariaDBServer,
        worker_process: Callable[..., WorkerProcess]) -> None:
    """Nothing is written while the dump runs, and a rotated binary log: each window's
    positions are where the log already is, and the windows close."""
    t1 = backend.t1
    backend.create(t1, 600)
    config = backend.config_path([t1])
    worker = worker_process(config)
    wait_for(lambda: " streaming " in worker.log(), 30, "the worker to stream", worker.log)
    admin(server, "FLUSH BINARY LOGS")
    before = admin(server, "SELECT @@gtid_binlog_pos")
    request_id = dump(config, "--table", t1, "--chunk-size", "50")
    state = wait_request(backend.redis_url, SOURCE, request_id, ["completed", "failed"], 60,
                         worker)
    assert state["state"] == "completed", state
    assert admin(server, "SELECT @@gtid_binlog_pos") == before  # no transaction written
    assert chunks(backend, request_id) >= 12
    assert_converged(backend, t1)


def test_preflight_refuses_a_table_the_snapshots_do_not_cover(
        backend: Backend, server: MariaDBServer) -> None:
    t1 = backend.t1
    backend.create(t1, 3)
    backend.execute(f"ALTER TABLE {backend.db.sql(t1)} ENGINE = Aria")
    config = backend.config_path([t1])
    result = cli(config, "preflight", check=False)
    assert result.returncode == 1, result.stdout
    assert f"table {t1} uses the Aria engine, which a consistent snapshot does not cover" \
        in result.stdout
    assert "ENGINE = InnoDB" in result.stdout
    table = config.read_text().replace(POSITION, "")
    config.write_text(table)
    assert cli(config, "preflight", check=False).returncode == 0


def test_many_small_parallel_windows_against_concurrent_writers(
        backend: Backend, worker_process: Callable[..., WorkerProcess]) -> None:
    """Many small windows, three snapshots each, while two writers commit in groups: every
    window closes (its watermarks placed in order), and the output converges."""
    t1, t2 = backend.t1, backend.t2
    backend.create(t1, 3000)
    backend.create(t2, 1000)
    config = backend.config_path([t1, t2])
    worker = worker_process(config)
    workloads = [backend.workload([t1], seed=1), backend.workload([t2], seed=2)]
    for workload in workloads:
        workload.start()
    try:
        request_id = dump(config, "--all", "--chunk-size", "25", "--parallelism", "3")
        state = wait_request(backend.redis_url, SOURCE, request_id, ["completed", "failed"],
                             120, worker)
        assert state["state"] == "completed", state
    finally:
        for workload in workloads:
            workload.stop()
    assert_converged(backend, t1, t2)
    assert "ProtocolError" not in worker.log()


# -- a binary log that rotates every few transactions -------------------------------------
#
# ``max_binlog_size = 4096``: a rotation every few transactions of the workload, with
# group commit; ``semi-sync``: each group also waits for a replica's acknowledgement after
# it is written (``AFTER_SYNC``), which widens the time a group is in the log (and sent to
# the worker's reader) but not yet visible. The snapshots' positions are then often past
# a group they do not see, or behind what the worker has read
# (tests/integration/test_mariadb_snapshot_positions.py); the output must still converge,
# with no time travel, with parallel windows and through kill -9.

ROTATING = {**PRODUCTION_LIKE, "max-binlog-size": "4096"}


@pytest.fixture(scope="module", params=["rotation", "semi-sync"])
def rotating_server(request: pytest.FixtureRequest) -> Iterator[MariaDBServer]:
    with MariaDBServer(settings=ROTATING).start() as primary:
        if request.param == "rotation":
            yield primary
            return
        admin(primary, "SET GLOBAL rpl_semi_sync_master_enabled = ON",
              "SET GLOBAL rpl_semi_sync_master_wait_point = 'AFTER_SYNC'",
              "SET GLOBAL rpl_semi_sync_master_timeout = 10000")
        with MariaDBReplica(primary, {"rpl-semi-sync-slave-enabled": "ON"}).start():
            # The replica's I/O thread registers as a semi-sync client some time after
            # START SLAVE (a fresh primary has logged nothing for the replica to wait on).
            deadline = time.monotonic() + 60
            clients: list[tuple[Any, ...]] = []
            while time.monotonic() < deadline:
                clients = admin(primary, "SHOW STATUS LIKE 'Rpl_semi_sync_master_clients'")
                if clients == [("Rpl_semi_sync_master_clients", "1")]:
                    break
                time.sleep(0.1)
            assert clients == [("Rpl_semi_sync_master_clients", "1")]
            yield primary


@pytest.fixture
def rotating(rotating_server: MariaDBServer, redis_url: str,
             tmp_path: Path) -> Iterator[Backend]:
    name = rotating_server.create_database(f"t_{uuid.uuid4().hex[:16]}")
    yield Backend(MariaDatabase(rotating_server, name), redis_url, tmp_path,
                  rotating_server.restart, source_extra=POSITION)
    rotating_server.drop_database(name)


@pytest.mark.parametrize("kind", ["parallel", "all", "keys"])
def test_dumps_converge_while_the_binary_log_rotates(
        rotating: Backend, rotating_server: MariaDBServer, kind: str,
        worker_process: Callable[..., WorkerProcess]) -> None:
    t1, t2 = rotating.t1, rotating.t2
    rotating.create(t1, 1200)
    rotating.create(t2, 700)
    first = admin(rotating_server, "SHOW MASTER STATUS")[0][0]
    config = rotating.config_path([t1, t2])
    ids = dumps_under_load(rotating, config, worker_process(config), kind)
    assert_converged(rotating, t1, t2)
    assert chunks(rotating, ids[-1]) > 5
    last = admin(rotating_server, "SHOW MASTER STATUS")[0][0]
    assert int(last.rsplit(".", 1)[1]) - int(first.rsplit(".", 1)[1]) > 5  # rotations


def test_kill_9_while_the_binary_log_rotates(
        rotating: Backend, worker_process: Callable[..., WorkerProcess]) -> None:
    t1, t2 = rotating.t1, rotating.t2
    rotating.create(t1, 4000)
    rotating.create(t2, 2000)
    dump_through_kills(rotating, rotating.config_path([t1, t2], flush_interval_s=0.1,
                                                     extra=KILLED_LEASE),
                       worker_process, ["--all", "--chunk-size", "100", "--delay-ms", "20",
                                        "--parallelism", "2"],
                       [8, 20], random.Random(27))


def test_dumps_converge_while_binary_logs_are_flushed(
        backend: Backend, server: MariaDBServer,
        worker_process: Callable[..., WorkerProcess]) -> None:
    """``FLUSH BINARY LOGS`` in a loop (logrotate, backup tools) while dumps run under load."""
    t1, t2 = backend.t1, backend.t2
    backend.create(t1, 1200)
    backend.create(t2, 700)
    config = backend.config_path([t1, t2])
    stop = threading.Event()
    flushes = 0

    def flush() -> None:
        nonlocal flushes
        while not stop.is_set():
            admin(server, "FLUSH BINARY LOGS")
            flushes += 1
            time.sleep(0.02)

    flusher = threading.Thread(target=flush)
    flusher.start()
    try:
        worker = worker_process(config)
        flushed_before = flushes
        dumps_under_load(backend, config, worker, "parallel")
        flushed_during = flushes - flushed_before
    finally:
        stop.set()
        flusher.join(30)
    # Rotations while the dumps ran: a FLUSH every 20 ms plus its own time on the loaded
    # machine (14 in 2 s at a load of 21; more on a quiet one).
    assert flushed_during >= 8, flushed_during
    assert_converged(backend, t1, t2)


def test_hot_rows_dumped_while_the_binary_log_rotates(
        rotating: Backend, worker_process: Callable[..., WorkerProcess]) -> None:
    """Writers update the rows being dumped, one row a transaction: many rotations, and a
    group at the end of a file often touches a row of the chunk being read. Dumps again
    and again; the output never goes back in time and converges."""
    t1 = rotating.t1
    rotating.create(t1, 300)
    config = rotating.config_path([t1])
    worker = worker_process(config)
    stop = threading.Event()

    def write(seed: int) -> None:
        rnd = random.Random(seed)
        with rotating.connect() as session:
            # paced a little: unpaced writers outrun the binary log reader of a loaded
            # machine, and a window waits for the reader to reach its high watermark
            while not stop.wait(0.002):
                session.run(rotating.db.update(t1), (10 * rnd.randrange(1, 301),))

    writers = [threading.Thread(target=write, args=(seed,)) for seed in range(4)]
    for thread in writers:
        thread.start()
    try:
        for _ in range(4):
            request_id = dump(config, "--table", t1, "--chunk-size", "15")
            state = wait_request(rotating.redis_url, SOURCE, request_id,
                                 ["completed", "failed"], 120, worker)
            assert state["state"] == "completed", state
    finally:
        stop.set()
        for thread in writers:
            thread.join(30)
    assert_converged(rotating, t1)


def test_a_new_leader_writes_after_what_landed_whatever_its_clock(
        backend: Backend, worker_process: Callable[..., WorkerProcess]) -> None:
    """Windows of an idle log share a position, their rows kept apart by its third part.
    A leader whose clock ran an hour ahead (the worker numbered them by the clock) landed
    rows there; a new leader's windows at the same position land after them, and its dump
    completes instead of writing below what landed and restarting in a loop."""
    t1 = backend.t1
    backend.create(t1, 100)
    config = backend.config_path([t1])
    worker = worker_process(config)
    first = dump(config, "--table", t1, "--chunk-size", "50")
    state = wait_request(backend.redis_url, SOURCE, first, ["completed", "failed"], 60, worker)
    assert state["state"] == "completed", state
    assert worker.stop() == 0
    zone = LandingZone(backend.landing, SOURCE)
    last = zone.recover()[t1]
    row = events_of(backend, t1)[-1]
    ahead = Position(last.major, last.minor, last.sub + 3_600_000_000)  # an hour of µs
    zone.commit_segment(t1, [DumpRows(t1, pa.array([row["key"]], pa.string()),
                                      pa.array([row["after"]], pa.string()), ahead,
                                      time.time_ns() // 1000, int(str(row["schema_version"])),
                                      first)])
    logged = len(worker.log())
    again = worker_process(config)
    second = dump(config, "--table", t1, "--chunk-size", "50")
    state = wait_request(backend.redis_url, SOURCE, second, ["completed", "failed"], 60, again)
    assert state["state"] == "completed", state
    mine = [Position.decode(str(e["position"])) for e in events_of(backend, t1)
            if e["dump_id"] == second]
    assert len(mine) == 100 and min(mine) > ahead
    assert (min(mine).major, min(mine).minor) == (last.major, last.minor)  # the idle position
    assert again.log()[logged:].count(" streaming ") == 1  # one session: no restart
    assert_converged(backend, t1)
