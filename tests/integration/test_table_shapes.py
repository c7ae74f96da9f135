"""Tables as production databases hold them, captured, merged and compared outside dblog:
PostgreSQL enums, domains and arrays of them (into both target kinds); tables without a
primary key (a unique index on NOT NULL columns, or the key named by ``source.keys``),
on both sources; REPLICA IDENTITY DEFAULT with TOASTed values left out of updates; and
STORED generated columns.

Each test runs a real worker (in a thread), a table dump while the table changes, the
merge into a real target with the session's local Spark, and compares the target with
the source by SQL of its own (values as text), then ``dblog verify``.
"""

from __future__ import annotations

import json
import random
import string
import uuid
from collections.abc import Callable, Iterator, Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg
import pymysql
import pytest
from pyspark.sql import SparkSession

from dblog_worker import config as config_module
from dblog_worker.landing.parquet import LandingZone, read_events
from dblog_worker.merge.loop import merge_source
from spark.merge import spark_stager
from tests.integration.harness import (
    SOURCE,
    cli,
    dump,
    events_of,
    wait_for,
    wait_request,
    write_config,
)
from tests.integration.harness import Backend as _Backend
from tests.integration.test_merge_end_to_end import dblog_verify
from tests.integration.test_scenarios import run_in_thread
from tests.services import MariaDBServer, PostgresServer


@pytest.fixture
def pg_target(postgres_server: PostgresServer) -> Iterator[str]:
    name = f"t_{uuid.uuid4().hex[:16]}"
    yield postgres_server.create_database(name)
    postgres_server.drop_database(name)


def pg(dsn: str, *statements: str) -> list[tuple[Any, ...]]:
    rows: list[tuple[Any, ...]] = []
    with psycopg.connect(dsn, autocommit=True, options="-c TimeZone=UTC") as conn:
        for statement in statements:
            cursor = conn.execute(statement.encode())
            rows = cursor.fetchall() if cursor.description else []
    return rows


def pg_target_section(dsn: str) -> str:
    return f'[target]\nkind = "postgresql"\ndsn = {json.dumps(dsn)}\n'


def my_target_section(server: MariaDBServer, database: str, tables: Sequence[str]) -> str:
    renames = ", ".join(f'"{t}" = "{database}.{t.split(".")[1]}"' for t in tables)
    return (f'[target]\nkind = "mariadb"\ndsn = {json.dumps(server.url())}\n'
            f'state_schema = "{database}_state"\ntables = {{ {renames} }}\n')


def capture(config: Path, table: str, *, chunk_size: int = 7,
            during: Sequence[str] = (), run: Any = None,
            until: Callable[[], bool] | None = None) -> None:
    """A worker captures; a table dump in small chunks while ``during`` statements run
    (``run`` executes one), to completion; the worker stops once ``until`` holds (the dump
    may end before the log has been read past the last statement)."""
    worker, thread = run_in_thread(config_module.load(config), {})
    try:
        request_id = dump(config, "--table", table, "--chunk-size", str(chunk_size))
        # a dump runs once the worker reads the log: the statements then reach it by the log
        wait_request(_redis(config), SOURCE, request_id, ["running", "completed", "failed"], 90)
        for statement in during:
            run(statement)
        state = wait_request(_redis(config), SOURCE, request_id, ["completed", "failed"], 90)
        assert state["state"] == "completed", state
        if until is not None:
            wait_for(until, 60, "the statements run during the dump to land")
    finally:
        worker.stopping = True
        thread.join(30)
    assert not thread.is_alive()


def _redis(config: Path) -> str:
    return config_module.load(config).redis_url


def merge(config: Path, spark: SparkSession) -> None:
    report = merge_source(config_module.load(config), spark_stager(spark))
    assert report.ok, report.as_dict()


def as_text(rows: Sequence[tuple[Any, ...]]) -> list[tuple[str | None, ...]]:
    return sorted(tuple(None if v is None else str(v) for v in row) for row in rows)


# -- 3. enums, domains and arrays of them ------------------------------------------------

TYPES_DDL = (
    "CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy')",
    "CREATE DOMAIN posint AS integer CHECK (VALUE > 0)",
    "CREATE DOMAIN short AS varchar(10) NOT NULL DEFAULT 'x' CHECK (VALUE <> '')",
    "CREATE DOMAIN cheerful AS mood CHECK (VALUE <> 'sad')",
    "CREATE DOMAIN money2 AS numeric(12, 2)",
    "CREATE DOMAIN blob AS bytea",
)
USER_COLUMNS = ("m mood, p posint, s short, c cheerful, n money2, b blob")
ARRAY_COLUMNS = ", ms mood[], ps posint[]"


def _user_row(i: int, arrays: bool) -> str:
    moods = ["sad", "ok", "happy"]
    row = (f"({i}, '{moods[i % 3]}', {i + 1}, 's{i % 97}', '{moods[1 + i % 2]}', {i}.25, "
           f"'\\x{i:04x}'")
    if arrays:
        row += f", ARRAY['{moods[i % 3]}', 'ok', NULL]::mood[], ARRAY[{i + 1}, 2]::posint[]"
    return row + ")"


@pytest.mark.parametrize("target_kind", ["postgresql", "mariadb"])
def test_enums_domains_and_arrays_merge_without_hand_work(
        target_kind: str, pg_dsn: str, redis_url: str, tmp_path: Path, spark: SparkSession,
        request: pytest.FixtureRequest) -> None:
    """PostgreSQL target: each enum created with its labels in order (a label added at the
    source after the worker read the type is appended), domains as their base types.
    MariaDB target: enums as text (arrays of them as arrays are: not here)."""
    arrays = target_kind == "postgresql"
    table = "public.feelings"
    pg(pg_dsn, *TYPES_DDL,
       f"CREATE TABLE {table} (id int PRIMARY KEY, {USER_COLUMNS}"
       f"{ARRAY_COLUMNS if arrays else ''})",
       f"ALTER TABLE {table} REPLICA IDENTITY FULL",
       f"INSERT INTO {table} VALUES " + ", ".join(_user_row(i, arrays) for i in range(1, 60)))
    if target_kind == "postgresql":
        target_dsn = request.getfixturevalue("pg_target")
        section = pg_target_section(target_dsn)
    else:
        server: MariaDBServer = request.getfixturevalue("mariadb_server")
        database: str = request.getfixturevalue("mariadb_database")
        request.addfinalizer(lambda: server.drop_database(f"{database}_state"))
        section = my_target_section(server, database, [table])
    config = write_config(tmp_path, pg_dsn, redis_url, [table], name=SOURCE, extra=section)
    during = [f"UPDATE {table} SET m = 'happy', p = p + 1000 WHERE id % 5 = 0",
              f"DELETE FROM {table} WHERE id % 7 = 0",
              "ALTER TYPE mood ADD VALUE 'ecstatic'",  # after the worker read the type
              f"INSERT INTO {table} VALUES " + _user_row(100, arrays).replace(
                  "'sad', 'ok', NULL]", "'ecstatic', 'ok', NULL]").replace(
                  "(100, 'ok'", "(100, 'ecstatic'")]
    capture(config, table, during=during, run=lambda s: pg(pg_dsn, s))
    wait_for(lambda: any(e["key"] == "[100]" for e in events_of_table(tmp_path, table)), 30,
             "the row with the added label to land")
    merge(config, spark)
    columns = "id, m, p, s, c, n, encode(b, 'hex')" + (", ms::text, ps::text" if arrays else "")
    source = as_text(pg(pg_dsn, f"SELECT {columns} FROM {table}"))
    assert any(row[1] == "ecstatic" for row in source)
    if target_kind == "postgresql":
        target = as_text(pg(target_dsn, f"SELECT {columns} FROM {table}"))
        assert target == source
        labels = pg(target_dsn, "SELECT enum_range(NULL::public.mood)::text")
        assert labels == [("{sad,ok,happy,ecstatic}",)]
        types = dict(pg(target_dsn, "SELECT attname, format_type(atttypid, atttypmod) "
                        "FROM pg_attribute WHERE attrelid = 'public.feelings'::regclass "
                        "AND attnum > 0"))
        assert (types["m"], types["ms"], types["c"], types["p"], types["n"]) == (
            "mood", "mood[]", "mood", "integer", "numeric")
    else:
        with pymysql.connect(**server.connect_args(database)) as conn, conn.cursor() as cur:
            cur.execute("SELECT id, m, p, s, c, n, LOWER(HEX(b)) FROM feelings")
            target = as_text(cur.fetchall())
        numeric = [tuple(str(Decimal(v).normalize()) if i == 5 and v else v
                         for i, v in enumerate(row)) for row in target]
        assert numeric == source  # numeric (unbounded): DECIMAL(65,30) on MariaDB
    dblog_verify(config, table)


def events_of_table(tmp_path: Path, table: str) -> list[dict[str, Any]]:
    return read_events(LandingZone(tmp_path / "landing", SOURCE), table)


# -- 8. STORED generated columns --------------------------------------------------------


def test_generated_columns_reach_a_postgresql_target(
        pg_dsn: str, pg_target: str, redis_url: str, tmp_path: Path,
        spark: SparkSession) -> None:
    """The log does not carry a STORED generated column (pgoutput before PostgreSQL 18),
    nor does the dump (same bytes as the log): the target computes it with the source's
    expression. Preflight says so."""
    table = "public.lines"
    pg(pg_dsn, f"CREATE TABLE {table} (id int PRIMARY KEY, price numeric(10,2) NOT NULL, "
               "qty int NOT NULL, total numeric GENERATED ALWAYS AS (price * qty) STORED, "
               "label text GENERATED ALWAYS AS ('#' || id::text) STORED)",
       f"ALTER TABLE {table} REPLICA IDENTITY FULL",
       f"INSERT INTO {table} (id, price, qty) SELECT g, g * 1.5, g % 4 "
       "FROM generate_series(1, 40) g")
    config = write_config(tmp_path, pg_dsn, redis_url, [table], name=SOURCE,
                          extra=pg_target_section(pg_target))
    preflight = cli(config, "preflight", check=False)
    assert "generated column(s) total, label" in preflight.stdout, preflight.stdout
    capture(config, table, during=[f"UPDATE {table} SET qty = qty + 10 WHERE id % 3 = 0",
                                   f"INSERT INTO {table} (id, price, qty) VALUES (99, 2, 2)"],
            run=lambda s: pg(pg_dsn, s))
    wait_for(lambda: any(e["key"] == "[99]" for e in events_of_table(tmp_path, table)), 30,
             "the last insert to land")
    landed = events_of_table(tmp_path, table)
    assert all("total" not in json.loads(str(e["after"])) for e in landed if e["after"])
    merge(config, spark)
    query = f"SELECT id, price, qty, total, label FROM {table}"
    assert as_text(pg(pg_target, query)) == as_text(pg(pg_dsn, query))
    dblog_verify(config, table)



@pytest.mark.parametrize("target_kind", ["postgresql", "mariadb"])
def test_mariadb_generated_columns_land_and_merge_as_values(
        target_kind: str, mariadb_server: MariaDBServer, mariadb_database: str,
        redis_url: str, tmp_path: Path, spark: SparkSession,
        request: pytest.FixtureRequest) -> None:
    """MariaDB logs PERSISTENT and VIRTUAL columns' values in its row images (binlog_row_image
    FULL) and a chunk SELECT reads them: both paths land them, with the same bytes, and the
    merge writes them as plain columns of either target kind."""
    database = mariadb_database
    table = f"{database}.orderlines"
    with pymysql.connect(**mariadb_server.connect_args(database)) as conn, \
            conn.cursor() as cur:
        cur.execute("CREATE TABLE orderlines (id int PRIMARY KEY, price decimal(10,2) NOT NULL, "
                    "qty int NOT NULL, total decimal(12,2) AS (price * qty) PERSISTENT, "
                    "label varchar(20) AS (CONCAT('#', id)) VIRTUAL)")
        cur.execute("INSERT INTO orderlines (id, price, qty) VALUES "
                    + ", ".join(f"({i}, {i}.5, {i % 4})" for i in range(1, 41)))

    def run(statement: str) -> None:
        with pymysql.connect(**mariadb_server.connect_args(database)) as c, c.cursor() as cu:
            cu.execute(statement)

    if target_kind == "postgresql":
        target_dsn = request.getfixturevalue("pg_target")
        section = pg_target_section(target_dsn)
    else:
        target_db = f"t_{uuid.uuid4().hex[:16]}"
        mariadb_server.create_database(target_db)
        request.addfinalizer(lambda: mariadb_server.drop_database(target_db))
        request.addfinalizer(lambda: mariadb_server.drop_database(f"{target_db}_state"))
        section = my_target_section(mariadb_server, target_db, [table])
    config = write_config(tmp_path, mariadb_server.url(), redis_url, [table], name=SOURCE,
                          kind="mariadb", extra=section)
    capture(config, table, during=["UPDATE orderlines SET qty = qty + 10 WHERE id % 3 = 0",
                                   "INSERT INTO orderlines (id, price, qty) VALUES (99, 2, 2)"],
            run=run,
            until=lambda: any(e["key"] == "[99]" for e in events_of_table(tmp_path, table)))
    wait_for(lambda: any(e["key"] == "[99]" for e in events_of_table(tmp_path, table)), 30,
             "the last insert to land")
    landed = events_of_table(tmp_path, table)
    origins = {str(e["origin"]) for e in landed if e["after"]}
    assert origins == {"dump", "log"}, origins
    for event in landed:
        if event["after"] is not None:
            after = json.loads(str(event["after"]))
            price, qty = Decimal(after["price"]), after["qty"]
            assert (after["total"], after["label"]) == (
                f"{price * qty:.2f}", f"#{after['id']}"), event
    merge(config, spark)
    query = "SELECT id, price, qty, total, label FROM {} ORDER BY id"
    with pymysql.connect(**mariadb_server.connect_args(database)) as conn, \
            conn.cursor() as cur:
        cur.execute(query.format("orderlines"))
        source = as_text(cur.fetchall())
    if target_kind == "postgresql":
        target = as_text(pg(target_dsn, query.format(table)))
    else:
        with pymysql.connect(**mariadb_server.connect_args(target_db)) as conn, \
                conn.cursor() as cur:
            cur.execute(query.format("orderlines"))
            target = as_text(cur.fetchall())
    assert target == source
    dblog_verify(config, table)

# -- 5. tables without a primary key ------------------------------------------------------

NO_KEY_TABLES = {  # the key is (tenant, id) in both
    # a unique index on NOT NULL columns (and a wider one, and one on a nullable column)
    "by_index": "(tenant int NOT NULL, id int NOT NULL, note varchar(20), alt int, "
                "UNIQUE (alt), UNIQUE (tenant, id, note))",
    # no unique index at all: its key is named by source.keys
    "by_config": "(tenant int NOT NULL, id int NOT NULL, note varchar(20))",
}


@pytest.mark.parametrize("shape", list(NO_KEY_TABLES))
def test_a_table_without_a_primary_key(backend: _Backend, shape: str, spark: SparkSession,
                                       request: pytest.FixtureRequest) -> None:
    """Chunks, the watermark rule, a key dump, the merge (target primary key) and verify
    all use the chosen key; changes to rows mid-dump converge."""
    columns = NO_KEY_TABLES[shape]
    table = backend.db.table(f"events_{shape}")
    pgsql = backend.kind == "postgresql"
    statements = [f"CREATE TABLE {table} {columns}"]
    if shape == "by_index":
        index = "CREATE UNIQUE INDEX events_key ON {t} (tenant, id)"
        statements.append(index.format(t=table))
    if pgsql:
        identity = "USING INDEX events_key" if shape == "by_index" else "FULL"
        statements.append(f"ALTER TABLE {table} REPLICA IDENTITY {identity}")
    for statement in statements:
        backend.execute(statement)
    backend.execute(f"INSERT INTO {table} (tenant, id, note) VALUES "
                    + ", ".join(f"({i % 3}, {i}, 'n{i}')" for i in range(1, 121)))
    keys = f'keys = {{ "{table}" = ["tenant", "id"] }}' if shape == "by_config" else ""
    if pgsql:
        target_dsn = request.getfixturevalue("pg_target")
        section = pg_target_section(target_dsn)
    else:
        server: MariaDBServer = request.getfixturevalue("mariadb_server")
        target_db = f"t_{uuid.uuid4().hex[:16]}"
        server.create_database(target_db)
        request.addfinalizer(lambda: server.drop_database(target_db))
        request.addfinalizer(lambda: server.drop_database(f"{target_db}_state"))
        section = my_target_section(server, target_db, [table])
    config = backend.config_path([table], extra=section,
                                 source_extra=backend.source_extra + "\n" + keys)
    preflight = cli(config, "preflight", check=False)
    assert preflight.returncode == 0, preflight.stdout
    chosen = "unique index events_key" if shape == "by_index" else "source.keys"
    assert f"key (tenant, id) from {chosen}" in preflight.stdout, preflight.stdout
    during = [f"UPDATE {table} SET note = 'changed' WHERE mod(id, 4) = 0",
              f"UPDATE {table} SET id = id + 1000 WHERE mod(id, 10) = 1",  # key changes
              f"DELETE FROM {table} WHERE mod(id, 9) = 0",
              f"INSERT INTO {table} (tenant, id, note) VALUES (7, 5000, 'late')"]
    capture(config, table, during=during, run=backend.execute)
    keys_json = json.dumps([[0, 3], [2, 5], [1, 4000]])  # a key dump by the chosen key
    worker, thread = run_in_thread(config_module.load(config), {})
    try:
        request_id = dump(config, "--table", table, "--keys", keys_json)
        state = wait_request(backend.redis_url, SOURCE, request_id, ["completed", "failed"], 60)
        assert state["state"] == "completed", state
        wait_for(lambda: any(e["key"] == "[7,5000]" for e in events_of(backend, table)), 30,
                 "the last insert to land")
    finally:
        worker.stopping = True
        thread.join(30)
    assert {json.loads(str(e["key"]))[0] for e in events_of(backend, table)} <= {0, 1, 2, 7}
    merge(config, spark)
    source = as_text(_rows(backend, table))
    target = as_text(_target_rows(pgsql, request, section, table))
    assert target == source
    dblog_verify(config, table)


def _rows(backend: _Backend, table: str) -> list[tuple[Any, ...]]:
    return [(r["tenant"], r["id"], r["note"]) for r in
            backend.rows(table, ["tenant", "id"]).values()]


def _target_rows(pgsql: bool, request: pytest.FixtureRequest, section: str, table: str
                 ) -> list[tuple[Any, ...]]:
    if pgsql:
        return pg(request.getfixturevalue("pg_target"), f"SELECT tenant, id, note FROM {table}")
    server: MariaDBServer = request.getfixturevalue("mariadb_server")
    database = section.split('state_schema = "')[1].split("_state")[0]
    with pymysql.connect(**server.connect_args(database)) as conn, conn.cursor() as cur:
        cur.execute(f"SELECT tenant, id, note FROM {table.split('.')[1]}")
        return list(cur.fetchall())


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
def test_a_table_with_neither_key_is_refused_with_the_fix(backend: _Backend) -> None:
    table = backend.db.table("loose")
    backend.execute(f"CREATE TABLE {table} (a int, b text, UNIQUE (a))")
    config = backend.config_path([table])
    preflight = cli(config, "preflight", check=False)
    assert preflight.returncode == 1
    assert "has no primary key and no unique index on NOT NULL columns" in preflight.stdout
    assert f'[source] keys = {{ "{table}" = ["<column>", ...] }}' in preflight.stdout


# -- 6. REPLICA IDENTITY DEFAULT --------------------------------------------------------


def _incompressible(rnd: random.Random, size: int) -> str:
    return "".join(rnd.choice(string.ascii_letters + string.digits) for _ in range(size))


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
def test_replica_identity_default_with_toasted_values(backend: _Backend,
                                                      spark: SparkSession,
                                                      request: pytest.FixtureRequest) -> None:
    """Updates that leave a TOASTed value out of the log (pgoutput's unchanged-toast
    marker) never put a placeholder or a NULL into the landing zone or the target: the
    worker dumps those rows again. Deletes carry only the key."""
    rnd = random.Random(6)
    table = "public.docs"
    backend.execute(f"CREATE TABLE {table} (id int PRIMARY KEY, n int NOT NULL, body text)")
    bodies = {i: _incompressible(rnd, 9000) for i in range(1, 31)}
    for i, body in bodies.items():
        backend.execute(f"INSERT INTO {table} VALUES (%s, 0, %s)", (i, body))
    target_dsn = request.getfixturevalue("pg_target")
    config = backend.config_path([table], extra=pg_target_section(target_dsn))
    preflight = cli(config, "preflight", check=False)
    assert preflight.returncode == 0, preflight.stdout
    assert "REPLICA IDENTITY DEFAULT" in preflight.stdout
    during = [f"UPDATE {table} SET n = n + 1 WHERE mod(id, 2) = 0",  # body left out of the log
              f"UPDATE {table} SET id = id + 100 WHERE id = 5",  # a key change
              f"DELETE FROM {table} WHERE mod(id, 7) = 0",
              f"UPDATE {table} SET n = 42 WHERE id = 3"]
    capture(config, table, during=during, run=backend.execute)
    worker, thread = run_in_thread(config_module.load(config), {})
    try:  # the repairs of the updates the log cut short
        expected = {int(k.strip("[]")): v for k, v in backend.rows(table).items()}
        wait_for(lambda: _landed_rows(backend, table) == {
            k: (v["n"], v["body"]) for k, v in expected.items()}, 60,
            "the landing zone to equal the table")
    finally:
        worker.stopping = True
        thread.join(30)
    for event in events_of(backend, table):
        if event["after"] is not None:
            after = json.loads(str(event["after"]))
            assert after["body"] is not None and len(after["body"]) == 9000, event
    merge(config, spark)
    query = f"SELECT id, n, md5(body) FROM {table}"
    assert as_text(pg(target_dsn, query)) == as_text(pg(backend.db.dsn, query))
    dblog_verify(config, table)


def _landed_rows(backend: _Backend, table: str) -> dict[int, tuple[Any, Any]]:
    """The landing zone replayed by position: key -> (n, body)."""
    rows: dict[int, tuple[Any, Any]] = {}
    for event in sorted(events_of(backend, table), key=lambda e: str(e["position"])):
        key = json.loads(str(event["key"]))[0]
        if event["op"] == "d":
            rows.pop(key, None)
        elif event["after"] is not None:
            after = json.loads(str(event["after"]))
            rows[key] = (after["n"], after["body"])
    return rows
