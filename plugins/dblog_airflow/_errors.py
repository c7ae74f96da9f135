"""dblog's errors as Airflow task failures: terminal ones are not retried."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from airflow.sdk.exceptions import AirflowException, AirflowFailException

from dblog_worker.errors import TerminalError, TransientError


@contextmanager
def task_errors() -> Iterator[None]:
    """Fail the task with dblog's message: a :class:`TerminalError` (a refused request, a
    configuration to fix) with ``AirflowFailException``, so that retries do not repeat it;
    a :class:`TransientError` (Redis or a database unreachable) with ``AirflowException``,
    so that the task's retries apply."""
    try:
        yield
    except TerminalError as exc:
        raise AirflowFailException(str(exc)) from exc
    except TransientError as exc:
        raise AirflowException(str(exc)) from exc
