"""Extra links: the worker's live view (dump tasks), Spark's UI of the job (merge tasks).

Airflow 3 shows an operator's extra link from the XCom named by the link's ``xcom_key``: the
task stores the URL there when it runs (:meth:`DblogLiveViewLink.persist`), as the core
providers' links do. The URL is the leader's HTTP API (the ``http`` field of the leader
lease in Redis) at that moment; no link when the leader has no HTTP API, or none holds the
lease.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperatorLink
from airflow.sdk.execution_time.xcom import XCom

from dblog_airflow.hooks.dblog import DblogHook
from dblog_worker.errors import DblogError

if TYPE_CHECKING:
    from airflow.sdk import BaseOperator, Context
    from airflow.sdk.types import TaskInstanceKey

__all__ = ["DblogLiveViewLink", "SparkUiLink", "live_view_url", "spark_ui_url"]


def live_view_url(http: str) -> str:
    """The live view (the page at the root of the worker's HTTP API) of an ``http`` URL."""
    return http.rstrip("/") + "/"


class DblogLiveViewLink(BaseOperatorLink):
    """The live view of the worker that leads the source, as the dump task saw it."""

    name = "dblog live view"

    def get_link(self, operator: BaseOperator, *, ti_key: TaskInstanceKey) -> str:
        url: Any = XCom.get_value(key=self.xcom_key, ti_key=ti_key)
        return url if isinstance(url, str) else ""

    @classmethod
    def persist(cls, context: Context, hook: DblogHook) -> str:
        """Store the leader's live view for the task's link; "" (no link) if no leader
        publishes an HTTP API, or Redis cannot be read (the task goes on)."""
        try:
            http = hook.state().lease().get("http", "")
        except DblogError as exc:
            hook.log.warning("no live view link: %s", exc)
            return ""
        if not http:
            return ""
        url = live_view_url(http)
        context["ti"].xcom_push(key=cls().xcom_key, value=url)
        return url


def spark_ui_url(template: str, application_id: str) -> str:
    """``[dblog] spark_ui_url`` with the job's application id in place of
    ``{application_id}``: a Spark history server (``http://history:18080/history/
    {application_id}/jobs/``), a standalone master's page (``http://master:8080/app/?appId=
    {application_id}``), YARN's proxy."""
    return template.replace("{application_id}", application_id)


class SparkUiLink(BaseOperatorLink):
    """Spark's UI of the merge job the task ran, where one outlives it: the URL template of
    ``[dblog] spark_ui_url`` filled with the job's application id (no link without it)."""

    name = "Spark UI"

    def get_link(self, operator: BaseOperator, *, ti_key: TaskInstanceKey) -> str:
        url: Any = XCom.get_value(key=self.xcom_key, ti_key=ti_key)
        return url if isinstance(url, str) else ""

    @classmethod
    def persist(cls, context: Context, template: str, application_id: str) -> str:
        """Store the job's Spark UI URL for the task's link; "" without a template or an
        application id."""
        if not template or not application_id:
            return ""
        url = spark_ui_url(template, application_id)
        context["ti"].xcom_push(key=cls().xcom_key, value=url)
        return url
