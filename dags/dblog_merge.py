"""dblog_merge: the periodic merge of the live stream into the target tables.

Runs on ``[dblog] merge_schedule`` (default every 15 minutes), one run at a time. One task
per connection of ``[dblog] merge_connections`` (comma-separated; default
``[dblog] conn_id``, i.e. ``dblog_default``): ``merge_<connection>``, the Spark job of
``dblog merge`` over every table of that worker's configuration. Each run merges what
landed since the last one, exactly once; a run with nothing new is quick (Spark start-up).
A task fails when a table was not merged (the job's report in the log says which and why);
the other tables were merged.

Also: ``[dblog] spark_conn_id`` (default ``spark_default``), the Spark master. Each option
is also read from its older variable (``DBLOG_MERGE_SCHEDULE``, ...) when it is not set.
"""

from __future__ import annotations

from datetime import timedelta

from airflow.sdk import DAG
from dblog_airflow.merge import merge_operator
from dblog_dags import settings

SCHEDULE = settings.env_str("DBLOG_MERGE_SCHEDULE", "*/15 * * * *")
SPARK_CONN_ID = settings.env_str("DBLOG_SPARK_CONN_ID", "spark_default")
CONNECTIONS = settings.conn_ids("DBLOG_MERGE_CONNECTIONS",
                                settings.env_str("DBLOG_CONN_ID", "dblog_default"))

with DAG(
    dag_id="dblog_merge",
    dag_display_name="dblog: merge into the targets",
    description="The periodic Spark merge of the landing zone into the target tables",
    doc_md=__doc__,
    schedule=SCHEDULE,
    dagrun_timeout=timedelta(hours=6),
    **settings.dag_defaults(max_active_runs=1, retries=False),
) as dag:
    for conn_id in CONNECTIONS:
        merge_operator(
            f"merge_{conn_id}",
            dblog_conn_id=conn_id,
            spark_conn_id=SPARK_CONN_ID,
            retries=1,
            retry_delay=timedelta(minutes=2),
        )
