"""The worker and its PostgreSQL: what it confirms, keepalives, killed connections, secrets."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from dblog_worker.landing.parquet import LandingZone, read_events
from tests.integration.harness import (
    WorkerProcess,
    cli,
    create_test_table,
    wait_for,
    wait_request,
    write_config,
)
from tests.services import PostgresServer

T1 = "public.items"


def confirmed_lsn(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT confirmed_flush_lsn - '0/0'::pg_lsn FROM pg_replication_slots "
                           "WHERE slot_name = 'dblog_src'").fetchone()
    return -1 if row is None or row[0] is None else int(row[0])


def wal_lsn(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn").fetchone()
    assert row is not None
    return int(row[0])


def started(config: Path, tmp_path: Path) -> WorkerProcess:
    worker = WorkerProcess(config, tmp_path / "worker.log").start()
    wait_for(lambda: " streaming " in worker.log() or not worker.alive(), 30, "streaming",
             worker.log)
    return worker


def test_the_slot_is_confirmed_only_up_to_durable_output(
    pg_dsn: str, redis_url: str, tmp_path: Path
) -> None:
    create_test_table(pg_dsn, T1)
    config = write_config(tmp_path, pg_dsn, redis_url, [T1], flush_interval_s=30)
    worker = started(config, tmp_path)
    zone = LandingZone(tmp_path / "landing", "src")
    try:
        time.sleep(1.0)
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            # the first events after a quiet spell are written at once ...
            conn.execute(f"INSERT INTO {T1} VALUES (1, nextval('versions'), 'x')")
            wait_for(lambda: len(read_events(zone, T1)) == 1, 10, "the first insert",
                     worker.log)
            # ... the next ones wait for the flush interval (30 s)
            conn.execute(f"INSERT INTO {T1} VALUES (2, nextval('versions'), 'y')")
        inserted = wal_lsn(pg_dsn)
        time.sleep(3)  # heartbeats and keepalives come and go; nothing more is flushed yet
        assert confirmed_lsn(pg_dsn) < inserted
        assert len(read_events(zone, T1)) == 1
        assert worker.stop() == 0  # a stop flushes, then confirms
        assert len(read_events(zone, T1)) == 2
        assert confirmed_lsn(pg_dsn) >= inserted
    finally:
        worker.kill()


@pytest.fixture(scope="module")
def impatient_server() -> Iterator[PostgresServer]:
    """A server that drops a walsender silent for 2 s, unless it answers keepalives."""
    with PostgresServer(settings={"wal_sender_timeout": "2s"}).start() as server:
        yield server


def test_keepalives_are_answered(impatient_server: PostgresServer, redis_url: str,
                                 tmp_path: Path) -> None:
    dsn = impatient_server.create_database("keepalive")
    try:
        create_test_table(dsn, T1)
        config = write_config(tmp_path, dsn, redis_url, [T1], heartbeat_interval_s=3600)
        worker = started(config, tmp_path)
        try:
            time.sleep(7)  # idle, more than three sender timeouts
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute(f"INSERT INTO {T1} VALUES (1, nextval('versions'), 'x')")
            wait_for(lambda: len(read_events(LandingZone(tmp_path / "landing", "src"), T1)) == 1,
                     20, "the insert", worker.log)
            assert "session ended" not in worker.log()
        finally:
            worker.kill()
    finally:
        impatient_server.drop_database("keepalive")


def test_connections_killed_by_the_server_are_reopened(
    pg_dsn: str, redis_url: str, tmp_path: Path
) -> None:
    create_test_table(pg_dsn, T1, rows=3000)
    config = write_config(tmp_path, pg_dsn, redis_url, [T1])
    worker = started(config, tmp_path)
    try:
        request = cli(config, "dump", "--table", T1, "--chunk-size", "30", "--delay-ms", "10")
        request_id = request.stdout.split()[0]
        time.sleep(1)
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            killed = conn.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE application_name = 'dblog-src' OR backend_type = 'walsender'"
            ).fetchone()
            conn.execute(f"UPDATE {T1} SET version = nextval('versions') WHERE id < 500")
        assert killed is not None and killed[0] >= 1
        state = wait_request(redis_url, "src", request_id, ["completed", "failed"], 60, worker)
        assert state["state"] == "completed"
        assert "session ended" in worker.log()
    finally:
        worker.kill()


def test_secrets_never_reach_logs_or_output(pg_dsn: str, redis_url: str, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    secret = "s3cret-Pa55-word"
    create_test_table(pg_dsn, T1, rows=10)
    config = write_config(tmp_path, pg_dsn, redis_url, [T1])
    text = config.read_text().replace('[redis]', 'password_env = "SHOP_PASSWORD"\n\n[redis]')
    config.write_text(text)
    monkeypatch.setenv("SHOP_PASSWORD", secret)  # trust auth: accepted, and must stay hidden
    worker = started(config, tmp_path)
    try:
        outputs = [
            cli(config, "preflight").stdout,
            cli(config, "dump", "--all", "--wait").stdout,
            cli(config, "status").stdout,
            cli(config, "status", "--json").stdout,
            cli(config, "list", "--json").stdout,
            cli(config, "show", "dump-1", "--json").stdout,
        ]
        bad = cli(config, "dump", "--table", "public.nope", check=False)
        outputs += [bad.stdout, bad.stderr]
        assert worker.stop() == 0
    finally:
        worker.kill()
    assert " streaming user=postgres" in worker.log()
    for text in [*outputs, worker.log()]:
        assert secret not in text


def test_the_worker_writes_only_its_watermark_row(
    pg_dsn: str, redis_url: str, tmp_path: Path
) -> None:
    """Invariant 6: a dump reads the captured tables and writes nothing but dblog.watermark."""
    create_test_table(pg_dsn, T1, rows=500)
    config = write_config(tmp_path, pg_dsn, redis_url, [T1])
    worker = started(config, tmp_path)
    try:
        request = cli(config, "dump", "--all", "--chunk-size", "50")
        wait_request(redis_url, "src", request.stdout.split()[0], ["completed"], 60, worker)
    finally:
        worker.stop()

    def written() -> dict[str, tuple[int, int, int]]:
        with psycopg.connect(pg_dsn) as conn:
            rows = conn.execute(
                "SELECT schemaname || '.' || relname, n_tup_ins, n_tup_upd, n_tup_del "
                "FROM pg_stat_user_tables WHERE n_tup_ins + n_tup_upd + n_tup_del > 0"
            ).fetchall()
        return {str(r[0]): (int(r[1]), int(r[2]), int(r[3])) for r in rows}

    # statistics reach the view a moment after the writing backend's transactions
    wait_for(lambda: "dblog.watermark" in written(), 20, "the statistics")
    stats = written()
    assert set(stats) == {T1, "dblog.watermark"}, stats
    assert stats[T1] == (500, 0, 0)  # the test's own inserts; the dump changed nothing
    assert stats["dblog.watermark"][1] >= 2 * 10  # LW and HW of every chunk, heartbeats
