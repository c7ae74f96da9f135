"""How ``dblog verify`` reads and normalizes PostgreSQL tables (see
:mod:`dblog_worker.verify_sql` for the families, rows and key ranges).

========  ==========================================================
family    PostgreSQL
========  ==========================================================
NUMBER    integers ``c::text``; numeric ``trim_scale(c)::text``, ``NaN`` and
          ``±Infinity`` NULL; bool ``1``/``0``
FLOAT     as float8: shortest digits (see verify_sql); 2^53 to 2^90 as exact integers;
          ``NaN`` and ``±Infinity`` NULL
TEXT      the type's text output, as the landing zone has it (``concat(c)``: bpchar keeps
          its padding, inet has no ``/32``)
BINARY    ``encode(c, 'hex')``
DATE      ``c::text`` (ISO); outside the years 1 to 9999 (``±infinity``, BC) ``-infinity``
DATETIME  ``YYYY-MM-DD HH24:MI:SS.US`` in UTC; outside the years 1 to 9999 ``-infinity``
TIME      microseconds, ``extract(epoch ...)``
========  ==========================================================

These are the forms of the merge's mappings between kinds (docs/merge.md, "Types"): a
MySQL target has NULL for a ``NaN`` and the zero date for a date it cannot hold, a
PostgreSQL target ``-infinity`` for a MySQL date that is no date. An ``interval`` goes to
other kinds as its text: it is TEXT in a source table, TIME (a MySQL ``TIME``'s form) in
a target one.

PostgreSQL → PostgreSQL compares ``c::text`` whatever the family. Key ranges compare row
values, ``(k1, k2) > (b1, b2)``; in ``binary`` key order text keys compare ``COLLATE "C"``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from dblog_worker.errors import SourceUnavailable
from dblog_worker.pg.catalog import types_of
from dblog_worker.pg.encoders import BUILTIN_TYPES, encoder_for
from dblog_worker.pg.options import POSTGRESQL
from dblog_worker.pg.queries import ident, sql_text
from dblog_worker.pg.values import libpq_options
from dblog_worker.verify_sql import (
    Column,
    Family,
    KeyParam,
    Query,
    TableDescription,
    VerifyFailed,
    float_of,
    time_text,
)

_FAMILIES = {
    "int2": Family.NUMBER, "int4": Family.NUMBER, "int8": Family.NUMBER,
    "oid": Family.NUMBER, "numeric": Family.NUMBER, "bool": Family.NUMBER,
    "float4": Family.FLOAT, "float8": Family.FLOAT,
    "bytea": Family.BINARY,
    "date": Family.DATE,
    "timestamp": Family.DATETIME, "timestamptz": Family.DATETIME,
    "time": Family.TIME, "interval": Family.TIME,
}
INTEGERS = frozenset({"int2", "int4", "int8", "oid"})
_CROSS_TEXT_KEYS = frozenset({"text", "varchar", "uuid"})


def pg_family(typname: str, category: str, role: str = "target") -> Family:
    """The family of a PostgreSQL type (``typcategory`` 'A' array, 'C' composite) in a
    ``source`` or ``target`` table."""
    if typname == "interval" and role == "source":
        return Family.TEXT  # its form for other kinds: its text
    if typname in _FAMILIES:
        return _FAMILIES[typname]
    return Family.OTHER if category in ("A", "C") else Family.TEXT


PG_TABLE_SQL = (
    "SELECT c.oid FROM pg_catalog.pg_class c "
    "JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace "
    "WHERE n.nspname = %s AND c.relname = %s AND c.relkind IN ('r', 'p')"
)
"""The oid of a table; parameters ``(schema, table)``."""

PG_COLUMNS_SQL = (
    "SELECT a.attname, coalesce(b.typname, t.typname), format_type(a.atttypid, NULL), "
    "coalesce(b.typcategory, t.typcategory), l.collname, a.atttypid::int, "
    "CASE WHEN a.attgenerated <> '' THEN pg_get_expr(g.adbin, g.adrelid) END "
    "FROM pg_catalog.pg_attribute a "
    "LEFT JOIN pg_catalog.pg_attrdef g ON g.adrelid = a.attrelid AND g.adnum = a.attnum "
    "JOIN pg_catalog.pg_type t ON t.oid = a.atttypid "
    "LEFT JOIN pg_catalog.pg_type b ON b.oid = t.typbasetype AND t.typtype = 'd' "
    "LEFT JOIN pg_catalog.pg_collation l ON l.oid = a.attcollation "
    "WHERE a.attrelid = CAST(%s AS oid) AND a.attnum > 0 AND NOT a.attisdropped "
    "ORDER BY a.attnum"
)
"""Name, type name, cast type, category, collation and type OID of each column; parameter
the table's oid."""

PG_KEY_SQL = (
    "SELECT a.attname FROM pg_catalog.pg_index i "
    "CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, n) "
    "JOIN pg_catalog.pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum "
    "WHERE i.indrelid = CAST(%s AS oid) AND i.indisprimary ORDER BY k.n"
)
"""The primary key's columns in key order; parameter the table's oid."""

PG_DATABASE_SQL = (
    "SELECT to_jsonb(d) ->> 'datcollate', to_jsonb(d) ->> 'datlocprovider', "
    "to_jsonb(d) ->> 'daticulocale' FROM pg_catalog.pg_database d "
    "WHERE d.datname = current_database()"
)
"""What the collation ``default`` means in this database (the locale provider and ICU
locale exist from PostgreSQL 15 on; older versions give NULL)."""


def _pg_float_digits(text: str) -> str:
    """``[-]<digits>e<exponent>`` of a float8's text (which is finite and not exact-int)."""
    mantissa = f"ltrim(split_part({text}, 'e', 1), '-')"
    digits = f"replace({mantissa}, '.', '')"
    significant = f"btrim({digits}, '0')"
    exponent = (f"(coalesce(nullif(split_part({text}, 'e', 2), '')::int, 0)"
                f" + length(split_part({mantissa}, '.', 1))"
                f" - (length({digits}) - length(ltrim({digits}, '0'))))")
    return (f"CASE WHEN {significant} = '' THEN '0' ELSE "
            f"(CASE WHEN {text} LIKE '-%%' THEN '-' ELSE '' END) || {significant} || 'e' || "
            f"{exponent}::text END")


def _pg_float(ref: str) -> str:
    value = f"{ref}::float8"
    text = f"{value}::text"
    high = f"trunc({value} / 4294967296)"
    return (f"CASE WHEN abs({value}) >= 2::float8 ^ 53 AND abs({value}) < 2::float8 ^ 90 "
            f"THEN ({high}::int8::numeric * 4294967296 + ({value} - {high} * 4294967296)::int8)"
            f"::text WHEN {text} !~ '^-?[0-9]' THEN NULL ELSE {_pg_float_digits(text)} END")


def _pg_date(ref: str, text: str) -> str:
    """A date's or time stamp's ``text``; ``-infinity`` outside the years 1 to 9999."""
    return (f"CASE WHEN {ref} IS NULL THEN NULL WHEN isfinite({ref})"
            f" AND {ref} >= '0001-01-01' AND {ref} < '10000-01-01' THEN {text}"
            " ELSE '-infinity' END")


class PgConnection:
    def __init__(self, dsn: str, where: str) -> None:
        self._where = where
        if "connect_timeout" not in conninfo_to_dict(dsn):
            dsn = make_conninfo(dsn, connect_timeout=10)
        with self._errors():
            self._conn = psycopg.connect(
                dsn, autocommit=True, application_name="dblog-verify",
                options=libpq_options() + " -c default_transaction_read_only=on")

    @contextmanager
    def _errors(self) -> Iterator[None]:
        try:
            yield
        except psycopg.OperationalError as exc:
            raise SourceUnavailable(f"{self._where} is unreachable: {exc}") from None
        except psycopg.Error as exc:
            raise VerifyFailed(f"{self._where} refused a query: {exc}") from None

    def query(self, sql: str, params: Sequence[object]) -> list[tuple[Any, ...]]:
        with self._errors():
            return self._conn.execute(sql.encode(), list(params)).fetchall()

    def close(self) -> None:
        self._conn.close()


class PgVerifySql:
    same_kind_as_text = True  # PostgreSQL → PostgreSQL compares c::text, any family
    case_insensitive_names = False
    step_bind = "CAST(%s AS int8)"

    connect = PgConnection
    quote = staticmethod(ident)

    def describe(self, query: Query, table: str, role: str) -> TableDescription | None:
        schema, _, name = table.partition(".")
        found = query(PG_TABLE_SQL, [schema, name])
        if not found:
            return None
        oid = found[0][0]
        collate, provider, icu = query(PG_DATABASE_SQL, [])[0]
        default = f"icu:{icu}" if provider == "i" else str(collate)
        columns = []
        for attname, typname, cast, category, collation, type_oid, expression in query(
                PG_COLUMNS_SQL, [oid]):
            effective = None if collation is None else (
                default if collation == "default" else str(collation))
            columns.append(Column(attname, typname, pg_family(typname, category, role),
                                  cast=cast,
                                  collation="C" if effective == "POSIX" else effective,
                                  native=int(type_oid),
                                  generated=None if expression is None else str(expression)))
        key = tuple(str(row[0]) for row in query(PG_KEY_SQL, [oid]))
        return TableDescription(POSTGRESQL, table, tuple(columns), key)

    def value_sql(self, column: Column, family: Family, *, cross: bool, ref: str) -> str:
        if not cross:
            return f"{ref}::text"
        if family is Family.NUMBER:
            if column.type == "numeric":
                return (f"CASE WHEN {ref}::text IN ('NaN', 'Infinity', '-Infinity') THEN NULL"
                        f" ELSE trim_scale({ref})::text END")
            return f"{ref}::int::text" if column.type == "bool" else f"{ref}::text"
        if family is Family.FLOAT:
            return _pg_float(ref)
        if family is Family.BINARY:
            return f"encode({ref}, 'hex')"
        if family is Family.DATE:
            return _pg_date(ref, f"{ref}::text")
        if family is Family.DATETIME:
            return _pg_date(ref, f"to_char({ref}, 'YYYY-MM-DD HH24:MI:SS.US')")
        if family is Family.TIME:
            return f"(extract(epoch FROM {ref}) * 1000000)::int8::text"
        # the type's output, as landed: ::text drops bpchar's padding, adds inet's /32
        return f"CASE WHEN {ref} IS NULL THEN NULL ELSE concat({ref}) END"

    def fragment_sql(self, column: Column, ref: str) -> str:
        # the type's text output, as the worker's chunk SELECT reads it (with the same
        # session settings): concat, unlike ::text, keeps a char(n)'s padding
        return f"CASE WHEN {ref} IS NULL THEN NULL ELSE concat({ref}) END"

    def fragment_of(self, query: Query, column: Column) -> Callable[[Any], str | None]:
        assert isinstance(column.native, int)
        oid = column.native
        encoder = encoder_for(oid, types_of(query, [oid], BUILTIN_TYPES))
        return lambda cell: None if cell is None else encoder(str(cell))

    def row_sql(self, values: Sequence[str], free: Sequence[bool]) -> str:
        items = []
        for value, is_free in zip(values, free, strict=True):
            text = f"length({value})::text || ':' || {value}" if is_free else value
            items.append(f"coalesce({text}, 'N')")
        return " || ',' || ".join(items)

    def bind_sql(self, column: Column, family: Family, *, cross: bool) -> str:
        if cross and family is Family.BINARY:
            return "decode(%s, 'hex')"
        return f"CAST(%s AS {sql_text(column.cast)})"

    def key_sql(self, column: Column, *, ref: str) -> str:
        return f'{ref} COLLATE "C"'

    def md5(self, row: str) -> str:
        return f"md5({row})"

    def checksum(self, row: str) -> str:
        return f"('x' || substr({self.md5(row)}, 1, 15))::bit(60)::int8"

    def compare_keys(self, order: Sequence[str], binds: Sequence[str], operator: str) -> str:
        return f"({', '.join(order)}) {operator} ({', '.join(binds)})"

    def bound_params(self, operator: str, bound: Sequence[object]) -> list[object]:
        return list(bound)

    def lookup_where(self, order: Sequence[str], binds: Sequence[str], count: int) -> str:
        one = "(" + ", ".join(binds) + ")"
        return f"({', '.join(order)}) IN ({', '.join([one] * count)})"

    def key_param(self, column: Column, family: Family, *, cross: bool) -> KeyParam:
        if not cross:
            return str
        if family is Family.FLOAT:
            return lambda text: repr(float_of(text, cross=True))
        if family is Family.TIME:
            return lambda text: time_text(int(text))
        return str

    def key_json(self, column: Column, family: Family, *, cross: bool) -> KeyParam:
        if family is Family.FLOAT:
            return lambda text: float_of(text, cross=cross)
        if family is Family.TIME and cross:
            return lambda text: time_text(int(text))
        if column.type in INTEGERS:
            return int
        if cross and family is Family.BINARY:
            return lambda text: "\\x" + text
        return str

    def cross_key_ok(self, column: Column) -> bool:
        return column.family is not Family.TEXT or column.type in _CROSS_TEXT_KEYS



SQL = PgVerifySql()
