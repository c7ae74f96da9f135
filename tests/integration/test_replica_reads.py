"""Chunk reads on a read replica (``[source.replica]``): a real primary and a real replica.

PostgreSQL: a hot standby of the session's server (``pg_basebackup -R``) streaming its WAL.
MariaDB: a replica by GTID of a primary of this module's own. Every test database made on
the primary appears on the replica. Dumps under a concurrent workload converge with their
chunk SELECTs on the replica, and the primary's statement log shows that it ran none of
them. A replica that does not apply holds the dump (visible in the worker's status, the log
going on) and never gives it an older state; resumed, the dump completes and converges. A
replica that falls behind throttles a dump with ``max_replica_lag_ms``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import random
import re
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pymysql
import pytest
from psycopg.conninfo import conninfo_to_dict

from dblog_worker.control.store import StateStore
from dblog_worker.mysql.catalog import qualified as my_qualified
from dblog_worker.names import split_table
from dblog_worker.pg.queries import qualified as pg_qualified
from tests.integration.harness import (
    HOSTILE,
    KILLED_LEASE,
    PARTITIONED,
    PLAIN,
    SOURCE,
    Backend,
    MariaDatabase,
    PgDatabase,
    TableFlavour,
    WorkerProcess,
    Workers,
    assert_converged,
    cli,
    dump,
    dump_through_kills,
    dumps_under_load,
    events_of,
    redis_request,
    wait_for,
    wait_request,
)
from tests.integration.test_ddl_mid_dump import (
    assert_converged_after_a_second_dump,
    dump_columns,
    dump_with_ddl,
)
from tests.services import (
    MariaDBReplica,
    MariaDBServer,
    PostgresServer,
    PostgresStandby,
    free_port,
)

# Statements only a dump's reads run: chunks, range ends, key batches (pg/queries.py,
# mysql/catalog.py); not a table dump's upper bound (ORDER BY ... DESC LIMIT 1), which the
# primary runs.
CHUNK_READS = {
    "postgresql": re.compile(r"SELECT \* FROM .* WHERE .* ORDER BY .* LIMIT|LIMIT 1 OFFSET|"
                             r"WITH ORDINALITY"),
    "mariadb": re.compile(r"SELECT .* FROM .* WHERE .* ORDER BY .* LIMIT \d+\s*$|"
                          r"LIMIT 1 OFFSET|AS r LEFT JOIN"),
}


@dataclass
class Replicated:
    """A test database on a primary, its replica, and both servers' statement logs."""

    backend: Backend
    replica: PostgresStandby | MariaDBReplica
    replica_dsn: str
    primary_log: Path
    replica_log: Path

    def section(self, max_wait_ms: int = 2000) -> str:
        return (f"[source.replica]\ndsn = {json.dumps(self.replica_dsn)}\n"
                f"max_wait_ms = {max_wait_ms}\n")

    def caught_up(self) -> None:
        if isinstance(self.replica, PostgresStandby):
            self.replica.wait_replayed()
        else:
            self.replica.wait_applied()

    def log_offsets(self) -> tuple[int, int]:
        return self.primary_log.stat().st_size, self.replica_log.stat().st_size

    def chunk_reads(self, offsets: tuple[int, int], *tables: str) -> tuple[list[str], list[str]]:
        """The chunk reads of ``tables`` each server's log has since ``offsets``."""
        kind = self.backend.kind
        names = [pg_qualified(*split_table(t)) if kind == "postgresql" else my_qualified(t)
                 for t in tables]

        def reads(path: Path, offset: int) -> list[str]:
            with path.open("rb") as f:
                f.seek(offset)
                text = f.read().decode(errors="replace")
            return [line for line in text.splitlines()  # the upper bound is the primary's
                    if any(n in line for n in names) and CHUNK_READS[kind].search(line)
                    and "DESC LIMIT 1" not in line]

        return reads(self.primary_log, offsets[0]), reads(self.replica_log, offsets[1])


@pytest.fixture(scope="module")
def standby(postgres_server: PostgresServer) -> Iterator[PostgresStandby]:
    with PostgresStandby(postgres_server).start() as server:
        yield server


@pytest.fixture(scope="module")
def maria_pair() -> Iterator[tuple[MariaDBServer, MariaDBReplica]]:
    with MariaDBServer().start() as primary, MariaDBReplica(primary).start() as replica:
        for server in (primary, replica):
            with server._admin() as conn, conn.cursor() as cur:
                cur.execute("SET GLOBAL general_log_file = %s",
                            (str(server.base_dir / "general.log"),))
                cur.execute("SET GLOBAL general_log = 1")
        yield primary, replica


@pytest.fixture(params=["postgresql", "mariadb"])
def replicated(request: pytest.FixtureRequest, redis_url: str,
               tmp_path: Path) -> Replicated:
    if request.param == "postgresql":
        postgres: PostgresServer = request.getfixturevalue("postgres_server")
        standby: PostgresStandby = request.getfixturevalue("standby")
        pg_dsn: str = request.getfixturevalue("pg_dsn")
        with psycopg.connect(pg_dsn, autocommit=True) as conn:  # both servers log statements
            conn.execute(f'ALTER DATABASE "{conn.info.dbname}" SET log_statement = \'all\'')
        dbname = str(conninfo_to_dict(pg_dsn)["dbname"])
        return Replicated(Backend(PgDatabase(pg_dsn), redis_url, tmp_path, postgres.restart),
                          standby, standby.dsn(dbname=dbname), postgres.log_path,
                          standby.log_path)
    primary, replica = request.getfixturevalue("maria_pair")
    name = primary.create_database(f"t_{uuid.uuid4().hex[:16]}")
    return Replicated(
        Backend(MariaDatabase(primary, name), redis_url, tmp_path, primary.restart),
        replica, replica.url(), primary.base_dir / "general.log",
        replica.base_dir / "general.log")


@pytest.fixture
def backend(replicated: Replicated) -> Backend:
    """For the harness's worker_process fixture."""
    return replicated.backend


@pytest.mark.parametrize(("kind", "flavour"), [
    ("tables", PLAIN), ("keys", PLAIN), ("parallel", PLAIN), ("parallel", HOSTILE),
    ("all", PARTITIONED), ("filtered", HOSTILE),
], ids=["tables", "keys", "parallel", "parallel-hostile-names", "partitioned-all",
        "filtered-hostile-names"])
def test_dumps_from_the_replica_converge_under_load(
        replicated: Replicated, kind: str, flavour: TableFlavour,
        worker_process: Callable[..., WorkerProcess]) -> None:
    backend = replicated.backend
    backend.use(flavour)
    t1, t2 = backend.t1, backend.t2
    backend.create(t1, 1200)
    backend.create(t2, 700)
    replicated.caught_up()
    offsets = replicated.log_offsets()
    config = backend.config_path([t1, t2], extra=replicated.section())
    dumps_under_load(backend, config, worker_process(config), kind)
    assert_converged(backend, t1, t2)
    on_primary, on_replica = replicated.chunk_reads(offsets, t1, t2)
    assert on_primary == [], on_primary[:3]
    assert len(on_replica) > 10, on_replica[:3]


@pytest.mark.parametrize("parallelism", [1, 3], ids=["sequential", "parallel-3"])
def test_kill_9_during_a_dump_from_the_replica_resumes(
        replicated: Replicated, parallelism: int,
        worker_process: Callable[..., WorkerProcess]) -> None:
    """SIGKILL twice while a dump reads on the replica, at random windows (seeded): each new
    worker resumes where the last completed window left it; the output converges with no
    event landed twice."""
    backend = replicated.backend
    t1, t2 = backend.t1, backend.t2
    rnd = random.Random(parallelism)
    backend.create(t1, 4000)
    backend.create(t2, 2000)
    replicated.caught_up()
    windows = 6000 // (100 * parallelism)
    dump_through_kills(
        backend, backend.config_path([t1, t2], flush_interval_s=0.1,
                                     extra=replicated.section() + KILLED_LEASE),
        worker_process, ["--all", "--chunk-size", "100", "--delay-ms", str(20 * parallelism),
                         "--parallelism", str(parallelism)],
        [int(f * windows) for f in sorted(rnd.uniform(0.1, 0.6) for _ in range(2))], rnd)


def test_a_replica_that_does_not_apply_holds_the_dump_not_the_log(
        replicated: Replicated, worker_process: Callable[..., WorkerProcess]) -> None:
    backend, replica = replicated.backend, replicated.replica
    t1, t2 = backend.t1, backend.t2
    backend.create(t1, 600)
    backend.create(t2, 0)
    replicated.caught_up()
    config = backend.config_path([t1, t2], extra=replicated.section(300))
    worker = worker_process(config)
    store = StateStore(backend.redis_url, SOURCE)
    try:
        wait_for(lambda: bool(store.status()), 30, "the worker's first status")
        replica.pause_replay()
        try:
            request_id = dump(config, "--table", t1, "--chunk-size", "50")
            wait_for(lambda: "replica" in str(store.dump_status(request_id).get("waiting")),
                     30, "the dump waiting for the replica")
            status = store.dump_status(request_id)
            assert "low watermark" in status["waiting"], status
            shown = cli(config, "show", request_id).stdout
            assert "waiting: the read replica" in shown, shown
            assert f"dump {request_id}: running, priority normal, waiting: the read replica" \
                in cli(config, "status").stdout
            assert store.progress(request_id)[t1].chunks == 0
            # the log goes on meanwhile, and rows the replica has not applied change on
            # the primary: the dump must not land their older state
            version = backend.next_version
            backend.execute(f"INSERT INTO {backend.db.sql(t2)} VALUES (1, {version}, 'live')")
            backend.execute(f"UPDATE {backend.db.sql(t1)} SET version = {version}, "
                            "payload = 'changed' WHERE id <= 1000")
            wait_for(lambda: len(events_of(backend, t2)) == 1, 30, "the live row")
            time.sleep(1.0)
            assert store.progress(request_id)[t1].chunks == 0
            assert redis_request(backend.redis_url, SOURCE, request_id)["state"] == "running"
        finally:
            replica.resume_replay()
        state = wait_request(backend.redis_url, SOURCE, request_id, ["completed", "failed"],
                             60, worker)
        assert state["state"] == "completed", state
        wait_for(lambda: store.dump_status(request_id).get("waiting", "") == "", 10,
                 "waiting cleared")
    finally:
        store.close()
    assert_converged(backend, t1, t2)


def test_preflight_checks_the_replica(replicated: Replicated) -> None:
    backend = replicated.backend
    t1 = backend.t1
    backend.create(t1, 3)
    replicated.caught_up()
    good = backend.config_path([t1], extra=replicated.section())
    result = cli(good, "preflight", check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "chunk reads: on the read replica" in result.stdout
    primary_as_replica = f"[source.replica]\ndsn = {json.dumps(backend.db.dsn)}\n"
    bad = backend.config_path([t1], extra=primary_as_replica)
    result = cli(bad, "preflight", check=False)
    assert result.returncode != 0
    assert ("is not a standby" if backend.kind == "postgresql" else "is the source itself") \
        in result.stdout + result.stderr


def test_a_mariadb_replica_is_waited_for_in_every_gtid_domain(
        redis_url: str, tmp_path: Path) -> None:
    """A parallel replica applies GTID domains independently, so it may have applied LW
    (domain 0) before an earlier transaction of domain 1: the window waits for the
    primary's whole position after LW, not only LW's domain. Here domain 1's transaction
    is held on the replica by a row lock while domain 0 goes on: the dump waits (the
    reason names the position) instead of reading a state without it, and completes once
    the lock is released."""
    with MariaDBServer().start() as primary, \
            MariaDBReplica(primary, {"slave-parallel-threads": "4"}).start() as replica:
        name = primary.create_database(f"t_{uuid.uuid4().hex[:16]}")
        backend = Backend(MariaDatabase(primary, name), redis_url, tmp_path, primary.restart)
        t1, t2 = backend.t1, backend.t2
        backend.create(t1, 100)
        backend.create(t2, 1)
        replica.wait_applied()
        holder = pymysql.connect(**replica.connect_args(name))
        try:
            with holder.cursor() as cur:  # domain 1's update of t2 will wait for this lock
                cur.execute("SET SESSION autocommit = 0")
                cur.execute(f"SELECT * FROM {t2} FOR UPDATE")
            with primary._admin() as conn, conn.cursor() as cur:
                cur.execute("SET SESSION gtid_domain_id = 1")
                cur.execute(f"UPDATE {t2} SET payload = 'domain 1'")
            with Workers(tmp_path / "worker.log") as workers:
                config = backend.config_path(
                    [t1, t2],
                    extra=f'[source.replica]\ndsn = "{replica.url()}"\nmax_wait_ms = 200\n')
                worker = workers.start(config)
                store = StateStore(redis_url, SOURCE)
                try:
                    request_id = dump(config, "--table", t1, "--chunk-size", "50")
                    wait_for(lambda: "1-1-" in str(store.dump_status(request_id).get(
                        "waiting")), 30, "the dump waiting for domain 1", worker.log)
                    time.sleep(1.0)
                    assert store.progress(request_id)[t1].chunks == 0
                    holder.rollback()  # domain 1 is applied; the dump goes on
                    state = wait_request(redis_url, SOURCE, request_id,
                                         ["completed", "failed"], 60, worker)
                    assert state["state"] == "completed", state
                finally:
                    store.close()
                assert_converged(backend, t1)  # t2 was not dumped: its row is not landed
        finally:
            holder.close()


@pytest.mark.parametrize(("ddl", "parallelism"), [
    ("add column", 1), ("drop column", 1), ("add column", 3)])
def test_ddl_right_before_a_window_read_on_the_replica(
        replicated: Replicated, ddl: str, parallelism: int) -> None:
    """The DDL (and an update of a row of the next chunk) runs on the primary right before
    a low watermark: the replica has replayed it when the chunk is read there, the chunk
    is found stale (its columns changed), read again in a later window in the same
    session, and the table converges after a second dump."""
    backend = dataclasses.replace(replicated.backend, config_extra=replicated.section())
    replicated.caught_up()
    request_id, sessions = dump_with_ddl(backend, ddl, parallelism)
    assert sessions == 1
    rows = backend.rows(backend.t1)
    now = set(next(iter(rows.values())))
    columns = dump_columns(backend, request_id)
    assert len(columns) >= 150 and columns[-20:] == [now] * 20
    assert_converged_after_a_second_dump(backend)


def test_an_unreachable_replica_holds_the_dump_and_the_log_goes_on(
        replicated: Replicated, worker_process: Callable[..., WorkerProcess]) -> None:
    """The replica is down when the worker starts: preflight's replica problem is logged,
    the log is captured all the same, and the dump waits saying why."""
    backend = replicated.backend
    t1, t2 = backend.t1, backend.t2
    backend.create(t1, 50)
    backend.create(t2, 0)
    port = free_port()  # nothing listens there
    dsn = (f"mysql://root@127.0.0.1:{port}" if backend.kind == "mariadb"
           else f"host=127.0.0.1 port={port} dbname=x user=postgres connect_timeout=2")
    config = backend.config_path([t1, t2],
                                 extra=f"[source.replica]\ndsn = {json.dumps(dsn)}\n")
    worker = worker_process(config)
    store = StateStore(backend.redis_url, SOURCE)
    try:
        request_id = dump(config, "--table", t1, "--chunk-size", "20")
        backend.execute(f"INSERT INTO {t2} VALUES (1, {backend.next_version}, 'live')")
        wait_for(lambda: len(events_of(backend, t2)) == 1, 30, "the live row", worker.log)
        wait_for(lambda: "unreachable" in str(store.dump_status(request_id).get("waiting")),
                 30, "the dump waiting for the replica", worker.log)
        assert store.progress(request_id)[t1].chunks == 0
        assert "[source.replica]" in worker.log()  # preflight's problem, logged
    finally:
        store.close()


# -- automatic throttling on the replica's lag (max_replica_lag_ms) ----------------------


@contextlib.contextmanager
def replica_behind(replicated: Replicated, table: str) -> Iterator[None]:
    """The replica stops applying what the primary writes, until the block ends."""
    backend, replica = replicated.backend, replicated.replica
    sql = backend.db.sql(table)
    if isinstance(replica, PostgresStandby):
        replica.pause_replay()
        try:
            backend.execute(f"UPDATE {sql} SET version = {backend.next_version} WHERE id = 10")
            yield
        finally:
            replica.resume_replay()
        return
    assert isinstance(replica, MariaDBReplica) and isinstance(backend.db, MariaDatabase)
    holder = pymysql.connect(**replica.connect_args(backend.db.name))
    try:
        with holder.cursor() as cursor:
            cursor.execute("BEGIN")
            cursor.execute(f"SELECT * FROM {sql} WHERE id = 10 FOR UPDATE")
        backend.execute(f"UPDATE {sql} SET version = {backend.next_version} WHERE id = 10")
        yield
    finally:
        holder.rollback()
        holder.close()


def test_a_lagging_replica_throttles_the_dump(
        replicated: Replicated, worker_process: Callable[..., WorkerProcess]) -> None:
    backend = replicated.backend
    t1 = backend.t1
    backend.create(t1, 1500)
    replicated.caught_up()
    config = backend.config_path([t1], extra=replicated.section(300))
    worker = worker_process(config)
    store = StateStore(backend.redis_url, SOURCE)
    try:
        wait_for(lambda: bool(store.status()), 30, "the worker's first status")
        request_id = dump(config, "--table", t1, "--chunk-size", "20", "--delay-ms", "20",
                          "--max-replica-lag-ms", "1000")
        with replica_behind(replicated, t1):
            wait_for(lambda: "replica lag" in str(store.dump_status(request_id).get("throttle"))
                     and int(store.dump_status(request_id).get("throttle_ms") or 0) >= 200,
                     60, "the throttle on the replica's lag", worker.log)
            assert "> 1000 ms" in store.dump_status(request_id)["throttle"]
        wait_for(lambda: int(store.dump_status(request_id).get("throttle_ms") or 0) == 0, 90,
                 "the delay easing once the replica caught up", worker.log)
        state = wait_request(backend.redis_url, SOURCE, request_id, ["completed", "failed"],
                             120, worker)
        assert state["state"] == "completed", state
    finally:
        store.close()
    assert_converged(backend, t1)


def test_a_mariadb_replica_of_another_primary_is_refused(redis_url: str,
                                                          tmp_path: Path) -> None:
    """The replica replicates another primary, which used the same GTID domain and server
    id and logged more transactions than the source: MASTER_GTID_WAIT returns at once for
    every low watermark, and the chunks would read the other primary's rows. Preflight
    says the replica does not replicate the source, and the dump waits for it instead of
    landing those rows."""
    with MariaDBServer().start() as source, MariaDBServer().start() as other, \
            MariaDBReplica(other).start() as replica:
        name = f"t_{uuid.uuid4().hex[:16]}"
        backend = Backend(MariaDatabase(source, source.create_database(name)), redis_url,
                          tmp_path, source.restart)
        elsewhere = MariaDatabase(other, other.create_database(name))
        t1 = backend.t1
        backend.create(t1, 100)
        elsewhere.create_test_table(t1, 300)  # other rows, and more GTIDs than the source
        with elsewhere.connect() as session:  # far ahead: each window's wait passes at once
            for key in range(1, 1001):
                session.execute(f"UPDATE {t1} SET payload = 'elsewhere' WHERE id = {key}")
        replica.wait_applied()
        with source._admin() as conn, conn.cursor() as cur:
            cur.execute("SELECT @@gtid_binlog_pos")
            ours = str(cur.fetchone()[0])
        with replica._admin() as conn, conn.cursor() as cur:
            cur.execute("SELECT @@gtid_slave_pos")
            theirs = str(cur.fetchone()[0])
        assert ours.split("-")[:2] == theirs.split("-")[:2] == ["0", "1"]
        assert int(theirs.split("-")[2]) > int(ours.split("-")[2])
        config = backend.config_path(
            [t1], extra=f'[source.replica]\ndsn = "{replica.url()}"\nmax_wait_ms = 200\n')
        result = cli(config, "preflight", check=False)
        assert "it does not replicate this source" in result.stdout, result.stdout
        with Workers(tmp_path / "worker.log") as workers:
            worker = workers.start(config)
            store = StateStore(redis_url, SOURCE)
            try:
                request_id = dump(config, "--table", t1, "--chunk-size", "50")
                wait_for(lambda: "does not replicate this source"
                         in str(store.dump_status(request_id).get("waiting")), 30,
                         "the dump waiting for a replica of the source", worker.log)
                time.sleep(1.0)
                assert store.progress(request_id)[t1].chunks == 0
                assert events_of(backend, t1) == []
            finally:
                store.close()
