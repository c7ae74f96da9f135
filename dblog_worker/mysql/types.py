"""MySQL/MariaDB column types as the merge sees them (see
:mod:`dblog_worker.merge.column_types`).

A schema document names each column's kind (``integer``, ``decimal``, ...) with what
qualifies it (unsigned, scale, fraction digits, length, members). Key columns share
InnoDB's limit on an index entry, so a text or binary key column is a bounded VARCHAR or
VARBINARY.
"""

from __future__ import annotations

from collections.abc import Mapping

from dblog_worker.merge.column_types import Encoding, Logical, SourceColumn
from dblog_worker.mysql.options import MYSQL

_FROM_LOGICAL = {
    "int16": "SMALLINT", "int32": "INT", "int64": "BIGINT", "uint32": "INT UNSIGNED",
    "uint64": "BIGINT UNSIGNED", "float32": "FLOAT", "float64": "DOUBLE", "bool": "BOOLEAN",
    "date": "DATE", "uuid": "CHAR(36)", "year": "YEAR",
}
_SAME_KIND = {"float": "float32", "double": "float64", "text": "text", "enum": "text",
              "set": "text", "json": "json", "binary": "binary", "date": "date",
              "time": "duration", "year": "year", "geometry": "binary", "uuid": "uuid",
              "inet4": "inet", "inet6": "text"}
_BASE64 = ("binary", "geometry")  # the landing zone has their bytes in base64
# MariaDB's own types, created as such (a MySQL target has none of them: create the
# target table yourself, with CHAR(36) for a UUID and VARCHAR(39) for an address)
_MARIADB_TYPES = {"uuid": "UUID", "inet4": "INET4", "inet6": "INET6"}


class MySqlTypes:
    def source_column(self, entry: Mapping[str, object]) -> SourceColumn:
        kind = str(entry["type"])
        members = entry.get("members", [])
        return SourceColumn(
            name=str(entry["name"]),
            kind=MYSQL,
            type=kind,
            encoding=Encoding.BASE64 if kind in _BASE64 else Encoding.TEXT,
            unsigned=bool(entry.get("unsigned", False)),
            scale=int(str(entry.get("scale", 0))),
            fsp=int(str(entry.get("fsp", 0))),
            length=int(str(entry.get("length", 0))),
            members=tuple(str(m) for m in members) if isinstance(members, list) else (),
            subtype=str(entry.get("spatial", "")),
        )

    def logical(self, column: SourceColumn) -> Logical | None:
        kind = column.type
        if kind == "integer":
            return Logical("uint64" if column.unsigned else "int64")
        if kind == "bit":
            return Logical("uint64")
        if kind == "decimal":
            return Logical("decimal", scale=column.scale)
        if kind in ("datetime", "timestamp"):
            return Logical("datetime" if kind == "datetime" else "timestamptz", fsp=column.fsp)
        name = _SAME_KIND.get(kind)
        return None if name is None else Logical(name)

    def native_type(self, column: SourceColumn, key_bytes: int) -> str | None:
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
            members = ",".join(string_literal(m) for m in column.members)
            return f"{kind.upper()}({members})"
        if kind == "geometry":
            return (column.subtype or kind).upper()
        return _MARIADB_TYPES.get(kind)

    def from_logical(self, logical: Logical, key_bytes: int) -> str | None:
        name = logical.name
        if name in ("text", "json"):
            if logical.length:
                return f"VARCHAR({logical.length})"
            return _key_text(key_bytes) if key_bytes else "LONGTEXT"
        if name == "binary":
            return _key_binary(key_bytes) if key_bytes else "LONGBLOB"
        if name == "decimal":
            return f"DECIMAL(65,{30 if logical.scale < 0 else logical.scale})"
        if name in ("datetime", "timestamptz", "time"):
            return f"{'TIME' if name == 'time' else 'DATETIME'}({logical.fsp})"
        return _FROM_LOGICAL.get(name)


def _key_text(key_bytes: int) -> str:
    return f"VARCHAR({key_bytes // 4})"  # utf8mb4: 4 bytes a character


def _key_binary(key_bytes: int) -> str:
    return f"VARBINARY({key_bytes})"


def string_literal(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "''") + "'"


TYPES = MySqlTypes()
