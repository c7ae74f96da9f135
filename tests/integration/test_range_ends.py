"""The ends of a parallel window's key ranges (``key_after``), on both sources: the key a
chunk of that many rows would end at, found by a SELECT of the key columns only.

The proof that only the key columns are read: a role that may SELECT the key column and no
other finds the ends, and may not read a chunk. (The table's description is read first by
a role that may read it all, as the worker's catalog reads are.) On PostgreSQL, the plan
of that SELECT is an index-only scan.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable, Iterator
from typing import Any, Protocol

import pytest
from psycopg.conninfo import make_conninfo

from dblog_worker import config as config_module
from dblog_worker.dump.requests import KeyTexts
from dblog_worker.dump.row_filter import RowFilter
from dblog_worker.errors import DumpFailed
from dblog_worker.mysql import catalog as my_catalog
from dblog_worker.mysql.connection import connect as my_connect
from dblog_worker.mysql.options import parse_dsn
from dblog_worker.mysql.reads import CapturedTables
from dblog_worker.pg import queries as pg_queries
from dblog_worker.pg.connection import connect_source as pg_connect
from dblog_worker.pg.reads import PgChunkReader
from dblog_worker.source import Chunk
from tests.integration.harness import HOSTILE, Backend, MariaDatabase

ROWS = 5000  # keys 10, 20, ..., 50000


class Reader(Protocol):
    def read_chunk(self, table: str, after: KeyTexts | None, upper: KeyTexts,
                   limit: int, row_filter: RowFilter | None = None) -> Chunk: ...

    def key_after(self, table: str, after: KeyTexts | None, upper: KeyTexts,
                  offset: int, row_filter: RowFilter | None = None) -> KeyTexts | None: ...


@dataclasses.dataclass
class Readers:
    """A chunk reader of the source on a connection that can be swapped: the whole
    table's reader's (``full``) or the key column's reader's (``keys_only``)."""

    reader: Reader
    use_keys_only: Callable[[], None]
    explain: Callable[[str, list[Any]], str]  # a statement's plan, as the worker runs it


def _pg_readers(backend: Backend, table: str, role: str) -> Iterator[Readers]:
    key = backend.db.ident(HOSTILE.key)
    backend.execute(f'CREATE ROLE "{role}" LOGIN')
    backend.execute(f'GRANT USAGE ON SCHEMA public TO "{role}"')
    backend.execute(f"GRANT SELECT ({key}) ON {backend.db.sql(table)} TO \"{role}\"")
    source = config_module.load(backend.config_path([table])).source
    full = pg_connect(source)
    limited = pg_connect(dataclasses.replace(source, dsn=make_conninfo(source.dsn, user=role)))
    conn = [full]
    reader = PgChunkReader(source, lambda table, document: 1, lambda: conn[0])

    def use_keys_only() -> None:
        reader.close()  # its cursor is the other connection's
        conn[0] = limited

    def explain(sql: str, params: list[Any]) -> str:
        rows = full.execute(f"EXPLAIN {sql}".encode(), params).fetchall()
        return "\n".join(str(row[0]) for row in rows)

    try:
        full.execute(f"VACUUM ANALYZE {backend.db.sql(table)}".encode(), ())
        yield Readers(reader, use_keys_only, explain)
    finally:
        full.close()
        limited.close()
        backend.execute(f"REVOKE ALL ON {backend.db.sql(table)} FROM \"{role}\"")
        backend.execute(f'REVOKE ALL ON SCHEMA public FROM "{role}"')
        backend.execute(f'DROP ROLE "{role}"')


def _my_readers(backend: Backend, table: str, user: str) -> Iterator[Readers]:
    assert isinstance(backend.db, MariaDatabase)
    key = backend.db.ident(HOSTILE.key)
    with backend.connect() as session:  # run: the names' %% read back as %
        session.run(f"CREATE USER '{user}'@'%%' IDENTIFIED BY 'pw'")
        session.run(f"GRANT SELECT ({key}) ON {backend.db.sql(table)} TO '{user}'@'%%'")
    dsn = parse_dsn(backend.db.dsn)
    full = my_connect(backend.db.dsn)
    limited = my_connect(dataclasses.replace(dsn, user=user, password="pw").url())
    conn = [full]
    reader = CapturedTables("src", [table], lambda: conn[0], lambda table, document: 1)

    def use_keys_only() -> None:
        conn[0] = limited

    def explain(sql: str, params: list[Any]) -> str:
        with full.cursor() as cursor:
            cursor.execute(f"EXPLAIN {sql}", params)
            return "\n".join(" ".join(str(c) for c in row) for row in cursor.fetchall())

    try:
        yield Readers(reader, use_keys_only, explain)
    finally:
        full.close()
        limited.close()
        backend.execute(f"DROP USER '{user}'@'%'")  # no parameters: % is %


@pytest.fixture
def readers(backend: Backend) -> Iterator[Readers]:
    backend.use(HOSTILE)
    backend.create(backend.t1, ROWS)
    name = f"dblog_keys_{uuid.uuid4().hex[:8]}"
    if backend.kind == "postgresql":
        yield from _pg_readers(backend, backend.t1, name)
    else:
        yield from _my_readers(backend, backend.t1, name)


def test_range_ends_are_where_chunks_end(backend: Backend, readers: Readers) -> None:
    """The n-th key after a key (from the first, up to the bound) is the last key of the
    chunk of n rows there; None where fewer keys are left."""
    table, upper = backend.t1, (str(10 * ROWS),)
    reader = readers.reader
    for after, offset in [(None, 7), (("70",), 7), (("75",), 1), (("100",), 600),
                          (("49930",), 7)]:
        end = reader.key_after(table, after, upper, offset)
        assert end == reader.read_chunk(table, after, upper, offset).last_key, (after, offset)
    assert reader.key_after(table, None, upper, 7) == ("70",)
    assert reader.key_after(table, ("100",), upper, 600) == ("6100",)
    assert reader.key_after(table, ("49930",), upper, 8) is None  # 7 keys left
    assert reader.key_after(table, None, ("50",), 6) is None  # 5 keys up to the bound
    assert reader.key_after(table, None, ("50",), 5) == ("50",)


def test_range_ends_read_only_the_key_columns(backend: Backend, readers: Readers) -> None:
    table, upper = backend.t1, (str(10 * ROWS),)
    reader = readers.reader
    reader.read_chunk(table, None, upper, 1)  # the table's description, read in full
    readers.use_keys_only()
    assert reader.key_after(table, None, upper, 7) == ("70",)
    assert reader.key_after(table, ("70",), upper, 1000) == ("10070",)
    assert reader.key_after(table, ("49990",), upper, 1) == ("50000",)
    assert reader.key_after(table, ("50000",), upper, 1) is None
    with pytest.raises(DumpFailed, match="may not read"):
        reader.read_chunk(table, None, upper, 7)


def test_range_ends_are_read_from_the_index(backend: Backend, readers: Readers) -> None:
    """PostgreSQL: an index-only scan (no heap row read for the keys skipped); MariaDB: the
    primary key's index, covering the SELECT (``Using index``)."""
    if backend.kind == "postgresql":
        pg_shape = pg_queries.TableShape("public", backend.t1.split(".", 1)[1],
                                         (HOSTILE.key,), ("integer",))
        plan = readers.explain(pg_queries.key_after_sql(pg_shape, first=False),
                               [70, 50000, 999])
        assert "Index Only Scan" in plan, plan
    else:
        my_shape = my_catalog.TableShape(backend.t1, (HOSTILE.key, HOSTILE.version,
                                                      HOSTILE.payload), (HOSTILE.key,))
        params = [*my_catalog.after_params([70]), *my_catalog.at_most_params([50000]), 999]
        plan = readers.explain(my_catalog.key_after_sql(my_shape, first=False), params)
        assert "PRIMARY" in plan and "Using index" in plan, plan


def test_a_range_of_another_key_shape_fails_the_dump(backend: Backend,
                                                     readers: Readers) -> None:
    """Keys of another arity than the table's key (it changed since the dump began) fail
    the dump with a message that says so, for a range's end as for a chunk."""
    table, upper = backend.t1, (str(10 * ROWS),)
    reader = readers.reader
    for call in (lambda: reader.key_after(table, ("10", "1"), upper, 7),
                 lambda: reader.read_chunk(table, ("10", "1"), upper, 7)):
        with pytest.raises(DumpFailed, match=r"primary key of .* (changed|any more)"):
            call()
