"""dblog_merge: the periodic merge of the live stream into the target tables.

Runs on ``[dblog] merge_schedule`` (default every 15 minutes), one run at a time. Tasks::

    sources → merge (mapped: one instance per connection)

- **sources**: the connections of ``[dblog] merge_connections`` (comma-separated; default
  ``[dblog] conn_id``, i.e. ``dblog_default``), read when the run starts: a change of the
  setting applies to the next run without a new DAG version.
- **merge**: mapped over those connections (``merge[0]``, ``merge[1]``, ... named by the
  connection), the Spark job of ``dblog merge`` over every table of that worker's
  configuration. Each run merges what landed since the last one, exactly once; a run with
  nothing new is quick (Spark start-up). Its XCom is the job's JSON report; it emits an
  Asset event ``dblog://<source>/<target table>`` for each target table that changed, the
  table's counts as the extra (see docs/airflow.md to schedule a DAG on it). An instance
  fails when a table was not merged (the job's report in the log says which and why); the
  other tables were merged.

Also: ``[dblog] spark_conn_id`` (default ``spark_default``), the Spark master. Each option
is also read from its older variable (``DBLOG_MERGE_SCHEDULE``, ...) when it is not set.
"""

from __future__ import annotations

from datetime import timedelta

from airflow.sdk import DAG, task
from dblog_airflow.merge import DblogMergeOperator
from dblog_dags import settings

SCHEDULE = settings.env_str("DBLOG_MERGE_SCHEDULE", "*/15 * * * *")
SPARK_CONN_ID = settings.env_str("DBLOG_SPARK_CONN_ID", "spark_default")
# checked at parse time (a bad value is an import error); the run reads the setting again
settings.merge_connections()

with DAG(
    dag_id="dblog_merge",
    dag_display_name="dblog: merge into the targets",
    description="The periodic Spark merge of the landing zone into the target tables",
    doc_md=__doc__,
    schedule=SCHEDULE,
    dagrun_timeout=timedelta(hours=6),
    **settings.dag_defaults(max_active_runs=1, retries=False),
) as dag:

    @task
    def sources() -> list[str]:
        """The connections to merge: ``[dblog] merge_connections`` as it is now."""
        return settings.merge_connections()

    DblogMergeOperator.partial(
        task_id="merge",
        conn_id=SPARK_CONN_ID,
        map_index_template="{{ task.dblog_conn_id }}",
        retries=1,
        retry_delay=timedelta(minutes=2),
    ).expand(dblog_conn_id=sources())
