"""The connections of a MySQL/MariaDB source, their session options, and what their
errors mean to the worker.

:func:`connect` opens the autocommit connection of the catalog, the watermarks and the
chunk SELECTs; :func:`connection_errors` turns a lost connection into
:class:`SourceUnavailable` (the session ends) or, on a read replica, :class:`ReplicaBehind`
(the dump waits); :func:`select_error` says what a dump's SELECT that failed means.

Every connection sets :data:`MY_SESSION_SETTINGS`; a dump (chunk) connection is opened with
:func:`dump_connection_options` (``conv=DUMP_CONV``: every cell is the server's text, a
:data:`Cell`); the binary log reader takes :data:`BINLOG_READER_OPTIONS`.  Why, and what the
cells become: the module docstring of :mod:`dblog_worker.mysql.values`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from types import MappingProxyType
from typing import Any

import pymysql
from pymysql import converters

from dblog_worker.errors import ChunkStale, DblogError, DumpFailed, ReplicaBehind, SourceUnavailable
from dblog_worker.mysql.options import parse_dsn
from dblog_worker.mysql.resultset import DumpConnection

__all__ = [
    "BINLOG_READER_OPTIONS",
    "DENIED",
    "DUMP_CONV",
    "LOCK_WAIT_S",
    "MY_SESSION_SETTINGS",
    "Cell",
    "columns_changed",
    "connect",
    "connection_errors",
    "dump_connection_options",
    "replica_errors",
    "select_error",
    "session_init_command",
]

# The longest a read waits for a lock (s): the chunk is read again later, the log goes on.
LOCK_WAIT_S = 1

# Errors that mean the server is gone or restarting: the session retries.
_CONNECTION_ERRORS = (pymysql.err.OperationalError, pymysql.err.InterfaceError)
_NO_TABLE, _NO_COLUMN, DENIED = 1146, 1054, (1044, 1142, 1143, 1227)
# The connection is gone (server gone away, lost, refused, shut down, killed, too many
# connections): a chunk SELECT failing so is retried by a new session; any other error
# is the statement's (a timeout, a KILL QUERY, ...) and fails the dump.
_LOST = frozenset({1040, 1053, 1927, 2002, 2003, 2006, 2013, 2014, 2055, 4031})
_LOCK_WAIT = 1205  # lock_wait_timeout (a DDL statement's metadata lock) or a row lock
_TABLE_DEF_CHANGED = 1412  # a snapshot older than the table's definition (a DDL after it)
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


@contextmanager
def connection_errors(what: str, replica: bool = False) -> Iterator[None]:
    """A statement's connection error becomes SourceUnavailable (the session ends), or on
    a read replica ReplicaBehind (the dump waits, the log goes on), unless it is the
    statement's own: a privilege denied, a table or column missing."""
    try:
        yield
    except _CONNECTION_ERRORS as exc:
        code = exc.args[0] if exc.args else None
        if code in DENIED or code in (_NO_TABLE, _NO_COLUMN):
            raise
        if replica:
            raise ReplicaBehind(f"{what}: the read replica is unreachable ({exc}); the dump "
                                "waits for it") from exc
        raise SourceUnavailable(f"{what}: the source database is unreachable: {exc}") from exc


def replica_errors(what: str) -> AbstractContextManager[None]:
    """:func:`connection_errors` of a read replica."""
    return connection_errors(what, replica=True)


def connect(dsn: str, errors: Callable[[str], Any] = connection_errors) -> DumpConnection:
    """A connection in autocommit for the catalog, watermarks and chunk SELECTs; one its
    TLS fails is a ConfigError (no retry can mend it)."""
    parsed = parse_dsn(dsn)
    with errors("connecting"), parsed.tls_errors():
        conn = DumpConnection(**parsed.connect_args(), **dump_connection_options(),
                              autocommit=True, connect_timeout=10)
        with conn.cursor() as cursor:
            cursor.execute("SET SESSION lock_wait_timeout = %s, innodb_lock_wait_timeout = %s",
                           (LOCK_WAIT_S, LOCK_WAIT_S))
    return conn


def columns_changed(exc: pymysql.MySQLError) -> bool:
    """Whether a SELECT failed because its table's columns changed (read them again)."""
    return bool(exc.args) and exc.args[0] in (_TABLE_DEF_CHANGED, _NO_COLUMN)


def select_error(table: str, exc: pymysql.MySQLError, *, replica: bool) -> DblogError:
    """What a dump's SELECT of ``table`` that raised ``exc`` means (``replica``: it ran on
    the read replica): a lost connection ends the session (a lost replica holds the dump),
    a refused statement fails the dump, a column gone or a lock makes the chunk stale."""
    code = exc.args[0] if exc.args else None
    if isinstance(exc, pymysql.err.InterfaceError) or code in _LOST:
        if replica:
            return ReplicaBehind(f"reading {table}: the read replica is unreachable "
                                 f"({exc}); the dump waits for it")
        return SourceUnavailable(f"reading {table}: the source database is unreachable: "
                                 f"{exc}")
    if code == _NO_TABLE:
        return DumpFailed(f"table {table} does not exist any more")
    if code in DENIED:
        return DumpFailed(f"the worker may not read {table}: {exc}")
    if code == _TABLE_DEF_CHANGED:
        return ChunkStale(f"{table} was altered after the chunk's snapshot began: the "
                          "chunk is read again")
    if code == _LOCK_WAIT:
        return ChunkStale(f"{table} is locked (a DDL statement, LOCK TABLES?): the chunk "
                          "is read later")
    if code == _NO_COLUMN:  # a key column renamed or dropped
        return ChunkStale(f"the columns of {table} changed ({exc}): the chunk is read "
                          "again with the new columns")
    return DumpFailed(f"the source refused a dump's SELECT of {table}: {exc}")
