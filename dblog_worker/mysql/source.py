"""One MySQL or MariaDB server, as the worker sees it: binlog capture and chunk reads.

Two connections: the binary log (``binlog.BinlogReader``, in its own thread) and one
PyMySQL connection in autocommit for everything else -- watermark writes, the catalog,
and chunk SELECTs, each a single statement: non-stale reads, no locks, no ``FLUSH
TABLES``, no ``LOCK TABLES``. With ``watermarks = "position"`` (MariaDB) nothing is
written: each chunk SELECT runs alone in a consistent snapshot, and the window's
watermarks are the snapshots' binary log positions (:mod:`dblog_worker.mysql.snapshot`).
The MySQL server keeps no replication state for us (no slot): the checkpoint in Redis is
the whole of it.

The captured tables and the chunk and key reads are :class:`reads.CapturedTables`'s: the
source's ``chunks`` and ``tables`` parts.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import replace
from typing import Any

import pymysql

from dblog_worker.config import SourceConfig
from dblog_worker.errors import (
    ConfigError,
    DumpFailed,
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
from dblog_worker.mysql.catalog import qualified
from dblog_worker.mysql.checkpoint import BinlogCheckpoint, file_number
from dblog_worker.mysql.column_model import (
    COLUMNS_SQL,
    MyColumn,
    UnsupportedType,
    column_from_information_schema,
    columns_from_binlog,
    schema_document,
)
from dblog_worker.mysql.connection import DENIED, connect, connection_errors
from dblog_worker.mysql.options import my_options, server_id, url_args
from dblog_worker.mysql.pressure import MyPressure
from dblog_worker.mysql.reads import CapturedTables, UnsupportedTable, unsupported
from dblog_worker.mysql.replica import MyReplica
from dblog_worker.mysql.resultset import DumpConnection
from dblog_worker.mysql.rowimage import row_images
from dblog_worker.mysql.rowtext import key_row_reader
from dblog_worker.mysql.snapshot import Snapshot, WindowSnapshots
from dblog_worker.mysql.translate import NO_CASCADES, BinlogTranslator, TableView
from dblog_worker.mysql.values import MyRowCodec
from dblog_worker.mysql.xa_visibility import XaCommits, xids_listed
from dblog_worker.names import split_table
from dblog_worker.position import Position
from dblog_worker.source import ChunkReader, Problem, SchemaVersion, Tables
from dblog_worker.table_patterns import Candidate, Rescan, Selection
from dblog_worker.tables import HEARTBEAT, CapturedSet
from dblog_worker.tables import WATERMARK_SCHEMA as SCHEMA

log = logging.getLogger(__name__)

_PARSE_ERROR = 1064  # SHOW BINARY LOG STATUS on MariaDB or MySQL before 8.2
_CHECKPOINTS_LOOKED_AT = 1000  # events at the start of a binary log file
# A window's watermarks' sub: above any row's (twice its index in an event or an XA
# transaction), so that the window's rows come after the rows of the transaction it ends at.
_SUB_BASE = 1 << 40
_XA_CONFIRM_S = 1.0  # without windows, how often XA commits kept are confirmed
_NO_SNAPSHOT_POSITION = (
    'watermarks = "position" needs MariaDB: MySQL gives no binary log position for a '
    "consistent snapshot, and positions read around a SELECT are not sound (a transaction "
    "is in the binary log before its commit is visible)")


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


class MySqlSource:
    """One MySQL or MariaDB server: the captured tables of one or more databases."""

    def __init__(self, config: SourceConfig, schema_version: SchemaVersion) -> None:
        self.config = config
        self.name = config.name
        self._registry = schema_version
        # The binlog reader's thread asks for schema versions too: one at a time.
        self._versions_lock = threading.Lock()
        self._args = url_args(config.dsn)
        self._conn: pymysql.connections.Connection[Any] | None = None
        self._replica = MyReplica(config) if config.replica is not None else None
        # watermarks = "position": no table; each chunk read in a consistent snapshot
        self._snapshots = None if my_options(config).watermark_table else WindowSnapshots()
        self._next_sub = _SUB_BASE  # the next window's watermarks' sub, at least
        self._xa = XaCommits()  # XA commits read that a chunk SELECT may not see yet
        self._xa_confirmed_at = 0.0
        self._xa_denied = False
        self._lows: set[str] = set()  # low watermarks written, not read back yet
        self.capture = CapturedSet(config.selector, config.columns, self._candidates)
        self.chunks = CapturedTables(
            config.name, self.capture.tables,
            self._replica.connection if self._replica is not None else lambda: self.conn,
            self._schema_version, primary=lambda: self.conn, replica=self._replica is not None,
            snapshots=self._snapshots, rules=config.columns, keys=config.keys,
            lanes=self._lane)
        self.tables: Tables = self.chunks  # the chunk reader describes the tables it reads
        self.pressure = MyPressure(lambda: self.conn, None if self._replica is None
                                   else self._replica.connection)
        self._reader: BinlogReader | None = None
        self._is_mariadb = False
        self._server = ""  # which server: "server_id=1" (MariaDB), "server_uuid=…" (MySQL)
        self._status_sql = "SHOW BINARY LOG STATUS"
        self._lanes: list[_Lane] = []
        self._catalog_conn: DumpConnection | None = None  # the binlog reader thread's
        self._cascades: CascadePlan = NO_CASCADES  # read by preflight

    # -- connection and checks ------------------------------------------------

    def _schema_version(self, table: str, schema: Mapping[str, object]) -> int:
        with self._versions_lock:
            return self._registry(table, schema)

    def connect(self) -> None:
        self._conn = connect(self.config.dsn)
        version = str(self._one("SELECT VERSION()")[0])
        self._is_mariadb = "mariadb" in version.lower()
        variable = "server_id" if self._is_mariadb else "server_uuid"
        self._server = f"{variable}={self._one(f'SELECT @@{variable}')[0]}"
        if self._replica is not None:
            self._replica.primary_server = str(self._one("SELECT @@server_id")[0])

    @property
    def conn(self) -> pymysql.connections.Connection[Any]:
        if self._conn is None or not self._conn.open:
            raise SourceUnavailable("not connected to the source database")
        return self._conn

    def _rows(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with connection_errors("querying"), self.conn.cursor() as cursor:
            cursor.execute(sql, params)
            return list(cursor.fetchall())

    def _one(self, sql: str, params: Sequence[Any] = ()) -> tuple[Any, ...]:
        rows = self._rows(sql, params)
        if not rows:
            raise SourceUnavailable(f"{sql.split()[0]} returned no row")
        return rows[0]

    def _candidates(self) -> list[Candidate]:
        schemas = self.config.selector.schemas
        tables, keys = catalog.CANDIDATE_TABLES_SQL, catalog.CANDIDATE_KEYS_SQL
        params: tuple[str, ...] = ()
        if schemas is not None:
            params = tuple(sorted(schemas))
            tables, keys = (catalog.in_schemas(sql, len(params)) for sql in (tables, keys))
        indexes: dict[str, list[tuple[Any, ...]]] = {}
        for database, name, *index in self._rows(keys, params):
            indexes.setdefault(f"{database}.{name}", []).append(tuple(index))
        return [Candidate(table, catalog.table_key(indexes.get(table, []),
                                                   self.config.key_of(table))[0])
                for table in (f"{database}.{name}"
                              for database, name in self._rows(tables, params))]

    def selection(self) -> Selection:
        return self.capture.selection()

    def rescan(self) -> Rescan:
        """The catalog again. The binary log needs no change: the translator decides by
        name, in log order, so a new table's rows are captured from its first in the log."""
        found = self.capture.rescan()
        for table in found.removed:
            self.chunks.forget(table)
        return found

    def preflight(self) -> list[Problem]:
        """Every problem that stops capture, each with its fix. Changes nothing. A table a
        pattern brought in never stops capture: its problems are warnings."""
        selection = self.capture.rescan().selection
        selector = self.config.selector
        names = catalog.SETTINGS
        placeholders = ", ".join(["%s"] * len(names))
        settings = {  # not information_schema.GLOBAL_VARIABLES: MySQL 8.0 removed it
            str(n).lower(): str(v) for n, v in self._rows(
                f"SHOW GLOBAL VARIABLES WHERE Variable_name IN ({placeholders})", names)
        }
        problems = catalog.setting_problems(settings)
        user = str(self._one("SELECT CURRENT_USER()")[0])
        account = "'{}'@'{}'".format(*user.rsplit("@", 1)) if "@" in user else user
        scopes = catalog.grants(self._rows("SHOW GRANTS"))
        if not catalog.has_privilege(scopes, "REPLICATION SLAVE"):
            problems.append(Problem(
                f"{account} may not read the binary log (REPLICATION SLAVE)",
                f"GRANT REPLICATION SLAVE ON *.* TO {account};"))
        if not any(catalog.has_privilege(scopes, p)
                   for p in ("REPLICATION CLIENT", "BINLOG MONITOR", "SUPER")):
            problems.append(Problem(
                f"{account} may not read the binary log position (REPLICATION CLIENT; "
                "MariaDB 10.5+: BINLOG MONITOR)",
                f"GRANT REPLICATION CLIENT ON *.* TO {account};"))
        try:
            self._rows("XA RECOVER")
        except pymysql.MySQLError as exc:
            problems.append(Problem(
                f"{account} may not run XA RECOVER ({exc}): a chunk read right after an XA "
                "transaction's commit could land an older row after it",
                f"GRANT XA_RECOVER_ADMIN ON *.* TO {account};", capture=False))
        if self._snapshots is None:
            problems += self._watermark_table_problems(scopes, account)
        else:
            problems += self._position_problems(selection.existing)
        for table in selection.tables:
            found = self._table_problems(table, scopes, account)
            problems += found if selector.named(table) else [
                replace(p, what=f"{p.what} (a table a pattern matched: capture goes on)",
                        capture=False, warning=True) for p in found]
        captured = list(selection.existing)
        keys, unseen = cascades.foreign_keys(self._rows, captured)
        self._cascades = cascades.plan(keys, captured)
        problems += cascades.problems(self._cascades, unseen, account)
        if self._replica is not None:
            if self._is_mariadb:
                problems += self._replica.problems(list(selection.existing),
                                                   self._binlog_state())
            else:
                problems.append(Problem(
                    "[source.replica]: reads on a read replica need MariaDB "
                    "(MASTER_GTID_WAIT); this source is MySQL",
                    "remove [source.replica]", capture=False))
        return problems

    def _watermark_table_problems(self, scopes: dict[str, set[str]],
                                  account: str) -> list[Problem]:
        problems = []
        for privilege in ("INSERT", "UPDATE", "SELECT"):
            if not catalog.has_privilege(scopes, privilege, SCHEMA, "watermark"):
                problems.append(Problem(
                    f"{account} may not {privilege} the watermark table {SCHEMA}.watermark",
                    f"GRANT SELECT, INSERT, UPDATE ON `{SCHEMA}`.* TO {account};"))
                break
        may_create = catalog.has_privilege(scopes, "CREATE", SCHEMA)
        if not self._schema_exists():
            if not may_create:
                problems.append(Problem(
                    f"the database {SCHEMA} does not exist and {account} may not create it",
                    f"CREATE DATABASE IF NOT EXISTS `{SCHEMA}`; GRANT SELECT, INSERT, UPDATE, "
                    f"CREATE ON `{SCHEMA}`.* TO {account};"))
        elif not self._watermark_exists() and not may_create:
            problems.append(Problem(
                f"the table {SCHEMA}.watermark does not exist and {account} may not create it",
                f"GRANT CREATE ON `{SCHEMA}`.* TO {account};"))
        return problems

    def _position_problems(self, tables: Sequence[str]) -> list[Problem]:
        """``watermarks = "position"``: MariaDB, and captured tables that its consistent
        snapshots cover (a transactional engine)."""
        if not self._is_mariadb:
            return [Problem(_NO_SNAPSHOT_POSITION, 'set watermarks = "table" (the default)')]
        problems = []
        for table in tables:
            database, name = split_table(table)
            for (engine,) in self._rows(
                    "SELECT ENGINE FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s "
                    "AND TABLE_NAME = %s", (database, name)):
                if str(engine or "").lower() != "innodb":
                    problems.append(Problem(
                        f"table {table} uses the {engine} engine, which a consistent snapshot "
                        'does not cover: with watermarks = "position" its chunks could hold '
                        "changes logged after the watermark",
                        f"ALTER TABLE {qualified(table)} ENGINE = InnoDB; or set "
                        'watermarks = "table"'))
        return problems

    def modes(self) -> list[str]:
        replica = self.config.replica
        if replica is None:
            reads = "on the source (set [source.replica] to read them on a MariaDB replica)"
        elif self._is_mariadb:
            reads = "on the read replica (MariaDB, by GTID; each window waits for LW)"
        else:
            reads = "on the source: [source.replica] needs MariaDB (this server is MySQL)"
        table = self._snapshots is None
        position = ("available: no table, no write grant; each chunk SELECT in a consistent "
                    "snapshot whose binary log position is the watermark" if self._is_mariadb
                    else f"not available: {_NO_SNAPSHOT_POSITION}")
        keys = []
        for name in self.capture.rescan().selection.existing:
            key, chosen = catalog.table_key(
                self._rows(catalog.UNIQUE_INDEXES_SQL, split_table(name)),
                self.config.key_of(name))
            if key:
                keys.append(f"table {name}: key ({', '.join(key)}) from {chosen}")
        return [
            f"watermarks = \"table\"{' (configured)' if table else ''}: upserts of "
            f"{SCHEMA}.watermark (needs INSERT and UPDATE on it)",
            f"watermarks = \"position\"{'' if table else ' (configured)'}: {position}",
            *keys,
            f"chunk reads: {reads}",
        ]

    def cascades(self) -> list[str]:
        """The foreign keys that cascade into captured tables (read by :meth:`preflight`),
        and what the worker does about each."""
        lines = cascades.summary(self._cascades)
        return lines or ["no foreign key with ON DELETE / ON UPDATE CASCADE or SET NULL "
                         "reaches a captured table"]

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
        now, before = self._databases(plan), self._databases(self._cascades)
        if now is not None and before is not None and not now <= before:
            raise SourceUnavailable("foreign keys now cascade from another database: the "
                                    "session restarts to read its binary log events")
        self._cascades = plan
        return plan

    def _databases(self, plan: CascadePlan) -> set[str] | None:
        """The databases whose binary log events the reader reads: those the tables'
        entries name and the cascading parents'; None: all of them (a pattern's database)."""
        named = self.config.selector.schemas
        if named is None:
            return None
        return {*named, *(split_table(t)[0] for t in plan.parents)}

    def _table_problems(self, table: str, scopes: dict[str, set[str]],
                        account: str) -> list[Problem]:
        database, name = split_table(table)
        may_select = catalog.has_privilege(scopes, "SELECT", database, name)
        if not self._rows("SELECT 1 FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s "
                          "AND TABLE_NAME = %s", (database, name)):
            if may_select:  # so it would be seen
                return [Problem(f"table {table} does not exist",
                                "create it, or remove it from source.tables")]
            # A table the account has no privilege on is not shown to it: say both.
            return [Problem(f"{account} may not SELECT from {table} (or it does not exist)",
                            f"GRANT SELECT ON {qualified(table)} TO {account};")]
        problems = []
        configured = self.config.key_of(table)
        key, _ = catalog.table_key(self._rows(catalog.UNIQUE_INDEXES_SQL, (database, name)),
                                   configured)
        if not key:
            problems.append(Problem(
                f"table {table} has no primary key and no unique index on NOT NULL columns: "
                "its rows cannot be told apart",
                f"ALTER TABLE {qualified(table)} ADD PRIMARY KEY (...); -- or name its key "
                f'columns: [source] keys = {{ "{table}" = ["<column>", ...] }}'))
        else:
            if configured:
                problems += self._configured_key_problems(table, configured)
            try:
                self.config.columns.for_table(table, key, key)
            except MaskConflict as exc:
                problems.append(Problem(str(exc), "change [source.columns] so that no rule "
                                        "reaches a key column of the table"))
        if not may_select:
            problems.append(Problem(f"{account} may not SELECT from {table}",
                                    f"GRANT SELECT ON {qualified(table)} TO {account};"))
        for row in self._rows(COLUMNS_SQL, (database, name)):
            try:
                column_from_information_schema(row)
            except UnsupportedType as exc:  # the other tables are captured
                what, _, fix = unsupported(table, exc).partition(" Fix: ")
                problems.append(Problem(what, fix, capture=False))
                break
        return problems

    def _configured_key_problems(self, table: str, key: Sequence[str]) -> list[Problem]:
        database, name = split_table(table)
        columns = {str(r[0]) for r in self._rows(
            "SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = %s "
            "AND TABLE_NAME = %s", (database, name))}
        unknown = [c for c in key if c not in columns]
        if unknown:
            return [Problem(f"source.keys names column(s) {', '.join(unknown)} of {table}, "
                            "which it does not have", f"fix source.keys for {table}")]
        nullable = {str(r[0]) for r in self._rows(catalog.NULLABLE_SQL, (database, name))}
        if any(c in nullable for c in key):
            null = [c for c in key if c in nullable]
            return [Problem(
                f"key column(s) {', '.join(null)} of {table} (source.keys) may be NULL: a row "
                "with a NULL key would never be dumped",
                f"ALTER TABLE {qualified(table)} MODIFY ... NOT NULL; -- for {', '.join(null)}")]
        return []

    def prepare(self) -> str | None:
        """Create the watermark table (unless the watermarks are positions), and return the
        log's end now."""
        if self._snapshots is not None:
            self._load_captured()
            return self._current().encode()
        try:
            # Only what is missing: CREATE ... IF NOT EXISTS needs the CREATE privilege
            # even when the object exists, and preflight asks for it only when it does not.
            if not self._schema_exists():
                self._rows(f"CREATE DATABASE IF NOT EXISTS `{SCHEMA}` CHARACTER SET utf8mb4")
            if not self._watermark_exists():
                self._rows(catalog.WATERMARK_DDL)
            self._rows(f"INSERT IGNORE INTO `{SCHEMA}`.`watermark` (source, value, written_at) "
                       "VALUES (%s, '', UTC_TIMESTAMP(6))", (self.name,))
        except pymysql.MySQLError as exc:
            if exc.args and exc.args[0] in DENIED:
                raise ConfigError(
                    f"the worker may not set up capture on the source: {exc}; "
                    "run `dblog preflight` for the grants it needs") from exc
            raise
        self._load_captured()
        return self._current().encode()

    def _load_captured(self) -> None:
        """Read the captured tables' columns; one of a type the worker does not read is left
        out (preflight says which, and so does the log), the others are captured."""
        for table in self.capture.selection().existing:
            try:
                self.chunks.load(table)
            except UnsupportedTable as exc:
                log.error("%s", exc)
            except DumpFailed as exc:  # a table a pattern found, dropped since: the next look
                if self.config.selector.named(table):
                    raise
                log.info("%s; it leaves capture at the next look at the catalog", exc)

    def _schema_exists(self) -> bool:
        return bool(self._rows(
            "SELECT 1 FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = %s", (SCHEMA,)))

    def _watermark_exists(self) -> bool:
        return bool(self._rows(
            "SELECT 1 FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s "
            "AND TABLE_NAME = 'watermark'", (SCHEMA,)))

    def readers(self) -> dict[str, str]:
        return {}  # one implementation of each part: nothing to choose between

    def capture_exists(self) -> bool:
        return False  # the server keeps no position for its binlog readers

    def _binlog_status(self) -> tuple[Any, ...]:
        """``SHOW BINARY LOG STATUS`` (MySQL 8.2+; 8.4 has nothing else), or ``SHOW MASTER
        STATUS`` (MariaDB, older MySQL): file, position, ..., and on MySQL the executed
        GTID set."""
        if self._status_sql == "SHOW BINARY LOG STATUS":
            try:
                return self._one(self._status_sql)
            except pymysql.err.ProgrammingError as exc:
                if not exc.args or exc.args[0] != _PARSE_ERROR:
                    raise
                self._status_sql = "SHOW MASTER STATUS"
        return self._one(self._status_sql)

    def _current(self) -> BinlogCheckpoint:
        """The end of the binary log now, with the GTID state there."""
        row = self._binlog_status()
        file, pos = str(row[0]), int(row[1])
        if self._is_mariadb:
            gtid = str(self._one("SELECT BINLOG_GTID_POS(%s, %s)", (file, pos))[0] or "")
        else:  # Executed_Gtid_Set, consistent with file and position; empty if GTIDs are off
            gtid = "".join(str(row[4] or "").split()) if len(row) > 4 else ""
        return BinlogCheckpoint(file, pos, gtid, self._server)

    # -- the log --------------------------------------------------------------

    def start(self, checkpoint: str | None, landed: Position | None = None) -> str:
        start = BinlogCheckpoint.decode(checkpoint) if checkpoint else self._current()
        if landed is not None:  # the windows' rows go after whatever has landed
            self._next_sub = max(self._next_sub, landed.sub + 1)
        if start.server and start.server != self._server:
            raise ConfigError(_other_server(start, self._current()))
        start = replace(start, server=self._server)  # a checkpoint from before it had none
        files = {str(r[0]) for r in self._rows("SHOW BINARY LOGS")}
        if start.file not in files and not start.gtid:
            raise LogGone(
                f"the binary log file {start.file} of checkpoint {start.encode()} is gone "
                f"(purged; the server has {', '.join(sorted(files)) or 'none'}): the changes "
                "since then are lost. Run `dblog reset --yes --config <file>`, start the "
                "worker, then `dblog dump --all` to bring the output back in sync"
            )
        translator = BinlogTranslator(
            self.name, self.config.selector, self._describe, start, cascades=self._cascades,
            describe_parent=self._describe_parent, reload_cascades=self._reload_cascades,
            version_of=self.chunks.known_version)
        databases = self._databases(self._cascades)
        self._reader = BinlogReader(
            self._args, server_id(self.config), start, translator, databases,
            by_gtid=self._by_gtid(start), is_mariadb=self._is_mariadb,
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
        for row in self._rows(f"SHOW BINLOG EVENTS IN %s LIMIT {_CHECKPOINTS_LOOKED_AT}",
                              (start.file,)):
            if str(row[2]) == "Binlog_checkpoint" and int(row[4]) <= start.pos:
                self._snapshots.facts.checkpoint(file_number(str(row[5]).split()[-1]))

    def _by_gtid(self, start: BinlogCheckpoint) -> bool:
        """Resume by GTID where the checkpoint has the state of this server's kind."""
        if self._is_mariadb:
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
                rows = self._rows("XA RECOVER")
            else:
                position = str(self._one("SELECT @@gtid_binlog_pos")[0] or "")
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
        row = self._binlog_status()
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
        referenced = {c for key in self._cascades.children(table) for c in key.referenced}
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
            with connection_errors("writing a watermark"), self.conn.cursor() as cursor:
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
        if not self._is_mariadb:
            raise ReplicaBehind("reads on a read replica need MariaDB (MASTER_GTID_WAIT); "
                                "this source is MySQL: remove [source.replica]; the dump waits")
        position = str(self._one("SELECT @@gtid_binlog_pos")[0] or "")
        if not position:  # an empty position would not wait at all
            raise ReplicaBehind("the source's binary log has no GTID position after the low "
                                "watermark (is the binary log off?); the dump waits")
        self._replica.catch_up(position, self._binlog_state)
        if self._xa:  # the replica applied every XA commit before LW: which are visible
            self._confirm_xa()

    def _binlog_state(self) -> str:
        return str(self._one("SELECT @@gtid_binlog_state")[0] or "")

    def heartbeat(self) -> None:
        if self._snapshots is None:  # positions as watermarks write nothing
            self.write_watermark(HEARTBEAT)

    # -- the lanes of a window's parallel chunk SELECTs ------------------------

    def _lane(self, index: int) -> ChunkReader:
        while len(self._lanes) < index:
            self._lanes.append(_Lane(self.config, self._schema_version,
                                     self._replica, self._snapshots, self.capture.tables))
        return self._lanes[index - 1].chunks

    def close(self) -> None:
        for lane in self._lanes:
            lane.close()
        self._lanes = []
        if self._replica is not None:
            self._replica.close()
        if self._reader is not None:
            self._reader.close()
            self._reader = None
        if self._catalog_conn is not None:
            with contextlib.suppress(Exception):
                self._catalog_conn.close()
            self._catalog_conn = None
        if self._conn is not None:
            with contextlib.suppress(Exception):  # a broken connection may not close cleanly
                self._conn.close()
            self._conn = None


class _Lane:
    """A connection of its own for a window's parallel chunk SELECTs (opened on first use),
    with the captured tables as it reads them; on the read replica if there is one."""

    def __init__(self, config: SourceConfig, schema_version: SchemaVersion,
                 replica_of: MyReplica | None, snapshots: WindowSnapshots | None,
                 captured: Callable[[], Collection[str]]) -> None:
        self._dsn = config.dsn
        self._conn: DumpConnection | None = None
        self._replica = None if replica_of is None \
            else MyReplica(config, replica_of.primary_server)
        self.chunks = CapturedTables(config.name, captured, self._connection,
                                       schema_version, replica=self._replica is not None,
                                       snapshots=snapshots, rules=config.columns,
                                       keys=config.keys)

    def _connection(self) -> pymysql.connections.Connection[Any]:
        if self._replica is not None:
            return self._replica.connection()
        if self._conn is None or not self._conn.open:
            self._conn = connect(self._dsn)
        return self._conn

    def close(self) -> None:
        if self._replica is not None:
            self._replica.close()
        if self._conn is not None:
            with contextlib.suppress(Exception):
                self._conn.close()
            self._conn = None
