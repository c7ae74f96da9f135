"""MySQL/MariaDB over TLS: a MariaDB that refuses plain connections
(``require_secure_transport=ON``), serving a certificate of a CA made here; the worker
(dump connection, lanes, binary log), ``dblog preflight`` and the Spark merge's JDBC
connection reach it with ``sslmode=verify-full``; a wrong CA, a host name the certificate
does not list, and ``sslmode=disable`` are refused with messages that say so."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pymysql
import pytest
from pyspark.sql import SparkSession

from dblog_worker.errors import ConfigError
from dblog_worker.mysql.connection import connect
from dblog_worker.mysql.target import MySQLTarget
from tests.integration.harness import (
    SOURCE,
    Backend,
    MariaDatabase,
    Workers,
    assert_converged,
    cli,
    dump,
    wait_for,
    wait_request,
)
from tests.integration.test_merge import TABLE, Bed, ev, row, setup_zone
from tests.services import MariaDBServer
from tests.tls import TlsFiles, make_ca, make_certificate, server_files, server_settings

PASSWORD = "tls-Secr3t-pw"


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    return server_files(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def tls_server(tls: TlsFiles) -> Iterator[MariaDBServer]:
    with MariaDBServer(settings=server_settings(tls)).start() as server:
        admin(server, f"CREATE USER 'dblog'@'%' IDENTIFIED BY '{PASSWORD}'",
              "GRANT ALL ON *.* TO 'dblog'@'%'")
        yield server


@pytest.fixture
def database(tls_server: MariaDBServer) -> Iterator[str]:
    name = tls_server.create_database(f"t_{uuid.uuid4().hex[:16]}")
    yield name
    tls_server.drop_database(name)


def admin(server: MariaDBServer, *statements: str) -> list[tuple[object, ...]]:
    """As root (PyMySQL prefers TLS: the server takes it)."""
    with pymysql.connect(**server.connect_args()) as conn, conn.cursor() as cursor:
        for statement in statements:
            cursor.execute(statement)
        return list(cursor.fetchall())


def dsn(server: MariaDBServer, query: str, host: str = "127.0.0.1") -> str:
    return f"mysql://dblog:{PASSWORD}@{host}:{server.port}{query}"


def backend(server: MariaDBServer, database: str, redis_url: str, tmp_path: Path,
            query: str) -> Backend:
    db = MariaDatabase(server, database)
    db.dsn = dsn(server, query)
    return Backend(db, redis_url, tmp_path, server.restart)


def worker_sessions(server: MariaDBServer) -> list[str]:
    """The commands of the worker user's sessions (a ``Binlog Dump`` among them)."""
    return [str(r[0]) for r in admin(
        server, "SELECT COMMAND FROM information_schema.PROCESSLIST WHERE USER = 'dblog'")]


def test_plain_connections_are_refused(tls_server: MariaDBServer) -> None:
    """What makes the other tests prove TLS: the server takes no unencrypted session."""
    with pytest.raises(pymysql.err.OperationalError):
        pymysql.connect(host="127.0.0.1", port=tls_server.port, user="dblog",
                        password=PASSWORD, ssl_disabled=True)
    [(cipher,)] = [(r[1],) for r in admin(tls_server, "SHOW STATUS LIKE 'Ssl_cipher'")]
    assert cipher


def test_connections_that_prefer_tls_take_it_with_one_shared_context(
        tls_server: MariaDBServer) -> None:
    """The default sslmode (prefer) still takes TLS where the server offers it, though the
    worker's connections build one TLS context between them instead of one each."""
    connections = [connect(dsn(tls_server, "")) for _ in range(2)]
    try:
        for conn in connections:
            with conn.cursor() as cursor:
                cursor.execute("SHOW SESSION STATUS LIKE 'Ssl_cipher'")
                assert cursor.fetchone()[1]
        assert connections[0].ctx is connections[1].ctx
    finally:
        for conn in connections:
            conn.close()


def test_the_worker_captures_and_dumps_over_verified_tls(
        tls_server: MariaDBServer, tls: TlsFiles, database: str, redis_url: str,
        tmp_path: Path) -> None:
    """With verify-full, the worker streams the binary log and dumps a table in parallel
    lanes under a workload; the output converges. Every session of its user is encrypted
    (the server refuses any other), the binary log's among them."""
    source = backend(tls_server, database, redis_url, tmp_path,
                     f"?sslmode=verify-full&sslrootcert={tls.ca}")
    source.create(source.t1, 800)
    config = source.config_path([source.t1])
    with Workers(tmp_path / "worker.log") as workers:
        worker = workers.start(config)
        wait_for(lambda: any(c.startswith("Binlog Dump") for c in worker_sessions(tls_server)),
                 30, "the worker's binary log session", worker.log)
        workload = source.workload([source.t1], seed=5)
        workload.start()
        try:
            request_id = dump(config, "--all", "--chunk-size", "61", "--parallelism", "3")
            state = wait_request(redis_url, SOURCE, request_id, ["completed", "failed"], 90,
                                 worker)
            assert state["state"] == "completed", state
        finally:
            workload.stop()
        assert workload.transactions > 5
        assert_converged(source, source.t1)
        assert len(worker_sessions(tls_server)) >= 2  # the dump's and the binary log's
        assert PASSWORD not in worker.log()


def _refused(server: MariaDBServer, database: str, redis_url: str, tmp_path: Path,
             query: str) -> str:
    """``dblog run`` with this DSN query: it stops at once (a configuration error); its
    output, which never shows the password."""
    source = backend(server, database, redis_url, tmp_path, query)
    source.create(source.t1, 0)
    config = source.config_path([source.t1])
    with Workers(tmp_path / "worker.log") as workers:
        worker = workers.start(config)
        wait_for(lambda: not worker.alive(), 30, "the worker to stop", worker.log)
        assert worker.stop() == 1, worker.log()
        log = worker.log()
    assert PASSWORD not in log
    return log


def test_a_wrong_ca_is_refused(tls_server: MariaDBServer, database: str, redis_url: str,
                               tmp_path: Path) -> None:
    other = make_ca(tmp_path / "other", "another CA")
    query = f"?sslmode=verify-ca&sslrootcert={other}"
    log = _refused(tls_server, database, redis_url, tmp_path, query)
    assert (f"error: mysql://dblog@127.0.0.1:{tls_server.port}{query} presents a TLS "
            "certificate that sslrootcert does not vouch for (self-signed certificate in "
            "certificate chain): sslrootcert must be the certificate authority that signed "
            "the server's certificate") in log


def test_a_missing_ca_file_is_named(tls_server: MariaDBServer, database: str,
                                    redis_url: str, tmp_path: Path) -> None:
    query = f"?sslmode=verify-full&sslrootcert={tmp_path}/absent.pem"
    log = _refused(tls_server, database, redis_url, tmp_path, query)
    assert (f"error: cannot use the TLS files of mysql://dblog@127.0.0.1:{tls_server.port}"
            f"{query} (No such file or directory)") in log


def test_sslmode_disable_against_a_server_that_requires_tls(
        tls_server: MariaDBServer, database: str, redis_url: str, tmp_path: Path) -> None:
    log = _refused(tls_server, database, redis_url, tmp_path, "?sslmode=disable")
    assert (f"error: mysql://dblog@127.0.0.1:{tls_server.port}?sslmode=disable refused the "
            "login over plain text") in log
    assert "require_secure_transport=ON refuses every unencrypted connection" in log


def test_verify_full_checks_the_host_name_and_verify_ca_does_not(
        tls: TlsFiles, redis_url: str, tmp_path: Path) -> None:
    """A server whose certificate (of the same CA) names another host: verify-full refuses
    it, verify-ca takes it."""
    elsewhere = make_certificate(tls.ca.parent, tls.ca, "elsewhere", "db.example",
                                 "DNS:db.example")
    with MariaDBServer(settings=server_settings(elsewhere)).start() as server:
        admin(server, f"CREATE USER 'dblog'@'%' IDENTIFIED BY '{PASSWORD}'",
              "GRANT ALL ON *.* TO 'dblog'@'%'")
        database = server.create_database("shop")
        results = {}
        for mode in ("verify-full", "verify-ca"):
            source = backend(server, database, redis_url, tmp_path / mode,
                             f"?sslmode={mode}&sslrootcert={tls.ca}")
            (tmp_path / mode).mkdir()
            if mode == "verify-full":
                source.create(source.t1, 3)
            results[mode] = cli(source.config_path([source.t1]), "preflight", check=False)
        port = server.port
    refused, taken = results["verify-full"], results["verify-ca"]
    assert refused.returncode == 1, refused
    assert (f"error: mysql://dblog@127.0.0.1:{port}?sslmode=verify-full&sslrootcert={tls.ca} "
            "presents a TLS certificate for another host (IP address mismatch, certificate is "
            "not valid for '127.0.0.1'): sslmode=verify-full needs the DSN's host to be a name "
            "or address the certificate lists; use one, or sslmode=verify-ca") in refused.stderr
    assert taken.returncode == 0, taken
    assert "is ready" in taken.stdout
    assert PASSWORD not in refused.stderr + refused.stdout + taken.stderr + taken.stdout


def test_the_spark_merge_writes_over_verified_tls(
        tls_server: MariaDBServer, tls: TlsFiles, database: str, tmp_path: Path,
        spark: SparkSession) -> None:
    """The merge's JDBC staging (MariaDB Connector/J) and its apply (PyMySQL) verify the
    server's certificate; the server takes nothing else."""
    url = dsn(tls_server, f"?sslmode=verify-full&sslrootcert={tls.ca}")
    bed = Bed(tmp_path / "landing", "mysql", url, f"{database}.items", database,
              {"host": "127.0.0.1", "port": tls_server.port, "user": "root"})
    setup_zone(bed)
    bed.land(ev("r", 1, 1, row(1, "a", 10)), ev("c", 2, 2, row(2, "b")),
             ev("u", 3, 1, row(1, "a2", 11)), table=TABLE)
    report = bed.merge(spark)
    assert report.ok, report.as_dict()
    assert bed.rows() == {1: ("a2", 11), 2: ("b", None)}

    wrong = Bed(tmp_path / "landing", "mysql",
                dsn(tls_server, f"?sslmode=verify-full&sslrootcert={make_ca(tmp_path / 'x')}"),
                f"{database}.items", database, bed.mysql_args)
    wrong.land(ev("u", 4, 2, row(2, "b2")))
    with pytest.raises(ConfigError, match="presents a TLS certificate that sslrootcert does "
                                          "not vouch for") as refused:
        wrong.merge(spark)
    assert PASSWORD not in str(refused.value)
    # The executors' JDBC connections verify the certificate on their own: only the CA
    # differs between the refused probe and the one taken.
    url, properties = MySQLTarget(wrong.config().require_target()).jdbc()
    with pytest.raises(Exception, match=r"Couldn.t connect to the database") as jdbc_refused:
        spark.read.jdbc(url, "(SELECT 1 AS one) AS probe", properties=properties).collect()
    assert PASSWORD not in str(jdbc_refused.value)
    url, properties = MySQLTarget(bed.config().require_target()).jdbc()
    probe = spark.read.jdbc(url, "(SELECT 1 AS one) AS probe", properties=properties)
    assert [r.one for r in probe.collect()] == [1]
