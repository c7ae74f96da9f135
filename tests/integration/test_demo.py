"""The quickstart (``scripts/quickstart.py``) runs end to end, as a user runs it.

It starts its own PostgreSQL, MariaDB, Redis, a worker per source and Airflow (scheduler, DAG
processor, triggerer, API server), dumps both sources under a live write load through the
``dblog_dump`` DAG, replays each landing zone against its source, merges with Spark through
``dblog_merge``, damages a target table of each source and repairs it through
``dblog_repair``, and runs ``dblog verify``. This test runs it once with small tables (with
the current interpreter, in a directory of the test) and reads its summary; then it checks
that nothing the quickstart started is still running.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from tests.spark_jvm import with_codegen

ROOT = Path(__file__).resolve().parents[2]
SOURCES = {"shop_pg": ("public.customers", "public.orders"),
           "shop_mariadb": ("shop.customers", "shop.orders")}
EXTRA_KEY = "90000001"


def processes_of(run_dir: Path) -> list[str]:
    """Processes whose environment names the run directory (a worker's DBLOG_CONFIG, an
    Airflow component's AIRFLOW_HOME, a task, a spark-submit)."""
    found = []
    for process in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if any(str(run_dir) in value for value in process.environ().values()):
                found.append(f"{process.pid} {' '.join(process.cmdline())[:200]}")
    return found


# The quickstart starts everything itself (in its own process): every server, Spark, Airflow.
pytestmark = [pytest.mark.pg, pytest.mark.mariadb, pytest.mark.redis, pytest.mark.spark,
              pytest.mark.airflow, pytest.mark.slow]


def run_quickstart(tmp_path: Path, *options: str) -> str:
    """The quickstart with small tables; its output, asserting that it exited 0."""
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "quickstart.py"), "--workdir", str(tmp_path),
         "--customers", "2000", "--orders", "10000", "--chunk-size", "500", *options],
        capture_output=True, text=True, timeout=1400, cwd=tmp_path, check=False,
        env=with_codegen(dict(os.environ)),  # Spark generates code, as users' does
    )
    stdout = result.stdout
    # What went wrong (with the steps or traceback just before it) goes last: a CI excerpt
    # shows the end of the message, and the quickstart prints the logs' tails after it.
    verdict = stdout[max(0, stdout.rfind("\nRESULT:") - 3000):].split("\n== stopping", 1)[0]
    assert result.returncode == 0, ((stdout + result.stderr)[-8000:]
                                    + "\n\n---- the quickstart's verdict ----\n" + verdict)
    return stdout


def assert_repaired(stdout: str, summary: str, sources: dict[str, tuple[str, str]]) -> None:
    """Each source's damaged customers: found by verify, repaired by dblog_repair, EQUAL."""
    for source, (customers, _) in sources.items():
        # The damage the quickstart did, as it said it: which keys it changed and deleted.
        damage = re.search(rf"^\s+{source}\s+{re.escape(customers)}: name of (\d+) changed, "
                           rf"(\d+) deleted, {EXTRA_KEY} added", stdout, re.M)
        assert damage, stdout
        changed, deleted = damage.groups()
        assert re.search(rf"^\s+{source}\s+{re.escape(customers)}: changed {changed}, "
                         rf"missing {deleted}, extra {EXTRA_KEY}: EQUAL after the repair$",
                         summary, re.M), summary
        repair = re.search(rf"^\s+dblog_repair\s+quickstart-repair-{source}\s+success\s.*"
                           rf"{re.escape(customers)}: dump-2 dumped keys ([\d, ]+); removed "
                           rf"extra {EXTRA_KEY}; verify equal$", summary, re.M)
        assert repair, summary
        assert sorted(repair.group(1).split(", ")) == sorted([changed, deleted, EXTRA_KEY])


@pytest.mark.timeout(1500)
def test_quickstart_dumps_merges_and_repairs_through_airflow(tmp_path: Path) -> None:
    stdout = run_quickstart(tmp_path)
    assert re.search(r"^RESULT: converged: every DAG run succeeded", stdout, re.M), stdout[-6000:]
    summary = stdout.split("\n== summary\n", 1)[1]

    # Every DAG run, triggered and followed through the REST API, succeeded.
    for source in SOURCES:
        assert re.search(rf"^\s+dblog_dump\s+quickstart-dump-{source}\s+success\s.*dump-1: "
                         r"2 tables, [\d,]+ rows in \d+ windows", summary, re.M), summary
    assert re.search(r"^\s+dblog_merge\s+\S+\s+success\s.*sources success, "
                     r"merge\[dblog_shop_pg\] success, merge\[dblog_shop_mariadb\] success$",
                     summary, re.M), summary
    assert_repaired(stdout, summary, SOURCES)

    # Each landing zone replays to its source tables, and every target table verifies EQUAL.
    for source, tables in SOURCES.items():
        for table in tables:
            line = re.search(rf"^\s+{source}\s+{re.escape(table)}\s+([\d,]+)\s+([\d,]+)\s+"
                             r"[\d,]+\s+[\d,]+\s+converged\s+EQUAL$", summary, re.M)
            assert line, summary
            assert line.group(1) == line.group(2)  # source rows, rows replayed
            assert re.search(rf"^\s+{source}\s+{re.escape(table)} -> shop_replica\.\S+: "
                             r"[\d,]+ rows, \d+ ranges: EQUAL$",
                             stdout.split("== verifying every target table", 1)[1], re.M)
        assert list((tmp_path / "landing" / source).glob("*/segment-*.parquet"))
    assert "no time travel" in summary

    # The logs of every component are in the run directory; nothing is left running.
    logs = {p.name for p in (tmp_path / "logs").glob("*.log")}
    assert {"worker-shop_pg.log", "worker-shop_mariadb.log", "airflow-scheduler.log",
            "airflow-triggerer.log", "airflow-dag-processor.log", "airflow-api-server.log",
            "postgresql.log", "mariadb.log", "redis.log"} <= logs, logs
    assert re.search(r"^   stopped in ", stdout, re.M)
    assert processes_of(tmp_path) == []


@pytest.mark.s3
@pytest.mark.timeout(1500)
def test_quickstart_on_the_object_store_into_iceberg(tmp_path: Path) -> None:
    """``--lake``, with the PostgreSQL source alone: the landing zone on SeaweedFS, the merge
    into Iceberg tables by Spark 3.5 from Airflow, the damage done through pyiceberg and
    repaired by dblog_repair, verify EQUAL."""
    stdout = run_quickstart(tmp_path, "--lake", "--source", "postgresql", "--customers", "500",
                            "--orders", "2000", "--chunk-size", "200", "--warmup-s", "1")
    assert re.search(r"^RESULT: converged: every DAG run succeeded", stdout, re.M), stdout[-6000:]
    summary = stdout.split("\n== summary\n", 1)[1]
    assert re.search(r"^\s+dblog_dump\s+quickstart-dump-shop_pg\s+success\s.*dump-1: "
                     r"2 tables, [\d,]+ rows in \d+ windows", summary, re.M), summary
    assert re.search(r"^\s+dblog_merge\s+\S+\s+success\s.*sources success, "
                     r"merge\[dblog_shop_pg\] success$", summary, re.M), summary
    assert "damaging the customers of each Iceberg table" in stdout
    sources = {"shop_pg": SOURCES["shop_pg"]}
    assert_repaired(stdout, summary, sources)
    for table in SOURCES["shop_pg"]:
        line = re.search(rf"^\s+shop_pg\s+{re.escape(table)}\s+([\d,]+)\s+([\d,]+)\s+"
                         r"[\d,]+\s+[\d,]+\s+converged\s+EQUAL$", summary, re.M)
        assert line and line.group(1) == line.group(2), summary
        assert re.search(rf"^\s+shop_pg\s+{re.escape(table)} -> dblog_lake\.{re.escape(table)}"
                         r": [\d,]+ rows, \d+ ranges: EQUAL$",
                         stdout.split("== verifying every target table", 1)[1], re.M), stdout
    # The landing zone was on the object store, the tables in the warehouse's Iceberg layout.
    assert re.search(r"^   landing zone   s3://dblog/landing$", summary, re.M), summary
    assert not (tmp_path / "landing").exists()
    assert list((tmp_path / "warehouse" / "public" / "customers" / "metadata").glob(
        "*.metadata.json"))
    assert "seaweedfs.log" in {p.name for p in (tmp_path / "logs").glob("*.log")}
    assert processes_of(tmp_path) == []
