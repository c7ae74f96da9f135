"""Connection and session options of a MySQL/MariaDB source: what the values depend on.

Every connection sets :data:`MY_SESSION_SETTINGS`; a dump (chunk) connection is opened with
:func:`dump_connection_options` (``conv=DUMP_CONV``: every cell is the server's text, a
:data:`Cell`); the binary log reader takes :data:`BINLOG_READER_OPTIONS`.  Why, and what the
cells become: the module docstring of :mod:`dblog_worker.mysql.values`.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from pymysql import converters

__all__ = [
    "BINLOG_READER_OPTIONS",
    "DUMP_CONV",
    "MY_SESSION_SETTINGS",
    "Cell",
    "dump_connection_options",
    "session_init_command",
]

Cell = str | bytes | None
"""A dump cell as PyMySQL returns it with :data:`DUMP_CONV`."""

MY_SESSION_SETTINGS: Mapping[str, str] = MappingProxyType(
    {
        # TIMESTAMP values are printed in the session time zone; the log has them in UTC.
        "time_zone": "+00:00",
        # Without PAD_CHAR_TO_FULL_LENGTH (CHAR read without its padding, as the log has it)
        # and without NO_BACKSLASH_ESCAPES (PyMySQL escapes parameters with backslashes).
        "sql_mode": "STRICT_TRANS_TABLES,ERROR_FOR_DIVISION_BY_ZERO,NO_ENGINE_SUBSTITUTION",
        "character_set_results": "utf8mb4",
    }
)
"""Session variables every connection of a MySQL source sets (values as ``SELECT
@@session.<name>`` shows them)."""

DUMP_CONV: Mapping[Any, Any] = MappingProxyType(
    {k: v for k, v in converters.conversions.items() if not isinstance(k, int)}
)
"""PyMySQL ``conv`` of the dump connection: PyMySQL's encoders of Python parameter types,
no decoder of result column types, so every cell is the server's text."""

BINLOG_READER_OPTIONS: Mapping[str, object] = MappingProxyType(
    {
        # With True, mysql-replication drops undecodable bytes: the log would differ.
        "ignore_decode_errors": False,
    }
)
"""Keyword arguments of ``BinLogStreamReader`` that the values depend on.  Do not pass
``is_mariadb`` (it ignores file/position resumption); nothing else changes values."""


def session_init_command() -> str:
    """The ``SET`` statement of :data:`MY_SESSION_SETTINGS` (PyMySQL's ``init_command``)."""
    assignments = ", ".join(f"{name} = '{value}'" for name, value in MY_SESSION_SETTINGS.items())
    return "SET SESSION " + assignments


def dump_connection_options() -> dict[str, object]:
    """Keyword arguments for ``pymysql.connect`` of a dump (chunk) connection, besides the
    host, port, credentials and database; the default cursor (tuples) is expected."""
    return {
        "charset": "utf8mb4",
        "use_unicode": True,
        "conv": dict(DUMP_CONV),
        "init_command": session_init_command(),
    }
