"""Dump requests as every front end makes, steers and shows them: the CLI, the HTTP API,
the Airflow hook and operators, the deferrable trigger.

:func:`create_dump` checks a request (a :class:`~dblog_worker.dump.spec.DumpSpec`, checked
when built) against the source (captured tables that still exist and have a primary key;
keys that fit the key columns) before it is queued, so a bad request is refused at once
instead of failing in the worker later. :func:`command` (pause, resume, cancel; and
:func:`command_async` for an event loop) and :func:`set_knobs` (chunk size, delay,
parallelism, throttle limits, priority: a :class:`~dblog_worker.dump.spec.Knobs`) are the
one way each front end steers a request.

A request whose record in Redis is malformed (its hash, progress or keys: see
:class:`~dblog_worker.errors.CorruptRequest`) is shown as such, with the key, the field
and what is wrong (:func:`malformed_json`), and the others are shown as usual.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from dblog_worker.config import Config, SourceConfig
from dblog_worker.control.store import StateStore
from dblog_worker.dialect import dialect, open_source
from dblog_worker.dump.requests import (
    COMMANDS,
    DumpKind,
    DumpRequest,
    KeyTexts,
    MalformedRequest,
    RequestState,
    TableProgress,
)
from dblog_worker.dump.spec import DumpSpec, Knobs
from dblog_worker.errors import CorruptRequest, DumpFailed, RequestRejected, SourceUnavailable

if TYPE_CHECKING:  # the CLI does without redis.asyncio
    from dblog_worker.control.async_requests import AsyncRequests

SOURCE_CONNECT_TIMEOUT_S = 10  # a source that does not answer refuses the request, in time


def create_dump(config: Config | None, state: StateStore, spec: DumpSpec, *,
                unreachable: Callable[[SourceUnavailable], None] | None = None
                ) -> DumpRequest:
    """Check a dump request against the source, then queue it.

    Kind ``all`` dumps every captured table; a ``keys`` dump's keys must fit its table's
    key columns. With a client token already used, the request made with it is returned.
    Raises :class:`RequestRejected` (nothing queued) or a transient error.

    Without ``config`` (an Airflow connection that names no worker configuration), only
    what needs no source is checked (the keys' shape; kind ``all`` is refused: the captured
    tables are in the configuration); the worker checks the rest when it takes the request
    up. With ``unreachable``, a source that does not answer is reported to it and the
    request is queued so, instead of refused (the Airflow hook's choice).
    """
    if config is None:
        if spec.kind is DumpKind.ALL:
            raise RequestRejected("kind all needs the captured tables, which are in the "
                                  "worker's configuration: name it, or use kind tables and "
                                  "name the tables")
        tables, keys = spec.tables, spec.key_texts(spec.guessed_arity())
    else:
        tables = spec.table_names(captured_tables(config) if spec.kind is DumpKind.ALL
                                  else ())
        try:
            keys = source_keys(config, spec, tables)
        except SourceUnavailable as exc:
            if unreachable is None:
                raise
            unreachable(exc)
            keys = spec.key_texts(spec.guessed_arity())
    return state.create_request(spec.kind, tables, chunk_size=spec.chunk_size,
                                delay_ms=spec.delay_ms, keys=keys,
                                client_token=spec.client_token, parallelism=spec.parallelism,
                                row_filter=spec.row_filter, throttle=spec.throttle,
                                prune=spec.prune, priority=spec.queue_priority)


def command(state: StateStore, request_id: str, name: str) -> RequestState:
    """Pause, resume or cancel a request (``name``, one of :data:`COMMANDS`) if its state
    allows it; the state it was in. :class:`RequestRejected` when it does not (or there is
    no such request)."""
    if name not in COMMANDS:
        raise RequestRejected(f"unknown command {name!r}: {', '.join(COMMANDS)}")
    target, only_from = COMMANDS[name]
    return state.transition(request_id, target, only_from=only_from)


async def command_async(requests: AsyncRequests, request_id: str, name: str
                        ) -> RequestState | None:
    """:func:`command` from an event loop (Airflow's triggerer); None where the request's
    state does not allow it (it has ended, for a cancel)."""
    if name not in COMMANDS:
        raise RequestRejected(f"unknown command {name!r}: {', '.join(COMMANDS)}")
    return await requests.command(request_id, name)


def set_knobs(state: StateStore, request_id: str, knobs: Knobs) -> DumpRequest:
    """Change what ``knobs`` gives of a request that has not ended; the worker applies it
    from its next window (a priority: its next turn, and its place in the queue)."""
    return state.set_knobs(request_id, chunk_size=knobs.chunk_size, delay_ms=knobs.delay_ms,
                           parallelism=knobs.parallelism, throttle=knobs.throttle,
                           priority=knobs.priority)


def describe_knobs(request: DumpRequest) -> str:
    """One line of a request's knobs, as the front ends confirm a change."""
    return (f"{request.id}: priority {request.priority.value}, chunk size "
            f"{request.chunk_size}, delay {request.delay_ms} ms, parallelism "
            f"{request.parallelism}, throttle limits {request.throttle.describe()}")


def captured_tables(config: Config) -> list[str]:
    """The tables the source captures now (that exist): the names of ``source.tables``, or,
    when it holds patterns, the catalog's tables they match (the source is asked)."""
    selector = config.source.selector
    if not selector.has_patterns:
        return list(selector.names)
    source = open_source(_with_connect_timeout(config.source), lambda table, schema: 0)
    source.connect()
    try:
        return list(source.selection().existing)
    finally:
        source.close()


def source_keys(config: Config, spec: DumpSpec, tables: Sequence[str]) -> list[KeyTexts]:
    """Refuse tables the source does not capture, has dropped or has no key for, keys
    that do not fit the key columns, and a filter that does not apply to each table
    (checked by the source itself); the keys as text.
    :class:`~dblog_worker.errors.SourceUnavailable` when the source does not answer."""
    config.source.check_captured(tables)
    source = open_source(_with_connect_timeout(config.source), lambda table, schema: 0)
    source.connect()
    try:
        arities = []
        for table in tables:
            try:
                arities.append(source.tables.key_arity(table))  # refuses tables gone or keyless
            except DumpFailed as exc:
                raise RequestRejected(str(exc)) from None
        keys = spec.key_texts(arities[0])
        if keys:
            source.tables.check_keys(tables[0], keys)
        if spec.row_filter is not None:
            for table in tables:
                source.tables.check_filter(table, spec.row_filter)
        return keys
    finally:
        source.close()


def _with_connect_timeout(source: SourceConfig) -> SourceConfig:
    return dialect(source.kind).with_connect_timeout(source, SOURCE_CONNECT_TIMEOUT_S)


def request_json(request: DumpRequest, progress: dict[str, TableProgress]) -> dict[str, object]:
    """A request and its per-table progress: `dblog list --json` shows a list of these."""
    return {
        "id": request.id,
        "state": request.state.value,
        "kind": request.kind.value,
        "tables": list(request.tables),
        "chunk_size": request.chunk_size,
        "delay_ms": request.delay_ms,
        "parallelism": request.parallelism,
        "priority": request.priority.value,
        "throttle": request.throttle.limits(),
        "key_count": request.key_count,
        "filter": None if request.row_filter is None else request.row_filter.to_json(),
        "prune": request.prune,
        "created_at": request.created_at,
        "updated_at": request.updated_at,
        "error": request.error,
        "progress": {t: json.loads(p.to_json()) for t, p in progress.items()},
    }


def show_json(state: StateStore, request: DumpRequest) -> dict[str, object]:
    """What `dblog show --json` prints: a primary-key dump adds the keys it did not find."""
    document = request_json(request, state.progress(request.id))
    if request.kind is DumpKind.KEYS:
        document["missing_keys"] = [list(k) for k in state.missing_keys(request.id)]
    return document


Entry = tuple[DumpRequest, dict[str, TableProgress]] | MalformedRequest


def list_entries(state: StateStore, *, active_only: bool = False) -> list[Entry]:
    """Every request with its progress, oldest first: what `dblog list` shows; a request
    whose hash or progress is malformed as a :class:`MalformedRequest`."""
    return [entry_of(state, record) for record in state.list_records(active_only=active_only)]


def entry_of(state: StateStore, record: DumpRequest | MalformedRequest) -> Entry:
    """A request with its progress, or as malformed (its hash, or its progress, is)."""
    if isinstance(record, MalformedRequest):
        return record
    try:
        return record, state.progress(record.id)
    except CorruptRequest as exc:
        return MalformedRequest(record.id, exc, record.to_fields())


def entry_json(entry: Entry) -> dict[str, object]:
    """`dblog list --json` shows a list of these."""
    return malformed_json(entry) if isinstance(entry, MalformedRequest) else request_json(*entry)


def show_record_json(state: StateStore, request_id: str) -> dict[str, object]:
    """What `dblog show --json` prints for any request, a malformed one too (RequestRejected
    if there is no such request)."""
    record = state.get_record(request_id)
    if isinstance(record, MalformedRequest):
        return malformed_json(record)
    try:
        return show_json(state, record)
    except CorruptRequest as exc:  # its progress or its list of missing keys
        return malformed_json(MalformedRequest(record.id, exc, record.to_fields()))


def malformed_json(record: MalformedRequest) -> dict[str, object]:
    """A request whose record is malformed: where and what is wrong (``malformed``), the
    whole message with what to do (``error``), and what its hash holds (``fields``)."""
    error = record.error
    return {
        "id": record.id,
        "malformed": {"key": error.key, "field": error.field, "reason": error.reason},
        "error": str(error),
        "fields": dict(record.fields),
    }
