"""The DAGs' settings, read when Airflow parses the DAG files: the options of the ``[dblog]``
section of Airflow's configuration (the provider declares them: ``airflow config list
--section dblog``), set in ``airflow.cfg`` or as ``AIRFLOW__DBLOG__<OPTION>``; the older
``DBLOG_<OPTION>`` variables are read when the option is not set.

=======================  =================  =====================================================
``[dblog]`` option       default            meaning
=======================  =================  =====================================================
``conn_id``              ``dblog_default``  the ``dblog`` connection the forms propose
``config``               (none)             a worker configuration: its ``source.tables`` are
                                            the forms' table pick list
``spark_conn_id``        ``spark_default``  the Spark connection of the merge tasks
``poll_interval_s``      ``10``             seconds between two reads of a dump's state
``task_retries``         ``2``              retries of a task that failed for a passing reason
                                            (a refusal or a failed dump: none)
``task_retry_delay_s``   ``30``             seconds before such a retry
``merge_schedule``       ``*/15 * * * *``   when ``dblog_merge`` runs
``merge_connections``    ``conn_id``        the connections ``dblog_merge`` merges, comma
                                            separated (read when a run starts: one
                                            mapped merge each)
``landing_schedule``     ``17 * * * *``     when ``dblog_landing`` compacts and applies retention
``backfill_*``           see dblog_backfill  the backfill's schedule, tables and pace
=======================  =================  =====================================================

``repair_max_active_runs`` (default ``8``, 1 to 64): how many ``dblog_repair`` runs at once.
``keys_dir`` and ``keys_in_xcom`` (default none and ``10000``): where ``dblog_repair`` writes
more differing keys than ``keys_in_xcom`` (``key_files.py``), read when its tasks run.

A value that is not valid stops the DAG file with a message naming the setting (an import
error in Airflow's UI), rather than a DAG that does something else than configured.
"""

from __future__ import annotations

import json
import logging
import os
import re
import tomllib
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

__all__ = [
    "TABLE_PATTERN", "captured_tables", "conn_ids", "default_args", "env_int", "env_str",
    "env_tables", "env_where", "merge_connections", "option_of",
]

log = logging.getLogger(__name__)

CONN_ID = re.compile(r"[A-Za-z0-9_.\-]{1,250}")
TABLE_PATTERN = r"^[^.]+\.[\s\S]+$"
"""``schema.table`` (``database.table`` for MySQL), split at the first dot: the schema's
name has no dot, the table's may have any character (names are quoted wherever they go)."""


def option_of(name: str) -> str:
    """The option of Airflow's ``[dblog]`` section for a setting: ``DBLOG_CONN_ID`` ->
    ``conn_id``."""
    return name.removeprefix("DBLOG_").lower()


def env_str(name: str, default: str, environ: Mapping[str, str] | None = None) -> str:
    """The setting ``[dblog] <option>`` of Airflow's configuration (``airflow.cfg``, or the
    variable ``AIRFLOW__DBLOG__<OPTION>``), else the older variable ``name``; stripped; the
    default when neither is set or both are empty. With ``environ``, only its variables
    are read (``AIRFLOW__DBLOG__<OPTION>``, then ``name``)."""
    option = option_of(name)
    if environ is None:
        from airflow.configuration import conf

        value = str(conf.get("dblog", option, fallback="") or "").strip()
        environ = os.environ
    else:
        value = environ.get(f"AIRFLOW__DBLOG__{option.upper()}", "").strip()
    return value or environ.get(name, "").strip() or default


def env_int(name: str, default: int, low: int, high: int,
            environ: Mapping[str, str] | None = None) -> int:
    """An integer from ``low`` to ``high``; the default when the variable is unset or empty."""
    text = env_str(name, "", environ)
    if not text:
        return default
    try:
        value = int(text.replace("_", ""))
    except ValueError:
        raise ValueError(f"{name}={text!r} is not a whole number") from None
    if not low <= value <= high:
        raise ValueError(f"{name}={value} is out of range: from {low} to {high}")
    return value


def default_args(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The tasks' retries: a task that failed for a passing reason (Redis or the API server
    busy or restarting) runs again; a refusal or a failed dump fails at once
    (``AirflowFailException``), and a retried submit finds the request it queued."""
    return {
        "retries": env_int("DBLOG_TASK_RETRIES", 2, 0, 20, environ),
        "retry_delay": timedelta(seconds=env_int("DBLOG_TASK_RETRY_DELAY_S", 30, 1, 3600,
                                                 environ)),
    }


def dag_defaults(*, max_active_runs: int = 1, retries: bool = True) -> dict[str, Any]:
    """What every dblog DAG shares: no catch-up, the ``dblog`` tag, a start in the past,
    ``max_active_runs``, and (``retries``) :func:`default_args`."""
    defaults: dict[str, Any] = {
        "start_date": datetime(2024, 1, 1),
        "catchup": False,
        "max_active_runs": max_active_runs,
        "tags": ["dblog"],
    }
    if retries:
        defaults["default_args"] = default_args()
    return defaults


def conn_ids(name: str, default: str, environ: Mapping[str, str] | None = None) -> list[str]:
    """A comma-separated list of connection ids (duplicates dropped)."""
    ids = [part.strip() for part in env_str(name, default, environ).split(",") if part.strip()]
    for conn_id in ids:
        if not CONN_ID.fullmatch(conn_id):
            raise ValueError(f"{name}: {conn_id!r} is not a connection id (letters, digits, "
                             "_ . - only)")
    return list(dict.fromkeys(ids))


def merge_connections(environ: Mapping[str, str] | None = None) -> list[str]:
    """The connections ``dblog_merge`` merges: ``[dblog] merge_connections``, default
    ``[dblog] conn_id``."""
    return conn_ids("DBLOG_MERGE_CONNECTIONS",
                    env_str("DBLOG_CONN_ID", "dblog_default", environ), environ)


def env_tables(name: str, environ: Mapping[str, str] | None = None) -> list[str]:
    """A comma-separated list of tables, each ``schema.table`` (duplicates dropped)."""
    tables = [part.strip() for part in env_str(name, "", environ).split(",") if part.strip()]
    for table in tables:
        if not re.match(TABLE_PATTERN, table):
            raise ValueError(f"{name}: {table!r} is not a table as schema.table")
    return list(dict.fromkeys(tables))


def env_where(name: str, environ: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
    """A filter's conditions as the forms take them: a JSON array of objects such as
    ``{"column": "region", "op": "in", "values": ["EU", "US"]}``; empty: none."""
    from dblog_worker.errors import RequestRejected
    from dblog_worker.row_filter import EXAMPLE, RowFilter

    text = env_str(name, "", environ)
    if not text:
        return []
    try:
        conditions = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"{name} is not JSON ({exc}): give an array such as {EXAMPLE}") from None
    if not isinstance(conditions, list) or not all(isinstance(c, dict) for c in conditions):
        raise ValueError(f"{name} must be a JSON array of conditions (objects) such as {EXAMPLE}")
    try:
        RowFilter.of(conditions)
    except RequestRejected as exc:
        raise ValueError(f"{name}: {exc}") from None
    return conditions


def captured_tables(environ: Mapping[str, str] | None = None) -> list[str]:
    """``source.tables`` of the worker configuration ``$DBLOG_CONFIG`` names, for the forms'
    pick lists; empty when the variable is unset, the file cannot be read, or the list
    holds a pattern (``shop.*``: the tables it matches are the catalog's), so that the
    forms take any ``schema.table``. Only the TOML is read: no secret is resolved, nothing
    is connected to."""
    path = env_str("DBLOG_CONFIG", "", environ)
    if not path:
        return []
    try:
        with open(path, "rb") as file:
            document = tomllib.load(file)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        log.warning("DBLOG_CONFIG=%s cannot be read (%s): the forms offer no table list",
                    path, exc)
        return []
    source = document.get("source")
    tables = source.get("tables") if isinstance(source, dict) else None
    if not isinstance(tables, list):
        return []
    from dblog_worker.table_patterns import PatternError, TablePattern

    try:
        parsed = [TablePattern.parse(t) for t in tables if isinstance(t, str)]
    except PatternError:
        return []
    names = [p.name for p in parsed]
    return [] if None in names else [n for n in names if n is not None]
