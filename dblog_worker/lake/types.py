"""Source columns as a lake table holds them: a Spark SQL type, and the expression that
turns a row image's JSON value (its text) into it.

Spark parses a row image with ``from_json`` into a struct of strings (a JSON number or
object keeps its text), and each value is cast in Spark, with ANSI casts on: a value
the type refuses fails the batch, it never becomes NULL. The types come from the source
column's neutral type (:class:`~dblog_worker.merge.column_types.Logical`), as for a database
target of another kind; a column without one (arrays, composite, geometric types) is
refused naming the table and the column.
"""

from __future__ import annotations

from dblog_worker.errors import TargetError
from dblog_worker.merge.column_types import Encoding, SourceColumn, logical_of

__all__ = ["DECIMAL_DIGITS", "TIME_COMMENT", "column_ddl", "column_type", "quote",
           "sql_literal", "value_sql", "widened"]

DECIMAL_DIGITS = 38  # Spark's most
TIME_COMMENT = "dblog:time"  # the comment of a string column that holds a time of day
DEFAULT_SCALE = 18  # a decimal whose source does not say its scale (PostgreSQL numeric)

_TYPES = {
    "int16": "SMALLINT", "int32": "INT", "int64": "BIGINT", "uint32": "BIGINT",
    "uint64": "DECIMAL(20,0)", "float32": "FLOAT", "float64": "DOUBLE", "bool": "BOOLEAN",
    "binary": "BINARY", "text": "STRING", "json": "STRING", "uuid": "STRING", "inet": "STRING",
    "date": "DATE", "datetime": "TIMESTAMP_NTZ", "timestamptz": "TIMESTAMP",
    "time": "STRING", "year": "INT",
}
_INTEGERS = ("SMALLINT", "INT", "BIGINT")


def quote(name: str) -> str:
    """A Spark SQL identifier: any name, in backquotes."""
    return "`" + name.replace("`", "``") + "`"


def sql_literal(text: str) -> str:
    """A Spark SQL string literal (backslash escapes are on by default)."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def column_type(table: str, column: SourceColumn, target: str) -> str:
    """The Spark SQL type of a lake table's column for ``column`` of source ``table``."""
    logical = logical_of(column)
    found = None if logical is None else _TYPES.get(logical.name)
    if logical is not None and logical.name == "decimal":
        scale = logical.scale if logical.scale >= 0 else DEFAULT_SCALE
        found = f"DECIMAL({DECIMAL_DIGITS},{min(scale, DECIMAL_DIGITS)})"
    if found is None:
        raise TargetError(
            f"{table}: column {column.name!r} has type {column.describe()}, which a {target}"
            " target cannot hold; leave the table out of the merge (--table)")
    return found


def column_ddl(table: str, column: SourceColumn, target: str) -> str:
    """:func:`column_type` as a column definition says it: a time of day, which Spark
    keeps as a string, is marked by its comment (``dblog verify`` compares it as a time)."""
    found = column_type(table, column, target)
    logical = logical_of(column)
    if logical is not None and logical.name == "time":
        return f"{found} COMMENT {sql_literal(TIME_COMMENT)}"
    return found


def value_sql(column: SourceColumn, type_sql: str, ref: str) -> str:
    """Spark SQL turning ``ref``, the column's JSON value as text, into ``type_sql``."""
    if column.encoding is Encoding.BASE64:
        return f"unbase64({ref})"
    if type_sql == "STRING":
        return ref
    return f"CAST({ref} AS {type_sql})"


def widened(column: SourceColumn, existing: str) -> str | None:
    """The type an ``existing`` column (Spark's ``simpleString``, upper-cased) grows to for
    the source's newest ``column``; None if it holds it or cannot grow: integers grow
    (``SMALLINT`` < ``INT`` < ``BIGINT``), ``FLOAT`` to ``DOUBLE`` — what Iceberg's schema
    evolution allows without rewriting a file."""
    try:
        wanted = column_type("", column, "")
    except TargetError:
        return None
    have = existing.upper()
    if wanted in _INTEGERS and have in _INTEGERS:
        return wanted if _INTEGERS.index(wanted) > _INTEGERS.index(have) else None
    if wanted == "DOUBLE" and have == "FLOAT":
        return wanted
    return None
