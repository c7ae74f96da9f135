"""The output buffer: events wait here, per table and in order, until they are written.

``submit`` hands everything buffered to a writer thread, which waits for the dump
rows still being encoded (:class:`PendingRows`) and commits one batch per table
to the sink (:class:`~dblog_worker.landing.sink.Sink`: pyarrow writes and fsyncs
without holding the GIL, so the log and the next chunk go on meanwhile). At most one
write runs at a time: ``submit`` first waits for the previous one. When ``wait``
returns, every event submitted so far is durable.

Events at or before a table's last committed position are dropped: they are a
replay of output that is already durable (the log restarts from the checkpoint,
which trails the landing zone after a crash).

Dump rows whose encoding failed are left out of the write, which goes on; ``wait``
reports them in :attr:`OutputBuffer.failed` (dump id → error), so that their dump fails
and the log does not stop. A prune event of such a dump (``op`` ``p``: rows it did not
emit are gone) is left out too, in this write and every later one.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager

from dblog_worker.errors import DblogError, OutputUnavailable
from dblog_worker.events import ChangeEvent, DumpRows, Op, PendingRows
from dblog_worker.landing.arrow import Item
from dblog_worker.landing.sink import Sink
from dblog_worker.position import Position

log = logging.getLogger(__name__)
Written = tuple[dict[str, Position], dict[str, str]]  # last positions, failed dumps' errors


@contextmanager
def landing_errors() -> Iterator[None]:
    """The landing zone's storage failing is transient: the session retries from the
    checkpoint, and nothing after it is lost. So is any error dblog did not expect there
    (a defect that sent events out of order, say): the session ends, nothing it wrote is
    half-committed, and the next one starts again from the checkpoint; the process goes
    on. A terminal error of dblog's own (a damaged segment) stays terminal."""
    try:
        yield
    except OSError as exc:
        raise OutputUnavailable(
            f"cannot write the landing zone ({exc}); the checkpoint stays where it is and "
            "the log is read again from there once the landing zone is writable"
        ) from exc
    except DblogError:
        raise
    except Exception as exc:
        log.error("the landing zone write failed on an unexpected error", exc_info=exc)
        raise OutputUnavailable(
            f"the landing zone write failed: unexpected {type(exc).__name__}: {exc} (the "
            "worker's log has the traceback; please report it); the session ends and the "
            "next one reads the log again from the checkpoint"
        ) from exc


class OutputBuffer:
    def __init__(self, sink: Sink, landed: dict[str, Position]) -> None:
        self._sink = sink
        self._landed = dict(landed)
        self._replay_until = max(landed.values(), default=None)
        self._events: dict[str, list[Item | PendingRows]] = {}
        self._writer = ThreadPoolExecutor(1, thread_name_prefix="dblog-output")
        self._writing: Future[Written] | None = None
        self._rows_added: dict[str, tuple[int, int]] = {}  # table -> (row batches, rows)
        self._submitted: dict[str, tuple[int, int]] = {}  # the write in flight: (log, dump)
        self._log_events: dict[str, int] = {}  # log events submitted, per table
        self.count = 0
        self.replayed = 0  # events dropped as already durable
        self.emitted = 0  # events made durable by this buffer
        self.landed: dict[str, tuple[int, int]] = {}  # the last write: (log events, dump rows)
        self.failed: dict[str, str] = {}  # the last write: dumps whose rows failed to encode
        self._failed_dumps: set[str] = set()  # the writer's: every dump whose rows failed

    def add(self, event: ChangeEvent) -> None:
        if self._replay_until is not None and self._is_replay(event):
            return
        events = self._events.get(event.table)
        if events is None:
            events = self._events[event.table] = []
        events.append(event)
        self.count += 1

    def add_rows(self, rows: DumpRows | PendingRows) -> None:
        """A window's surviving rows (never a replay: every window is new)."""
        events = self._events.get(rows.table)
        if events is None:
            events = self._events[rows.table] = []
        events.append(rows)
        self.count += len(rows)
        batches, count = self._rows_added.get(rows.table, (0, 0))
        self._rows_added[rows.table] = (batches + 1, count + len(rows))

    def _is_replay(self, event: ChangeEvent) -> bool:
        assert self._replay_until is not None
        if event.position > self._replay_until:
            self._replay_until = None
            return False
        last = self._landed.get(event.table)
        if last is not None and event.position <= last:
            self.replayed += 1
            return True
        return False

    def submit(self) -> None:
        """Hand every buffered event to the writer; returns when the previous write is done."""
        self.wait()
        batch, self._events, self.count = self._events, {}, 0
        rows, self._rows_added = self._rows_added, {}
        self._submitted = {}
        for table, pending in batch.items():
            batches, count = rows.get(table, (0, 0))
            log_events = len(pending) - batches
            self._submitted[table] = (log_events, count)
            self._log_events[table] = self._log_events.get(table, 0) + log_events
        self._writing = self._writer.submit(self._write, batch)

    def log_events_by_table(self) -> dict[str, int]:
        """Log events taken in so far (not replays), per table: submitted and buffered."""
        totals = dict(self._log_events)
        for table, pending in self._events.items():
            totals[table] = (totals.get(table, 0) + len(pending)
                             - self._rows_added.get(table, (0, 0))[0])
        return totals

    def _write(self, batch: dict[str, list[Item | PendingRows]]) -> Written:
        """In the writer thread: one segment per table; its last position."""
        written: dict[str, Position] = {}
        failed: dict[str, str] = {}
        for table, pending in batch.items():
            events: Sequence[Item]
            try:
                events = [e.rows() if type(e) is PendingRows else e  # type: ignore[misc]
                          for e in pending]
            except Exception:  # a chunk failed to encode: leave it out, its dump fails
                events = self._without_failed(table, pending, failed)
            self._failed_dumps.update(failed)
            if self._failed_dumps:
                events = [e for e in events if type(e) is not ChangeEvent
                          or e.op is not Op.PRUNE or e.dump_id not in self._failed_dumps]
            if events:
                written[table] = self._sink.commit(table, events)
        return written, failed

    @staticmethod
    def _without_failed(table: str, pending: list[Item | PendingRows],
                        failed: dict[str, str]) -> list[Item]:
        events: list[Item] = []
        for event in pending:
            if type(event) is not PendingRows:
                events.append(event)  # type: ignore[arg-type]
                continue
            try:
                events.append(event.rows())
            except Exception as exc:  # a defect of an encoder: the dump fails
                log.error("the rows of dump %s could not be encoded", event.dump_id,
                          exc_info=exc, extra={"request_id": event.dump_id})
                failed[event.dump_id] = (
                    f"the rows of {table} could not be encoded: unexpected "
                    f"{type(exc).__name__}: {exc} (the worker's log has the traceback; "
                    "please report it)")
        return events

    @property
    def writing(self) -> bool:
        return self._writing is not None and not self._writing.done()

    def wait(self) -> int:
        """Wait for the write in flight; raise what it raised. Returns how many it wrote."""
        future, self._writing = self._writing, None
        if future is None:
            self.landed, self.failed = {}, {}
            return 0
        last_positions, self.failed = future.result()
        self._landed.update(last_positions)
        self.landed = self._submitted
        written = sum(log_events + rows for log_events, rows in self.landed.values())
        self.emitted += written
        return written

    def close(self) -> None:
        """Let a write in flight finish (or fail); nothing is written afterwards."""
        self._writer.shutdown(wait=True)
