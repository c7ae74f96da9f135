"""Tasks that several DAGs run the same way: waiting for the dump, the merge after it,
and its verify."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import task
from airflow.sdk.exceptions import AirflowSkipException
from dblog_airflow.merge import merge_operator
from dblog_airflow.sensors.dump import DblogDumpSensor

__all__ = ["merge_after_dump", "verify_dumped", "wait_for_dump"]


def wait_for_dump(poll_interval_s: int, days: int) -> DblogDumpSensor:
    """Wait until the request the ``submit`` task queued ends (at most ``days`` days)."""
    return DblogDumpSensor(
        task_id="wait",
        request_id="{{ ti.xcom_pull(task_ids='submit') }}",
        dblog_conn_id="{{ params.conn_id }}",
        poll_interval=poll_interval_s,
        timeout=timedelta(days=days).total_seconds(),
        deferrable=True,  # days in the triggerer, not in a worker slot
    )


def merge_after_dump(spark_conn_id: str,
                     tables: str | Sequence[str] = "{{ params.tables }}") -> SparkSubmitOperator:
    """The Spark merge of the dumped tables (none chosen, scope all: every table); a merge
    that runs into another merge of the same table retries."""
    return merge_operator(
        "merge",
        dblog_conn_id="{{ params.conn_id }}",
        tables=tables,
        spark_conn_id=spark_conn_id,
        retries=2,
        retry_delay=timedelta(minutes=1),
    )


@task(task_id="verify")
def verify_dumped(**context: Any) -> dict[str, Any]:
    """dblog verify of the dumped tables; fails with the keys that differ (skipped when the
    form's Verify is off)."""
    from dblog_airflow.verify import run_verify

    from dblog_dags.differences import require_equal

    form = context["params"]
    if not form.get("verify", True):
        raise AirflowSkipException("Verify is off in the form")
    tables = form.get("tables") or ([form["table"]] if form.get("table") else None)
    result = run_verify(form["conn_id"], tables)
    if not result["equal"]:
        require_equal(result, _filter_note(form["conn_id"],
                                           context["ti"].xcom_pull(task_ids="submit")))
    return result


def _filter_note(conn_id: str, request_id: str | None) -> str:
    """What a filtered dump left out, for the verify's failure; empty for a dump of whole
    tables (or when the request cannot be read)."""
    from dblog_airflow.hooks.dblog import DblogHook

    from dblog_worker.errors import DblogError

    if not request_id:
        return ""
    hook = DblogHook(conn_id)
    try:
        row_filter = hook.get_request(request_id).row_filter
    except DblogError:
        return ""
    finally:
        hook.close()
    if row_filter is None:
        return ""
    return (f" ({request_id} dumped only the rows where {row_filter.describe()}: the verify "
            "compares whole tables, and differences outside those rows remain)")
