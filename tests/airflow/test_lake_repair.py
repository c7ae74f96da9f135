"""The DAGs on a lake target, end to end with ``dag.test()``: a real ``dblog run`` against a
throwaway PostgreSQL source and Redis, an Iceberg target (a JDBC catalog on PostgreSQL),
and the merge as a real SparkSubmitOperator of Spark 3.5 (``.tools/spark35``'s
spark-submit, the Iceberg jar: Iceberg has no Spark 4.2 runtime).

``dblog_dump`` dumps the table, merges it into Iceberg (an asset event for the lake table)
and verifies it equal; then the lake table is damaged through pyiceberg (a row deleted, a
row changed, an extra row appended) and ``dblog_repair`` compares, dumps exactly the keys
that differ, merges, removes the extra row (position-guarded, through pyiceberg) and
verifies the table equal again.
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pyarrow as pa
import pytest

from dblog_worker import config as config_module
from dblog_worker.config_lake import LakeConfig
from dblog_worker.lake.read import open_table, read_table
from dblog_worker.verify.command import verify
from tests.airflow.conftest import DblogConnection
from tests.airflow.dag_files import load_dags
from tests.airflow.test_dags_e2e import asset_events, states, xcom
from tests.integration.harness import WorkerProcess, wait_for, write_config
from tests.lake import SPARK35, SPARK35_HOME, SPARK35_PYTHON, lake_sections
from tests.spark_jvm import spark_submit_opts

SOURCE = "src"
TABLE = "public.items"
ROWS = 120

pytestmark = [pytest.mark.spark]


@pytest.fixture
def lake_capture(pg_dsn: str, redis_url: str, tmp_path: Path, airflow_db: Path,
                 dblog_connection: DblogConnection, spark_connection: str,
                 monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Path, dict[str, Any]]]:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {TABLE} (id bigint PRIMARY KEY, name text NOT NULL,"
                     " qty integer)")
        conn.execute(f"ALTER TABLE {TABLE} REPLICA IDENTITY FULL")
        conn.execute(f"INSERT INTO {TABLE} SELECT i, 'item ' || i, i %% 7"
                     " FROM generate_series(1, %s) AS i", (ROWS,))
    extra = lake_sections(tmp_path, "iceberg", pg_dsn, spark_conf=SPARK35_PYTHON)
    config = write_config(tmp_path, pg_dsn, redis_url, [TABLE], name=SOURCE, extra=extra)
    dblog_connection(redis_url, SOURCE, config)
    path = os.pathsep.join((str(SPARK35 / "bin"), str(Path(sys.executable).parent),
                            os.environ["PATH"]))
    monkeypatch.setenv("PATH", path)  # Spark 3.5's spark-submit, found first
    monkeypatch.setenv("SPARK_HOME", str(SPARK35_HOME))  # and its home, whatever Python
    for name in ("SPARK_SUBMIT_OPTS", "SPARK_LAUNCHER_OPTS"):  # its JVMs' archive
        monkeypatch.setenv(name, spark_submit_opts(SPARK35_HOME))
    monkeypatch.setenv("DBLOG_POLL_INTERVAL_S", "1")
    dags = load_dags({"DBLOG_CONFIG": str(config)})
    worker = WorkerProcess(config, tmp_path / "worker.log").start()
    try:
        wait_for(lambda: " streaming " in worker.log(), 30, "the worker to stream",
                 lambda: worker.log()[-3000:])
        yield config, dags
    finally:
        worker.stop()


def lake_of(config: Path) -> LakeConfig:
    lake = config_module.load(config).require_target().lake
    assert lake is not None
    return lake


def lake_rows(config: Path) -> dict[int, tuple[str, int]]:
    found = read_table(lake_of(config), TABLE)
    assert found is not None
    return {r["id"]: (r["name"], r["qty"]) for r in found.to_pylist()}


@pytest.mark.slow  # two spark-submits of Spark 3.5 with the Iceberg jar
@pytest.mark.timeout(900)
def test_repair_of_an_iceberg_table(lake_capture: tuple[Path, dict[str, Any]],
                                    log_text: Any) -> None:
    config, dags = lake_capture
    run = dags["dblog_dump"].test(run_conf={"scope": "tables", "tables": [TABLE],
                                            "chunk_size": 50, "verify": True})
    logged = log_text()
    assert (run.state, states(run)) == ("success", {
        "check": "success", "submit": "success", "wait": "success", "should_merge": "success",
        "merge": "success", "verify": "success"}), logged[-6000:]
    assert list(asset_events(run)) == [f"dblog://{SOURCE}/{TABLE}"]
    assert asset_events(run)[f"dblog://{SOURCE}/{TABLE}"]["upserted"] == ROWS
    assert len(lake_rows(config)) == ROWS

    # damaged through pyiceberg: 7 deleted, 5 changed, 90000 appended (no position)
    table = open_table(lake_of(config), TABLE)
    assert table is not None
    with warnings.catch_warnings():  # pyiceberg rewrites the files of a merge-on-read table
        warnings.filterwarnings("ignore", "Merge on read is not yet supported", UserWarning)
        table.handle.delete("id = 7")
        changed = table.handle.refresh().scan(row_filter="id = 5").to_arrow()
        changed = changed.set_column(changed.schema.get_field_index("name"), "name",
                                     pa.array(["damaged"]))
        table.handle.refresh().overwrite(changed, overwrite_filter="id = 5")
    extra = pa.table({"id": [90000], "name": ["not in the source"], "qty": [1],
                      "_dblog_position": pa.array([None], pa.string())},
                     schema=table.handle.schema().as_arrow())
    table.handle.refresh().append(extra)
    assert not verify(config_module.load(config), [TABLE]).equal

    run = dags["dblog_repair"].test(run_conf={"table": TABLE, "chunk_size": 50})
    logged = log_text()
    assert (run.state, states(run)) == ("success", {
        "compare": "success", "submit": "success", "wait": "success", "merge": "success",
        "remove_extra": "success", "verify": "success"}), logged[-6000:]
    assert sorted(xcom(run, "compare")["extra"]) == [90000]
    assert xcom(run, "remove_extra") == {"removed": [[90000]], "kept": []}
    assert list(asset_events(run)) == [f"dblog://{SOURCE}/{TABLE}"]
    rows = lake_rows(config)
    assert (len(rows), rows[5], rows[7], 90000 in rows) == (
        ROWS, ("item 5", 5), ("item 7", 0), False)
    assert verify(config_module.load(config), [TABLE]).equal
