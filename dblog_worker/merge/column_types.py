"""Source columns as the merge sees them: a target type, and how to read the JSON.

A row image in the landing zone is canonical JSON (docs/landing-format.md). The
merge extracts each column's JSON value as text in the target database
(``json_to_record`` / ``JSON_TABLE``) and converts that text to the target
column's type there. Most values convert by a plain cast of the text; the
:class:`Encoding` says when they need more: base64 for binary values, a JSON
array for PostgreSQL arrays, ``true``/``false`` for booleans, a ``+00`` offset on
PostgreSQL ``timestamptz`` text.

:func:`target_type` is the type a missing target column is created with. Each kind of
database says it in its ``types`` module (:class:`ColumnTypes`): how it reads its schema
documents, the type a column of its own kind gets, and what a column of another kind is
in neutral terms (:class:`Logical`) and becomes on it. A source type a target cannot hold
raises :class:`~dblog_worker.errors.TargetError` naming the table and column.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

from dblog_worker import kinds
from dblog_worker.errors import TargetError

__all__ = ["ColumnTypes", "Encoding", "GeneratedColumn", "Logical", "SourceColumn", "columns_of",
           "generated_of", "target_type"]


class Encoding(StrEnum):
    TEXT = "text"  # the JSON value's text casts to the type as it is
    BASE64 = "base64"  # binary: standard base64
    ARRAY = "array"  # PostgreSQL array: a JSON array of the elements' texts
    BOOL = "bool"  # true / false
    TIMESTAMPTZ = "timestamptz"  # PostgreSQL timestamptz text in UTC: '... +00'


@dataclass(frozen=True, slots=True)
class SourceColumn:
    """One column of a source table's schema version (``schema-<n>.json``)."""

    name: str
    kind: str  # the source's kind (a key of kinds.REGISTRY)
    type: str  # the type as that kind names it (PostgreSQL typname, MySQL "integer", ...)
    encoding: Encoding
    unsigned: bool = False
    scale: int = 0
    fsp: int = 0
    length: int = 0
    members: tuple[str, ...] = ()
    element: str = ""  # PostgreSQL arrays: the element's typname
    enum: str = ""  # PostgreSQL enums (and arrays of them): the type's schema.name
    subtype: str = ""  # MySQL spatial columns: the spatial type (point, polygon, ...)

    def describe(self) -> str:
        return f"{self.element}[]" if self.element else self.type


@dataclass(frozen=True, slots=True)
class GeneratedColumn:
    """A generated column of a source table, which row images do not carry: a target of the
    source's kind computes it with the same expression (``schema-<n>.json``'s
    ``generated``)."""

    name: str
    type: str  # as the source spells it, with its modifiers
    expression: str


def generated_of(schema: Mapping[str, object]) -> list[GeneratedColumn]:
    entries = schema.get("generated")
    if not isinstance(entries, list):
        return []
    return [GeneratedColumn(str(e["name"]), str(e["type"]), str(e["expression"]))
            for e in entries if isinstance(e, dict)]


@dataclass(frozen=True, slots=True)
class Logical:
    """A source column's type in neutral terms, for a target of another kind.

    ``name``: int16, int32, int64, uint32, uint64, decimal, float32, float64, bool,
    binary, text, json, uuid, inet (an IPv4 or IPv6 address), date, time (of day),
    duration, datetime, timestamptz, year.

    Values in neutral terms are the landing zone's texts. A source may have values a
    target type cannot hold, and each target says in its ``convert`` what it stores then
    (docs/merge.md, "Types"): decimal and float values ``NaN``, ``Infinity``,
    ``-Infinity``; date, datetime and timestamptz values outside the years 1 to 9999
    (``infinity``, ``-infinity``, BC) and not a date (MySQL's zero date ``0000-00-00``,
    a zero month or day, an impossible day).
    """

    name: str
    length: int = 0  # text: at most this many characters (0: unbounded)
    scale: int = -1  # decimal: digits after the point (-1: as the value has them)
    fsp: int = 6  # datetime, timestamptz, time: fraction digits


class ColumnTypes(Protocol):
    """How one kind of database reads and writes column types (its ``types.TYPES``)."""

    def source_column(self, entry: Mapping[str, object]) -> SourceColumn:
        """A column of one of this kind's schema documents."""

    def logical(self, column: SourceColumn) -> Logical | None:
        """A column of this kind in neutral terms; None if it has no neutral form."""

    def native_type(self, column: SourceColumn, key_bytes: int) -> str | None:
        """The type a column of this kind gets on a target of this kind."""

    def from_logical(self, logical: Logical, key_bytes: int) -> str | None:
        """The type a column of another kind gets on a target of this kind."""


KEY_BYTES = 3072  # InnoDB's limit on an index entry: what a key column gets, shared


TYPES: kinds.Part[ColumnTypes] = kinds.Part("types", "TYPES")


def types_of(kind: str) -> ColumnTypes:
    return kinds.kind(kind).part(TYPES)


def columns_of(source_kind: str, schema: Mapping[str, object]) -> list[SourceColumn]:
    """The columns of one schema document, in table order."""
    entries = schema.get("columns")
    if not isinstance(entries, list):
        raise ValueError("a schema document has a list of columns")
    parse = types_of(source_kind).source_column
    return [parse(entry) for entry in entries if isinstance(entry, dict)]


def key_of(schema: Mapping[str, object]) -> list[str]:
    key = schema.get("key")
    if not isinstance(key, list) or not key:
        raise ValueError("a schema document names its key columns")
    return [str(k) for k in key]


# --------------------------------------------------------------------------- types


def logical_of(column: SourceColumn) -> Logical | None:
    """``column``'s type in neutral terms (as its own kind sees it)."""
    return types_of(column.kind).logical(column)


def target_type(table: str, column: SourceColumn, target_kind: str, key_columns: int = 0) -> str:
    """The DDL type a target column is created with, for ``column`` of source ``table``.

    ``key_columns``: how many columns the primary key has, when ``column`` is one of
    them (0 otherwise): the key columns share :data:`KEY_BYTES` equally (on MySQL targets
    a text or binary key column is a bounded VARCHAR or VARBINARY).
    """
    key_bytes = KEY_BYTES // key_columns if key_columns else 0
    target = types_of(target_kind)
    if column.kind == target_kind:
        found = target.native_type(column, key_bytes)
    else:
        logical = logical_of(column)
        found = None if logical is None else target.from_logical(logical, key_bytes)
    if found is None:
        raise TargetError(
            f"{table}: column {column.name!r} has type {column.describe()}, which a "
            f"{kinds.rules(target_kind).title} target cannot hold; create the target table "
            "yourself with a type that can (the merge casts the value's text to it), or "
            "leave the table out of the merge"
        )
    return found


def union_columns(versions: Sequence[Sequence[SourceColumn]]) -> list[SourceColumn]:
    """Every column of the given schema versions (oldest first): table order of the
    newest version, then columns only older versions have; a column's newest type wins."""
    newest: dict[str, SourceColumn] = {}
    for columns in versions:
        for column in columns:
            newest[column.name] = column
    order = [c.name for c in versions[-1]] if versions else []
    for columns in versions:
        order.extend(c.name for c in columns if c.name not in order)
    return [newest[name] for name in dict.fromkeys(order)]
