"""DblogDumpOperator: queue a dump, once per task instance."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowException

from dblog_airflow._errors import task_errors
from dblog_airflow.hooks.dblog import DEFAULT_CONN_ID, DblogHook, spec_of
from dblog_airflow.links import DblogLiveViewLink
from dblog_worker.dump_spec import DumpSpec
from dblog_worker.errors import RequestRejected
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

    The request is either one ``spec``, the JSON of a
    :class:`~dblog_worker.dump_spec.DumpSpec` (what the DAGs pass: their ``check`` task
    builds the spec once and returns ``spec.to_json()``; a template rendered natively may
    give the object itself), or separate values (``scope``, ``tables``, ...), each a value
    or its text, which the operator builds a spec of (:func:`~dblog_airflow.hooks.dblog.spec_of`).

    A filtered dump reads only the rows that meet every condition of ``where`` and, for one
    table, lie in the key range ``from_key`` to ``to_key`` (both included). The values are
    templated, so a scheduled dump can read the rows of its interval::

        DblogDumpOperator(
            task_id="submit", scope="tables", tables=["public.orders"],
            where=[{"column": "updated_at", "op": ">=", "value": "{{ data_interval_start }}"}],
        )

    :param spec: The dump, as a spec's JSON (templated); the values below are then left
        out, but for ``keys_file`` (the keys of a spec made without them:
        ``spec.to_json(keys=False)``).
    :param scope: ``"all"``, ``"tables"`` or ``"keys"`` (templated). ``"all"`` dumps every
        table of the worker's configuration (the connection's ``config``).
    :param tables: Table names, a list or its JSON text (templated).
    :param keys: For scope ``"keys"``: primary keys of the one table, a list or its JSON
        text, ``[1, 2]`` or ``[[1, "a"], [2, "b"]]`` (templated).
    :param keys_file: For scope ``"keys"``, instead of ``keys``: a JSON file holding them (a
        list, or an object with a ``"keys"`` list), as a path or an object-storage URL that
        ``ObjectStoragePath`` reads (``s3://…``; templated; empty: ``keys`` is used). Large
        key sets travel so, not through XCom.
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
    :param priority: ``"urgent"``, ``"normal"`` or ``"background"``: its share of the
        worker's windows while other dumps run, and its place in the queue (templated;
        empty: urgent for scope ``"keys"``, else normal).
    :param new_request_on_clear: A re-run after the DAG run was cleared queues a new request
        instead of re-attaching to the first (automatic retries still re-attach).
    :param dblog_conn_id: The ``dblog`` connection (templated).
    """

    template_fields: Sequence[str] = ("spec", "scope", "tables", "keys", "keys_file",
                                      "chunk_size", "delay_ms", "parallelism", "where",
                                      "from_key", "to_key", "throttle", "priority",
                                      "dblog_conn_id")
    ui_color = "#d6e8f2"
    operator_extra_links = (DblogLiveViewLink(),)

    def __init__(self, *, spec: str | Mapping[str, Any] | None = None, scope: str = "",
                 tables: str | Sequence[str] = (), keys: object = None,
                 keys_file: str = "", chunk_size: int | str = DEFAULT_CHUNK_SIZE,
                 delay_ms: int | str = 0,
                 parallelism: int | str = 1, where: object = None, from_key: object = None,
                 to_key: object = None, throttle: Mapping[str, int | str] | None = None,
                 priority: str | None = None,
                 dblog_conn_id: str = DEFAULT_CONN_ID, new_request_on_clear: bool = False,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if (spec is None) == (not scope):
            raise ValueError("DblogDumpOperator takes a spec (a DumpSpec's JSON) or a scope "
                             "with its values, one of the two")
        self.new_request_on_clear = new_request_on_clear
        self.spec = spec
        self.priority = priority
        self.scope = scope
        self.tables = tables
        self.keys = keys
        self.keys_file = keys_file
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
                request = hook.create(self._spec(context))
            DblogLiveViewLink.persist(context, hook)
        finally:
            hook.close()
        return request.id

    def _spec(self, context: Context) -> DumpSpec:
        """The dump: the spec given (its keys from ``keys_file`` when set), or one built of
        the separate values; with the task instance's client token."""
        token = client_token(context, self.new_request_on_clear)
        if self.spec is not None:
            if self.keys_file:
                return DumpSpec.from_json(self.spec, keys=self._keys_from_file(),
                                          client_token=token)
            return DumpSpec.from_json(self.spec, client_token=token)
        keys = self._keys_from_file() if self.keys_file else self.keys
        return spec_of(self.scope, self.tables, keys, chunk_size=self.chunk_size,
                       delay_ms=self.delay_ms, client_token=token,
                       parallelism=self.parallelism, where=self.where,
                       from_key=self.from_key, to_key=self.to_key, throttle=self.throttle,
                       priority=self.priority)

    def _keys_from_file(self) -> object:
        """The keys of ``keys_file``: a JSON list, or an object with a ``"keys"`` list. A file
        that cannot be read fails the task with retries; one that holds no keys, without."""
        from airflow.sdk import ObjectStoragePath

        try:
            text = ObjectStoragePath(self.keys_file).read_text()
        except OSError as exc:
            raise AirflowException(f"the keys file {self.keys_file} cannot be read: {exc}") \
                from None
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise RequestRejected(f"the keys file {self.keys_file} is not JSON: {exc}") \
                from None
        keys = data.get("keys") if isinstance(data, dict) else data
        if not isinstance(keys, list):
            raise RequestRejected(f"the keys file {self.keys_file} holds no list of keys (a "
                                  'JSON list, or an object with a "keys" list)')
        self.log.info("%d key(s) read from %s", len(keys), self.keys_file)
        return keys
