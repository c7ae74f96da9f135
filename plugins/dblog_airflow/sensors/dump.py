"""DblogDumpSensor: wait for a dump request to end; succeed only if it completed."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow.configuration import conf
from airflow.sdk import BaseSensorOperator, PokeReturnValue
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from dblog_airflow._errors import task_errors
from dblog_airflow.hooks.dblog import DEFAULT_CONN_ID, DblogHook
from dblog_airflow.links import DblogLiveViewLink
from dblog_airflow.triggers.dump import DblogDumpTrigger, Progress, describe_progress, dump_event
from dblog_worker.errors import DblogError

if TYPE_CHECKING:
    from airflow.sdk import Context

__all__ = ["DblogDumpSensor"]


class DblogDumpSensor(BaseSensorOperator):
    """Wait until a dump request ends: success if it completed, failure if it failed (with
    the worker's error) or was cancelled.

    It reads the request once; if the dump has not ended, the task defers to
    :class:`~dblog_airflow.triggers.dump.DblogDumpTrigger`, which polls Redis in the
    triggerer and logs the progress, and resumes in :meth:`execute_complete`. With
    ``deferrable=False`` it is a classic sensor (``mode="poke"`` or ``"reschedule"``,
    ``poke_interval`` = ``poll_interval``).

    Marking the task failed or success, or clearing it, while it waits cancels the dump:
    :meth:`on_kill` when it waits in a worker slot, the trigger's ``on_kill`` (Airflow 3.3+)
    when it is deferred.

    The task's return value (XCom) is the event of the completed dump:
    ``{"status": "completed", "request_id": ..., "message": ..., "rows": ...}``.

    :param request_id: The dump request to wait for, e.g. the return value of a
        :class:`~dblog_airflow.operators.dump.DblogDumpOperator` (templated).
    :param dblog_conn_id: The ``dblog`` connection (templated).
    :param poll_interval: Seconds between two reads of the request.
    :param deferrable: Wait in the triggerer instead of a worker slot; default: Airflow's
        ``[operators] default_deferrable``, like the core providers' operators.
    :param timeout: Seconds to wait at most (BaseSensorOperator's), deferred or not.
    """

    template_fields: Sequence[str] = ("request_id", "dblog_conn_id")
    ui_color = "#d6e8f2"
    operator_extra_links = (DblogLiveViewLink(),)

    def __init__(self, *, request_id: str, dblog_conn_id: str = DEFAULT_CONN_ID,
                 poll_interval: float = 10.0,
                 deferrable: bool = conf.getboolean("operators", "default_deferrable",
                                                    fallback=False),
                 **kwargs: Any) -> None:
        kwargs.setdefault("poke_interval", poll_interval)
        super().__init__(**kwargs)
        self.request_id = request_id
        self.dblog_conn_id = dblog_conn_id
        self.poll_interval = float(poll_interval)
        self.deferrable = deferrable

    def execute(self, context: Context) -> Any:
        if not self.deferrable:
            return super().execute(context)
        event = self._read(context)
        if event is not None:
            return self._decide(event)
        self.defer(
            trigger=DblogDumpTrigger(request_id=self.request_id,
                                     dblog_conn_id=self.dblog_conn_id,
                                     poll_interval=self.poll_interval),
            method_name="execute_complete",
            timeout=timedelta(seconds=self.timeout),
        )

    def poke(self, context: Context) -> bool | PokeReturnValue:
        event = self._read(context)
        return False if event is None else PokeReturnValue(True, self._decide(event))

    def execute_complete(self, context: Context, event: dict[str, Any] | None = None
                         ) -> dict[str, Any]:
        """Resume after the trigger fired: the same decision as on the first read."""
        if event is None:
            raise AirflowException(f"the trigger following {self.request_id} fired no event")
        return self._decide(event)

    def on_kill(self) -> None:
        """The task was stopped while it waited in a worker slot: cancel the dump."""
        hook = DblogHook(self.dblog_conn_id)
        try:
            previous = hook.cancel(self.request_id)
        except (DblogError, AirflowException) as exc:
            self.log.error("cannot cancel %s: %s", self.request_id, exc)
        else:
            self.log.warning("the task was stopped: %s cancelled (it was %s)",
                             self.request_id, previous.value)
        finally:
            hook.close()

    def _read(self, context: Context) -> dict[str, Any] | None:
        """The request's event if it has ended, else None (its progress is logged)."""
        hook = DblogHook(self.dblog_conn_id)
        try:
            with task_errors():
                request = hook.get_request(self.request_id)
                progress = Progress.of(request, hook.progress(self.request_id))
            DblogLiveViewLink.persist(context, hook)  # also for a dump that has ended
        finally:
            hook.close()
        if request.state.terminal:
            return dump_event(request, progress)
        self.log.info("%s", describe_progress(request, progress, progress, 0.0))
        return None

    def _decide(self, event: dict[str, Any]) -> dict[str, Any]:
        status, message = event.get("status"), event.get("message") or ""
        if status == "completed":
            self.log.info("%s", message)
            return event
        if status in ("failed", "cancelled"):  # the dump has ended: retrying cannot help
            raise AirflowFailException(message)
        if status == "error":
            raise AirflowException(message)
        raise AirflowException(f"unexpected event while waiting for {self.request_id}: {event!r}")
