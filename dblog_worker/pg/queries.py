"""SQL the PostgreSQL source runs, built by pure functions and tested on exact text.

Identifiers come from the catalog and are always quoted here; values are always
bound parameters. Keys are compared by the database (row-value comparison on the
primary-key index), never by Python, so collations are the database's.

Every statement built here is run with parameters, so psycopg reads ``%`` as the
start of a placeholder: :func:`ident` doubles it inside identifiers (a column named
``disc%`` is ``"disc%%"`` here and ``"disc%"`` on the server). :func:`quote_ident` is
the identifier as SQL text, for messages and for fixes a person runs.

Chunk and key SELECTs read ``*``: the statement itself says which columns it read
(its result's description), so a chunk is never encoded with a column list older
than the statement (see ``pg/chunks.py``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from dblog_worker.dump.row_filter import Op, RowFilter


def quote_ident(name: str) -> str:
    if "\x00" in name:
        raise ValueError("identifiers cannot contain NUL")
    return '"' + name.replace('"', '""') + '"'


def qualified(schema: str, name: str) -> str:
    return f"{quote_ident(schema)}.{quote_ident(name)}"


def ident(name: str) -> str:
    """An identifier in a statement run with parameters: quoted, ``%`` doubled."""
    return quote_ident(name).replace("%", "%%")


def sql_text(text: str) -> str:
    """SQL text from the catalog (a type's name) in a statement run with parameters."""
    return text.replace("%", "%%")


@dataclass(frozen=True, slots=True)
class TableShape:
    """What the queries need of a table: names from the catalog, in order."""

    schema: str
    name: str
    key_columns: tuple[str, ...]
    key_types: tuple[str, ...]  # format_type(atttypid, NULL) of each key column

    @property
    def qualified(self) -> str:
        """The table's name in a statement run with parameters."""
        return f"{ident(self.schema)}.{ident(self.name)}"


def _key(shape: TableShape) -> str:
    return ", ".join(ident(c) for c in shape.key_columns)


def _bound(shape: TableShape) -> str:
    return ", ".join(f"CAST(%s AS {sql_text(t)})" for t in shape.key_types)


def upper_bound_sql(shape: TableShape, where: Sequence[str] = ()) -> str:
    """The largest key of the table (of its rows that meet a filter's conditions,
    ``where``: parameters those of :func:`filter_sql`): the upper bound of a table dump,
    captured once."""
    order = ", ".join(f"{ident(c)} DESC" for c in shape.key_columns)
    condition = f" WHERE {' AND '.join(where)}" if where else ""
    return f"SELECT {_key(shape)} FROM {shape.qualified}{condition} ORDER BY {order} LIMIT 1"


def chunk_sql(shape: TableShape, *, first: bool, where: Sequence[str] = ()) -> str:
    """The next chunk: keys after the last completed one (unless first), up to the bound,
    of the rows that meet a filter's conditions (``where``).

    Parameters: the last key's values (unless ``first``), the upper bound's values,
    the filter's (:func:`filter_sql`), the limit.
    """
    return f"SELECT * FROM {_range(shape, first, where)} LIMIT %s"


def key_after_sql(shape: TableShape, *, first: bool, where: Sequence[str] = ()) -> str:
    """The key ``offset`` keys into the range :func:`chunk_sql` reads (the end of a
    parallel window's range): the key columns only, so the rows skipped are not formed
    (an index-only scan where the visibility map allows). Parameters: those of
    :func:`chunk_sql`, then the offset."""
    return f"SELECT {_key(shape)} FROM {_range(shape, first, where)} LIMIT 1 OFFSET %s"


def _range(shape: TableShape, first: bool, where: Sequence[str]) -> str:
    key = _key(shape)
    conditions = [] if first else [f"({key}) > ({_bound(shape)})"]
    conditions.append(f"({key}) <= ({_bound(shape)})")
    return f"{shape.qualified} WHERE {' AND '.join([*conditions, *where])} ORDER BY {key}"


_COMPARISONS = {Op.EQ: "=", Op.NE: "<>", Op.LT: "<", Op.LE: "<=", Op.GT: ">", Op.GE: ">="}


def filter_sql(shape: TableShape, row_filter: RowFilter,
               column_types: Mapping[str, str]) -> tuple[list[str], list[object]]:
    """A filtered dump's conditions (each value cast to its column's type,
    ``column_types``: ``format_type`` of each column) and their parameters, in order."""
    conditions: list[str] = []
    params: list[object] = []
    for condition in row_filter.conditions:
        column, cast = ident(condition.column), sql_text(column_types[condition.column])
        if condition.op is Op.IS_NULL or condition.op is Op.IS_NOT_NULL:
            conditions.append(f"{column} {condition.op.value.upper()}")
        elif condition.op is Op.IN or condition.op is Op.NOT_IN:
            each = "= ANY" if condition.op is Op.IN else "<> ALL"
            conditions.append(f"{column} {each}(CAST(%s AS {cast}[]))")
            params.append(list(condition.values))
        else:
            conditions.append(f"{column} {_COMPARISONS[condition.op]} CAST(%s AS {cast})")
            params.append(condition.values[0])
    for bound, compare in ((row_filter.from_key, ">="), (row_filter.to_key, "<=")):
        if bound is not None:
            conditions.append(f"({_key(shape)}) {compare} ({_bound(shape)})")
            params.extend(bound)
    return conditions, params


def filter_check_sql(shape: TableShape, where: Sequence[str]) -> str:
    """Plans a filter's conditions on the table without reading a row: an operator the
    column's type lacks (``json = json``) is refused here."""
    return f"SELECT 1 FROM {shape.qualified} WHERE {' AND '.join(where)} LIMIT 0"


def keys_sql(shape: TableShape) -> str:
    """Rows of a list of keys, one array parameter per key column, in the list's order.

    The first column is the key's 1-based index in the list, then the table's columns
    (``t.*``), NULL where the key does not exist.
    """
    arrays = ", ".join(f"CAST(%s AS {sql_text(t)}[])" for t in shape.key_types)
    names = ", ".join(f"k{i}" for i in range(len(shape.key_columns)))
    join = " AND ".join(
        f"t.{ident(c)} = k.k{i}" for i, c in enumerate(shape.key_columns)
    )
    return (
        f"SELECT k.n, t.* "
        f"FROM unnest({arrays}) WITH ORDINALITY AS k({names}, n) "
        f"LEFT JOIN {shape.qualified} AS t ON {join} ORDER BY k.n"
    )


def check_key_values_sql(key_type: str) -> str:
    """Casts texts to a key column's type; fails, naming the value, if one does not fit."""
    return f"SELECT CAST(v AS {sql_text(key_type)}) FROM unnest(CAST(%s AS text[])) AS u(v)"


def publication_tables_sql() -> str:
    return "SELECT schemaname, tablename FROM pg_publication_tables WHERE pubname = %s"


def key_params(keys: Sequence[Sequence[str]], arity: int) -> list[list[str]]:
    """Column-wise arrays of key texts for :func:`keys_sql`."""
    return [[key[i] for key in keys] for i in range(arity)]
