"""dblog_backfill: a scheduled dump of all tables or some tables, at a gentle pace; merge.

Runs on ``$DBLOG_BACKFILL_SCHEDULE`` (default weekly); can also be triggered by hand, with
the same form. The dump may be filtered (the form's *Rows* section): only the rows that meet
*Where*'s conditions and, for one table, lie between *From key* and *To key*. Their values
are templates of the run's dates, rendered by *check*: with ``DBLOG_BACKFILL_WHERE`` set to
``[{"column": "updated_at", "op": ">=", "value": "{{ data_interval_start }}"}]``, each run
dumps the rows updated since its interval began (a value may use ``data_interval_start``,
``data_interval_end``, ``logical_date``, ``ds``, ``ts``, ``prev_start_date_success``,
``macros`` and the like; never connections or variables). Tasks::

    check → submit → wait → merge → verify
                   ↘ pace

- **check**: the form's rules (scope tables needs tables, a key range one table), the
  filter's templates rendered, the delay of the hour; its XCom is the request, built once
  (the JSON of its ``DumpSpec``).
- **submit**: queues it (``dblog dump --all`` or ``--table ...``), once per run, at the
  form's *Priority*, ``background`` by default: a repair or any other dump queued meanwhile
  takes most of the worker's windows, the backfill goes on with the rest.
- **wait**: follows it (deferrable) until it completes; fails with the worker's error.
- **pace**: while the dump runs, every 5 minutes: during busy hours the delay between
  chunks is *busy_delay_ms*, outside them *delay_ms*. A delay set by hand (``dblog set``)
  is left alone. In between it waits deferred on the dump, and succeeds as soon as the dump
  has ended.
- **merge**: the Spark merge of the dumped tables.
- **verify**: ``dblog verify`` of the dumped tables when the form's *Verify* is on.

Configuration (environment variables, read at parse time; they are the defaults of the
form, which a scheduled run uses), options of the ``[dblog]`` section of Airflow's
configuration (``backfill_schedule`` or ``AIRFLOW__DBLOG__BACKFILL_SCHEDULE``; the older
variable names below are read when an option is not set)::

    DBLOG_BACKFILL_SCHEDULE       cron or preset, default @weekly
    DBLOG_BACKFILL_TABLES         comma-separated tables; empty: all captured tables
    DBLOG_BACKFILL_CHUNK_SIZE     default 5000
    DBLOG_BACKFILL_DELAY_MS       the delay outside busy hours, default 0
    DBLOG_BACKFILL_BUSY_DELAY_MS  the delay during busy hours, default 500
    DBLOG_BACKFILL_BUSY_HOURS     HH-HH, e.g. 08-18; empty (default): no busy hours
    DBLOG_BACKFILL_TIMEZONE       the busy hours' time zone, default UTC
    DBLOG_BACKFILL_VERIFY         true/false, default false
    DBLOG_BACKFILL_WHERE          the filter's conditions, a JSON array of objects such as
                                  [{"column": "region", "op": "in", "values": ["EU"]}];
                                  empty (default): every row
    DBLOG_BACKFILL_FROM_KEY       the first key dumped (one table only), JSON or text;
    DBLOG_BACKFILL_TO_KEY         the last; empty (default): no key range
    DBLOG_BACKFILL_PRIORITY       urgent, normal or background (default): the dump's share
                                  of the worker's windows while other dumps run

and ``DBLOG_CONN_ID``, ``DBLOG_CONFIG``, ``DBLOG_SPARK_CONN_ID``, ``DBLOG_POLL_INTERVAL_S``.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from airflow.sdk import DAG, Param, task
from airflow.sdk.exceptions import AirflowFailException
from dblog_airflow.operators.dump import DblogDumpOperator
from dblog_dags import params, settings
from dblog_dags.pace import BUSY_HOURS_PATTERN, DumpPaceSensor, Pace, parse_busy_hours
from dblog_dags.tasks import merge_after_dump, verify_dumped, wait_for_dump

from dblog_worker.errors import RequestRejected
from dblog_worker.requests import DEFAULT_CHUNK_SIZE, MAX_CHUNK_SIZE, MAX_DELAY_MS, check_priority

CONN_ID = settings.env_str("DBLOG_CONN_ID", "dblog_default")
SPARK_CONN_ID = settings.env_str("DBLOG_SPARK_CONN_ID", "spark_default")
POLL_INTERVAL_S = settings.env_int("DBLOG_POLL_INTERVAL_S", 10, 1, 3600)
SCHEDULE = settings.env_str("DBLOG_BACKFILL_SCHEDULE", "@weekly")
BACKFILL_TABLES = settings.env_tables("DBLOG_BACKFILL_TABLES")
CHUNK_SIZE = settings.env_int("DBLOG_BACKFILL_CHUNK_SIZE", DEFAULT_CHUNK_SIZE, 1, MAX_CHUNK_SIZE)
DELAY_MS = settings.env_int("DBLOG_BACKFILL_DELAY_MS", 0, 0, MAX_DELAY_MS)
BUSY_DELAY_MS = settings.env_int("DBLOG_BACKFILL_BUSY_DELAY_MS", 500, 0, MAX_DELAY_MS)
BUSY_HOURS = settings.env_str("DBLOG_BACKFILL_BUSY_HOURS", "")
TIMEZONE = settings.env_str("DBLOG_BACKFILL_TIMEZONE", "UTC")
try:  # refuse a malformed value now (an import error that names it), not in a run
    parse_busy_hours(BUSY_HOURS)
except ValueError as exc:
    raise ValueError(f"DBLOG_BACKFILL_BUSY_HOURS: {exc}") from None
try:
    ZoneInfo(TIMEZONE)
except (ValueError, KeyError) as exc:
    raise ValueError(f"DBLOG_BACKFILL_TIMEZONE={TIMEZONE!r} is not a time zone name such as "
                     f"Europe/Paris ({exc})") from None
VERIFY = settings.env_str("DBLOG_BACKFILL_VERIFY", "false").lower() in ("1", "true", "yes")
WHERE = settings.env_where("DBLOG_BACKFILL_WHERE")
FROM_KEY = settings.env_str("DBLOG_BACKFILL_FROM_KEY", "") or None
TO_KEY = settings.env_str("DBLOG_BACKFILL_TO_KEY", "") or None
PRIORITY = settings.env_str("DBLOG_BACKFILL_PRIORITY", "background")
try:
    check_priority(PRIORITY)
except RequestRejected as exc:
    raise ValueError(f"DBLOG_BACKFILL_PRIORITY: {exc}") from None
try:
    params.check_dump("tables" if BACKFILL_TABLES else "all", BACKFILL_TABLES, None, WHERE,
                      FROM_KEY, TO_KEY)
except ValueError as exc:
    raise ValueError(f"DBLOG_BACKFILL_TABLES, _WHERE, _FROM_KEY and _TO_KEY: {exc}") from None
TABLES = settings.captured_tables()

log = logging.getLogger(__name__)

with DAG(
    dag_id="dblog_backfill",
    dag_display_name="dblog: scheduled backfill",
    description="A scheduled dump of all or some tables at a gentle pace, then the merge",
    doc_md=__doc__,
    schedule=SCHEDULE,
    **settings.dag_defaults(max_active_runs=1),
    params={
        "conn_id": params.conn_id_param(CONN_ID),
        "scope": params.scope_param(("all", "tables"),
                                    default="tables" if BACKFILL_TABLES else "all"),
        "tables": params.tables_param(sorted({*TABLES, *BACKFILL_TABLES}), BACKFILL_TABLES),
        "where": params.where_param(WHERE),
        "from_key": params.key_param("from", FROM_KEY),
        "to_key": params.key_param("to", TO_KEY),
        "chunk_size": params.chunk_size_param(CHUNK_SIZE),
        "delay_ms": params.delay_ms_param(DELAY_MS, "Delay outside busy hours"),
        "busy_delay_ms": params.delay_ms_param(BUSY_DELAY_MS, "Delay during busy hours"),
        "parallelism": params.parallelism_param(),
        "priority": params.priority_param(PRIORITY),
        **params.throttle_params(),
        "busy_hours": Param(
            BUSY_HOURS, type="string", pattern=BUSY_HOURS_PATTERN,
            title=f"Busy hours: HH-HH in {TIMEZONE}, e.g. 08-18, or empty for none",
            description="During these hours the dump waits Delay during busy hours between "
                        "chunks; 22-06 wraps past midnight.",
            section="Pace",
        ),
        "verify": Param(VERIFY, type="boolean",
                        title="Verify: compare the dumped tables with their targets after "
                              "the merge", section="Afterwards"),
    },
) as dag:

    @task
    def check(**context: Any) -> str:
        """The form's rules, its filter rendered, the delay of the hour; the request's spec
        (JSON), for the submit."""
        form = context["params"]
        try:
            rows = params.render_templates(
                [form["where"], form["from_key"], form["to_key"]], context)
            pace = Pace(form["delay_ms"], form["busy_delay_ms"],
                        parse_busy_hours(form["busy_hours"]))
            checked = params.check_dump(
                form["scope"], form["tables"], None, *rows, pace=form,
                delay_ms=pace.delay_at(datetime.now(ZoneInfo(TIMEZONE))))
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
    wait = wait_for_dump(POLL_INTERVAL_S, days=6)
    pace = DumpPaceSensor(
        task_id="pace",
        request_id="{{ ti.xcom_pull(task_ids='submit') }}",
        dblog_conn_id="{{ params.conn_id }}",
        timezone=TIMEZONE,
        poll_interval=POLL_INTERVAL_S,
        timeout=timedelta(days=6).total_seconds(),
    )
    merge = merge_after_dump(SPARK_CONN_ID)

    check() >> submit >> [wait, pace]
    wait >> merge >> verify_dumped()
