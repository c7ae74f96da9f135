"""dblog_repair: make one target table equal to its source again, key by key.

Triggered by hand with a table; the form's *Rows* section (*Where*, *From key*, *To key*)
may name a slice of it to re-dump instead of the differing keys. Tasks::

    compare → submit → wait → merge → remove_extra → verify

- **compare**: checks the form's filter, then ``dblog verify`` of the table. Equal: the run
  ends here, green (the other tasks are skipped). Otherwise its XCom lists the keys that are
  missing in the target, changed, or extra (in the target only), and the dump to submit
  (``spec``: the JSON of its ``DumpSpec``, built once); more keys than ``[dblog]
  keys_in_xcom`` go to a file in ``[dblog] keys_dir`` instead (the spec then leaves them
  out), and XCom names it (``dblog_dags/key_files.py``).
  With the form's *Dry run* on, it logs what the repair would dump (the keys, or the slice)
  and which target rows it would delete (the extra keys the source still lacks then), puts
  that in its XCom ``dry_run``, and ends the run there: nothing is queued or changed.
- **submit**: a new request per run; an automatic retry re-attaches to it, a re-run after
  clearing the DAG run (say the dump failed) queues a new one. Without a filter, a
  primary-key dump of exactly those keys (``dblog dump --keys``): the worker reads the
  missing and changed rows again inside watermark windows; the extra keys it does not find,
  and reports them missing. With a filter, a filtered dump of the table (``dblog dump
  --table T --where ... --from-key ... --to-key ...``): every row of that slice, whatever the
  compare found. Its priority is the form's, ``urgent`` by default: the worker runs it at
  once next to a running backfill and gives it most of its windows.
- **wait**: follows the dump (deferrable); fails with the worker's error.
- **merge**: the Spark merge of the table (``dblog merge --table``).
- **remove_extra**: deletes the target rows of the extra keys the source still does not
  have (the dump emits no delete for a key it does not find), never a row the merge wrote
  meanwhile.
- **verify**: ``dblog verify`` of the table again; fails, listing the keys, if any differ.
  It compares the whole table: after a filtered repair, differences outside the slice fail
  it too, and its message says the dump was filtered.

Up to ``[dblog] repair_max_active_runs`` (default 8) runs at once: a repair of one table does
not wait for a repair of another in Airflow, nor in the worker (it runs up to ``[worker]
max_active_dumps`` requests at once, by priority).

Settings (``[dblog]`` options, see dblog_dags/settings.py): ``conn_id``, ``config`` (the table
pick list), ``spark_conn_id``, ``poll_interval_s``, ``repair_max_active_runs``. See
docs/airflow.md and docs/runbooks/.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from airflow.sdk import DAG, Param, task
from airflow.sdk.exceptions import AirflowFailException
from dblog_airflow.operators.dump import DblogDumpOperator
from dblog_dags import params, settings
from dblog_dags.tasks import merge_after_dump, verify_dumped, wait_for_dump

from dblog_worker.requests import DumpKind

CONN_ID = settings.env_str("DBLOG_CONN_ID", "dblog_default")
SPARK_CONN_ID = settings.env_str("DBLOG_SPARK_CONN_ID", "spark_default")
POLL_INTERVAL_S = settings.env_int("DBLOG_POLL_INTERVAL_S", 10, 1, 3600)
TABLES = settings.captured_tables()
MAX_ACTIVE_RUNS = settings.env_int("DBLOG_REPAIR_MAX_ACTIVE_RUNS", 8, 1, 64)

log = logging.getLogger(__name__)

with DAG(
    dag_id="dblog_repair",
    dag_display_name="dblog: repair a target table",
    description="Verify a table, dump exactly the keys that differ (or a slice of the table), "
                "merge, verify again",
    doc_md=__doc__,
    schedule=None,
    **settings.dag_defaults(max_active_runs=MAX_ACTIVE_RUNS),
    params={
        "conn_id": params.conn_id_param(CONN_ID),
        "table": params.table_param(TABLES),
        "where": params.where_param(),
        "from_key": params.key_param("from"),
        "to_key": params.key_param("to"),
        "chunk_size": params.chunk_size_param(),
        "delay_ms": params.delay_ms_param(),
        "priority": params.priority_param("urgent"),
        **params.throttle_params(),
        "dry_run": Param(False, type="boolean",
                         title="Dry run: only report what the repair would dump and delete",
                         description="Compares the table, logs the keys (or the slice) it "
                                     "would dump and the target rows it would delete, and "
                                     "stops: nothing is queued, merged or deleted.",
                         section="Afterwards"),
    },
) as dag:

    @task.short_circuit
    def compare(**context: Any) -> dict[str, Any]:
        """Check the filter and verify the table: nothing to repair ends the run (the rest is
        skipped); otherwise what to dump."""
        from dblog_airflow.verify import run_verify
        from dblog_dags import key_files
        from dblog_dags.differences import KINDS, describe

        form = context["params"]
        table = form["table"]
        try:
            sliced = params.check_dump("tables", [table], None, form["where"],
                                       form["from_key"], form["to_key"], pace=form)
        except ValueError as exc:
            raise AirflowFailException(str(exc)) from None
        result = run_verify(form["conn_id"], [table])
        entry = result["tables"][table]
        if entry.get("error"):
            raise AirflowFailException(f"{table} could not be compared: {entry['error']}")
        if entry["equal"]:
            log.info("%s equals its target: nothing to repair", table)
            return {}
        log.info("to repair: %s", " | ".join(describe(result)))
        if sliced.row_filter is not None:
            log.info("the repair dumps the rows of %s where %s (not only the keys above)",
                     table, sliced.row_filter.describe())
        if form.get("dry_run"):
            report = dry_run_report(table, entry, sliced.row_filter)
            context["ti"].xcom_push(key="dry_run", value=report)
            return {}
        keys = [k for kind in KINDS for k in entry.get(kind) or []]
        extra = entry.get("extra") or []
        spec = sliced.spec
        if sliced.row_filter is None:  # the differing keys, the form's knobs and priority
            spec = dataclasses.replace(spec, kind=DumpKind.KEYS, keys=tuple(keys))
        filed = key_files.save(table, keys, extra, context)  # many keys: a file, not XCom
        if filed is not None:
            return {"spec": spec.to_json(keys=False), "extra": [], **filed}
        return {"spec": spec.to_json(), "extra": extra}

    def dry_run_report(table: str, entry: dict[str, Any], row_filter: Any) -> dict[str, Any]:
        """What the repair would dump and delete, logged; nothing is queued or changed."""
        from dblog_dags.differences import KINDS

        if row_filter is not None:
            dump: dict[str, Any] = {"scope": "tables", "filter": row_filter.describe(),
                                    **row_filter.to_json()}
            log.info("dry run: would dump the rows of %s where %s", table, dump["filter"])
        else:
            keys = [k for kind in KINDS for k in entry.get(kind) or []]
            dump = {"scope": "keys", "keys": keys}
            log.info("dry run: would dump %d key(s) of %s: %s", len(keys), table, keys[:100])
        delete = entry.get("extra") or []  # remove_extra deletes those the source still lacks
        log.info("dry run: would delete %d target row(s) of %s (extra keys the source does "
                 "not have): %s", len(delete), table, delete[:100])
        log.info("dry run: nothing was queued, merged or deleted")
        return {"table": table, "dump": dump, "delete": delete,
                **{kind: entry.get(kind) or [] for kind in KINDS}}

    submit = DblogDumpOperator(
        task_id="submit",
        dblog_conn_id="{{ params.conn_id }}",
        spec="{{ ti.xcom_pull(task_ids='compare')['spec'] }}",
        keys_file="{{ ti.xcom_pull(task_ids='compare').get('keys_file', '') }}",
        new_request_on_clear=True,
    )
    wait = wait_for_dump(POLL_INTERVAL_S, days=1)
    merge = merge_after_dump(SPARK_CONN_ID, tables=["{{ params.table }}"])

    @task
    def remove_extra(**context: Any) -> dict[str, Any]:
        """Delete the target rows of extra keys the source does not have."""
        from dblog_airflow.hooks.dblog import DblogHook
        from dblog_dags import key_files
        from dblog_dags.extras import remove_extra as remove

        compared = context["ti"].xcom_pull(task_ids="compare")
        extra = compared["extra"]
        if compared.get("keys_file"):
            extra = key_files.load(compared["keys_file"])["extra"]
        if not extra:
            log.info("no extra keys in the target")
            return {"removed": [], "kept": []}
        form = context["params"]
        hook = DblogHook(form["conn_id"])
        try:
            done = remove(hook.load_config(), form["table"], extra)
        finally:
            hook.close()
        for key, why in done.kept:
            log.info("kept %s: %s", key, why)
        log.info("removed %d extra row(s) from the target of %s: %s", len(done.removed),
                 form["table"], done.removed[:100])
        return {"removed": done.removed, "kept": [[key, why] for key, why in done.kept]}

    compare() >> submit >> wait >> merge >> remove_extra() >> verify_dumped()
