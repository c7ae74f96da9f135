"""The test-server fixtures themselves: real PostgreSQL (logical WAL), MariaDB (row binlog) and
Redis."""

from __future__ import annotations

import psycopg
import pymysql
import redis

from tests.services import MariaDBServer, PostgresServer, RedisServer


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


def _mariadb_variables(args: dict[str, object], *names: str) -> dict[str, str]:
    with pymysql.connect(**args) as conn, conn.cursor() as cur:
        cur.execute("SHOW GLOBAL VARIABLES WHERE Variable_name IN %s", (names,))
        return dict(cur.fetchall())


def test_mariadb_binlog_and_charset_settings(
    mariadb_server: MariaDBServer, mariadb_database: str
) -> None:
    args = mariadb_server.connect_args(mariadb_database)
    assert _mariadb_variables(
        args,
        "log_bin", "binlog_format", "binlog_row_image", "binlog_row_metadata", "server_id",
        "character_set_server", "collation_server", "bind_address",
    ) == {
        "log_bin": "ON",
        "binlog_format": "ROW",
        "binlog_row_image": "FULL",
        "binlog_row_metadata": "FULL",
        "server_id": "1",
        "character_set_server": "utf8mb4",
        "collation_server": MariaDBServer.COLLATION,
        "bind_address": "127.0.0.1",
    }
    with pymysql.connect(**args) as conn, conn.cursor() as cur:
        cur.execute("SELECT CURRENT_USER(), DATABASE(), @@character_set_database")
        assert cur.fetchone() == ("root@127.0.0.1", mariadb_database, "utf8mb4")
        cur.execute("SELECT @@log_bin_basename, @@datadir, @@log_error")
        paths = cur.fetchone()
    assert all(p.startswith(str(mariadb_server.base_dir)) for p in paths)


def test_mariadb_settings_override_and_binlog_off(mariadb_server: MariaDBServer) -> None:
    with MariaDBServer(settings={"binlog_format": "STATEMENT", "skip-log-bin": ""}) as other:
        other.start()
        assert other.port != mariadb_server.port
        assert _mariadb_variables(other.connect_args(), "log_bin", "binlog_format") == {
            "log_bin": "OFF",
            "binlog_format": "STATEMENT",
        }


def test_mariadb_create_and_drop_database(mariadb_server: MariaDBServer) -> None:
    name = mariadb_server.create_database("t_odd`name-1")
    assert name == "t_odd`name-1"
    session = pymysql.connect(**mariadb_server.connect_args(name))
    try:
        with session.cursor() as cur:
            cur.execute("CREATE TABLE t (id int PRIMARY KEY, s varchar(10))")
            cur.execute("INSERT INTO t VALUES (1, '\N{SNOWMAN}\N{PILE OF POO}')")
            cur.execute("SELECT s FROM t")
            assert cur.fetchone() == ("\N{SNOWMAN}\N{PILE OF POO}",)
        mariadb_server.drop_database(name)  # kills the session that still uses it
    finally:
        session.close()
    with pymysql.connect(**mariadb_server.connect_args()) as conn, conn.cursor() as cur:
        cur.execute(
            "SELECT count(*) FROM information_schema.schemata WHERE schema_name = %s", (name,)
        )
        assert cur.fetchone() == (0,)
    mariadb_server.drop_database(name)  # no error when it does not exist


def test_mariadb_url_is_percent_encoded(mariadb_server: MariaDBServer) -> None:
    port = mariadb_server.port
    assert mariadb_server.url() == f"mysql://root@127.0.0.1:{port}"
    assert mariadb_server.url("db", user="u@x", password="p:/w") == (
        f"mysql://u%40x:p%3A%2Fw@127.0.0.1:{port}/db"
    )


def test_mariadb_restart_and_kill_keep_port_and_data(
    mariadb_server: MariaDBServer, mariadb_database: str
) -> None:
    port, pid = mariadb_server.port, mariadb_server.pid
    args = mariadb_server.connect_args(mariadb_database)

    def count() -> int:
        with pymysql.connect(**args) as conn, conn.cursor() as cur:
            cur.execute("SELECT count(*) FROM t")
            (n,) = cur.fetchone()
            return int(n)

    with pymysql.connect(**args) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id int PRIMARY KEY)")
        cur.execute("INSERT INTO t VALUES (1), (2)")
    mariadb_server.restart()
    assert (mariadb_server.port, count()) == (port, 2)
    assert mariadb_server.pid != pid

    with pymysql.connect(**args) as conn, conn.cursor() as cur:
        cur.execute("INSERT INTO t VALUES (3)")
    mariadb_server.kill()
    assert not mariadb_server.running
    mariadb_server.restart()
    assert (mariadb_server.port, count()) == (port, 3)
