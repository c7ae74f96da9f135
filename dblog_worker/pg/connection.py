"""PostgreSQL connections of the worker, and what their errors mean to it.

The source's autocommit connection (catalog reads, watermarks, chunk SELECTs) and the
read replica's are opened here with the worker's session settings (``pg/values.py``) and a
short lock timeout; psycopg's errors become the worker's: a lost connection ends the
session (:class:`SourceUnavailable`) or, on the replica, holds the dump
(:class:`ReplicaBehind`); a dump's SELECT that the server refuses fails the dump, makes the
chunk stale or waits (:func:`select_error`).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg.types.string import TextLoader

from dblog_worker.config import SourceConfig
from dblog_worker.errors import (
    ChunkStale,
    DblogError,
    DumpFailed,
    ReplicaBehind,
    SourceUnavailable,
)
from dblog_worker.pg.values import libpq_options

Connection = psycopg.Connection[tuple[Any, ...]]
# The longest a SELECT waits for a lock (a table a DDL statement holds, on the primary or
# replayed on a standby): the chunk is read again later, and the log goes on meanwhile.
LOCK_TIMEOUT = "200ms"
TextRow = tuple[str | None, ...]


@contextmanager
def connection_errors(what: str) -> Iterator[None]:
    """A lost connection is SourceUnavailable: the session ends, the next one reconnects."""
    try:
        yield
    except psycopg.OperationalError as exc:
        raise SourceUnavailable(f"{what}: the source database is unreachable: {exc}") from exc


@contextmanager
def replica_errors(what: str) -> Iterator[None]:
    """A read replica that cannot be reached holds the dump, not the log."""
    try:
        yield
    except psycopg.OperationalError as exc:
        raise ReplicaBehind(f"{what}: the read replica is unreachable ({exc}); "
                            "the dump waits for it") from exc


def connected(conn: Connection | None) -> Connection:
    """``conn`` if it is open, else SourceUnavailable."""
    if conn is None or conn.closed:
        raise SourceUnavailable("not connected to the source database")
    return conn


def connect_source(config: SourceConfig) -> Connection:
    """The source's autocommit connection: catalog reads, watermarks, chunk SELECTs."""
    with connection_errors("connecting"):
        return psycopg.connect(
            config.dsn, autocommit=True,
            options=f"{libpq_options()} -c lock_timeout={LOCK_TIMEOUT}",
            application_name=f"dblog-{config.name}",
        )


def connect_replica(source: SourceConfig) -> Connection:
    """An autocommit connection to the replica with the worker's session settings."""
    assert source.replica is not None
    with replica_errors("connecting to the read replica"):
        return psycopg.connect(source.replica.dsn, autocommit=True,
                               options=f"{libpq_options()} -c lock_timeout={LOCK_TIMEOUT}",
                               application_name=f"dblog-{source.name}-reads")


def select_error(table: str, exc: psycopg.Error, *, lost: bool, replica: bool) -> DblogError:
    """What a dump's SELECT of ``table`` that raised ``exc`` means (``lost``: its
    connection is gone; ``replica``: it ran on the read replica). A lost connection ends
    the session (a lost replica holds the dump); a statement the server refused (a
    timeout, a cancel, ...) fails the dump; a lock or a column gone makes the chunk stale
    (the caller reads the table's columns again)."""
    if lost:
        if replica:
            return ReplicaBehind(f"reading {table}: the read replica is unreachable "
                                 f"({exc}); the dump waits for it")
        return SourceUnavailable(f"reading {table}: the source database is unreachable: {exc}")
    if replica and isinstance(exc, psycopg.errors.SerializationFailure):
        return ReplicaBehind(f"reading {table} on the read replica: "
                             f"{exc.diag.message_primary} (a recovery conflict); "
                             "the chunk is read again later")
    if isinstance(exc, psycopg.errors.UndefinedTable):
        return DumpFailed(f"table {table} does not exist any more")
    if isinstance(exc, psycopg.errors.InsufficientPrivilege):
        return DumpFailed(f"the worker may not read {table}: {exc}")
    if isinstance(exc, psycopg.errors.LockNotAvailable):
        return ChunkStale(f"{table} is locked (a DDL statement, LOCK TABLE?): "
                          "the chunk is read later")
    if isinstance(exc, psycopg.errors.UndefinedColumn):  # a key column renamed
        return ChunkStale(f"the columns of {table} changed: {exc.diag.message_primary}; "
                          "the chunk is read again with the new columns")
    return DumpFailed(f"the source refused a dump's SELECT of {table}: "
                      f"{exc.diag.message_primary or exc}")


@functools.cache
def _builtin_oids() -> frozenset[int]:
    oids = set()
    for info in psycopg.postgres.types:
        oids.add(info.oid)
        if info.array_oid:
            oids.add(info.array_oid)
    return frozenset(oids)


def text_cursor(conn: Connection) -> psycopg.Cursor[TextRow]:
    """A cursor that loads every value as its text output, in C (psycopg's TextLoader).

    Types psycopg does not know (enums, domains of this database) load as text anyway.
    """
    cursor = conn.cursor()
    for oid in _builtin_oids():
        cursor.adapters.register_loader(oid, TextLoader)
    return cursor
