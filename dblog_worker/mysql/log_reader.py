"""The binary log of a MySQL or MariaDB source, and the watermarks that come back
through it.

:class:`MyLogReader` is the source's ``log`` part and its ``watermarks`` part: one object,
for here the two share their state. The binary log is read by
:class:`~dblog_worker.mysql.binlog.BinlogReader` in its own thread, translated by
:class:`~dblog_worker.mysql.translate.BinlogTranslator` with the codecs :meth:`_describe`
builds (the catalog read on that thread's connection of its own). A low watermark confirms
the XA commits kept before it (:mod:`dblog_worker.mysql.xa_visibility`); with ``watermarks
= "position"`` nothing is written: the low watermark opens the window's consistent
snapshots and the high watermark is placed by the reader where the log passes them
(:mod:`dblog_worker.mysql.snapshot`). The MySQL server keeps no replication state for us
(no slot): the checkpoint in Redis is the whole of it.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Collection, Sequence
from dataclasses import replace
from typing import Any

import pymysql

from dblog_worker.config import SourceConfig
from dblog_worker.errors import (
    ConfigError,
    LogGone,
    ProtocolError,
    ReplicaBehind,
    SourceUnavailable,
)
from dblog_worker.events import Checkpoint, LogItem, Watermark, is_low_watermark
from dblog_worker.foreign_keys import CascadePlan
from dblog_worker.masking import MaskConflict
from dblog_worker.mysql import cascades, catalog
from dblog_worker.mysql.binlog import BinlogReader
from dblog_worker.mysql.checkpoint import BinlogCheckpoint, file_number
from dblog_worker.mysql.column_model import (
    COLUMNS_SQL,
    MyColumn,
    UnsupportedType,
    column_from_information_schema,
    columns_from_binlog,
    schema_document,
)
from dblog_worker.mysql.connection import connect, connection_errors
from dblog_worker.mysql.options import server_id, url_args
from dblog_worker.mysql.reads import CapturedTables, unsupported
from dblog_worker.mysql.replica import MyReplica
from dblog_worker.mysql.resultset import DumpConnection
from dblog_worker.mysql.rowimage import row_images
from dblog_worker.mysql.rowtext import key_row_reader
from dblog_worker.mysql.server import MyServer
from dblog_worker.mysql.snapshot import Snapshot, WindowSnapshots
from dblog_worker.mysql.translate import NO_CASCADES, BinlogTranslator, TableView
from dblog_worker.mysql.values import MyRowCodec
from dblog_worker.mysql.xa_visibility import XaCommits, xids_listed
from dblog_worker.names import split_table
from dblog_worker.position import Position
from dblog_worker.source import SchemaVersion
from dblog_worker.tables import HEARTBEAT, CapturedSet

log = logging.getLogger(__name__)

_CHECKPOINTS_LOOKED_AT = 1000  # events at the start of a binary log file
# A window's watermarks' sub: above any row's (twice its index in an event or an XA
# transaction), so that the window's rows come after the rows of the transaction it ends at.
_SUB_BASE = 1 << 40
_XA_CONFIRM_S = 1.0  # without windows, how often XA commits kept are confirmed


def _other_server(start: BinlogCheckpoint, here: BinlogCheckpoint) -> str:
    """Why a checkpoint of another server is refused, and the runbook."""
    base, _, suffix = here.file.rpartition(".")
    past = file_number(start.file) + 2  # past a rotation after the last checkpoint, too
    flush = "" if file_number(here.file) >= past else (
        f"on this server, run FLUSH BINARY LOGS {past - file_number(here.file)} time(s), "
        f"until SHOW MASTER STATUS shows {base}.{str(past).zfill(len(suffix))} (its positions "
        "then sort after everything landed); ")
    return (
        f"the checkpoint {start.encode()} was taken on another server ({start.server}); this "
        f"one is {here.server}, at {here.file}: a failover to a replica, or another server "
        "behind the same address. Positions in this server's binary log have nothing to do "
        "with those of the output, so resuming could drop changes as replays and misorder "
        "others. To capture from this server: stop every worker of this source; "
        f"{flush}run `dblog reset --yes --config <file>`; start the worker; then `dblog dump "
        "--all` (runbook: docs/runbooks/mysql-failover.md)")



class MyLogReader:
    """The source's log and watermarks parts, on ``server`` (the source's connection)."""

    def __init__(self, config: SourceConfig, server: MyServer, replica: MyReplica | None,
                 snapshots: WindowSnapshots | None, chunks: CapturedTables,
                 capture: CapturedSet, schema_version: SchemaVersion) -> None:
        self.config = config
        self.name = config.name
        self.server = server
        self._args = url_args(config.dsn)
        self._replica = replica
        self._snapshots = snapshots
        self.chunks = chunks
        self.capture = capture
        self._schema_version = schema_version
        self._next_sub = _SUB_BASE  # the next window's watermarks' sub, at least
        self._xa = XaCommits()  # XA commits read that a chunk SELECT may not see yet
        self._xa_confirmed_at = 0.0
        self._xa_denied = False
        self._lows: set[str] = set()  # low watermarks written, not read back yet
        self._reader: BinlogReader | None = None
        self._catalog_conn: DumpConnection | None = None  # the binlog reader thread's
        self.cascade_plan: CascadePlan = NO_CASCADES  # read by preflight

    def start(self, checkpoint: str | None, landed: Position | None = None) -> str:
        start = BinlogCheckpoint.decode(checkpoint) if checkpoint else self.server.current()
        if landed is not None:  # the windows' rows go after whatever has landed
            self._next_sub = max(self._next_sub, landed.sub + 1)
        if start.server and start.server != self.server.id:
            raise ConfigError(_other_server(start, self.server.current()))
        start = replace(start, server=self.server.id)  # a checkpoint from before it had none
        files = {str(r[0]) for r in self.server.rows("SHOW BINARY LOGS")}
        if start.file not in files and not start.gtid:
            raise LogGone(
                f"the binary log file {start.file} of checkpoint {start.encode()} is gone "
                f"(purged; the server has {', '.join(sorted(files)) or 'none'}): the changes "
                "since then are lost. Run `dblog reset --yes --config <file>`, start the "
                "worker, then `dblog dump --all` to bring the output back in sync"
            )
        translator = BinlogTranslator(
            self.name, self.config.selector, self._describe, start, cascades=self.cascade_plan,
            describe_parent=self._describe_parent, reload_cascades=self._reload_cascades,
            version_of=self.chunks.known_version)
        databases = self._databases(self.cascade_plan)
        self._reader = BinlogReader(
            self._args, server_id(self.config), start, translator, databases,
            by_gtid=self._by_gtid(start), is_mariadb=self.server.is_mariadb,
            facts=None if self._snapshots is None else self._snapshots.facts, xa=self._xa,
        )
        if self._snapshots is not None:
            self._checkpoints_before(start)
        self._reader.start()
        return start.encode()

    def _checkpoints_before(self, start: BinlogCheckpoint) -> None:
        """The files the ``Binlog_checkpoint`` events before the start name (the reader
        starts past them): a snapshot's position in the start file is confirmed with them
        (:mod:`dblog_worker.mysql.visibility`). Looked for near the file's start only."""
        assert self._snapshots is not None
        for row in self.server.rows(
                f"SHOW BINLOG EVENTS IN %s LIMIT {_CHECKPOINTS_LOOKED_AT}", (start.file,)):
            if str(row[2]) == "Binlog_checkpoint" and int(row[4]) <= start.pos:
                self._snapshots.facts.checkpoint(file_number(str(row[5]).split()[-1]))

    def _by_gtid(self, start: BinlogCheckpoint) -> bool:
        """Resume by GTID where the checkpoint has the state of this server's kind."""
        if self.server.is_mariadb:
            return bool(start.gtid) and not start.mysql_gtid_set
        return start.mysql_gtid_set

    def poll(self, timeout: float, out: list[LogItem]) -> None:
        if self._reader is None:
            raise SourceUnavailable("the binary log is not being read")
        start = len(out)
        self._reader.poll(timeout, out)
        if self._xa:  # XA commits a chunk SELECT may not see yet (xa_visibility.py)
            self._xa_items(out, start)

    def _xa_items(self, out: list[LogItem], start: int) -> None:
        """Right after a low watermark of this worker: the changes of the XA commits
        before it not known visible (:class:`Unseen`). Every checkpoint resumes before
        them. Without windows, they are confirmed once a second."""
        now = time.monotonic()
        if not self._lows and now - self._xa_confirmed_at >= _XA_CONFIRM_S:
            with contextlib.suppress(ReplicaBehind):  # a replica away: kept until it is back
                self._confirm_xa()
        resume = self._xa.resume()
        index = start
        while index < len(out):
            item = out[index]
            if type(item) is Watermark and item.token in self._lows:
                self._lows.discard(item.token)
                unseen = self._xa.unseen(item.position)
                if unseen is not None:
                    out.insert(index + 1, unseen)
                    index += 1
            elif type(item) is Checkpoint and resume is not None and item.resume is not None:
                held = BinlogCheckpoint.decode(item.resume)
                if resume.position < held.position:
                    out[index] = Checkpoint(item.position, resume.encode())
            index += 1

    def _confirm_xa(self) -> None:
        """Forget the XA commits that ``XA RECOVER`` no longer lists where the chunks are
        read: visible to every SELECT that starts there from now on. On a read replica,
        only once it has applied the source's log up to now (else nothing is forgotten)."""
        self._xa_confirmed_at = time.monotonic()
        try:
            if self._replica is None:
                rows = self.server.rows("XA RECOVER")
            else:
                position = str(self.server.one("SELECT @@gtid_binlog_pos")[0] or "")
                replica = self._replica.xa_prepared(position)
                if replica is None:
                    return
                rows = replica
        except pymysql.MySQLError as exc:  # MySQL 8 without XA_RECOVER_ADMIN
            if not self._xa_denied:
                log.warning("XA RECOVER was refused (%s): an XA transaction's commit is "
                            "taken as visible as soon as it is read, and a chunk read right "
                            "then may land an older row after it; grant XA_RECOVER_ADMIN "
                            "(dblog preflight prints how)", exc)
                self._xa_denied = True
            rows = []
        self._xa.confirm(xids_listed(rows))

    def encode_checkpoint(self, checkpoint: Checkpoint) -> str:
        assert checkpoint.resume is not None
        return checkpoint.resume

    def confirm(self, checkpoint: str) -> None:
        """Nothing to tell the server: it keeps binlogs by time, not for its readers."""

    def log_position(self) -> Position:
        row = self.server.binlog_status()
        return Position(file_number(str(row[0])), int(row[1]))

    def lag_bytes(self) -> int:
        if self._reader is None:
            return 0
        end, received = self.log_position(), self._reader.received
        return max(0, end.minor - received.minor) if end.major == received.major else 0

    def _describe(self, table: str, event: Any) -> TableView | None:
        """A captured table's codec for rows decoded from the binlog (in the reader),
        with what only the catalog says (a spatial column's type; whether a fixed binary
        column is a UUID or INET type or a BINARY(n); the key of a table without a primary
        key). A table with a column of a type the worker does not read (in the log or the
        catalog: YEAR(2) is a YEAR in the log) gets no codec: its rows are skipped (said
        once per table version). None for a table a pattern matched that has no key, or
        whose key a rule of ``[source.columns]`` would mask: it is not captured."""
        named = self.config.selector.named(table)
        try:
            columns = columns_from_binlog(event.columns, self._catalog_columns(table))
        except UnsupportedType as exc:
            log.error("%s", unsupported(table, exc))
            return TableView(table, None, 0)
        key_columns = self._binlog_key(table, event)
        if not key_columns:
            if not named:
                log.info("%s has no primary key nor unique index on NOT NULL columns: not "
                         "captured, though a pattern matches it", table)
                return None
            raise SourceUnavailable(f"the binary log carries no primary key of {table}, and "
                                    "the catalog gives it no key")
        try:
            masks = self.config.columns.for_table(table, [c.name for c in columns],
                                                  key_columns)
        except MaskConflict as exc:
            if named:
                raise ConfigError(f"{exc}; change [source.columns] and reload the worker"
                                  ) from None
            log.warning("%s: not captured", exc)
            return None
        version = self._schema_version(table, schema_document(columns, key_columns, masks))
        codec = MyRowCodec(columns, key_columns, masks)
        return TableView(table, codec, version,
                         row_images(event.columns, key_row_reader(event.columns, codec)))

    def _describe_parent(self, table: str, event: Any) -> TableView:
        """A parent table's codec for its rows decoded from the binlog (in the reader), when
        it is not captured: of the columns its children reference only (whatever the types
        of the others), for the foreign-key events it derives; no schema version."""
        referenced = {c for key in self.cascade_plan.children(table) for c in key.referenced}
        binlog = [c for c in event.columns if getattr(c, "name", None) in referenced]
        columns = columns_from_binlog(binlog, self._catalog_columns(table, referenced))
        return TableView(table, MyRowCodec(columns, [c.name for c in columns]), 0)

    def _binlog_key(self, table: str, event: Any) -> list[str]:
        """The key columns of a table's rows event, in key order: ``source.keys``; the
        primary key the event carries; the key read before; else (a table without a
        primary key that joined capture since) the catalog's (:func:`catalog.table_key`)."""
        configured = self.config.key_of(table)
        if configured:  # source.keys: the table's key, primary key or not
            return list(configured)
        key = event.primary_key  # in column order, which need not be the key's order
        # mysql-replication gives "" for a table without one
        key_columns = [key] if isinstance(key, str) and key else list(key or ())
        known = self.chunks.known_key(table)
        if known is not None and (not key_columns or set(known) == set(key_columns)):
            return list(known)  # in key order; a unique index's when no primary key
        if key_columns:
            return key_columns
        return list(catalog.table_key(self._catalog_rows(catalog.UNIQUE_INDEXES_SQL, table),
                                      None)[0])

    def _reader_connection(self) -> DumpConnection:
        """The connection of the binlog reader's thread (which alone calls this)."""
        if self._catalog_conn is None or not self._catalog_conn.open:
            self._catalog_conn = connect(self.config.dsn)
        return self._catalog_conn

    def _catalog_columns(self, table: str, names: Collection[str] | None = None
                         ) -> dict[str, MyColumn]:
        """The table's columns (or those of ``names``) as information_schema describes
        them now, by name; UnsupportedType for a column of a type the worker does not
        read."""
        rows = [r for r in self._catalog_rows(COLUMNS_SQL, table)
                if names is None or str(r[0]) in names]
        columns = (column_from_information_schema(row) for row in rows)
        return {column.name: column for column in columns}

    def _catalog_rows(self, sql: str, table: str) -> list[tuple[Any, ...]]:
        """A catalog query about ``table``, on a connection of the binlog reader's thread
        (which alone calls this)."""
        with connection_errors("reading the catalog"), \
                self._reader_connection().cursor() as cursor:
            cursor.execute(sql, split_table(table))
            return list(cursor.fetchall())

    def _reload_cascades(self) -> CascadePlan:
        """The foreign keys again, on the binary log reader's thread's connection (a DDL
        statement in the log may have changed them). The session ends if they now reach a
        database the reader does not read: the next one reads it."""
        conn = self._reader_connection()

        def query(sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
            with connection_errors("reading foreign keys"), conn.cursor() as cursor:
                cursor.execute(sql, params)
                return list(cursor.fetchall())

        captured = list(self.capture.selection().existing)
        keys, _ = cascades.foreign_keys(query, captured)
        plan = cascades.plan(keys, captured)
        now, before = self._databases(plan), self._databases(self.cascade_plan)
        if now is not None and before is not None and not now <= before:
            raise SourceUnavailable("foreign keys now cascade from another database: the "
                                    "session restarts to read its binary log events")
        self.cascade_plan = plan
        return plan

    def _databases(self, plan: CascadePlan) -> set[str] | None:
        """The databases whose binary log events the reader reads: those the tables'
        entries name and the cascading parents'; None: all of them (a pattern's database)."""
        named = self.config.selector.schemas
        if named is None:
            return None
        return {*named, *(split_table(t)[0] for t in plan.parents)}

    # -- watermarks -----------------------------------------------------------

    def write_watermark(self, token: str) -> None:
        """Write a watermark; returns once it is committed (an upsert: a lost row comes back).

        With ``watermarks = "position"`` nothing is written: the low watermark starts the
        window's snapshots (:mod:`dblog_worker.mysql.snapshot`), and the high watermark
        places both where the log passes the snapshots' positions, the first and the last."""
        if is_low_watermark(token):
            if self._xa and self._replica is None:  # before the SELECT: which XA commits
                self._confirm_xa()                  # it sees for sure (replica: once LW is)
            self._lows.add(token)
        if self._snapshots is None:
            with connection_errors("writing a watermark"), self.server.conn.cursor() as cursor:
                cursor.execute(catalog.WATERMARK_UPSERT, (self.name, token))
        elif is_low_watermark(token):
            if self._reader is None:
                raise SourceUnavailable("the binary log is not being read")
            self._snapshots.open(token, self._reader.taken())
        else:
            self._place_window(token)

    def _place_window(self, high: str) -> None:
        """The window's watermarks at its first and last snapshot's positions (a window
        that read nothing: where the loop is). Windows of an idle log share a position:
        ``sub`` keeps their rows apart and after any event there: past the rows of the
        window before and past what has landed (the session starts from the output's
        last position, not from a clock another leader may not share)."""
        assert self._snapshots is not None
        low, taken, rows, after = self._snapshots.close()
        if low is None:
            raise ProtocolError(f"high watermark {high} without a low watermark")
        if self._reader is None:
            raise SourceUnavailable("the binary log is not being read")
        if taken:
            first = min(taken, key=lambda snapshot: snapshot.position)
            last = max(taken, key=lambda snapshot: snapshot.position)
        else:
            first = last = Snapshot(Position(after.major, after.minor), time.time_ns() // 1000)
        sub = self._next_sub
        self._next_sub = sub + rows + 2
        self._reader.mark(Watermark(low, first.position._replace(sub=sub), first.at_us))
        deferred = [snapshot for snapshot in taken if snapshot.floor is not None]
        snapshots = self._snapshots
        self._reader.mark(Watermark(high, last.position._replace(sub=sub), last.at_us),
                          (lambda: snapshots.check(deferred)) if deferred else None)

    def await_low_watermark(self) -> None:
        """On a read replica: until it has applied the binary log up to the low watermark,
        in every replication domain (transactions of different domains may be applied out
        of order; within one, in order)."""
        if self._replica is None:
            return
        if not self.server.is_mariadb:
            raise ReplicaBehind("reads on a read replica need MariaDB (MASTER_GTID_WAIT); "
                                "this source is MySQL: remove [source.replica]; the dump waits")
        position = str(self.server.one("SELECT @@gtid_binlog_pos")[0] or "")
        if not position:  # an empty position would not wait at all
            raise ReplicaBehind("the source's binary log has no GTID position after the low "
                                "watermark (is the binary log off?); the dump waits")
        self._replica.catch_up(position, self.server.binlog_state)
        if self._xa:  # the replica applied every XA commit before LW: which are visible
            self._confirm_xa()

    def heartbeat(self) -> None:
        if self._snapshots is None:  # positions as watermarks write nothing
            self.write_watermark(HEARTBEAT)

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None
        if self._catalog_conn is not None:
            with contextlib.suppress(Exception):
                self._catalog_conn.close()
            self._catalog_conn = None
