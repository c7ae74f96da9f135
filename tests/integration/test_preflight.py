"""``dblog preflight``: every problem that stops capture, each with the exact SQL that fixes it.

And ``dblog run`` against the same bad setups: it stops at once (exit 1) with the same
explanation instead of hanging or retrying, and it changes nothing on the source.
PostgreSQL first, then MariaDB.
"""

from __future__ import annotations

import re
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pymysql
import pytest
from psycopg import sql

from dblog_worker.landing.parquet import LandingZone, read_events
from dblog_worker.mysql.catalog import WATERMARK_DDL
from tests.integration.harness import (
    MariaDatabase,
    WorkerProcess,
    cli,
    create_test_table,
    wait_for,
    write_config,
)
from tests.services import MariaDBServer, PostgresServer

RUN_TIMEOUT_S = 60.0  # `dblog run` against a bad setup must be done well before this


@pytest.fixture(scope="module")
def replica_server() -> Iterator[PostgresServer]:
    """A second throwaway server with ``wal_level=replica``: no logical decoding."""
    with PostgresServer(settings={"wal_level": "replica"}).start() as server:
        yield server


@pytest.fixture
def role(postgres_server: PostgresServer, pg_dsn: str) -> Iterator[str]:
    """A LOGIN role with nothing else: no REPLICATION, no SELECT, no CREATE."""
    name = f"worker_{uuid.uuid4().hex[:8]}"
    ident = sql.Identifier(name)
    with psycopg.connect(postgres_server.dsn(), autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(ident))
    yield name
    # Torn down before pg_dsn: drop what the role owns or was granted there, then the role.
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP OWNED BY {} CASCADE").format(ident))
    with psycopg.connect(postgres_server.dsn(), autocommit=True) as conn:
        conn.execute(sql.SQL("DROP ROLE {}").format(ident))


# -- helpers ------------------------------------------------------------------


def execute(dsn: str, statements: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(statements.encode())


def preflight(config: Path) -> subprocess.CompletedProcess[str]:
    return cli(config, "preflight", check=False, timeout=30)


def fixes(output: str) -> list[str]:
    """The ``fix:`` lines of preflight's report, in order."""
    return [line.split("fix: ", 1)[1] for line in output.splitlines()
            if line.startswith("  fix: ")]


def dsn_as(postgres_server: PostgresServer, dsn: str, user: str) -> str:
    with psycopg.connect(dsn) as conn:
        dbname = conn.info.dbname
    return postgres_server.dsn(dbname=dbname, user=user)


def source_objects(dsn: str) -> tuple[object, ...]:
    """What capture creates on the source: slots, publications, the dblog schema."""
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT (SELECT count(*) FROM pg_replication_slots "
            "        WHERE database = current_database()), "
            "       (SELECT count(*) FROM pg_publication), "
            "       (SELECT count(*) FROM pg_namespace WHERE nspname = 'dblog')"
        ).fetchone()
    assert row is not None
    return tuple(row)


def assert_refused(config: Path, expected_fixes: list[str], *, what: str) -> None:
    """preflight exits 1 listing exactly ``expected_fixes``; ``dblog run`` stops the same way."""
    result = preflight(config)
    assert result.returncode == 1, result
    assert what in result.stdout, result.stdout
    assert fixes(result.stdout) == expected_fixes, result.stdout
    assert f"{len(expected_fixes)} problem(s)" in result.stdout
    assert_run_stops(config, expected_fixes, what)


def assert_run_stops(config: Path, expected_fixes: list[str], what: str) -> None:
    try:
        result = cli(config, "run", check=False, timeout=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"`dblog run` against a bad setup was still running after {RUN_TIMEOUT_S} s")
    assert result.returncode == 1, result
    assert "retrying" not in result.stderr, result.stderr  # it gives up: no session retried
    assert "Traceback" not in result.stderr, result.stderr
    assert "the source is not ready for capture" in result.stderr, result.stderr
    assert what in result.stderr, result.stderr
    for fix in expected_fixes:
        assert f"fix: {fix}" in result.stderr, result.stderr


# -- a good setup -------------------------------------------------------------


def test_good_setup_is_ready_and_preflight_changes_nothing(
    tmp_path: Path, pg_dsn: str, redis_url: str
) -> None:
    create_test_table(pg_dsn, "public.items", rows=3)
    create_test_table(pg_dsn, 'public."Odd Name"')
    config = write_config(tmp_path, pg_dsn, redis_url, ["public.items", "public.Odd Name"])
    result = preflight(config)
    assert result.returncode == 0, result
    assert "is ready: 2 table(s)" in result.stdout
    assert result.stdout.startswith("source src (")
    assert "fix:" not in result.stdout
    assert source_objects(pg_dsn) == (0, 0, 0)


# -- tables -------------------------------------------------------------------


def test_table_without_primary_key(tmp_path: Path, pg_dsn: str, redis_url: str) -> None:
    create_test_table(pg_dsn, "public.items")
    execute(pg_dsn, "CREATE TABLE public.no_pk (id integer, v text);"
                    "ALTER TABLE public.no_pk REPLICA IDENTITY FULL;")
    config = write_config(tmp_path, pg_dsn, redis_url, ["public.items", "public.no_pk"])
    assert_refused(config, ['ALTER TABLE "public"."no_pk" ADD PRIMARY KEY (<columns>); -- or '
                            'name its key columns: [source] keys = { "public.no_pk" = '
                            '["<column>", ...] }'],
                   what="table public.no_pk has no primary key and no unique index on NOT "
                        "NULL columns")
    assert source_objects(pg_dsn) == (0, 0, 0)


def test_table_whose_replica_identity_does_not_carry_its_key(
    tmp_path: Path, pg_dsn: str, redis_url: str
) -> None:
    """REPLICA IDENTITY NOTHING is refused; DEFAULT (the primary key) is not."""
    create_test_table(pg_dsn, "public.items")
    execute(pg_dsn, 'CREATE TABLE public.plain (id integer PRIMARY KEY);'
                    'CREATE TABLE public."Mixed ""Case""" (id integer PRIMARY KEY);'
                    'CREATE TABLE public.fine (id integer PRIMARY KEY);'
                    'ALTER TABLE public.plain REPLICA IDENTITY NOTHING;'
                    'ALTER TABLE public."Mixed ""Case""" REPLICA IDENTITY NOTHING;')
    config = write_config(tmp_path, pg_dsn, redis_url,
                          ["public.items", "public.plain", 'public.Mixed "Case"', "public.fine"])
    expected = ['ALTER TABLE "public"."plain" REPLICA IDENTITY FULL;',
                'ALTER TABLE "public"."Mixed ""Case""" REPLICA IDENTITY FULL;']
    assert_refused(config, expected,
                   what="table public.plain has REPLICA IDENTITY NOTHING, so the log would "
                        "not carry the old values of its key (id, primary key)")
    # The printed SQL is exact: run as printed, it fixes the problem.
    for fix in expected:
        execute(pg_dsn, fix)
    result = preflight(config)
    assert result.returncode == 0, result
    assert "is ready: 4 table(s)" in result.stdout


def test_tables_a_pattern_matches_never_stop_capture(
    tmp_path: Path, pg_dsn: str, redis_url: str
) -> None:
    """What a pattern brings in is left out when it cannot be captured (no key, a
    partition, a replica identity that would make its UPDATEs and DELETEs fail once
    published: its own or its partitions'): preflight is ready, and says what is captured
    and why; the same table named is refused."""
    create_test_table(pg_dsn, "public.items")
    execute(pg_dsn, "CREATE TABLE public.plain (id integer PRIMARY KEY);"
                    "ALTER TABLE public.plain REPLICA IDENTITY NOTHING;"
                    "CREATE TABLE public.no_pk (id integer);"
                    "CREATE TABLE public.uniq (id integer NOT NULL UNIQUE, v text);"
                    "CREATE TABLE public.uniq_ident (id integer NOT NULL, v text);"
                    "CREATE UNIQUE INDEX uniq_ident_id ON public.uniq_ident (id);"
                    "ALTER TABLE public.uniq_ident REPLICA IDENTITY USING INDEX uniq_ident_id;"
                    "CREATE TABLE public.parted (id integer PRIMARY KEY) PARTITION BY HASH (id);"
                    "CREATE TABLE public.parted_0 PARTITION OF public.parted "
                    "FOR VALUES WITH (MODULUS 1, REMAINDER 0);"
                    "ALTER TABLE public.parted_0 REPLICA IDENTITY NOTHING;")
    config = write_config(tmp_path, pg_dsn, redis_url, ["public.*"])
    result = preflight(config)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "is ready: 2 table(s)" in result.stdout, result.stdout
    assert "captured public.items: matches 'public.*'" in result.stdout
    assert "captured public.uniq_ident: matches 'public.*'" in result.stdout
    assert "table public.uniq_ident: key (id) from unique index uniq_ident_id" in result.stdout
    assert "left out public.no_pk: matches 'public.*', but it has no primary key nor unique " \
        "index on NOT NULL columns" in result.stdout
    assert "left out public.plain: matches 'public.*', but its REPLICA IDENTITY NOTHING " \
        "does not carry its key (id, primary key)" in result.stdout
    assert "left out public.uniq: matches 'public.*', but its REPLICA IDENTITY DEFAULT " \
        "does not carry its key (id, unique index uniq_id_key)" in result.stdout
    assert "left out public.parted: matches 'public.*', but partitions of it have a REPLICA " \
        "IDENTITY that does not carry its key" in result.stdout
    assert "left out public.parted_0: matches 'public.*', but it is a partition of " \
        "public.parted" in result.stdout
    # left out, it is not in the publication: its UPDATEs still work
    execute(pg_dsn, "INSERT INTO public.plain VALUES (1); UPDATE public.plain SET id = 2")
    named = write_config(tmp_path, pg_dsn, redis_url, ["public.items", "public.plain"])
    assert_refused(named, ['ALTER TABLE "public"."plain" REPLICA IDENTITY FULL;'],
                   what="table public.plain has REPLICA IDENTITY NOTHING")


def test_table_that_does_not_exist(tmp_path: Path, pg_dsn: str, redis_url: str) -> None:
    create_test_table(pg_dsn, "public.items")
    config = write_config(tmp_path, pg_dsn, redis_url, ["public.items", "public.nope"])
    assert_refused(config, ["check source.tables in the configuration"],
                   what="table public.nope does not exist")


# -- the role -----------------------------------------------------------------


def test_role_without_replication_and_select(
    tmp_path: Path, pg_dsn: str, redis_url: str, postgres_server: PostgresServer, role: str
) -> None:
    create_test_table(pg_dsn, "public.items", rows=3)
    config = write_config(tmp_path, dsn_as(postgres_server, pg_dsn, role), redis_url,
                          ["public.items"])
    result = preflight(config)
    assert result.returncode == 1, result
    assert f'role "{role}" may not stream the log (it lacks REPLICATION)' in result.stdout
    assert "may not SELECT from public.items" in result.stdout
    # Fixes are run by an administrator, so they must name the worker's role: CURRENT_USER
    # or a placeholder would grant to the administrator, or not run at all.
    printed = fixes(result.stdout)
    missing = [fix for fix in (f'ALTER ROLE "{role}" WITH REPLICATION;',
                               f'GRANT SELECT ON "public"."items" TO "{role}";',
                               f'CREATE SCHEMA dblog AUTHORIZATION "{role}";')
               if fix not in printed]
    assert not missing, f"fixes not printed: {missing}\n{result.stdout}"
    assert_run_stops(config, fixes(result.stdout), f'role "{role}" may not stream the log')
    assert source_objects(pg_dsn) == (0, 0, 0)


def test_printed_fixes_run_as_printed_make_capture_work(
    tmp_path: Path, pg_dsn: str, redis_url: str, postgres_server: PostgresServer, role: str
) -> None:
    """What an administrator does: run every printed fix verbatim, until preflight is happy;
    then the worker captures."""
    create_test_table(pg_dsn, "public.items", rows=3)
    config = write_config(tmp_path, dsn_as(postgres_server, pg_dsn, role), redis_url,
                          ["public.items"])
    reports = []
    for _ in range(3):
        result = preflight(config)
        reports.append(result.stdout)
        if result.returncode == 0:
            break
        assert result.returncode == 1, result
        for fix in fixes(result.stdout):
            try:
                execute(pg_dsn, fix)
            except psycopg.Error as exc:
                pytest.fail(f"printed fix {fix!r} does not run: {exc}\n{result.stdout}")
    assert result.returncode == 0, "still not ready after running the printed fixes:\n" + (
        "\n".join(reports))

    worker = WorkerProcess(config, tmp_path / "worker.log").start()
    try:
        wait_for(lambda: not worker.alive() or source_objects(pg_dsn)[0] == 1, 20,
                 "the worker to create its slot", lambda: worker.log()[-4000:])
        assert worker.alive(), f"preflight said ready, but run exited:\n{worker.log()[-4000:]}"
        execute(pg_dsn, "INSERT INTO public.items (id, version, payload) VALUES (4242, 1, 'x')")
        zone = LandingZone(tmp_path / "landing", "src")
        wait_for(lambda: any(e["key"] == "[4242]" and e["op"] == "c"
                             for e in read_events(zone, "public.items")) or not worker.alive(),
                 20, "the insert in the output", lambda: worker.log()[-4000:])
        assert worker.alive(), worker.log()[-4000:]
    finally:
        worker.kill()


def test_preflight_ready_means_run_starts(
    tmp_path: Path, pg_dsn: str, redis_url: str, postgres_server: PostgresServer, role: str
) -> None:
    """A role with what preflight asks for: either it runs, or preflight says what is missing."""
    create_test_table(pg_dsn, "public.items", rows=3)
    ident = sql.Identifier(role)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("ALTER ROLE {} WITH REPLICATION").format(ident))
        conn.execute(sql.SQL("GRANT SELECT ON public.items TO {}").format(ident))
        conn.execute(sql.SQL("CREATE SCHEMA dblog AUTHORIZATION {}").format(ident))
    config = write_config(tmp_path, dsn_as(postgres_server, pg_dsn, role), redis_url,
                          ["public.items"])
    result = preflight(config)
    worker = WorkerProcess(config, tmp_path / "worker.log").start()
    try:
        wait_for(lambda: not worker.alive() or source_objects(pg_dsn)[0] == 1, 20,
                 "the worker to create its slot or to exit", lambda: worker.log()[-4000:])
        log = worker.log()
        assert "Traceback" not in log, f"preflight said:\n{result.stdout}\nrun crashed:\n{log}"
        if result.returncode == 0:
            assert worker.alive(), f"preflight said ready, but run exited:\n{log}"
        else:
            assert result.returncode == 1, result
            assert worker.proc is not None and worker.proc.wait(10) == 1
            for fix in fixes(result.stdout):
                assert f"fix: {fix}" in log, log
    finally:
        worker.kill()


# -- the server ---------------------------------------------------------------


def test_wal_level_replica(
    tmp_path: Path, replica_server: PostgresServer, redis_url: str
) -> None:
    name = f"t_{uuid.uuid4().hex[:16]}"
    dsn = replica_server.create_database(name)
    try:
        create_test_table(dsn, "public.items", rows=3)
        with psycopg.connect(dsn) as conn:
            assert conn.execute("SHOW wal_level").fetchone() == ("replica",)
        config = write_config(tmp_path, dsn, redis_url, ["public.items"])
        assert_refused(config,
                       ["ALTER SYSTEM SET wal_level = logical; -- then restart PostgreSQL"],
                       what="wal_level is replica; logical decoding needs logical")
        assert source_objects(dsn) == (0, 0, 0)
    finally:
        replica_server.drop_database(name)


def test_owner_without_create_on_the_database(
    tmp_path: Path, pg_dsn: str, redis_url: str, postgres_server: PostgresServer, role: str
) -> None:
    """CREATE PUBLICATION needs CREATE on the database, even for the tables' owner."""
    create_test_table(pg_dsn, "public.items", rows=3)
    database = psycopg.conninfo.conninfo_to_dict(pg_dsn)["dbname"]
    execute(pg_dsn, f'ALTER TABLE public.items OWNER TO "{role}"')
    execute(pg_dsn, f'ALTER ROLE "{role}" WITH REPLICATION')
    execute(pg_dsn, f'CREATE SCHEMA dblog AUTHORIZATION "{role}"')
    execute(pg_dsn, f'REVOKE CREATE ON DATABASE "{database}" FROM PUBLIC')
    config = write_config(tmp_path, dsn_as(postgres_server, pg_dsn, role), redis_url,
                          ["public.items"])
    result = preflight(config)
    assert result.returncode == 1, result
    assert f'GRANT CREATE ON DATABASE "{database}" TO "{role}";' in fixes(result.stdout)
    for fix in fixes(result.stdout):
        execute(pg_dsn, fix)
    assert preflight(config).returncode == 0


# -- MariaDB ------------------------------------------------------------------


@pytest.fixture(scope="module")
def binlog_off_server() -> Iterator[MariaDBServer]:
    """A second throwaway MariaDB without a binary log."""
    with MariaDBServer(settings={"skip-log-bin": ""}).start() as server:
        yield server


def my_admin(server: MariaDBServer, *statements: str) -> list[tuple[Any, ...]]:
    """Run statements as root; the rows of the last one."""
    with pymysql.connect(**server.connect_args()) as conn, conn.cursor() as cursor:
        for statement in statements:
            cursor.execute(statement)
        return list(cursor.fetchall())


def run_fixes(server: MariaDBServer, printed: list[str]) -> None:
    """Run each printed fix as an administrator would paste it: every statement in it."""
    for fix in printed:
        statements = re.findall(r"(?:SET GLOBAL|GRANT|CREATE|ALTER)\b[^;]*;", fix)
        assert statements, f"no SQL in the fix {fix!r}"
        try:
            my_admin(server, *statements)
        except pymysql.MySQLError as exc:
            pytest.fail(f"printed fix {fix!r} does not run: {exc}")


def my_config(tmp_path: Path, server: MariaDBServer, redis_url: str, tables: list[str],
              user: str = "root") -> Path:
    return write_config(tmp_path, server.url(user=user), redis_url, tables, kind="mariadb")


def test_mariadb_good_setup_is_ready(
    tmp_path: Path, mariadb_server: MariaDBServer, mariadb_database: str, redis_url: str
) -> None:
    database = MariaDatabase(mariadb_server, mariadb_database)
    database.create_test_table(database.table("items"), 3)
    config = my_config(tmp_path, mariadb_server, redis_url, [database.table("items")])
    result = preflight(config)
    assert result.returncode == 0, result
    assert "is ready: 1 table(s)" in result.stdout
    assert "fix:" not in result.stdout


def test_mariadb_binary_log_off(
    tmp_path: Path, binlog_off_server: MariaDBServer, redis_url: str
) -> None:
    database = MariaDatabase(binlog_off_server, binlog_off_server.create_database("shop"))
    database.create_test_table(database.table("items"), 3)
    config = my_config(tmp_path, binlog_off_server, redis_url, [database.table("items")])
    assert_refused(
        config,
        ["set `log-bin = mysql-bin` in the server's configuration ([mysqld]) and restart it"],
        what="log_bin is OFF, capture needs ON")
    assert my_admin(binlog_off_server, "SHOW DATABASES LIKE 'dblog'") == []


@pytest.fixture
def binlog_settings(mariadb_server: MariaDBServer) -> Iterator[None]:
    """The session server's binlog_* settings, put back after the test."""
    names = ("binlog_format", "binlog_row_image", "binlog_row_metadata")
    saved = my_admin(mariadb_server, "SELECT " + ", ".join(f"@@GLOBAL.{n}" for n in names))[0]
    yield
    my_admin(mariadb_server, *(f"SET GLOBAL {n} = '{v}'"
                               for n, v in zip(names, saved, strict=True)))


def test_mariadb_binlog_settings(
    tmp_path: Path, mariadb_server: MariaDBServer, mariadb_database: str, redis_url: str,
    binlog_settings: None
) -> None:
    """Statement-based, minimal row images, minimal row metadata: each named with its
    fix; the SET GLOBAL in each fix, run as printed, makes the source ready."""
    database = MariaDatabase(mariadb_server, mariadb_database)
    database.create_test_table(database.table("items"), 3)
    my_admin(mariadb_server, "SET GLOBAL binlog_format = 'STATEMENT'",
             "SET GLOBAL binlog_row_image = 'MINIMAL'",
             "SET GLOBAL binlog_row_metadata = 'MINIMAL'")
    config = my_config(tmp_path, mariadb_server, redis_url, [database.table("items")])
    expected = [
        f"set `{option} = {value}` in the server's configuration ([mysqld]) and restart it, "
        f"or SET GLOBAL {name} = '{value}'; (new sessions only)"
        for name, option, value in (("binlog_format", "binlog-format", "ROW"),
                                    ("binlog_row_image", "binlog-row-image", "FULL"),
                                    ("binlog_row_metadata", "binlog-row-metadata", "FULL"))
    ]
    assert_refused(config, expected, what="binlog_format is STATEMENT, capture needs ROW")
    result = preflight(config)
    assert "binlog_row_image is MINIMAL, capture needs FULL" in result.stdout
    assert "binlog_row_metadata is MINIMAL, capture needs FULL" in result.stdout
    run_fixes(mariadb_server, fixes(result.stdout))
    assert preflight(config).returncode == 0


@pytest.fixture
def binlog_compression(mariadb_server: MariaDBServer) -> Iterator[None]:
    """log_bin_compress of the session server, off again after the test."""
    yield
    my_admin(mariadb_server, "SET GLOBAL log_bin_compress = OFF")


COMPRESSED = "log_bin_compress is ON: MariaDB logs row events compressed"


def test_mariadb_compressed_binary_log(
    tmp_path: Path, mariadb_server: MariaDBServer, mariadb_database: str, redis_url: str,
    binlog_compression: None
) -> None:
    """log_bin_compress=ON writes events the binlog reader skips: preflight and `dblog run`
    refuse it with the SET GLOBAL that turns it off; run as printed, the source is ready."""
    database = MariaDatabase(mariadb_server, mariadb_database)
    database.create_test_table(database.table("items"), 3)
    config = my_config(tmp_path, mariadb_server, redis_url, [database.table("items")])
    my_admin(mariadb_server, "SET GLOBAL log_bin_compress = ON")
    assert_refused(config, ["SET GLOBAL log_bin_compress = 'OFF'; and set `log-bin-compress = "
                            "OFF` in the server's configuration ([mysqld]) to keep it"],
                   what=COMPRESSED)
    run_fixes(mariadb_server, fixes(preflight(config).stdout))
    assert preflight(config).returncode == 0


def test_mariadb_compression_turned_on_while_the_worker_runs(
    tmp_path: Path, mariadb_server: MariaDBServer, mariadb_database: str, redis_url: str,
    binlog_compression: None
) -> None:
    """log_bin_compress turned on after the worker started: it stops (exit 1) at the first
    compressed event, naming the setting and the way back, instead of skipping it."""
    database = MariaDatabase(mariadb_server, mariadb_database)
    items = database.table("items")
    database.create_test_table(items)
    config = my_config(tmp_path, mariadb_server, redis_url, [items])
    worker = WorkerProcess(config, tmp_path / "worker.log").start()
    try:
        wait_for(lambda: " streaming " in worker.log(), 20, "the worker to stream",
                 lambda: worker.log()[-4000:])
        my_admin(mariadb_server, "SET GLOBAL log_bin_compress = ON")
        database.execute(f"INSERT INTO {items} VALUES (1, 1, REPEAT('x', 2000))")
        wait_for(lambda: not worker.alive(), 20, "the worker to stop", worker.log)
    finally:
        worker.kill()
    assert worker.proc is not None and worker.proc.returncode == 1
    log = worker.log()
    assert "because log_bin_compress is on): its changes would be lost" in log, log[-3000:]
    assert "dblog dump --all" in log and "Traceback" not in log, log[-3000:]
    assert not read_events(LandingZone(tmp_path / "landing", "src"), items)


def test_mariadb_table_without_primary_key(
    tmp_path: Path, mariadb_server: MariaDBServer, mariadb_database: str, redis_url: str
) -> None:
    database = MariaDatabase(mariadb_server, mariadb_database)
    database.create_test_table(database.table("items"))
    database.execute("CREATE TABLE no_pk (id int, v text)")
    config = my_config(tmp_path, mariadb_server, redis_url,
                       [database.table("items"), database.table("no_pk")])
    assert_refused(config, [f"ALTER TABLE `{mariadb_database}`.`no_pk` ADD PRIMARY KEY (...); "
                            f'-- or name its key columns: [source] keys = {{ '
                            f'"{mariadb_database}.no_pk" = ["<column>", ...] }}'],
                   what=f"table {mariadb_database}.no_pk has no primary key")


def test_mariadb_table_that_does_not_exist(
    tmp_path: Path, mariadb_server: MariaDBServer, mariadb_database: str, redis_url: str
) -> None:
    database = MariaDatabase(mariadb_server, mariadb_database)
    database.create_test_table(database.table("items"))
    config = my_config(tmp_path, mariadb_server, redis_url,
                       [database.table("items"), database.table("nope")])
    assert_refused(config, ["create it, or remove it from source.tables"],
                   what=f"table {mariadb_database}.nope does not exist")


@pytest.fixture
def my_user(mariadb_server: MariaDBServer) -> Iterator[str]:
    """A MariaDB account with no privilege at all."""
    name = f"worker_{uuid.uuid4().hex[:8]}"
    my_admin(mariadb_server, f"CREATE USER '{name}'@'%'")
    yield name
    my_admin(mariadb_server, f"DROP USER '{name}'@'%'")


def test_mariadb_user_without_privileges(
    tmp_path: Path, mariadb_server: MariaDBServer, mariadb_database: str, redis_url: str,
    my_user: str
) -> None:
    """No REPLICATION SLAVE, no REPLICATION CLIENT, no SELECT: each named with a GRANT to
    the worker's account; `dblog run` refuses the same way; the fixes, run as printed,
    make capture work."""
    database = MariaDatabase(mariadb_server, mariadb_database)
    items = database.table("items")
    database.create_test_table(items, 3)
    my_admin(mariadb_server, "DROP DATABASE IF EXISTS dblog")
    config = my_config(tmp_path, mariadb_server, redis_url, [items], user=my_user)
    account = f"'{my_user}'@'%'"
    result = preflight(config)
    assert result.returncode == 1, result
    for what in (f"{account} may not read the binary log (REPLICATION SLAVE)",
                 f"{account} may not read the binary log position (REPLICATION CLIENT",
                 f"{account} may not SELECT from {items}"):
        assert what in result.stdout, result.stdout
    printed = fixes(result.stdout)
    assert printed == [
        f"GRANT REPLICATION SLAVE ON *.* TO {account};",
        f"GRANT REPLICATION CLIENT ON *.* TO {account};",
        f"GRANT SELECT, INSERT, UPDATE ON `dblog`.* TO {account};",
        f"CREATE DATABASE IF NOT EXISTS `dblog`; GRANT SELECT, INSERT, UPDATE, CREATE ON "
        f"`dblog`.* TO {account};",
        f"GRANT SELECT ON `{mariadb_database}`.`items` TO {account};",
    ], result.stdout
    assert_run_stops(config, printed, f"{account} may not read the binary log")
    run_fixes(mariadb_server, printed)
    assert preflight(config).returncode == 0
    captures(tmp_path, config, database, items)


def test_mariadb_user_with_what_preflight_asks_for_runs(
    tmp_path: Path, mariadb_server: MariaDBServer, mariadb_database: str, redis_url: str,
    my_user: str
) -> None:
    """The watermark table exists (an administrator made it): preflight asks for no CREATE,
    and the worker starts without it."""
    database = MariaDatabase(mariadb_server, mariadb_database)
    items = database.table("items")
    database.create_test_table(items, 3)
    account = f"'{my_user}'@'%'"
    my_admin(mariadb_server, "CREATE DATABASE IF NOT EXISTS dblog", WATERMARK_DDL,
             f"GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO {account}",
             f"GRANT SELECT, INSERT, UPDATE ON dblog.* TO {account}",
             f"GRANT SELECT ON {items} TO {account}")
    config = my_config(tmp_path, mariadb_server, redis_url, [items], user=my_user)
    result = preflight(config)
    assert result.returncode == 0, result
    captures(tmp_path, config, database, items)


def captures(tmp_path: Path, config: Path, database: MariaDatabase, table: str) -> None:
    """``dblog run`` starts and an insert reaches the output."""
    worker = WorkerProcess(config, tmp_path / "worker.log").start()
    try:
        wait_for(lambda: not worker.alive() or " streaming " in worker.log(), 20,
                 "the worker to stream", lambda: worker.log()[-4000:])
        assert worker.alive(), f"preflight said ready, but run exited:\n{worker.log()[-4000:]}"
        database.execute(f"INSERT INTO {table} (id, version, payload) VALUES (4242, 1, 'x')")
        zone = LandingZone(tmp_path / "landing", "src")
        wait_for(lambda: any(e["key"] == "[4242]" and e["op"] == "c"
                             for e in read_events(zone, table)) or not worker.alive(),
                 20, "the insert in the output", lambda: worker.log()[-4000:])
        assert worker.alive(), worker.log()[-4000:]
    finally:
        worker.kill()
