"""Dump requests as every front end makes and shows them: the CLI and the HTTP API.

:func:`create_dump` checks a request against the source (captured tables that still
exist and have a primary key; keys that fit the key columns) before it is queued, so
a bad request is refused at once instead of failing in the worker later.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence

from psycopg.conninfo import conninfo_to_dict, make_conninfo

from dblog_worker.config import MYSQL, Config, SourceConfig
from dblog_worker.errors import DumpFailed, RequestRejected
from dblog_worker.requests import (
    DumpKind,
    DumpRequest,
    KeyTexts,
    TableProgress,
    check_chunk_size,
    check_delay_ms,
    parse_keys,
)
from dblog_worker.source import open_source
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
    if source.kind == MYSQL or "connect_timeout" in conninfo_to_dict(source.dsn):
        return source
    return dataclasses.replace(source, dsn=make_conninfo(
        source.dsn, connect_timeout=SOURCE_CONNECT_TIMEOUT_S))


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
