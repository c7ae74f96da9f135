"""The captured tables of a PostgreSQL source, and the dump's reads of them.

:class:`PgChunkReader` describes each captured table from the catalog (columns, key,
codecs, schema version; read again when they change) and runs the chunk and key-batch
SELECTs, on the source's autocommit connection (``PgSource`` holds it;
``pg/connection.py`` opens it and says what a SELECT's error means): single statements at
read committed, so each sees every change committed before it runs, and takes no locks.

A chunk's result is kept as libpq returned it: the encoder thread reads its cells' text
output into Arrow columns (``pg/cells.py``) and encodes them with ``ColumnCodec``
(``pg/column_codec.py``). A key batch is loaded by psycopg's C ``TextLoader``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Collection, Mapping, Sequence

import psycopg
import pyarrow.compute as pc
from psycopg.pq.abc import PGresult

from dblog_worker.config import SourceConfig
from dblog_worker.dump.requests import KeyTexts
from dblog_worker.dump.row_filter import RowFilter
from dblog_worker.errors import (
    ChunkStale,
    DumpFailed,
    RequestRejected,
    SourceUnavailable,
)
from dblog_worker.events import Encoded
from dblog_worker.masking import TableMasks, generated_left_out
from dblog_worker.pg import catalog, queries
from dblog_worker.pg.catalog import TableInfo
from dblog_worker.pg.cells import result_columns
from dblog_worker.pg.column_codec import ColumnCodec, text_columns
from dblog_worker.pg.connection import (
    Connection,
    TextRow,
    connected,
    connection_errors,
    replica_errors,
    select_error,
    text_cursor,
)
from dblog_worker.pg.encoders import BUILTIN_TYPES, PgType
from dblog_worker.pg.values import RowCodec
from dblog_worker.source import Chunk, ChunkReader, KeysChunk, Lanes, SchemaVersion
from dblog_worker.tables import TableCache


def _text(cell: bytes | None) -> str:
    if cell is None:  # a primary key column is NOT NULL
        raise SourceUnavailable("the chunk's last key has a NULL; retrying")
    return bytes(cell).decode()


def _encode_result(codec: ColumnCodec, fields: Sequence[int], result: PGresult) -> Encoded:
    """A chunk's rows as canonical JSON, read column by column from the query result
    (``fields``: the result columns the log carries too, in the codec's order)."""
    return codec.encode(result_columns(result, fields))


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

    __slots__ = ("codec", "columns", "info", "key_positions", "masks", "star_index", "version",
                 "wire")

    def __init__(self, info: TableInfo, codec: RowCodec, columns: ColumnCodec,
                 version: int, types: Mapping[int, PgType], masks: TableMasks) -> None:
        self.masks = masks
        self.info = info
        self.codec = codec
        self.columns = columns
        self.version = version
        self.star_index = info.star_index
        self.key_positions = tuple(info.star.index(k) for k in info.key_columns)
        self.wire = tuple(zip(info.star, (_wire_type(o, types) for o in info.star_oids),
                              strict=True))


TEXT_OID = 25


def schema_document(info_columns: Sequence[tuple[str, int]], key: Sequence[str],
                    types: Mapping[int, PgType], masks: TableMasks | None = None,
                    generated: Sequence[tuple[str, str, str]] = ()) -> dict[str, object]:
    """The schema of one table version, as the landing zone records it: each column's
    type (a type of this database also says what it is: :func:`user_type`), the key, and
    the STORED generated columns, which the rows do not carry (name, type, expression).
    A masked column is text (``masked``: how, ``source_type``: its type in the source); an
    excluded one is named under ``excluded`` only, and so is a generated column a rule
    reaches (``masks`` has it) or whose expression reads a masked or excluded column (a
    target computing it would compute it from what the mask hides, or fail)."""
    masks = masks or TableMasks()
    done = masks.schema()
    columns: list[dict[str, object]] = []
    for name, oid in info_columns:
        type_name = types[oid].name if oid in types else str(oid)
        if name not in done:
            columns.append({"name": name, "type": type_name, "type_oid": oid,
                            **user_type(oid, types)})
        elif done[name] != "exclude":
            columns.append({"name": name, "type": "text", "type_oid": TEXT_OID,
                            "masked": done[name], "source_type": type_name})
    document: dict[str, object] = {"columns": columns, "key": list(key)}
    gone = generated_left_out([(g[0], g[2]) for g in generated], masks)
    kept = [g for g in generated if g[0] not in gone]
    excluded = [name for name, _ in info_columns if done.get(name) == "exclude"]
    excluded += [g[0] for g in generated if g[0] in gone]
    if kept:
        document["generated"] = [{"name": n, "type": t, "expression": e} for n, t, e in kept]
    if excluded:
        document["excluded"] = excluded
    return document


def user_type(oid: int, types: Mapping[int, PgType]) -> dict[str, object]:
    """What a merge needs of a type this database defined (nothing for a builtin type):
    ``array`` for an array; under domains (resolved to their base), an enum's qualified
    name and labels (``enum``, ``labels``) or the builtin base type (``base``)."""
    found: dict[str, object] = {}
    t = types.get(oid)
    if t is None or t.oid in BUILTIN_TYPES:
        return found
    for _ in range(32):  # domains over domains, arrays of domains
        if t.base_oid and t.base_oid in types:
            t = types[t.base_oid]
        elif t.category == "A" and t.element_oid in types and "array" not in found:
            found["array"] = True
            t = types[t.element_oid]
        else:
            break
    if t.labels or t.category == "E":
        found["enum"] = f"{t.namespace}.{t.name}"
        found["labels"] = list(t.labels)
    elif t.oid in BUILTIN_TYPES:
        found["base"] = t.name
    return found


class PgChunkReader:
    """The captured tables of one source, and the dump's SELECTs of them.

    ``connection`` gives the source's autocommit connection (None when not connected): the
    catalog and the upper bound are read there. ``reads`` gives the connection of the
    chunk, key-batch and range-end SELECTs, if another: a read replica's (``replica``),
    whose failures hold the dump (ReplicaBehind), not the log.
    """

    def __init__(self, config: SourceConfig, schema_version: SchemaVersion,
                 connection: Callable[[], Connection | None],
                 reads: Callable[[], Connection | None] | None = None,
                 replica: bool = False,
                 captured: Callable[[], Collection[str]] | None = None,
                 lanes: Lanes | None = None) -> None:
        self._connection = connection
        self._lanes = lanes
        self._reads = reads or connection
        self._replica = replica
        # a lane on the replica reads the catalog there too
        self._catalog_errors = replica_errors if replica and reads is None \
            else connection_errors
        self._schema_version = schema_version
        self._rules = config.columns
        self._keys = config.keys
        self._types: dict[int, PgType] = catalog.builtin_types()
        names = config.selector.names
        self.captured = TableCache(config.name, captured or (lambda: names), self.load)
        self._cursor: psycopg.Cursor[TextRow] | None = None
        # tables that joined the publication while transactions that had written them may
        # still be open (their changes before that are in no log): table -> the xid8 every
        # transaction below must have ended before the table is read (:meth:`_settled`)
        self.not_before: dict[str, str] = {}

    @property
    def conn(self) -> Connection:
        return connected(self._connection())

    def close(self) -> None:
        """The connection closes: its cursor goes with it."""
        self._cursor = None

    def lane(self, index: int) -> ChunkReader:
        """The reader of lane ``index`` (``lanes``, the source's); 0 is this one."""
        if index == 0 or self._lanes is None:
            return self
        return self._lanes(index)

    # -- the tables -----------------------------------------------------------

    def load(self, table: str) -> _Table:
        """Describe ``table`` from the catalog (DumpFailed if it is gone or has no key)."""
        with self._catalog_errors("reading the catalog"):
            info = catalog.load_table(self.conn, table, self._keys.get(table))
            if info is None or not info.key_columns:
                raise DumpFailed(
                    f"table {table} " + ("does not exist any more" if info is None else
                                         "has no primary key nor unique index on NOT NULL "
                                         "columns (name its key in source.keys)")
                )
            self._types = catalog.load_types(self.conn, info.star_oids, self._types)
        masks = self._rules.require(table, info.columns, info.key_columns)
        codec = RowCodec(info.columns, info.type_oids, info.key_columns, self._types, masks)
        columns = ColumnCodec(info.columns, info.type_oids, info.key_columns, self._types,
                              masks)
        version = self._schema_version(
            table,
            schema_document(list(zip(info.columns, info.type_oids, strict=True)),
                            info.key_columns, self._types, self._generated_masks(
                                table, masks, info.generated), info.generated),
        )
        loaded = _Table(info, codec, columns, version, self._types, masks)
        self.captured.put(table, loaded)
        return loaded

    def _generated_masks(self, table: str, masks: TableMasks,
                         generated: Sequence[tuple[str, str, str]]) -> TableMasks:
        """``masks`` and the rules' masks of the generated columns (which the rows do not
        carry: only the schema document reads them)."""
        if not generated or not self._rules:
            return masks
        more = self._rules.for_table(table, [g[0] for g in generated])
        return TableMasks({**more.masks, **masks.masks}, masks.key)

    def codec(self, table: str, names: Sequence[str], oids: Sequence[int],
              key: Sequence[str], generated: Sequence[tuple[str, str, str]] = ()
              ) -> tuple[RowCodec, int]:
        """The codec and schema version of a table as the log describes it (``generated``:
        its generated columns, as the catalog describes them)."""
        with connection_errors("reading the catalog"):
            self._types = catalog.load_types(self.conn, oids, self._types)
        masks = self._rules.require(table, names, key)
        codec = RowCodec(names, oids, key, self._types, masks)
        version = self._schema_version(
            table, schema_document(list(zip(names, oids, strict=True)), key, self._types,
                                   self._generated_masks(table, masks, generated), generated))
        return codec, version

    def refresh(self, table: str) -> None:
        self.captured.refresh(table)

    def key_arity(self, table: str) -> int:
        return len(self.captured.get(table).info.key_columns)

    def masked_columns(self, table: str) -> dict[str, str]:
        masks = self.captured.get(table).masks.masks
        return {name: mask.describe() for name, mask in masks.items()}

    def check_keys(self, table: str, keys: Sequence[KeyTexts]) -> None:
        """Refuse keys whose values do not fit the key columns' types."""
        info = self.captured.get(table).info
        for i, (column, key_type) in enumerate(zip(info.key_columns, info.key_types,
                                                   strict=True)):
            try:
                with connection_errors("checking keys"):
                    self.conn.execute(queries.check_key_values_sql(key_type),
                                      ([k[i] for k in keys],))
            except psycopg.errors.DataError as exc:
                raise RequestRejected(
                    f"a key value does not fit column {column} ({key_type}) of {table}: "
                    f"{exc.diag.message_primary}"
                ) from None

    # -- the reads ------------------------------------------------------------

    def check_filter(self, table: str, row_filter: RowFilter) -> None:
        """Refuse a filter whose columns the table lacks, whose values do not fit their
        columns' types, or whose operators the types lack (planned, no row read)."""
        captured = self.captured.get(table)
        info = captured.info
        types = dict(zip(info.star, info.star_types, strict=True))
        for column in row_filter.columns:
            if column not in types:
                raise RequestRejected(f"{table} has no column {column!r} (it has "
                                      f"{', '.join(info.star)})")
        for name, key in (("from_key", row_filter.from_key), ("to_key", row_filter.to_key)):
            if key is not None and len(key) != len(info.key_columns):
                raise RequestRejected(
                    f"{name} has {len(key)} value(s); the primary key of {table} has "
                    f"{len(info.key_columns)} column(s): {', '.join(info.key_columns)}")
            if key is not None:
                self.check_keys(table, [key])
        for condition in row_filter.conditions:
            self._check_values(table, condition.column, types[condition.column],
                               condition.values)
        where, params = self._where(table, captured, row_filter)
        try:
            with connection_errors("checking the filter"):
                self.conn.execute(queries.filter_check_sql(info.shape, where).encode(), params)
        except psycopg.Error as exc:
            raise RequestRejected(f"the filter does not apply to {table}: "
                                  f"{exc.diag.message_primary or exc}") from None

    def _check_values(self, table: str, column: str, column_type: str,
                      values: Sequence[str]) -> None:
        if not values:
            return
        try:
            with connection_errors("checking the filter"):
                self.conn.execute(queries.check_key_values_sql(column_type), (list(values),))
        except psycopg.errors.DataError as exc:
            raise RequestRejected(f"a value does not fit column {column} ({column_type}) of "
                                  f"{table}: {exc.diag.message_primary}") from None

    def _where(self, table: str, captured: _Table,
               row_filter: RowFilter | None) -> tuple[list[str], list[object]]:
        """A filter's conditions and parameters for the table as the catalog describes it
        now; DumpFailed if a column it names was dropped or the key changed since."""
        if row_filter is None:
            return [], []
        info = captured.info
        types = dict(zip(info.star, info.star_types, strict=True))
        gone = [c for c in row_filter.columns if c not in types]
        if gone:
            raise DumpFailed(f"the filter's column {gone[0]!r} is not a column of {table} any "
                             "more: request a new dump with a filter on its columns")
        arity = len(info.key_columns)
        if any(key is not None and len(key) != arity
               for key in (row_filter.from_key, row_filter.to_key)):
            raise DumpFailed(f"the key range does not fit the primary key of {table} "
                             f"({', '.join(info.key_columns)}): request a new dump")
        return queries.filter_sql(info.shape, row_filter, types)

    def _settled(self, table: str) -> None:
        """ChunkStale while a transaction that was open when ``table`` joined the publication
        is still open: what it wrote before then is in no log, and a chunk must see it."""
        xid = self.not_before.get(table)
        if xid is None:
            return
        with connection_errors("reading the snapshot"):
            row = self.conn.execute("SELECT pg_snapshot_xmin(pg_current_snapshot()) >= "
                                    "%s::xid8", (xid,)).fetchone()
        if row is None or not row[0]:
            raise ChunkStale(f"{table} joined capture while transactions that may have "
                             "written it were open: its dump waits for them to end (what "
                             "they wrote before is in no log)")
        del self.not_before[table]

    def upper_bound(self, table: str, row_filter: RowFilter | None = None) -> KeyTexts | None:
        self._settled(table)
        captured = self.captured.get(table)
        where, params = self._where(table, captured, row_filter)
        cursor = self._run(table, queries.upper_bound_sql(captured.info.shape, where), params,
                           on_primary=True)
        with connection_errors(f"reading {table}"):
            rows = cursor.fetchall()
        return None if not rows else tuple(str(v) for v in rows[0])

    def read_chunk(self, table: str, after: KeyTexts | None, upper: KeyTexts, limit: int,
                   row_filter: RowFilter | None = None) -> Chunk:
        self._settled(table)
        captured = self._range_of(table, after, upper)
        where, params = self._where(table, captured, row_filter)
        sql = queries.chunk_sql(captured.info.shape, first=after is None, where=where)
        result = self._run(table, sql, [*(after or ()), *upper, *params, limit]).pgresult
        assert result is not None
        self._check_read(table, captured, result, 0)
        count = result.ntuples
        last = None
        if count:
            last = tuple(_text(result.get_value(count - 1, i)) for i in captured.key_positions)
        return Chunk(count, last, captured.version, functools.partial(
            _encode_result, captured.columns, captured.star_index, result))

    def key_after(self, table: str, after: KeyTexts | None, upper: KeyTexts, offset: int,
                  row_filter: RowFilter | None = None) -> KeyTexts | None:
        captured = self._range_of(table, after, upper)
        where, params = self._where(table, captured, row_filter)
        sql = queries.key_after_sql(captured.info.shape, first=after is None, where=where)
        result = self._run(table, sql, [*(after or ()), *upper, *params, offset - 1]).pgresult
        assert result is not None
        if not result.ntuples:
            return None
        return tuple(_text(result.get_value(0, i)) for i in range(result.nfields))

    def _range_of(self, table: str, after: KeyTexts | None, upper: KeyTexts) -> _Table:
        """The captured table, whose key the range's keys (``after``, ``upper``) fit."""
        captured = self.captured.get(table)
        arity = len(captured.info.key_columns)
        if len(upper) != arity or (after is not None and len(after) != arity):
            raise DumpFailed(
                f"the primary key of {table} changed during the dump (now "
                f"{', '.join(captured.info.key_columns)}): request a new dump of the table"
            )
        return captured

    def _check_read(self, table: str, captured: _Table, result: PGresult, skip: int) -> None:
        """The SELECT read the columns the codec expects, else the chunk is stale: a column
        was added, dropped, renamed or retyped since the catalog was read."""
        read = _described(result, skip)
        if read != captured.wire:
            self.load(table)
            raise ChunkStale(
                f"the columns of {table} changed since the worker read them "
                f"({', '.join(n for n, _ in captured.wire)} → {', '.join(n for n, _ in read)}, "
                "or their types): the chunk is read again with the new columns"
            )

    def read_keys(self, table: str, keys: Sequence[KeyTexts]) -> KeysChunk:
        self._settled(table)
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
        with connection_errors(f"reading {table}"):
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

    def _run(self, table: str, sql: str, params: Sequence[object],
             on_primary: bool = False) -> psycopg.Cursor[TextRow]:
        """Run one SELECT of ``table`` on the reads' connection (the source's if
        ``on_primary``): its result is the cursor's. A lost connection ends the session (a
        lost replica holds the dump); a statement the server refused (a timeout, a cancel,
        ...) fails the dump; a column gone makes the chunk stale."""
        replica = self._replica and not on_primary
        cursor = text_cursor(self.conn) if on_primary else self._text_cursor()
        try:
            try:
                cursor.execute(sql.encode(), params)
            except psycopg.errors.FeatureNotSupported:
                # psycopg prepared the SELECT (after 5 runs) and its table changed since:
                # "cached plan must not change result type". Forget the prepared ones and
                # run it once more, now planned anew: the result describes the new columns
                # (_check_read makes the chunk stale) or the error was another one.
                if cursor.connection.broken or cursor.connection.closed:
                    raise
                cursor.connection.execute(b"DEALLOCATE ALL")
                cursor.execute(sql.encode(), params)
            return cursor
        except psycopg.Error as exc:
            lost = cursor.connection.broken or cursor.connection.closed
            if not lost and isinstance(exc, psycopg.errors.UndefinedColumn):
                self.load(table)  # a key column renamed: the chunk is read with the new ones
            raise select_error(table, exc, lost=lost, replica=replica) from exc

    def _text_cursor(self) -> psycopg.Cursor[TextRow]:
        """The reads' connection's text cursor, kept while the connection is the same."""
        conn = connected(self._reads())
        if self._cursor is None or self._cursor.closed or self._cursor.connection is not conn:
            self._cursor = text_cursor(conn)
        return self._cursor
