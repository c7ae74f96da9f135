"""A local Spark for the test suite: ``local[2]`` with the JDBC drivers of Debian's packages.

Spark runs in-process (PySpark starts a JVM through py4j). It binds to 127.0.0.1 only: the
machine's host name resolves to an address that is not loopback, so ``SPARK_LOCAL_IP``,
the driver host and its bind address are all set. The JDBC drivers come from
``libpostgresql-jdbc-java`` and ``libmariadb-java`` (``.ci/run`` installs them), or from
the jars named in ``DBLOG_JDBC_JARS`` (comma-separated paths).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pyspark.sql import SparkSession

from tests.services import HOST, ServiceError, refuse_in_fast_runs
from tests.spark_jvm import CODEGEN

__all__ = ["generating_code", "jdbc_jars", "local_spark"]

DEBIAN_JARS = (Path("/usr/share/java/postgresql.jar"),
               Path("/usr/share/java/mariadb-java-client.jar"))


# What ``tiny`` adds: a JVM for a minute of small jobs (read when PySpark starts it).
TINY_CONF = {
    "spark.default.parallelism": "1",
    "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
}


def jdbc_jars() -> list[Path]:
    """The JDBC driver jars, checked to exist."""
    named = os.environ.get("DBLOG_JDBC_JARS")
    jars = [Path(p) for p in named.split(",")] if named else list(DEBIAN_JARS)
    missing = [str(j) for j in jars if not j.is_file()]
    if missing:
        raise ServiceError(
            f"JDBC driver jars not found: {', '.join(missing)}; install them with "
            "`apt-get install libpostgresql-jdbc-java libmariadb-java`, or name other jars "
            "in DBLOG_JDBC_JARS (comma-separated)"
        )
    return jars


@contextmanager
def generating_code(session: SparkSession) -> Iterator[None]:
    """``session``'s queries generate code, as users' do (the suite's JVMs interpret them:
    tests/spark_jvm.py), until the end; then its settings are what they were."""
    before = {key: str(session.conf.get(key)) for key in CODEGEN}  # both have defaults
    for key, value in CODEGEN.items():
        session.conf.set(key, value)
    try:
        yield
    finally:
        for key, value in before.items():
            session.conf.set(key, value)


@contextmanager
def local_spark(app: str = "dblog-tests", *, tiny: bool = False) -> Iterator[SparkSession]:
    """A ``local[2]`` SparkSession with the JDBC drivers, stopped at the end; ``tiny``
    (the benchmarks' smoke run): ``local[1]``, one shuffle partition and a JVM that
    compiles less (C1 only), which start and run a few thousand rows sooner."""
    refuse_in_fast_runs("a local Spark")
    os.environ["SPARK_LOCAL_IP"] = HOST
    # py4j logs "Closing down clientserver connection" from __del__, at interpreter exit
    # too, when pytest has closed the stream: a "--- Logging error ---" after the summary.
    logging.getLogger("py4j").setLevel(logging.WARNING)
    builder = (
        SparkSession.builder.master("local[1]" if tiny else "local[2]")
        .appName(app)
        .config("spark.jars", ",".join(str(j) for j in jdbc_jars()))
        .config("spark.driver.host", HOST)
        .config("spark.driver.bindAddress", HOST)
        .config("spark.ui.enabled", "false")
        # idle for most of a run: no console progress bar refreshed 5 times a second (a
        # PySpark session is a "shell" to spark-submit, which turns it on), and the local
        # executor's heartbeats every minute, not 10 s (tests/spark_jvm.py)
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.executor.heartbeatInterval", "60s")
        .config("spark.sql.shuffle.partitions", "1" if tiny else "4")
        .config("spark.sql.session.timeZone", "UTC")
    )
    for key, value in (TINY_CONF if tiny else {}).items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    try:
        yield session
    finally:
        session.stop()
