"""The binary log of MySQL or MariaDB, read by a thread and translated into log items.

``BinlogReader`` runs mysql-replication's ``BinLogStreamReader`` in a thread of its
own (its reads block) and hands the worker's loop batches of :mod:`dblog_worker.events`
items through a bounded queue: when the loop is busy in a window the queue fills and
the thread waits, so the log waits in the socket and memory stays bounded.

The translation, binlog events in and items out in log order, is the pure part:
:class:`dblog_worker.mysql.translate.BinlogTranslator`. At the commit of an XA
transaction that changed captured tables, the reader reads its prepared group again,
with a stream of its own, for the translator to emit its rows.
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Iterable, Mapping
from typing import Any

from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.event import (
    GtidEvent,
    HeartbeatLogEvent,
    MariadbBinLogCheckPointEvent,
    MariadbGtidEvent,
    NotImplementedEvent,
    QueryEvent,
    RotateEvent,
    XAPrepareEvent,
    XidEvent,
)
from pymysqlreplication.row_event import (
    DeleteRowsEvent,
    PartialUpdateRowsEvent,
    UpdateRowsEvent,
    WriteRowsEvent,
)

from dblog_worker.errors import ConfigError, LogGone, ProtocolError, SourceUnavailable
from dblog_worker.events import LogItem, Watermark
from dblog_worker.mysql.checkpoint import BinlogCheckpoint, file_number
from dblog_worker.mysql.connection import BINLOG_READER_OPTIONS
from dblog_worker.mysql.snapshot import Check, Marks
from dblog_worker.mysql.tls import SharedTlsConnection
from dblog_worker.mysql.translate import BinlogTranslator
from dblog_worker.mysql.visibility import LogFacts
from dblog_worker.mysql.xa_visibility import XaCommits, XaCommitted
from dblog_worker.position import Position
from dblog_worker.tables import WATERMARK_SCHEMA

_QUEUE_BATCHES = 64  # batches of up to _BATCH items between the reader and the loop
_BATCH = 2000
_ER_GTID_OR_FILE_GONE = {1236}  # ER_MASTER_FATAL_ERROR_READING_BINLOG
_TRANSACTION_ENDS = frozenset({XidEvent, QueryEvent, XAPrepareEvent})  # may end one
_FL_GROUP_COMMIT_ID = 2  # MariaDB GTID flag: a commit id (the group's) follows


class _Stream(BinLogStreamReader):  # type: ignore[misc]
    """mysql-replication's reader, except that it never reconnects on its own.

    When its connection drops (errors 2006, 2013) the library opens a new one and goes on:
    in GTID mode from the GTID it was started at, so the session would read its events and
    its own watermarks again; by file, from the last event read, inside a transaction
    perhaps. The session ends instead, and the next one starts from the checkpoint.
    """

    _connected = False

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(pymysql_wrapper=SharedTlsConnection, **kwargs)

    def _BinLogStreamReader__connect_to_stream(self) -> None:
        if self._connected:
            raise SourceUnavailable("the binary log connection was lost")
        self._connected = True
        super()._BinLogStreamReader__connect_to_stream()


class BinlogReader:
    """A thread that streams the binary log from a checkpoint into batches of items."""

    def __init__(self, connect_args: Mapping[str, Any], server_id: int,
                 start: BinlogCheckpoint, translator: BinlogTranslator,
                 schemas: Iterable[str] | None,
                 *, by_gtid: bool, is_mariadb: bool, facts: LogFacts | None = None,
                 xa: XaCommits | None = None) -> None:
        self.translator = translator
        self._queue: queue.Queue[list[LogItem] | BaseException] = queue.Queue(_QUEUE_BATCHES)
        self._stopping = threading.Event()
        self._settings = dict(connect_args)  # the DSN's: host, port, user, password, TLS
        # not the deprecated db=
        self._control = {**self._settings, "database": "information_schema"}
        # the databases to read (None: all of them, when a pattern's database is one)
        self._schemas = None if schemas is None else sorted({*schemas, WATERMARK_SCHEMA})
        position: dict[str, Any] = (
            {"auto_position": start.gtid, "is_mariadb": is_mariadb} if by_gtid
            else {"log_file": start.file, "log_pos": start.pos, "resume_stream": True}
        )
        self._stream = _Stream(
            connection_settings=self._settings,
            ctl_connection_settings=self._control,
            server_id=server_id,
            blocking=True,
            slave_heartbeat=1.0,
            only_events=[WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent, XidEvent, QueryEvent,
                         RotateEvent, GtidEvent, MariadbGtidEvent, HeartbeatLogEvent,
                         XAPrepareEvent, PartialUpdateRowsEvent, NotImplementedEvent,
                         MariadbBinLogCheckPointEvent],
            filter_non_implemented_events=False,  # compressed events stop the worker
            only_schemas=self._schemas,
            enable_logging=False,
            **BINLOG_READER_OPTIONS,
            **position,
        )
        self._is_mariadb = is_mariadb
        self._thread = threading.Thread(target=self._run, name="dblog-binlog", daemon=True)
        self.received = start.position
        # Every item of the log up to here is in the queue (set by the thread, at the end
        # of a transaction or on the server's heartbeat): where an idle log's marks go.
        self.delivered = start.position
        self._marks = Marks()  # watermarks placed by position (watermarks = "position")
        self._marked = start.position  # the last of them
        self._xa = xa  # XA commits read that a chunk SELECT may not see yet
        # watermarks = "position": what the window's snapshots are checked against
        self._facts = facts
        if facts is not None:
            facts.started(start.position)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        translate = self.translator.translate
        facts = self._facts
        batch: list[LogItem] = []
        try:
            while not self._stopping.is_set():
                event = self._stream.fetchone()
                if event is None:
                    raise SourceUnavailable("the server ended the binary log stream")
                kind = type(event)
                if kind is HeartbeatLogEvent:
                    self._put(batch)
                    batch = []
                    self._delivered(_text(event.ident), event.packet.log_pos)
                    if facts is not None and event.ident:
                        facts.read(file_number(_text(event.ident)), event.packet.log_pos)
                    continue
                if kind is MariadbBinLogCheckPointEvent:
                    if facts is not None:
                        facts.checkpoint(file_number(event.filename))
                        facts.read(file_number(self.translator.file), event.packet.log_pos)
                    continue
                if facts is not None and kind is MariadbGtidEvent:
                    facts.group_starts(file_number(self.translator.file),
                                       event.packet.log_pos - event.packet.event_size,
                                       _commit_id(event))
                translate(event, batch)
                if self.translator.committing is not None:
                    batch = self._read_again(batch)
                ended = kind in _TRANSACTION_ENDS and not self.translator.in_transaction
                if ended and facts is not None:
                    facts.transaction_end(file_number(self.translator.file),
                                          event.packet.log_pos)
                # A transaction's end hands its batch over, unless the loop has not taken
                # the batches before (in a window): then the batch grows, and the reader
                # goes on reading up to the window's snapshots meanwhile.
                if len(batch) >= _BATCH or (batch and not self.translator.in_transaction
                                            and not self._queue.full()):
                    self._put(batch)
                    batch = []
                if not batch and ended:
                    self._delivered(self.translator.file, event.packet.log_pos)
        except BaseException as exc:  # handed to the loop, which ends the session
            if not self._stopping.is_set():
                self._put(_reader_error(exc))

    def _read_again(self, batch: list[LogItem]) -> list[LogItem]:
        """Read the prepared group of the XA transaction being committed again, with a
        reader of its own, and translate its rows; memory holds one batch of them at most."""
        commit = self.translator.committing
        assert commit is not None
        prepared = commit.prepared
        stream = _Stream(
            connection_settings=self._settings,
            ctl_connection_settings=self._control,
            server_id=0,  # a reader that stops at the end: the server stops no other for it
            blocking=False,
            log_file=prepared.file,
            log_pos=prepared.start,
            resume_stream=True,
            end_log_pos=prepared.end,
            only_events=[WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent, QueryEvent,
                         MariadbGtidEvent, XAPrepareEvent],
            only_schemas=self._schemas,
            enable_logging=False,
            **BINLOG_READER_OPTIONS,
        )
        try:
            while not self._stopping.is_set():
                event = stream.fetchone()
                if event is None:
                    break
                self.translator.read_again(event, batch)
                if len(batch) >= _BATCH:
                    self._put(batch)
                    batch = []
        finally:
            with contextlib.suppress(Exception):
                stream.close()
        if not self._stopping.is_set():
            commit = self.translator.committed(batch)
            if self._xa is not None:
                self._xa.add(XaCommitted(commit.xid, commit.position, commit.prepared.resume,
                                         tuple(commit.changes), frozenset(commit.overflow)))
        return batch

    def _delivered(self, file: str, pos: int) -> None:
        if file and pos:
            self.delivered = max(self.delivered, Position(file_number(file), pos))

    def mark(self, watermark: Watermark, check: Check | None = None) -> None:
        """Place ``watermark`` among the items where the log passes its position: after
        every item up to it, before any past it (a window's positions are known only after
        its SELECTs, confirmed at or after :meth:`taken`; the thread may have read past
        them, the loop has not taken past them)."""
        self._marks.add(watermark, check)
        self._marked = max(self._marked, watermark.position)

    def taken(self) -> Position:
        """Where the next window's watermarks may go at the earliest: past every item the
        loop has taken and every watermark placed before."""
        return max(self.received, self._marked)

    def _put(self, item: list[LogItem] | BaseException) -> None:
        while not self._stopping.is_set():
            try:
                self._queue.put(item, timeout=0.2)
                return
            except queue.Full:
                continue

    def poll(self, timeout: float, out: list[LogItem]) -> None:
        """Append what the thread has read; wait up to ``timeout`` if nothing."""
        start, marks = len(out), bool(self._marks)
        delivered = self.delivered  # read before the queue: everything up to it is queued
        if self._marks.due(delivered):
            timeout = 0  # a mark goes out now, after what is queued
        try:
            first = self._queue.get(timeout=timeout) if timeout > 0 else self._queue.get_nowait()
        except queue.Empty:
            if not marks:
                return
            delivered = self.delivered  # it may have moved while this waited
            try:
                first = self._queue.get_nowait()
            except queue.Empty:
                self._marks.place(out, start, delivered)
                return
        item: list[LogItem] | BaseException | None = first
        while item is not None:
            if isinstance(item, BaseException):
                raise item
            out.extend(item)
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                item = None
        if self._marks:
            self._marks.place(out, start, delivered)
        for last in reversed(out):
            position = getattr(last, "position", None)
            if position is not None:
                self.received = max(self.received, position)
                break

    def close(self) -> None:
        self._stopping.set()
        with contextlib.suppress(Exception):  # the connection may be broken already
            self._stream.close()
        self._thread.join(timeout=5)


def _commit_id(event: MariadbGtidEvent) -> int:
    """The group commit id of a MariaDB GTID event (its transactions' group), 0 if none:
    8 bytes after the flags when FL_GROUP_COMMIT_ID is set, which mysql-replication
    leaves unread."""
    if not event.flags & _FL_GROUP_COMMIT_ID:
        return 0
    return int(event.packet.read_uint64())


def _text(value: str | bytes | None) -> str:
    return value.decode() if isinstance(value, bytes) else value or ""


def _reader_error(exc: BaseException) -> BaseException:
    if isinstance(exc, (SourceUnavailable, ProtocolError, LogGone, ConfigError)):
        return exc
    args = getattr(exc, "args", ())
    if args and args[0] in _ER_GTID_OR_FILE_GONE:
        return LogGone(
            f"the server no longer has the binary log at the checkpoint ({args[-1]}): the "
            "changes since then are gone. Run `dblog reset --yes --config <file>`, start the "
            "worker, then `dblog dump --all` to bring the output back in sync"
        )
    return SourceUnavailable(f"the binary log stream broke: {exc}")
