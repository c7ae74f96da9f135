"""dblog_landing: the landing zone's lifecycle, compaction and retention, on a schedule.

Runs on ``[dblog] landing_schedule`` (default hourly, at minute 17), one run at a time, or
from the UI with its form:

- **action**: ``maintain`` (compact, then retention), ``compact`` or ``retain``;
- **tables**: the tables to work on (default: every landed table);
- **dry_run**: list what would be written and removed, change nothing.

The task reads the worker's configuration through the ``dblog`` connection
(``[dblog] conn_id``, default ``dblog_default``): the landing path (a folder or
``s3://``), ``[landing.compaction]``, ``[landing.retention]`` and the ``[target]`` whose
merge log says what is merged. Its XCom is the report (per table: runs compacted, files
removed with their locations and sizes); it fails when a table failed (the others were
done). Safe beside the running worker, a merge and another run (docs/operations.md).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from airflow.sdk import DAG, Param, task
from dblog_dags import settings

SCHEDULE = settings.env_str("DBLOG_LANDING_SCHEDULE", "17 * * * *")
CONN_ID = settings.env_str("DBLOG_CONN_ID", "dblog_default")

with DAG(
    dag_id="dblog_landing",
    dag_display_name="dblog: landing zone compaction and retention",
    description="Compact small segments; remove what every target merged",
    doc_md=__doc__,
    schedule=SCHEDULE,
    dagrun_timeout=timedelta(hours=3),
    params={
        "action": Param("maintain", type="string", enum=["maintain", "compact", "retain"],
                        title="Action", description="compact, retain, or both"),
        "tables": Param([], type="array", items={"type": "string"}, title="Tables",
                        description="schema.table names; empty: every landed table"),
        "dry_run": Param(False, type="boolean", title="Dry run",
                         description="list what would be written and removed"),
    },
    **settings.dag_defaults(max_active_runs=1, retries=False),
) as dag:

    @task
    def maintain(params: dict[str, Any] | None = None) -> dict[str, object]:
        """Run ``dblog landing <action>`` on the connection's configuration."""
        from airflow.sdk.exceptions import AirflowFailException
        from dblog_airflow.hooks.dblog import DblogHook, as_tables

        from dblog_worker import lifecycle

        given = params or {}
        action = str(given.get("action", "maintain"))
        config = DblogHook(CONN_ID).load_config()
        report = lifecycle.maintain(config, compact=action in ("maintain", "compact"),
                                    retain=action in ("maintain", "retain"),
                                    dry_run=bool(given.get("dry_run", False)),
                                    tables=as_tables(given.get("tables") or []))
        document = report.as_dict()
        if not report.ok:
            failed = [t for t in report.tables if t.get("error")]
            raise AirflowFailException(f"landing maintenance failed for {failed}")
        return document

    maintain()
