"""The Spark merge from a DAG: ``dblog merge`` as a SparkSubmitOperator.

:func:`merge_operator` builds a :class:`DblogMergeOperator`, a ``SparkSubmitOperator``
that submits the job ``dblog merge`` submits (``dblog_spark/merge.py``) with the same
options, the worker's configuration taken from the ``dblog`` connection::

    spark-submit --master <the Spark connection's master>
        --conf spark.sql.session.timeZone=UTC --conf spark.ui.showConsoleProgress=false
        --conf spark.log.level=WARN
        [--conf spark.driver.host=127.0.0.1 --conf spark.driver.bindAddress=127.0.0.1]
        [--properties-file <a 0600 file: spark-defaults.conf, merge.spark_conf>]
        --jars <merge.jars> --name dblog-merge-<source>
        .../dblog_spark/merge.py --config <the connection's config> [--table=T ...]

The values of ``merge.spark_conf`` (S3 secret keys, ...) never reach the command line,
which every user of the machine may read: they go in a properties file of the task's own
temporary folder, readable by its user only (with the DAG's ``properties_file``, if it
gives one, after them), removed when the task ends.

The task returns the job's report (``--report``, the JSON of ``dblog merge --json``) as its
XCom, and emits an Asset event for each target table the merge changed (rows upserted or
deleted, or a truncate): the asset ``dblog://<source>/<target table>`` (:func:`table_asset`),
through the alias :data:`MERGED` in the task's outlets, the table's counts in the event's
extra. A table with nothing new emits none. The report file is written by the Spark driver:
with a driver on another machine (``--deploy-mode cluster``) the task finds none, logs so,
and returns ``None`` (no events).

The Spark master comes from the Spark connection (``spark_default``: e.g.
``{"conn_type": "spark", "host": "local[2]"}``), not from the configuration's
``merge.master``. Everything that needs the connection or the configuration is resolved
when the task runs, so a DAG file that uses it reads neither. The job exits 1 when a
table was not merged: the task fails. The target's password is never on the command
line: the job reads the configuration file and the environment of the Airflow worker.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow.configuration import conf
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import Asset, AssetAlias, BaseHook
from airflow.sdk.exceptions import AirflowNotFoundException

from dblog_airflow._errors import task_errors
from dblog_airflow.hooks.dblog import DEFAULT_CONN_ID, DblogHook, as_tables
from dblog_airflow.links import SparkUiLink
from dblog_worker.config import Config
from dblog_worker.config_sections import default_jars
from dblog_worker.target.submit import (
    check_jars,
    job_path,
    merge_job,
    spark_submit,
    write_properties,
)

if TYPE_CHECKING:
    from airflow.sdk import Context

__all__ = ["MERGED", "DblogMergeOperator", "changed_tables", "merge_operator", "table_asset"]

MERGED = AssetAlias(name="dblog-merged")
"""The alias every merge task lists in its outlets; its events go to the changed tables'
assets (:func:`table_asset`)."""

COUNTS = ("events", "batches", "upserted", "deleted", "truncated", "merged_to", "seconds")


def table_asset(source: str, target_table: str) -> Asset:
    """The asset of a target table: ``dblog://<source>/<target table>``, e.g.
    ``dblog://shop/public.orders`` (its name is the URI too)."""
    uri = f"dblog://{source}/{target_table}"
    return Asset(name=uri, uri=uri)


def changed_tables(report: dict[str, Any]) -> list[dict[str, Any]]:
    """The tables of a merge report whose target changed: rows upserted or deleted, or a
    truncate; not a table with an error or nothing new."""
    return [t for t in report.get("tables", [])
            if not t.get("error") and (t.get("upserted") or t.get("deleted")
                                       or t.get("truncated"))]

class DblogMergeOperator(SparkSubmitOperator):
    """Merge the landing zone into the target tables with Spark, as ``dblog merge`` does.

    Build it with :func:`merge_operator`. When it runs it reads the worker's configuration
    (the ``dblog`` connection's ``config``): the JDBC jars (``merge.jars``), extra Spark
    options (``merge.spark_conf``) and the target come from there; explicit ``jars``,
    ``conf``, ``env_vars`` or ``spark_binary`` arguments win over them.

    :param dblog_conn_id: The ``dblog`` connection; its extra must name the configuration
        (templated).
    :param tables: Source tables to merge, a list (each entry templated) or its JSON text
        (templated); default: every captured table.

    Its extra link "Spark UI" opens the job's page in a Spark UI that outlives it, when
    ``[dblog] spark_ui_url`` gives one: a URL with ``{application_id}`` (a history server,
    a standalone master's application page, YARN's proxy).
    """

    template_fields: Sequence[str] = (*SparkSubmitOperator.template_fields, "tables",
                                      "dblog_conn_id")
    operator_extra_links = (SparkUiLink(),)

    def __init__(self, *, dblog_conn_id: str = DEFAULT_CONN_ID,
                 tables: str | Sequence[str] | None = None, **kwargs: Any) -> None:
        explicit = {name for name in ("jars", "spark_binary", "name") if name in kwargs}
        kwargs["outlets"] = [*(kwargs.get("outlets") or []), MERGED]
        kwargs.setdefault("application", str(job_path()))
        kwargs.setdefault("jars", ",".join(default_jars()))
        kwargs.setdefault("name", "dblog-merge")
        kwargs.setdefault("conn_id", "spark_default")
        super().__init__(**kwargs)
        self._explicit = explicit  # what the DAG gave: the configuration does not override it
        self.dblog_conn_id = dblog_conn_id
        self.spark_conn_id: str = kwargs["conn_id"]
        self.tables = tables
        self._properties: dict[str, str] = {}
        # the command the hook runs (the connection's extra may name another one)
        self._submit = str(kwargs.get("spark_binary") or "spark-submit")

    def execute(self, context: Context) -> dict[str, Any] | None:  # type: ignore[override]
        hook = DblogHook(self.dblog_conn_id)
        with task_errors():
            config = hook.load_config()
            config.require_target()
            check_jars(config)
            self.prepare(config, Path(str(hook.config_path)), self.spark_master())
            path = self._search_path()
        with tempfile.TemporaryDirectory(prefix="dblog-merge-") as folder:  # 0700
            if self._properties:  # merge.spark_conf: never on the command line
                with task_errors():
                    given = Path(self.properties_file).read_text(encoding="utf-8") \
                        if self.properties_file else ""
                self.properties_file = str(write_properties(
                    Path(folder), self._properties, also=given,
                    submit=None if given else shutil.which(self._submit, path=path)))
            report_file = Path(folder) / "report.json"
            self.application_args = [*(self.application_args or []),
                                     f"--report={report_file}"]
            saved = os.environ.get("PATH")
            os.environ["PATH"] = path
            try:
                super().execute(context)
            finally:
                if saved is None:
                    del os.environ["PATH"]
                else:
                    os.environ["PATH"] = saved
            if not report_file.is_file():
                self.log.warning("the merge job wrote no report (a driver on another machine "
                                 "writes it there): no XCom report, no asset events")
                return None
            report: dict[str, Any] = json.loads(report_file.read_text(encoding="utf-8"))
        SparkUiLink.persist(context, conf.get("dblog", "spark_ui_url", fallback="") or "",
                            str((report.get("spark") or {}).get("application_id") or ""))
        self.emit_assets(context, config.source.name, report)
        return report

    def emit_assets(self, context: Context, source: str, report: dict[str, Any]) -> None:
        """An asset event per changed target table, its counts as the extra."""
        events = context["outlet_events"][MERGED]
        for table in changed_tables(report):
            asset = table_asset(source, table["target_table"])
            extra = {"source_table": table["table"], **{k: table.get(k) for k in COUNTS}}
            events.add(asset, extra=extra)
            self.log.info("asset event %s: %s", asset.uri, extra)

    def _search_path(self) -> str:
        """PATH with the directory of ``spark-submit`` in it: Spark's hook runs the binary
        by name (``spark-submit`` unless the DAG gives ``spark_binary``), and a worker that
        has PySpark in its venv, or Spark in ``$SPARK_HOME``, may not have it on PATH."""
        path = os.environ.get("PATH", os.defpath)
        if "spark_binary" in self._explicit or shutil.which("spark-submit", path=path):
            return path
        return os.pathsep.join((str(Path(spark_submit()).parent), path))

    def spark_master(self) -> str:
        """The host of the Spark connection, e.g. ``local[2]`` for a local master ("yarn"
        when there is no connection, as Spark's hook assumes)."""
        try:
            conn = BaseHook.get_connection(self.spark_conn_id)
        except AirflowNotFoundException:
            return "yarn"
        return conn.host or "yarn"

    def prepare(self, config: Config, config_path: Path, master: str) -> None:
        """Set the job's arguments, jars, Spark options and environment from the worker's
        configuration, as ``dblog merge`` does (:func:`merge_job`)."""
        job = merge_job(config, config_path, master, tables=as_tables(self.tables))
        self.application_args = job.arguments
        if "jars" not in self._explicit:
            self.jars = ",".join(job.jars) or None
        if "name" not in self._explicit:
            self.name = job.name
        self.conf = job.conf | (self.conf or {})
        self._properties = job.properties  # written to a file of the task's at execute
        self.env_vars = (job.env | self.env_vars) if self.env_vars else (job.env or None)



def merge_operator(task_id: str, dblog_conn_id: str = DEFAULT_CONN_ID,
                   tables: str | Sequence[str] | None = None,
                   spark_conn_id: str = "spark_default", **kwargs: Any) -> SparkSubmitOperator:
    """A task that merges the landing zone into the target tables (``dblog merge``).

    :param task_id: The task's id.
    :param dblog_conn_id: The ``dblog`` connection (templated); its extra must name the
        worker's configuration (``config``), where the target and the landing zone are.
    :param tables: Source tables to merge, a list (each entry templated) or its JSON text
        (templated); default: every captured table.
    :param spark_conn_id: The Spark connection that gives the master.
    :param kwargs: Further ``SparkSubmitOperator`` / ``BaseOperator`` arguments.
    """
    return DblogMergeOperator(task_id=task_id, dblog_conn_id=dblog_conn_id, tables=tables,
                              conn_id=spark_conn_id, **kwargs)
