"""The DAGs of dags/ end to end, with ``dag.test()``: a real ``dblog run`` against a
throwaway PostgreSQL source and Redis, a PostgreSQL target database, and the merge as a
real SparkSubmitOperator on ``local[2]`` (the venv's spark-submit).

- ``dblog_dump`` of one table, filtered (conditions and a key range): only those rows reach
  the target; then ``dblog_backfill`` as a scheduled run would, its filter a template of the
  run's interval (rendered by *check*; every row meets it): submit, the deferrable sensor
  (``dag.test()`` runs its trigger in-process), the Spark merge, verify; then the target is
  damaged on purpose (rows changed, one deleted, an extra one inserted) while the source
  changes too, and a filtered ``dblog_repair`` re-dumps a slice of the table (a key range),
  merges, removes the extra row, and its verify fails on the changed row outside the
  slice, saying the dump was filtered; ``dblog_repair`` without a filter dumps exactly that
  key, and ``dblog verify`` then finds the target equal to the source. A third
  ``dblog_repair`` finds nothing to do and skips the rest.
- a dump of a table the worker does not capture: the run fails with the worker's message
  in the wait task's log (a connection without the worker's configuration, so the worker
  itself refuses the table), or the submit's refusal (with the configuration).

``dag.test()`` returns the DagRun and does not raise when the run failed: the tests check
the run's state and every task instance's.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest
from airflow.models.dagrun import DagRun
from airflow.sdk import DAG
from airflow.serialization.definitions.operatorlink import XComOperatorLink
from airflow.serialization.serialized_objects import OperatorSerialization

from dblog_worker import config as config_module
from dblog_worker.control.store import StateStore
from dblog_worker.verify.command import verify
from tests.airflow.conftest import DblogConnection, target_sections
from tests.airflow.dag_files import load_dags
from tests.integration.harness import WorkerProcess, replay, wait_for, write_config

SOURCE = "src"
TABLE = "public.items"
QUIET = "public.quiet"  # captured, never changed
ROWS = 300


@dataclass
class Capture:
    """A running worker over ``public.items``, its configuration and the target's DSN."""

    config: Path
    source_dsn: str
    target_dsn: str
    redis_url: str
    worker: WorkerProcess
    dags: dict[str, DAG]


@pytest.fixture
def captured() -> list[str]:
    """The tables the worker captures (a test parametrizes it to capture more)."""
    return [TABLE]


@pytest.fixture
def capture(pg_dsn: str, pg_target: str, redis_url: str, tmp_path: Path, airflow_db: Path,
            dblog_connection: DblogConnection, spark_connection: str, captured: list[str],
            monkeypatch: pytest.MonkeyPatch) -> Iterator[Capture]:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        for table in captured:
            conn.execute(f"CREATE TABLE {table} (id bigint PRIMARY KEY, name text NOT NULL,"
                         " qty integer, version integer NOT NULL DEFAULT 1)")
            conn.execute(f"ALTER TABLE {table} REPLICA IDENTITY FULL")
            conn.execute(f"INSERT INTO {table} (id, name, qty) SELECT i, 'item ' || i,"
                         " i %% 7 FROM generate_series(1, %s) AS i", (ROWS,))
    extra = target_sections(pg_target)
    config = write_config(tmp_path, pg_dsn, redis_url, captured, name=SOURCE, extra=extra)
    dblog_connection(redis_url, SOURCE, config)
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("DBLOG_POLL_INTERVAL_S", "1")
    dags = load_dags({"DBLOG_CONFIG": str(config)})
    worker = WorkerProcess(config, tmp_path / "worker.log").start()
    try:
        wait_for(lambda: " streaming " in worker.log(), 30, "the worker to stream",
                 lambda: worker.log()[-3000:])
        yield Capture(config, pg_dsn, pg_target, redis_url, worker, dags)
    finally:
        worker.stop()


def states(run: DagRun) -> dict[str, str | None]:
    return {ti.task_id: ti.state for ti in run.get_task_instances()}


def xcom(run: DagRun, task_id: str, map_index: int = -1) -> Any:
    [ti] = [ti for ti in run.get_task_instances()
            if ti.task_id == task_id and ti.map_index == map_index]
    return ti.xcom_pull(task_ids=task_id, map_indexes=map_index)


def asset_events(run: DagRun) -> dict[str, dict[str, Any]]:
    """The asset events the run's tasks emitted (metadata DB): URI -> extra."""
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        rows = session.execute(
            select(AssetModel.uri, AssetEvent.extra)
            .join(AssetModel, AssetModel.id == AssetEvent.asset_id)
            .where(AssetEvent.source_dag_id == run.dag_id,
                   AssetEvent.source_run_id == run.run_id)).all()
    return {uri: extra for uri, extra in rows}


def equal(capture: Capture) -> bool:
    return verify(config_module.load(capture.config), [TABLE]).equal


def target_rows(capture: Capture) -> dict[int, tuple[str, int | None]]:
    with psycopg.connect(capture.target_dsn) as conn:
        return {int(r[0]): (str(r[1]), r[2]) for r in conn.execute(
            "SELECT id, name, qty FROM public.items").fetchall()}


@pytest.mark.timeout(900)  # 170-330 s in full runs on two cores
def test_dump_then_repair(capture: Capture, log_text: Callable[[], str], tmp_path: Path,
                          monkeypatch: pytest.MonkeyPatch) -> None:
    # A filtered dump: only the rows that meet the conditions and lie in the key range.
    # (dag.test() leaves a run's values on the tasks' params for the next run of the same
    # DAG object: the later runs give every field they rely on.)
    run = capture.dags["dblog_dump"].test(run_conf={
        "scope": "tables", "tables": [TABLE], "where": [
            {"column": "qty", "op": "in", "values": [1, 2]}], "from_key": "100",
        "chunk_size": 20, "verify": False})
    logged = log_text()
    assert (run.state, states(run)) == ("success", {
        "check": "success", "submit": "success", "wait": "success", "should_merge": "success",
        "merge": "success", "verify": "skipped"}), logged[-6000:]
    assert 'dump-1 queued: tables dump of public.items where qty in ("1", "2") AND ' \
           'key >= ["100"]' in logged
    assert set(target_rows(capture)) == {i for i in range(100, ROWS + 1) if i % 7 in (1, 2)}

    # The scheduled backfill of every table, its filter a template of the run's interval
    # (here every row meets it, so the verify finds the target equal).
    backfill = capture.dags["dblog_backfill"]
    # pace keeps its five minutes between settings: it waits on the dump's trigger, which
    # wakes it when the dump ends, so the run ends with the dump
    since = datetime(2026, 11, 16, tzinfo=UTC)
    run = backfill.test(logical_date=since, run_conf={
        "where": [{"column": "name", "op": "!=", "value": "archived {{ data_interval_start }}"}],
        "chunk_size": 100, "delay_ms": 1500, "verify": True, "throttle_max_active_sessions": 50})
    logged = log_text()
    assert (run.state, states(run)) == ("success", {
        "check": "success", "submit": "success", "wait": "success", "pace": "success",
        "merge": "success", "verify": "success"}), logged[-6000:]
    assert (f'dump-2 queued: all dump of {TABLE} where name != "archived '
            f'{since.isoformat(" ")}"') in logged
    # The sensor deferred (the dump takes three chunks 1.5 s apart: still running when the
    # sensor first asks, however slowly the loaded machine starts that task) and dag.test() ran the
    # trigger in-process until its event.
    assert f"following dump-2 of source {SOURCE}" in logged
    assert f"dump-2 completed: 1 table(s), {ROWS} rows" in logged
    assert "throttle limits active sessions <= 50" in logged  # the form's limit, submitted
    assert len(target_rows(capture)) == ROWS
    assert equal(capture)

    with psycopg.connect(capture.target_dsn, autocommit=True) as target:
        target.execute("UPDATE public.items SET name = 'damaged' WHERE id IN (5, 200)")
        target.execute("DELETE FROM public.items WHERE id = 7")
        target.execute("INSERT INTO public.items (id, name, qty, version)"
                       " VALUES (90000, 'not in the source', 1, 1)")
    with psycopg.connect(capture.source_dsn, autocommit=True) as source:  # not merged yet
        source.execute("UPDATE public.items SET qty = 99, version = 2 WHERE id = 11")

    # A dry run reports what a repair would dump and delete, and queues or changes nothing.
    repair = capture.dags["dblog_repair"]
    store = StateStore(capture.redis_url, SOURCE)
    requests, before = len(store.list_requests()), target_rows(capture)
    run = repair.test(run_conf={"table": TABLE, "dry_run": True})
    logged = log_text()
    assert (run.state, states(run)) == ("success", {
        "compare": "success", "submit": "skipped", "wait": "skipped", "merge": "skipped",
        "remove_extra": "skipped", "verify": "skipped"}), logged[-6000:]
    [compare] = [ti for ti in run.get_task_instances() if ti.task_id == "compare"]
    report = compare.xcom_pull(task_ids="compare", key="dry_run")
    assert (report["dump"]["scope"], sorted(report["dump"]["keys"]), report["delete"]) == (
        "keys", [5, 7, 11, 200, 90000], [90000])
    assert "dry run: would delete 1 target row(s) of public.items" in logged
    assert len(store.list_requests()) == requests and target_rows(capture) == before
    assert asset_events(run) == {}

    # A filtered repair re-dumps the slice (keys up to 100), not the keys that differ; the
    # verify of the whole table then finds key 200, outside it, and says the dump was filtered.
    run = repair.test(run_conf={"table": TABLE, "chunk_size": 30, "to_key": "100",
                                "dry_run": False})
    logged = log_text()
    assert (run.state, states(run)) == ("failed", {
        "compare": "success", "submit": "success", "wait": "success", "merge": "success",
        "remove_extra": "success", "verify": "failed"}), logged[-6000:]
    plan = xcom(run, "compare")
    spec = json.loads(plan["spec"])  # the slice, not the keys that differ
    assert (spec["kind"], spec["keys"], spec["to_key"], plan["extra"]) == (
        "tables", None, ["100"], [90000])
    assert "dump-3 completed: 1 table(s), 100 rows" in logged
    assert xcom(run, "remove_extra") == {"removed": [[90000]], "kept": []}
    # the repair's merge changed the table: the same asset event as dblog_merge emits
    assert list(asset_events(run)) == [f"dblog://{SOURCE}/{TABLE}"]
    assert ('the target differs from the source: public.items: 0 missing, 1 changed, 0 extra: '
            'changed 200 (dump-3 dumped only the rows where key <= ["100"]: the verify '
            "compares whole tables, and differences outside those rows remain)") in logged
    rows = target_rows(capture)
    assert (len(rows), rows[5], rows[7], rows[11], rows[200]) == (
        ROWS, ("item 5", 5), ("item 7", 0), ("item 11", 99), ("damaged", 4))
    assert 90000 not in rows

    # Without a filter: a key dump of exactly the keys that differ; more keys than
    # keys_in_xcom travel as a file in keys_dir, not through XCom.
    with psycopg.connect(capture.target_dsn, autocommit=True) as target:
        target.execute("DELETE FROM public.items WHERE id = 300")
        target.execute("INSERT INTO public.items (id, name, qty, version)"
                       " VALUES (90001, 'not in the source', 1, 1)")
    monkeypatch.setenv("AIRFLOW__DBLOG__KEYS_IN_XCOM", "2")
    monkeypatch.setenv("AIRFLOW__DBLOG__KEYS_DIR", (tmp_path / "keys").as_uri())
    run = repair.test(run_conf={"table": TABLE, "chunk_size": 2, "to_key": None,
                                "throttle_max_chunk_ms": 5000})
    logged = log_text()
    assert (run.state, states(run)) == ("success", {
        "compare": "success", "submit": "success", "wait": "success", "merge": "success",
        "remove_extra": "success", "verify": "success"}), logged[-6000:]
    plan = xcom(run, "compare")
    spec = json.loads(plan["spec"])  # the keys travel in the file
    assert (spec["kind"], spec["keys"], plan["extra"], plan["keys_count"],
            plan["extra_count"]) == ("keys", None, [], 3, 1)
    [keys_file] = (tmp_path / "keys").rglob("*.json")
    assert plan["keys_file"].startswith((tmp_path / "keys").as_uri() + "/dblog_repair/")
    assert plan["keys_file"].endswith(f"/1-{TABLE}.json")
    assert json.loads(keys_file.read_text()) == {"keys": [300, 200, 90001], "extra": [90001]}
    assert f"3 key(s) read from {plan['keys_file']}" in logged
    assert "throttle limits chunk SELECT <= 5000 ms" in logged
    assert xcom(run, "remove_extra") == {"removed": [[90001]], "kept": []}
    rows = target_rows(capture)
    assert (rows[200], rows[300], 90001 in rows) == (("item 200", 4), ("item 300", 6), False)
    assert equal(capture)

    again = repair.test(run_conf={"table": TABLE, "chunk_size": 5000})
    assert (again.state, states(again)) == ("success", {
        "compare": "success", "submit": "skipped", "wait": "skipped", "merge": "skipped",
        "remove_extra": "skipped", "verify": "skipped"})
    assert asset_events(again) == {}


@pytest.mark.timeout(300)
@pytest.mark.parametrize("captured", [[TABLE, QUIET]])
def test_merge_returns_its_report_and_emits_an_asset_per_changed_table(
        capture: Capture, log_text: Callable[[], str], monkeypatch: pytest.MonkeyPatch) -> None:
    with psycopg.connect(capture.source_dsn, autocommit=True) as source:
        source.execute("INSERT INTO public.items (id, name, qty) VALUES"
                       " (1001, 'new', 1), (1002, 'new', 2)")
        source.execute("UPDATE public.items SET qty = 50, version = 2 WHERE id = 1001")
    landing = capture.config.parent / "landing"
    wait_for(lambda: len(replay(landing, SOURCE, TABLE).events) >= 3, 30,
             "the changes to land", lambda: capture.worker.log()[-3000:])

    monkeypatch.setenv("AIRFLOW__DBLOG__SPARK_UI_URL",
                       "http://spark-history:18080/history/{application_id}/jobs/")
    run = capture.dags["dblog_merge"].test()
    logged = log_text()
    assert (run.state, states(run)) == ("success", {"sources": "success", "merge": "success"}), \
        logged[-6000:]
    assert xcom(run, "sources") == ["dblog_default"]
    report = xcom(run, "merge", map_index=0)
    tables = {t["table"]: t for t in report["tables"]}
    assert report["ok"] is True and set(tables) == {TABLE, QUIET}
    assert {k: tables[TABLE][k] for k in ("events", "upserted", "deleted", "error")} == {
        "events": 3, "upserted": 2, "deleted": 0, "error": ""}
    assert (tables[QUIET]["batches"], tables[QUIET]["upserted"]) == (0, 0)
    assert target_rows(capture)[1001] == ("new", 50)
    # the task's "Spark UI" link as the API server resolves it: the job's application id
    # in [dblog] spark_ui_url
    application = report["spark"]["application_id"]
    assert application.startswith(("local-", "app-")), report["spark"]
    merge = capture.dags["dblog_merge"].get_task("merge")
    task = OperatorSerialization.serialize_operator(merge)
    assert task["_operator_extra_links"] == {"Spark UI": "_link_SparkUiLink"}
    [ti] = [ti for ti in run.get_task_instances() if ti.task_id == "merge"]
    link = XComOperatorLink(name="Spark UI", xcom_key="_link_SparkUiLink")
    assert link.get_link(OperatorSerialization.deserialize_operator(task), ti_key=ti.key) == \
        f"http://spark-history:18080/history/{application}/jobs/"

    # one event, the changed table's (the quiet one emits none), its counts as the extra
    events = asset_events(run)
    assert list(events) == [f"dblog://{SOURCE}/{TABLE}"]
    extra = events[f"dblog://{SOURCE}/{TABLE}"]
    assert {k: extra[k] for k in ("source_table", "events", "upserted", "deleted",
                                  "truncated")} == {
        "source_table": TABLE, "events": 3, "upserted": 2, "deleted": 0, "truncated": False}


def test_dump_of_a_table_not_captured_fails(capture: Capture,
                                            dblog_connection: DblogConnection,
                                            log_text: Callable[[], str]) -> None:
    dump = capture.dags["dblog_dump"]
    # Without the worker's configuration in the connection the request is queued as asked;
    # the worker refuses the table and the run fails with its message.
    dblog_connection(capture.redis_url, SOURCE, conn_id="dblog_redis_only")
    run = dump.test(run_conf={"conn_id": "dblog_redis_only", "scope": "tables",
                              "tables": ["public.nope"]})
    assert (run.state, states(run)) == ("failed", {
        "check": "success", "submit": "success", "wait": "failed",
        "should_merge": "upstream_failed", "merge": "upstream_failed",
        "verify": "upstream_failed"})
    message = (f"dump-1 failed: table public.nope is not captured by source {SOURCE} (now); "
               f"captured: {TABLE}")
    assert message in log_text()

    # With it, the submit refuses the table before anything is queued. (Every field the
    # previous run set is given again: dag.test() leaves a run's values on the tasks' params,
    # and the next run of the same DAG object starts from them.)
    run = dump.test(run_conf={"conn_id": "dblog_default", "scope": "tables",
                              "tables": ["public.nope"]})
    assert (run.state, states(run)["submit"]) == ("failed", "failed")
    assert f"table public.nope is not captured by source {SOURCE}" in log_text()
