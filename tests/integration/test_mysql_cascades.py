"""Foreign-key cascades on MariaDB, which InnoDB applies without a row event of the child.

The schema below holds every kind of reach: children of a captured parent that cascade a
delete (``c``), set null on delete through two foreign keys (``n``), cascade an update of
a unique non-key column (``u``); a grandchild (``g``, two foreign keys away: pruned); a
captured child of a parent that is not captured (``qc`` of ``q``), and a captured
grandchild of two that are not (``qg`` of ``qm`` of ``q``: pruned); a child that is not
captured (``x``: no effect); a table that references itself (``s``); and a foreign key of
a case-insensitive collation (``cic`` of ``ci``: its child is pruned too). The writes are
bulk deletes, updates of referenced columns and of keys, a child inserted after its parent
was deleted (it stays), a delete with ``foreign_key_checks = 0`` (nothing cascades), a
cascade inside a dump's window, the worker killed with SIGKILL while cascades stream and
while a pruning dump runs. The output, replayed, equals every captured table, in both
watermark modes; merged into a PostgreSQL and a MariaDB target, the target equals the
source (read directly, and by ``dblog verify``); ``dblog preflight`` lists the foreign keys
and what the worker does about each.
"""

from __future__ import annotations

import json
import random
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import psycopg
import pymysql
import pytest
from pyspark.sql import SparkSession

from dblog_worker import config as config_module
from dblog_worker.control.store import StateStore
from dblog_worker.merge.loop import merge_source
from spark.merge import spark_stager
from tests.integration.harness import (
    SOURCE,
    MariaDatabase,
    WorkerProcess,
    Workers,
    cli,
    dump,
    redis_request,
    replay,
    wait_for,
    wait_request,
    write_config,
)
from tests.integration.test_merge_end_to_end import dblog_verify
from tests.integration.test_scenarios import run_in_thread
from tests.services import MariaDBServer, PostgresServer

NOPAD = "CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin"
SCHEMA = (
    f"CREATE TABLE p (id int PRIMARY KEY, k varchar(20) {NOPAD} NOT NULL UNIQUE,"
    " version bigint NOT NULL)",
    "CREATE TABLE c (id int PRIMARY KEY, pid int, version bigint NOT NULL,"
    " FOREIGN KEY (pid) REFERENCES p (id) ON DELETE CASCADE ON UPDATE CASCADE)",
    "CREATE TABLE n (id int PRIMARY KEY, pid int, pid2 int, version bigint NOT NULL,"
    " FOREIGN KEY (pid) REFERENCES p (id) ON DELETE SET NULL ON UPDATE SET NULL,"
    " FOREIGN KEY (pid2) REFERENCES p (id) ON DELETE SET NULL ON UPDATE CASCADE)",
    f"CREATE TABLE u (id int PRIMARY KEY, pk varchar(20) {NOPAD}, version bigint NOT NULL,"
    " FOREIGN KEY (pk) REFERENCES p (k) ON DELETE CASCADE ON UPDATE CASCADE)",
    "CREATE TABLE g (id int PRIMARY KEY, cid int, version bigint NOT NULL,"
    " FOREIGN KEY (cid) REFERENCES c (id) ON DELETE CASCADE)",
    "CREATE TABLE q (id int PRIMARY KEY)",
    "CREATE TABLE qc (id int PRIMARY KEY, qid int, version bigint NOT NULL,"
    " FOREIGN KEY (qid) REFERENCES q (id) ON DELETE CASCADE ON UPDATE CASCADE)",
    "CREATE TABLE qm (id int PRIMARY KEY, qid int,"
    " FOREIGN KEY (qid) REFERENCES q (id) ON DELETE CASCADE ON UPDATE CASCADE)",
    "CREATE TABLE qg (id int PRIMARY KEY, mid int, version bigint NOT NULL,"
    " FOREIGN KEY (mid) REFERENCES qm (id) ON DELETE CASCADE)",
    "CREATE TABLE x (id int PRIMARY KEY, pid int,"
    " FOREIGN KEY (pid) REFERENCES p (id) ON DELETE CASCADE ON UPDATE CASCADE)",
    "CREATE TABLE s (id int PRIMARY KEY, up int, version bigint NOT NULL,"
    " FOREIGN KEY (up) REFERENCES s (id) ON DELETE CASCADE)",
    "CREATE TABLE ci (id int PRIMARY KEY, k varchar(20) CHARACTER SET utf8mb4"
    " COLLATE utf8mb4_general_ci NOT NULL UNIQUE)",
    "CREATE TABLE cic (id int PRIMARY KEY, ck varchar(20) CHARACTER SET utf8mb4"
    " COLLATE utf8mb4_general_ci, version bigint NOT NULL,"
    " FOREIGN KEY (ck) REFERENCES ci (k) ON DELETE CASCADE)",
    "CREATE SEQUENCE versions",
)
CAPTURED = ("p", "c", "n", "u", "g", "qc", "qg", "s", "ci", "cic")
PRUNED = ("g", "qg", "s", "cic")  # two foreign keys away, or compared by a collation
# merged: events of one and two actions, new values of a unique column, a table pruned,
# and one that references itself (its action events and prunes between its own deletes)
MERGED = ("p", "c", "n", "u", "g", "s")
V = "NEXTVAL(versions)"


def seed_sql(parents: int) -> list[str]:
    """Rows: ``parents`` parents, two ``c`` and one ``n``, ``u``, ``x`` each, a ``g`` per
    ``c``, 50 ``q`` with a ``qc``, a ``qm`` and a ``qg`` each, a tree of 60 ``s``, two
    ``ci`` and three ``cic``."""
    ids = f"(SELECT seq AS i FROM seq_1_to_{parents}) AS r"
    return [
        f"INSERT INTO p SELECT i, CONCAT('k', i), {V} FROM {ids}",
        f"INSERT INTO c SELECT i * 10 + 1, i, {V} FROM {ids}",
        f"INSERT INTO c SELECT i * 10 + 2, i, {V} FROM {ids}",
        f"INSERT INTO n SELECT i, i, IF(i < {parents}, i + 1, NULL), {V} FROM {ids}",
        f"INSERT INTO u SELECT i, CONCAT('k', i), {V} FROM {ids}",
        f"INSERT INTO x SELECT i, i FROM {ids}",
        f"INSERT INTO g SELECT id, id, {V} FROM c",
        "INSERT INTO q SELECT seq FROM seq_1_to_50",
        f"INSERT INTO qc SELECT seq, seq, {V} FROM seq_1_to_50",
        "INSERT INTO qm SELECT seq, seq FROM seq_1_to_50",
        f"INSERT INTO qg SELECT seq, seq, {V} FROM seq_1_to_50",
        f"INSERT INTO s SELECT seq, IF(seq <= 6, NULL, seq DIV 2), {V} FROM seq_1_to_60",
        "INSERT INTO ci VALUES (1, 'abc'), (2, 'def')",
        f"INSERT INTO cic VALUES (1, 'abc', {V}), (2, 'ABC', {V}), (3, 'def', {V})",
    ]


# What cascades, in order; each string is one transaction (``;``-separated statements).
CASCADES = (
    "DELETE FROM p WHERE id <= 40",  # c, n (two slots), u, x; g two away
    f"INSERT INTO p VALUES (5, 'k5', {V}); INSERT INTO c VALUES (9999, 5, {V})",  # stays
    "UPDATE p SET k = CONCAT(k, '-x') WHERE id BETWEEN 100 AND 120",  # u: new values
    "UPDATE p SET id = id + 1000 WHERE id BETWEEN 150 AND 155",  # a key change cascades
    f"UPDATE c SET version = {V} WHERE id = 611; DELETE FROM p WHERE id IN (61, 62)",
    "DELETE FROM q WHERE id <= 10; UPDATE q SET id = id + 100 WHERE id BETWEEN 20 AND 25",
    "SET SESSION foreign_key_checks = 0; DELETE FROM p WHERE id = 190;"
    " SET SESSION foreign_key_checks = 1",  # nothing cascades
    "DELETE FROM s WHERE id IN (1, 3)",  # the tree below them, two levels and more
    "DELETE FROM ci WHERE k = 'abc'",  # its children 'abc' and 'ABC'
)


def run(db: MariaDatabase, statements: Sequence[str]) -> None:
    with db.connect() as session:
        for text in statements:
            parts = [p.strip() for p in text.split(";") if p.strip()]
            if any(p.upper().startswith("SET SESSION") for p in parts):
                for part in parts:
                    session.execute(part)
                continue
            with session.transaction():
                for part in parts:
                    session.execute(part)


@pytest.fixture
def db(mariadb_server: MariaDBServer, mariadb_database: str) -> MariaDatabase:
    database = MariaDatabase(mariadb_server, mariadb_database)
    run(database, SCHEMA)
    return database


def tables(db: MariaDatabase, names: Sequence[str] = CAPTURED) -> list[str]:
    return [f"{db.name}.{name}" for name in names]


def config_of(db: MariaDatabase, tmp: Path, redis_url: str, watermarks: str = "table",
              extra: str = "", names: Sequence[str] = CAPTURED) -> Path:
    return write_config(tmp, db.dsn, redis_url, tables(db, names), name=SOURCE,
                        kind="mariadb", source_extra=f'watermarks = "{watermarks}"', extra=extra)


def landing_of(config: Path) -> Path:
    return config.parent / "landing"


def wait_prunes(redis_url: str, worker: WorkerProcess | None = None,
                timeout: float = 90) -> list[dict[str, str]]:
    """Wait until no dump is queued or running; the pruning dumps the worker queued."""
    store = StateStore(redis_url, SOURCE)
    try:
        wait_for(lambda: not store.list_requests(active_only=True), timeout,
                 "every dump to end", (lambda: worker.log()[-4000:]) if worker else str)
        requests = [r for r in store.list_requests() if r.prune]
    finally:
        store.close()
    for request in requests:
        assert request.state.value == "completed", request
    return [redis_request(redis_url, SOURCE, r.id) for r in requests]


def assert_replays(db: MariaDatabase, landing: Path, names: Sequence[str] = CAPTURED) -> None:
    """The output of each captured table, replayed, equals the table."""
    for table in tables(db, names):
        expected = db.rows(table)

        def equal(table: str = table, expected: dict[str, Any] = expected) -> bool:
            return replay(landing, SOURCE, table).rows == expected

        wait_for(equal, 60, f"the output of {table} to equal the table",
                 lambda table=table: _difference(db, landing, table))  # type: ignore[misc]


def _difference(db: MariaDatabase, landing: Path, table: str) -> str:
    expected, got = db.rows(table), replay(landing, SOURCE, table).rows
    different = [(k, expected[k], got[k]) for k in expected if k in got and got[k] != expected[k]]
    return (f"missing {sorted(set(expected) - set(got))[:10]}, extra "
            f"{sorted(set(got) - set(expected))[:10]}, different {different[:5]}")


def ops(landing: Path, table: str) -> list[str]:
    return [str(e["op"]) for e in replay(landing, SOURCE, table).events]


def wait_landed(db: MariaDatabase, landing: Path, worker: WorkerProcess, row: int = 200
                ) -> None:
    """Everything before a marker update of row ``row`` of ``p`` was read and its write
    completed: what a write covers (the pruning dumps it queues) is saved only after the
    write is durable, so a second marker, in a later write, lands after that."""
    for _ in range(2):
        marker = random.randrange(10**9)
        run(db, [f"UPDATE p SET version = {marker} WHERE id = {row}"])

        def landed(marker: int = marker) -> bool:
            return any(e["op"] == "u" and json.loads(str(e["after"]))["version"] == marker
                       for e in events_of_table(landing, f"{db.name}.p"))

        wait_for(landed, 60, "the marker to land", lambda: worker.log()[-4000:])


def events_of_table(landing: Path, table: str) -> list[dict[str, Any]]:
    return replay(landing, SOURCE, table).events


def capture_the_cascades(db: MariaDatabase, config: Path, worker: WorkerProcess,
                         names: Sequence[str] = CAPTURED) -> None:
    """Seed while the worker streams, dump everything, cascade; wait for the prunes."""
    landing = landing_of(config)
    run(db, seed_sql(200))
    request = dump(config, "--all", "--chunk-size", "97")
    state = wait_request(db_redis(config), SOURCE, request, ["completed", "failed"], 90, worker)
    assert state["state"] == "completed", state
    run(db, CASCADES)
    wait_landed(db, landing, worker)
    pruning = wait_prunes(db_redis(config), worker)
    assert {json.loads(r["tables"])[0] for r in pruning} == set(
        tables(db, [n for n in PRUNED if n in names]))
    assert {r["priority"] for r in pruning} == {"urgent"}  # a repair: before backfills


def db_redis(config: Path) -> str:
    return config_module.load(config).redis_url


# -- the output replays to the source --------------------------------------------------


@pytest.mark.parametrize("watermarks", ["table", "position"])
def test_cascades_replay_to_the_source(db: MariaDatabase, redis_url: str, tmp_path: Path,
                                       watermarks: str) -> None:
    config = config_of(db, tmp_path, redis_url, watermarks)
    landing = landing_of(config)
    with Workers(tmp_path / "worker.log") as workers:
        worker = workers.start(config)
        capture_the_cascades(db, config, worker)
        assert_replays(db, landing)
    for name in ("c", "n", "u", "qc", "s"):
        assert "f" in ops(landing, f"{db.name}.{name}"), name
    for name in PRUNED:
        assert "p" in ops(landing, f"{db.name}.{name}"), name
    assert not (landing / SOURCE / f"{db.name}.x").exists()  # not captured: no output
    # two foreign keys of n to one parent row: one event with two actions
    both = [e for e in events_of_table(landing, f"{db.name}.n") if e["op"] == "f"
            and str(e["after"]).count("pid") == 2]
    assert both, "no event of n with both of its foreign keys"
    # the child inserted after its parent's delete, and the rows a delete with
    # foreign_key_checks = 0 left, are in the output
    assert "[9999]" in replay(landing, SOURCE, f"{db.name}.c").rows
    assert "[1901]" in replay(landing, SOURCE, f"{db.name}.c").rows


@pytest.mark.parametrize("watermarks", ["table", "position"])
def test_a_parent_change_reaches_its_children_at_once(
        db: MariaDatabase, redis_url: str, tmp_path: Path, watermarks: str) -> None:
    """The issue's case, one foreign key away (no pruning dump): rows streamed, then
    ``DELETE FROM p WHERE id <= 10`` (the log holds 10 deletes of ``p`` and nothing of
    ``c``, ``n`` or ``u``), a key and a unique column of ``p`` changed, rows of the
    uncaptured ``q`` deleted and re-keyed: the output of every child equals its table."""
    names = ("p", "c", "n", "u", "qc")
    config = config_of(db, tmp_path, redis_url, watermarks, names=names)
    landing = landing_of(config)
    with Workers(tmp_path / "worker.log") as workers:
        worker = workers.start(config)
        run(db, seed_sql(60))
        run(db, ["DELETE FROM p WHERE id <= 10",
                 "UPDATE p SET id = id + 1000 WHERE id BETWEEN 20 AND 22",
                 "UPDATE p SET k = CONCAT(k, '-x') WHERE id BETWEEN 30 AND 33",
                 "DELETE FROM q WHERE id <= 5; UPDATE q SET id = id + 100 WHERE id = 7"])
        wait_landed(db, landing, worker, 50)
        assert_replays(db, landing, names)


def test_preflight_lists_the_cascades(db: MariaDatabase, redis_url: str,
                                      tmp_path: Path) -> None:
    config = config_of(db, tmp_path, redis_url)
    result = cli(config, "preflight")
    section = result.stdout.split("foreign-key cascades:", 1)[1]
    d = db.name
    for line in (
        f"{d}.c(pid) -> {d}.p(id)", f"{d}.n(pid) -> {d}.p(id)", f"{d}.n(pid2) -> {d}.p(id)",
        f"{d}.u(pk) -> {d}.p(k)", f"{d}.g(cid) -> {d}.c(id)", f"{d}.qc(qid) -> {d}.q(id)",
        f"{d}.s(up) -> {d}.s(id)", f"{d}.cic(ck) -> {d}.ci(k)", f"{d}.qg(mid) -> {d}.qm(id)",
        f"{d}.qm(qid) -> {d}.q(id)",
    ):
        assert line in section, (line, section)
    assert f"{d}.x(" not in section  # no captured table below it
    assert "ON DELETE CASCADE, ON UPDATE CASCADE" in section
    assert "landing op f" in section
    assert "compare by collation" in section  # cic
    for name in PRUNED:
        assert f"{d}.{name}" in section.split("reaches", 1)[1]


# -- inside a window ----------------------------------------------------------------------


def test_cascades_inside_a_window_change_the_chunk(db: MariaDatabase, redis_url: str,
                                                   tmp_path: Path) -> None:
    """A dump of the children; right after each chunk SELECT (between LW and HW), the
    parents of two of its rows are deleted (``c`` rows gone, ``n`` rows set null) and the
    key of another's changed: the chunk's copies of those rows are dropped or changed."""
    run(db, seed_sql(300))
    config = config_of(db, tmp_path, redis_url)
    loaded = config_module.load(config)
    writer = db.connect()
    windows: list[str] = []

    def hook(table: str) -> None:
        windows.append(table)
        number = len(windows)
        # chunks of 40 ids of n (= parent ids): delete two parents of this chunk, move one
        low = 40 * (number - 1) + 1
        writer.execute(f"DELETE FROM p WHERE id IN ({low + 5}, {low + 17})")
        writer.execute(f"UPDATE p SET id = id + 5000 WHERE id = {low + 30}")

    worker, thread = run_in_thread(loaded, {"after_select": hook})
    try:
        request = dump(config, "--table", f"{db.name}.n", "--chunk-size", "40")
        state = wait_request(redis_url, SOURCE, request, ["completed", "failed"], 90)
        assert state["state"] == "completed", state
        assert len(windows) >= 7
        assert_replays(db, landing_of(config), ("n",))
    finally:
        worker.stopping = True
        thread.join(30)
        writer.close()
    assert not thread.is_alive()
    dumped = [e for e in events_of_table(landing_of(config), f"{db.name}.n")
              if e["op"] == "r"]
    # the rows whose parent went inside the window were dumped with pid set null
    moved = {json.loads(str(e["key"]))[0] for e in dumped
             if json.loads(str(e["after"]))["pid"] is None}
    assert {6, 18, 31} <= moved, sorted(moved)[:20]


# -- kill -9 ------------------------------------------------------------------------------


def test_kill_9_while_cascades_stream_and_while_a_prune_runs(
        db: MariaDatabase, redis_url: str, tmp_path: Path) -> None:
    """Bulk cascades while a dump of every table runs under writes; SIGKILL while they
    stream, and again while a pruning dump runs: the output converges, nothing twice."""
    run(db, seed_sql(2000))
    config = config_of(db, tmp_path, redis_url, extra="")
    landing = landing_of(config)
    rnd = random.Random(27)
    with Workers(tmp_path / "worker.log") as workers:
        worker = workers.start(config)
        stop = threading.Event()

        def cascade_writes() -> None:
            with db.connect() as session:
                first = 41
                while not stop.is_set() and first < 1900:
                    session.execute(f"DELETE FROM p WHERE id BETWEEN {first} AND {first + 9}")
                    session.execute(f"UPDATE p SET k = CONCAT(k, 'y') WHERE id = {first + 12}")
                    first += 15
                    time.sleep(0.01)

        writes = threading.Thread(target=cascade_writes, daemon=True)
        writes.start()
        request = dump(config, "--all", "--chunk-size", "150", "--delay-ms", "10")
        for _ in range(2):
            time.sleep(rnd.uniform(0.3, 1.0))
            worker.kill()
            worker = workers.start(config)
        stop.set()
        writes.join(30)
        state = wait_request(redis_url, SOURCE, request, ["completed", "failed"], 120, worker)
        assert state["state"] == "completed", state
        # a pruning dump of the grandchildren, killed in the middle
        pruning = dump(config, "--table", f"{db.name}.g", "--chunk-size", "50",
                       "--delay-ms", "20", "--prune")
        wait_for(lambda: _chunks(redis_url, pruning) >= 3, 60, "three windows", worker.log)
        worker.kill()
        worker = workers.start(config)
        wait_prunes(redis_url, worker, 180)
        wait_landed(db, landing, worker, 1995)
        assert_replays(db, landing)
    for table in tables(db):
        positions = [str(e["position"]) for e in events_of_table(landing, table)]
        assert len(positions) == len(set(positions)), f"{table}: an event landed twice"


def _chunks(redis_url: str, request_id: str) -> int:
    store = StateStore(redis_url, SOURCE)
    try:
        return sum(p.chunks for p in store.progress(request_id).values())
    finally:
        store.close()


# -- merged into PostgreSQL and MariaDB -----------------------------------------------------


@pytest.fixture(params=["postgresql", "mariadb"])
def target(request: pytest.FixtureRequest, mariadb_server: MariaDBServer) -> Iterator[
        tuple[str, str, str]]:
    """A fresh target database: (kind, DSN, schema the tables go to)."""
    name = f"tgt_{uuid.uuid4().hex[:12]}"
    if request.param == "postgresql":
        postgres: PostgresServer = request.getfixturevalue("postgres_server")
        if not postgres.running:
            postgres.restart()
        yield "postgresql", postgres.create_database(name), ""
        postgres.drop_database(name)
        return
    mariadb_server.create_database(name)
    yield "mariadb", mariadb_server.url(), name
    mariadb_server.drop_database(name)
    mariadb_server.drop_database(f"{name}_state")


def target_section(db: MariaDatabase, target: tuple[str, str, str]) -> str:
    """The ``[target]`` of the tables in ``MERGED``."""
    kind, dsn, schema = target
    lines = ["[target]", f'kind = "{kind}"', f"dsn = {json.dumps(dsn)}"]
    if kind == "mariadb":
        lines.append(f'state_schema = "{schema}_state"')
        lines.append("tables = { " + ", ".join(
            f'"{db.name}.{t}" = "{schema}.{t}"' for t in MERGED) + " }")
    return "\n".join(lines) + "\n"


def target_rows(target: tuple[str, str, str], db: MariaDatabase, name: str
                ) -> dict[str, dict[str, Any]]:
    """A target table read directly, keyed like the output, without the merge's column."""
    kind, dsn, schema = target
    if kind == "postgresql":
        with psycopg.connect(dsn) as conn, conn.cursor(
                row_factory=psycopg.rows.dict_row) as cur:
            cur.execute(f'SELECT * FROM "{db.name}"."{name}"'.encode())
            rows = list(cur.fetchall())
    else:
        connection = pymysql.connect(**db.server.connect_args(schema),
                                     cursorclass=pymysql.cursors.DictCursor)
        with connection, connection.cursor() as cur:
            cur.execute(f"SELECT * FROM `{schema}`.`{name}`")
            rows = list(cur.fetchall())
    for row in rows:
        del row["_dblog_position"]
    return {json.dumps([row["id"]]): row for row in rows}


def assert_merged(db: MariaDatabase, target: tuple[str, str, str], config: Path) -> None:
    for name in MERGED:
        expected = db.rows(f"{db.name}.{name}")
        got = target_rows(target, db, name)
        assert got == expected, (name, sorted(set(expected) ^ set(got))[:10],
                                 [(k, expected[k], got[k]) for k in expected
                                  if k in got and got[k] != expected[k]][:5])
        verified = dblog_verify(config, f"{db.name}.{name}")
        assert verified["source_rows"] == verified["target_rows"] == len(expected), verified


def test_cascades_merge_into_the_target(db: MariaDatabase, redis_url: str, tmp_path: Path,
                                        target: tuple[str, str, str],
                                        spark: SparkSession) -> None:
    """The captured cascades, merged: the target equals the source, read directly and by
    ``dblog verify``; the merge counts what its foreign-key and prune events did; a second
    merge changes nothing; more cascades merge incrementally."""
    config = config_of(db, tmp_path, redis_url, extra=target_section(db, target),
                       names=MERGED)
    with Workers(tmp_path / "worker.log") as workers:
        worker = workers.start(config)
        capture_the_cascades(db, config, worker, MERGED)
        assert_replays(db, landing_of(config), MERGED)
        report = merge_source(config_module.load(config), spark_stager(spark))
        assert report.ok, report.as_dict()
        derived = {t.table.split(".", 1)[1]: t.derived for t in report.tables}
        assert derived["c"] > 0 and derived["n"] > 0 and derived["u"] > 0, derived
        assert_merged(db, target, config)
        again = merge_source(config_module.load(config), spark_stager(spark))
        assert all(t.batches == 0 for t in again.tables), again.as_dict()
        # a child updated, then its parent deleted, in one batch; a parent re-keyed twice
        run(db, [f"UPDATE n SET version = {V} WHERE id BETWEEN 120 AND 130",
                 "DELETE FROM p WHERE id BETWEEN 121 AND 125",
                 "UPDATE p SET k = CONCAT(k, 'a') WHERE id = 130",
                 "UPDATE p SET k = CONCAT(k, 'b') WHERE id = 130",
                 "INSERT INTO p VALUES (121, 'k121', 1); INSERT INTO c VALUES (1211, 121, 1)"])
        wait_landed(db, landing_of(config), worker)
        wait_prunes(redis_url, worker)
        assert_replays(db, landing_of(config), MERGED)
        report = merge_source(config_module.load(config), spark_stager(spark))
        assert report.ok, report.as_dict()
        assert_merged(db, target, config)

