"""What the worker reads about a MySQL or MariaDB server, and the SQL it runs there.

Identifiers are checked against ``information_schema`` before they are spelled into
SQL, and are always backtick-quoted; values are always bound parameters.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from dblog_worker.source import Problem

SCHEMA = "dblog"
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
REQUIRED_SETTINGS = (
    ("log_bin", "ON", "log-bin = mysql-bin"),
    ("binlog_format", "ROW", "binlog-format = ROW"),
    ("binlog_row_image", "FULL", "binlog-row-image = FULL"),
    ("binlog_row_metadata", "FULL", "binlog-row-metadata = FULL"),
)


def split_table(table: str) -> tuple[str, str]:
    database, _, name = table.partition(".")
    return database, name


def quote_ident(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def qualified(table: str) -> str:
    database, name = split_table(table)
    return f"{quote_ident(database)}.{quote_ident(name)}"


@dataclass(frozen=True, slots=True)
class TableShape:
    """A table's columns and primary key, as the chunk queries need them.

    ``select`` and ``select_t`` are the select lists of the columns, plain and with the
    alias ``t`` (``values.select_list``: some types are read through a CAST)."""

    table: str
    columns: tuple[str, ...]
    key: tuple[str, ...]
    select: str = ""
    select_t: str = ""


def _columns(shape: TableShape) -> str:
    return shape.select or ", ".join(quote_ident(c) for c in shape.columns)


def _after(key: Sequence[str]) -> str:
    """``(k1, k2) > (%s, %s)`` spelled so that both MySQL and MariaDB use the index:
    ``k1 > %s OR (k1 = %s AND k2 > %s)``; parameters: the texts of :func:`after_params`."""
    terms = []
    for i, column in enumerate(key):
        equal = [f"{quote_ident(k)} = %s" for k in key[:i]]
        terms.append("(" + " AND ".join([*equal, f"{quote_ident(column)} > %s"]) + ")")
    return "(" + " OR ".join(terms) + ")"


def after_params(values: Sequence[Any]) -> list[Any]:
    """The parameters of :func:`_after` for a key: k1; k1, k2; k1, k2, k3; ..."""
    return [v for i in range(len(values)) for v in values[: i + 1]]


def _at_most(key: Sequence[str]) -> str:
    """``(k1, k2) <= (%s, %s)``, index-friendly: NOT (the upper bound is after the row)."""
    terms = []
    for i, column in enumerate(key):
        equal = [f"{quote_ident(k)} = %s" for k in key[:i]]
        terms.append("(" + " AND ".join([*equal, f"{quote_ident(column)} < %s"]) + ")")
    last = " AND ".join(f"{quote_ident(k)} = %s" for k in key)
    return "(" + " OR ".join([*terms, f"({last})"]) + ")"


def at_most_params(values: Sequence[Any]) -> list[Any]:
    return [*after_params(values), *values]


def chunk_sql(shape: TableShape, *, first: bool) -> str:
    """One keyset chunk, up to the table's upper bound: parameters are the last key
    read (unless ``first``; :func:`after_params`), the upper bound
    (:func:`at_most_params`), and the limit."""
    order = ", ".join(quote_ident(k) for k in shape.key)
    where = _at_most(shape.key) if first else f"{_after(shape.key)} AND {_at_most(shape.key)}"
    return (f"SELECT {_columns(shape)} FROM {qualified(shape.table)} WHERE {where} "
            f"ORDER BY {order} LIMIT %s")


def upper_bound_sql(shape: TableShape) -> str:
    order = ", ".join(f"{quote_ident(k)} DESC" for k in shape.key)
    return f"SELECT {_columns(shape)} FROM {qualified(shape.table)} ORDER BY {order} LIMIT 1"


def keys_sql(shape: TableShape, count: int) -> str:
    """Rows for ``count`` requested keys, in request order, with the request's index
    first and NULL columns for a key that does not exist. Parameters: per key, its
    index then its key values."""
    width = len(shape.key)
    names = ", ".join(f"%s AS {quote_ident(f'k{i}')}" for i in range(width))
    requested = " UNION ALL ".join([f"SELECT %s AS n, {names}"] + [
        "SELECT %s, " + ", ".join(["%s"] * width) for _ in range(count - 1)
    ])
    join = " AND ".join(f"t.{quote_ident(k)} = r.{quote_ident(f'k{i}')}"
                        for i, k in enumerate(shape.key))
    columns = shape.select_t or ", ".join(f"t.{quote_ident(c)}" for c in shape.columns)
    return (f"SELECT r.n, {columns} FROM ({requested}) AS r "
            f"LEFT JOIN {qualified(shape.table)} AS t ON {join} ORDER BY r.n")


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
    return problems
