"""The foreign keys of a MySQL or MariaDB source that can change captured tables, read
from ``information_schema``, and what ``dblog preflight`` says of them.

InnoDB applies a foreign key's ``CASCADE`` and ``SET NULL`` inside the engine, and the
binary log holds only the parent's row event: :mod:`dblog_worker.foreign_keys` says what
the worker derives from it. This module finds the foreign keys: those of the captured
tables' databases, then those of every database a parent lives in, until no new database
comes (a cascade reaches a captured table only through its ancestors).

The account sees, in ``information_schema``, only tables it has a privilege on: a parent
it cannot see could itself be changed by cascades the worker cannot know, which
:func:`problems` reports.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from dblog_worker.foreign_keys import CascadePlan, ForeignKey, Rule
from dblog_worker.mysql.catalog import KEY_COLUMNS_SQL, qualified
from dblog_worker.names import split_table
from dblog_worker.source import Problem

__all__ = ["FOREIGN_KEYS_SQL", "exact_pair", "foreign_keys", "plan", "problems", "summary"]

Query = Callable[[str, Sequence[Any]], list[tuple[Any, ...]]]

FOREIGN_KEYS_SQL = (
    "SELECT k.TABLE_NAME, k.CONSTRAINT_NAME, k.COLUMN_NAME, k.REFERENCED_TABLE_SCHEMA,"
    " k.REFERENCED_TABLE_NAME, k.REFERENCED_COLUMN_NAME, r.UPDATE_RULE, r.DELETE_RULE"
    " FROM information_schema.KEY_COLUMN_USAGE k"
    " JOIN information_schema.REFERENTIAL_CONSTRAINTS r"
    " ON r.CONSTRAINT_SCHEMA = k.CONSTRAINT_SCHEMA AND r.CONSTRAINT_NAME = k.CONSTRAINT_NAME"
    " AND r.TABLE_NAME = k.TABLE_NAME"
    " WHERE k.TABLE_SCHEMA = %s AND r.CONSTRAINT_SCHEMA = %s"
    " AND k.REFERENCED_TABLE_NAME IS NOT NULL"
    " ORDER BY k.TABLE_NAME, k.CONSTRAINT_NAME, k.ORDINAL_POSITION"
)
"""The foreign keys of one database's tables, a row per column; parameters the database
twice."""

COLUMN_TYPES_SQL = (
    "SELECT COLUMN_NAME, DATA_TYPE, COLUMN_TYPE, COLLATION_NAME FROM information_schema.COLUMNS"
    " WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s"
)

_NOPAD_BIN = ("_nopad_bin",)
_EXACT_COLLATIONS = frozenset({"binary", "utf8mb4_0900_bin"})  # MySQL's is NO PAD
_INTEGERS = frozenset({"tinyint", "smallint", "mediumint", "int", "bigint"})
_STRINGS = frozenset({"char", "varchar", "tinytext", "text", "mediumtext", "longtext",
                      "binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob",
                      "enum", "set"})

ColumnType = tuple[str, str, str | None]  # DATA_TYPE, COLUMN_TYPE, COLLATION_NAME


def exact_pair(child: ColumnType | None, parent: ColumnType | None) -> bool:
    """Whether the database compares a child column with its parent column byte for byte,
    so that the canonical JSON of equal values is the same text: the same type (integers
    of any display width), and a binary or NO PAD binary collation for strings."""
    if child is None or parent is None:
        return False
    (data, column, collation), (parent_data, parent_column, parent_collation) = child, parent
    if data.lower() != parent_data.lower():
        return False
    if data.lower() in _STRINGS:
        return all(c is None or c in _EXACT_COLLATIONS or c.endswith(_NOPAD_BIN)
                   for c in (collation, parent_collation))
    if data.lower() in _INTEGERS:
        return ("unsigned" in column.lower()) == ("unsigned" in parent_column.lower())
    return column.lower() == parent_column.lower()


def foreign_keys(query: Query, tables: Iterable[str]) -> tuple[list[ForeignKey], set[str]]:
    """The foreign keys of the databases of ``tables`` and of their parents' databases;
    and the parent tables whose columns the account cannot see."""
    rows_by_key: dict[tuple[str, str, str], list[tuple[Any, ...]]] = {}
    done: set[str] = set()
    todo = {split_table(t)[0] for t in tables}
    while todo:
        database = todo.pop()
        done.add(database)
        for row in query(FOREIGN_KEYS_SQL, (database, database)):
            table, name, parent_db = str(row[0]), str(row[1]), str(row[3])
            rows_by_key.setdefault((database, table, name), []).append(row)
            if parent_db not in done:
                todo.add(parent_db)
    types: dict[str, dict[str, ColumnType]] = {}

    def column_types(table: str) -> dict[str, ColumnType]:
        if table not in types:
            types[table] = {str(r[0]): (str(r[1]), str(r[2]), None if r[3] is None
                                        else str(r[3]))
                            for r in query(COLUMN_TYPES_SQL, split_table(table))}
        return types[table]

    primary: dict[str, set[str]] = {}

    def primary_key(table: str) -> set[str]:
        if table not in primary:
            primary[table] = {str(r[0]) for r in query(KEY_COLUMNS_SQL, split_table(table))}
        return primary[table]

    keys = []
    for (database, table, name), rows in sorted(rows_by_key.items()):
        child = f"{database}.{table}"
        parent = f"{rows[0][3]}.{rows[0][4]}"
        columns = tuple(str(r[2]) for r in rows)
        referenced = tuple(str(r[5]) for r in rows)
        child_types, parent_types = column_types(child), column_types(parent)
        exact = all(exact_pair(child_types.get(c), parent_types.get(p))
                    for c, p in zip(columns, referenced, strict=True))
        keys.append(ForeignKey(name, child, columns, parent, referenced,
                               on_delete=Rule.of(str(rows[0][7])),
                               on_update=Rule.of(str(rows[0][6])), exact=exact,
                               in_key=bool(primary_key(child).intersection(columns))))
    unseen = {k.parent for k in keys if k.acts and not column_types(k.parent)}
    return keys, unseen


def plan(keys: Sequence[ForeignKey], captured: Iterable[str]) -> CascadePlan:
    """The cascade plan of ``keys`` for the captured tables: only the foreign keys on the
    way to a captured table (its ancestors') are kept."""
    captured = frozenset(captured)
    by_child: dict[str, list[ForeignKey]] = {}
    for key in keys:
        if key.acts:
            by_child.setdefault(key.child, []).append(key)
    kept: list[ForeignKey] = []
    seen: set[str] = set()
    frontier = list(captured)
    while frontier:
        table = frontier.pop()
        if table in seen:
            continue
        seen.add(table)
        for key in by_child.get(table, ()):
            kept.append(key)
            frontier.append(key.parent)
    return CascadePlan(tuple(kept), captured)


def problems(cascades: CascadePlan, unseen: set[str], account: str) -> list[Problem]:
    """A parent the account cannot see may be changed by cascades of its own parents,
    which the worker would not know of: capture does not start."""
    hidden = sorted(unseen & cascades.parents)
    return [Problem(
        f"{account} cannot see table {table} in information_schema, whose foreign-key "
        "cascades change captured tables: the worker cannot know whether cascades of its "
        "own parents change it",
        f"GRANT SELECT ON {qualified(table)} TO {account};") for table in hidden]


def summary(cascades: CascadePlan) -> list[str]:
    """For ``dblog preflight``: every acting foreign key on the way to a captured table,
    and what the worker does about it."""
    lines = []
    reached = cascades.reached()
    for key in sorted(cascades.keys, key=lambda k: (k.child, k.name)):
        rules = ", ".join(f"ON {what} {rule.value}" for what, rule in
                          (("DELETE", key.on_delete), ("UPDATE", key.on_update)) if rule.acts)
        where = (f"{key.child}({', '.join(key.columns)}) -> "
                 f"{key.parent}({', '.join(key.referenced)}) [{key.name}] {rules}")
        if key.child not in cascades.captured:
            handling = "not captured: no event of its own"
        elif not key.exact:
            handling = ("foreign-key action events for the same bytes, and a pruning dump "
                        "of the child after each cascade (its values compare by collation)")
        elif key.in_key and key.on_update.acts:
            handling = ("foreign-key action events of parent deletes (landing op f); an "
                        "update cascades into the child's primary key: a pruning dump of the "
                        "child after each")
        else:
            handling = ("foreign-key action events derived from the parent's row events "
                        "(landing op f), applied by the merge by predicate")
        lines.append(f"{where}: {handling}")
    for parent, tables in sorted(reached.items()):
        if tables:
            lines.append(f"a cascade from a change of {parent} reaches "
                         f"{', '.join(sorted(tables))} where no event can say which rows: "
                         "the worker queues a pruning dump of each (at most one waiting)")
    return lines
