"""Column descriptors of a MySQL/MariaDB table: the column model and where it comes from.

A :class:`MyColumn` is a column as far as its canonical encoding goes (see the module
docstring of :mod:`dblog_worker.mysql.values`).  It is read from ``information_schema``
(:data:`COLUMNS_SQL`, :func:`column_from_information_schema`) or from a table map event
of the binary log (:func:`columns_from_binlog`); :func:`select_list` is the dump SELECT
of the columns, :func:`schema_document` the schema the landing zone records.  A type the
worker does not read raises :class:`UnsupportedType`, which names the column and the type.

MariaDB's ``UUID``, ``INET6`` and ``INET4`` are in a table map what ``BINARY(16)`` and
``BINARY(4)`` are (a fixed binary string), and a spatial column's type (``POINT``, ...)
is not in mysql-replication's columns: :func:`columns_from_binlog` takes both from the
catalog's description of such columns.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from pymysqlreplication.constants import FIELD_TYPE

from dblog_worker.masking import TableMasks

__all__ = [
    "COLUMNS_SQL",
    "Kind",
    "MyColumn",
    "UnsupportedType",
    "column_from_binlog",
    "column_from_information_schema",
    "columns_from_binlog",
    "schema_document",
    "select_list",
]

COLUMNS_SQL = (
    "SELECT COLUMN_NAME, DATA_TYPE, COLUMN_TYPE, NUMERIC_PRECISION, NUMERIC_SCALE,"
    " DATETIME_PRECISION, CHARACTER_SET_NAME, CHARACTER_OCTET_LENGTH"
    " FROM information_schema.COLUMNS"
    " WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s"
    " ORDER BY ORDINAL_POSITION"
)
"""The columns of one table, in order; parameters ``(schema, table)``.  Each row goes to
:func:`column_from_information_schema`."""


class Kind(StrEnum):
    """What the encoding of a column depends on, besides its parameters."""

    INTEGER = "integer"
    DECIMAL = "decimal"
    FLOAT = "float"
    DOUBLE = "double"
    TEXT = "text"
    BINARY = "binary"
    DATE = "date"
    DATETIME = "datetime"
    TIMESTAMP = "timestamp"
    TIME = "time"
    YEAR = "year"
    ENUM = "enum"
    SET = "set"
    BIT = "bit"
    JSON = "json"
    GEOMETRY = "geometry"  # every spatial type: ``spatial`` says which
    UUID = "uuid"  # MariaDB 10.7+
    INET4 = "inet4"  # MariaDB 10.10+
    INET6 = "inet6"  # MariaDB 10.5+


class UnsupportedType(ValueError):
    """A column of a type the worker does not read: the table cannot be captured."""

    def __init__(self, column: str, type_name: str) -> None:
        super().__init__(f"column {column!r}: type {type_name!r} is not supported")
        self.column = column
        self.type_name = type_name


_NUMERIC_KINDS = frozenset({Kind.INTEGER, Kind.DECIMAL, Kind.FLOAT, Kind.DOUBLE})
_FSP_KINDS = frozenset({Kind.DATETIME, Kind.TIMESTAMP, Kind.TIME})


@dataclass(frozen=True, slots=True)
class MyColumn:
    """A column as far as its canonical encoding goes."""

    name: str
    kind: Kind
    unsigned: bool = False  # INTEGER, DECIMAL, FLOAT, DOUBLE
    scale: int = 0  # DECIMAL
    fsp: int = 0  # DATETIME, TIMESTAMP, TIME: fraction digits, 0..6
    length: int = 0  # BINARY(n): n; 0 for every other type
    members: tuple[str, ...] = ()  # ENUM, SET: in definition order
    spatial: str = ""  # GEOMETRY: the spatial type (geometry, point, linestring, ...)


_INFORMATION_SCHEMA_KINDS: Mapping[str, Kind] = {
    "tinyint": Kind.INTEGER,
    "smallint": Kind.INTEGER,
    "mediumint": Kind.INTEGER,
    "int": Kind.INTEGER,
    "bigint": Kind.INTEGER,
    "decimal": Kind.DECIMAL,
    "float": Kind.FLOAT,
    "double": Kind.DOUBLE,
    "char": Kind.TEXT,
    "varchar": Kind.TEXT,
    "tinytext": Kind.TEXT,
    "text": Kind.TEXT,
    "mediumtext": Kind.TEXT,
    "longtext": Kind.TEXT,
    "binary": Kind.BINARY,
    "varbinary": Kind.BINARY,
    "tinyblob": Kind.BINARY,
    "blob": Kind.BINARY,
    "mediumblob": Kind.BINARY,
    "longblob": Kind.BINARY,
    "date": Kind.DATE,
    "datetime": Kind.DATETIME,
    "timestamp": Kind.TIMESTAMP,
    "time": Kind.TIME,
    "year": Kind.YEAR,
    "enum": Kind.ENUM,
    "set": Kind.SET,
    "bit": Kind.BIT,
    "json": Kind.JSON,
    "uuid": Kind.UUID,
    "inet4": Kind.INET4,
    "inet6": Kind.INET6,
}
SPATIAL_TYPES = ("geometry", "point", "linestring", "polygon", "multipoint",
                 "multilinestring", "multipolygon", "geometrycollection")


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _number(value: object) -> int:
    return 0 if value is None else int(_text(value))


def column_from_information_schema(row: Sequence[object]) -> MyColumn:
    """The descriptor of a row of :data:`COLUMNS_SQL` (a tuple, with
    values as PyMySQL gives them with or without :data:`session.DUMP_CONV`)."""
    name, data_type, column_type = _text(row[0]), _text(row[1]).lower(), _text(row[2]).lower()
    scale, fsp, octet_length = row[4], row[5], row[7]
    if data_type in SPATIAL_TYPES:
        return MyColumn(name, Kind.GEOMETRY, spatial=data_type)
    kind = _INFORMATION_SCHEMA_KINDS.get(data_type)
    if kind is None or column_type.startswith("year(2)"):
        raise UnsupportedType(name, column_type)
    unsigned = kind in _NUMERIC_KINDS and " unsigned" in column_type
    if kind is Kind.DECIMAL:
        return MyColumn(name, kind, unsigned=unsigned, scale=_number(scale))
    if kind in _FSP_KINDS:
        return MyColumn(name, kind, fsp=_number(fsp))
    if kind is Kind.BINARY and data_type == "binary":
        return MyColumn(name, kind, length=_number(octet_length))
    if kind is Kind.ENUM or kind is Kind.SET:
        return MyColumn(name, kind, members=_parse_members(name, _text(row[2])))
    return MyColumn(name, kind, unsigned=unsigned)


_MEMBER = re.compile(r"'((?:[^'\\]|''|\\.)*)'(,|\)$)", re.DOTALL)
_MEMBER_ESCAPE = re.compile(r"''|\\(.)", re.DOTALL)
_MEMBER_ESCAPES = {"0": "\0", "n": "\n", "r": "\r", "t": "\t", "b": "\b", "Z": "\x1a"}


def _unescape_member(m: re.Match[str]) -> str:
    if m.group(0) == "''":
        return "'"
    char = m.group(1)
    return _MEMBER_ESCAPES.get(char, char)


def _parse_members(name: str, column_type: str) -> tuple[str, ...]:
    """The members of ``enum('a','b''c')`` / ``set(...)`` as ``information_schema`` shows them."""
    start = column_type.find("(") + 1
    members = []
    position = start
    while position < len(column_type):
        m = _MEMBER.match(column_type, position)
        if m is None or start == 0:
            raise ValueError(f"column {name!r}: cannot read the members of {column_type!r}")
        members.append(_MEMBER_ESCAPE.sub(_unescape_member, m.group(1)))
        position = m.end()
    return tuple(members)


_BINLOG_KINDS: Mapping[int, Kind] = {
    FIELD_TYPE.TINY: Kind.INTEGER,
    FIELD_TYPE.SHORT: Kind.INTEGER,
    FIELD_TYPE.INT24: Kind.INTEGER,
    FIELD_TYPE.LONG: Kind.INTEGER,
    FIELD_TYPE.LONGLONG: Kind.INTEGER,
    FIELD_TYPE.NEWDECIMAL: Kind.DECIMAL,
    FIELD_TYPE.FLOAT: Kind.FLOAT,
    FIELD_TYPE.DOUBLE: Kind.DOUBLE,
    FIELD_TYPE.VARCHAR: Kind.TEXT,
    FIELD_TYPE.VAR_STRING: Kind.TEXT,
    FIELD_TYPE.STRING: Kind.TEXT,
    FIELD_TYPE.BLOB: Kind.TEXT,
    FIELD_TYPE.DATE: Kind.DATE,
    FIELD_TYPE.DATETIME: Kind.DATETIME,
    FIELD_TYPE.DATETIME2: Kind.DATETIME,
    FIELD_TYPE.TIMESTAMP: Kind.TIMESTAMP,
    FIELD_TYPE.TIMESTAMP2: Kind.TIMESTAMP,
    FIELD_TYPE.TIME: Kind.TIME,
    FIELD_TYPE.TIME2: Kind.TIME,
    FIELD_TYPE.YEAR: Kind.YEAR,
    FIELD_TYPE.ENUM: Kind.ENUM,
    FIELD_TYPE.SET: Kind.SET,
    FIELD_TYPE.BIT: Kind.BIT,
    FIELD_TYPE.JSON: Kind.JSON,
}
_BINLOG_TYPE_NAMES: Mapping[int, str] = {
    value: name.lower()
    for name, value in vars(FIELD_TYPE).items()
    if name.isupper() and isinstance(value, int)
}


_FIXED_BINARY_KINDS = {16: (Kind.UUID, Kind.INET6), 4: (Kind.INET4,)}


def _ambiguous(column: Any) -> bool:
    """A fixed binary string of 16 or 4 bytes: a BINARY(n), or a UUID or INET type."""
    return (column.type == FIELD_TYPE.STRING and column.character_set_name == "binary"
            and getattr(column, "max_length", 0) in _FIXED_BINARY_KINDS)


def columns_from_binlog(columns: Sequence[Any],
                        catalog: Mapping[str, MyColumn] | None = None) -> list[MyColumn]:
    """The descriptors of a table map event's columns (``event.columns``); the spatial
    type of a GEOMETRY column, and whether a fixed binary column is a UUID or INET type,
    are the ``catalog``'s (its descriptors by column name: information_schema's now)."""
    described = []
    for column in columns:
        known = (catalog or {}).get(getattr(column, "name", "") or "")
        if column.type == FIELD_TYPE.GEOMETRY:
            spatial = known.spatial if known is not None and known.spatial else "geometry"
            described.append(column_from_binlog(column, spatial=spatial))
        elif known is not None and _ambiguous(column) and (
                known.kind in _FIXED_BINARY_KINDS[column.max_length]):
            described.append(column_from_binlog(column, kind=known.kind))
        else:
            described.append(column_from_binlog(column))
    return described


def column_from_binlog(column: Any, *, spatial: str = "geometry",
                       kind: Kind | None = None) -> MyColumn:
    """The descriptor of a ``pymysqlreplication.column.Column`` of a table map event (the
    server must log with ``binlog_row_metadata=FULL``); ``spatial``: a GEOMETRY column's
    type, ``kind``: a fixed binary column's kind where the catalog says it is a UUID or
    INET type (see :func:`columns_from_binlog`)."""
    name = getattr(column, "name", None)
    if not name or name.startswith("UNKNOWN_COL"):
        raise ValueError(
            "the binlog carries no column names: the server needs binlog_row_metadata=FULL"
        )
    if kind is not None:
        return MyColumn(name, kind)
    if column.type == FIELD_TYPE.GEOMETRY:
        return MyColumn(name, Kind.GEOMETRY, spatial=spatial)
    kind = _BINLOG_KINDS.get(column.type)
    if kind is None:
        raise UnsupportedType(name, _BINLOG_TYPE_NAMES.get(column.type, str(column.type)))
    if kind is Kind.TEXT and column.character_set_name == "binary":
        fixed = column.type == FIELD_TYPE.STRING
        return MyColumn(name, Kind.BINARY, length=column.max_length if fixed else 0)
    if kind in _NUMERIC_KINDS:
        scale = column.decimals if kind is Kind.DECIMAL else 0
        return MyColumn(name, kind, unsigned=bool(column.unsigned), scale=scale)
    if kind in _FSP_KINDS:
        return MyColumn(name, kind, fsp=getattr(column, "fsp", 0))
    if kind is Kind.ENUM or kind is Kind.SET:
        members = column.enum_values if kind is Kind.ENUM else column.set_values
        if members is None:
            raise ValueError(f"column {name!r}: the binlog carries no {kind} members")
        # mysql-replication puts the invalid value '' (index 0) before the ENUM's members.
        return MyColumn(name, kind, members=tuple(members[1:] if kind is Kind.ENUM else members))
    return MyColumn(name, kind)


_OUTSIDE_BMP = re.compile("[\U00010000-\U0010ffff]")


def _quote_identifier(name: str) -> str:
    """Quoted for a statement run with parameters (PyMySQL formats it with ``%``)."""
    return "`" + name.replace("`", "``").replace("%", "%%") + "`"


def select_list(columns: Sequence[MyColumn], qualifier: str = "") -> str:
    """The select list of a dump SELECT of ``columns``, in order: what the dump path
    encodes.  ``qualifier``, a table alias, prefixes each column (``t`` → ``t.`a```).
    For a statement run with parameters: ``%`` in a name is doubled."""
    prefix = _quote_identifier(qualifier) + "." if qualifier else ""
    parts = []
    for column in columns:
        quoted = prefix + _quote_identifier(column.name)
        if column.kind is Kind.FLOAT or column.kind is Kind.DOUBLE:
            parts.append(f"CAST({quoted} AS DOUBLE)")
        else:
            parts.append(quoted)
    return ", ".join(parts)


def schema_document(columns: Sequence[MyColumn], key_columns: Sequence[str],
                    masks: TableMasks | None = None) -> dict[str, object]:
    """The schema of one table version, as the landing zone records it: a masked column
    is text (``masked``: how, ``source_type``: its kind in the source); an excluded one is
    named under ``excluded`` only.

    The same for descriptors from either source: ENUM/SET members are written as
    ``information_schema`` shows them.
    """
    done = (masks or TableMasks()).schema()
    described: list[dict[str, object]] = []
    for column in columns:
        how = done.get(column.name)
        if how is not None:
            if how != "exclude":
                described.append({"name": column.name, "type": str(Kind.TEXT), "masked": how,
                                  "source_type": str(column.kind)})
            continue
        entry: dict[str, object] = {"name": column.name, "type": str(column.kind)}
        if column.kind in _NUMERIC_KINDS:
            entry["unsigned"] = column.unsigned
        if column.kind is Kind.DECIMAL:
            entry["scale"] = column.scale
        if column.kind in _FSP_KINDS:
            entry["fsp"] = column.fsp
        if column.length:
            entry["length"] = column.length
        if column.kind is Kind.ENUM or column.kind is Kind.SET:
            entry["members"] = [_OUTSIDE_BMP.sub("?", member) for member in column.members]
        if column.spatial:
            entry["spatial"] = column.spatial
        described.append(entry)
    document: dict[str, object] = {"columns": described, "key": list(key_columns)}
    excluded = [c.name for c in columns if done.get(c.name) == "exclude"]
    if excluded:
        document["excluded"] = excluded
    return document
