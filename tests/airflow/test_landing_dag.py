"""The ``dblog_landing`` DAG end to end with ``dag.test()``: a real ``dblog run`` lands a
PostgreSQL source's changes in many small segments, a real Spark merge (the session's
local Spark) records how far the PostgreSQL target merged them, and the DAG's runs, as
its form would start them:

- a dry run lists what compaction and retention would do, and changes nothing;
- ``maintain`` compacts every table and removes what the target merged; a merge after it
  (its merge log now inside the compacted run) and ``dblog verify`` find nothing lost;
- a table whose segments have a hole fails the run, naming it, while the other table is
  done all the same.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psycopg
import pytest
from airflow.models.dagrun import DagRun

from dblog_worker import config as config_module
from dblog_worker.landing.parquet import LandingZone
from dblog_worker.target.merge import merge_source
from dblog_worker.verify import verify
from tests.airflow.conftest import DblogConnection, target_sections
from tests.airflow.dag_files import load_dags
from tests.integration.harness import WorkerProcess, cli, dump, wait_for, wait_request, write_config

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

SOURCE = "src"
ITEMS, NOTES = "public.items", "public.notes"


@pytest.fixture
def worker(pg_dsn: str, pg_target: str, redis_url: str, tmp_path: Path, airflow_db: Path,
           dblog_connection: DblogConnection) -> Iterator[tuple[Path, WorkerProcess]]:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        for table in (ITEMS, NOTES):
            conn.execute(f"CREATE TABLE {table} (id bigint PRIMARY KEY, v integer NOT NULL)")
            conn.execute(f"ALTER TABLE {table} REPLICA IDENTITY FULL")
            conn.execute(f"INSERT INTO {table} SELECT i, 0 FROM generate_series(1, 60) i")
    landing = (f'path = "{tmp_path / "landing"}"\n'
               "compaction = { min_age_s = 0, grace_s = 0 }\nretention = { keep_h = 0 }")
    config = write_config(tmp_path, pg_dsn, redis_url, [ITEMS, NOTES], name=SOURCE,
                          landing=landing, flush_interval_s=0.02,
                          extra=target_sections(pg_target))
    dblog_connection(redis_url, SOURCE, config)
    process = WorkerProcess(config, tmp_path / "worker.log").start()
    try:
        wait_for(lambda: " streaming " in process.log(), 30, "the worker to stream",
                 lambda: process.log()[-3000:])
        yield config, process
    finally:
        process.stop()


def states(run: DagRun) -> dict[str, str | None]:
    return {ti.task_id: ti.state for ti in run.get_task_instances()}


def report_of(run: DagRun) -> dict[str, Any]:
    [ti] = run.get_task_instances()
    document: dict[str, Any] = ti.xcom_pull(task_ids="maintain")
    return document


@pytest.mark.timeout(600)
def test_the_landing_dag(worker: tuple[Path, WorkerProcess], pg_dsn: str, redis_url: str,
                         spark: SparkSession, log_text: Callable[[], str]) -> None:
    config_path, process = worker
    request_id = dump(config_path, "--all", "--chunk-size", "6", "--delay-ms", "60")
    wait_request(redis_url, SOURCE, request_id, ["completed"], 120, process)
    config = config_module.load(config_path)
    zone = LandingZone(config.landing_path, SOURCE)  # type: ignore[arg-type]
    merged = merge_source(config, _stager(spark))
    assert merged.ok, merged
    merged_up_to = {t: zone.segments(t)[-1].seq for t in (ITEMS, NOTES)}
    assert min(merged_up_to.values()) >= 5
    # segments not merged yet: two rounds of updates, each waited for, so that two segments
    # land per table however the worker batches a round
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        for round_keys in (range(1, 40, 3), range(2, 40, 3)):
            seqs = {t: zone.segments(t)[-1].seq for t in (ITEMS, NOTES)}
            for key in round_keys:
                conn.execute(f"UPDATE {ITEMS} SET v = v + 1 WHERE id = {key}")
                conn.execute(f"UPDATE {NOTES} SET v = v + 1 WHERE id = {key}")
            for table in (ITEMS, NOTES):
                wait_for(lambda t=table, n=seqs[table]: zone.segments(t)[-1].seq > n, 60,  # type: ignore[misc]
                         f"segments of {table} after the merge", process.log)

    dags = load_dags({"DBLOG_CONFIG": str(config_path)})
    landing = dags["dblog_landing"]
    before = {t: sorted(s.location for s in zone.files(t).segments.values())
              for t in (ITEMS, NOTES)}
    run = landing.test(run_conf={"action": "maintain", "tables": [], "dry_run": True})
    assert (run.state, states(run)) == ("success", {"maintain": "success"}), log_text()[-5000:]
    plan = report_of(run)
    assert plan["dry_run"] and plan["ok"]
    for entry in plan["tables"]:
        table = entry["table"]
        assert entry["merged_segment"] == merged_up_to[table]
        assert [int(r["segments"].split("-")[1]) for r in entry["remove_merged"]] == list(
            range(1, merged_up_to[table] + 1)), entry
        assert entry["compact"][0]["segments"].startswith("1-")
    assert {t: sorted(s.location for s in zone.files(t).segments.values())
            for t in (ITEMS, NOTES)} == before

    run = landing.test(run_conf={"action": "maintain", "tables": [], "dry_run": False})
    assert (run.state, states(run)) == ("success", {"maintain": "success"}), log_text()[-5000:]
    done = report_of(run)
    for entry in done["tables"]:
        table = entry["table"]
        assert entry["compacted_runs"] == 1 and entry["removed_files"] == merged_up_to[table]
        [compacted] = zone.segments(table)
        assert compacted.lo == 1 and compacted.seq > merged_up_to[table]  # it straddles
    after = merge_source(config, _stager(spark))
    assert after.ok and all(t.events > 0 for t in after.tables), after
    assert verify(config, [ITEMS, NOTES]).equal

    # A hole in one table: its run fails and names it; the other table is done all the same.
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        for _ in range(3):
            for table in (ITEMS, NOTES):
                last = zone.segments(table)[-1].seq
                conn.execute(f"UPDATE {table} SET v = v + 1 WHERE id = 2")
                wait_for(lambda t=table, n=last: zone.segments(t)[-1].seq > n,  # type: ignore[misc]
                         30, f"a segment of {table}", process.log)
    lost = zone.segments(NOTES)[-2]
    os.unlink(lost.location)
    run = landing.test(run_conf={"action": "compact", "tables": [], "dry_run": False})
    logged = log_text()
    assert (run.state, states(run)) == ("failed", {"maintain": "failed"}), logged[-5000:]
    assert f"landing maintenance failed for [{{'table': '{NOTES}', 'error':" in logged
    assert f"segments {lost.seq}..{lost.seq} are missing" in logged
    assert len(zone.segments(ITEMS)) == 1  # compacted all the same
    assert cli(config_path, "landing", "status", check=False).returncode == 1


def _stager(spark: SparkSession) -> Any:
    from spark.merge import spark_stager

    return spark_stager(spark)
