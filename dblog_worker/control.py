"""Dump requests as every front end makes and shows them: the CLI and the HTTP API.

:func:`create_dump` checks a request against the source (captured tables that still
exist and have a primary key; keys that fit the key columns) before it is queued, so
a bad request is refused at once instead of failing in the worker later.

A request whose record in Redis is malformed (its hash, progress or keys: see
:class:`~dblog_worker.errors.CorruptRequest`) is shown as such, with the key, the field
and what is wrong (:func:`malformed_json`), and the others are shown as usual.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from dblog_worker.config import Config, SourceConfig
from dblog_worker.dialect import dialect, open_source
from dblog_worker.errors import CorruptRequest, DumpFailed, RequestRejected
from dblog_worker.requests import (
    DumpKind,
    DumpRequest,
    KeyTexts,
    MalformedRequest,
    TableProgress,
    check_chunk_size,
    check_delay_ms,
    parse_keys,
)
from dblog_worker.state import StateStore

SOURCE_CONNECT_TIMEOUT_S = 10  # a source that does not answer refuses the request, in time
NO_KEYS = object()  # not a primary-key dump (JSON null is None: keys, and wrong)


def create_dump(
    config: Config,
    state: StateStore,
    *,
    tables: Sequence[str] | None,
    keys: object = NO_KEYS,
    chunk_size: int,
    delay_ms: int,
    client_token: str | None = None,
) -> DumpRequest:
    """Check a dump request against the source, then queue it.

    ``tables`` None dumps every captured table; ``keys`` (JSON-like: ``[1, 2]`` or
    ``[[1, "a"]]``), when given, makes it a primary-key dump of its one table. With a
    ``client_token`` already used, the request made with it is returned.
    Raises :class:`RequestRejected` (nothing queued) or a transient error.
    """
    check_chunk_size(chunk_size)
    check_delay_ms(delay_ms)
    names = list(config.source.tables) if tables is None else list(dict.fromkeys(tables))
    kind = DumpKind.ALL if tables is None else DumpKind.TABLES
    parsed: list[KeyTexts] = []
    source = open_source(_with_connect_timeout(config.source), lambda table, schema: 0)
    source.connect()
    try:
        arities = []
        for table in names:
            try:
                arities.append(source.key_arity(table))  # refuses tables not captured,
            except DumpFailed as exc:  # gone, or without a key
                raise RequestRejected(str(exc)) from None
        if keys is not NO_KEYS:
            if len(names) != 1:
                raise RequestRejected("a primary-key dump names exactly one table")
            parsed = parse_keys(keys, arities[0])
            source.check_keys(names[0], parsed)
            kind = DumpKind.KEYS
    finally:
        source.close()
    return state.create_request(kind, names, chunk_size=chunk_size, delay_ms=delay_ms,
                                keys=parsed, client_token=client_token)


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
        "key_count": request.key_count,
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
