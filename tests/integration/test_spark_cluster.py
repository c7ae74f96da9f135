"""``dblog merge`` on a Spark standalone cluster (a master and a worker on loopback,
:mod:`tests.spark_cluster`), and what its executors need: nothing of dblog.

A real worker dumps and streams a PostgreSQL table into the landing zone; ``dblog merge
--master spark://…`` submits the job to the cluster; ``dblog verify`` finds the target equal
to the source. The executors run in the worker's bare environment (no ``PYTHONPATH``, no
virtualenv) and the Python they would start is a trap: a script that records being run and
fails. The merge succeeds and the trap never ran, so no Python ran on an executor; the
control job at the end (a Python lambda on the same cluster) shows the trap does fire.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from dblog_worker.landing.parquet import LandingZone, read_events
from tests.integration.harness import ROOT, Workers, cli, wait_for, write_config
from tests.services import HOST, PostgresServer
from tests.spark_cluster import SPARK_HOME, SparkStandalone
from tests.spark_jvm import jvm_opts
from tests.spark_local import jdbc_jars

TABLE = "public.items"
ROWS = 300


@pytest.fixture(scope="module")
def cluster() -> Iterator[SparkStandalone]:
    with_cluster = SparkStandalone(cores=2, memory="1g").start()
    try:
        yield with_cluster
    finally:
        with_cluster.stop()


@pytest.fixture
def pg_target(postgres_server: PostgresServer) -> Iterator[str]:
    name = f"t_{uuid.uuid4().hex[:16]}"
    yield postgres_server.create_database(name)
    postgres_server.drop_database(name)


def python_trap(directory: Path) -> tuple[Path, Path]:
    """An executable that appends its arguments to a marker file and fails."""
    marker = directory / "python-ran-on-an-executor"
    trap = directory / "python-trap"
    trap.write_text(f'#!/bin/sh\necho "$0 $*" >> {marker}\nexit 1\n')
    trap.chmod(0o700)
    return trap, marker


def test_merge_on_a_standalone_cluster_needs_nothing_of_dblog_on_executors(
        cluster: SparkStandalone, pg_dsn: str, pg_target: str, redis_url: str, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE public.items (id int PRIMARY KEY, note text, n bigint)")
        conn.execute("ALTER TABLE public.items REPLICA IDENTITY FULL")
        conn.execute("INSERT INTO public.items SELECT g, 'row ' || g, g * 7"
                     " FROM generate_series(1, %s) g", (ROWS,))
    extra = f"""
[target]
kind = "postgresql"
dsn = {json.dumps(pg_target)}

[merge]
master = {json.dumps(cluster.master_url)}
jars = {json.dumps([str(j) for j in jdbc_jars()])}

[merge.spark_conf]
"spark.ui.enabled" = "false"
"spark.sql.shuffle.partitions" = "2"
"spark.executor.memory" = "512m"
"spark.driver.host" = "{HOST}"
"spark.driver.bindAddress" = "{HOST}"
"spark.executor.defaultJavaOptions" = "{jvm_opts(SPARK_HOME)}"
"""
    config = write_config(tmp_path, pg_dsn, redis_url, [TABLE], extra=extra)
    with Workers(tmp_path / "worker.log") as workers:
        worker = workers.start(config)
        result = cli(config, "dump", "--all", "--wait", "--chunk-size", "100", timeout=90)
        assert "completed" in result.stdout, result.stdout
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute("UPDATE public.items SET note = 'changed' WHERE id <= 20")
            conn.execute("DELETE FROM public.items WHERE id > 290")
        zone = LandingZone(tmp_path / "landing", "src")
        wait_for(lambda: sum(e["op"] == "d" for e in read_events(zone, TABLE)) == 10, 60,
                 "the deletes to land", lambda: worker.log()[-5000:])
        assert worker.stop() == 0, worker.log()[-5000:]

    trap, marker = python_trap(tmp_path)
    # The driver runs dblog's Python; an executor would start PYSPARK_PYTHON: the trap.
    monkeypatch.setenv("PYSPARK_DRIVER_PYTHON", sys.executable)
    monkeypatch.setenv("PYSPARK_PYTHON", str(trap))
    monkeypatch.setenv("SPARK_LOCAL_IP", HOST)
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # where --print-command leaves spark_conf
    printed = cli(config, "merge", "--print-command")
    assert f"--master {cluster.master_url} " in printed.stdout, printed.stdout
    merged = cli(config, "merge", "--json", timeout=300)
    report = json.loads(merged.stdout[merged.stdout.index("{"):])
    assert report["ok"] and report["tables"][0]["upserted"] == ROWS - 10, report
    assert not marker.exists(), marker.read_text()

    (app,) = [a for a in cluster.state()["completedapps"] if a["name"] == "dblog-merge-src"]
    executors = sorted(cluster.work_dir.glob(f"{app['id']}/*"))
    assert executors, f"no executor of {app['id']} ran on the worker"
    shipped = {p.name for d in executors for p in d.iterdir()} - {"stdout", "stderr"}
    # The executors fetched the --jars and nothing else: not the job's file, no Python package.
    assert shipped == {j.name for j in jdbc_jars()}, shipped
    launch = next(line for line in (executors[0] / "stderr").read_text().splitlines()
                  if "Spark Executor Command" in line)
    # Its classpath is Spark's own (conf/, jars/ of SPARK_HOME); nothing else of the checkout.
    assert str(ROOT) not in launch.replace(str(SPARK_HOME), ""), launch

    verified = cli(config, "verify", "--json", timeout=120)
    (table,) = json.loads(verified.stdout)["tables"]
    assert table["equal"] and table["source_rows"] == table["target_rows"] == ROWS - 10, table

    control = tmp_path / "control.py"
    control.write_text("from pyspark.sql import SparkSession\n"
                       "spark = SparkSession.builder.getOrCreate()\n"
                       "print(spark.sparkContext.parallelize([1, 2]).map(lambda x: x).sum())\n")
    ran = subprocess.run(
        [str(SPARK_HOME / "bin" / "spark-submit"), "--master", cluster.master_url,
         "--conf", "spark.executor.memory=512m", "--conf", f"spark.driver.host={HOST}",
         "--conf", f"spark.driver.bindAddress={HOST}", "--conf", "spark.task.maxFailures=1",
         "--conf", f"spark.executor.defaultJavaOptions={jvm_opts(SPARK_HOME)}",
         str(control)],
        capture_output=True, text=True, timeout=120, env={**os.environ}, check=False)
    assert ran.returncode != 0, ran.stdout
    assert marker.exists(), "a Python lambda on the same cluster should have run the trap"
