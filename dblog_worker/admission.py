"""Dump requests as the worker meets them: it follows the head of the queue, by priority
then age (:func:`follow_requests`), and checks a request when it takes it up
(:func:`refusal`): its tables are still dumpable, its saved progress fits their keys, its
record in Redis is whole; a request refused here fails with the reason, and the log goes
on. It also makes requests of its own, urgent ones (repairs): a primary-key dump of rows
the log cut short (:func:`queue_repairs`), and a pruning dump of tables a foreign-key
cascade changed where no event says how (:func:`queue_prunes`).
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
    Priority,
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


def follow_requests(state: StateStore, tables: Tables, telemetry: Telemetry,
                    dumps: Mapping[str, ActiveDump], slots: int, *,
                    whole_queue: bool = False) -> dict[str, ActiveDump]:
    """The dumps to run now, by priority then age: up to ``slots`` requests queued or
    running (a new one checked by :func:`refusal` and moved to ``running``), and the paused
    ones this worker holds. A running dump beyond the slots (more urgent requests came) is
    *parked*: it keeps its state and progress and runs again when a slot frees. Each dump
    held gets its request's state and knobs; one that ended (cancelled) is dropped. A
    request whose record in Redis is malformed fails and leaves the queue
    (``StateStore.quarantine``, even with a state that is garbage); the others run on, and
    the log goes on.

    ``whole_queue`` (a session's first call) reads every request of the queue, not only
    its head: the running ones beyond the slots (parked when the last session ended) are
    held again, parked, so that every running request is this worker's from then on."""
    following: dict[str, ActiveDump] = {}
    head = state.queue_head(QUEUE_ALL if whole_queue else slots)
    queued = {r.id for r in head}
    records: dict[str, DumpRequest | MalformedRequest | None] = {r.id: r for r in head}
    records.update(state.get_records([i for i in dumps if i not in records]))
    free = slots
    for request_id, record in records.items():
        dump = dumps.get(request_id)
        if isinstance(record, MalformedRequest):
            _quarantine(state, telemetry, record.error, dump)
            continue
        if record is None or record.state.terminal:
            if dump is not None:
                log.info("dump %s is no longer active", request_id,
                         extra={"request_id": request_id})
                telemetry.dump_ended(request_id, "inactive")
            if record is not None and request_id in queued:
                state.quarantine(record.id, "")  # ended, yet still in the queue
                log.warning("dump %s is %s but was still queued; removed from the queue",
                            record.id, record.state.value, extra={"request_id": record.id})
            continue
        if dump is not None:
            dump.request = record
            if record.state is RequestState.PAUSED:
                dump.parked = None
            elif free > 0:
                free -= 1
                dump.parked = None
            elif dump.parked is None:
                _park(dump, slots)
            following[request_id] = dump
        elif record.state is RequestState.RUNNING or (record.state is RequestState.QUEUED
                                                      and free > 0):
            taken = _take_up(state, tables, telemetry, record)
            if taken is None:
                continue
            if free > 0:
                free -= 1
            else:
                _park(taken, slots)
            following[request_id] = taken
    return following


QUEUE_ALL = 1 << 30  # as many requests as the queue holds


def _park(dump: ActiveDump, slots: int) -> None:
    dump.parked = (f"a slot: {slots} request(s) of higher priority or older run ([worker] "
                   "max_active_dumps)")
    log.info("dump %s waits for %s", dump.id, dump.parked, extra={"request_id": dump.id})


def _take_up(state: StateStore, tables: Tables, telemetry: Telemetry,
             request: DumpRequest) -> ActiveDump | None:
    """Start a queued request (or go on with a running one, in a new session): checked
    (:func:`refusal`), moved to ``running``, its saved progress read."""
    try:
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
            log.info("dump %s started: %s %s (%s)", request.id, request.kind.value,
                     ", ".join(request.tables), request.priority.value,
                     extra={"request_id": request.id})
        dump = ActiveDump(request, progress)
        state.save_progress(None, {request.id: dump.take_unsaved()[0]}, {})
        telemetry.dump_started(dump)
        return dump
    except ChunkStale as exc:  # a table's columns are changing: look again next time
        log.info("dump request %s not started yet: %s", request.id, exc,
                 extra={"request_id": request.id})
        return None
    except CorruptRequest as exc:
        _quarantine(state, telemetry, exc, None)
        return None


def _quarantine(state: StateStore, telemetry: Telemetry, exc: CorruptRequest,
                dump: ActiveDump | None) -> None:
    if dump is not None:
        telemetry.dump_ended(exc.request_id, "failed", str(exc))
    state.quarantine(exc.request_id, str(exc))
    log.error("dump %s failed: %s", exc.request_id, exc, extra={"request_id": exc.request_id})
    telemetry.error("CorruptRequest", str(exc), exc.request_id)


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
                keys=batch, client_token=repair_token(table, checkpoint, batch),
                priority=Priority.URGENT)
        except CorruptRequest as exc:  # the token's request is malformed: a new one
            log.warning("%s; queuing the repair of %s without a client token", exc, table)
            request = state.create_request(
                DumpKind.KEYS, [table], chunk_size=DEFAULT_CHUNK_SIZE, delay_ms=0,
                keys=batch, priority=Priority.URGENT)
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
                                       delay_ms=0, prune=True, priority=Priority.URGENT)
        log.warning("a foreign-key cascade changed rows of %s that no event names: dump %s "
                    "prunes it", table, request.id, extra={"request_id": request.id})
        queued.append(request)
    return queued
