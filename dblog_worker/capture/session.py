"""A session: one connected run of the capture loop, from the saved checkpoint until a
failure or a stop.

One thread does everything, in this order, again and again:

1. read what the log has (``LogReader.poll``) and pass each event to the output and to
   the reconciler; a high watermark releases the surviving chunk rows;
2. if a running dump can open a window (its delay has passed, fewer windows are open
   than allowed), the one the scheduler picks (:mod:`dblog_worker.dump.schedule`: shares by
   priority) writes LW, selects its chunk, writes HW (the only time the log waits); the
   chunk's rows are encoded to JSON by a second thread meanwhile, needed only when HW
   comes back;
3. every flush interval (or when the buffer is full, or a dump's last window has
   closed): commit the output, then save the checkpoint and the progress the output
   now covers, then confirm the log;
4. every control interval: read the requests to run, their states and knobs, from Redis.

A session ends on any transient failure (source or Redis gone): buffered output is
dropped, and the next session starts over from the saved checkpoint and progress.
Replayed events that are already durable are dropped by the output buffer.
"""

from __future__ import annotations

import gc
import json
import logging
import math
import os
import socket
import time
import uuid
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Protocol

from dblog_worker.capture.follower import TableFollower
from dblog_worker.capture.output import OutputBuffer, landing_errors
from dblog_worker.capture.schemas import SchemaRegistry
from dblog_worker.capture.startup import check_landed, refuse_lost_state
from dblog_worker.capture.window import Reconciler, WindowClosed
from dblog_worker.config import Config
from dblog_worker.control.lease import Lease
from dblog_worker.control.store import StateStore
from dblog_worker.dialect import dialect
from dblog_worker.dump.active import ActiveDump, WindowRead
from dblog_worker.dump.admission import follow_requests, queue_prunes, queue_repairs
from dblog_worker.dump.pacing import Pacer
from dblog_worker.dump.plans import NOTHING_READ, BoundRead, KeyColumn
from dblog_worker.dump.requests import (
    KeyTexts,
    RequestState,
    TableProgress,
)
from dblog_worker.dump.schedule import Ready, Scheduler
from dblog_worker.errors import (
    ChunkStale,
    DblogError,
    RequestRejected,
    SourceUnavailable,
    TransientError,
)
from dblog_worker.events import (
    Cascaded,
    ChangeEvent,
    Checkpoint,
    Encoded,
    IncompleteRow,
    LogItem,
    Op,
    Origin,
    PendingRows,
    Unseen,
    Watermark,
)
from dblog_worker.foreign_keys import prune_image
from dblog_worker.landing.sink import Sink
from dblog_worker.position import Position
from dblog_worker.source import SchemaVersion, Source
from dblog_worker.tables import not_ready
from dblog_worker.telemetry import Telemetry

log = logging.getLogger(__name__)

MAX_OPEN_WINDOWS = 2  # chunks read ahead while earlier windows' watermarks travel
WRITE_POLL_S = 0.005  # how often the loop looks whether a write in flight is durable
DRAIN_S = 5.0  # at a stop, how long an open window may take to close before it is abandoned


def dump_status(dump: ActiveDump) -> dict[str, object]:
    """What the status hash says of a dump the worker runs (``dblog status``, ``show``)."""
    request = dump.request
    return {
        "state": request.state.value,
        "priority": request.priority.value,
        "waiting": dump.why_waiting or "",
        "throttle": dump.throttle.describe() if request.throttle.on else "",
        "throttle_ms": round(dump.throttle.delay_ms),
    }


def _dump_failure(dump: ActiveDump, exc: Exception) -> str:
    """Why a dump fails: the error's own message, or, for one dblog did not expect, its
    type and message (the traceback goes to the log)."""
    if isinstance(exc, DblogError):
        return str(exc)
    log.error("dump %s failed on an unexpected error; the log goes on", dump.id,
              exc_info=exc, extra={"request_id": dump.id})
    return (f"unexpected {type(exc).__name__}: {exc} (the worker's log has the traceback; "
            "please report it)")


@dataclass(frozen=True, slots=True)
class Ending:
    """A dump whose every closed window is in a write: done, or failed, once it is durable."""

    dump: ActiveDump
    finished: bool
    failure: str | None


@dataclass
class Covered:
    """What a write covers: saved to Redis, and confirmed to the source, once it is durable."""

    checkpoint: str | None
    incomplete: dict[str, dict[KeyTexts, None]]
    endings: list[Ending] = field(default_factory=list)
    progress: dict[str, list[TableProgress]] = field(default_factory=dict)
    missing: dict[str, list[KeyTexts]] = field(default_factory=dict)
    prunes: set[str] = field(default_factory=set)  # tables to prune (foreign-key cascades)


SourceFactory = Callable[[Config, SchemaVersion], Source]


class Host(Protocol):
    """What a session needs of the worker that runs it (:class:`.worker.Worker`)."""

    @property
    def config(self) -> Config: ...
    @property
    def adopt_slot(self) -> bool: ...
    @property
    def source_factory(self) -> SourceFactory: ...
    @property
    def sink(self) -> Sink: ...
    @property
    def schemas(self) -> SchemaRegistry: ...
    @property
    def telemetry(self) -> Telemetry: ...
    @property
    def lease(self) -> Lease: ...
    @property
    def http_url(self) -> str: ...
    @property
    def ending(self) -> bool:
        """The session should end (the worker stops, or a new configuration waits)."""

    def publish_member(self, role: str) -> None:
        """Report this worker in Redis (its role, where its HTTP API listens)."""


class Session:
    """One connected run: from the saved checkpoint until a failure or a stop."""

    def __init__(self, worker: Host) -> None:
        self.worker = worker
        self.config = worker.config
        self.run_id = uuid.uuid4().hex[:12]
        self.state = StateStore(self.config.redis_url, self.config.source.name)
        assert worker.lease.token is not None, "a session runs only while the lease is held"
        self.token = worker.lease.token
        self.state.fence(self.token)
        self.source = worker.source_factory(self.config, worker.schemas.version)
        self.dialect = dialect(self.config.source.kind)
        self.reconciler = Reconciler(self.run_id)
        self.output: OutputBuffer | None = None
        self.dumps: dict[str, ActiveDump] = {}  # the requests this session runs, by id
        self.scheduler = Scheduler()  # whose turn the next window is
        self.queue_read = False  # the whole queue was read once (the session's first control)
        self.checkpoint: str | None = None  # durable and saved
        self.pending_checkpoint: str | None = None  # covered by the buffered output
        self.started_at = time.time()
        self.last_flush = self.last_control = self.last_status = self.last_heartbeat = 0.0
        self.last_events_flush = 0.0  # the last write that carried events
        self.last_renew = time.monotonic()
        self.windows = 0
        self.incomplete: dict[str, dict[KeyTexts, None]] = {}  # keys to dump: rows the log cut
        self.prunes: set[str] = set()  # tables to prune: cascades no event says (foreign_keys)
        # the open windows' chunks (keys, rows) and the log's end once their HW committed
        self.window_rows: deque[tuple[Future[Encoded], Position]] = deque()
        self.encoder = ThreadPoolExecutor(1, thread_name_prefix="dblog-encode")
        self.in_flight: Covered | None = None  # what the write in flight covers
        self.ended: set[str] = set()  # the dumps whose ending write was submitted
        # the dumps' automatic throttles, between windows
        self.pacer = Pacer(self.source.pressure, self.source.log)
        self.readers: dict[str, str] = {}  # which implementation reads what (Setup.readers)
        self.tables = TableFollower(self.state, self.source, self.config.source,
                                    worker.telemetry)  # the captured tables, as they change

    def run(self) -> None:
        try:
            self._start()
            while not self.worker.ending:
                self._step()
            self._drain()
            self._flush()
            log.info("stopped at checkpoint %s", self.checkpoint)
            # `dblog reset` and `dblog status` tell a clean stop from a worker still running
            self.state.publish_status({"role": "stopped", "updated_at": time.time()})
        finally:
            self.encoder.shutdown(cancel_futures=True)
            if self.output is not None:
                self.output.close()  # a write in flight ends before the next session starts
            self.source.close()
            self.state.close()

    def _start(self) -> None:
        self.state.ensure_layout()
        with landing_errors():
            ran_before = self.worker.sink.capture_started()
            self.worker.sink.fence(self.token)  # from here on, only this worker publishes
            landed = self.worker.sink.recover()
        self.source.connect()
        check_landed(self.config, self.source.log, self.worker.sink, landed)
        saved = self.state.checkpoint()
        if saved is None and not self.worker.adopt_slot:
            lost = (ran_before or bool(landed)) and not self.state.was_reset()
            refuse_lost_state(self.config, self.source, self.worker.sink, lost)
        problems = self.source.preflight()
        for problem in problems:
            if not problem.capture:  # the log goes on (without that table, or its dumps)
                log.warning("%s (fix: %s)", problem.what, problem.fix)
        if any(problem.capture for problem in problems):
            raise not_ready([problem for problem in problems if problem.capture])
        created = self.source.prepare()
        self._renew(time.monotonic())
        first = saved is None and created is not None  # capture begins now
        if saved is None and created is not None:
            saved = created
            self.state.save_progress(saved, {}, {})
        self.checkpoint = self.source.log.start(saved, max(landed.values(), default=None))
        with landing_errors():
            self.worker.sink.mark_capture_started()
        self.output = OutputBuffer(self.worker.sink, landed)
        self.tables.start(first)
        log.info("session %s streaming %s from %s (lease token %d)", self.run_id,
                 self.config.source.safe_dsn(), self.checkpoint, self.token)
        self.readers = self.source.readers()
        self.worker.telemetry.session_started(self.run_id, self.checkpoint, self.readers)
        self._renew(time.monotonic())
        self._publish_status()  # at once: the new token, for whoever waits for a takeover
        self.last_status = time.monotonic()
        self._control(time.monotonic())
        # Up to a buffer of events stays alive between flushes: collect rarely, and never
        # walk the objects of the start-up again (15-25 % of the CPU otherwise).
        gc.set_threshold(50_000, 20, 100)
        gc.collect()
        gc.freeze()

    def _renew(self, now: float) -> None:
        self.worker.lease.renew()
        self.last_renew = now

    def _drain(self) -> None:
        """At a stop: let the open windows close (no new one opens), for a few seconds."""
        deadline = time.monotonic() + min(DRAIN_S, self.config.shutdown_timeout_s / 3)
        while self.reconciler.open_windows and time.monotonic() < deadline:
            self._step()
        if self.reconciler.open_windows:
            log.info("stopping with %d window(s) open: abandoned, their chunks are read again "
                     "by the next leader", self.reconciler.open_windows)

    # -- the loop -------------------------------------------------------------

    def _step(self) -> None:
        assert self.output is not None
        now = time.monotonic()
        items: list[LogItem] = []
        self.source.log.poll(self._poll_timeout(now), items)
        output, reconciler, telemetry = self.output, self.reconciler, self.worker.telemetry
        add, on_change, watching = output.add, reconciler.on_change, reconciler.watching
        for item in items:
            if type(item) is ChangeEvent:
                add(item)
                if watching:
                    on_change(item)
            elif type(item) is Checkpoint:
                self.pending_checkpoint = self.source.log.encode_checkpoint(item)
                if self.window_rows and item.position > self.window_rows[0][1]:
                    raise SourceUnavailable(
                        "the log went past the high watermark without it: is the watermark "
                        "table still in the publication? The next session restores it"
                    )
            elif type(item) is Watermark:
                closed = reconciler.on_watermark(item)
                watching = reconciler.watching
                if closed is not None:
                    self._emit_survivors(closed)
                    closed_dump = self.dumps.get(closed.dump_id)
                    if closed_dump is not None:
                        finished = closed_dump.window_closed(closed, time.monotonic())
                        if finished is not None:
                            self._emit_prune(closed, finished)
                    telemetry.window_closed(closed)
            elif type(item) is Unseen:
                reconciler.on_unseen(item)
            elif type(item) is IncompleteRow:
                self.incomplete.setdefault(item.table, {})[item.key] = None
            elif type(item) is Cascaded:
                self.prunes.update(item.tables)
        telemetry.polled(items, self.pending_checkpoint, output.log_events_by_table)
        now = time.monotonic()
        if now - self.last_control >= self.config.control_interval_s:
            self._control(now)
        for dump in self.dumps.values():
            if self.pacer.due(dump, now):
                self.pacer.pace(dump, now)
        chosen = self._next_window(now)
        if chosen is not None:
            self._window(chosen)
        if self.in_flight is not None and (
            not output.writing or output.count >= self.config.flush_max_events
        ):
            self._complete()  # waits only when the next batch is full already
        if self.in_flight is None and (
            output.count >= self.config.flush_max_events
            or self._write_due(now)
            or any(d.ending and d.id not in self.ended for d in self.dumps.values())
        ):
            self._submit()
        if self.tables.due(now):
            self.tables.look(now)
        if now - self.last_heartbeat >= self.config.heartbeat_interval_s:
            self.source.watermarks.heartbeat()
            self.last_heartbeat = now
        if now - self.last_renew >= self.config.lease.renew_interval_s:
            self._renew(now)
        if now - self.last_status >= self.config.status_interval_s:
            self._publish_status()
            self.last_status = now

    def _emit_survivors(self, closed: WindowClosed) -> None:
        """Algorithm 1, step 7: the chunk rows no log event touched, at HW's position."""
        assert self.output is not None
        rows, _ = self.window_rows.popleft()
        dump = self.dumps.get(closed.dump_id)
        if rows.done() and rows.exception() is not None and dump is not None:
            failure = f"the rows of {closed.table} could not be encoded: {rows.exception()!r}"
            log.error("dump %s: %s", dump.id, failure, exc_info=rows.exception(),
                      extra={"request_id": dump.id})
            dump.failure = dump.failure or failure
            return
        if closed.survivors:
            self.output.add_rows(PendingRows(
                closed.table, rows, closed.survivors, len(closed.survivors),
                closed.high.position, closed.high.commit_ts_us, closed.schema_version,
                closed.dump_id, closed.replaced,
            ))

    def _emit_prune(self, closed: WindowClosed, table: TableProgress) -> None:
        """A pruning dump read the whole table: its prune event, right after the last
        window's rows. The output drops it if any row of the dump failed to encode."""
        assert self.output is not None and table.prune_from is not None
        self.output.add(ChangeEvent(
            table.table, Op.PRUNE, closed.high.position.dump_row(len(closed.survivors)),
            None, None, prune_image(table.prune_from), Origin.DUMP, closed.high.commit_ts_us,
            closed.schema_version, closed.dump_id))

    def _may_open(self, dump: ActiveDump, now: float) -> bool:
        """Whether ``dump`` could open a window at ``now``: running, its delay passed, and
        fewer of its windows open than it may have. Without a delay, its next window opens
        while the last one's watermarks are on their way; windows of other dumps may be
        open too, up to MAX_OPEN_WINDOWS in all (windows stay apart in the log: the next LW
        is written after the last HW)."""
        most = 1 if dump.paced else MAX_OPEN_WINDOWS
        return (not self.worker.ending and dump.runnable and now >= dump.next_window_at
                and len(dump.open_reads) < most and dump.current_table() is not None)

    def _next_window(self, now: float) -> ActiveDump | None:
        """The dump whose window opens now: of those that may, the scheduler's pick."""
        if self.reconciler.open_windows >= MAX_OPEN_WINDOWS:
            return None
        ready = [Ready(d.id, d.request.priority.weight,
                       (d.request.priority.rank, d.request.number))
                 for d in self.dumps.values() if self._may_open(d, now)]
        chosen = self.scheduler.pick(ready)
        return None if chosen is None else self.dumps[chosen.id]

    def _news(self) -> bool:
        """Whether a write would carry anything: events, a checkpoint, dump progress."""
        assert self.output is not None
        return (self.output.count > 0 or self.pending_checkpoint != self.checkpoint
                or bool(self.incomplete) or bool(self.prunes) or bool(self.dumps))

    def _next_write(self) -> float:
        """When the next write is due: an interval after the last write of events (events
        after a quiet spell go at once), or after any write for a checkpoint alone."""
        assert self.output is not None
        if self.output.count:
            return self.last_events_flush + self.config.flush_interval_s
        return self.last_flush + self.config.flush_interval_s if self._news() else math.inf

    def _write_due(self, now: float) -> bool:
        return now >= self._next_write()

    def _poll_timeout(self, now: float) -> float:
        deadline = min(self._next_write(), self.last_control + self.config.control_interval_s)
        if self.in_flight is not None:  # what the write covers is saved once it is durable
            deadline = max(min(deadline, now + WRITE_POLL_S), now + WRITE_POLL_S / 5)
        for dump in self.dumps.values():
            if self._may_open(dump, max(now, dump.next_window_at)):
                deadline = min(deadline, dump.next_window_at)
        return max(0.0, min(0.2, deadline - now))

    # -- dump windows -----------------------------------------------------------

    def _window(self, dump: ActiveDump) -> None:
        """Algorithm 1, steps 1-4: LW, chunk SELECT, HW; the log waits only here.

        Nothing a dump meets stops the log: a chunk the source calls stale is read again
        in a later window; any other error but a transient one (the session ends and
        resumes) fails the dump, and the log goes on."""
        if dump.current_table() is None:
            return
        try:
            if dump.start(self.source.chunks):  # a table dump reads its upper bound first
                return
            plan = dump.plan(lambda start, count: self.state.request_keys(dump.id, start, count))
            assert plan is not None
            self.source.tables.refresh(plan.table)  # a column added since is read too
        except ChunkStale as exc:
            log.info("dump %s: %s", dump.id, exc, extra={"request_id": dump.id})
            dump.waiting = str(exc)
            dump.read_later(time.monotonic())
            return
        except TransientError:
            raise
        except Exception as exc:
            dump.failure = _dump_failure(dump, exc)
            return
        tokens = self.reconciler.next_tokens()
        self.source.watermarks.write_watermark(tokens.low)
        read = WindowRead(plan, NOTHING_READ)
        try:
            self.source.watermarks.await_low_watermark()  # a read replica: until it replayed LW
            started = time.monotonic()
            read = WindowRead(plan, plan.read(self.source.chunks, self.encoder.submit))
            dump.chunk_ms = (time.monotonic() - started) * 1000
            dump.waiting = None
        except ChunkStale as exc:
            read = WindowRead(plan, NOTHING_READ, stale=True)
            dump.waiting = str(exc)
            log.info("dump %s: %s", dump.id, exc, extra={"request_id": dump.id})
        except TransientError:
            raise
        except Exception as exc:
            read = WindowRead(plan, NOTHING_READ, failure=_dump_failure(dump, exc))
        self.source.watermarks.write_watermark(tokens.high)
        chunk = read.chunk
        self.window_rows.append((chunk.rows, self.source.log.log_position()))
        self.reconciler.open(plan.table, tokens, KeyColumn(chunk.selected, chunk.rows),
                             dump.id, chunk.schema_version,
                             KeyColumn(chunk.selected, chunk.rows, 1),
                             bound=isinstance(plan, BoundRead))
        dump.window_opened(read)
        self.scheduler.opened(dump.id, dump.request.priority.weight)
        self.windows += 1
        self.worker.telemetry.window_opened(plan.table, dump.id, tokens.low, chunk.selected,
                                            chunk.rows if plan.first else None,
                                            priority=dump.request.priority.value)

    # -- durability -------------------------------------------------------------

    def _submit(self) -> None:
        """Hand the output to the writer, with what it covers: saved once it is durable."""
        assert self.output is not None and self.in_flight is None
        covered = Covered(checkpoint=self.pending_checkpoint, incomplete=self.incomplete,
                          prunes=self.prunes)
        self.incomplete = {}
        self.prunes = set()
        for dump in self.dumps.values():
            if dump.ending:
                self.ended.add(dump.id)  # this write ends it: no more writes out of turn
            if not dump.open_reads:
                covered.endings.append(Ending(dump, dump.finished, dump.failure))
            tables, keys = dump.take_unsaved()
            if tables:  # copies: later windows change the live ones
                covered.progress[dump.id] = list(tables)  # immutable: the values as they are now
            if keys:
                covered.missing[dump.id] = keys
        if self.output.count:
            self.last_events_flush = time.monotonic()
        with landing_errors():  # the write before, if its failure was not seen yet
            self.output.submit()
        self.in_flight = covered
        self.worker.telemetry.submitted()
        for dump in self.dumps.values():
            self.worker.telemetry.dump_progress(dump)
        self.last_flush = time.monotonic()

    def _complete(self) -> None:
        """Once the write is durable: save the checkpoint and progress, then confirm the log."""
        assert self.output is not None
        covered, self.in_flight = self.in_flight, None
        if covered is None:
            return
        with landing_errors():
            self.output.wait()
        failed = self.output.failed  # rows that failed to encode, by dump
        for dump_id, failure in failed.items():
            if dump_id in self.dumps:
                self.dumps[dump_id].failure = self.dumps[dump_id].failure or failure
        queue_repairs(self.state, self.dialect, covered.incomplete, covered.checkpoint)
        if covered.prunes:
            queue_prunes(self.state, covered.prunes)
        checkpoint = covered.checkpoint
        if checkpoint == self.checkpoint:
            checkpoint = None
        if checkpoint is not None or covered.progress or covered.missing:
            self.state.save_progress(checkpoint, covered.progress, covered.missing)
        if checkpoint is not None:
            self.checkpoint = checkpoint
            self.source.log.confirm(checkpoint)
        self.worker.telemetry.durable(self.output.landed, checkpoint)
        for ending in covered.endings:
            if self.dumps.get(ending.dump.id) is ending.dump:
                self._finish(ending.dump, ending.finished,
                             ending.failure or failed.get(ending.dump.id))

    def _flush(self) -> None:
        """Write everything buffered and save what it covers; wait for all of it."""
        self._complete()
        self._submit()
        self._complete()

    def _finish(self, dump: ActiveDump, finished: bool, failure: str | None) -> None:
        """End a dump whose last window is durable (or that failed)."""
        try:
            if failure is not None:
                self.state.transition(dump.id, RequestState.FAILED, error=failure)
                log.warning("dump %s failed: %s", dump.id, failure,
                            extra={"request_id": dump.id})
                self.worker.telemetry.error("DumpFailed", failure, dump.id)
            elif finished and dump.request.state is RequestState.RUNNING:
                self.state.transition(dump.id, RequestState.COMPLETED)
                log.info("dump %s completed", dump.id, extra={"request_id": dump.id})
            else:
                return
        except RequestRejected:
            return  # paused or cancelled meanwhile: the control poll sorts it out
        self._forget(dump.id)
        self.worker.telemetry.dump_ended(dump.id, "failed" if failure else "completed", failure)

    def _forget(self, dump_id: str) -> None:
        self.dumps.pop(dump_id, None)
        self.scheduler.forget(dump_id)
        self.pacer.forget(dump_id)
        self.ended.discard(dump_id)

    # -- control ----------------------------------------------------------------

    def _control(self, now: float) -> None:
        """Follow the queue (:func:`~dblog_worker.dump.admission.follow_requests`)."""
        self.last_control = now
        following = follow_requests(self.state, self.source.tables, self.worker.telemetry,
                                    self.dumps, self.config.max_active_dumps,
                                    whole_queue=not self.queue_read)
        self.queue_read = True
        for gone in [i for i in self.dumps if i not in following]:
            self._forget(gone)
        self.dumps = following

    def _publish_status(self) -> None:
        window = self.reconciler.window_state
        lag_bytes = self.source.log.lag_bytes()
        self.worker.telemetry.log_lag(lag_bytes)
        self.state.publish_status({
            "run_id": self.run_id,
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "started_at": self.started_at,
            "updated_at": time.time(),
            "checkpoint": self.checkpoint or "",
            "lag_bytes": lag_bytes,
            "window": "" if window is None else window.value,
            "windows": self.windows,
            "watermarks": str(getattr(self.config.source.options, "watermarks", "table")),
            "readers": ", ".join(f"{part}={how}" for part, how in sorted(self.readers.items())),
            "active_requests": ",".join(self.dumps),
            "dumps": json.dumps({dump.id: dump_status(dump) for dump in self.dumps.values()}),
            "events_emitted": 0 if self.output is None else self.output.emitted,
            "events_replayed": 0 if self.output is None else self.output.replayed,
            "http": self.worker.http_url,
            "role": "leader",
            "holder": self.worker.lease.holder,
            "token": self.token,
        })
        self.worker.publish_member("leader")
