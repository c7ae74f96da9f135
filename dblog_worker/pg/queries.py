"""SQL the PostgreSQL source runs, built by pure functions and tested on exact text.

Identifiers come from the catalog and are always quoted here; values are always
bound parameters. Keys are compared by the database (row-value comparison on the
primary-key index), never by Python, so collations are the database's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


def quote_ident(name: str) -> str:
    if "\x00" in name:
        raise ValueError("identifiers cannot contain NUL")
    return '"' + name.replace('"', '""') + '"'


def qualified(schema: str, name: str) -> str:
    return f"{quote_ident(schema)}.{quote_ident(name)}"


@dataclass(frozen=True, slots=True)
class TableShape:
    """What the queries need of a table: names from the catalog, in order."""

    schema: str
    name: str
    columns: tuple[str, ...]
    key_columns: tuple[str, ...]
    key_types: tuple[str, ...]  # format_type(atttypid, NULL) of each key column

    @property
    def qualified(self) -> str:
        return qualified(self.schema, self.name)


def _columns(shape: TableShape, alias: str = "") -> str:
    prefix = f"{alias}." if alias else ""
    return ", ".join(prefix + quote_ident(c) for c in shape.columns)


def _key(shape: TableShape) -> str:
    return ", ".join(quote_ident(c) for c in shape.key_columns)


def _bound(shape: TableShape) -> str:
    return ", ".join(f"CAST(%s AS {t})" for t in shape.key_types)


def upper_bound_sql(shape: TableShape) -> str:
    """The largest key of the table: the upper bound of a table dump, captured once."""
    order = ", ".join(f"{quote_ident(c)} DESC" for c in shape.key_columns)
    return f"SELECT {_key(shape)} FROM {shape.qualified} ORDER BY {order} LIMIT 1"


def chunk_sql(shape: TableShape, *, first: bool) -> str:
    """The next chunk: keys after the last completed one (unless first), up to the bound.

    Parameters: the last key's values (unless ``first``), the upper bound's values,
    the limit.
    """
    key = _key(shape)
    conditions = [] if first else [f"({key}) > ({_bound(shape)})"]
    conditions.append(f"({key}) <= ({_bound(shape)})")
    return (
        f"SELECT {_columns(shape)} FROM {shape.qualified} "
        f"WHERE {' AND '.join(conditions)} ORDER BY {key} LIMIT %s"
    )


def keys_sql(shape: TableShape) -> str:
    """Rows of a list of keys, one array parameter per key column, in the list's order.

    The first column is the key's 1-based index in the list; the row's columns are
    NULL where the key does not exist.
    """
    arrays = ", ".join(f"CAST(%s AS {t}[])" for t in shape.key_types)
    names = ", ".join(f"k{i}" for i in range(len(shape.key_columns)))
    join = " AND ".join(
        f"t.{quote_ident(c)} = k.k{i}" for i, c in enumerate(shape.key_columns)
    )
    return (
        f"SELECT k.n, {_columns(shape, 't')} "
        f"FROM unnest({arrays}) WITH ORDINALITY AS k({names}, n) "
        f"LEFT JOIN {shape.qualified} AS t ON {join} ORDER BY k.n"
    )


def check_key_values_sql(key_type: str) -> str:
    """Casts texts to a key column's type; fails, naming the value, if one does not fit."""
    return f"SELECT CAST(v AS {key_type}) FROM unnest(CAST(%s AS text[])) AS u(v)"


def publication_tables_sql() -> str:
    return "SELECT schemaname, tablename FROM pg_publication_tables WHERE pubname = %s"


def key_params(keys: Sequence[Sequence[str]], arity: int) -> list[list[str]]:
    """Column-wise arrays of key texts for :func:`keys_sql`."""
    return [[key[i] for key in keys] for i in range(arity)]
