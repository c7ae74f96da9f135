"""The PostgreSQL source: pgoutput log, watermark table, keyset chunk reads.

Two connections: the replication stream, and one autocommit connection for the
catalog, the watermark writes (heartbeats too), and chunk SELECTs (single statements at
read committed: non-stale reads, no locks). Both use the same session settings,
so the log and the chunks print values identically (see :mod:`dblog_worker.pg.values`).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import psycopg
import pyarrow as pa
import pyarrow.compute as pc
from psycopg.pq.abc import PGresult
from psycopg.types.string import TextLoader

from dblog_worker.config import SourceConfig
from dblog_worker.errors import (
    ChunkStale,
    ConfigError,
    DumpFailed,
    LogGone,
    RequestRejected,
    SourceUnavailable,
)
from dblog_worker.events import Checkpoint, Encoded, LogItem
from dblog_worker.names import split_table
from dblog_worker.pg import catalog, queries
from dblog_worker.pg import pgoutput as pg
from dblog_worker.pg.catalog import WATERMARK_DDL, TableInfo
from dblog_worker.pg.columns import ColumnCodec, text_columns
from dblog_worker.pg.options import pg_options
from dblog_worker.pg.stream import ReplicationStream
from dblog_worker.pg.translate import LogTranslator, RelationKind, RelationView
from dblog_worker.pg.values import PgType, RowCodec, libpq_options
from dblog_worker.pg.visibility import Snapshot
from dblog_worker.position import Position
from dblog_worker.requests import KeyTexts
from dblog_worker.source import Chunk, KeysChunk, Problem, SchemaVersion
from dblog_worker.tables import HEARTBEAT, TableCache
from dblog_worker.tables import WATERMARK_SCHEMA as SCHEMA

log = logging.getLogger(__name__)

TextRow = tuple[str | None, ...]

# How often, at most, a snapshot tells which transactions read from the log every later
# snapshot sees (so they need no remembering, and the checkpoint may pass them): while
# transactions are remembered; more often when they are many or the log has paused (the
# checkpoint then moves on at once) (visibility.py).
SNAPSHOT_S = 0.5
SNAPSHOT_SOON_S = 0.05
# The longest the loop waits for a lock (a table a DDL statement holds): the chunk is read
# again later, and the log goes on meanwhile.
LOCK_TIMEOUT = "200ms"


@contextmanager
def _connection_errors(what: str) -> Iterator[None]:
    try:
        yield
    except psycopg.OperationalError as exc:
        raise SourceUnavailable(f"{what}: the source database is unreachable: {exc}") from exc


@functools.cache
def _builtin_oids() -> frozenset[int]:
    oids = set()
    for info in psycopg.postgres.types:
        oids.add(info.oid)
        if info.array_oid:
            oids.add(info.array_oid)
    return frozenset(oids)


def _text(cell: bytes | None) -> str:
    if cell is None:  # a primary key column is NOT NULL
        raise SourceUnavailable("the chunk's last key has a NULL; retrying")
    return bytes(cell).decode()


def _encode_result(codec: ColumnCodec, fields: Sequence[int], result: PGresult) -> Encoded:
    """A chunk's rows as canonical JSON, read column by column from the query result
    (``fields``: the result columns the log carries too, in the codec's order).

    PostgreSQL sends valid UTF-8 (the worker refuses other encodings), so the cells'
    bytes are viewed as strings without decoding them one by one.
    """
    count, get = result.ntuples, result.get_value
    columns = [pa.array([get(r, c) for r in range(count)], pa.binary()).view(pa.string())
               for c in fields]
    return codec.encode(columns)


def _wire_type(oid: int, types: Mapping[int, PgType]) -> int:
    """The type a result column reports for a column of type ``oid``: a domain's base."""
    for _ in range(32):  # domains over domains
        known = types.get(oid)
        if known is None or not known.base_oid:
            break
        oid = known.base_oid
    return oid


def _described(result: PGresult, skip: int) -> tuple[tuple[str, int], ...]:
    """The columns a SELECT read, as its result describes them: (name, type OID)."""
    return tuple((bytes(result.fname(i) or b"").decode(), result.ftype(i))
                 for i in range(skip, result.nfields))


class _Table:
    """A captured table: catalog description, codec, schema version, and what ``SELECT *``
    reads of it (``wire``: each column's name and the type OID its result reports)."""

    __slots__ = ("codec", "columns", "info", "key_positions", "star_index", "version", "wire")

    def __init__(self, info: TableInfo, codec: RowCodec, columns: ColumnCodec,
                 version: int, types: Mapping[int, PgType]) -> None:
        self.info = info
        self.codec = codec
        self.columns = columns
        self.version = version
        self.star_index = info.star_index
        self.key_positions = tuple(info.star.index(k) for k in info.key_columns)
        self.wire = tuple(zip(info.star, (_wire_type(o, types) for o in info.star_oids),
                              strict=True))


def schema_document(info_columns: Sequence[tuple[str, int]], key: Sequence[str],
                    types: Mapping[int, PgType]) -> dict[str, object]:
    """The schema of one table version, as the landing zone records it."""
    return {
        "columns": [
            {"name": name, "type": types[oid].name if oid in types else str(oid),
             "type_oid": oid}
            for name, oid in info_columns
        ],
        "key": list(key),
    }


class PgSource:
    """One PostgreSQL database, as the worker sees it."""

    def __init__(self, config: SourceConfig, schema_version: SchemaVersion) -> None:
        self.config = config
        self.options = pg_options(config)
        self.name = config.name
        self._schema_version = schema_version
        self._conn: psycopg.Connection[tuple[Any, ...]] | None = None
        self._types: dict[int, PgType] = catalog.builtin_types()
        self.captured = TableCache(config.name, config.tables, self._load)
        self._stream: ReplicationStream | None = None
        self._cursor: psycopg.Cursor[TextRow] | None = None
        self._snapshot_at = 0.0
        self.translator = LogTranslator(config.name, self._describe)

    # -- connection and checks ------------------------------------------------

    def connect(self) -> None:
        with _connection_errors("connecting"):
            self._conn = psycopg.connect(
                self.config.dsn, autocommit=True,
                options=f"{libpq_options()} -c lock_timeout={LOCK_TIMEOUT}",
                application_name=f"dblog-{self.name}",
            )

    @property
    def conn(self) -> psycopg.Connection[tuple[Any, ...]]:
        if self._conn is None or self._conn.closed:
            raise SourceUnavailable("not connected to the source database")
        return self._conn

    def tables(self) -> Sequence[str]:
        return self.config.tables

    def preflight(self) -> list[Problem]:
        """Every problem that stops capture, each with its fix. Changes nothing."""
        with _connection_errors("preflight"):
            problems = catalog.server_problems(self.conn)
            infos = []
            for table in self.config.tables:
                info = catalog.load_table(self.conn, table)
                problems += catalog.table_problems(info, table)
                if info is not None:
                    infos.append(info)
            problems += catalog.partition_problems(self.conn, infos)
            problems += catalog.privilege_problems(self.conn, infos)
            problems += catalog.publication_problems(
                self.conn, self.options.publication, self.config.tables
            )
            problems += catalog.publication_setting_problems(
                self.conn, self.options.publication, infos)
            problems += catalog.slot_problems(self.conn, self.options.slot)
        return problems

    def prepare(self) -> str | None:
        """Create what capture needs; returns the new slot's position if it was created now."""
        try:
            with _connection_errors("setup"):
                return self._prepare()
        except psycopg.errors.InsufficientPrivilege as exc:
            raise ConfigError(
                f"the worker's role may not prepare capture: {exc.diag.message_primary}. "
                "Run `dblog preflight` for the fixes, or let an administrator create the "
                "schema, watermark table and publication (docs/operations.md)"
            ) from None

    def _prepare(self) -> str | None:
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
        self._sync_publication()
        for table in self.config.tables:
            self._load(table)
        if self.capture_exists():
            return None
        created = conn.execute(
            "SELECT lsn::text FROM pg_create_logical_replication_slot(%s, 'pgoutput')",
            (self.options.slot,),
        ).fetchone()
        assert created is not None
        log.info("created replication slot %s at %s", self.options.slot, created[0])
        return str(created[0])

    def capture_exists(self) -> bool:
        with _connection_errors("reading the slot"):
            return self.conn.execute(
                "SELECT 1 FROM pg_replication_slots WHERE slot_name = %s", (self.options.slot,)
            ).fetchone() is not None

    def _sync_publication(self) -> None:
        wanted = catalog.published_tables(self.config.tables)
        conn = self.conn
        exists = conn.execute(
            "SELECT 1 FROM pg_publication WHERE pubname = %s", (self.options.publication,)
        ).fetchone()
        names = ", ".join(f"{queries.ident(s)}.{queries.ident(n)}" for s, n in sorted(wanted))
        publication = queries.ident(self.options.publication)
        if exists is None:  # a partitioned table's changes under its own name
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
        if current != wanted:
            conn.execute(f"ALTER PUBLICATION {publication} SET TABLE {names}".encode(), ())

    # -- the log --------------------------------------------------------------

    def start(self, checkpoint: str | None) -> str:
        """Start the log after ``checkpoint`` (the slot's own position when None)."""
        with _connection_errors("reading the slot"):
            row = self.conn.execute(
                "SELECT wal_status FROM pg_replication_slots WHERE slot_name = %s",
                (self.options.slot,),
            ).fetchone()
        if row is not None and row[0] == "lost":
            raise LogGone(
                f"replication slot {self.options.slot} lost the log it held (wal_status lost, "
                "max_slot_wal_keep_size was exceeded): changes since checkpoint "
                f"{checkpoint} are gone. Drop the slot (SELECT pg_drop_replication_slot("
                f"'{self.options.slot}');), run `dblog reset --yes --config <file>`, start the "
                "worker, then `dblog dump --all` to bring the output back in sync"
            )
        if row is None:
            raise LogGone(
                f"replication slot {self.options.slot} does not exist any more: the log since "
                f"checkpoint {checkpoint} is gone. Run `dblog reset --yes --config <file>` to "
                "start capture anew, then `dblog dump --all` to bring the output back in sync"
            )
        try:
            lsn = pg.parse_lsn(checkpoint) if checkpoint else 0
        except ValueError:
            raise ConfigError(
                f"the checkpoint in Redis, {checkpoint!r}, is not a PostgreSQL log position: "
                "was this source's state written for a MySQL source? Use another source name, "
                "or `dblog reset --yes --config <file>` and a full dump"
            ) from None
        self._take_slot()
        self.translator = LogTranslator(self.name, self._describe)
        self._stream = ReplicationStream(
            self.config.dsn, self.options.slot, self.options.publication, self.translator
        )
        self._stream.start(lsn)
        return pg.format_lsn(lsn)

    def _take_slot(self) -> None:
        """A previous leader that stopped (paused, partitioned) may still hold the slot: its
        walsender would keep it until wal_sender_timeout. This worker holds the lease now:
        end that walsender."""
        sql = ("SELECT active_pid FROM pg_replication_slots WHERE slot_name = %s "
               "AND active_pid IS NOT NULL")
        with _connection_errors("taking over the slot"):
            row = self.conn.execute(sql, (self.options.slot,)).fetchone()
            if row is None:
                return
            log.warning("replication slot %s is still in use by backend %s (a previous "
                        "worker): ending it", self.options.slot, row[0])
            try:
                self.conn.execute("SELECT pg_terminate_backend(%s)", (row[0],))
            except psycopg.errors.InsufficientPrivilege:
                log.warning("the worker's role may not end backend %s: the slot is taken "
                            "over once wal_sender_timeout ends it", row[0])
                return
            deadline = time.monotonic() + 5
            while self.conn.execute(sql, (self.options.slot,)).fetchone() is not None:
                if time.monotonic() > deadline:
                    break
                time.sleep(0.05)

    def poll(self, timeout: float, out: list[LogItem]) -> None:
        assert self._stream is not None
        read = len(out)
        self._stream.poll(timeout, out)
        translator = self.translator
        recent = translator.recent
        if not recent:
            return
        every = SNAPSHOT_SOON_S if recent.over_limit or len(out) == read else SNAPSHOT_S
        if time.monotonic() - self._snapshot_at < every:
            return
        with _connection_errors("reading the snapshot"):
            row = self.conn.execute("SELECT pg_current_snapshot()::text").fetchone()
        assert row is not None
        self._snapshot_at = time.monotonic()
        held = recent.oldest()
        translator.observe(Snapshot.parse(str(row[0])))
        if recent.oldest() != held and not translator.in_transaction and translator.read_to:
            out.append(translator.checkpoint(translator.read_to))  # held back less now

    def encode_checkpoint(self, checkpoint: Checkpoint) -> str:
        return checkpoint.resume or pg.format_lsn(checkpoint.position.major)

    def confirm(self, checkpoint: str) -> None:
        assert self._stream is not None
        self._stream.confirm(pg.parse_lsn(checkpoint))

    def lag_bytes(self) -> int:
        if self._stream is None:
            return 0
        return max(0, self._stream.server_wal_end - self._stream.received_lsn)

    def _describe(self, relation: pg.Relation) -> RelationView:
        table = f"{relation.namespace or 'pg_catalog'}.{relation.name}"
        names = [c.name for c in relation.columns]
        if relation.namespace == SCHEMA and relation.name == "watermark":
            return RelationView(RelationKind.WATERMARK, table,
                                watermark_columns=(names.index("source"), names.index("value")))
        if table not in self.config.tables:
            return RelationView(RelationKind.IGNORED, table)
        captured = self.captured.known(table)
        if captured is None or captured.info.oid != relation.relation_oid:
            try:
                captured = self._load(table)
            except DumpFailed as exc:  # dropped since, or lost its key: replaying old changes
                captured = None
                log.warning("%s; its old changes are keyed by their replica identity", exc)
        if captured is not None:
            key = captured.info.key_columns
        else:
            key = tuple(c.name for c in relation.columns if c.flags & 1)
        oids = [c.type_oid for c in relation.columns]
        with _connection_errors("reading the catalog"):
            self._types = catalog.load_types(self.conn, oids, self._types)
        codec = RowCodec(names, oids, key, self._types)
        version = self._schema_version(
            table, schema_document(list(zip(names, oids, strict=True)), key, self._types)
        )
        if relation.replica_identity != "f":
            log.warning("%s has REPLICA IDENTITY %r, not FULL: updates that keep a large value "
                        "arrive without it and are read again by a primary-key dump; fix: "
                        "ALTER TABLE %s REPLICA IDENTITY FULL;", table, relation.replica_identity,
                        queries.qualified(*split_table(table)))
        return RelationView(RelationKind.CAPTURED, table, codec, version,
                            full_identity=relation.replica_identity == "f")

    # -- watermarks -----------------------------------------------------------

    def write_watermark(self, token: str) -> None:
        """Write a watermark; returns once it is committed (an upsert: a lost row comes back).

        The write's snapshot goes to the translator: the transactions it did not see count
        as inside the window this watermark opens, wherever the log has them.
        """
        with _connection_errors("writing a watermark"):
            try:
                row = self.conn.execute(
                    f"INSERT INTO {SCHEMA}.watermark (source, value, written_at) "
                    "VALUES (%s, %s, now()) ON CONFLICT (source) DO UPDATE "
                    "SET value = excluded.value, written_at = excluded.written_at "
                    "RETURNING pg_current_snapshot()::text",
                    (self.name, token),
                ).fetchone()
            except psycopg.errors.UndefinedTable as exc:
                raise SourceUnavailable(
                    f"the watermark table {SCHEMA}.watermark is gone: {exc.diag.message_primary}"
                    "; the next session creates it again") from exc
            except psycopg.errors.LockNotAvailable as exc:
                raise SourceUnavailable(
                    f"the watermark table {SCHEMA}.watermark is locked by another session: "
                    f"{exc.diag.message_primary}; trying again") from exc
            except psycopg.errors.InsufficientPrivilege as exc:
                raise ConfigError(
                    f"the worker may not write the watermark table {SCHEMA}.watermark: "
                    f"{exc.diag.message_primary}; run `dblog preflight` for the grant") from exc
        assert row is not None
        self._snapshot_at = time.monotonic()
        self.translator.observe(Snapshot.parse(str(row[0])),
                                None if token == HEARTBEAT else token)

    def log_position(self) -> Position:
        """The end of the log now, comparable with checkpoints: every commit so far is before
        it. The insert position: under ``synchronous_commit = off`` a commit returns before
        its WAL is written, so the write position can still be behind it."""
        with _connection_errors("reading the log position"):
            row = self.conn.execute(
                "SELECT pg_current_wal_insert_lsn() - '0/0'::pg_lsn").fetchone()
        assert row is not None
        return Position(int(row[0]), 0)

    def heartbeat(self) -> None:
        """Write to the log on an idle database, so that the slot can advance."""
        self.write_watermark(HEARTBEAT)

    # -- chunks ---------------------------------------------------------------

    def _load(self, table: str) -> _Table:
        with _connection_errors("reading the catalog"):
            info = catalog.load_table(self.conn, table)
            if info is None or not info.key_columns:
                raise DumpFailed(
                    f"table {table} " + ("does not exist any more" if info is None
                                         else "has no primary key")
                )
            self._types = catalog.load_types(self.conn, info.star_oids, self._types)
        codec = RowCodec(info.columns, info.type_oids, info.key_columns, self._types)
        columns = ColumnCodec(info.columns, info.type_oids, info.key_columns, self._types)
        version = self._schema_version(
            table,
            schema_document(list(zip(info.columns, info.type_oids, strict=True)),
                            info.key_columns, self._types),
        )
        loaded = _Table(info, codec, columns, version, self._types)
        self.captured.put(table, loaded)
        return loaded

    def refresh(self, table: str) -> None:
        self.captured.refresh(table)

    def key_arity(self, table: str) -> int:
        return len(self.captured.get(table).info.key_columns)

    def upper_bound(self, table: str) -> KeyTexts | None:
        captured = self.captured.get(table)
        rows = self._select(table, queries.upper_bound_sql(captured.info.shape), ())
        return None if not rows else tuple(str(v) for v in rows[0])

    def read_chunk(
        self, table: str, after: KeyTexts | None, upper: KeyTexts, limit: int
    ) -> Chunk:
        captured = self.captured.get(table)
        arity = len(captured.info.key_columns)
        if len(upper) != arity or (after is not None and len(after) != arity):
            raise DumpFailed(
                f"the primary key of {table} changed during the dump (now "
                f"{', '.join(captured.info.key_columns)}): request a new dump of the table"
            )
        sql = queries.chunk_sql(captured.info.shape, first=after is None)
        result = self._run(table, sql, [*(after or ()), *upper, limit]).pgresult
        assert result is not None
        self._check_read(table, captured, result, 0)
        count = result.ntuples
        last = None
        if count:
            last = tuple(_text(result.get_value(count - 1, i)) for i in captured.key_positions)
        return Chunk(count, last, captured.version, functools.partial(
            _encode_result, captured.columns, captured.star_index, result))

    def _check_read(self, table: str, captured: _Table, result: PGresult, skip: int) -> None:
        """The SELECT read the columns the codec expects, else the chunk is stale: a column
        was added, dropped, renamed or retyped since the catalog was read."""
        read = _described(result, skip)
        if read != captured.wire:
            self._load(table)
            raise ChunkStale(
                f"the columns of {table} changed since the worker read them "
                f"({', '.join(n for n, _ in captured.wire)} → {', '.join(n for n, _ in read)}, "
                "or their types): the chunk is read again with the new columns"
            )

    def read_keys(self, table: str, keys: Sequence[KeyTexts]) -> KeysChunk:
        captured = self.captured.get(table)
        info = captured.info
        if any(len(key) != len(info.key_columns) for key in keys):
            raise DumpFailed(
                f"the primary key of {table} changed since the dump was requested (now "
                f"{', '.join(info.key_columns)}): request a new dump with keys of that shape"
            )
        params = queries.key_params(keys, len(info.key_columns))
        cursor = self._run(table, queries.keys_sql(info.shape), params)
        assert cursor.pgresult is not None
        self._check_read(table, captured, cursor.pgresult, 1)
        with _connection_errors(f"reading {table}"):
            rows = cursor.fetchall()
        first_key = 1 + captured.key_positions[0]
        fields = [1 + i for i in captured.star_index]
        missing = [keys[int(str(row[0])) - 1] for row in rows if row[first_key] is None]
        found = [[row[i] for i in fields] for row in rows if row[first_key] is not None]
        encoded_keys, afters = captured.columns.encode(text_columns(found, len(info.columns)))
        if len(set(encoded_keys.to_pylist())) != len(encoded_keys):  # "1" and "01" given
            unique = pc.index_in(pc.unique(encoded_keys), encoded_keys)
            encoded_keys, afters = encoded_keys.take(unique), afters.take(unique)
        return KeysChunk(encoded_keys, afters, missing, captured.version)

    def check_keys(self, table: str, keys: Sequence[KeyTexts]) -> None:
        """Refuse keys whose values do not fit the key columns' types."""
        info = self.captured.get(table).info
        for i, (column, key_type) in enumerate(zip(info.key_columns, info.key_types,
                                                   strict=True)):
            try:
                with _connection_errors("checking keys"):
                    self.conn.execute(queries.check_key_values_sql(key_type),
                                      ([k[i] for k in keys],))
            except psycopg.errors.DataError as exc:
                raise RequestRejected(
                    f"a key value does not fit column {column} ({key_type}) of {table}: "
                    f"{exc.diag.message_primary}"
                ) from None

    def _select(self, table: str, sql: str, params: Sequence[object]) -> list[TextRow]:
        """Run one SELECT; return every cell as PostgreSQL's text output (None for NULL)."""
        cursor = self._run(table, sql, params)
        with _connection_errors(f"reading {table}"):
            return cursor.fetchall()

    def _run(self, table: str, sql: str, params: Sequence[object]) -> psycopg.Cursor[TextRow]:
        """Run one SELECT of ``table``: its result is the cursor's. A lost connection ends
        the session; a statement the server refused (a timeout, a cancel, ...) fails the
        dump; a column gone makes the chunk stale."""
        try:
            cursor = self._text_cursor()
            cursor.execute(sql.encode(), params)
            return cursor
        except psycopg.Error as exc:
            if self._conn is None or self._conn.broken or self._conn.closed:
                raise SourceUnavailable(
                    f"reading {table}: the source database is unreachable: {exc}") from exc
            if isinstance(exc, psycopg.errors.UndefinedTable):
                raise DumpFailed(f"table {table} does not exist any more") from exc
            if isinstance(exc, psycopg.errors.InsufficientPrivilege):
                raise DumpFailed(f"the worker may not read {table}: {exc}") from exc
            if isinstance(exc, psycopg.errors.LockNotAvailable):
                raise ChunkStale(f"{table} is locked (a DDL statement, LOCK TABLE?): "
                                 "the chunk is read later") from exc
            if isinstance(exc, psycopg.errors.UndefinedColumn):  # a key column renamed
                self._load(table)
                raise ChunkStale(f"the columns of {table} changed: "
                                 f"{exc.diag.message_primary}; the chunk is read again with "
                                 "the new columns") from exc
            raise DumpFailed(f"the source refused a dump's SELECT of {table}: "
                             f"{exc.diag.message_primary or exc}") from exc

    def _text_cursor(self) -> psycopg.Cursor[TextRow]:
        """A cursor that loads every value as its text output, in C (psycopg's TextLoader).

        Types psycopg does not know (enums, domains of this database) load as text anyway.
        """
        if self._cursor is None or self._cursor.closed:
            cursor = self.conn.cursor()
            for oid in _builtin_oids():
                cursor.adapters.register_loader(oid, TextLoader)
            self._cursor = cursor
        return self._cursor

    def close(self) -> None:
        self._cursor = None
        if self._stream is not None:
            self._stream.close()
            self._stream = None
        if self._conn is not None:
            with contextlib.suppress(Exception):  # a broken connection may not close cleanly
                self._conn.close()
            self._conn = None
