"""A PostgreSQL merge target over TLS with a client certificate: a PostgreSQL with
``ssl=on`` serving a certificate of a CA made here, whose ``pg_hba.conf`` lets the merge's
role in only over TLS with a certificate (``hostssl ... cert``). The merge's apply (libpq)
and its Spark staging (pgjdbc) both connect with ``sslmode=verify-full``, ``sslrootcert``,
``sslcert`` and ``sslkey`` (a PEM key, converted for pgjdbc); a CA that did not sign the
server's certificate is refused by both."""

from __future__ import annotations

import os
import pwd
import shutil
import stat
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import make_conninfo
from pyspark.sql import SparkSession

from dblog_worker.errors import ConfigError
from dblog_worker.pg.jdbc_tls import pkcs8_der
from dblog_worker.pg.target import PostgresTarget
from tests.integration.test_merge import TABLE, Bed, ev, row, setup_zone
from tests.services import HOST, PG_OS_USER, PostgresServer
from tests.tls import TlsFiles, make_ca, make_certificate, server_files

ROLE = "merger"


@pytest.fixture(scope="module")
def certificates() -> Iterator[tuple[TlsFiles, TlsFiles]]:
    """The server's files (readable by the PostgreSQL OS user) and the client's."""
    folder = Path(tempfile.mkdtemp(prefix="dblog-pg-tls-"))
    folder.chmod(0o755)
    server = server_files(folder)
    client = make_certificate(folder, server.ca, "client", ROLE, f"DNS:{ROLE}")
    for path in folder.iterdir():
        path.chmod(0o644)
    client.key.chmod(0o600)  # libpq refuses a key others may read
    server.key.chmod(0o600)
    if os.geteuid() == 0:
        user = pwd.getpwnam(PG_OS_USER)
        os.chown(server.key, user.pw_uid, user.pw_gid)
    yield server, client
    shutil.rmtree(folder)


@pytest.fixture(scope="module")
def tls_postgres(certificates: tuple[TlsFiles, TlsFiles]) -> Iterator[PostgresServer]:
    server_files_, _ = certificates
    hba = server_files_.ca.parent / "pg_hba.conf"
    hba.write_text(f"local all all trust\n"
                   f"hostssl all {ROLE} {HOST}/32 cert\n"
                   f"host all {ROLE} {HOST}/32 reject\n"
                   f"host all all {HOST}/32 trust\n")
    hba.chmod(0o644)
    settings = {"ssl": "on", "ssl_cert_file": str(server_files_.cert),
                "ssl_key_file": str(server_files_.key), "ssl_ca_file": str(server_files_.ca),
                "hba_file": str(hba)}
    with PostgresServer(settings=settings).start() as server:
        with psycopg.connect(server.dsn(), autocommit=True) as conn:
            conn.execute(f'CREATE ROLE "{ROLE}" LOGIN'.encode())
        yield server


@pytest.fixture
def target(tls_postgres: PostgresServer) -> Iterator[str]:
    name = f"t_{uuid.uuid4().hex[:16]}"
    with psycopg.connect(tls_postgres.dsn(), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}" OWNER "{ROLE}"'.encode())
    yield name
    tls_postgres.drop_database(name)


def dsn(server: PostgresServer, database: str, ca: Path, client: TlsFiles,
        mode: str = "verify-full") -> str:
    return make_conninfo(host=HOST, port=server.port, dbname=database, user=ROLE,
                         sslmode=mode, sslrootcert=str(ca), sslcert=str(client.cert),
                         sslkey=str(client.key))


def test_the_spark_merge_stages_over_tls_with_a_client_certificate(
        tls_postgres: PostgresServer, certificates: tuple[TlsFiles, TlsFiles], target: str,
        tmp_path: Path, spark: SparkSession) -> None:
    server_tls, client = certificates
    with pytest.raises(psycopg.OperationalError, match=r"rejects connection|no pg_hba"):
        psycopg.connect(make_conninfo(host=HOST, port=tls_postgres.port, dbname=target,
                                      user=ROLE, sslmode="disable"))  # plain text: refused
    bed = Bed(tmp_path / "landing", "postgresql",
              dsn(tls_postgres, target, server_tls.ca, client), "public.items", "dblog", {})
    setup_zone(bed)
    bed.land(ev("r", 1, 1, row(1, "a", 10)), ev("c", 2, 2, row(2, "b")),
             ev("u", 3, 1, row(1, "a2", 11)), table=TABLE)
    report = bed.merge(spark)
    assert report.ok, report.as_dict()
    assert bed.rows() == {1: ("a2", 11), 2: ("b", None)}

    pg_target = PostgresTarget(bed.config().require_target())
    url, properties = pg_target.jdbc()
    assert "ssl" not in url  # the TLS options go as properties
    key = Path(properties["sslkey"])
    assert (properties["sslmode"], properties["sslrootcert"], properties["sslcert"]) == (
        "verify-full", str(server_tls.ca), str(client.cert))
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert stat.S_IMODE(key.parent.stat().st_mode) == 0o700
    probe = spark.read.jdbc(url, "(SELECT current_user AS who, ssl FROM pg_stat_ssl "
                                 "WHERE pid = pg_backend_pid()) AS probe",
                            properties=properties)
    assert [(r.who, r.ssl) for r in probe.collect()] == [(ROLE, True)]
    pg_target.close()
    assert not key.exists() and not key.parent.exists()  # removed with the target

    # sslmode=require with sslrootcert verifies the CA in libpq: in pgjdbc too
    wrong_ca = make_ca(tmp_path / "other")
    wrong = Bed(tmp_path / "landing", "postgresql",
                dsn(tls_postgres, target, wrong_ca, client, mode="require"), "public.items",
                "dblog", {})
    wrong_target = PostgresTarget(wrong.config().require_target())
    url, properties = wrong_target.jdbc()
    wrong_target.close()  # the converted key goes; the properties hold its old path
    url, properties = wrong_target.jdbc()  # ... converted again
    assert properties["sslmode"] == "verify-ca"
    with pytest.raises(Exception, match=r"Couldn.t connect to the database"):
        spark.read.jdbc(url, "(SELECT 1 AS one) AS probe", properties=properties).collect()
    properties["sslrootcert"] = str(server_tls.ca)  # only the CA differs from one taken
    assert spark.read.jdbc(url, "(SELECT 1 AS one) AS probe",
                           properties=properties).collect()[0].one == 1
    wrong_target.close()


def test_keys_pgjdbc_cannot_read_are_named(tmp_path: Path,
                                           certificates: tuple[TlsFiles, TlsFiles]) -> None:
    _, client = certificates
    pkcs8 = pkcs8_der(client.key.read_bytes(), client.key)
    assert pkcs8[:1] == b"\x30"
    traditional = tmp_path / "client.rsa.pem"  # the same key as PKCS #1
    subprocess.run(["openssl", "rsa", "-in", str(client.key), "-traditional", "-out",
                    str(traditional)], check=True, capture_output=True, timeout=60)
    assert b"BEGIN RSA PRIVATE KEY" in traditional.read_bytes()
    assert pkcs8_der(traditional.read_bytes(), traditional) == pkcs8
    ec = tmp_path / "ec.pem"
    ec.write_text("-----BEGIN EC PRIVATE KEY-----\nMHcCAQEE\n-----END EC PRIVATE KEY-----\n")
    with pytest.raises(ConfigError, match=r"sslkey .*ec\.pem is a EC PRIVATE KEY.*openssl "
                                          r"pkcs8 -topk8"):
        pkcs8_der(ec.read_bytes(), ec)
    missing = tmp_path / "missing.key"
    bed_config = Bed(tmp_path / "landing", "postgresql",
                     make_conninfo(host=HOST, dbname="x", user=ROLE, sslmode="require",
                                   sslkey=str(missing), sslcert=str(client.cert)),
                     "public.items", "dblog", {}).config()
    missing_target = PostgresTarget(bed_config.require_target())
    with pytest.raises(ConfigError, match=r"cannot read sslkey .*missing\.key"):
        missing_target.jdbc()
    missing_target.close()
