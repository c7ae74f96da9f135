"""What the worker reads about a MySQL or MariaDB server, and the SQL it runs there.

Identifiers are checked against ``information_schema`` before they are spelled into
SQL, and are always backtick-quoted; values are always bound parameters. PyMySQL
formats a statement's parameters in with Python's ``%``, so every statement here is
run with parameters and :func:`ident` doubles ``%`` in names (``disc%`` is
```disc%%``` here, ```disc%``` on the server; a crafted ``%s`` in a name stays a name).
:func:`quote_ident` and :func:`qualified` are the SQL text, for messages and fixes.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from dblog_worker import names
from dblog_worker.names import split_table
from dblog_worker.row_filter import Op, RowFilter
from dblog_worker.source import Problem
from dblog_worker.tables import WATERMARK_SCHEMA as SCHEMA
from dblog_worker.tables import UniqueIndex, choose_key

WATERMARK_DDL = (
    f"CREATE TABLE IF NOT EXISTS `{SCHEMA}`.`watermark` ("
    "source VARCHAR(64) NOT NULL PRIMARY KEY, value VARCHAR(255) NOT NULL, "
    "written_at DATETIME(6) NOT NULL) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4"
)
WATERMARK_UPSERT = (
    f"INSERT INTO `{SCHEMA}`.`watermark` (source, value, written_at) "
    "VALUES (%s, %s, UTC_TIMESTAMP(6)) "
    "ON DUPLICATE KEY UPDATE value = VALUES(value), written_at = VALUES(written_at)"
)
KEY_COLUMNS_SQL = (
    "SELECT COLUMN_NAME FROM information_schema.KEY_COLUMN_USAGE "
    "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s AND CONSTRAINT_NAME = 'PRIMARY' "
    "ORDER BY ORDINAL_POSITION"
)
UNIQUE_INDEXES_SQL = (
    "SELECT INDEX_NAME, COLUMN_NAME, NULLABLE, SUB_PART FROM information_schema.STATISTICS "
    "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s AND NON_UNIQUE = 0 "
    "ORDER BY INDEX_NAME, SEQ_IN_INDEX"
)
"""The unique indexes' columns; a table's key is chosen among them (:func:`table_key`)."""
NULLABLE_SQL = (
    "SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = %s "
    "AND TABLE_NAME = %s AND IS_NULLABLE = 'YES'"
)


def table_key(rows: Sequence[tuple[Any, ...]], configured: Sequence[str] | None
              ) -> tuple[tuple[str, ...], str]:
    """The table's key (:func:`dblog_worker.tables.choose_key`) from the rows of
    :data:`UNIQUE_INDEXES_SQL`: an index on a column prefix or an expression is none."""
    columns: dict[str, list[str]] = {}
    whole: dict[str, bool] = {}
    for index, column, nullable, sub_part in rows:
        columns.setdefault(str(index), []).append(str(column))
        whole[str(index)] = whole.get(str(index), True) and column is not None \
            and sub_part is None and str(nullable) != "YES"
    indexes = [UniqueIndex(name, name == "PRIMARY", False, tuple(cols), whole[name])
               for name, cols in columns.items() if name != "PRIMARY" or whole[name]]
    return choose_key(indexes, configured)


# The tables patterns may match (not in the system databases), and their unique indexes'
# columns (:func:`table_key` chooses a key among them): two queries, joined by the worker.
_SYSTEM = "('mysql', 'information_schema', 'performance_schema', 'sys')"
CANDIDATE_TABLES_SQL = (
    "SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES "
    f"WHERE TABLE_TYPE = 'BASE TABLE' AND TABLE_SCHEMA NOT IN {_SYSTEM}"
)
CANDIDATE_KEYS_SQL = (
    "SELECT TABLE_SCHEMA, TABLE_NAME, INDEX_NAME, COLUMN_NAME, NULLABLE, SUB_PART "
    f"FROM information_schema.STATISTICS WHERE NON_UNIQUE = 0 AND TABLE_SCHEMA NOT IN {_SYSTEM} "
    "ORDER BY TABLE_SCHEMA, TABLE_NAME, INDEX_NAME, SEQ_IN_INDEX"
)


def in_schemas(sql: str, count: int) -> str:
    """``sql`` limited to ``count`` databases, given as parameters."""
    return f"{sql.split(' ORDER BY ')[0]} AND TABLE_SCHEMA IN ({', '.join(['%s'] * count)})" + (
        f" ORDER BY {sql.split(' ORDER BY ')[1]}" if " ORDER BY " in sql else "")


REQUIRED_SETTINGS = (
    ("log_bin", "ON", "log-bin = mysql-bin"),
    ("binlog_format", "ROW", "binlog-format = ROW"),
    ("binlog_row_image", "FULL", "binlog-row-image = FULL"),
    ("binlog_row_metadata", "FULL", "binlog-row-metadata = FULL"),
)
# Settings whose non-default value loses or reorders changes without a word: (variable,
# the refused value, the default, what it breaks, whether sessions may set their own).
# A server without the variable is fine: each exists on one kind of server only.
REFUSED_SETTINGS = (
    ("binlog_transaction_compression", "ON", "OFF",
     "MySQL logs each transaction as one compressed payload event, which the binlog reader "
     "cannot read: the transaction's changes would be skipped", True),
    ("log_bin_compress", "ON", "OFF",
     "MariaDB logs row events compressed, which the binlog reader cannot read: those changes "
     "would be skipped", False),
    ("binlog_row_value_options", "PARTIAL_JSON", "",
     "MySQL logs an update of a JSON column as the changed parts only: the row after the "
     "change is not whole, and the binlog reader does not read such events", True),
    ("binlog_order_commits", "OFF", "ON",
     "MySQL may make transactions visible in another order than it logs them: a change "
     "logged before a low watermark could be invisible to the chunk SELECT after it, and "
     "the chunk's older row would be emitted after the change", False),
)
SETTINGS = tuple(s[0] for s in REQUIRED_SETTINGS) + tuple(s[0] for s in REFUSED_SETTINGS)
"""Every global variable :func:`setting_problems` looks at."""


def quote_ident(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def qualified(table: str) -> str:
    """``database.table`` as SQL to show (not run with parameters)."""
    return names.qualified(table, quote_ident)


def ident(name: str) -> str:
    """A name in a statement run with parameters: backtick-quoted, ``%`` doubled."""
    return quote_ident(name).replace("%", "%%")


def _table_sql(table: str) -> str:
    database, name = split_table(table)
    return f"{ident(database)}.{ident(name)}"


@dataclass(frozen=True, slots=True)
class TableShape:
    """A table's columns and primary key, as the chunk queries need them.

    ``select`` and ``select_t`` are the select lists of the columns, plain and with the
    alias ``t`` (``columns.select_list``: some types are read through a CAST);
    ``select_key`` that of the key columns, in key order."""

    table: str
    columns: tuple[str, ...]
    key: tuple[str, ...]
    select: str = ""
    select_t: str = ""
    select_key: str = ""


def _columns(shape: TableShape) -> str:
    return shape.select or ", ".join(ident(c) for c in shape.columns)


def _after(key: Sequence[str]) -> str:
    """``(k1, k2) > (%s, %s)`` spelled so that both MySQL and MariaDB use the index:
    ``k1 > %s OR (k1 = %s AND k2 > %s)``; parameters: the texts of :func:`after_params`."""
    terms = []
    for i, column in enumerate(key):
        equal = [f"{ident(k)} = %s" for k in key[:i]]
        terms.append("(" + " AND ".join([*equal, f"{ident(column)} > %s"]) + ")")
    return "(" + " OR ".join(terms) + ")"


def after_params(values: Sequence[Any]) -> list[Any]:
    """The parameters of :func:`_after` for a key: k1; k1, k2; k1, k2, k3; ..."""
    return [v for i in range(len(values)) for v in values[: i + 1]]


def _at_most(key: Sequence[str]) -> str:
    """``(k1, k2) <= (%s, %s)``, index-friendly: NOT (the upper bound is after the row)."""
    terms = []
    for i, column in enumerate(key):
        equal = [f"{ident(k)} = %s" for k in key[:i]]
        terms.append("(" + " AND ".join([*equal, f"{ident(column)} < %s"]) + ")")
    last = " AND ".join(f"{ident(k)} = %s" for k in key)
    return "(" + " OR ".join([*terms, f"({last})"]) + ")"


def at_most_params(values: Sequence[Any]) -> list[Any]:
    return [*after_params(values), *values]


def _at_least(key: Sequence[str]) -> str:
    """``(k1, k2) >= (%s, %s)``, index-friendly: :func:`_after` or equal; parameters
    those of :func:`at_most_params`."""
    last = " AND ".join(f"{ident(k)} = %s" for k in key)
    return f"({_after(key)[1:-1]} OR ({last}))"


_COMPARISONS = {Op.EQ: "=", Op.NE: "<>", Op.LT: "<", Op.LE: "<=", Op.GT: ">", Op.GE: ">="}


def filter_sql(shape: TableShape, row_filter: RowFilter,
               param: Callable[[str, str], Any],
               key_params: Callable[[Sequence[str]], list[Any]]) -> tuple[list[str], list[Any]]:
    """A filtered dump's conditions and their parameters, in order: ``param(column,
    text)`` and ``key_params(texts)`` parse the values as the columns' types."""
    conditions: list[str] = []
    params: list[Any] = []
    for condition in row_filter.conditions:
        column = ident(condition.column)
        if condition.op is Op.IS_NULL or condition.op is Op.IS_NOT_NULL:
            conditions.append(f"{column} {condition.op.value.upper()}")
        elif condition.op is Op.IN or condition.op is Op.NOT_IN:
            marks = ", ".join(["%s"] * len(condition.values))
            conditions.append(f"{column} {condition.op.value.upper()} ({marks})")
            params.extend(param(condition.column, v) for v in condition.values)
        else:
            conditions.append(f"{column} {_COMPARISONS[condition.op]} %s")
            params.append(param(condition.column, condition.values[0]))
    if row_filter.from_key is not None:
        conditions.append(_at_least(shape.key))
        params.extend(at_most_params(key_params(row_filter.from_key)))
    if row_filter.to_key is not None:
        conditions.append(_at_most(shape.key))
        params.extend(at_most_params(key_params(row_filter.to_key)))
    return conditions, params


def filter_check_sql(shape: TableShape, where: Sequence[str]) -> str:
    """A filter's conditions on the table, no row read: what the server refuses in them."""
    return f"SELECT 1 FROM {_table_sql(shape.table)} WHERE {' AND '.join(where)} LIMIT 0"


def chunk_sql(shape: TableShape, *, first: bool, where: Sequence[str] = ()) -> str:
    """One keyset chunk, up to the table's upper bound, of the rows that meet a filter's
    conditions (``where``): parameters are the last key read (unless ``first``;
    :func:`after_params`), the upper bound (:func:`at_most_params`), the filter's
    (:func:`filter_sql`), and the limit."""
    return f"SELECT {_columns(shape)} FROM {_range(shape, first, where)} LIMIT %s"


def key_after_sql(shape: TableShape, *, first: bool, where: Sequence[str] = ()) -> str:
    """The key ``offset`` keys into the range :func:`chunk_sql` reads (the end of a
    parallel window's range): the key columns only (``select_key``), so no other column
    of the rows skipped is read (off-page BLOBs and TEXTs stay where they are).
    Parameters: those of :func:`chunk_sql`, then the offset."""
    return (f"SELECT {_key_columns(shape)} FROM {_range(shape, first, where)} "
            "LIMIT 1 OFFSET %s")


def _range(shape: TableShape, first: bool, where: Sequence[str]) -> str:
    order = ", ".join(ident(k) for k in shape.key)
    conditions = [_at_most(shape.key)] if first else [_after(shape.key), _at_most(shape.key)]
    return (f"{_table_sql(shape.table)} WHERE {' AND '.join([*conditions, *where])} "
            f"ORDER BY {order}")


def upper_bound_sql(shape: TableShape, where: Sequence[str] = ()) -> str:
    """The table's largest key (of the rows that meet a filter's conditions, ``where``):
    the upper bound of a table dump; the key columns only."""
    order = ", ".join(f"{ident(k)} DESC" for k in shape.key)
    condition = f" WHERE {' AND '.join(where)}" if where else ""
    return (f"SELECT {_key_columns(shape)} FROM {_table_sql(shape.table)}{condition} "
            f"ORDER BY {order} LIMIT 1")


def _key_columns(shape: TableShape) -> str:
    return shape.select_key or ", ".join(ident(k) for k in shape.key)


def keys_sql(shape: TableShape, count: int) -> str:
    """Rows for ``count`` requested keys, in request order, with the request's index
    first and NULL columns for a key that does not exist. Parameters: per key, its
    index then its key values."""
    width = len(shape.key)
    names = ", ".join(f"%s AS {ident(f'k{i}')}" for i in range(width))
    requested = " UNION ALL ".join([f"SELECT %s AS n, {names}"] + [
        "SELECT %s, " + ", ".join(["%s"] * width) for _ in range(count - 1)
    ])
    join = " AND ".join(f"t.{ident(k)} = r.{ident(f'k{i}')}"
                        for i, k in enumerate(shape.key))
    columns = shape.select_t or ", ".join(f"t.{ident(c)}" for c in shape.columns)
    return (f"SELECT r.n, {columns} FROM ({requested}) AS r "
            f"LEFT JOIN {_table_sql(shape.table)} AS t ON {join} ORDER BY r.n")


_GRANT = re.compile(r"GRANT (.+?) ON (\S+) TO ", re.IGNORECASE)


def grants(rows: Sequence[Sequence[Any]]) -> dict[str, set[str]]:
    """``SHOW GRANTS`` → scope (``*.*``, ```db`.*``, ...) → privileges, upper case."""
    scopes: dict[str, set[str]] = {}
    for (line, *_) in rows:
        text = line.decode() if isinstance(line, bytes) else str(line)
        match = _GRANT.match(text)
        if match is None:
            continue
        privileges = {p.strip().upper() for p in re.sub(r"\([^)]*\)", "", match.group(1))
                      .split(",")}
        scopes.setdefault(match.group(2).replace("`", ""), set()).update(privileges)
    return scopes


def has_privilege(scopes: dict[str, set[str]], privilege: str, database: str | None = None,
                  table: str | None = None) -> bool:
    candidates = ["*.*"]
    if database is not None:
        candidates.append(f"{database}.*")
        if table is not None:
            candidates.append(f"{database}.{table}")
    return any(
        privilege in scopes.get(scope, ()) or "ALL PRIVILEGES" in scopes.get(scope, ())
        for scope in candidates
    )


def setting_problems(settings: dict[str, str]) -> list[Problem]:
    """The server's global variables (lower-case names, see :data:`SETTINGS`) → what in
    them stops capture or would lose changes, each with its fix."""
    problems = []
    for name, wanted, option in REQUIRED_SETTINGS:
        value = settings.get(name)
        if value is None and name == "binlog_row_metadata":
            problems.append(Problem(
                "the server has no binlog_row_metadata setting (MySQL before 8.0.1, MariaDB "
                "before 10.5): the binary log carries no column names",
                "upgrade to MySQL 8.0+ or MariaDB 10.6+",
            ))
        elif value is None or value.upper() != wanted:
            problems.append(Problem(
                f"{name} is {value or 'not set'}, capture needs {wanted}",
                f"set `{option}` in the server's configuration ([mysqld]) and restart it"
                + ("" if name == "log_bin" else
                   f", or SET GLOBAL {name} = '{wanted}'; (new sessions only)"),
            ))
    for name, refused, default, why, per_session in REFUSED_SETTINGS:
        value = settings.get(name)
        if value is not None and value.upper() == refused:
            option = name.replace("_", "-") + " = " + (default or "''")
            problems.append(Problem(
                f"{name} is {value}: {why}",
                f"SET GLOBAL {name} = '{default}'; and set `{option}` in the server's "
                "configuration ([mysqld]) to keep it"
                + (" (sessions opened before keep their own value until they reconnect)"
                   if per_session else ""),
            ))
    return problems
