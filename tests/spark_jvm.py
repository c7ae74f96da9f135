"""The JVMs of the suite's Spark starts: cheap to start, and sharing their classes.

Every Spark start of the suite (an in-process ``SparkSession``, a ``dblog merge``'s
``spark-submit``, Airflow's SparkSubmitOperator, the benchmarks' tiny runs) is a
``spark-submit``, whose launcher puts ``$SPARK_SUBMIT_OPTS`` on the driver JVM's command
line, whatever Spark settings the test gives (it prints nothing, and is not a Spark setting
that a test could read back). The session sets it, before any test, to:

- ``FAST_JVM``: C1 only and the serial GC. A tiny job's JVM does its work before C2 would
  pay off; on two shared cores, C2's and G1's threads are pure cost (a tiny job's CPU
  halves). No ``hsperfdata`` (``-XX:-UsePerfData``: nothing here runs jps or jstat), which
  an idle JVM samples every 50 ms.
- ``NO_CODEGEN``: Spark SQL interprets expressions instead of generating Java for each
  query and compiling it (Janino, then C1): Spark reads the ``-Dspark.*`` system properties
  as settings, below any setting a test or a configuration gives. The suite's jobs are a
  few rows each, and compiling their code cost more than it saved: three tests of the lake
  session took 181 CPU s of Spark 3.5 JVM with it, 139 without (-23 %). Tests still assert
  what they did, on the interpreted path; a few run the code generation that users run
  (Spark's default), so that a fault of the generated code is still seen:

  - tests/integration/test_lake_merge.py: ``test_an_s3_landing_zone_merged_into_iceberg_in_
    another_store`` (Iceberg) and ``test_a_local_landing_zone_merged_into_delta_on_s3_then_
    verified`` (Delta), both a ``dblog merge`` spark-submit as users run it, with
    ``CODEGEN`` in ``[merge.spark_conf]``;
  - tests/integration/test_merge_end_to_end.py: ``test_capture_then_merge`` from
    PostgreSQL to PostgreSQL (the plain JDBC merge), in the shared session with
    ``tests.spark_local.generating_code``;
  - tests/integration/test_demo.py: the quickstart, which runs as users do (its
    environment without NO_CODEGEN: ``with_codegen``).

  tests/integration/test_spark_local.py reads the settings back from the session (the
  options reach the JVM). ``DBLOG_TEST_SPARK_CODEGEN=1`` runs every Spark of the suite with
  code generation.
- a class-data-sharing archive of the Spark home's classes (``-XX:SharedArchiveFile``):
  Spark's few thousand classes mapped, not parsed and verified, at each start (2-3 s of CPU
  less). A dynamic archive fits one class path (``<conf dir>:<home>/jars/*``), so there is
  one per Spark home (the venv's PySpark, ``.tools/spark35``), made once by a tiny job with
  ``-XX:ArchiveClassesAtExit`` and kept in a cache folder named by what it depends on (the
  JDK, the home's jars). Until it exists, or where the class path differs (a test's own
  ``SPARK_CONF_DIR``, which is not empty), the JVM starts without it; ``-Xlog:cds=off``
  keeps the JVM from saying so on its stdout, which tests read.

An in-process session (tests/spark_local.py) lives for a pytest-xdist worker's whole run,
idle most of it: it took 0.32-0.37 CPU s a minute doing nothing (the console progress bar's
thread, which PySpark's spark-submit turns on, refreshing 5 times a second; the local
executor's heartbeat every 10 s; the hsperfdata sampling), 0.07-0.09 without them
(``spark.ui.showConsoleProgress=false``, ``spark.executor.heartbeatInterval=60s``; the lake
tests' session too).

The same value goes to ``$SPARK_LAUNCHER_OPTS``: each ``spark-submit`` first runs Spark's
launcher (a JVM that writes the driver's command line), whose class path is the home's
``jars/*`` too. ``spark_submit_opts(home)`` is the value for a Spark home; tests/lake.py's
``merge_env`` names Spark 3.5's for the processes it starts, tests/spark_cluster.py the
venv's for a standalone cluster's daemons (``SPARK_DAEMON_JAVA_OPTS``).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

__all__ = ["CODEGEN", "CODEGEN_ENV", "FAST_JVM", "NO_CODEGEN", "finish", "homes", "jvm_opts",
           "prepare", "spark_submit_opts", "with_codegen"]

FAST_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -XX:-UsePerfData"
# Spark SQL interprets expressions instead of generating and compiling Java for each query
# (Spark reads system properties named spark.* as settings; a test's own settings win).
NO_CODEGEN = "-Dspark.sql.codegen.wholeStage=false -Dspark.sql.codegen.factoryMode=NO_CODEGEN"
# The settings of a test that runs the code generation users run (Spark's defaults).
CODEGEN = {"spark.sql.codegen.wholeStage": "true", "spark.sql.codegen.factoryMode": "FALLBACK"}
CODEGEN_ENV = "DBLOG_TEST_SPARK_CODEGEN"
"""``1``: every Spark of the suite generates code, as users' Sparks do (no NO_CODEGEN)."""
# A missing or mismatched archive is a warning on the JVM's stdout: not in a test's output.
QUIET_CDS = "-Xlog:cds*=off"
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "dblog-tests" / "cds"
# Touches what most jobs load: SQL, code generation, a shuffle, Parquet both ways.
_JOB = """
import sys
from pyspark.sql import SparkSession
spark = SparkSession.builder.getOrCreate()
data = spark.range(2000).selectExpr("id", "id % 7 AS k", "CAST(id AS STRING) AS s")
data.write.mode("overwrite").parquet(sys.argv[1])
back = spark.read.parquet(sys.argv[1])
back.groupBy("k").count().orderBy("k").collect()
back.createOrReplaceTempView("t")
spark.sql("SELECT k, max(s) FROM t WHERE id > 5 GROUP BY k").collect()
spark.stop()
"""


def archive(home: Path) -> Path:
    """Where the archive of ``home``'s class path is kept: named by the JDK and the jars."""
    java = Path(shutil.which("java") or "java").resolve()
    jars = sorted((home / "jars").glob("*.jar"))
    key = hashlib.sha256("\n".join(
        [str(java), str(java.stat().st_mtime_ns) if java.exists() else "", str(home.resolve()),
         *(f"{j.name} {j.stat().st_size} {j.stat().st_mtime_ns}" for j in jars)]).encode())
    return CACHE / f"{_prefix(home)}-{key.hexdigest()[:16]}.jsa"


def _prefix(home: Path) -> str:
    """The archives of one Spark home, whichever its jars and JDK."""
    return "spark-" + hashlib.sha256(str(home.resolve()).encode()).hexdigest()[:12]


def spark_submit_opts(home: Path | None) -> str:
    """``SPARK_SUBMIT_OPTS`` for a Spark home: its archive once it exists; NO_CODEGEN unless
    ``$DBLOG_TEST_SPARK_CODEGEN`` is 1."""
    found = archive(home) if home is not None else None
    share = f" -XX:SharedArchiveFile={found}" if found is not None and found.is_file() else ""
    codegen = "" if os.environ.get(CODEGEN_ENV) == "1" else f" {NO_CODEGEN}"
    return f"{FAST_JVM}{codegen} {QUIET_CDS}{share}"


def jvm_opts(home: Path | None) -> str:
    """The JVM options of ``spark_submit_opts`` without Spark settings: for an executor
    (``spark.executor.defaultJavaOptions`` may not set Spark options; it runs what its
    driver's session settings say) or a standalone cluster's daemons."""
    return " ".join(spark_submit_opts(home).replace(NO_CODEGEN, "").split())


def with_codegen(env: dict[str, str]) -> dict[str, str]:
    """``env`` for Spark starts that generate code as users' do: without NO_CODEGEN."""
    found = dict(env)
    for name in ("SPARK_SUBMIT_OPTS", "SPARK_LAUNCHER_OPTS"):
        if name in found:
            found[name] = " ".join(found[name].replace(NO_CODEGEN, "").split())
    return found


def build(home: Path, python: Path) -> Path | None:
    """The archive of ``home`` (made by a tiny job when missing; one process at a time)."""
    target = archive(home)
    CACHE.mkdir(parents=True, exist_ok=True)
    with (CACHE / f"{target.stem}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if target.is_file():
            return target
        for stale in CACHE.glob(f"{_prefix(home)}-*.jsa"):
            stale.unlink()  # of jars or a JDK no longer installed
        with tempfile.TemporaryDirectory(prefix="dblog-cds-") as folder:
            job = Path(folder) / "job.py"
            job.write_text(_JOB)
            dumped = CACHE / f"{target.stem}.partial"  # a killed run's is overwritten
            dumped.unlink(missing_ok=True)
            env = {**os.environ, "SPARK_HOME": str(home.resolve()), "PYSPARK_PYTHON": str(python),
                   "PYSPARK_DRIVER_PYTHON": str(python), "SPARK_LOCAL_IP": "127.0.0.1",
                   "SPARK_SUBMIT_OPTS": f"{FAST_JVM} -XX:ArchiveClassesAtExit={dumped}"}
            env.pop("SPARK_CONF_DIR", None)
            env.pop("PYTHONPATH", None)
            done = subprocess.run(
                [str(home.resolve() / "bin" / "spark-submit"), "--master", "local[1]",
                 "--conf", "spark.ui.enabled=false", "--conf", "spark.sql.shuffle.partitions=1",
                 str(job), str(Path(folder) / "data")],
                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False,
                timeout=600)
            if done.returncode != 0 or not dumped.is_file():
                return None  # the suite runs without it, as it did
            shutil.move(dumped, target)
        return target


_builder: threading.Thread | None = None


def export(home: Path | None) -> None:
    """The options of ``home``'s JVMs in the environment that every Spark start inherits."""
    os.environ["SPARK_SUBMIT_OPTS"] = os.environ["SPARK_LAUNCHER_OPTS"] = spark_submit_opts(home)


def prepare(homes: dict[Path, Path], main: Path | None) -> None:
    """Set ``SPARK_SUBMIT_OPTS`` for the Spark home ``main`` (the venv's PySpark) now, and
    make the archives of ``homes`` (home -> its Python) in a thread: the JVMs that start
    before one exists start without it. The variable exists before the thread starts (it
    only changes value: no copy of the environment sees it change size)."""
    export(main)

    def make() -> None:
        for home, python in homes.items():
            made = build(home, python)
            if made is not None and home == main:
                export(main)

    global _builder
    _builder = threading.Thread(target=make, name="spark-cds", daemon=True)
    _builder.start()


def finish() -> None:
    """Wait for the archives being made (a JVM left running would outlive the session)."""
    if _builder is not None:
        _builder.join(600)


def homes() -> tuple[dict[Path, Path], Path | None]:
    """The suite's Spark homes (home -> the Python of its jobs), and the venv's."""
    import importlib.util

    from tests.lake import SPARK35, SPARK35_HOME

    found: dict[Path, Path] = {}
    spec = importlib.util.find_spec("pyspark")
    main = Path(spec.origin).parent if spec is not None and spec.origin else None
    if main is not None and (main / "bin" / "spark-submit").is_file():
        found[main] = Path(sys.executable)
    if (SPARK35_HOME / "bin" / "spark-submit").is_file():
        found[SPARK35_HOME] = SPARK35 / "bin" / "python"
    return found, main
