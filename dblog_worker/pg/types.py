"""PostgreSQL column types as the merge sees them (see :mod:`dblog_worker.merge.column_types`).

A schema document names each column's ``typname``; arrays carry their element's. A
column from PostgreSQL keeps its type on a PostgreSQL target; a column from another kind
gets the type of its neutral form. In neutral terms, a built-in type without a closer
one (interval, timetz, xml, money, bit strings, network and geometric types, ranges, text
search, ...) is text: PostgreSQL's own text of the value. Arrays and the types the source
database defined, but for enums and domains (below), have no neutral form.

Types the source database defined (``pg/chunks.user_type``): a domain is its base type
(its constraints held at the source); an enum keeps its type on a PostgreSQL target
(created there with the source's schema, name and labels; ``pg/target.py`` appends labels
added since) and is text elsewhere (its labels are at most 63 bytes); arrays of them
likewise. A composite type has no target type: such a column is refused.
"""

from __future__ import annotations

from collections.abc import Mapping

from dblog_worker.merge.column_types import Encoding, Logical, SourceColumn
from dblog_worker.pg.encoders import BUILTIN_TYPES
from dblog_worker.pg.options import POSTGRESQL

_NAMES = {t.name: t for t in BUILTIN_TYPES.values()}
_ENCODINGS = {"bytea": Encoding.BASE64, "bool": Encoding.BOOL,
              "timestamptz": Encoding.TIMESTAMPTZ}
_SAME_BUT = {"bit": "varbit"}  # bit without a length is bit(1)
_UNSUPPORTED = {"int2vector", "oidvector", "tid", "xid", "cid", "regproc", "pg_node_tree"}

_LOGICAL = {
    "int2": Logical("int16"), "int4": Logical("int32"), "int8": Logical("int64"),
    "oid": Logical("uint32"), "numeric": Logical("decimal"), "float4": Logical("float32"),
    "float8": Logical("float64"), "bool": Logical("bool"), "bytea": Logical("binary"),
    "date": Logical("date"), "timestamp": Logical("datetime"),
    "timestamptz": Logical("timestamptz"), "time": Logical("time"), "json": Logical("json"),
    "jsonb": Logical("json"), "uuid": Logical("uuid"), "text": Logical("text"),
    "varchar": Logical("text"), "bpchar": Logical("text"), "name": Logical("text", length=64),
}
_TEXT = Logical("text")
_FROM_LOGICAL = {
    "int16": "smallint", "int32": "integer", "int64": "bigint", "uint32": "bigint",
    "uint64": "numeric(20,0)", "decimal": "numeric", "float32": "real",
    "float64": "double precision", "bool": "boolean", "binary": "bytea", "text": "text",
    "json": "json", "uuid": "uuid", "date": "date", "time": "time", "duration": "interval",
    "datetime": "timestamp", "timestamptz": "timestamptz", "year": "smallint", "inet": "inet",
}


class PgTypes:
    def source_column(self, entry: Mapping[str, object]) -> SourceColumn:
        name = str(entry["name"])
        type_name = str(entry["type"])
        array = entry.get("array") is True
        enum, labels = entry.get("enum"), entry.get("labels")
        if isinstance(enum, str):
            members = tuple(str(x) for x in labels) if isinstance(labels, list) else ()
            return SourceColumn(name, POSTGRESQL, "_enum" if array else "enum",
                                Encoding.ARRAY if array else Encoding.TEXT, members=members,
                                element="enum" if array else "", enum=enum)
        base = entry.get("base")
        if isinstance(base, str) and base in _NAMES:  # a domain (or an array of one)
            if array:
                return SourceColumn(name, POSTGRESQL, "_" + base, Encoding.ARRAY,
                                    element=base)
            return SourceColumn(name, POSTGRESQL, base, _ENCODINGS.get(base, Encoding.TEXT))
        oid = entry.get("type_oid")
        builtin = BUILTIN_TYPES.get(oid) if isinstance(oid, int) else None
        if builtin is not None and builtin.category == "A":
            element = BUILTIN_TYPES.get(builtin.element_oid)
            element_name = element.name if element is not None else type_name.lstrip("_")
            return SourceColumn(name, POSTGRESQL, type_name, Encoding.ARRAY,
                                element=element_name)
        return SourceColumn(name, POSTGRESQL, type_name,
                            _ENCODINGS.get(type_name, Encoding.TEXT))

    def logical(self, column: SourceColumn) -> Logical | None:
        if column.enum and not column.element:
            return Logical("text", length=63)
        if column.element or column.type not in _NAMES or column.type in _UNSUPPORTED:
            return None
        return _LOGICAL.get(column.type, _TEXT)

    def native_type(self, column: SourceColumn, key_bytes: int) -> str | None:
        if column.enum:
            schema, _, name = column.enum.partition(".")
            return f"{quote_type(schema)}.{quote_type(name)}" + ("[]" if column.element else "")
        if column.element:
            if column.element not in _NAMES or column.element in ("bytea", "bool"):
                return None
            return quote_type(_SAME_BUT.get(column.element, column.element)) + "[]"
        if column.type not in _NAMES or column.type in _UNSUPPORTED:
            return None
        return quote_type(_SAME_BUT.get(column.type, column.type))

    def from_logical(self, logical: Logical, key_bytes: int) -> str | None:
        return _FROM_LOGICAL.get(logical.name)


def quote_type(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


TYPES = PgTypes()
