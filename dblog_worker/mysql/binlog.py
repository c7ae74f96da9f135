"""The binary log of MySQL or MariaDB, read by a thread and translated into log items.

``BinlogReader`` runs mysql-replication's ``BinLogStreamReader`` in a thread of its
own (its reads block) and hands the worker's loop batches of :mod:`dblog_worker.events`
items through a bounded queue: when the loop is busy in a window the queue fills and
the thread waits, so the log waits in the socket and memory stays bounded.

``BinlogTranslator`` is the pure part: binlog events in, items out, in log order.

* A row of a captured table becomes a :class:`ChangeEvent` at position (binlog file
  number, end position of its rows event, twice the index of the row in the event). An
  update that changes the primary key becomes a delete of the old key and, at the
  next position (twice the index, plus one), a create of the new one.
* A row written to ``dblog.watermark`` with this source's name becomes a
  :class:`Watermark` (the worker's low and high watermarks, and its heartbeats).
* ``TRUNCATE`` of a captured table becomes a truncate event.
* The end of a transaction (``XID``, ``COMMIT``, or a statement logged on its own,
  such as DDL) becomes a :class:`Checkpoint` that carries where to resume: a
  transaction is never half-checkpointed.
"""

from __future__ import annotations

import contextlib
import json
import logging
import queue
import re
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.event import (
    GtidEvent,
    HeartbeatLogEvent,
    MariadbGtidEvent,
    QueryEvent,
    RotateEvent,
    XidEvent,
)
from pymysqlreplication.gtid import Gtid, GtidSet
from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

from dblog_worker.errors import LogGone, ProtocolError, SourceUnavailable
from dblog_worker.events import ChangeEvent, Checkpoint, LogItem, Op, Origin, Watermark
from dblog_worker.mysql.values import BINLOG_READER_OPTIONS
from dblog_worker.position import Position

log = logging.getLogger(__name__)

WATERMARK_SCHEMA = "dblog"
WATERMARK_TABLE = "watermark"
_QUEUE_BATCHES = 64  # batches of up to _BATCH items between the reader and the loop
_BATCH = 2000
_FL_STANDALONE = 1  # MariaDB GTID flag: the group is one statement, no XID follows
_ER_GTID_OR_FILE_GONE = {1236}  # ER_MASTER_FATAL_ERROR_READING_BINLOG


@dataclass(frozen=True, slots=True)
class BinlogCheckpoint:
    """Where to resume: the end of a transaction, by file and position, and the GTID
    state there: MariaDB, one ``domain-server-seq`` per domain; MySQL, the executed GTID
    set (``uuid:1-77,uuid2:1-5``); empty where GTIDs are off or unknown."""

    file: str
    pos: int
    gtid: str = ""

    def encode(self) -> str:
        return json.dumps({"file": self.file, "pos": self.pos, "gtid": self.gtid},
                          separators=(",", ":"))

    @classmethod
    def decode(cls, text: str) -> BinlogCheckpoint:
        try:
            data = json.loads(text)
            return cls(str(data["file"]), int(data["pos"]), str(data.get("gtid", "")))
        except (ValueError, KeyError, TypeError):
            raise ProtocolError(
                f"checkpoint {text!r} is not a binlog checkpoint: was this source's Redis "
                "state written for a PostgreSQL source? Use another source name"
            ) from None

    @property
    def position(self) -> Position:
        return Position(file_number(self.file), self.pos)

    @property
    def mysql_gtid_set(self) -> bool:
        """The GTID state is a MySQL GTID set (``uuid:interval``), not MariaDB's."""
        return ":" in self.gtid


def file_number(name: str) -> int:
    """``mariadb-bin.000042`` → 42: binlog files are numbered in order."""
    _, _, suffix = name.rpartition(".")
    if not suffix.isdigit():
        raise ProtocolError(f"binlog file name {name!r} does not end in a number")
    return int(suffix)


class RowEncoder(Protocol):
    """What the translator needs of a table's codec for rows decoded from the binlog."""

    def key_row_from_binlog(
        self, values: Mapping[str, object], none_sources: Mapping[str, str] | None = None
    ) -> tuple[str, str]: ...


@dataclass(frozen=True, slots=True)
class TableView:
    """A captured table as its rows event describes it: codec and schema version."""

    table: str
    codec: RowEncoder
    schema_version: int


Describe = Callable[[str, Any], TableView]  # (database.table, rows event) → view


_TRUNCATE = re.compile(
    r"\s*TRUNCATE\s+(?:TABLE\s+)?(?:(`(?:[^`]|``)+`|\w+)\s*\.\s*)?(`(?:[^`]|``)+`|\w+)\s*;?\s*$",
    re.IGNORECASE,
)


def _unquote(name: str) -> str:
    return name[1:-1].replace("``", "`") if name.startswith("`") else name


def truncated_table(query: str, schema: str) -> str | None:
    """The ``database.table`` a TRUNCATE statement empties, or None for other statements."""
    match = _TRUNCATE.match(query)
    if match is None:
        return None
    database = _unquote(match.group(1)) if match.group(1) else schema
    return f"{database}.{_unquote(match.group(2))}" if database else None


class BinlogTranslator:
    """Binlog events → log items, for the captured tables and this source's watermarks."""

    def __init__(self, source: str, tables: Iterable[str], describe: Describe,
                 start: BinlogCheckpoint) -> None:
        self.source = source
        self.tables = frozenset(tables)
        self._describe = describe
        self._views: dict[tuple[str, int], TableView] = {}
        self._versions: dict[str, int] = {}  # the last schema version seen per table
        self.file = start.file
        self._gtids = {} if start.mysql_gtid_set else _parse_gtids(start.gtid)
        # MySQL: the executed set, grown by each committed GTID. Only when it started from
        # the server's whole set: a set grown from nothing would claim too little.
        self._gtid_set = GtidSet(start.gtid) if start.mysql_gtid_set else None
        self._pending_gtid: tuple[int, str] | None = None
        self.in_transaction = False
        self._standalone = False

    @property
    def gtid(self) -> str:
        if self._gtid_set is not None:
            return str(self._gtid_set)
        return ",".join(self._gtids[d] for d in sorted(self._gtids))

    def translate(self, event: Any, out: list[LogItem]) -> None:
        kind = type(event)
        if kind in (WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent):
            self._rows(event, out)
        elif kind is XidEvent:
            self._commit(event, out)
        elif kind is MariadbGtidEvent:
            self._pending_gtid = (event.domain_id, event.gtid)
            self._standalone = bool(event.flags & _FL_STANDALONE)
            self.in_transaction = not self._standalone
        elif kind is GtidEvent:
            if self._gtid_set is not None:
                self._pending_gtid = (0, str(event.gtid))
        elif kind is QueryEvent:
            self._query(event, out)
        elif kind is RotateEvent:
            self.file = event.next_binlog

    def _query(self, event: Any, out: list[LogItem]) -> None:
        query = event.query if isinstance(event.query, str) else bytes(event.query).decode()
        statement = query.strip().upper()
        if statement == "BEGIN":
            self.in_transaction = True
            return
        if statement != "COMMIT":
            # DDL, perhaps of a captured table. The row events after it describe the table
            # anew, but a view is found by column names and types only: a new DECIMAL
            # scale, fraction digits, BINARY length or ENUM/SET members keep both, and
            # the old codec would write the values wrong (a scale of 2 rounds 1.2345).
            self._views.clear()
        schema = event.schema.decode() if isinstance(event.schema, bytes) else event.schema
        table = truncated_table(query, schema or "")
        if table is not None and table in self.tables:
            position = Position(file_number(self.file), event.packet.log_pos)
            out.append(ChangeEvent(table, Op.TRUNCATE, position, None, None, None, Origin.LOG,
                                   event.timestamp * 1_000_000, self._versions.get(table, 0)))
        if statement == "COMMIT" or not self.in_transaction:
            self._commit(event, out)

    def _commit(self, event: Any, out: list[LogItem]) -> None:
        self.in_transaction = False
        if self._pending_gtid is not None:
            domain, gtid = self._pending_gtid
            if self._gtid_set is not None:
                self._gtid_set.merge_gtid(Gtid(gtid))
            else:
                self._gtids[domain] = gtid
            self._pending_gtid = None
        pos = event.packet.log_pos
        checkpoint = BinlogCheckpoint(self.file, pos, self.gtid)
        out.append(Checkpoint(Position(file_number(self.file), pos), checkpoint.encode()))

    def _rows(self, event: Any, out: list[LogItem]) -> None:
        table = f"{event.schema}.{event.table}"
        major, minor = file_number(self.file), event.packet.log_pos
        ts = event.timestamp * 1_000_000
        if table not in self.tables:
            if event.schema == WATERMARK_SCHEMA and event.table == WATERMARK_TABLE:
                self._watermarks(event, major, minor, ts, out)
            return
        view = self._view(table, event)
        version = view.schema_version
        key_row = view.codec.key_row_from_binlog
        kind = type(event)
        for index, row in enumerate(event.rows):
            position = Position(major, minor, 2 * index)
            if kind is WriteRowsEvent:
                key, after = key_row(row["values"], row.get("none_sources"))
                out.append(ChangeEvent(table, Op.CREATE, position, key, after, None,
                                       Origin.LOG, ts, version))
            elif kind is DeleteRowsEvent:
                key, before = key_row(row["values"], row.get("none_sources"))
                out.append(ChangeEvent(table, Op.DELETE, position, key, None, before,
                                       Origin.LOG, ts, version))
            else:
                old_key, before = key_row(row["before_values"], row.get("before_none_sources"))
                new_key, after = key_row(row["after_values"], row.get("after_none_sources"))
                if old_key == new_key:
                    out.append(ChangeEvent(table, Op.UPDATE, position, new_key, after, before,
                                           Origin.LOG, ts, version))
                else:  # a key change: the old key is gone, the new one is created
                    out.append(ChangeEvent(table, Op.DELETE, position, old_key, None, before,
                                           Origin.LOG, ts, version))
                    out.append(ChangeEvent(table, Op.CREATE, Position(major, minor, 2 * index + 1),
                                           new_key, after, None, Origin.LOG, ts, version))

    def _view(self, table: str, event: Any) -> TableView:
        signature = (table, hash(tuple((c.name, c.type) for c in event.columns)))
        view = self._views.get(signature)
        if view is None:
            view = self._views[signature] = self._describe(table, event)
        self._versions[table] = view.schema_version
        return view

    def _watermarks(self, event: Any, major: int, minor: int, ts: int,
                    out: list[LogItem]) -> None:
        if type(event) is DeleteRowsEvent:
            return
        for index, row in enumerate(event.rows):
            values = row["values"] if type(event) is WriteRowsEvent else row["after_values"]
            if values.get("source") == self.source:
                out.append(Watermark(str(values.get("value")),
                                     Position(major, minor, 2 * index), ts))


def _parse_gtids(state: str) -> dict[int, str]:
    gtids = {}
    for gtid in filter(None, (g.strip() for g in state.split(","))):
        domain, _, _ = gtid.partition("-")
        if domain.isdigit():
            gtids[int(domain)] = gtid
    return gtids


class _Stream(BinLogStreamReader):  # type: ignore[misc]
    """mysql-replication's reader, except that it never reconnects on its own.

    When its connection drops (errors 2006, 2013) the library opens a new one and goes on:
    in GTID mode from the GTID it was started at, so the session would read its events and
    its own watermarks again; by file, from the last event read, inside a transaction
    perhaps. The session ends instead, and the next one starts from the checkpoint.
    """

    _connected = False

    def _BinLogStreamReader__connect_to_stream(self) -> None:
        if self._connected:
            raise SourceUnavailable("the binary log connection was lost")
        self._connected = True
        super()._BinLogStreamReader__connect_to_stream()


class BinlogReader:
    """A thread that streams the binary log from a checkpoint into batches of items."""

    def __init__(self, connect_args: Mapping[str, Any], server_id: int,
                 start: BinlogCheckpoint, translator: BinlogTranslator, schemas: Iterable[str],
                 *, by_gtid: bool, is_mariadb: bool) -> None:
        self.translator = translator
        self._queue: queue.Queue[list[LogItem] | BaseException] = queue.Queue(_QUEUE_BATCHES)
        self._stopping = threading.Event()
        settings = {"host": connect_args["host"], "port": connect_args["port"],
                    "user": connect_args["user"], "password": connect_args["password"]}
        control = {**settings, "database": "information_schema"}  # not the deprecated db=
        position: dict[str, Any] = (
            {"auto_position": start.gtid, "is_mariadb": is_mariadb} if by_gtid
            else {"log_file": start.file, "log_pos": start.pos, "resume_stream": True}
        )
        self._stream = _Stream(
            connection_settings=settings,
            ctl_connection_settings=control,
            server_id=server_id,
            blocking=True,
            slave_heartbeat=1.0,
            only_events=[WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent, XidEvent, QueryEvent,
                         RotateEvent, GtidEvent, MariadbGtidEvent, HeartbeatLogEvent],
            only_schemas=sorted({*schemas, WATERMARK_SCHEMA}),
            enable_logging=False,
            **BINLOG_READER_OPTIONS,
            **position,
        )
        self._is_mariadb = is_mariadb
        self._thread = threading.Thread(target=self._run, name="dblog-binlog", daemon=True)
        self.received = start.position

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        translate = self.translator.translate
        batch: list[LogItem] = []
        try:
            while not self._stopping.is_set():
                event = self._stream.fetchone()
                if event is None:
                    raise SourceUnavailable("the server ended the binary log stream")
                if type(event) is HeartbeatLogEvent:
                    self._put(batch)
                    batch = []
                    continue
                translate(event, batch)
                if len(batch) >= _BATCH or (batch and not self.translator.in_transaction):
                    self._put(batch)
                    batch = []
        except BaseException as exc:  # handed to the loop, which ends the session
            if not self._stopping.is_set():
                self._put(_reader_error(exc))

    def _put(self, item: list[LogItem] | BaseException) -> None:
        while not self._stopping.is_set():
            try:
                self._queue.put(item, timeout=0.2)
                return
            except queue.Full:
                continue

    def poll(self, timeout: float, out: list[LogItem]) -> None:
        """Append what the thread has read; wait up to ``timeout`` if nothing."""
        try:
            first = self._queue.get(timeout=timeout) if timeout > 0 else self._queue.get_nowait()
        except queue.Empty:
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


def _reader_error(exc: BaseException) -> BaseException:
    if isinstance(exc, (SourceUnavailable, ProtocolError, LogGone)):
        return exc
    args = getattr(exc, "args", ())
    if args and args[0] in _ER_GTID_OR_FILE_GONE:
        return LogGone(
            f"the server no longer has the binary log at the checkpoint ({args[-1]}): the "
            "changes since then are gone. Run `dblog reset --yes --config <file>`, start the "
            "worker, then `dblog dump --all` to bring the output back in sync"
        )
    return SourceUnavailable(f"the binary log stream broke: {exc}")
