"""Dump requests as the worker meets them: it follows the head of the queue
(:func:`follow_queue`) and checks a request when it reaches it (:func:`refusal`): its
tables are still dumpable, its saved progress fits their keys, its record in Redis is
whole; a request refused here fails with the reason, and the log goes on. It also makes
requests of its own: a primary-key dump of rows the log cut short (:func:`queue_repairs`),
and a pruning dump of tables a foreign-key cascade changed where no event says how
(:func:`queue_prunes`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping

from dblog_worker.chunks import PLANNERS
from dblog_worker.dialect import Dialect
from dblog_worker.dump import ActiveDump
from dblog_worker.errors import ChunkStale, CorruptRequest, DumpFailed, RequestRejected
from dblog_worker.requests import (
    DEFAULT_CHUNK_SIZE,
    DumpKind,
    DumpRequest,
    KeyTexts,
    MalformedRequest,
    RequestState,
    TableProgress,
    repair_token,
)
from dblog_worker.source import Tables
from dblog_worker.state import StateStore
from dblog_worker.telemetry import Telemetry

log = logging.getLogger(__name__)


def refusal(state: StateStore, tables: Tables, request: DumpRequest,
            progress: dict[str, TableProgress]) -> str | None:
    """Why a request cannot run (a table of a new one not dumpable; a saved key that
    does not fit its table's key), or None; :class:`CorruptRequest` where its record
    in Redis cannot be right."""
    progress_key = state.key("request", request.id, "progress")
    for saved in progress.values():
        saved.check(request, key=progress_key)
    if request.state is RequestState.QUEUED:
        for table in request.tables:
            try:
                tables.key_arity(table)
            except (DumpFailed, RequestRejected) as exc:
                return str(exc)
    for saved in progress.values():
        for name, key in (("last_key", saved.last_key), ("upper_bound", saved.upper_bound)):
            if saved.done or key is None:
                continue
            try:
                arity = tables.key_arity(saved.table)
            except (DumpFailed, RequestRejected) as exc:
                return str(exc)
            misfit = f"{len(key)} value(s) for a key of {arity} column(s)"
            try:
                if len(key) == arity:
                    tables.check_keys(saved.table, [tuple(key)])
                    continue
            except RequestRejected as exc:
                misfit = str(exc)
            return (f"the saved progress of {saved.table} ({progress_key}) has {name} "
                    f"{key} that does not fit the table's primary key ({misfit}): the key "
                    "changed during the dump, or the record was edited; request a new "
                    "dump of the table")
    problem = PLANNERS[request.kind].check(request, lambda: state.key_count(request.id))
    if problem is not None:
        raise CorruptRequest(request.id, state.key("request", request.id, "keys"), "",
                             problem)
    return None


def follow_queue(state: StateStore, tables: Tables, telemetry: Telemetry,
                 dump: ActiveDump | None) -> ActiveDump | None:
    """Follow the head of the queue: the dump to run now. Take a request up (checked:
    :func:`refusal`), or give the running dump its state and knobs. A request whose record
    in Redis is malformed fails and leaves the queue (``StateStore.quarantine``: even with a
    state that is garbage); the next one runs, and the log goes on."""
    try:
        request = state.next_request()
        if dump is not None and (request is None or request.id != dump.id):
            log.info("dump %s is no longer active", dump.id, extra={"request_id": dump.id})
            telemetry.dump_ended(dump.id, "inactive")
            dump = None
        if request is None:
            return dump
        if dump is not None:
            dump.request = request
            return dump
        if request.state.terminal:  # ended, yet still in the queue: take it out
            state.quarantine(request.id, "")
            log.warning("dump %s is %s but was still queued; removed from the queue",
                        request.id, request.state.value, extra={"request_id": request.id})
            return None
        progress = state.progress(request.id)
        problem = refusal(state, tables, request, progress)
        if problem is not None:
            state.transition(request.id, RequestState.FAILED, error=problem)
            log.warning("dump %s refused: %s", request.id, problem,
                        extra={"request_id": request.id})
            telemetry.error("DumpRefused", problem, request.id)
            return None
        if request.state is RequestState.QUEUED:
            try:
                state.transition(request.id, RequestState.RUNNING)
            except RequestRejected:
                return None
            request = state.get_request(request.id)
            log.info("dump %s started: %s %s", request.id, request.kind.value,
                     ", ".join(request.tables), extra={"request_id": request.id})
        dump = ActiveDump(request, progress)
        state.save_progress(None, {request.id: dump.take_unsaved()[0]}, {})
        telemetry.dump_started(dump)
        return dump
    except ChunkStale as exc:  # a table's columns are changing: look again next time
        log.info("dump request not started yet: %s", exc)
        return dump
    except CorruptRequest as exc:
        if dump is not None and dump.id == exc.request_id:
            telemetry.dump_ended(exc.request_id, "failed", str(exc))
            dump = None
        state.quarantine(exc.request_id, str(exc))
        log.error("dump %s failed: %s", exc.request_id, exc,
                  extra={"request_id": exc.request_id})
        telemetry.error("CorruptRequest", str(exc), exc.request_id)
        return dump


def queue_repairs(state: StateStore, dialect: Dialect,
                  incomplete: Mapping[str, Mapping[KeyTexts, None]],
                  checkpoint: str | None) -> None:
    """Queue a primary-key dump of rows the log left incomplete, before the checkpoint
    moves past them: the dump reads them whole, later, inside a window. One dump per
    batch of keys; the same batch again (a replay after a restart) queues none."""
    for table, keys in incomplete.items():
        batch = list(keys)
        try:
            request = state.create_request(
                DumpKind.KEYS, [table], chunk_size=DEFAULT_CHUNK_SIZE, delay_ms=0,
                keys=batch, client_token=repair_token(table, checkpoint, batch))
        except CorruptRequest as exc:  # the token's request is malformed: a new one
            log.warning("%s; queuing the repair of %s without a client token", exc, table)
            request = state.create_request(
                DumpKind.KEYS, [table], chunk_size=DEFAULT_CHUNK_SIZE, delay_ms=0,
                keys=batch)
        log.warning(
            "%d change(s) of %s came without their whole row (%s): dump %s reads them",
            len(keys), table, dialect.incomplete_rows_hint(), request.id,
            extra={"request_id": request.id},
        )


def queue_prunes(state: StateStore, tables: Iterable[str]) -> list[DumpRequest]:
    """Queue a pruning dump of each table (a foreign-key cascade changed rows no event
    names), unless one is queued already and has not started: it prunes from a low
    watermark after these cascades. Returns the requests queued now."""
    waiting = {request.tables[0] for request in state.list_records(active_only=True)
               if not isinstance(request, MalformedRequest) and request.prune
               and request.state is RequestState.QUEUED and len(request.tables) == 1}
    queued = []
    for table in sorted(set(tables) - waiting):
        request = state.create_request(DumpKind.TABLES, [table], chunk_size=DEFAULT_CHUNK_SIZE,
                                       delay_ms=0, prune=True)
        log.warning("a foreign-key cascade changed rows of %s that no event names: dump %s "
                    "prunes it", table, request.id, extra={"request_id": request.id})
        queued.append(request)
    return queued
