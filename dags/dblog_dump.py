"""dblog_dump: dump all tables, some tables or some primary keys, then merge and verify.

Triggered by hand (Trigger DAG → the form). The form's *Rows* section filters a dump of
tables: *Where* (conditions every dumped row meets) and, for one table, a key range (*From
key*, *To key*). Tasks::

    check → submit → wait → should_merge → merge → verify

- **check**: the rules that join the form's fields (scope keys needs one table and keys; a
  key range needs one table); fails at once with a plain sentence. Its XCom is the request,
  built once: the JSON of its ``DumpSpec`` (filter, knobs and priority included).
- **submit**: queues that request in the worker's Redis (like ``dblog dump``); its XCom is
  the request id (``dump-7``). A retry returns the same request: no second dump. The form's
  *Priority* (empty: urgent for scope keys, else normal) sets its share of the worker's
  windows while other dumps run.
- **wait**: a deferrable sensor: the triggerer follows the dump and logs its progress;
  fails with the worker's error if the dump failed or was cancelled.
- **should_merge**: skips the merge and the verify when the form's *Merge* is off.
- **merge**: the Spark merge (``dblog merge``) of the dumped tables (scope all: every
  table): what the dump landed and whatever else landed since their last merge.
- **verify**: ``dblog verify`` of the dumped tables; fails with the differing keys (skipped
  when the form's *Verify* is off). It compares whole tables: after a filtered dump, rows
  outside the filter that differ fail it too (its message says so).

Settings (the ``[dblog]`` options of Airflow's configuration, read at parse time; see
dblog_dags/settings.py): ``conn_id``, ``config`` (the table list of the form),
``spark_conn_id``, ``poll_interval_s``.
See docs/airflow.md.
"""

from __future__ import annotations

import logging
from typing import Any

from airflow.sdk import DAG, Param, task
from airflow.sdk.exceptions import AirflowFailException
from dblog_airflow.operators.dump import DblogDumpOperator
from dblog_dags import params, settings
from dblog_dags.tasks import merge_after_dump, verify_dumped, wait_for_dump

CONN_ID = settings.env_str("DBLOG_CONN_ID", "dblog_default")
SPARK_CONN_ID = settings.env_str("DBLOG_SPARK_CONN_ID", "spark_default")
POLL_INTERVAL_S = settings.env_int("DBLOG_POLL_INTERVAL_S", 10, 1, 3600)
TABLES = settings.captured_tables()

log = logging.getLogger(__name__)

with DAG(
    dag_id="dblog_dump",
    dag_display_name="dblog: dump tables or keys",
    description="Dump all tables, some tables or some primary keys; merge; verify",
    doc_md=__doc__,
    schedule=None,
    **settings.dag_defaults(max_active_runs=4),
    params={
        "conn_id": params.conn_id_param(CONN_ID),
        "scope": params.scope_param(),
        "tables": params.tables_param(TABLES),
        "keys": params.keys_param(),
        "where": params.where_param(),
        "from_key": params.key_param("from"),
        "to_key": params.key_param("to"),
        "chunk_size": params.chunk_size_param(),
        "delay_ms": params.delay_ms_param(),
        "parallelism": params.parallelism_param(),
        "priority": params.priority_param(),
        **params.throttle_params(),
        "merge": Param(True, type="boolean", title="Merge: run the Spark merge afterwards",
                       section="Afterwards"),
        "verify": Param(True, type="boolean",
                        title="Verify: compare the dumped tables with their targets "
                              "after the merge", section="Afterwards"),
    },
) as dag:

    @task
    def check(**context: Any) -> str:
        """The rules that join fields of the form; the request's spec (JSON), for the
        submit."""
        form = context["params"]
        try:
            checked = params.check_dump(form["scope"], form["tables"], form["keys"],
                                        form["where"], form["from_key"], form["to_key"],
                                        pace=form)
        except ValueError as exc:
            raise AirflowFailException(str(exc)) from None
        if checked.row_filter is not None:
            log.info("rows: %s", checked.row_filter.describe())
        return checked.spec.to_json()

    submit = DblogDumpOperator(
        task_id="submit",
        dblog_conn_id="{{ params.conn_id }}",
        spec="{{ ti.xcom_pull(task_ids='check') }}",
    )
    wait = wait_for_dump(POLL_INTERVAL_S, days=3)

    @task.short_circuit
    def should_merge(**context: Any) -> bool:
        """Skip the merge and the verify when the form's Merge is off."""
        return bool(context["params"]["merge"])

    merge = merge_after_dump(SPARK_CONN_ID)

    check() >> submit >> wait >> should_merge() >> merge >> verify_dumped()
