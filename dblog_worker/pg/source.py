"""The PostgreSQL source: setup, and its parts: the pgoutput log (``log``,
:mod:`~dblog_worker.pg.log_reader`), the watermarks (``watermarks``,
:mod:`~dblog_worker.pg.watermarks`), the chunk reads and the captured tables (``chunks``,
``tables``), what the throttle reads (``pressure``).

Two connections: the replication stream, and one autocommit connection for the
catalog, the watermark writes (heartbeats too), and chunk SELECTs (single statements at
read committed: non-stale reads, no locks). Both use the same session settings,
so the log and the chunks print values identically (see :mod:`dblog_worker.pg.values`).
The captured tables and the chunk reads are :class:`~dblog_worker.pg.reads.PgChunkReader`'s
(``pg/reads.py``): the source's ``chunks`` and ``tables`` parts.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Collection, Sequence
from dataclasses import replace

import psycopg

from dblog_worker.config import SourceConfig
from dblog_worker.errors import ConfigError, DumpFailed
from dblog_worker.masking import MaskConflict
from dblog_worker.pg import catalog, cells, queries, replica
from dblog_worker.pg.catalog import WATERMARK_DDL
from dblog_worker.pg.connection import (
    Connection,
    connect_source,
    connected,
    connection_errors,
)
from dblog_worker.pg.log_reader import PgLogReader
from dblog_worker.pg.options import pg_options
from dblog_worker.pg.pressure import PgPressure
from dblog_worker.pg.reads import PgChunkReader
from dblog_worker.pg.replica import Replica
from dblog_worker.pg.watermarks import PgWatermarks
from dblog_worker.source import ChunkReader, Problem, SchemaVersion, Tables, locked
from dblog_worker.table_patterns import Candidate, Rescan, Selection
from dblog_worker.tables import WATERMARK_SCHEMA as SCHEMA
from dblog_worker.tables import CapturedSet

log = logging.getLogger(__name__)


class PgSource:
    """One PostgreSQL database, as the worker sees it."""

    def __init__(self, config: SourceConfig, schema_version: SchemaVersion) -> None:
        self.config = config
        self.options = pg_options(config)
        self.name = config.name
        self._conn: Connection | None = None
        self._schema_version = locked(schema_version)  # lanes register from their threads
        self._replica = Replica(config) if config.replica is not None else None
        self.captured = CapturedSet(config.selector, config.columns, self._candidates)
        self.chunks = PgChunkReader(
            config, self._schema_version, lambda: self._conn,
            reads=self._replica.connection if self._replica is not None else None,
            replica=self._replica is not None, captured=self.captured.tables, lanes=self._lane)
        self.tables: Tables = self.chunks  # the chunk reader describes the tables it reads
        self.pressure = PgPressure(lambda: self.conn, None if self._replica is None
                                   else self._replica.connection)
        self._lanes: list[_Lane] = []
        self.log = PgLogReader(config, self.options, lambda: self.conn, self.captured,
                               self.chunks)
        self.watermarks = PgWatermarks(config.name, self.options, lambda: self.conn, self.log,
                                       self._replica)
        cells.announce()

    # -- connection and checks ------------------------------------------------

    def connect(self) -> None:
        self._conn = connect_source(self.config)
        if self._replica is not None:
            with connection_errors("connecting"):
                self._replica.primary_identity = replica.identity(self._conn)

    @property
    def conn(self) -> Connection:
        return connected(self._conn)

    def _candidates(self) -> list[Candidate]:
        with connection_errors("reading the catalog"):
            return catalog.candidates(self.conn, self.config.selector.schemas,
                                      self.config.keys)

    def selection(self) -> Selection:
        return self.captured.selection()

    def preflight(self) -> list[Problem]:
        """Every problem that stops capture, each with its fix. Changes nothing. A table a
        pattern brought in never stops capture: its problems are warnings."""
        selection = self.captured.rescan().selection
        selector = self.config.selector
        with connection_errors("preflight"):
            problems = catalog.server_problems(self.conn)
            infos = []
            for table in selection.tables:
                info = catalog.load_table(self.conn, table, self.config.key_of(table))
                found = catalog.table_problems(info, table)
                found += self._mask_problems(table, info)
                problems += found if selector.named(table) else _warnings(found)
                if info is not None:
                    infos.append(info)
            named = [info for info in infos if selector.named(info.table)]
            matched = [info for info in infos if not selector.named(info.table)]
            problems += catalog.partition_problems(self.conn, infos, named)
            problems += _warnings(catalog.partition_problems(self.conn, infos, matched))
            with_table = self.options.watermark_table
            problems += catalog.privilege_problems(self.conn, named, with_table)
            problems += _warnings(catalog.select_problems(self.conn, matched))
            problems += catalog.publication_problems(
                self.conn, self.options.publication, selection.existing, with_table
            )
            problems += catalog.publication_setting_problems(
                self.conn, self.options.publication, infos, with_table)
            problems += catalog.slot_problems(self.conn, self.options.slot)
            if self._replica is not None:
                problems += self._replica.problems(self.conn, list(selection.existing))
        return problems

    def _mask_problems(self, table: str, info: catalog.TableInfo | None) -> list[Problem]:
        if info is None or not self.config.columns:
            return []
        try:
            self.config.columns.for_table(table, info.columns, info.key_columns)
        except MaskConflict as exc:
            return [Problem(str(exc), "change [source.columns] so that no rule reaches a key "
                            "column of the table")]
        return []

    def modes(self) -> list[str]:
        with connection_errors("preflight"):
            message = catalog.message_problems(self.conn)
        chosen = self.options.watermarks
        lines = [
            f"watermarks = \"table\"{' (configured)' if chosen == 'table' else ''}: "
            "upserts of dblog.watermark; needs the schema and table (or CREATE to make them)",
            f"watermarks = \"message\"{' (configured)' if chosen == 'message' else ''}: "
            + ("available: no table, no write grant" if not message
               else "not available: " + "; ".join(p.what for p in message)),
        ]
        with connection_errors("preflight"):
            for table in self.captured.rescan().selection.existing:
                info = catalog.load_table(self.conn, table, self.config.key_of(table))
                if info is not None and info.key_columns:
                    lines.append(catalog.table_line(info))
        replica = self.config.replica
        lines.append("chunk reads: " + (
            f"on the read replica {replica.safe_dsn(self.config.kind)} (hot standby; each "
            "window waits for it to replay LW)" if replica is not None
            else "on the source (set [source.replica] to read them on a hot standby)"))
        return lines

    def cascades(self) -> list[str]:
        return ["PostgreSQL's logical decoding carries every row a foreign-key cascade "
                "changes: nothing to derive"]

    def prepare(self) -> str | None:
        """Create what capture needs; returns the new slot's position if it was created now."""
        try:
            with connection_errors("setup"):
                return self._prepare()
        except psycopg.errors.InsufficientPrivilege as exc:
            raise ConfigError(
                f"the worker's role may not prepare capture: {exc.diag.message_primary}. "
                "Run `dblog preflight` for the fixes, or let an administrator create the "
                "schema, watermark table and publication (docs/operations.md)"
            ) from None

    def _prepare(self) -> str | None:
        conn = self.conn
        if self.options.watermark_table:
            self._prepare_watermark_table()
        selection = self.captured.selection()
        self._sync_publication(selection.existing)
        for table in selection.existing:
            try:
                self.chunks.load(table)
            except DumpFailed as exc:  # a table a pattern found, dropped since: the next look
                if self.config.selector.named(table):
                    raise
                log.info("%s; it leaves capture at the next look at the catalog", exc)
        if self.capture_exists():
            return None
        created = conn.execute(
            "SELECT lsn::text FROM pg_create_logical_replication_slot(%s, 'pgoutput')",
            (self.options.slot,),
        ).fetchone()
        assert created is not None
        log.info("created replication slot %s at %s", self.options.slot, created[0])
        return str(created[0])

    def _prepare_watermark_table(self) -> None:
        conn = self.conn
        if conn.execute("SELECT to_regnamespace(%s)", (SCHEMA,)).fetchone() == (None,):
            conn.execute(f"CREATE SCHEMA {SCHEMA}".encode())
        if conn.execute("SELECT to_regclass(%s)", (f"{SCHEMA}.watermark",)).fetchone() == (None,):
            conn.execute(WATERMARK_DDL.encode())
        conn.execute(
            f"INSERT INTO {SCHEMA}.watermark (source, value, written_at) "
            "VALUES (%s, '', now()) ON CONFLICT (source) DO NOTHING",
            (self.name,),
        )

    def readers(self) -> dict[str, str]:
        return {"chunk_cells": cells.READER}

    def capture_exists(self) -> bool:
        with connection_errors("reading the slot"):
            return self.conn.execute(
                "SELECT 1 FROM pg_replication_slots WHERE slot_name = %s", (self.options.slot,)
            ).fetchone() is not None

    def rescan(self) -> Rescan:
        """The catalog again; the publication follows: the tables that joined capture are
        added to it (their dumps wait for the transactions open then, see
        ``PgChunkReader._settled``), the tables that left it removed. Rows of a table that
        left capture that are still on their way through the log are translated as they
        were (their Relation message named a captured table)."""
        before = self.captured.selection()
        for attempt in range(3):
            found = self.captured.rescan()
            if not found.added and not found.removed:
                break
            try:
                with connection_errors("changing the publication"):
                    self._sync_publication(found.selection.existing)
                break
            except psycopg.errors.UndefinedTable:  # dropped meanwhile: look again
                self.captured.set(before)
                if attempt == 2:
                    return Rescan(before)
            except psycopg.errors.InsufficientPrivilege as exc:
                log.warning("the worker's role may not change publication %s: %s; the "
                            "tables joining capture are not in the log until it is fixed "
                            "(`dblog preflight` prints how)", self.options.publication,
                            exc.diag.message_primary)
                break
        for table in found.removed:
            self.chunks.captured.forget(table)
        self.log.translator.describe_again(found.added)
        return found

    def _sync_publication(self, tables: Sequence[str]) -> None:
        """Make the publication hold ``tables`` (and the watermark table), created with
        ``publish_via_partition_root`` (a partitioned table's changes under its own name),
        changed by ADD and DROP TABLE, which keep its settings. A table added gets its
        ``not_before``: the xid below which every transaction must have ended before it is
        read (what they wrote to it before it was added is in no log)."""
        wanted = catalog.published_tables(tables, self.options.watermark_table)
        conn = self.conn
        exists = conn.execute(
            "SELECT 1 FROM pg_publication WHERE pubname = %s", (self.options.publication,)
        ).fetchone()
        publication = queries.ident(self.options.publication)
        if exists is None:
            names = ", ".join(f"{queries.ident(s)}.{queries.ident(n)}" for s, n in sorted(wanted))
            conn.execute(f"CREATE PUBLICATION {publication} FOR TABLE {names} "
                         "WITH (publish_via_partition_root = true)".encode(), ())
            return
        if catalog.publication_is_fixed(conn, self.options.publication):
            return
        current = {
            (str(s), str(n)) for s, n in conn.execute(
                queries.publication_tables_sql(), (self.options.publication,)
            ).fetchall()
        }
        added, dropped = sorted(wanted - current), sorted(current - wanted)
        if dropped:
            names = ", ".join(f"{queries.ident(s)}.{queries.ident(n)}" for s, n in dropped)
            conn.execute(f"ALTER PUBLICATION {publication} DROP TABLE {names}".encode(), ())
        if added:
            names = ", ".join(f"{queries.ident(s)}.{queries.ident(n)}" for s, n in added)
            conn.execute(f"ALTER PUBLICATION {publication} ADD TABLE {names}".encode(), ())
            row = conn.execute("SELECT pg_snapshot_xmax(pg_current_snapshot())::text"
                               ).fetchone()
            assert row is not None
            for schema, name in added:
                self.chunks.not_before[f"{schema}.{name}"] = str(row[0])

    # -- the lanes of a window's parallel chunk SELECTs ------------------------

    def _lane(self, index: int) -> ChunkReader:
        while len(self._lanes) < index:
            self._lanes.append(_Lane(self.config, self._schema_version, self._replica,
                                     self.captured.tables))
        return self._lanes[index - 1].chunks

    def close(self) -> None:
        for lane in self._lanes:
            lane.close()
        self._lanes = []
        self.chunks.close()
        if self._replica is not None:
            self._replica.close()
        self.log.close()
        if self._conn is not None:
            with contextlib.suppress(Exception):  # a broken connection may not close cleanly
                self._conn.close()
            self._conn = None


def _warnings(problems: Sequence[Problem]) -> list[Problem]:
    """Problems of a table a pattern brought in: reported, but capture goes on."""
    return [replace(p, what=f"{p.what} (a table a pattern matched: capture goes on)",
                    capture=False, warning=True) for p in problems]



class _Lane:
    """A connection of its own for a window's parallel chunk SELECTs (opened on first use),
    with the captured tables as it reads them; on the read replica if there is one."""

    def __init__(self, config: SourceConfig, schema_version: SchemaVersion,
                 replica_of: Replica | None, captured: Callable[[], Collection[str]]) -> None:
        self._config = config
        self._conn: Connection | None = None
        self._replica = None if replica_of is None \
            else Replica(config, replica_of.primary_identity)
        self.chunks = PgChunkReader(config, schema_version, self._connection,
                                    replica=self._replica is not None, captured=captured)

    def _connection(self) -> Connection:
        if self._replica is not None:
            return self._replica.connection()
        if self._conn is None or self._conn.closed:
            self._conn = connect_source(self._config)
        return self._conn

    def close(self) -> None:
        self.chunks.close()
        if self._replica is not None:
            self._replica.close()
        if self._conn is not None:
            with contextlib.suppress(Exception):
                self._conn.close()
            self._conn = None
