r"""The SQL of ``dblog verify``: normalized values, row checksums, key ranges.

Pure functions, tested on exact text.  Identifiers come from the catalogs and are
always quoted here; values are always bound parameters.  Every statement is run with
parameters, so both drivers read ``%`` as a placeholder: names (:func:`quote`) and type
names have it doubled, as do the ``DATE_FORMAT`` patterns.  :mod:`dblog_worker.verify`
runs these queries; ``docs/verify.md`` is the user's view.

Normalized values
=================

Each column value is turned, in its own database, into a string that is the same in
both databases for the same value.  PostgreSQL → PostgreSQL compares ``c::text``
(both sessions use :data:`dblog_worker.values.PG_SESSION_SETTINGS`); every other pair
compares by the :class:`Family` of the source column, which the target column must
share:

========  =========================================  =========================================
family    PostgreSQL                                 MySQL / MariaDB
========  =========================================  =========================================
NUMBER    integers ``c::text``; numeric              integers, YEAR, BIT ``c + 0`` as text;
          ``trim_scale(c)::text``; bool ``1``/``0``  DECIMAL with trailing fraction zeros
                                                     (and the dot) trimmed
FLOAT     as float8: shortest digits, see below      as DOUBLE: the same
TEXT      ``c::text`` (bpchar keeps its padding)     ``CAST(c AS CHAR)`` (utf8mb4)
BINARY    ``encode(c, 'hex')``                       ``LOWER(HEX(c))``
DATE      ``c::text`` (ISO)                          ``%Y-%m-%d``; zero dates are NULL
DATETIME  ``YYYY-MM-DD HH24:MI:SS.US`` in UTC        ``%Y-%m-%d %H:%i:%s.%f`` in UTC; zero
                                                     dates are NULL
TIME      microseconds, ``extract(epoch ...)``       microseconds, ``TIME_TO_SEC``
========  =========================================  =========================================

FLOAT: both databases print the shortest decimal digits that read back as the same
double, in different layouts (``1e+20`` / ``1e20``, ``1.2345e-05`` /
``0.000012345``).  Both are rewritten to ``[-]<digits>e<exponent>`` meaning
``0.<digits> * 10^exponent`` (``0.1`` → ``1e0``, ``-250`` → ``-25e3``, zero and minus
zero → ``0``).  PostgreSQL 15 prints some integral doubles between 2^54 and 2^83 with
more digits than needed (``1e23`` as ``9.999999999999999e+22``), so every double of
magnitude 2^53 to 2^90 is written instead as its exact integer, computed from two
exact halves.  MySQL/MariaDB → MySQL/MariaDB compares ``CAST(CAST(c AS DOUBLE) AS
CHAR)``.

Rows and checksums
==================

A row is its normalized values in source column order, joined by ``,``: a value of a
free-text family (TEXT, and every value of PostgreSQL → PostgreSQL) as
``<length in characters>:<value>``, any other value as itself, NULL as ``N``.  Its
checksum is the first 15 hex digits of its md5 (UTF-8) as an integer; a key range is
summarized by its row count and the sum of its rows' checksums.

Key ranges
==========

Ranges are ``(lower, upper]`` in key order, either end open; a key bound is the
normalized key values, bound through :attr:`SideSql.binds`.  PostgreSQL compares row
values, ``(k1, k2) > (b1, b2)``; MySQL spells that out so its index is used, ``k1 > b1
OR (k1 = b1 AND k2 > b2)``.  In ``binary`` key order, text key columns compare by code
point: ``c COLLATE "C"`` and ``CAST(CONVERT(c USING utf8mb4) AS BINARY)`` (the bytes of
UTF-8 sort like the code points; no padding rule applies).
"""

from __future__ import annotations

import base64
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from enum import StrEnum
from typing import Any

from dblog_worker.errors import RequestRejected, TerminalError
from dblog_worker.mysql.catalog import KEY_COLUMNS_SQL
from dblog_worker.mysql.catalog import ident as my_quote
from dblog_worker.mysql.options import MYSQL
from dblog_worker.mysql.values import Kind, MyColumn, column_from_information_schema
from dblog_worker.pg.options import POSTGRESQL
from dblog_worker.pg.queries import ident as pg_quote
from dblog_worker.pg.queries import sql_text

__all__ = [
    "MY_COLUMNS_SQL",
    "PG_COLUMNS_SQL",
    "PG_DATABASE_SQL",
    "PG_KEY_SQL",
    "PG_TABLE_SQL",
    "Column",
    "Family",
    "KeyParam",
    "Query",
    "SideSql",
    "TableDescription",
    "TablePlan",
    "VerifyFailed",
    "bind_sql",
    "boundary_sql",
    "condition_params",
    "describe",
    "float_of",
    "key_json",
    "key_param",
    "key_sql",
    "lookup_params",
    "lookup_sql",
    "my_family",
    "pg_family",
    "plan",
    "quote",
    "row_sql",
    "rows_sql",
    "split_sql",
    "summary_params",
    "summary_sql",
    "time_text",
    "value_sql",
]


class Family(StrEnum):
    """What a column's values are compared as; source and target columns must share it."""

    NUMBER = "number"
    FLOAT = "float"
    TEXT = "text"
    BINARY = "binary"
    DATE = "date"
    DATETIME = "datetime"
    TIME = "time"
    OTHER = "other"  # PostgreSQL arrays and composites: comparable with PostgreSQL only


FREE_TEXT = frozenset({Family.TEXT, Family.OTHER})


@dataclass(frozen=True, slots=True)
class Column:
    """A column of a compared table, as its database's catalog describes it."""

    name: str
    type: str  # PostgreSQL: typname (of a domain's base type); MySQL: DATA_TYPE
    family: Family
    cast: str = ""  # PostgreSQL: format_type(atttypid, NULL), to bind key values
    collation: str | None = None  # effective collation of a collatable column
    my: MyColumn | None = None  # MySQL: kind, signedness, scale, members


_PG_FAMILIES = {
    "int2": Family.NUMBER, "int4": Family.NUMBER, "int8": Family.NUMBER,
    "oid": Family.NUMBER, "numeric": Family.NUMBER, "bool": Family.NUMBER,
    "float4": Family.FLOAT, "float8": Family.FLOAT,
    "bytea": Family.BINARY,
    "date": Family.DATE,
    "timestamp": Family.DATETIME, "timestamptz": Family.DATETIME,
    "time": Family.TIME, "interval": Family.TIME,
}
PG_INTEGERS = frozenset({"int2", "int4", "int8", "oid"})

_MY_FAMILIES = {
    Kind.INTEGER: Family.NUMBER, Kind.DECIMAL: Family.NUMBER, Kind.YEAR: Family.NUMBER,
    Kind.BIT: Family.NUMBER, Kind.FLOAT: Family.FLOAT, Kind.DOUBLE: Family.FLOAT,
    Kind.TEXT: Family.TEXT, Kind.ENUM: Family.TEXT, Kind.SET: Family.TEXT,
    Kind.JSON: Family.TEXT, Kind.BINARY: Family.BINARY, Kind.DATE: Family.DATE,
    Kind.DATETIME: Family.DATETIME, Kind.TIMESTAMP: Family.DATETIME, Kind.TIME: Family.TIME,
}


def pg_family(typname: str, category: str) -> Family:
    """The family of a PostgreSQL type (``typcategory`` 'A' array, 'C' composite)."""
    if typname in _PG_FAMILIES:
        return _PG_FAMILIES[typname]
    return Family.OTHER if category in ("A", "C") else Family.TEXT


def my_family(column: MyColumn) -> Family:
    return _MY_FAMILIES[column.kind]


def quote(dialect: str, name: str) -> str:
    """A name in a statement run with parameters: quoted, ``%`` doubled."""
    return my_quote(name) if dialect == MYSQL else pg_quote(name)


# --- catalog queries --------------------------------------------------------------------

PG_TABLE_SQL = (
    "SELECT c.oid FROM pg_catalog.pg_class c "
    "JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace "
    "WHERE n.nspname = %s AND c.relname = %s AND c.relkind IN ('r', 'p')"
)
"""The oid of a table; parameters ``(schema, table)``."""

PG_COLUMNS_SQL = (
    "SELECT a.attname, coalesce(b.typname, t.typname), format_type(a.atttypid, NULL), "
    "coalesce(b.typcategory, t.typcategory), l.collname "
    "FROM pg_catalog.pg_attribute a "
    "JOIN pg_catalog.pg_type t ON t.oid = a.atttypid "
    "LEFT JOIN pg_catalog.pg_type b ON b.oid = t.typbasetype AND t.typtype = 'd' "
    "LEFT JOIN pg_catalog.pg_collation l ON l.oid = a.attcollation "
    "WHERE a.attrelid = CAST(%s AS oid) AND a.attnum > 0 AND NOT a.attisdropped "
    "ORDER BY a.attnum"
)
"""Name, type name, cast type, category and collation of each column; parameter the oid."""

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

MY_COLUMNS_SQL = (
    "SELECT COLUMN_NAME, DATA_TYPE, COLUMN_TYPE, NUMERIC_PRECISION, NUMERIC_SCALE,"
    " DATETIME_PRECISION, CHARACTER_SET_NAME, CHARACTER_OCTET_LENGTH, COLLATION_NAME"
    " FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s"
    " ORDER BY ORDINAL_POSITION"
)
"""``mysql.values.COLUMNS_SQL`` plus each column's collation."""


# --- normalized values ------------------------------------------------------------------


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
            f"::text WHEN {text} !~ '^-?[0-9]' THEN {text} ELSE {_pg_float_digits(text)} END")


def _my_float_digits(text: str) -> str:
    mantissa = f"TRIM(LEADING '-' FROM SUBSTRING_INDEX({text}, 'e', 1))"
    digits = f"REPLACE({mantissa}, '.', '')"
    significant = f"TRIM(BOTH '0' FROM {digits})"
    exponent = (f"(IF(LOCATE('e', {text}) > 0, CAST(SUBSTRING_INDEX({text}, 'e', -1) AS SIGNED),"
                f" 0) + CHAR_LENGTH(SUBSTRING_INDEX({mantissa}, '.', 1))"
                f" - (CHAR_LENGTH({digits}) - CHAR_LENGTH(TRIM(LEADING '0' FROM {digits}))))")
    return (f"IF({significant} = '', '0', CONCAT(IF(LEFT({text}, 1) = '-', '-', ''), "
            f"{significant}, 'e', {exponent}))")


def _my_float(ref: str, cross: bool) -> str:
    value = f"CAST({ref} AS DOUBLE)"
    text = f"CAST({value} AS CHAR)"
    if not cross:
        return text
    high = f"TRUNCATE({value} / 4294967296, 0)"
    exact = (f"CAST(CAST(CAST({high} AS SIGNED) AS DECIMAL(65,0)) * 4294967296"
             f" + CAST({value} - {high} * 4294967296 AS SIGNED) AS CHAR)")
    return (f"IF(ABS({value}) >= POW(2, 53) AND ABS({value}) < POW(2, 90), {exact}, "
            f"{_my_float_digits(text)})")


def _my_not_a_date(ref: str) -> str:
    """Zero and invalid dates, which the landing zone has as null."""
    return f"YEAR({ref}) = 0 OR MONTH({ref}) = 0 OR DAYOFMONTH({ref}) = 0"


def value_sql(dialect: str, column: Column, family: Family, *, cross: bool, ref: str) -> str:
    """The normalized text of ``ref`` (the quoted column), NULL for NULL.

    ``cross``: the other database is of the other dialect.  PostgreSQL → PostgreSQL
    compares ``ref::text`` whatever the family.
    """
    if dialect == POSTGRESQL:
        return _pg_value(column, family, cross, ref)
    return _my_value(column, family, cross, ref)


def _pg_value(column: Column, family: Family, cross: bool, ref: str) -> str:
    if not cross:
        return f"{ref}::text"
    if family is Family.NUMBER:
        if column.type == "numeric":
            return f"trim_scale({ref})::text"
        return f"{ref}::int::text" if column.type == "bool" else f"{ref}::text"
    if family is Family.FLOAT:
        return _pg_float(ref)
    if family is Family.BINARY:
        return f"encode({ref}, 'hex')"
    if family is Family.DATETIME:
        return (f"CASE WHEN isfinite({ref}) THEN to_char({ref}, 'YYYY-MM-DD HH24:MI:SS.US') "
                f"ELSE {ref}::text END")
    if family is Family.TIME:
        return f"(extract(epoch FROM {ref}) * 1000000)::int8::text"
    if column.type == "bpchar":  # the landing zone keeps the padding; ::text drops it
        return f"CASE WHEN {ref} IS NULL THEN NULL ELSE concat({ref}) END"
    return f"{ref}::text"


def _my_value(column: Column, family: Family, cross: bool, ref: str) -> str:
    my = column.my
    if family is Family.NUMBER:
        if my is not None and my.kind is Kind.DECIMAL:
            text = f"CAST({ref} AS CHAR)"
            if my.scale == 0:
                return text
            return f"TRIM(TRAILING '.' FROM TRIM(TRAILING '0' FROM {text}))"
        return f"CAST({ref} + 0 AS CHAR)"
    if family is Family.FLOAT:
        return _my_float(ref, cross)
    if family is Family.BINARY:
        return f"LOWER(HEX({ref}))"
    if family is Family.DATE:
        return f"IF({_my_not_a_date(ref)}, NULL, DATE_FORMAT({ref}, '%%Y-%%m-%%d'))"
    if family is Family.DATETIME:
        return (f"IF({_my_not_a_date(ref)}, NULL, "
                f"DATE_FORMAT({ref}, '%%Y-%%m-%%d %%H:%%i:%%s.%%f'))")
    if family is Family.TIME:
        return f"CAST(CAST(TIME_TO_SEC({ref}) * 1000000 AS SIGNED) AS CHAR)"
    return f"CAST({ref} AS CHAR)"


def row_sql(dialect: str, values: Sequence[str], free: Sequence[bool]) -> str:
    """The row's text: each value as ``<length>:<value>`` (free text) or itself, NULL as
    ``N``, joined by ``,``."""
    items = []
    for value, is_free in zip(values, free, strict=True):
        if dialect == POSTGRESQL:
            text = f"length({value})::text || ':' || {value}" if is_free else value
            items.append(f"coalesce({text}, 'N')")
        else:
            text = f"CONCAT(CHAR_LENGTH({value}), ':', {value})" if is_free else value
            items.append(f"IFNULL({text}, 'N')")
    if dialect == POSTGRESQL:
        return " || ',' || ".join(items)
    return "CONCAT(" + ", ',', ".join(items) + ")" if len(items) > 1 else items[0]


def bind_sql(dialect: str, column: Column, family: Family, *, cross: bool) -> str:
    """A key value as a parameter, typed like the column: the parameter comes from
    :func:`key_param`."""
    if dialect == POSTGRESQL:
        if cross and family is Family.BINARY:
            return "decode(%s, 'hex')"
        return f"CAST(%s AS {sql_text(column.cast)})"
    if column.my is not None and column.my.kind is Kind.DECIMAL:
        return f"CAST(%s AS DECIMAL(65,{column.my.scale}))"
    return "%s"


def key_sql(dialect: str, column: Column, *, binary: bool, ref: str) -> str:
    """How a key column is ordered and compared: itself, or by code point (``binary``)."""
    if not binary or column.collation is None:
        return ref
    if dialect == POSTGRESQL:
        return f'{ref} COLLATE "C"'
    return f"CAST(CONVERT({ref} USING utf8mb4) AS BINARY)"  # UTF-8 bytes: code point order


# --- range queries ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SideSql:
    """One side's table and expressions: what the range queries are built from."""

    dialect: str
    table: str  # schema-qualified and quoted; queried as TABLE_ALIAS
    row: str  # the row's text (row_sql)
    keys: tuple[str, ...]  # the normalized key values, in key order
    order: tuple[str, ...]  # key columns as ordered and compared (key_sql)
    binds: tuple[str, ...]  # one key value as a parameter: "%s", "CAST(%s AS int8)", ...


TABLE_ALIAS = "t"


def _from(side: SideSql) -> str:
    return f"{side.table} AS {TABLE_ALIAS}"


def _md5(side: SideSql) -> str:
    return f"md5({side.row})" if side.dialect == POSTGRESQL else f"MD5({side.row})"


def _checksum(side: SideSql) -> str:
    """The first 15 hex digits of the row's md5, as an integer (below 2^60)."""
    if side.dialect == POSTGRESQL:
        return f"('x' || substr({_md5(side)}, 1, 15))::bit(60)::int8"
    return f"CAST(CONV(SUBSTRING({_md5(side)}, 1, 15), 16, 10) AS UNSIGNED)"


def _compare(side: SideSql, operator: str) -> str:
    """``(key) <operator> (bound)`` for ``>`` or ``<=``."""
    if side.dialect == POSTGRESQL or len(side.order) == 1:
        if len(side.order) == 1:
            return f"{side.order[0]} {operator} {side.binds[0]}"
        return f"({', '.join(side.order)}) {operator} ({', '.join(side.binds)})"
    strict = ">" if operator == ">" else "<"
    terms = []
    for i in range(len(side.order)):
        equal = [f"{side.order[j]} = {side.binds[j]}" for j in range(i)]
        terms.append("(" + " AND ".join([*equal, f"{side.order[i]} {strict} {side.binds[i]}"])
                     + ")")
    if operator == "<=":
        terms.append("(" + " AND ".join(f"{o} = {b}" for o, b in zip(side.order, side.binds,
                                                                     strict=True)) + ")")
    return "(" + " OR ".join(terms) + ")"


def _bound_params(side: SideSql, operator: str, bound: Sequence[object]) -> list[object]:
    """The parameters of :func:`_compare` for one bound (its key's bind parameters)."""
    if side.dialect == POSTGRESQL or len(bound) == 1:
        return list(bound)
    params = [v for i in range(len(bound)) for v in bound[: i + 1]]
    return [*params, *bound] if operator == "<=" else params


def _condition(side: SideSql, lower: bool, upper: bool) -> str:
    parts = ([_compare(side, ">")] if lower else []) + ([_compare(side, "<=")] if upper else [])
    return " WHERE " + " AND ".join(parts) if parts else ""


def condition_params(side: SideSql, lower: Sequence[object] | None,
                     upper: Sequence[object] | None) -> list[object]:
    """The parameters of a range ``(lower, upper]``, either end None for open."""
    params = _bound_params(side, ">", lower) if lower is not None else []
    return params + (_bound_params(side, "<=", upper) if upper is not None else [])


def summary_sql(side: SideSql, *, lower: bool, upper: bool, buckets: int) -> str:
    """Row count and checksum sum per bucket of a range, split at ``buckets - 1`` bounds:
    rows ``(bucket, count, sum)``, only buckets that have rows.  Parameters:
    :func:`summary_params`."""
    if buckets > 1:
        whens = " ".join(f"WHEN {_compare(side, '<=')} THEN {i}" for i in range(buckets - 1))
        bucket = f"CASE {whens} ELSE {buckets - 1} END"
    else:
        bucket = "0"
    return (f"SELECT b, count(*), sum(h) FROM (SELECT {bucket} AS b, {_checksum(side)} AS h "
            f"FROM {_from(side)}{_condition(side, lower, upper)}) AS s GROUP BY b")


def summary_params(side: SideSql, lower: Sequence[object] | None,
                   bounds: Sequence[Sequence[object]],
                   upper: Sequence[object] | None) -> list[object]:
    params = [p for bound in bounds for p in _bound_params(side, "<=", bound)]
    return params + condition_params(side, lower, upper)


def boundary_sql(side: SideSql, *, lower: bool) -> str:
    """The key ``offset + 1`` rows after ``lower``: parameters the lower bound's
    (:func:`condition_params`), then the offset."""
    return (f"SELECT {', '.join(side.keys)} FROM {_from(side)}{_condition(side, lower, False)} "
            f"ORDER BY {', '.join(side.order)} LIMIT 1 OFFSET %s")


def split_sql(side: SideSql, *, lower: bool, upper: bool) -> str:
    """Every ``step``-th key of a range, at most ``limit``: parameters the range's, then
    step and limit."""
    names = [quote(side.dialect, f"k{i}") for i in range(len(side.keys))]
    selected = ", ".join(f"{k} AS {n}" for k, n in zip(side.keys, names, strict=True))
    step = "CAST(%s AS int8)" if side.dialect == POSTGRESQL else "%s"
    return (f"SELECT {', '.join(names)} FROM (SELECT {selected}, row_number() OVER "
            f"(ORDER BY {', '.join(side.order)}) AS rn FROM {_from(side)}"
            f"{_condition(side, lower, upper)}) AS s WHERE mod(rn, {step}) = 0 "
            "ORDER BY rn LIMIT %s")


def rows_sql(side: SideSql, *, lower: bool, upper: bool) -> str:
    """The normalized key and the md5 of each row of a range, in key order."""
    return (f"SELECT {', '.join(side.keys)}, {_md5(side)} FROM {_from(side)}"
            f"{_condition(side, lower, upper)} ORDER BY {', '.join(side.order)}")


def lookup_sql(side: SideSql, count: int) -> str:
    """:func:`rows_sql` of ``count`` given keys: parameters :func:`lookup_params`."""
    if side.dialect == POSTGRESQL:
        one = "(" + ", ".join(side.binds) + ")"
        where = f"({', '.join(side.order)}) IN ({', '.join([one] * count)})"
    else:
        one = "(" + " AND ".join(f"{o} = {b}" for o, b in zip(side.order, side.binds,
                                                              strict=True)) + ")"
        where = " OR ".join([one] * count)
    return f"SELECT {', '.join(side.keys)}, {_md5(side)} FROM {_from(side)} WHERE {where}"


def lookup_params(keys: Sequence[Sequence[object]]) -> list[object]:
    return [p for key in keys for p in key]


# --- key values in Python ---------------------------------------------------------------

KeyParam = Callable[[str], object]
"""A normalized key value to the parameter :func:`bind_sql` binds."""

_FLOAT_DIGITS = re.compile(r"(-?)(\d+)e(-?\d+)")
_INTEGER = re.compile(r"-?\d+")


def float_of(text: str, *, cross: bool) -> float:
    """The double of a normalized FLOAT value (``cross``: the ``<digits>e<exponent>`` form)."""
    match = _FLOAT_DIGITS.fullmatch(text) if cross else None
    if match is not None:
        sign, digits, exponent = match.groups()
        return float(Decimal(f"{sign}0.{digits}E{exponent}"))
    return float(text)  # plain digits, an exact integer, NaN or Infinity


def time_text(micros: int) -> str:
    """A TIME/interval's microseconds as ``[-]HH:MM:SS.ffffff`` (hours may exceed 24)."""
    sign = "-" if micros < 0 else ""
    seconds, fraction = divmod(abs(micros), 1_000_000)
    minutes, second = divmod(seconds, 60)
    hours, minute = divmod(minutes, 60)
    return f"{sign}{hours:02d}:{minute:02d}:{second:02d}.{fraction:06d}"


def key_param(dialect: str, column: Column, family: Family, *, cross: bool) -> KeyParam:
    """How a normalized key value is bound on ``column``'s side (see :func:`bind_sql`)."""
    if dialect == POSTGRESQL:
        if not cross:
            return str
        if family is Family.FLOAT:
            return lambda text: repr(float_of(text, cross=True))
        if family is Family.TIME:
            return lambda text: time_text(int(text))
        return str
    my = column.my
    assert my is not None
    if my.kind in (Kind.INTEGER, Kind.YEAR, Kind.BIT):
        return int
    if family is Family.FLOAT:
        return lambda text: float_of(text, cross=cross)
    if family is Family.BINARY:
        return bytes.fromhex
    if family is Family.TIME:
        return lambda text: time_text(int(text))
    if my.kind is Kind.ENUM:  # compared and ordered by the member's index
        indexes = {member: i for i, member in enumerate(my.members, 1)}
        return lambda text: indexes.get(text, 0)
    if my.kind is Kind.SET:  # by the members' bit mask
        bits = {member: 1 << i for i, member in enumerate(my.members)}
        return lambda text: sum(bits.get(m, 0) for m in text.split(",")) if text else 0
    return str


def key_json(dialect: str, column: Column, family: Family, *, cross: bool) -> KeyParam:
    """A normalized key value of a *source* column as ``dblog dump --keys`` takes it."""
    if family is Family.FLOAT:
        return lambda text: float_of(text, cross=cross)
    if family is Family.TIME and (cross or dialect == MYSQL):
        return lambda text: time_text(int(text))
    if dialect == POSTGRESQL:
        if column.type in PG_INTEGERS:
            return int
        if cross and family is Family.BINARY:
            return lambda text: "\\x" + text
        return str
    my = column.my
    assert my is not None
    if my.kind in (Kind.INTEGER, Kind.YEAR, Kind.BIT):
        return int
    if family is Family.BINARY:
        return lambda text: base64.b64encode(bytes.fromhex(text)).decode("ascii")
    return str


# --- catalogs and plans -----------------------------------------------------------------


class VerifyFailed(TerminalError):
    """A table could not be compared (a column missing in the target, a query failed)."""


Query = Callable[[str, Sequence[object]], list[tuple[Any, ...]]]
"""Runs one statement with its parameters and returns its rows."""


def _text(cell: object) -> str:
    return cell.decode() if isinstance(cell, bytes) else str(cell)


@dataclass(frozen=True, slots=True)
class TableDescription:
    dialect: str
    name: str  # schema.table (MySQL: database.table)
    columns: tuple[Column, ...]
    key: tuple[str, ...]

    def column(self, name: str) -> Column | None:
        for column in self.columns:
            if column.name == name:
                return column
        if self.dialect == MYSQL:  # MySQL column names are case-insensitive
            for column in self.columns:
                if column.name.casefold() == name.casefold():
                    return column
        return None


def describe(dialect: str, query: Query, table: str, role: str) -> TableDescription | None:
    """A table's columns and primary key from its database's catalog; None if it is not
    there.  Raises RequestRejected for a column type verify cannot compare."""
    schema, _, name = table.partition(".")
    if dialect == POSTGRESQL:
        found = query(PG_TABLE_SQL, [schema, name])
        if not found:
            return None
        oid = found[0][0]
        collate, provider, icu = query(PG_DATABASE_SQL, [])[0]
        default = f"icu:{icu}" if provider == "i" else str(collate)
        columns = []
        for attname, typname, cast, category, collation in query(PG_COLUMNS_SQL, [oid]):
            effective = None if collation is None else (
                default if collation == "default" else str(collation))
            columns.append(Column(attname, typname, pg_family(typname, category), cast=cast,
                                  collation="C" if effective == "POSIX" else effective))
        key = tuple(str(row[0]) for row in query(PG_KEY_SQL, [oid]))
        return TableDescription(POSTGRESQL, table, tuple(columns), key)
    rows = query(MY_COLUMNS_SQL, [schema, name])
    if not rows:
        return None
    columns = []
    for row in rows:
        try:
            my = column_from_information_schema(row[:8])
        except ValueError as exc:
            raise RequestRejected(f"{role} table {table}: {exc}; verify cannot compare it"
                                  ) from None
        collation = None if row[8] is None else _text(row[8])
        columns.append(Column(my.name, _text(row[1]).lower(), my_family(my),
                              collation=collation, my=my))
    key = tuple(_text(row[0]) for row in query(KEY_COLUMNS_SQL, [schema, name]))
    return TableDescription(MYSQL, table, tuple(columns), key)


@dataclass(frozen=True, slots=True)
class TablePlan:
    """How one source table is compared with its target: queries and key conversions."""

    table: str
    target_table: str
    key_columns: tuple[str, ...]
    key_order: str  # "native", or "binary": text keys by code point on both sides
    source: SideSql
    target: SideSql
    source_params: tuple[KeyParam, ...]
    target_params: tuple[KeyParam, ...]
    report: tuple[KeyParam, ...]  # a normalized key value as `dblog dump --keys` takes it


_CROSS_KEY_FAMILIES = frozenset({Family.NUMBER, Family.FLOAT, Family.TEXT, Family.BINARY,
                                 Family.DATE, Family.DATETIME, Family.TIME})
_PG_CROSS_TEXT_KEYS = frozenset({"text", "varchar", "uuid"})


def _cross_key_ok(column: Column) -> bool:
    """Whether a key column orders alike in both kinds of database (text by code point)."""
    if column.family not in _CROSS_KEY_FAMILIES:
        return False
    if column.family is not Family.TEXT:
        return True
    if column.my is not None:
        return column.my.kind is Kind.TEXT
    return column.type in _PG_CROSS_TEXT_KEYS


def _pairs(source: TableDescription, target: TableDescription,
           cross: bool) -> list[tuple[Column, Column]]:
    pairs = []
    for column in source.columns:
        other = target.column(column.name)
        if other is None:
            raise VerifyFailed(f"column {column.name} of {source.name} is missing in target "
                               f"table {target.name}: every row differs")
        if cross and Family.OTHER in (column.family, other.family):
            raise RequestRejected(f"column {column.name} of {source.name}: type {column.type} "
                                  "cannot be compared across databases")
        if (cross or source.dialect == MYSQL) and column.family is not other.family:
            raise VerifyFailed(
                f"column {column.name}: source type {column.type} ({source.name}) and target "
                f"type {other.type} ({target.name}) hold different kinds of values")
        pairs.append((column, other))
    return pairs


def _ref(dialect: str, column: Column) -> str:
    """A column of the table, qualified by its alias: never taken for an output column of
    the same name (PostgreSQL resolves ``ORDER BY "id"`` to the select list's ``"id"::text``)."""
    return f"{TABLE_ALIAS}.{quote(dialect, column.name)}"


def _side(description: TableDescription, columns: Sequence[Column], families: Sequence[Family],
          free: Sequence[bool], keys: Sequence[int], *, cross: bool, binary: bool) -> SideSql:
    dialect = description.dialect
    schema, _, name = description.name.partition(".")
    table = f"{quote(dialect, schema)}.{quote(dialect, name)}"
    values = [value_sql(dialect, c, f, cross=cross, ref=_ref(dialect, c))
              for c, f in zip(columns, families, strict=True)]
    return SideSql(
        dialect=dialect, table=table, row=row_sql(dialect, values, free),
        keys=tuple(values[i] for i in keys),
        order=tuple(key_sql(dialect, columns[i], binary=binary, ref=_ref(dialect, columns[i]))
                    for i in keys),
        binds=tuple(bind_sql(dialect, columns[i], families[i], cross=cross) for i in keys),
    )


def plan(source: TableDescription, target: TableDescription) -> TablePlan:
    """The comparison of two described tables.

    Raises RequestRejected when the keys cannot be compared (no primary key, a different
    one, a key type whose order differs between the databases) and VerifyFailed when a
    source column has no comparable target column.
    """
    if not source.key:
        raise RequestRejected(f"source table {source.name} has no primary key")
    same_key = len(target.key) == len(source.key) and all(
        (column := target.column(k)) is not None and column.name == name
        for k, name in zip(source.key, target.key, strict=True))
    if not same_key:
        raise RequestRejected(
            f"the primary key of target table {target.name} ({', '.join(target.key) or 'none'})"
            f" is not the one of source table {source.name} ({', '.join(source.key)})")
    cross = source.dialect != target.dialect
    pairs = _pairs(source, target, cross)
    ours, theirs = [c for c, _ in pairs], [o for _, o in pairs]
    families = [c.family for c in ours]
    names = [c.name for c in ours]
    keys = [names.index(k) for k in source.key]
    if cross:
        for one in [c for i in keys for c in pairs[i]]:
            if not _cross_key_ok(one):
                raise RequestRejected(f"key column {one.name} ({one.type}) of {source.name}: "
                                      "verify cannot order this type alike in both databases")
    binary = any(ours[i].collation is not None
                 and (cross or ours[i].collation != theirs[i].collation) for i in keys)
    free = [(not cross and source.dialect == POSTGRESQL) or f in FREE_TEXT for f in families]
    return TablePlan(
        table=source.name, target_table=target.name, key_columns=source.key,
        key_order="binary" if binary else "native",
        source=_side(source, ours, families, free, keys, cross=cross, binary=binary),
        target=_side(target, theirs, families, free, keys, cross=cross, binary=binary),
        source_params=tuple(key_param(source.dialect, ours[i], families[i], cross=cross)
                            for i in keys),
        target_params=tuple(key_param(target.dialect, theirs[i], families[i], cross=cross)
                            for i in keys),
        report=tuple(key_json(source.dialect, ours[i], families[i], cross=cross) for i in keys),
    )
