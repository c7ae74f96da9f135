"""A PostgreSQL merge target: the SQL of :class:`~dblog_worker.target.base.Target`.

Row images are parsed once per row with ``json_to_record`` into text columns and
each text is cast to its target column's type (``format_type`` from the
catalog). Positions are ``varchar(48) COLLATE "C"``: byte order is position order.

Every statement is run with parameters (``()`` when it has none), so psycopg reads
``%`` as a placeholder: names are spelled with :func:`~dblog_worker.pg.queries.ident`
and types with :func:`~dblog_worker.pg.queries.sql_text`, which double it.

Foreign-key action and prune events (:mod:`dblog_worker.target.derived`) apply after the
keyed ones, by predicate. A row they delete leaves a tombstone keyed by its typed key
(``typed:`` and the JSON array of its key columns' text output: the event has no key
JSON), which the upsert checks besides the landing's key JSON.
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote

import psycopg
from psycopg.conninfo import conninfo_to_dict

from dblog_worker import names
from dblog_worker.errors import TargetError, TargetUnavailable
from dblog_worker.names import split_table
from dblog_worker.pg.jdbc_tls import jdbc_properties
from dblog_worker.pg.options import POSTGRESQL
from dblog_worker.pg.queries import ident, quote_ident, sql_text
from dblog_worker.pg.values import libpq_options
from dblog_worker.target import derived
from dblog_worker.target.base import POSITION_COLUMN, TARGET_GONE, Applied, Target
from dblog_worker.target.columns import Encoding, SourceColumn, logical_of
from dblog_worker.target.plan import Batch

__all__ = ["PostgresTarget", "upsert_sql"]

_P = ident(POSITION_COLUMN)


def qualified(table: str) -> str:
    """``schema.table`` in a statement run with parameters."""
    return names.qualified(table, ident)


def _key_condition(key_columns: Sequence[str], types: Mapping[str, str]) -> str:
    # Each key text is cast to its column's type, as the key dump's texts are.
    return " AND ".join(f"{ident(c)} = CAST(%s AS {sql_text(types[c])})" for c in key_columns)


def row_position_sql(table: str, key_columns: Sequence[str], types: Mapping[str, str]) -> str:
    """The position of the row of one key (parameters: the key's texts)."""
    return f"SELECT {_P} FROM {qualified(table)} WHERE {_key_condition(key_columns, types)}"


def delete_row_sql(table: str, key_columns: Sequence[str], types: Mapping[str, str]) -> str:
    """Delete the row of one key if it still has a position (parameters: the key's texts,
    then the position; a NULL position matches NULL)."""
    return (f"DELETE FROM {qualified(table)} WHERE {_key_condition(key_columns, types)}"
            f" AND {_P} IS NOT DISTINCT FROM %s")


# A JSON array of any depth as a PostgreSQL array literal ('{{1,2},{3,4}}'): the cast of
# a multidimensional array. plpgsql, as it calls itself.
_ARRAY_LITERAL = """CREATE OR REPLACE FUNCTION {s}.array_literal(value json) RETURNS text
LANGUAGE plpgsql IMMUTABLE STRICT AS $$
BEGIN
  IF json_typeof(value) = 'array' THEN
    RETURN '{{' || coalesce((SELECT string_agg({s}.array_literal(e), ',' ORDER BY n)
      FROM json_array_elements(value) WITH ORDINALITY AS a(e, n)), '') || '}}';
  ELSIF json_typeof(value) = 'null' THEN
    RETURN 'NULL';
  END IF;
  RETURN '"' || replace(replace(value #>> '{{}}', '\\', '\\\\'), '"', '\\"') || '"';
END $$"""


_INTEGERS = ("smallint", "integer", "bigint")
_PG_WIDER = {"int2": "smallint", "int4": "integer", "int8": "bigint",
             "float8": "double precision"}
_STAMP = re.compile(r"timestamp\((\d)\) (with|without) time zone$")
_NUMERIC = re.compile(r"numeric\((\d+),(\d+)\)$")


def widened(column: SourceColumn, existing: str) -> str | None:
    """The type a target column of type ``existing`` (``format_type``) grows to for the
    source ``column``; None if it holds it already or is a type this does not grow.

    Integers grow (``smallint`` < ``integer`` < ``bigint``), ``real`` to ``double
    precision``, timestamps' fraction digits and numerics' scale (keeping their integer
    digits): what an ``ALTER COLUMN ... TYPE`` casts without losing a value.
    """
    logical = None if column.kind == POSTGRESQL else logical_of(column)
    if logical is None:
        wanted = _PG_WIDER.get(column.type)
    elif logical.name == "int64":
        wanted = "bigint"
    elif logical.name in ("datetime", "timestamptz"):
        stamp = _STAMP.match(existing)
        zone = "with" if logical.name == "timestamptz" else "without"
        if stamp and stamp[2] == zone and logical.fsp > int(stamp[1]):
            return f"timestamp({logical.fsp}) {zone} time zone"
        return None
    elif logical.name == "decimal" and logical.scale >= 0:
        numeric = _NUMERIC.match(existing)
        if numeric and logical.scale > int(numeric[2]):
            digits = int(numeric[1]) - int(numeric[2])
            return f"numeric({min(1000, digits + logical.scale)},{logical.scale})"
        return None
    else:
        return None
    if wanted in _INTEGERS and existing in _INTEGERS:
        return wanted if _INTEGERS.index(wanted) > _INTEGERS.index(existing) else None
    if wanted == "double precision" and existing == "real":
        return wanted
    return None


def not_a_date(text: str) -> str:
    """``text`` (a date or time stamp ``YYYY-MM-DD...`` of another kind's source), or
    ``-infinity`` where it is no date PostgreSQL has: MySQL's zero date, a zero year,
    month or day, an impossible day (``2020-02-31``). CASE tests in order: ``make_date``
    sees valid parts only."""
    year, month, day = (f"substr({text}, {at}, {width})" for at, width in
                        ((1, 4), (6, 2), (9, 2)))
    return (f"CASE WHEN {year} = '0000' OR {month} = '00' OR {day} = '00' THEN '-infinity'"
            f" WHEN extract(month FROM make_date({year}::int, {month}::int, 1)"
            f" + ({day}::int - 1)) <> {month}::int THEN '-infinity' ELSE {text} END")


def convert(column: SourceColumn, text: str, type_sql: str, state: str) -> str:
    """SQL that turns ``text``, a column's JSON value as text, into ``type_sql``.

    ``state``: the quoted state schema, which holds ``array_literal``. A date, datetime
    or timestamptz of another kind's source that is no date (MySQL's zero and invalid
    dates) becomes ``-infinity``.
    """
    type_sql = sql_text(type_sql)
    logical = None if column.kind == POSTGRESQL else logical_of(column)
    if logical is not None and logical.name in ("date", "datetime", "timestamptz"):
        return f"CAST({not_a_date(text)} AS {type_sql})"
    if column.encoding is Encoding.BASE64:
        return f"CAST(decode({text}, 'base64') AS {type_sql})"
    if column.encoding is Encoding.ARRAY:
        return (f"CASE WHEN {text} IS NULL THEN NULL"
                f" WHEN json_typeof({text}::json -> 0) = 'array'"
                f" THEN CAST({state}.array_literal({text}::json) AS {type_sql})"
                f" ELSE CAST(ARRAY(SELECT json_array_elements_text({text}::json))"
                f" AS {type_sql}) END")
    return f"CAST({text} AS {type_sql})"


def _key_match(batch: Batch, types: Mapping[str, str], alias: str, state: str) -> str:
    by_name = {c.name: c for c in batch.columns}
    parts = []
    for index, name in enumerate(batch.key):
        text = f"(s.key_json::json ->> {index})"
        parts.append(f"{alias}.{ident(name)} = "
                     f"{convert(by_name[name], text, types[name], state)}")
    return " AND ".join(parts)


KEYED = "s.op IN ('c', 'u', 'r')"  # the staged events applied by key, besides deletes


def _literal(text: str) -> str:
    """A string literal in a statement run with parameters."""
    return sql_text("'" + text.replace("'", "''") + "'")


def typed_key(values: Sequence[str]) -> str:
    """The text of a typed key (``values``: SQL of the key columns' typed values), as a
    derived delete's tombstone names it: ``typed:`` and the JSON array of their texts."""
    texts = ", ".join(f"CAST({v} AS text)" for v in values)
    return f"('typed:' || json_build_array({texts})::text)"


def upsert_sql(batch: Batch, types: Mapping[str, str], state: str) -> str:
    target = qualified(batch.target_table)
    stage = f"{ident(state)}.{ident(batch.stage)}"
    names = [ident(c.name) for c in batch.columns]
    record = ", ".join(f"{n} text" for n in names)
    converted = {c.name: convert(c, f"x.{n}", types[c.name], ident(state))
                 for c, n in zip(batch.columns, names, strict=True)}
    values = ", ".join(converted.values())
    updates = ", ".join(f"{n} = EXCLUDED.{n}" for n in names)
    key = ", ".join(ident(k) for k in batch.key)
    tombstone = (f"SELECT 1 FROM {ident(state)}.tombstones tb WHERE tb.target_table = "
                 "%(target)s AND tb.key_hash = decode(md5({}), 'hex')"
                 " AND tb.position >= s.position")
    return (
        f"INSERT INTO {target} AS t ({', '.join(names)}, {_P})"
        f" SELECT {values}, s.position FROM {stage} s"
        f" CROSS JOIN LATERAL json_to_record(s.after_json::json) AS x({record})"
        f" WHERE {KEYED} AND s.position > %(cut)s"
        f" AND NOT EXISTS ({tombstone.format('s.key_json')})"
        f" AND NOT EXISTS ({tombstone.format(typed_key([converted[k] for k in batch.key]))})"
        f" ON CONFLICT ({key}) DO UPDATE SET {updates}, {_P} = EXCLUDED.{_P}"
        f" WHERE t.{_P} IS NULL OR t.{_P} < EXCLUDED.{_P}"
    )


def _staged_value(batch: Batch, types: Mapping[str, str], state: str, image: str, slot: int,
                  column: str) -> str:
    """The value of ``column`` in action ``slot`` of a staged event's ``image``
    (``before_json``: what it matches; ``after_json``: what it sets), typed."""
    by_name = {c.name: c for c in batch.columns}
    text = f"(s.{image}::json -> {slot} ->> {_literal(column)})"
    return convert(by_name[column], text, types[column], ident(state))


def _run_rows(batch: Batch, types: Mapping[str, str], state: str, slot: derived.Slot,
              index: int, guard: str = f"t.{_P}") -> str:
    """The join of a run's events (positions ``%(first)s`` to ``%(last)s``) with the rows
    slot ``index`` matches that are older than each: the FROM and WHERE after ``t``."""
    stage = f"{ident(state)}.{ident(batch.stage)}"
    match = " AND ".join(
        f"t.{ident(c)} = {_staged_value(batch, types, state, 'before_json', index, c)}"
        for c in slot.columns)
    return (f"{stage} s WHERE s.op = 'f' AND s.position BETWEEN %(first)s AND %(last)s"
            f" AND {match} AND ({guard} IS NULL OR {guard} < s.position)")


def derived_tombstones_sql(batch: Batch, state: str, rows: str) -> str:
    """Tombstones of the rows a derived delete removes: ``rows`` is the FROM and WHERE
    after ``t`` (the target) that selects them with the event's ``s.position``."""
    key = typed_key([f"t.{ident(k)}" for k in batch.key])
    return (
        f"INSERT INTO {ident(state)}.tombstones AS tb SELECT %(target)s,"
        " decode(md5(h.k), 'hex'), h.k, h.position, now() FROM (SELECT DISTINCT ON (k) k,"
        f" position FROM (SELECT {key} AS k, s.position FROM {qualified(batch.target_table)}"
        f" t, {rows}) d ORDER BY k, position) h"
        " ON CONFLICT (target_table, key_hash) DO UPDATE SET position = EXCLUDED.position,"
        " deleted_at = EXCLUDED.deleted_at WHERE tb.position < EXCLUDED.position")


def action_sql(batch: Batch, types: Mapping[str, str], state: str, slot: derived.Slot,
               index: int, hits: bool = False) -> list[str]:
    """The statements of one slot of a run: tombstones then DELETE, or an UPDATE that sets
    the slot's columns and the event's position. With ``hits`` (a run of several slots),
    rows are met through ``dblog_hits``, which holds their positions from before the run."""
    target = qualified(batch.target_table)
    key = " AND ".join(f"h.{ident(k)} = t.{ident(k)}" for k in batch.key)
    guard = "h.dblog_pre" if hits else f"t.{_P}"
    rows = _run_rows(batch, types, state, slot, index, guard)
    if hits:
        rows = f"dblog_hits h, {rows} AND {key}"
    if slot.deletes:
        return [derived_tombstones_sql(batch, state, rows),
                f"DELETE FROM {target} t USING {rows}"]
    sets = ", ".join(
        f"{ident(c)} = {_staged_value(batch, types, state, 'after_json', index, c)}"
        for c in slot.columns)
    position = f"greatest(coalesce(t.{_P}, ''), s.position)" if hits else "s.position"
    return [f"UPDATE {target} t SET {sets}, {_P} = {position} FROM {rows}"]


def hits_sql(batch: Batch, types: Mapping[str, str], state: str,
             run: derived.ActionRun) -> list[str]:
    """The rows a run of several slots can change, with their positions before it: a
    temporary table (made without parameters, which CREATE TABLE AS cannot take), filled."""
    keys = ", ".join(f"t.{ident(k)}" for k in batch.key)
    target = qualified(batch.target_table)
    selects = " UNION ".join(
        f"SELECT {keys}, t.{_P} FROM {target} t, {_run_rows(batch, types, state, slot, index)}"
        for index, slot in enumerate(run.slots))
    return [f"CREATE TEMP TABLE dblog_hits AS SELECT {keys}, t.{_P} AS dblog_pre"
            f" FROM {target} t WITH NO DATA",
            f"INSERT INTO dblog_hits {selects}"]


def prune_sql(batch: Batch, state: str) -> list[str]:
    """A prune event's statements: tombstones of the rows older than ``%(older)s`` at the
    event's position ``%(position)s``, then their DELETE."""
    target = qualified(batch.target_table)
    older = f"(t.{_P} IS NULL OR t.{_P} < %(older)s)"
    key = typed_key([f"t.{ident(k)}" for k in batch.key])
    return [
        f"INSERT INTO {ident(state)}.tombstones AS tb SELECT %(target)s,"
        f" decode(md5(h.k), 'hex'), h.k, %(position)s, now() FROM (SELECT {key} AS k"
        f" FROM {target} t WHERE {older}) h ON CONFLICT (target_table, key_hash) DO UPDATE"
        " SET position = EXCLUDED.position, deleted_at = EXCLUDED.deleted_at"
        " WHERE tb.position < EXCLUDED.position",
        f"DELETE FROM {target} t WHERE {older}",
    ]


def delete_sql(batch: Batch, types: Mapping[str, str], state: str) -> str:
    stage = f"{ident(state)}.{ident(batch.stage)}"
    return (
        f"DELETE FROM {qualified(batch.target_table)} t USING {stage} s"
        f" WHERE s.op = 'd' AND s.position > %(cut)s"
        f" AND {_key_match(batch, types, 't', ident(state))}"
        f" AND (t.{_P} IS NULL OR t.{_P} < s.position)"
    )


def literal(text: str) -> str:
    """A string literal (standard_conforming_strings is on)."""
    return "'" + text.replace("'", "''") + "'"


def _enums(batch: Batch) -> list[tuple[str, tuple[str, ...]]]:
    """The enum types of a batch's columns, each with its labels (the newest found)."""
    found: dict[str, tuple[str, ...]] = {}
    for column in batch.columns:
        if column.enum:
            found[column.enum] = column.members
    return list(found.items())


class PostgresTarget(Target):
    kind = POSTGRESQL
    position_type = 'varchar(48) COLLATE "C"'

    def __init__(self, config: Any) -> None:
        super().__init__(config)
        self._conn: psycopg.Connection[tuple[Any, ...]] | None = None
        self._s = ident(self.state)
        self._jdbc_tls: dict[str, str] | None = None  # the DSN's TLS, for pgjdbc
        self._folder: tempfile.TemporaryDirectory[str] | None = None  # a converted key's

    # -- connection ---------------------------------------------------------------------------

    def connect(self) -> None:
        with self._errors("connecting"):
            self._conn = psycopg.connect(self.config.dsn, autocommit=True,
                                         options=libpq_options(), connect_timeout=10)

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        if self._folder is not None:
            self._folder.cleanup()
            self._folder, self._jdbc_tls = None, None

    @property
    def conn(self) -> psycopg.Connection[tuple[Any, ...]]:
        if self._conn is None or self._conn.closed:
            raise TargetUnavailable(TARGET_GONE)
        return self._conn

    @contextmanager
    def _errors(self, doing: str) -> Iterator[None]:
        try:
            yield
        except psycopg.OperationalError as exc:
            raise TargetUnavailable(
                f"target database {self.config.safe_dsn()} failed while {doing}: "
                f"{str(exc).strip()}; nothing of this batch was applied, re-run the merge"
            ) from None

    def row_position(self, table: str, key_columns: Sequence[str], types: Mapping[str, str],
                     key: Sequence[str]) -> tuple[bool, object]:
        rows = self._rows(row_position_sql(table, key_columns, types), list(key))
        return (True, rows[0][0]) if rows else (False, None)

    def delete_row(self, table: str, key_columns: Sequence[str], types: Mapping[str, str],
                   key: Sequence[str], position: object) -> bool:
        return self._run(delete_row_sql(table, key_columns, types), [*key, position]) > 0

    def _rows(self, sql: str, params: Sequence[Any] | Mapping[str, Any] = ()) -> list[Any]:
        with self._errors("querying"):
            return self.conn.execute(sql.encode(), params).fetchall()

    def _run(self, sql: str, params: Sequence[Any] | Mapping[str, Any] = ()) -> int:
        with self._errors("writing"):
            return self.conn.execute(sql.encode(), params).rowcount

    # -- state ------------------------------------------------------------------------------

    def _schema_lock(self, schema: str) -> None:
        """Serialize creating ``schema`` and its tables among concurrent merges.

        ``CREATE ... IF NOT EXISTS`` is not safe against itself: two sessions that both
        find the name free both insert it and one fails on the catalog's unique index.
        """
        self.conn.execute(b"SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))",
                          (f"dblog create schema {schema}",))

    def ensure_state(self) -> None:
        with self._errors("creating the merge state"), self.conn.transaction():
            self._schema_lock(self.state)
            self._create_state()

    def _create_state(self) -> None:
        s = self._s
        self._run(f"CREATE SCHEMA IF NOT EXISTS {s}")
        self._run(
            f"CREATE TABLE IF NOT EXISTS {s}.merge_log (source text NOT NULL,"
            " source_table text NOT NULL, target_table text NOT NULL,"
            " last_segment bigint NOT NULL, last_position varchar(48) COLLATE \"C\" NOT NULL,"
            " truncated_at varchar(48) COLLATE \"C\" NOT NULL, events bigint NOT NULL,"
            " batches bigint NOT NULL, updated_at timestamptz NOT NULL,"
            " PRIMARY KEY (source, source_table, target_table))"
        )
        self._run(
            f"CREATE TABLE IF NOT EXISTS {s}.tombstones (target_table text NOT NULL,"
            " key_hash bytea NOT NULL, key_json text NOT NULL,"
            " position varchar(48) COLLATE \"C\" NOT NULL, deleted_at timestamptz NOT NULL,"
            " PRIMARY KEY (target_table, key_hash))"
        )
        function = f"{quote_ident(self.state)}.array_literal(json)"  # a value: SQL text
        if self._rows("SELECT to_regprocedure(%s)", (function,))[0][0] is None:
            self._run(_ARRAY_LITERAL.format(s=s))

    def merge_log_rows(self, sql: str, params: Sequence[str]) -> list[tuple[Any, ...]]:
        return list(self._rows(sql.format(s=self._s), params))

    def try_lock(self, stage: str) -> bool:
        rows = self._rows("SELECT pg_try_advisory_lock(hashtextextended(%s, 0))", (stage,))
        return bool(rows[0][0])

    def unlock(self, stage: str) -> None:
        self._rows("SELECT pg_advisory_unlock(hashtextextended(%s, 0))", (stage,))

    # -- tables -----------------------------------------------------------------------------

    def table_columns(self, table: str) -> dict[str, str] | None:
        schema, name = split_table(table)
        rows = self._rows(
            "SELECT a.attname, format_type(a.atttypid, a.atttypmod) FROM pg_class c"
            " JOIN pg_namespace n ON n.oid = c.relnamespace"
            " LEFT JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0"
            " AND NOT a.attisdropped"
            " WHERE n.nspname = %s AND c.relname = %s AND c.relkind IN ('r', 'p')"
            " ORDER BY a.attnum",
            (schema, name),
        )
        if not rows:
            return None
        return {str(n): str(t) for n, t in rows if n is not None}

    def primary_key(self, table: str) -> list[str]:
        schema, name = split_table(table)
        rows = self._rows(
            "SELECT a.attname FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid"
            " JOIN pg_namespace n ON n.oid = c.relnamespace"
            " CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord)"
            " JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = k.attnum"
            " WHERE i.indisprimary AND n.nspname = %s AND c.relname = %s ORDER BY k.ord",
            (schema, name),
        )
        return [str(r[0]) for r in rows]

    def create_table(self, table: str, columns: Sequence[tuple[str, str]],
                     key: Sequence[str]) -> None:
        schema, _ = split_table(table)
        described = ", ".join(f"{ident(n)} {sql_text(t)}" for n, t in columns)
        primary = ", ".join(ident(k) for k in key)
        with self._errors("creating the target table"), self.conn.transaction():
            self._schema_lock(schema)
            self._ddl(table, f"CREATE SCHEMA IF NOT EXISTS {ident(schema)}")
            self._ddl(table, f"CREATE TABLE IF NOT EXISTS {qualified(table)}"
                             f" ({described}, PRIMARY KEY ({primary}))")

    def add_columns(self, table: str, columns: Sequence[tuple[str, str]]) -> None:
        added = ", ".join(f"ADD COLUMN IF NOT EXISTS {ident(n)} {sql_text(t)}"
                          for n, t in columns)
        with self._errors("adding columns"), self.conn.transaction():
            self._ddl(table, f"ALTER TABLE {qualified(table)} {added}")

    def widened(self, table: str, column: SourceColumn, existing: str) -> str | None:
        return widened(column, existing)

    def modify_columns(self, table: str, columns: Sequence[tuple[str, str]]) -> None:
        changes = ", ".join(f"ALTER COLUMN {ident(n)} TYPE {sql_text(t)}" for n, t in columns)
        with self._errors("widening columns"), self.conn.transaction():
            self._ddl(table, f"ALTER TABLE {qualified(table)} {changes}")

    def _ddl(self, table: str, sql: str) -> None:
        try:
            self.conn.execute(sql.encode(), ())
        except psycopg.OperationalError:
            raise
        except psycopg.Error as exc:
            raise TargetError(f"cannot prepare target table {table}: {str(exc).strip()}") from None

    def prepare_stage(self, stage: str) -> None:
        staged = f"{self._s}.{ident(stage)}"
        with self._errors("creating the staging table"), self.conn.transaction():
            self.conn.execute(f"DROP TABLE IF EXISTS {staged}".encode(), ())
            self.conn.execute(
                f"CREATE UNLOGGED TABLE {staged} (key_json text, op text NOT NULL,"
                ' position varchar(48) COLLATE "C" NOT NULL, after_json text,'
                " before_json text)".encode(), ()
            )

    def stage_table(self, stage: str) -> str:
        return f"{quote_ident(self.state)}.{quote_ident(stage)}"

    def jdbc(self) -> tuple[str, dict[str, str]]:
        params = conninfo_to_dict(self.config.dsn)
        host = str(params.get("host") or "")
        if not host or host.startswith("/") or "," in host:
            raise TargetError(
                "target.dsn must name one TCP host (host=...): Spark reaches the target over"
                " JDBC, which cannot use a Unix socket or a host list"
            )
        port = str(params.get("port") or "5432")
        database = quote(str(params.get("dbname") or params.get("user") or "postgres"), safe="")
        url = f"jdbc:postgresql://{host}:{port}/{database}?reWriteBatchedInserts=true"
        properties = {"driver": "org.postgresql.Driver", "user": str(params.get("user") or "")}
        if params.get("password"):
            properties["password"] = str(params["password"])
        if self._jdbc_tls is None:  # converted once: the key's file lives until close
            self._jdbc_tls = jdbc_properties({k: str(v) for k, v in params.items()},
                                             self._private_folder)
        return url, {**properties, **self._jdbc_tls}

    def _private_folder(self) -> Path:
        if self._folder is None:
            self._folder = tempfile.TemporaryDirectory(prefix="dblog-jdbc-")  # 0700
        return Path(self._folder.name)

    # -- types of the source's database, generated columns ----------------------------------

    def prepare_table(self, batch: Batch) -> dict[str, str]:
        """The enum types the batch's columns need first; after the table, its generated
        columns (computed by the target with the source's expression)."""
        for enum, labels in _enums(batch):
            self._ensure_enum(batch, enum, labels)
        found = super().prepare_table(batch)
        missing = [g for g in batch.generated if g.name not in found]
        if missing:
            added = ", ".join(
                f"ADD COLUMN IF NOT EXISTS {ident(g.name)} {sql_text(g.type)}"
                f" GENERATED ALWAYS AS ({sql_text(g.expression)}) STORED" for g in missing)
            with self._errors("adding generated columns"), self.conn.transaction():
                self._ddl(batch.target_table, f"ALTER TABLE {qualified(batch.target_table)}"
                                              f" {added}")
            found = self.table_columns(batch.target_table) or found
        return found

    def _ensure_enum(self, batch: Batch, enum: str, labels: Sequence[str]) -> None:
        """Create the enum type ``enum`` (schema.name) with ``labels`` in their order, or
        append to it the labels it lacks; TargetError if the name is another kind of type."""
        schema, name = split_table(enum)
        sql = f"{ident(schema)}.{ident(name)}"
        with self._errors("creating an enum type"), self.conn.transaction():
            self._schema_lock(schema)
            found = self._rows(
                "SELECT t.typtype, ARRAY(SELECT e.enumlabel FROM pg_enum e WHERE e.enumtypid ="
                " t.oid ORDER BY e.enumsortorder) FROM pg_type t JOIN pg_namespace n"
                " ON n.oid = t.typnamespace WHERE n.nspname = %s AND t.typname = %s",
                (schema, name))
            if not found:
                self._ddl(batch.target_table, f"CREATE SCHEMA IF NOT EXISTS {ident(schema)}")
                self._ddl(batch.target_table, f"CREATE TYPE {sql} AS ENUM ("
                          + ", ".join(sql_text(literal(x)) for x in labels) + ")")
                return
            if found[0][0] != "e":
                raise TargetError(
                    f"{batch.source_table}: the target has a type {enum} that is not an enum;"
                    f" the merge creates {enum} as the source's enum: drop or rename it")
        self._add_labels(batch, enum, [x for x in labels if x not in found[0][1]])

    def _add_labels(self, batch: Batch, enum: str, labels: Sequence[str]) -> None:
        """Append ``labels`` to the enum (each committed before a batch uses it)."""
        schema, name = split_table(enum)
        for label in labels:
            with self._errors("adding an enum label"), self.conn.transaction():
                self._ddl(batch.target_table,
                          f"ALTER TYPE {ident(schema)}.{ident(name)} ADD VALUE IF NOT EXISTS "
                          + sql_text(literal(label)))

    def _staged_labels(self, batch: Batch) -> None:
        """Labels of the staged rows that the target's enums lack (a label added at the
        source after the worker read the type): appended before the batch applies."""
        stage = f"{self._s}.{ident(batch.stage)}"
        for column in batch.columns:
            if not column.enum:
                continue
            name_sql = sql_text(literal(column.name))
            if column.element:  # one-dimensional arrays of the enum
                value = f"(s.after_json::json -> {name_sql})"
                values = (f"SELECT DISTINCT e.v #>> '{{}}' FROM {stage} s CROSS JOIN LATERAL"
                          f" json_array_elements(CASE WHEN json_typeof({value}) = 'array'"
                          f" THEN {value} END) e(v) WHERE s.op <> 'd'"
                          " AND json_typeof(e.v) = 'string'")
            else:
                values = (f"SELECT DISTINCT s.after_json::json ->> {name_sql}"
                          f" FROM {stage} s WHERE s.op <> 'd'")
            schema, name = split_table(column.enum)
            known = self._rows(
                "SELECT e.enumlabel FROM pg_enum e JOIN pg_type t ON t.oid = e.enumtypid"
                " JOIN pg_namespace n ON n.oid = t.typnamespace WHERE n.nspname = %s"
                " AND t.typname = %s", (schema, name))
            have = {str(r[0]) for r in known}
            new = sorted({str(r[0]) for r in self._rows(values) if r[0] is not None} - have)
            self._add_labels(batch, column.enum, new)

    # -- apply ------------------------------------------------------------------------------

    def apply(self, batch: Batch, types: Mapping[str, str], retention_h: float) -> Applied:
        self._staged_labels(batch)
        s = self._s
        stage = f"{s}.{ident(batch.stage)}"
        target = qualified(batch.target_table)
        ids = (batch.source, batch.source_table, batch.target_table)
        conn = self.conn
        with self._errors("applying a batch"), conn.transaction():
            try:
                conn.execute(
                    f"INSERT INTO {s}.merge_log VALUES (%s, %s, %s, 0, '', '', 0, 0, now())"
                    " ON CONFLICT DO NOTHING".encode(), ids)
                last, truncated_at = conn.execute(
                    f"SELECT last_segment, truncated_at FROM {s}.merge_log WHERE source = %s"
                    " AND source_table = %s AND target_table = %s FOR UPDATE".encode(), ids
                ).fetchall()[0]
                if last != batch.after_segment:
                    raise TargetError(
                        f"{batch.target_table}: the merge log moved from segment"
                        f" {batch.after_segment} to {last} while this batch was staged;"
                        " another merge ran at the same time. Re-run the merge."
                    )
                cut = max(truncated_at, batch.truncate_at)
                truncated = bool(batch.truncate_at) and batch.truncate_at > truncated_at
                if truncated:
                    conn.execute(f"DELETE FROM {target} WHERE {_P} IS NULL OR {_P} < %s"
                                 .encode(), (cut,))
                    conn.execute(f"DELETE FROM {s}.tombstones WHERE target_table = %s"
                                 " AND position < %s".encode(), (batch.target_table, cut))
                conn.execute(f"ANALYZE {stage}".encode(), ())
                params = {"cut": cut, "target": batch.target_table}
                deleted = conn.execute(delete_sql(batch, types, self.state).encode(),
                                       params).rowcount
                conn.execute(
                    f"INSERT INTO {s}.tombstones AS tb SELECT %(target)s,"
                    " decode(md5(s.key_json), 'hex'), s.key_json, s.position, now()"
                    f" FROM {stage} s WHERE s.op = 'd' AND s.position > %(cut)s"
                    " ON CONFLICT (target_table, key_hash) DO UPDATE SET"
                    " position = EXCLUDED.position, deleted_at = EXCLUDED.deleted_at"
                    " WHERE tb.position < EXCLUDED.position".encode(), params)
                upserted = conn.execute(upsert_sql(batch, types, self.state).encode(),
                                        params).rowcount
                conn.execute(
                    f"DELETE FROM {s}.tombstones tb USING {stage} s WHERE {KEYED}"
                    " AND tb.target_table = %(target)s"
                    " AND tb.key_hash = decode(md5(s.key_json), 'hex')"
                    " AND tb.position < s.position".encode(), params)
                removed, changed = self._apply_derived(batch, types, stage, params)
                deleted += removed
                conn.execute(
                    f"DELETE FROM {s}.tombstones WHERE target_table = %s AND position <= %s"
                    " AND deleted_at < now() - make_interval(secs => %s)".encode(),
                    (batch.target_table, batch.last_position, retention_h * 3600))
                conn.execute(
                    f"UPDATE {s}.merge_log SET last_segment = %s, last_position = %s,"
                    " truncated_at = %s, events = events + %s, batches = batches + 1,"
                    " updated_at = now() WHERE source = %s AND source_table = %s"
                    " AND target_table = %s".encode(),
                    (batch.last_segment, batch.last_position, cut, batch.events, *ids))
                conn.execute(f"DROP TABLE {stage}".encode(), ())
            except psycopg.OperationalError:
                raise
            except psycopg.Error as exc:
                raise TargetError(
                    f"{batch.target_table}: the batch of segments {batch.segments[0].seq}"
                    f"-{batch.last_segment} was not applied (rolled back): "
                    f"{str(exc).strip()}"
                ) from None
        return Applied(upserted=upserted, deleted=deleted, truncated=truncated,
                       derived=removed + changed)

    def _apply_derived(self, batch: Batch, types: Mapping[str, str], stage: str,
                       params: Mapping[str, str]) -> tuple[int, int]:
        """The batch's foreign-key action and prune events, in position order: rows deleted
        and rows changed."""
        conn = self.conn
        staged = conn.execute(
            f"SELECT position, op, before_json, after_json FROM {stage} WHERE op IN ('f', 'p')"
            " AND position > %(cut)s ORDER BY position".encode(), params).fetchall()
        if not staged:
            return 0, 0
        steps = derived.batch_steps(staged, batch.target_table)
        deleted = changed = 0
        for step in steps:
            if isinstance(step, derived.Prune):
                tombstones, delete = prune_sql(batch, self.state)
                values = {**params, "position": step.position, "older": step.older_than}
                conn.execute(tombstones.encode(), values)
                deleted += conn.execute(delete.encode(), values).rowcount
                continue
            values = {**params, "first": step.first, "last": step.last}
            hits = len(step.slots) > 1
            if hits:
                create, fill = hits_sql(batch, types, self.state, step)
                conn.execute(create.encode(), ())
                conn.execute(fill.encode(), values)
            for index, slot in enumerate(step.slots):
                for sql in action_sql(batch, types, self.state, slot, index, hits):
                    count = conn.execute(sql.encode(), values).rowcount
                if slot.deletes:
                    deleted += count
                else:
                    changed += count
            if hits:
                conn.execute(b"DROP TABLE dblog_hits", ())
        return deleted, changed
