"""The captured tables of a MySQL or MariaDB source, and the reads of a dump.

:class:`CapturedTables` keeps each captured table as information_schema describes it (a
:class:`~dblog_worker.tables.TableCache`), and runs the reads of a dump on the source's
connection in autocommit: a table's upper bound, a chunk, a batch of keys, each a single
``SELECT`` (with ``watermarks = "position"``, a chunk's or a batch's alone in a read-
only consistent snapshot whose position is recorded:
:mod:`dblog_worker.mysql.snapshot`). After a chunk or a batch of keys, what ``SELECT *``
reads of the table must be what it read when the columns were read: a DDL statement in
between makes the chunk stale, read again later. An error of a read ends the session
(the connection is lost), fails the dump (the statement was refused), or makes the chunk
stale (a column gone, a lock): :func:`dblog_worker.mysql.connection.select_error`, which
with the connections themselves is in ``mysql/connection.py``."""

from __future__ import annotations

import functools
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

import pyarrow as pa
import pymysql

from dblog_worker.dump.requests import KeyTexts
from dblog_worker.dump.row_filter import RowFilter
from dblog_worker.errors import (
    ChunkStale,
    DumpFailed,
    RequestRejected,
)
from dblog_worker.events import Encoded
from dblog_worker.masking import ColumnRules, TableMasks
from dblog_worker.mysql import catalog
from dblog_worker.mysql.catalog import TableShape
from dblog_worker.mysql.column_model import (
    COLUMNS_SQL,
    MyColumn,
    UnsupportedType,
    column_from_information_schema,
    schema_document,
    select_list,
)
from dblog_worker.mysql.connection import (
    columns_changed,
    connection_errors,
    replica_errors,
    select_error,
)
from dblog_worker.mysql.snapshot import WindowSnapshots, select_in_snapshot
from dblog_worker.mysql.values import MyRowCodec
from dblog_worker.names import split_table
from dblog_worker.source import Chunk, ChunkReader, KeysChunk, Lanes
from dblog_worker.tables import TableCache

__all__ = ["CapturedTables", "UnsupportedTable", "unsupported"]

Described = tuple[tuple[str, int, int, int], ...]  # (name, type code, length, decimals)


class UnsupportedTable(DumpFailed):
    """A captured table has a column of a type the worker does not read: the worker leaves
    the table out (its dumps are refused, its log events skipped) and captures the others."""


def unsupported(table: str, exc: UnsupportedType) -> str:
    """What to tell the user of a table with a column of a type the worker does not read."""
    database, name = split_table(table)
    column = f"{catalog.quote_ident(database)}.{catalog.quote_ident(name)}"
    wanted = "YEAR" if exc.type_name.startswith("year(") else "<a supported type>"
    return (f"table {table} cannot be captured: its column {exc.column!r} has type "
            f"{exc.type_name}, which dblog does not read (docs/mysql.md lists the types it "
            "does); the worker captures the other tables and leaves this one out. Fix: ALTER "
            f"TABLE {column} MODIFY {catalog.quote_ident(exc.column)} {wanted}; then `dblog dump "
            f"--table {table}`")


class _Table:
    """A captured table as information_schema describes it now, and as ``SELECT *``
    describes it (``described``: what a later look must find for a chunk to be current)."""

    __slots__ = ("codec", "columns", "described", "key_positions", "masks", "shape", "version")

    def __init__(self, shape: TableShape, columns: Sequence[MyColumn], codec: MyRowCodec,
                 version: int, described: Described, masks: TableMasks) -> None:
        self.masks = masks
        self.shape = shape
        self.columns = tuple(columns)
        self.codec = codec
        self.version = version
        self.described = described
        self.key_positions = tuple(shape.columns.index(k) for k in shape.key)


def _key_params(table: str, captured: _Table, key: KeyTexts) -> list[object]:
    """A key's parameters; a key the table's key columns cannot hold (they changed since
    the dump began or was requested) fails the dump."""
    try:
        return captured.codec.key_params(key)
    except ValueError as exc:
        raise DumpFailed(
            f"key {list(key)} does not fit the primary key of {table} any more ({exc}): its "
            "columns changed since the dump began; request a new dump"
        ) from None


def _where(table: str, captured: _Table,
           row_filter: RowFilter | None) -> tuple[list[str], list[Any]]:
    """A filter's conditions and parameters for the table as it is now; DumpFailed if a
    column it names was dropped, or a value no longer fits its column."""
    if row_filter is None:
        return [], []
    try:
        return catalog.filter_sql(captured.shape, row_filter, captured.codec.column_param,
                                  captured.codec.key_params)
    except ValueError as exc:
        raise DumpFailed(f"the filter does not fit {table} any more ({exc}): its columns "
                         "changed since the dump was requested; request a new dump") from None


def _description(cursor: Any) -> Described:
    return tuple((str(d[0]), int(d[1]), int(d[3] or 0), int(d[5] or 0))
                 for d in cursor.description or ())


def _encode_rows(codec: MyRowCodec, rows: Sequence[Sequence[Any]]) -> Encoded:
    key_row = codec.key_row_from_dump
    pairs = [key_row(r) for r in rows]
    return (pa.array([k for k, _ in pairs], pa.string()),
            pa.array([r for _, r in pairs], pa.string()))


class CapturedTables:
    """The captured tables of one source, read on its connection (``connection``: the
    open one, or SourceUnavailable); ``schema_version`` registers a table's schema.

    On a read replica (``replica``): chunks, key batches and range ends are read on the
    replica's connection (``connection``), whose failures hold the dump (ReplicaBehind),
    not the log, and what a chunk SELECT read is checked there; the catalog and a table
    dump's upper bound are read on ``primary`` (a lane without one reads all on the
    replica)."""

    def __init__(self, source: str, tables: Collection[str] | Callable[[], Collection[str]],
                 connection: Callable[[], pymysql.connections.Connection[Any]],
                 schema_version: Callable[[str, dict[str, object]], int],
                 primary: Callable[[], pymysql.connections.Connection[Any]] | None = None,
                 replica: bool = False, snapshots: WindowSnapshots | None = None,
                 rules: ColumnRules | None = None,
                 keys: Mapping[str, tuple[str, ...]] | None = None,
                 lanes: Lanes | None = None) -> None:
        self._connection = connection
        self._lanes = lanes
        self._keys = keys or {}  # source.keys
        self._snapshots = snapshots  # watermarks = "position": chunks in snapshots
        self._primary = primary or connection
        self._replica = replica
        self._catalog_on_replica = replica and primary is None
        self._errors = replica_errors if self._catalog_on_replica else connection_errors
        self._schema_version = schema_version
        self._rules = rules or ColumnRules()
        captured = tables if callable(tables) else (lambda: tables)
        self._cache = TableCache(source, captured, self.load)

    def known_key(self, table: str) -> tuple[str, ...] | None:
        """The key columns of a table already read, in key order: no check, no catalog read."""
        known = self._cache.known(table)
        return None if known is None else known.shape.key

    def known_version(self, table: str) -> int:
        """The schema version of a table already read (0 if none): no catalog read."""
        known = self._cache.known(table)
        return 0 if known is None else known.version

    def lane(self, index: int) -> ChunkReader:
        """The reader of lane ``index`` (``lanes``, the source's); 0 is this one."""
        if index == 0 or self._lanes is None:
            return self
        return self._lanes(index)

    def forget(self, table: str) -> None:
        """A table that left capture: its description goes."""
        self._cache.forget(table)

    def load(self, table: str) -> _Table:
        """The table's columns from information_schema, between two looks at what
        ``SELECT *`` reads: equal looks mean no DDL came in between."""
        database, name = split_table(table)
        for _ in range(3):
            before = self._describe_table(table, catalog_side=True)
            rows = self._rows(COLUMNS_SQL, (database, name))
            key, _ = catalog.table_key(self._rows(catalog.UNIQUE_INDEXES_SQL, (database, name)),
                                       self._keys.get(table))
            if not rows or not key:
                raise DumpFailed(f"table {table} " + (
                    "does not exist any more" if not rows else "has no primary key nor unique "
                    "index on NOT NULL columns (name its key in source.keys)"))
            if self._describe_table(table, catalog_side=True) == before:
                break
        else:
            raise ChunkStale(f"the columns of {table} keep changing; reading them again later")
        try:
            columns = [column_from_information_schema(r) for r in rows]
        except UnsupportedType as exc:
            raise UnsupportedTable(unsupported(table, exc)) from None
        by_name = {c.name: c for c in columns}
        shape = TableShape(table, tuple(c.name for c in columns), key,
                           select_list(columns), select_list(columns, "t"),
                           select_list([by_name[k] for k in key if k in by_name]))
        masks = self._rules.require(table, [c.name for c in columns], key)
        version = self._schema_version(table, schema_document(columns, list(key), masks))
        loaded = _Table(shape, columns, MyRowCodec(columns, list(key), masks), version, before,
                        masks)
        self._cache.put(table, loaded)
        return loaded

    def _rows(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """A catalog query."""
        with self._errors("querying"), self._primary().cursor() as cursor:
            cursor.execute(sql, params)
            return list(cursor.fetchall())

    def _describe_table(self, table: str, catalog_side: bool = False) -> Described:
        """What ``SELECT *`` reads of ``table`` now: names, types, lengths, decimals; where
        the catalog is read (``catalog_side``) or where the chunks are."""
        try:
            with (self._primary if catalog_side else self._connection)().cursor() as cursor:
                cursor.execute(f"SELECT * FROM {catalog.ident(split_table(table)[0])}."
                               f"{catalog.ident(split_table(table)[1])} LIMIT 0", ())
                return _description(cursor)
        except pymysql.MySQLError as exc:
            replica = self._catalog_on_replica if catalog_side else self._replica
            raise self._read_error(table, exc, replica) from exc

    def _check_current(self, table: str, captured: _Table) -> None:
        """After a chunk SELECT: the table's columns are still those it was read with (a
        DDL statement since the catalog was read makes the chunk stale)."""
        if self._describe_table(table) != captured.described:
            self.load(table)
            raise ChunkStale(f"the columns of {table} changed since the worker read them: "
                             "the chunk is read again with the new columns")

    def refresh(self, table: str) -> None:
        self._cache.refresh(table)

    def key_arity(self, table: str) -> int:
        return len(self._cache.get(table).shape.key)

    def masked_columns(self, table: str) -> dict[str, str]:
        masks = self._cache.get(table).masks.masks
        return {name: mask.describe() for name, mask in masks.items()}

    def check_filter(self, table: str, row_filter: RowFilter) -> None:
        """Refuse a filter whose columns the table lacks, whose values do not fit their
        columns' types, or that the server refuses (tried on no row)."""
        captured = self._cache.get(table)
        missing = [c for c in row_filter.columns if c not in captured.shape.columns]
        if missing:
            raise RequestRejected(f"{table} has no column {missing[0]!r} (it has "
                                  f"{', '.join(captured.shape.columns)})")
        for key in (row_filter.from_key, row_filter.to_key):
            if key is not None:
                self.check_keys(table, [key])
        try:
            where, params = catalog.filter_sql(captured.shape, row_filter,
                                               captured.codec.column_param,
                                               captured.codec.key_params)
        except ValueError as exc:
            raise RequestRejected(f"the filter does not fit {table}: {exc}") from None
        try:
            with self._primary().cursor() as cursor:
                cursor.execute(catalog.filter_check_sql(captured.shape, where), params)
        except pymysql.MySQLError as exc:
            error = self._read_error(table, exc, self._catalog_on_replica)
            if not isinstance(error, DumpFailed):
                raise error from exc
            raise RequestRejected(f"the filter does not apply to {table}: {exc}") from None

    def upper_bound(self, table: str, row_filter: RowFilter | None = None) -> KeyTexts | None:
        """The table's largest key; with ``watermarks = "position"`` read in a snapshot,
        whose position is the window's when a window is open (a pruning dump reads it
        inside its first window: everything logged before that position is below it)."""
        captured = self._cache.get(table)
        where, params = _where(table, captured, row_filter)
        rows = self._select(table, catalog.upper_bound_sql(captured.shape, where), params,
                            primary=True, snapshot=True)
        return None if not rows else captured.codec.key_texts_from_key_cells(rows[0])

    def read_chunk(self, table: str, after: KeyTexts | None, upper: KeyTexts, limit: int,
                   row_filter: RowFilter | None = None) -> Chunk:
        captured = self._cache.get(table)
        params_of = functools.partial(_key_params, table, captured)
        params = [] if after is None else catalog.after_params(params_of(after))
        params += catalog.at_most_params(params_of(upper))
        where, filter_params = _where(table, captured, row_filter)
        sql = catalog.chunk_sql(captured.shape, first=after is None, where=where)
        rows = self._select(table, sql, [*params, *filter_params, limit], snapshot=True)
        self._check_current(table, captured)
        last = None if not rows else captured.codec.key_texts_from_dump(rows[-1])
        return Chunk(len(rows), last, captured.version,
                     functools.partial(_encode_rows, captured.codec, rows))

    def key_after(self, table: str, after: KeyTexts | None, upper: KeyTexts, offset: int,
                  row_filter: RowFilter | None = None) -> KeyTexts | None:
        captured = self._cache.get(table)
        params_of = functools.partial(_key_params, table, captured)
        params = [] if after is None else catalog.after_params(params_of(after))
        params += catalog.at_most_params(params_of(upper))
        where, filter_params = _where(table, captured, row_filter)
        sql = catalog.key_after_sql(captured.shape, first=after is None, where=where)
        rows = self._select(table, sql, [*params, *filter_params, offset - 1])
        return None if not rows else captured.codec.key_texts_from_key_cells(rows[0])

    def read_keys(self, table: str, keys: Sequence[KeyTexts]) -> KeysChunk:
        captured = self._cache.get(table)
        if not keys:
            empty = pa.array([], pa.string())
            return KeysChunk(empty, empty, [], captured.version)
        params: list[Any] = []
        for index, key in enumerate(keys):
            params += [index, *_key_params(table, captured, key)]
        rows = self._select(table, catalog.keys_sql(captured.shape, len(keys)), params,
                            snapshot=True)
        self._check_current(table, captured)
        first_key = 1 + captured.key_positions[0]
        missing = [keys[int(row[0])] for row in rows if row[first_key] is None]
        found: dict[str, Any] = {}
        for row in rows:
            if row[first_key] is not None:
                found.setdefault(captured.codec.key_from_dump(row[1:]), row[1:])
        encoded_keys, afters = _encode_rows(captured.codec, list(found.values()))
        return KeysChunk(encoded_keys, afters, missing, captured.version)

    def check_keys(self, table: str, keys: Sequence[KeyTexts]) -> None:
        """Refuse keys whose values do not fit the key columns' types."""
        codec = self._cache.get(table).codec
        for key in keys:
            try:
                codec.key_params(key)
            except ValueError as exc:
                raise RequestRejected(f"key {list(key)} does not fit {table}: {exc}") from None

    def _select(self, table: str, sql: str, params: Sequence[Any],
                primary: bool = False, snapshot: bool = False) -> list[tuple[Any, ...]]:
        """One SELECT of a dump (on the primary if ``primary``; a chunk's in a consistent
        snapshot if ``snapshot`` and the watermarks are its positions): a lost connection
        ends the session (a lost replica holds the dump), a refused statement fails the
        dump, a column gone makes the chunk stale."""
        try:
            with (self._primary if primary else self._connection)().cursor() as cursor:
                if snapshot and self._snapshots is not None:
                    rows, taken = select_in_snapshot(cursor, sql, params, self._snapshots)
                    self._snapshots.taken(taken, len(rows))
                    return rows
                cursor.execute(sql, params)
                return list(cursor.fetchall())
        except pymysql.MySQLError as exc:
            raise self._read_error(table, exc, self._catalog_on_replica if primary
                                   else self._replica) from exc

    def _read_error(self, table: str, exc: pymysql.MySQLError,
                    replica: bool | None = None) -> Exception:
        if columns_changed(exc):
            self._cache.forget(table)
        return select_error(table, exc, replica=self._replica if replica is None else replica)
