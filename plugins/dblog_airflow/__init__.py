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
