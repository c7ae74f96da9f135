"""Steer a dump from a DAG: pause, resume, cancel, change its knobs (chunk size, delay,
parallelism, throttle limits, priority).

The same commands as ``dblog pause|resume|cancel|set``. A command the request's state does
not allow (pausing a queued dump, cancelling a completed one) fails the task, without
retries, with the control plane's message.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from airflow.sdk import BaseOperator

from dblog_airflow._errors import task_errors
from dblog_airflow.hooks.dblog import DEFAULT_CONN_ID, DblogHook
from dblog_worker.requests import COMMANDS, RequestState

if TYPE_CHECKING:
    from airflow.sdk import Context

__all__ = ["DblogCancelDumpOperator", "DblogPauseDumpOperator", "DblogResumeDumpOperator",
           "DblogSetDumpKnobsOperator"]


class _DumpCommandOperator(BaseOperator):
    """Run one control command on a request; return the request's new state."""

    command: ClassVar[str]
    template_fields: Sequence[str] = ("request_id", "dblog_conn_id")
    ui_color = "#d6e8f2"

    def __init__(self, *, request_id: str, dblog_conn_id: str = DEFAULT_CONN_ID,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.request_id = request_id
        self.dblog_conn_id = dblog_conn_id

    def execute(self, context: Context) -> str:
        hook = DblogHook(self.dblog_conn_id)
        try:
            with task_errors():
                command: Callable[[str], RequestState] = getattr(hook, self.command)
                command(self.request_id)
        finally:
            hook.close()
        return COMMANDS[self.command][0].value


class DblogPauseDumpOperator(_DumpCommandOperator):
    """Pause a running dump between two chunks; the worker's other dumps go on.

    :param request_id: The dump request, e.g. ``dump-3`` (templated).
    :param dblog_conn_id: The ``dblog`` connection (templated).
    """

    command = "pause"


class DblogResumeDumpOperator(_DumpCommandOperator):
    """Resume a paused dump where it stopped.

    :param request_id: The dump request, e.g. ``dump-3`` (templated).
    :param dblog_conn_id: The ``dblog`` connection (templated).
    """

    command = "resume"


class DblogCancelDumpOperator(_DumpCommandOperator):
    """Cancel a dump that has not ended (queued, running or paused).

    :param request_id: The dump request, e.g. ``dump-3`` (templated).
    :param dblog_conn_id: The ``dblog`` connection (templated).
    """

    command = "cancel"


class DblogSetDumpKnobsOperator(BaseOperator):
    """Change the chunk size, the delay between chunks, the parallelism, the throttle
    limits and/or the priority of a dump that has not ended; the worker applies them from
    its next chunk. Returns ``{"chunk_size": ..., "delay_ms": ..., "parallelism": ...,
    "throttle": {...}, "priority": ...}`` as they now are.

    :param request_id: The dump request, e.g. ``dump-3`` (templated).
    :param chunk_size: Rows per chunk, 1 to 100,000 (templated; None: unchanged).
    :param delay_ms: Pause between chunks in milliseconds (templated; None: unchanged).
    :param parallelism: Chunk SELECTs per window, 1 to 8 (templated; None: unchanged).
    :param throttle: Throttle limits by name (``max_chunk_ms`` ...; 0: off), only those
        given change (templated).
    :param priority: ``"urgent"``, ``"normal"`` or ``"background"`` (templated; None or
        empty: unchanged).
    :param dblog_conn_id: The ``dblog`` connection (templated).
    """

    template_fields: Sequence[str] = ("request_id", "chunk_size", "delay_ms", "parallelism",
                                      "throttle", "priority", "dblog_conn_id")
    ui_color = "#d6e8f2"

    def __init__(self, *, request_id: str, chunk_size: int | str | None = None,
                 delay_ms: int | str | None = None, parallelism: int | str | None = None,
                 throttle: Mapping[str, int | str] | None = None,
                 priority: str | None = None,
                 dblog_conn_id: str = DEFAULT_CONN_ID, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.request_id = request_id
        self.priority = priority
        self.chunk_size = chunk_size
        self.delay_ms = delay_ms
        self.parallelism = parallelism
        self.throttle = dict(throttle or {})
        self.dblog_conn_id = dblog_conn_id

    def execute(self, context: Context) -> dict[str, Any]:
        hook = DblogHook(self.dblog_conn_id)
        try:
            with task_errors():
                request = hook.set_knobs(self.request_id, chunk_size=_optional(self.chunk_size),
                                         delay_ms=_optional(self.delay_ms),
                                         parallelism=_optional(self.parallelism),
                                         throttle=self.throttle,
                                         priority=_optional_text(self.priority))
        finally:
            hook.close()
        return {"chunk_size": request.chunk_size, "delay_ms": request.delay_ms,
                "parallelism": request.parallelism, "throttle": request.throttle.limits(),
                "priority": request.priority.value}


def _optional_text(value: str | None) -> str | None:
    """A rendered template of an unset value is an empty string, or the text None."""
    if value is None or value.strip() in ("", "None"):
        return None
    return value.strip()


def _optional(value: int | str | None) -> int | str | None:
    """A rendered template of an unset value is an empty string, or the text None."""
    if isinstance(value, str) and value.strip() in ("", "None"):
        return None
    return value
