"""DblogDumpOperator: queue a dump, once per task instance."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator

from dblog_airflow._errors import task_errors
from dblog_airflow.hooks.dblog import DEFAULT_CONN_ID, DblogHook
from dblog_airflow.links import DblogLiveViewLink
from dblog_worker.requests import DEFAULT_CHUNK_SIZE

if TYPE_CHECKING:
    from airflow.sdk import Context

__all__ = ["DblogDumpOperator", "client_token"]


def client_token(context: Context, new_on_clear: bool = False) -> str:
    """``airflow:<dag_id>:<run_id>:<task_id>:<map_index>``: the same for every try of a task
    instance, so that a retried or re-run submit gets the first request back.

    With ``new_on_clear``, ``:clear<N>`` is added once the DAG run has been cleared N times
    (``dag_run.clear_number``): an automatic retry (a crash, Redis away) keeps the token and
    re-attaches to the request its try queued; clearing the run, or tasks of it, to re-run
    it gives a new token, so a new request."""
    ti = context["ti"]
    map_index = -1 if ti.map_index is None else ti.map_index
    token = f"airflow:{ti.dag_id}:{ti.run_id}:{ti.task_id}:{map_index}"
    clears = getattr(context.get("dag_run"), "clear_number", 0) or 0
    return f"{token}:clear{clears}" if new_on_clear and clears else token


class DblogDumpOperator(BaseOperator):
    """Queue a dump for the dblog worker; return its request id (e.g. ``dump-3``).

    The worker runs it in chunks interleaved with the change log, in watermark windows.
    The request carries a client token made of the DAG, run, task and map index: a retry
    (or a cleared and re-run task) gets the same request back instead of a second dump;
    with ``new_request_on_clear`` a re-run after clearing the DAG run queues a new request
    (:func:`client_token`). Wait for it with
    :class:`~dblog_airflow.sensors.dump.DblogDumpSensor`. The task's extra link "dblog live
    view" opens the leading worker's live view.

    A refused request (an unknown scope, no tables, keys that do not fit the primary key, a
    table the worker does not capture, a filter on a column the table does not have) fails
    the task without retries.

    A filtered dump reads only the rows that meet every condition of ``where`` and, for one
    table, lie in the key range ``from_key`` to ``to_key`` (both included). The values are
    templated, so a scheduled dump can read the rows of its interval::

        DblogDumpOperator(
            task_id="submit", scope="tables", tables=["public.orders"],
            where=[{"column": "updated_at", "op": ">=", "value": "{{ data_interval_start }}"}],
        )

    :param scope: ``"all"``, ``"tables"`` or ``"keys"`` (templated). ``"all"`` without
        tables dumps every table of the worker's configuration (the connection's
        ``config``).
    :param tables: Table names, a list or its JSON text (templated).
    :param keys: For scope ``"keys"``: primary keys of the one table, a list or its JSON
        text, ``[1, 2]`` or ``[[1, "a"], [2, "b"]]`` (templated).
    :param chunk_size: Rows per chunk (1 to 100,000; templated).
    :param delay_ms: Pause between chunks in milliseconds (templated).
    :param parallelism: Chunk SELECTs per window of a table dump, each on a source
        connection of its own (1 to 8; templated).
    :param where: Conditions every dumped row meets (templated): a list of
        ``{"column": ..., "op": ..., "value": ...}`` (op one of ``=``, ``!=``, ``<``, ``<=``,
        ``>``, ``>=``; ``"values": [...]`` for ``in`` and ``not in``; no value for ``is null``
        and ``is not null``), one such condition, or their JSON text. Values are numbers or
        strings, read as the column's type. Not for scope ``"keys"``; with ``"all"`` every
        captured table must have the columns.
    :param from_key: The first primary key to dump, included (templated): a value, a list of
        one value per key column, or their text (JSON, else the text itself). Only for scope
        ``"tables"`` with one table.
    :param to_key: The last primary key to dump, included (templated); like ``from_key``.
    :param throttle: Automatic throttling: limits by name (``max_chunk_ms``,
        ``max_active_sessions``, ``max_replica_lag_ms``, ``max_log_lag_mb``), each an int or
        its text; 0 or left out: off (templated).
    :param new_request_on_clear: A re-run after the DAG run was cleared queues a new request
        instead of re-attaching to the first (automatic retries still re-attach).
    :param dblog_conn_id: The ``dblog`` connection (templated).
    """

    template_fields: Sequence[str] = ("scope", "tables", "keys", "chunk_size", "delay_ms",
                                      "parallelism", "where", "from_key", "to_key",
                                      "throttle", "dblog_conn_id")
    ui_color = "#d6e8f2"
    operator_extra_links = (DblogLiveViewLink(),)

    def __init__(self, *, scope: str, tables: str | Sequence[str] = (), keys: object = None,
                 chunk_size: int | str = DEFAULT_CHUNK_SIZE, delay_ms: int | str = 0,
                 parallelism: int | str = 1, where: object = None, from_key: object = None,
                 to_key: object = None, throttle: Mapping[str, int | str] | None = None,
                 dblog_conn_id: str = DEFAULT_CONN_ID, new_request_on_clear: bool = False,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.new_request_on_clear = new_request_on_clear
        self.scope = scope
        self.tables = tables
        self.keys = keys
        self.chunk_size = chunk_size
        self.delay_ms = delay_ms
        self.parallelism = parallelism
        self.where = where
        self.from_key = from_key
        self.to_key = to_key
        self.throttle = dict(throttle or {})
        self.dblog_conn_id = dblog_conn_id

    def execute(self, context: Context) -> str:
        hook = DblogHook(self.dblog_conn_id)
        try:
            with task_errors():
                request = hook.submit_dump(
                    self.scope, self.tables, self.keys,
                    chunk_size=self.chunk_size, delay_ms=self.delay_ms,
                    client_token=client_token(context, self.new_request_on_clear),
                    parallelism=self.parallelism,
                    where=self.where, from_key=self.from_key, to_key=self.to_key,
                    throttle=self.throttle)
            DblogLiveViewLink.persist(context, hook)
        finally:
            hook.close()
        return request.id
