"""Table names as the configuration spells them: ``schema.table`` (``database.table``)."""

from __future__ import annotations

from collections.abc import Callable

WATERMARK_SCHEMA = "dblog"  # the schema (database) of the watermark table: the worker's own


def split_table(table: str) -> tuple[str, str]:
    """Split ``schema.table`` at the first dot; both parts must be non-empty.

    A schema whose name contains a dot cannot be told apart in this string form:
    ``"a.b" . "c"`` and ``"a" . "b.c"`` are both ``"a.b.c"`` and land in the same
    directory, which round-trips to the same string.
    """
    schema, dot, name = table.partition(".")
    if not dot or not schema or not name:
        raise ValueError(f"a table is 'schema.table' with both parts non-empty, got {table!r}")
    return schema, name


def qualified(table: str, ident: Callable[[str], str]) -> str:
    """``schema.table`` as SQL, each part quoted by the dialect's ``ident``."""
    schema, name = split_table(table)
    return f"{ident(schema)}.{ident(name)}"
