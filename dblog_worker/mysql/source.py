"""One MySQL or MariaDB server, as the worker sees it: setup, and its parts.

Two connections: the binary log (``binlog.BinlogReader``, in its own thread) and one
PyMySQL connection in autocommit for everything else (:class:`~dblog_worker.mysql.server.
MyServer`) -- watermark writes, the catalog, and chunk SELECTs, each a single statement:
non-stale reads, no locks, no ``FLUSH TABLES``, no ``LOCK TABLES``. With ``watermarks =
"position"`` (MariaDB) nothing is written: each chunk SELECT runs alone in a consistent
snapshot, and the window's watermarks are the snapshots' binary log positions
(:mod:`dblog_worker.mysql.snapshot`).

The parts: ``log`` and ``watermarks``, one :class:`~dblog_worker.mysql.log_reader.
MyLogReader`; ``chunks`` and ``tables``, one :class:`~dblog_worker.mysql.reads.
CapturedTables`; ``pressure``, :class:`~dblog_worker.mysql.pressure.MyPressure`.
:class:`MySqlSource` keeps setup: preflight, the watermark table, the catalog's tables.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import replace
from typing import Any

import pymysql

from dblog_worker.config import SourceConfig
from dblog_worker.errors import ConfigError, DumpFailed
from dblog_worker.masking import MaskConflict
from dblog_worker.mysql import cascades, catalog
from dblog_worker.mysql.catalog import qualified
from dblog_worker.mysql.column_model import (
    COLUMNS_SQL,
    UnsupportedType,
    column_from_information_schema,
)
from dblog_worker.mysql.connection import DENIED, connect
from dblog_worker.mysql.log_reader import MyLogReader
from dblog_worker.mysql.options import my_options
from dblog_worker.mysql.pressure import MyPressure
from dblog_worker.mysql.reads import CapturedTables, UnsupportedTable, unsupported
from dblog_worker.mysql.replica import MyReplica
from dblog_worker.mysql.resultset import DumpConnection
from dblog_worker.mysql.server import MyServer
from dblog_worker.mysql.snapshot import WindowSnapshots
from dblog_worker.names import split_table
from dblog_worker.source import ChunkReader, Problem, SchemaVersion, Tables
from dblog_worker.table_patterns import Candidate, Rescan, Selection
from dblog_worker.tables import WATERMARK_SCHEMA as SCHEMA
from dblog_worker.tables import CapturedSet

log = logging.getLogger(__name__)

_NO_SNAPSHOT_POSITION = (
    'watermarks = "position" needs MariaDB: MySQL gives no binary log position for a '
    "consistent snapshot, and positions read around a SELECT are not sound (a transaction "
    "is in the binary log before its commit is visible)")


class MySqlSource:
    """One MySQL or MariaDB server: the captured tables of one or more databases."""

    def __init__(self, config: SourceConfig, schema_version: SchemaVersion) -> None:
        self.config = config
        self.name = config.name
        self._registry = schema_version
        # The binlog reader's thread asks for schema versions too: one at a time.
        self._versions_lock = threading.Lock()
        self.server = MyServer(config.dsn)
        self._replica = MyReplica(config) if config.replica is not None else None
        # watermarks = "position": no table; each chunk read in a consistent snapshot
        self._snapshots = None if my_options(config).watermark_table else WindowSnapshots()
        self.capture = CapturedSet(config.selector, config.columns, self._candidates)
        self.chunks = CapturedTables(
            config.name, self.capture.tables,
            self._replica.connection if self._replica is not None else lambda: self.server.conn,
            self._schema_version, primary=lambda: self.server.conn,
            replica=self._replica is not None,
            snapshots=self._snapshots, rules=config.columns, keys=config.keys,
            lanes=self._lane)
        self.tables: Tables = self.chunks  # the chunk reader describes the tables it reads
        self.pressure = MyPressure(lambda: self.server.conn, None if self._replica is None
                                   else self._replica.connection)
        self.log = MyLogReader(config, self.server, self._replica, self._snapshots,
                               self.chunks, self.capture, self._schema_version)
        self.watermarks = self.log  # written through the binary log reader's state
        self._lanes: list[_Lane] = []

    # -- connection and checks ------------------------------------------------

    def _schema_version(self, table: str, schema: Mapping[str, object]) -> int:
        with self._versions_lock:
            return self._registry(table, schema)

    def connect(self) -> None:
        self.server.connect()
        if self._replica is not None:
            self._replica.primary_server = str(self.server.one("SELECT @@server_id")[0])

    def _candidates(self) -> list[Candidate]:
        schemas = self.config.selector.schemas
        tables, keys = catalog.CANDIDATE_TABLES_SQL, catalog.CANDIDATE_KEYS_SQL
        params: tuple[str, ...] = ()
        if schemas is not None:
            params = tuple(sorted(schemas))
            tables, keys = (catalog.in_schemas(sql, len(params)) for sql in (tables, keys))
        indexes: dict[str, list[tuple[Any, ...]]] = {}
        for database, name, *index in self.server.rows(keys, params):
            indexes.setdefault(f"{database}.{name}", []).append(tuple(index))
        return [Candidate(table, catalog.table_key(indexes.get(table, []),
                                                   self.config.key_of(table))[0])
                for table in (f"{database}.{name}"
                              for database, name in self.server.rows(tables, params))]

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
            str(n).lower(): str(v) for n, v in self.server.rows(
                f"SHOW GLOBAL VARIABLES WHERE Variable_name IN ({placeholders})", names)
        }
        problems = catalog.setting_problems(settings)
        user = str(self.server.one("SELECT CURRENT_USER()")[0])
        account = "'{}'@'{}'".format(*user.rsplit("@", 1)) if "@" in user else user
        scopes = catalog.grants(self.server.rows("SHOW GRANTS"))
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
            self.server.rows("XA RECOVER")
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
        keys, unseen = cascades.foreign_keys(self.server.rows, captured)
        self.log.cascade_plan = cascades.plan(keys, captured)
        problems += cascades.problems(self.log.cascade_plan, unseen, account)
        if self._replica is not None:
            if self.server.is_mariadb:
                problems += self._replica.problems(list(selection.existing),
                                                   self.server.binlog_state())
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
        if not self.server.is_mariadb:
            return [Problem(_NO_SNAPSHOT_POSITION, 'set watermarks = "table" (the default)')]
        problems = []
        for table in tables:
            database, name = split_table(table)
            for (engine,) in self.server.rows(
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
        elif self.server.is_mariadb:
            reads = "on the read replica (MariaDB, by GTID; each window waits for LW)"
        else:
            reads = "on the source: [source.replica] needs MariaDB (this server is MySQL)"
        table = self._snapshots is None
        position = ("available: no table, no write grant; each chunk SELECT in a consistent "
                    "snapshot whose binary log position is the watermark" if self.server.is_mariadb
                    else f"not available: {_NO_SNAPSHOT_POSITION}")
        keys = []
        for name in self.capture.rescan().selection.existing:
            key, chosen = catalog.table_key(
                self.server.rows(catalog.UNIQUE_INDEXES_SQL, split_table(name)),
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
        lines = cascades.summary(self.log.cascade_plan)
        return lines or ["no foreign key with ON DELETE / ON UPDATE CASCADE or SET NULL "
                         "reaches a captured table"]

    def _table_problems(self, table: str, scopes: dict[str, set[str]],
                        account: str) -> list[Problem]:
        database, name = split_table(table)
        may_select = catalog.has_privilege(scopes, "SELECT", database, name)
        if not self.server.rows("SELECT 1 FROM information_schema.TABLES WHERE "
                                "TABLE_SCHEMA = %s AND TABLE_NAME = %s", (database, name)):
            if may_select:  # so it would be seen
                return [Problem(f"table {table} does not exist",
                                "create it, or remove it from source.tables")]
            # A table the account has no privilege on is not shown to it: say both.
            return [Problem(f"{account} may not SELECT from {table} (or it does not exist)",
                            f"GRANT SELECT ON {qualified(table)} TO {account};")]
        problems = []
        configured = self.config.key_of(table)
        key, _ = catalog.table_key(
            self.server.rows(catalog.UNIQUE_INDEXES_SQL, (database, name)), configured)
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
        for row in self.server.rows(COLUMNS_SQL, (database, name)):
            try:
                column_from_information_schema(row)
            except UnsupportedType as exc:  # the other tables are captured
                what, _, fix = unsupported(table, exc).partition(" Fix: ")
                problems.append(Problem(what, fix, capture=False))
                break
        return problems

    def _configured_key_problems(self, table: str, key: Sequence[str]) -> list[Problem]:
        database, name = split_table(table)
        columns = {str(r[0]) for r in self.server.rows(
            "SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = %s "
            "AND TABLE_NAME = %s", (database, name))}
        unknown = [c for c in key if c not in columns]
        if unknown:
            return [Problem(f"source.keys names column(s) {', '.join(unknown)} of {table}, "
                            "which it does not have", f"fix source.keys for {table}")]
        nullable = {str(r[0]) for r in self.server.rows(catalog.NULLABLE_SQL, (database, name))}
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
            return self.server.current().encode()
        try:
            # Only what is missing: CREATE ... IF NOT EXISTS needs the CREATE privilege
            # even when the object exists, and preflight asks for it only when it does not.
            if not self._schema_exists():
                self.server.rows(f"CREATE DATABASE IF NOT EXISTS `{SCHEMA}` CHARACTER SET utf8mb4")
            if not self._watermark_exists():
                self.server.rows(catalog.WATERMARK_DDL)
            self.server.rows(f"INSERT IGNORE INTO `{SCHEMA}`.`watermark` "
                             "(source, value, written_at) VALUES (%s, '', UTC_TIMESTAMP(6))",
                             (self.name,))
        except pymysql.MySQLError as exc:
            if exc.args and exc.args[0] in DENIED:
                raise ConfigError(
                    f"the worker may not set up capture on the source: {exc}; "
                    "run `dblog preflight` for the grants it needs") from exc
            raise
        self._load_captured()
        return self.server.current().encode()

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
        return bool(self.server.rows(
            "SELECT 1 FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = %s", (SCHEMA,)))

    def _watermark_exists(self) -> bool:
        return bool(self.server.rows(
            "SELECT 1 FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s "
            "AND TABLE_NAME = 'watermark'", (SCHEMA,)))

    def readers(self) -> dict[str, str]:
        return {}  # one implementation of each part: nothing to choose between

    def capture_exists(self) -> bool:
        return False  # the server keeps no position for its binlog readers

    # -- watermarks -----------------------------------------------------------

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
        self.log.close()
        self.server.close()


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
