"""Lake targets in the tests: the merge job on .tools/spark35 (PySpark 3.5.9 and dblog, as
scripts/install sets it up: Iceberg publishes no runtime for Spark 4.2) with the Iceberg and
Delta jars of .tools/jars, and the configuration of a landing zone merged into one."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import psycopg

from tests.services import HOST
from tests.spark_jvm import FAST_JVM, spark_submit_opts

ROOT = Path(__file__).resolve().parents[1]
SPARK35 = ROOT / ".tools" / "spark35"
SPARK35_HOME = next((SPARK35 / "lib").glob("python3*/site-packages/pyspark"),
                    SPARK35 / "pyspark")
"""Spark 3.5's home: what its spark-submit finds by itself only when the Python it asks is
Spark 3.5's (a job's local master sets ``PYSPARK_PYTHON`` to the submitter's Python)."""
JARS = ROOT / ".tools" / "jars"
LAKE_JARS = {
    "iceberg": [JARS / "iceberg-spark-runtime-3.5_2.12-1.12.0.jar"],
    "delta": [JARS / "delta-spark_2.12-3.3.2.jar", JARS / "delta-storage-3.3.2.jar"],
}
# S3A of Spark 3.5's Hadoop (3.3.4) with the AWS SDK v1 modules it calls, for an s3://
# landing zone merged by Spark 3.5 (merge.s3a_jars; the default is Spark 4.2's)
S3A_SPARK35_JARS = [JARS / "hadoop-aws-3.3.4.jar", *(
    JARS / f"{name}-1.12.262.jar" for name in (
        "aws-java-sdk-core", "aws-java-sdk-s3", "aws-java-sdk-sts", "aws-java-sdk-kms",
        "aws-java-sdk-dynamodb", "jmespath-java"))]


def catalog_database(pg_dsn: str) -> tuple[str, str]:
    """The JDBC URL and user of the test's PostgreSQL database, as an Iceberg catalog."""
    params = psycopg.conninfo.conninfo_to_dict(pg_dsn)
    return (f"jdbc:postgresql://{params['host']}:{params['port']}/{params['dbname']}",
            str(params["user"]))


def lake_sections(tmp: Path, kind: str, pg_dsn: str, *,
                  renames: dict[str, str] | None = None,
                  partition_by: dict[str, list[str]] | None = None,
                  batch_max_events: int = 5_000_000, warehouse: Path | str | None = None,
                  spark_conf: dict[str, str] | None = None, catalog: str = "jdbc",
                  merge_extra: str = "", target_s3: dict[str, object] | None = None) -> str:
    """The ``[target]`` and ``[merge]`` sections of a ``kind`` lake target (an Iceberg
    target's JDBC catalog in the database of ``pg_dsn``, or its ``hadoop`` catalog: the
    warehouse alone); ``spark_conf``: more of ``[merge.spark_conf]``; ``target_s3``: the
    options of ``[target.s3]`` (a warehouse on S3)."""
    target: dict[str, object] = {"kind": kind,
                                 "warehouse": str(warehouse or tmp / "warehouse")}
    if target_s3 is not None:
        target["s3"] = target_s3
    if kind == "iceberg" and catalog == "hadoop":
        target["catalog"] = "hadoop"
    elif kind == "iceberg":
        uri, user = catalog_database(pg_dsn)
        target.update(catalog="jdbc", catalog_uri=uri, catalog_user=user)
    if renames:
        target["tables"] = renames
    if partition_by:
        target["partition_by"] = partition_by
    jars = ["/usr/share/java/postgresql.jar", *map(str, LAKE_JARS[kind])]
    return f"""
[target]
{chr(10).join(f"{k} = {toml_value(v)}" for k, v in target.items())}

[merge]
master = "local[2]"
jars = {json.dumps(jars)}
batch_max_events = {batch_max_events}
parallel_tables = 2
{merge_extra}
[merge.spark_conf]
"spark.ui.enabled" = "false"
"spark.sql.shuffle.partitions" = "4"
"spark.databricks.delta.snapshotPartitions" = "2"
"spark.driver.extraJavaOptions" = "{FAST_JVM}"
{chr(10).join(f"{json.dumps(k)} = {json.dumps(v)}" for k, v in (spark_conf or {}).items())}
"""


def lake_config(tmp: Path, kind: str, landing: Path | str, source: str, tables: list[str],
                pg_dsn: str, *, s3_endpoint: str = "", source_dsn: str = "host=127.0.0.1",
                **options: Any) -> Path:
    """A configuration file of ``source`` merged into a ``kind`` lake target; with
    ``s3_endpoint``, ``landing`` is an s3:// URL on that store; with ``target_s3``, the
    warehouse is on S3; either is read through Spark 3.5's S3A."""
    s3 = ""
    if s3_endpoint:
        s3 = f'\n[landing.s3]\nendpoint = "{s3_endpoint}"\npath_style = true\n'
    if s3_endpoint or options.get("target_s3"):
        jars = json.dumps([str(j) for j in S3A_SPARK35_JARS])
        options["merge_extra"] = f"s3a_jars = {jars}\n"
    text = f"""
[source]
name = "{source}"
dsn = {json.dumps(source_dsn)}
tables = {json.dumps(tables)}

[redis]
url = "redis://127.0.0.1:1"

[landing]
path = {json.dumps(str(landing))}
{s3}{lake_sections(tmp, kind, pg_dsn, **options)}"""
    path = tmp / f"{source}-{kind}.toml"
    path.write_text(text)
    return path


def toml_value(value: object) -> str:
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{json.dumps(k)} = {toml_value(v)}"
                                for k, v in value.items()) + " }"
    return json.dumps(value)


SPARK35_PYTHON = {"spark.pyspark.python": str(SPARK35 / "bin" / "python"),
                  "spark.pyspark.driver.python": str(SPARK35 / "bin" / "python")}
"""The job's Python on Spark 3.5 when spark-submit is called by a process of the main
environment (Airflow's), which sets ``PYSPARK_PYTHON`` to its own (PySpark 4.2)."""


def merge_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{SPARK35 / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["SPARK_LOCAL_IP"] = HOST
    env.pop("SPARK_HOME", None)
    env.pop("PYTHONPATH", None)
    # Spark 3.5's archive (tests/spark_jvm.py)
    env["SPARK_SUBMIT_OPTS"] = env["SPARK_LAUNCHER_OPTS"] = spark_submit_opts(SPARK35_HOME)
    return env


def merge(config: Path, *tables: str, timeout: float = 240) -> dict[str, object]:
    """``dblog merge --json`` with Spark 3.5; its report (asserting the exit status 0-1)."""
    command = [str(SPARK35 / "bin" / "dblog"), "merge", "--config", str(config), "--json",
               *(f"--table={t}" for t in tables)]
    done = subprocess.run(command, env=merge_env(), capture_output=True, text=True,
                          timeout=timeout, check=False, cwd=ROOT)
    assert done.returncode in (0, 1), done.stdout[-3000:] + done.stderr[-5000:]
    assert "{" in done.stdout, done.stdout[-3000:] + done.stderr[-8000:]
    start = done.stdout.index("{")
    report: dict[str, object] = json.loads(done.stdout[start:])
    return report


class MergeProcess:
    """``dblog merge`` with Spark 3.5 in a process group of its own, to be killed."""

    def __init__(self, config: Path, log: Path) -> None:
        self.log_path = log
        with log.open("ab") as out:
            self.proc = subprocess.Popen(
                [str(SPARK35 / "bin" / "dblog"), "merge", "--config", str(config), "--json"],
                stdout=out, stderr=subprocess.STDOUT, env=merge_env(), cwd=ROOT,
                start_new_session=True)

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


class LakeSession:
    """One Spark 3.5 session of ``tests/lake_session.py`` that merges configuration after
    configuration (the JVM starts once per test module, not once per merge)."""

    def __init__(self, log: Path, conf: dict[str, str] | None = None) -> None:
        """``conf``: Spark settings over the session's (which suit a test's few rows)."""
        jars = ",".join(["/usr/share/java/postgresql.jar",
                         *(str(j) for js in LAKE_JARS.values() for j in js)])
        extra = {"spark.driver.extraJavaOptions": FAST_JVM, **(conf or {})}
        self.log_path = log
        self._log = log.open("ab")
        self.proc = subprocess.Popen(
            [str(SPARK35 / "bin" / "python"), str(ROOT / "tests" / "lake_session.py"), jars,
             json.dumps(extra)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=self._log, env=merge_env(), cwd=ROOT, text=True)
        self._answer()  # {"ready": version}

    def _answer(self) -> dict[str, object]:
        assert self.proc.stdout is not None
        while True:
            line = self.proc.stdout.readline()
            if not line:
                raise AssertionError("the Spark 3.5 session ended:\n" + self.log()[-8000:])
            if line.startswith("{"):
                found: dict[str, object] = json.loads(line)
                return found

    def run(self, config: Path, *tables: str) -> dict[str, object]:
        """The merge of ``config`` in this session: ``status`` (the job's exit status) and
        ``report`` or ``error``."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"config": str(config), "tables": list(tables)}) + "\n")
        self.proc.stdin.flush()
        return self._answer()

    def merge(self, config: Path, *tables: str) -> dict[str, object]:
        """The report of a merge that ran (exit status 0 or 1)."""
        answer = self.run(config, *tables)
        assert answer["status"] in (0, 1), str(answer.get("error")) + self.log()[-3000:]
        report = answer["report"]
        assert isinstance(report, dict)
        return report

    def sql(self, config: Path, table: str, *statements: str) -> list[list[str]]:
        """Run Spark SQL in the target's session of ``config``, ``{t}`` naming ``table``;
        the last statement's rows as texts."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"config": str(config), "table": table,
                                          "sql": list(statements)}) + "\n")
        self.proc.stdin.flush()
        answer = self._answer()
        assert answer["status"] == 0, answer.get("error")
        rows = answer["rows"]
        assert isinstance(rows, list)
        return rows

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def close(self) -> None:
        if self.proc.stdin is not None:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(30)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self._log.close()
