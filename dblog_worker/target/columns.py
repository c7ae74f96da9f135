"""Source columns as the merge sees them: a target type, and how to read the JSON.

A row image in the landing zone is canonical JSON (docs/landing-format.md). The
merge extracts each column's JSON value as text in the target database
(``json_to_record`` / ``JSON_TABLE``) and converts that text to the target
column's type there. Most values convert by a plain cast of the text; the
:class:`Encoding` says when they need more: base64 for binary values, a JSON
array for PostgreSQL arrays, ``true``/``false`` for booleans, a ``+00`` offset on
PostgreSQL ``timestamptz`` text.

:func:`target_type` is the type a missing target column is created with, for
each (source kind, target kind). A source type a target cannot hold raises
:class:`~dblog_worker.errors.TargetError` naming the table and column.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from dblog_worker.errors import TargetError
from dblog_worker.mysql.options import MYSQL
from dblog_worker.pg.options import POSTGRESQL
from dblog_worker.values import BUILTIN_TYPES

__all__ = ["Encoding", "SourceColumn", "columns_of", "target_type"]


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
    kind: str  # the source kind: POSTGRESQL or MYSQL
    type: str  # PostgreSQL typname, or the MySQL kind ("integer", "decimal", ...)
    encoding: Encoding
    unsigned: bool = False
    scale: int = 0
    fsp: int = 0
    length: int = 0
    members: tuple[str, ...] = ()
    element: str = ""  # PostgreSQL arrays: the element's typname

    def describe(self) -> str:
        return f"{self.element}[]" if self.element else self.type


_PG_NAMES = {t.name: t for t in BUILTIN_TYPES.values()}


def _pg_column(entry: Mapping[str, object]) -> SourceColumn:
    name = str(entry["name"])
    type_name = str(entry["type"])
    oid = entry.get("type_oid")
    builtin = BUILTIN_TYPES.get(oid) if isinstance(oid, int) else None
    if builtin is not None and builtin.category == "A":
        element = BUILTIN_TYPES.get(builtin.element_oid)
        element_name = element.name if element is not None else type_name.lstrip("_")
        return SourceColumn(name, POSTGRESQL, type_name, Encoding.ARRAY, element=element_name)
    encoding = {
        "bytea": Encoding.BASE64,
        "bool": Encoding.BOOL,
        "timestamptz": Encoding.TIMESTAMPTZ,
    }.get(type_name, Encoding.TEXT)
    return SourceColumn(name, POSTGRESQL, type_name, encoding)


def _my_column(entry: Mapping[str, object]) -> SourceColumn:
    kind = str(entry["type"])
    members = entry.get("members", [])
    return SourceColumn(
        name=str(entry["name"]),
        kind=MYSQL,
        type=kind,
        encoding=Encoding.BASE64 if kind == "binary" else Encoding.TEXT,
        unsigned=bool(entry.get("unsigned", False)),
        scale=int(str(entry.get("scale", 0))),
        fsp=int(str(entry.get("fsp", 0))),
        length=int(str(entry.get("length", 0))),
        members=tuple(str(m) for m in members) if isinstance(members, list) else (),
    )


def columns_of(source_kind: str, schema: Mapping[str, object]) -> list[SourceColumn]:
    """The columns of one schema document, in table order."""
    entries = schema.get("columns")
    if not isinstance(entries, list):
        raise ValueError("a schema document has a list of columns")
    parse = _pg_column if source_kind == POSTGRESQL else _my_column
    return [parse(entry) for entry in entries if isinstance(entry, dict)]


def key_of(schema: Mapping[str, object]) -> list[str]:
    key = schema.get("key")
    if not isinstance(key, list) or not key:
        raise ValueError("a schema document names its key columns")
    return [str(k) for k in key]


# --------------------------------------------------------------------------- types


def target_type(table: str, column: SourceColumn, target_kind: str, key_columns: int = 0) -> str:
    """The DDL type a target column is created with, for ``column`` of source ``table``.

    ``key_columns``: how many columns the primary key has, when ``column`` is one of
    them (0 otherwise). On MySQL targets the key columns share InnoDB's 3072-byte limit
    on an index entry equally, so a text or binary key column is a bounded VARCHAR or
    VARBINARY.
    """
    key_bytes = _KEY_BYTES // key_columns if key_columns else 0
    if column.kind == POSTGRESQL:
        found = _pg_to_pg(column) if target_kind == POSTGRESQL else _pg_to_my(column, key_bytes)
    else:
        found = _my_to_pg(column) if target_kind == POSTGRESQL else _my_to_my(column, key_bytes)
    if found is None:
        target = "PostgreSQL" if target_kind == POSTGRESQL else "MySQL/MariaDB"
        raise TargetError(
            f"{table}: column {column.name!r} has type {column.describe()}, which a {target}"
            " target cannot hold; create the target table yourself with a type that can"
            " (the merge casts the value's text to it), or leave the table out of the merge"
        )
    return found


_PG_SAME_BUT = {"bit": "varbit"}  # bit without a length is bit(1)
_PG_UNSUPPORTED = {"int2vector", "oidvector", "tid", "xid", "cid", "regproc", "pg_node_tree"}


def _pg_to_pg(column: SourceColumn) -> str | None:
    if column.element:
        if column.element not in _PG_NAMES or column.element in ("bytea", "bool"):
            return None
        return _quote_pg_type(_PG_SAME_BUT.get(column.element, column.element)) + "[]"
    if column.type not in _PG_NAMES or column.type in _PG_UNSUPPORTED:
        return None
    return _quote_pg_type(_PG_SAME_BUT.get(column.type, column.type))


def _quote_pg_type(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


_PG_TO_MY = {
    "int2": "SMALLINT", "int4": "INT", "int8": "BIGINT", "oid": "INT UNSIGNED",
    "numeric": "DECIMAL(65,30)", "float4": "FLOAT", "float8": "DOUBLE",
    "bool": "BOOLEAN", "bytea": "LONGBLOB", "date": "DATE",
    "timestamp": "DATETIME(6)", "timestamptz": "DATETIME(6)", "time": "TIME(6)",
    "json": "LONGTEXT", "jsonb": "LONGTEXT", "uuid": "CHAR(36)",
    "text": "LONGTEXT", "varchar": "LONGTEXT", "bpchar": "LONGTEXT", "name": "VARCHAR(64)",
}
_KEY_BYTES = 3072  # InnoDB's limit on an index entry (utf8mb4: 4 bytes a character)


def _key_text(key_bytes: int) -> str:
    return f"VARCHAR({key_bytes // 4})"


def _key_binary(key_bytes: int) -> str:
    return f"VARBINARY({key_bytes})"


def _pg_to_my(column: SourceColumn, key_bytes: int) -> str | None:
    if column.element:
        return None
    found = _PG_TO_MY.get(column.type)
    if key_bytes and found == "LONGTEXT":
        return _key_text(key_bytes)
    if key_bytes and found == "LONGBLOB":
        return _key_binary(key_bytes)
    return found


def _my_to_pg(column: SourceColumn) -> str | None:
    kind = column.type
    if kind == "integer":
        return "numeric(20,0)" if column.unsigned else "bigint"
    if kind == "bit":
        return "numeric(20,0)"
    if kind == "decimal":
        return "numeric"
    if kind in ("datetime", "timestamp"):  # no precision: fsp may grow at the source
        return "timestamp" if kind == "datetime" else "timestamptz"
    return _MY_TO_PG.get(kind)


_MY_TO_PG = {
    "float": "real", "double": "double precision", "text": "text", "enum": "text",
    "set": "text", "json": "json", "binary": "bytea", "date": "date", "time": "interval",
    "year": "smallint",
}


def _my_to_my(column: SourceColumn, key_bytes: int) -> str | None:
    kind = column.type
    unsigned = " UNSIGNED" if column.unsigned else ""
    if kind == "integer":
        return "BIGINT" + unsigned
    if kind == "bit":
        return "BIGINT UNSIGNED"
    if kind == "decimal":
        return f"DECIMAL(65,{column.scale})" + unsigned
    if kind in ("float", "double"):
        return kind.upper() + unsigned
    if kind == "text":
        return _key_text(key_bytes) if key_bytes else "LONGTEXT"
    if kind == "json":
        return "LONGTEXT"
    if kind == "binary":
        if column.length:
            return f"BINARY({column.length})"
        return _key_binary(key_bytes) if key_bytes else "LONGBLOB"
    if kind in ("datetime", "timestamp", "time"):
        return f"{kind.upper()}({column.fsp})"
    if kind in ("date", "year"):
        return kind.upper()
    if kind in ("enum", "set"):
        members = ",".join(_my_string(m) for m in column.members)
        return f"{kind.upper()}({members})"
    return None


def _my_string(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "''") + "'"


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
