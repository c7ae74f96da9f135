"""Extra links of the dump tasks: the worker's live view.

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

__all__ = ["DblogLiveViewLink", "live_view_url"]


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
