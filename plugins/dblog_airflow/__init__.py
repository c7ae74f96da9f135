"""dblog on Airflow: a provider for the dblog capture worker's control plane.

The worker runs on its own (``dblog run``); Airflow asks it for dumps and waits for them,
through the Redis control plane the ``dblog`` CLI uses::

    DblogDumpOperator        queue a dump (all tables, some tables, some primary keys);
                             a retried task gets the same request back (client token)
    DblogDumpSensor          wait for it, deferred: DblogDumpTrigger polls Redis in the
                             triggerer and logs the progress (tables, chunks, rows, rows/s)
    DblogPauseDumpOperator, DblogResumeDumpOperator, DblogCancelDumpOperator,
    DblogSetDumpKnobsOperator
                             steer a dump, like ``dblog pause|resume|cancel|set``
    merge_operator(...)      the Spark merge of the landing zone, as ``dblog merge`` runs it
    run_verify(...)          ``dblog verify`` from a task: the keys that differ, as JSON

Everything reaches Redis through one connection of type ``dblog`` (default id
``dblog_default``): host, port, password and login of Redis, the schema field as the
Redis database number, and in the extra ``{"source": "shop", "config": "/etc/dblog/shop.toml"}``
(``"ssl": true`` for ``rediss://``). See :class:`dblog_airflow.hooks.dblog.DblogHook`.

The package is installed with dblog (``pip install 'dblog[airflow]'``) and found by
Airflow through the ``apache_airflow_provider`` entry point; it also imports from an
Airflow plugins folder that holds it. This module imports nothing from Airflow.
"""

from __future__ import annotations

from typing import Any

from dblog_worker import __version__

__all__ = ["__version__", "get_provider_info"]

_INTEGRATION = "dblog"


# The [dblog] options (AIRFLOW__DBLOG__<OPTION>): what each means, and an example value.
_OPTIONS: dict[str, tuple[str, str]] = {
    "conn_id": ("The dblog connection the forms propose. Default: dblog_default.",
                "dblog_default"),
    "config": ("A worker configuration file: its source.tables are the forms' table pick "
               "list. Default: none (the forms take any schema.table).",
               "/etc/dblog/shop.toml"),
    "spark_conn_id": ("The Spark connection of the merge tasks. Default: spark_default.",
                      "spark_default"),
    "poll_interval_s": ("Seconds between two reads of a dump's state (1 to 3600). "
                        "Default: 10.", "10"),
    "task_retries": ("Retries of a task that failed for a passing reason (0 to 20). "
                     "Default: 2.", "2"),
    "task_retry_delay_s": ("Seconds before such a retry (1 to 3600). Default: 30.", "30"),
    "merge_schedule": ("When dblog_merge runs (cron or preset). Default: */15 * * * *.",
                       "*/15 * * * *"),
    "merge_connections": ("The connections dblog_merge merges, comma separated. "
                          "Default: conn_id.", "dblog_shop,dblog_billing"),
    "landing_schedule": ("When dblog_landing compacts the landing zone and removes what "
                         "every target merged (cron or preset). Default: 17 * * * *.",
                         "17 * * * *"),
    "spark_ui_url": ("The merge tasks' link to Spark's UI of their job: a URL with "
                     "{application_id}, on a Spark UI that outlives the job (a history server, "
                     "a standalone master's application page, YARN's proxy). Default: none "
                     "(no link).", "http://spark-history:18080/history/{application_id}/jobs/"),
    "keys_dir": ("A folder every Airflow worker reads (a path, or an object-storage URL such "
                 "as s3://bucket/dblog-keys) where dblog_repair writes key sets larger than "
                 "keys_in_xcom. Default: none (the keys go through XCom).",
                 "file:///srv/dblog-keys"),
    "keys_in_xcom": ("How many keys a repair passes through XCom at most before it writes "
                     "them to keys_dir. Default: 10000.", "10000"),
    "repair_max_active_runs": ("How many dblog_repair runs may run at once (repairs of "
                               "different tables do not wait for each other). Default: 8.",
                               "8"),
    "backfill_schedule": ("When dblog_backfill runs. Default: @weekly.", "@weekly"),
    "backfill_tables": ("The backfill's tables, comma separated. Default: every captured "
                        "table.", "public.orders,public.customers"),
    "backfill_chunk_size": ("The backfill's rows per chunk. Default: 5000.", "5000"),
    "backfill_delay_ms": ("The backfill's pause between chunks outside busy hours. "
                          "Default: 0.", "0"),
    "backfill_busy_delay_ms": ("The pause during busy hours. Default: 500.", "500"),
    "backfill_busy_hours": ("Busy hours, HH-HH. Default: none.", "08-18"),
    "backfill_timezone": ("The busy hours' time zone. Default: UTC.", "Europe/Paris"),
    "backfill_verify": ("true or false: the backfill's verify task. Default: false.",
                        "true"),
    "backfill_where": ("The backfill's filter: a JSON array of conditions, values may be "
                       "templates of the run's dates. Default: none.",
                       '[{"column": "updated_at", "op": ">=", '
                       '"value": "{{ data_interval_start }}"}]'),
    "backfill_from_key": ("The first primary key the backfill dumps (one table only). "
                          "Default: none.", "1000"),
    "backfill_to_key": ("The last primary key the backfill dumps. Default: none.", "2000"),
    "backfill_priority": ("The backfill dump's priority: urgent, normal or background, its "
                          "share of the worker's windows while other dumps run. Default: "
                          "background.", "background"),
}


def _option(description: str, example: str) -> dict[str, Any]:
    return {"description": description, "version_added": "0.1.0", "type": "string",
            "example": example, "default": None}


def get_provider_info() -> dict[str, Any]:
    """What Airflow's providers manager reads: the connection type and the modules."""
    return {
        "package-name": "dblog",
        "name": "dblog",
        "description": "Watermark-based change-data capture (Netflix DBLog): request, steer "
                       "and wait for dumps; merge and verify the target tables.",
        "versions": [__version__],
        "integrations": [{"integration-name": _INTEGRATION, "tags": ["software"]}],
        "hooks": [{"integration-name": _INTEGRATION,
                   "python-modules": ["dblog_airflow.hooks.dblog"]}],
        "operators": [{"integration-name": _INTEGRATION,
                       "python-modules": ["dblog_airflow.operators.dump",
                                          "dblog_airflow.operators.control",
                                          "dblog_airflow.merge"]}],
        "sensors": [{"integration-name": _INTEGRATION,
                     "python-modules": ["dblog_airflow.sensors.dump"]}],
        "triggers": [{"integration-name": _INTEGRATION,
                      "python-modules": ["dblog_airflow.triggers.dump"]}],
        "extra-links": ["dblog_airflow.links.DblogLiveViewLink",
                        "dblog_airflow.links.SparkUiLink"],
        "config": {"dblog": {
            "description": "The dblog DAGs' settings (dags/), read when Airflow parses the "
                           "DAG files. Unset: the older DBLOG_<OPTION> environment variable, "
                           "else the default the description gives.",
            "options": {name: _option(text, example)
                        for name, (text, example) in _OPTIONS.items()},
        }},
        "connection-types": [{
            "connection-type": "dblog",
            "hook-class-name": "dblog_airflow.hooks.dblog.DblogHook",
            "hook-name": "dblog (DBLog capture worker)",
            # Airflow 3.2+ reads the connection form from here, not from hook methods.
            "ui-field-behaviour": {
                "hidden-fields": ["extra"],
                "relabeling": {"host": "Redis host", "port": "Redis port",
                               "schema": "Redis database", "login": "Redis user",
                               "password": "Redis password"},
                "placeholders": {"host": "127.0.0.1", "port": "6379", "schema": "0"},
            },
            "conn-fields": {
                "source": {
                    "label": "Source",
                    "description": "The worker's [source] name: the prefix of its Redis keys.",
                    "schema": {"type": "string", "pattern": "^[a-z][a-z0-9_]{0,39}$"},
                },
                "config": {
                    "label": "Worker configuration",
                    "description": "Path of the worker's TOML file on the Airflow workers; "
                                   "needed for the merge, verify and dumps of all tables.",
                    "schema": {"type": ["string", "null"]},
                },
                "ssl": {
                    "label": "TLS (rediss://)",
                    "schema": {"type": ["boolean", "null"], "default": False},
                },
            },
        }],
    }
