"""``dblog preflight``: every problem that stops capture, each with the exact SQL that fixes it.

And ``dblog run`` against the same bad setups: it stops at once (exit 1) with the same
explanation instead of hanging or retrying, and it changes nothing on the source.
"""

from __future__ import annotations

import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from dblog_worker.landing import LandingZone, read_events
from tests.integration.harness import (
    WorkerProcess,
    cli,
    create_test_table,
    wait_for,
    write_config,
)
from tests.services import PostgresServer

RUN_TIMEOUT_S = 20.0  # `dblog run` against a bad setup must be done well before this


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
    started = time.monotonic()
    try:
        result = cli(config, "run", check=False, timeout=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"`dblog run` against a bad setup was still running after {RUN_TIMEOUT_S} s")
    elapsed = time.monotonic() - started
    assert result.returncode == 1, result
    assert elapsed < 10, f"`dblog run` took {elapsed:.1f} s to give up"
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
    assert_refused(config, ['ALTER TABLE "public"."no_pk" ADD PRIMARY KEY (<columns>);'],
                   what="table public.no_pk has no primary key")
    assert source_objects(pg_dsn) == (0, 0, 0)


def test_table_without_replica_identity_full(
    tmp_path: Path, pg_dsn: str, redis_url: str
) -> None:
    create_test_table(pg_dsn, "public.items")
    execute(pg_dsn, 'CREATE TABLE public.plain (id integer PRIMARY KEY);'
                    'CREATE TABLE public."Mixed ""Case""" (id integer PRIMARY KEY);')
    config = write_config(tmp_path, pg_dsn, redis_url,
                          ["public.items", "public.plain", 'public.Mixed "Case"'])
    expected = ['ALTER TABLE "public"."plain" REPLICA IDENTITY FULL;',
                'ALTER TABLE "public"."Mixed ""Case""" REPLICA IDENTITY FULL;']
    assert_refused(config, expected,
                   what="table public.plain does not have REPLICA IDENTITY FULL")
    # The printed SQL is exact: run as printed, it fixes the problem.
    for fix in expected:
        execute(pg_dsn, fix)
    result = preflight(config)
    assert result.returncode == 0, result
    assert "is ready: 3 table(s)" in result.stdout


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
