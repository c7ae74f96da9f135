"""The test-server fixtures themselves: real PostgreSQL (logical WAL) and Redis."""

from __future__ import annotations

import psycopg
import redis

from tests.services import PostgresServer, RedisServer


def test_wal_level_is_logical(pg_dsn: str) -> None:
    with psycopg.connect(pg_dsn) as conn:
        row = conn.execute("SHOW wal_level").fetchone()
    assert row == ("logical",)


def test_pgoutput_slot_and_database_still_droppable(
    postgres_server: PostgresServer, pg_dsn: str
) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_create_logical_replication_slot('s', 'pgoutput')")
        dbname = conn.info.dbname
    with psycopg.connect(postgres_server.dsn(), autocommit=True) as admin:
        slots = admin.execute(
            "SELECT slot_name, plugin FROM pg_replication_slots WHERE database = %s"
            " ORDER BY slot_name",
            (dbname,),
        ).fetchall()
    assert slots == [("s", "pgoutput")]

    postgres_server.drop_database(dbname)  # what the fixture does at teardown
    with psycopg.connect(postgres_server.dsn(), autocommit=True) as admin:
        assert admin.execute(
            "SELECT count(*) FROM pg_database WHERE datname = %s", (dbname,)
        ).fetchone() == (0,)
        assert admin.execute(
            "SELECT count(*) FROM pg_replication_slots WHERE database = %s", (dbname,)
        ).fetchone() == (0,)


def test_drop_database_with_active_walsender(postgres_server: PostgresServer) -> None:
    dsn = postgres_server.create_database("t_active_walsender")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_create_logical_replication_slot('busy', 'pgoutput')")
        conn.execute("CREATE PUBLICATION pub FOR ALL TABLES")
    repl = psycopg.connect(dsn + " replication=database", autocommit=True)
    try:
        # START_REPLICATION makes the slot active; the walsender is then ours until killed.
        repl.pgconn.send_query(
            b"START_REPLICATION SLOT busy LOGICAL 0/0"
            b" (proto_version '1', publication_names 'pub')"
        )
        with psycopg.connect(postgres_server.dsn(), autocommit=True) as admin:
            for _ in range(200):
                row = admin.execute(
                    "SELECT active FROM pg_replication_slots WHERE slot_name = 'busy'"
                ).fetchone()
                if row == (True,):
                    break
                admin.execute("SELECT pg_sleep(0.02)")
            assert row == (True,)
        postgres_server.drop_database("t_active_walsender")
    finally:
        repl.close()
    with psycopg.connect(postgres_server.dsn(), autocommit=True) as admin:
        assert admin.execute(
            "SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'busy'"
        ).fetchone() == (0,)


def test_redis_ping_set_get(redis_url: str) -> None:
    with redis.Redis.from_url(redis_url) as client:
        assert client.ping()
        assert client.set("k", "v")
        assert client.get("k") == b"v"


def test_redis_url_is_flushed_between_tests(redis_url: str) -> None:
    with redis.Redis.from_url(redis_url) as client:
        assert client.get("k") is None


def test_postgres_restart_keeps_port_and_data(
    postgres_server: PostgresServer, pg_dsn: str
) -> None:
    port = postgres_server.port
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY)")
        conn.execute("INSERT INTO t VALUES (1), (2)")
        conn.execute("SELECT pg_create_logical_replication_slot('survivor', 'pgoutput')")
    postgres_server.restart()
    assert postgres_server.port == port
    with psycopg.connect(pg_dsn) as conn:
        assert conn.execute("SELECT count(*) FROM t").fetchone() == (2,)
        assert conn.execute(
            "SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'survivor'"
        ).fetchone() == (1,)


def test_redis_restart_and_kill_keep_port(redis_server: RedisServer, redis_url: str) -> None:
    port = redis_server.port
    redis_server.restart()
    assert redis_server.port == port
    with redis.Redis.from_url(redis_url) as client:
        assert client.ping()
    redis_server.kill()
    assert not redis_server.running
    redis_server.restart()
    assert redis_server.port == port
    with redis.Redis.from_url(redis_url) as client:
        assert client.ping()
