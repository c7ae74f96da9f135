r"""The SQL of ``dblog verify``: normalized values, row checksums, key ranges.

Pure functions, tested on exact text.  Identifiers come from the catalogs and are
always quoted; values are always bound parameters.  Every statement is run with
parameters, so the drivers read ``%`` as a placeholder: names and type names have it
doubled.  Each kind of database says its part in its ``verify_sql`` module
(:class:`VerifyDialect`: its catalog, how it normalizes a value, binds a key, compares
key tuples); :mod:`dblog_worker.verify` runs the queries; ``docs/verify.md`` is the
user's view.

Normalized values
=================

Each column value is turned, in its own database, into a string that is the same in
both databases for the same value.  A kind whose ``same_kind_as_text`` is set compares
``c::text`` between two databases of its own kind; every other pair compares by the
:class:`Family` of the source column, which the target column must share.

FLOAT: databases print the shortest decimal digits that read back as the same double, in
different layouts (``1e+20`` / ``1e20``, ``1.2345e-05`` / ``0.000012345``).  Both are
rewritten to ``[-]<digits>e<exponent>`` meaning ``0.<digits> * 10^exponent`` (``0.1`` →
``1e0``, ``-250`` → ``-25e3``, zero and minus zero → ``0``); every double of magnitude 2^53
to 2^90 is written instead as its exact integer, computed from two exact halves.

Rows and checksums
==================

A row is its normalized values in source column order, joined by ``,``: a value of a
free-text family (TEXT, and every value compared as text) as ``<length in
characters>:<value>``, any other value as itself, NULL as ``N``.  Its checksum is the
first 15 hex digits of its md5 (UTF-8) as an integer; a key range is summarized by its
row count and the sum of its rows' checksums.

Masked columns
==============

A column ``[source.columns]`` excludes is not compared (the target may still have it, from
before). A masked one is compared as the text the target holds: the hex HMAC, or the mask.
The source side then reads each row of a range with the column as the worker's codec reads
it (``fragment_sql``), and verify computes, in Python, its canonical JSON with that very
codec (``fragment_of``), the HMAC, and the row's checksum: the key never goes to a
database (pgcrypto's ``hmac()`` could compute it in PostgreSQL, but the key would then
travel to the source and could land in its statement logs), and MySQL has no HMAC.

Key ranges
==========

Ranges are ``(lower, upper]`` in key order, either end open; a key bound is the
normalized key values, bound through :attr:`SideSql.binds`.  In ``binary`` key order,
text key columns compare by code point.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from decimal import Decimal
from enum import StrEnum
from typing import Any, Protocol, cast

from dblog_worker import kinds
from dblog_worker.config_lake import LAKE_KINDS
from dblog_worker.errors import RequestRejected, TerminalError
from dblog_worker.masking import ColumnMask, TableMasks, generated_left_out

__all__ = [
    "Column",
    "Connection",
    "Family",
    "KeyParam",
    "Query",
    "SideSql",
    "TableDescription",
    "TablePlan",
    "VerifyDialect",
    "VerifyFailed",
    "describe",
    "float_of",
    "plan",
    "time_text",
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
    type: str  # the type as the catalog names it (of a domain's base type)
    family: Family
    cast: str = ""  # the type to cast a bound key value to, where the kind needs one
    collation: str | None = None  # effective collation of a collatable column
    native: object = None  # what else the kind knows of the column (MySQL: its MyColumn)
    generated: str | None = None  # PostgreSQL: a STORED generated column's expression


KeyParam = Callable[[str], object]
"""A normalized key value to the parameter the dialect's ``bind_sql`` binds."""

Query = Callable[[str, Sequence[object]], list[tuple[Any, ...]]]
"""Runs one statement with its parameters and returns its rows."""


class Connection(Protocol):
    """One read-only connection of verify; driver errors become dblog's errors."""

    def query(self, sql: str, params: Sequence[object]) -> list[tuple[Any, ...]]:
        """Run one statement; always with a parameter list, so ``%%`` means ``%``."""

    def close(self) -> None: ...


class VerifyDialect(Protocol):
    """What verify asks one kind of database (its ``verify_sql.SQL``)."""

    same_kind_as_text: bool  # two databases of this kind compare every value as text
    case_insensitive_names: bool  # column names match whatever their case
    step_bind: str  # the parameter of split_sql's step

    # A read-only connection: connect(dsn, where), where ``where`` names the database in
    # error messages (SourceUnavailable when unreachable, ConfigError when access is
    # refused, VerifyFailed when a query is refused).
    connect: Callable[[str, str], Connection]
    quote: Callable[[str], str]  # an identifier, quoted

    def describe(self, query: Query, table: str, role: str) -> TableDescription | None:
        """A table's columns and primary key from the catalog; None if it is not there.
        RequestRejected for a column type verify cannot compare."""

    def value_sql(self, column: Column, family: Family, *, cross: bool, ref: str) -> str:
        """The normalized text of ``ref`` (the quoted column), NULL for NULL; ``cross``:
        the other database is of another kind."""

    def row_sql(self, values: Sequence[str], free: Sequence[bool]) -> str: ...

    def fragment_sql(self, column: Column, ref: str) -> str:
        """A masked column as the worker's dump reads it (its codec's input)."""

    def fragment_of(self, query: Query, column: Column) -> Callable[[Any], str | None]:
        """What :meth:`fragment_sql` gives to the value's canonical JSON, by the worker's
        own codec (None for NULL, or a value the worker writes as ``null``)."""

    def bind_sql(self, column: Column, family: Family, *, cross: bool) -> str:
        """A key value as a parameter, typed like the column (bound by key_param's)."""

    def key_sql(self, column: Column, *, ref: str) -> str:
        """A collatable key column ordered and compared by code point."""

    def md5(self, row: str) -> str: ...

    def checksum(self, row: str) -> str:
        """The first 15 hex digits of the row's md5, as an integer (below 2^60)."""

    def compare_keys(self, order: Sequence[str], binds: Sequence[str], operator: str) -> str:
        """``(key) <operator> (bound)`` for a key of several columns, ``>`` or ``<=``."""

    def bound_params(self, operator: str, bound: Sequence[object]) -> list[object]:
        """The parameters of compare_keys for one bound of several columns."""

    def lookup_where(self, order: Sequence[str], binds: Sequence[str], count: int) -> str: ...

    def key_param(self, column: Column, family: Family, *, cross: bool) -> KeyParam: ...

    def key_json(self, column: Column, family: Family, *, cross: bool) -> KeyParam:
        """A normalized key value of a *source* column as ``dblog dump --keys`` takes it."""

    def cross_key_ok(self, column: Column) -> bool:
        """Whether a key column orders alike in databases of other kinds (text by code
        point), its family being one that can."""


LAKE = "lake"  # the dialect of lake targets' tables (Iceberg, Delta), whatever the format


def sql_of(kind: str) -> VerifyDialect:
    if kind == LAKE or kind in LAKE_KINDS:
        return cast(VerifyDialect, kinds.lake("verify_sql").SQL)
    return cast(VerifyDialect, kinds.load(kind, "verify_sql").SQL)


def describe(kind: str, query: Query, table: str, role: str) -> TableDescription | None:
    return sql_of(kind).describe(query, table, role)


def value_sql(kind: str, column: Column, family: Family, *, cross: bool, ref: str) -> str:
    return sql_of(kind).value_sql(column, family, cross=cross, ref=ref)


def row_sql(kind: str, values: Sequence[str], free: Sequence[bool]) -> str:
    return sql_of(kind).row_sql(values, free)


def bind_sql(kind: str, column: Column, family: Family, *, cross: bool) -> str:
    return sql_of(kind).bind_sql(column, family, cross=cross)


def key_sql(kind: str, column: Column, *, binary: bool, ref: str) -> str:
    """How a key column is ordered and compared: itself, or by code point (``binary``)."""
    if not binary or column.collation is None:
        return ref
    return sql_of(kind).key_sql(column, ref=ref)


def key_param(kind: str, column: Column, family: Family, *, cross: bool) -> KeyParam:
    return sql_of(kind).key_param(column, family, cross=cross)


def key_json(kind: str, column: Column, family: Family, *, cross: bool) -> KeyParam:
    return sql_of(kind).key_json(column, family, cross=cross)


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
    values: tuple[str, ...] = ()  # each column's normalized value (a masked one: its input)
    free: tuple[bool, ...] = ()  # whether each value is free text in the row's text


TABLE_ALIAS = "t"


# --- key values in Python ---------------------------------------------------------------

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


# --- catalogs and plans -----------------------------------------------------------------


class VerifyFailed(TerminalError):
    """A table could not be compared (a column missing in the target, a query failed)."""


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
        if sql_of(self.dialect).case_insensitive_names:
            for column in self.columns:
                if column.name.casefold() == name.casefold():
                    return column
        return None


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
    # the masked source columns: (position among the compared values, column, mask)
    masked: tuple[tuple[int, Column, ColumnMask], ...] = ()


_CROSS_KEY_FAMILIES = frozenset({Family.NUMBER, Family.FLOAT, Family.TEXT, Family.BINARY,
                                 Family.DATE, Family.DATETIME, Family.TIME})


def _cross_key_ok(dialect: str, column: Column) -> bool:
    """Whether a key column orders alike in both kinds of database (text by code point)."""
    return column.family in _CROSS_KEY_FAMILIES and sql_of(dialect).cross_key_ok(column)


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
        if (cross or not sql_of(source.dialect).same_kind_as_text) \
                and column.family is not other.family:
            raise VerifyFailed(
                f"column {column.name}: source type {column.type} ({source.name}) and target "
                f"type {other.type} ({target.name}) hold different kinds of values")
        pairs.append((column, other))
    return pairs


def _ref(dialect: str, column: Column) -> str:
    """A column of the table, qualified by its alias: never taken for an output column of
    the same name (PostgreSQL resolves ``ORDER BY "id"`` to the select list's ``"id"::text``)."""
    return f"{TABLE_ALIAS}.{sql_of(dialect).quote(column.name)}"


def _side(description: TableDescription, columns: Sequence[Column], families: Sequence[Family],
          free: Sequence[bool], keys: Sequence[int], *, cross: bool, binary: bool,
          masked: Sequence[int] = ()) -> SideSql:
    dialect = description.dialect
    schema, _, name = description.name.partition(".")
    table = f"{sql_of(dialect).quote(schema)}.{sql_of(dialect).quote(name)}"
    values = [sql_of(dialect).fragment_sql(c, _ref(dialect, c)) if i in masked
              else value_sql(dialect, c, f, cross=cross, ref=_ref(dialect, c))
              for i, (c, f) in enumerate(zip(columns, families, strict=True))]
    return SideSql(
        dialect=dialect, table=table, row=row_sql(dialect, values, free),
        keys=tuple(values[i] for i in keys),
        order=tuple(key_sql(dialect, columns[i], binary=binary, ref=_ref(dialect, columns[i]))
                    for i in keys),
        binds=tuple(bind_sql(dialect, columns[i], families[i], cross=cross) for i in keys),
        values=tuple(values), free=tuple(free),
    )


def _masked(source: TableDescription, masks: TableMasks) -> TableDescription:
    """The source as the target sees it: excluded columns gone (and the generated ones
    the schema document leaves out: :func:`generated_left_out`), masked ones text."""
    gone = generated_left_out([(c.name, c.generated) for c in source.columns
                               if c.generated is not None], masks)
    columns = tuple(replace(c, family=Family.TEXT) if c.name in masks.masks else c
                    for c in source.columns
                    if not masks.excluded(c.name) and c.name not in gone)
    return replace(source, columns=columns)


def plan(source: TableDescription, target: TableDescription,
         masks: TableMasks | None = None) -> TablePlan:
    """The comparison of two described tables; with ``masks`` (``[source.columns]``), the
    excluded source columns are left out and the masked ones compared as the text the
    target holds (see *Masked columns* above).

    Raises RequestRejected when the keys cannot be compared (no primary key, a different
    one, a key type whose order differs between the databases) and VerifyFailed when a
    source column has no comparable target column.
    """
    masks = masks or TableMasks()
    native = {c.name: c for c in source.columns}
    source = _masked(source, masks)
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
        for i in keys:
            for kind, one in ((source.dialect, ours[i]), (target.dialect, theirs[i])):
                if not _cross_key_ok(kind, one):
                    raise RequestRejected(f"key column {one.name} ({one.type}) of {source.name}: "
                                          "verify cannot order this type alike in both "
                                          "databases")
    binary = any(ours[i].collation is not None
                 and (cross or ours[i].collation != theirs[i].collation) for i in keys)
    as_text = not cross and sql_of(source.dialect).same_kind_as_text
    free = [as_text or f in FREE_TEXT for f in families]
    masked = tuple((i, native[c.name], masks.masks[c.name]) for i, c in enumerate(ours)
                   if c.name in masks.masks)
    return TablePlan(
        table=source.name, target_table=target.name, key_columns=source.key,
        key_order="binary" if binary else "native",
        source=_side(source, [native[c.name] for c in ours], families, free, keys, cross=cross,
                     binary=binary, masked=[i for i, _, _ in masked]),
        target=_side(target, theirs, families, free, keys, cross=cross, binary=binary),
        source_params=tuple(key_param(source.dialect, ours[i], families[i], cross=cross)
                            for i in keys),
        target_params=tuple(key_param(target.dialect, theirs[i], families[i], cross=cross)
                            for i in keys),
        report=tuple(key_json(source.dialect, ours[i], families[i], cross=cross) for i in keys),
        masked=masked,
    )
