"""``dblog verify`` from a DAG task: compare source and target tables, return the keys
that differ as JSON (the lists a primary-key dump takes)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dblog_airflow._errors import task_errors
from dblog_airflow.hooks.dblog import DEFAULT_CONN_ID, DblogHook, as_tables
from dblog_worker import verify as verify_module
from dblog_worker import verify_report
from dblog_worker.control import captured_tables
from dblog_worker.verify import VerifyOptions
from dblog_worker.verify_report import KeyValues, TableResult, VerifyResult

__all__ = ["run_verify", "verify_document"]

log = logging.getLogger(__name__)


def run_verify(dblog_conn_id: str = DEFAULT_CONN_ID, tables: str | Sequence[str] | None = None,
               keys_out_dir: str | None = None, *, range_rows: int = 10_000, delay_ms: int = 0,
               recheck_s: float = 0.0) -> dict[str, Any]:
    """Compare source tables with their merged targets, as ``dblog verify`` does; log the
    summary per table and return :func:`verify_document` of the result.

    Nothing fails when tables differ: the caller decides (``result["equal"]``). A table that
    is not captured, a target table that does not exist or a configuration that needs a
    change fails the task, without retries; an unreachable database fails it with retries.

    :param dblog_conn_id: The ``dblog`` connection; its extra must name the worker's
        configuration (``config``), which gives the source and the target.
    :param tables: Source tables to compare, a list or its JSON text; default: every
        captured table.
    :param keys_out_dir: When set, write each differing table's keys to
        ``<dir>/<table>.keys.json`` (the ``dblog dump --keys-file`` form); a table without
        differences has its old file removed.
    :param range_rows: Source rows per compared key range.
    :param delay_ms: Pause between ranges, in milliseconds.
    :param recheck_s: Wait this long, then compare the differing keys again (changes in
        flight settle).
    """
    hook = DblogHook(dblog_conn_id)
    with task_errors():
        config = hook.load_config()
        names = as_tables(tables) or captured_tables(config)
        paths = (verify_report.keys_paths(str(Path(keys_out_dir) / "{table}.keys.json"), names)
                 if keys_out_dir else {})
        result = verify_module.verify(config, names, VerifyOptions(
            range_rows=range_rows, delay_ms=delay_ms, recheck_s=recheck_s))
    written: dict[str, str] = {}
    for table in result.tables:
        if table.table in paths and table.error is None:
            path = paths[table.table]
            if verify_report.write_keys(table, path):
                written[table.table] = str(path)
    for line in verify_report.render(result).splitlines():
        log.info("%s", line)
    return verify_document(result, written)


def verify_document(result: VerifyResult, keys_files: dict[str, str] | None = None
                    ) -> dict[str, Any]:
    """The result as JSON-serialisable data::

        {"equal": false,
         "tables": {"public.orders": {"equal": false, "error": null,
                                      "missing": [7], "extra": [], "changed": [3, 4],
                                      "source_rows": 100, "target_rows": 99,
                                      "keys_file": null}}}

    Keys are as a primary-key dump takes them: values for a one-column key, lists of values
    for a composite key. ``error`` says why a table could not be compared.
    """
    return {"equal": result.equal,
            "tables": {t.table: _table_document(t, (keys_files or {}).get(t.table))
                       for t in result.tables}}


def _table_document(table: TableResult, keys_file: str | None) -> dict[str, Any]:
    return {"equal": table.equal, "error": table.error, "missing": _keys(table.missing),
            "extra": _keys(table.extra), "changed": _keys(table.changed),
            "source_rows": table.source_rows, "target_rows": table.target_rows,
            "keys_file": keys_file}


def _keys(keys: Sequence[KeyValues]) -> list[object]:
    return [key[0] if len(key) == 1 else list(key) for key in keys]
