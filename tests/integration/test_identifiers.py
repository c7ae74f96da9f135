"""Any name through the drivers' own placeholder handling: every statement dblog builds
keeps the name intact and its parameters in number and place.

psycopg and PyMySQL read ``%`` in a statement run with parameters as a placeholder
(PyMySQL formats with Python's ``%``: a name holding ``%s`` would take a key value). For
names drawn by hypothesis (any character but NUL; a MySQL name has no trailing space, at
most 64 characters, none beyond the BMP), each builder's statement is rendered by the
driver's ``mogrify``, next to the same statement built with plain stand-ins
(``zq0xw``, ``zq1xw``, ...) and the same parameters. The first must be the second with each
stand-in's SQL spelling replaced by the name's (quoted, ``%`` single): then the driver read
nothing in a name as a placeholder, changed no name, and put every parameter where the
plain statement has it.

``mogrify`` needs a connection for the encoding and the escaping rules; nothing is sent.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import psycopg
import pymysql
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dblog_worker.config import TargetConfig, name_problem
from dblog_worker.merge.column_types import Encoding, SourceColumn
from dblog_worker.merge.plan import Batch
from dblog_worker.mysql import catalog as my_queries
from dblog_worker.mysql import target as my_target
from dblog_worker.mysql.column_model import Kind, MyColumn
from dblog_worker.mysql.options import MYSQL
from dblog_worker.mysql.target import MySQLTarget
from dblog_worker.pg import queries as pg_queries
from dblog_worker.pg import target as pg_target
from dblog_worker.pg.options import POSTGRESQL
from dblog_worker.verify import ranges
from dblog_worker.verify import sql as vs
from dblog_worker.verify.sql import Column, Family, TableDescription
from tests.services import MariaDBServer, PostgresServer

CLASSICS = ["disc%", "a%sb", "%%", 'x"y', "a`b", "with space", "dot.ted", "naïve ünïcode ☃",
            "select", "order", '"', "%(cut)s", "%s%s", "'", "\\", "$1", "?", "%"]
NAMES = 6  # n0: a schema (no dot), n1: a table, n2, n3: key columns, n4: a type, n5: column

Build = Callable[[Sequence[str]], str]


def name_strategy(kind: str, *, dot: bool = True) -> st.SearchStrategy[str]:
    top = 0xFFFF if kind == MYSQL else 0x10FFFF
    characters = st.characters(codec="utf-8", max_codepoint=top, exclude_characters="\x00")
    specials = st.sampled_from(list("%s()\"`'.\\ $?:x"))
    drawn = (st.sampled_from(CLASSICS) | st.text(specials, min_size=1, max_size=12)
             | st.text(characters, min_size=1, max_size=16))
    return drawn.filter(lambda n: name_problem(kind, n) is None and (dot or "." not in n))


def names_strategy(kind: str) -> st.SearchStrategy[list[str]]:
    """A schema without a dot (dblog splits ``schema.table`` at the first one), then names
    distinct without case (MySQL compares column names so)."""
    return st.tuples(
        name_strategy(kind, dot=False),
        st.lists(name_strategy(kind), min_size=NAMES - 1, max_size=NAMES - 1,
                 unique_by=str.casefold),
    ).map(lambda drawn: [drawn[0], *drawn[1]])


STAND_INS = [f"zq{i}xw" for i in range(NAMES)]


# -- the builders -----------------------------------------------------------------------------


def _pg_shape(n: Sequence[str]) -> pg_queries.TableShape:
    return pg_queries.TableShape(n[0], n[1], (n[2], n[3]),
                                 (pg_queries.quote_ident(n[4]), "integer"))


def _my_shape(n: Sequence[str]) -> my_queries.TableShape:
    return my_queries.TableShape(f"{n[0]}.{n[1]}", (n[2], n[3], n[5]), (n[2], n[3]))


def _pg_batch(n: Sequence[str]) -> Batch:
    columns = (SourceColumn(n[2], POSTGRESQL, "int4", Encoding.TEXT),
               SourceColumn(n[3], POSTGRESQL, "bytea", Encoding.BASE64),
               SourceColumn(n[5], POSTGRESQL, "_text", Encoding.ARRAY, element="text"))
    return Batch("src", "public.src", f"{n[0]}.{n[1]}", (), 0, 0, "", "", columns,
                 (n[2], n[3]))


def _pg_types(n: Sequence[str]) -> dict[str, str]:
    return {n[2]: "integer", n[3]: pg_queries.quote_ident(n[4]), n[5]: "text[]"}


def _my_batch(n: Sequence[str]) -> Batch:
    columns = (SourceColumn(n[2], MYSQL, "integer", Encoding.TEXT),
               SourceColumn(n[3], MYSQL, "text", Encoding.TEXT),
               SourceColumn(n[5], MYSQL, "binary", Encoding.BASE64))
    return Batch("src", "db.src", f"{n[0]}.{n[1]}", (), 0, 0, "", "", columns, (n[2], n[3]))


_MY_TYPES = ("bigint", "varchar(384)", "longblob")
_MY_TARGET = MySQLTarget(TargetConfig(MYSQL, "mysql://u@h:3306"))


def _description(dialect: str, n: Sequence[str]) -> TableDescription:
    if dialect == POSTGRESQL:
        columns = (Column(n[2], "int4", Family.NUMBER, cast="integer"),
                   Column(n[3], "text", Family.TEXT, cast=pg_queries.quote_ident(n[4]),
                          collation="en_US"),
                   Column(n[5], "float8", Family.FLOAT, cast="double precision"))
    else:
        columns = (Column(n[2], "int", Family.NUMBER, native=MyColumn(n[2], Kind.INTEGER)),
                   Column(n[3], "varchar", Family.TEXT, collation="utf8mb4_bin",
                          native=MyColumn(n[3], Kind.TEXT)),
                   Column(n[5], "double", Family.FLOAT, native=MyColumn(n[5], Kind.DOUBLE)))
    return TableDescription(dialect, f"{n[0]}.{n[1]}", columns, (n[2], n[3]))


def _verify(source: str, target: str, side: str,
            query: Callable[[vs.SideSql], str]) -> Build:
    def build(n: Sequence[str]) -> str:
        plan = vs.plan(_description(source, n), _description(target, n))
        return query(plan.source if side == "source" else plan.target)

    return build


def _range_queries(source: str, target: str, side: str) -> dict[str, Build]:
    queries: dict[str, Callable[[vs.SideSql], str]] = {
        "summary": lambda s: ranges.summary_sql(s, lower=True, upper=True, buckets=3),
        "boundary": lambda s: ranges.boundary_sql(s, lower=True),
        "split": lambda s: ranges.split_sql(s, lower=True, upper=False),
        "rows": lambda s: ranges.rows_sql(s, lower=False, upper=True),
        "lookup": lambda s: ranges.lookup_sql(s, 2),
    }
    return {f"verify {source}->{target} {side} {name}": _verify(source, target, side, query)
            for name, query in queries.items()}


PG_BUILDERS: dict[str, Build] = {
    "source chunk": lambda n: pg_queries.chunk_sql(_pg_shape(n), first=False),
    "source first chunk": lambda n: pg_queries.chunk_sql(_pg_shape(n), first=True),
    "source range end": lambda n: pg_queries.key_after_sql(_pg_shape(n), first=False),
    "source first range end": lambda n: pg_queries.key_after_sql(_pg_shape(n), first=True),
    "source keys": lambda n: pg_queries.keys_sql(_pg_shape(n)),
    "source upper bound": lambda n: pg_queries.upper_bound_sql(_pg_shape(n)),
    "source key check": lambda n: pg_queries.check_key_values_sql(pg_queries.quote_ident(n[4])),
    "merge upsert": lambda n: pg_target.upsert_sql(_pg_batch(n), _pg_types(n), "dblog"),
    "merge delete": lambda n: pg_target.delete_sql(_pg_batch(n), _pg_types(n), "dblog"),
    "repair position": lambda n: pg_target.row_position_sql(f"{n[0]}.{n[1]}",
                                                     [n[2], n[3]], _pg_types(n)),
    "repair delete": lambda n: pg_target.delete_row_sql(f"{n[0]}.{n[1]}", [n[2], n[3]],
                                                 _pg_types(n)),
    **_range_queries(POSTGRESQL, POSTGRESQL, "source"),
    **_range_queries(POSTGRESQL, MYSQL, "source"),
    **_range_queries(MYSQL, POSTGRESQL, "target"),
}
MY_BUILDERS: dict[str, Build] = {
    "source chunk": lambda n: my_queries.chunk_sql(_my_shape(n), first=False),
    "source first chunk": lambda n: my_queries.chunk_sql(_my_shape(n), first=True),
    "source range end": lambda n: my_queries.key_after_sql(_my_shape(n), first=False),
    "source first range end": lambda n: my_queries.key_after_sql(_my_shape(n), first=True),
    "source keys": lambda n: my_queries.keys_sql(_my_shape(n), 2),
    "source upper bound": lambda n: my_queries.upper_bound_sql(_my_shape(n)),
    "merge upsert": lambda n: _MY_TARGET.upsert_sql(
        _my_batch(n), dict(zip((n[2], n[3], n[5]), _MY_TYPES, strict=True))),
    "merge delete": lambda n: _MY_TARGET.delete_sql(
        _my_batch(n), dict(zip((n[2], n[3], n[5]), _MY_TYPES, strict=True))),
    "repair position": lambda n: my_target.row_position_sql(f"{n[0]}.{n[1]}", [n[2], n[3]]),
    "repair delete": lambda n: my_target.delete_row_sql(f"{n[0]}.{n[1]}", [n[2], n[3]]),
    **_range_queries(MYSQL, MYSQL, "source"),
    **_range_queries(MYSQL, POSTGRESQL, "source"),
    **_range_queries(POSTGRESQL, MYSQL, "target"),
}


# -- the check --------------------------------------------------------------------------------

_PLACEHOLDER = re.compile(r"%%|%\((\w+)\)s|%s")


def parameters(statement: str) -> tuple[Any, ...] | dict[str, Any]:
    """Distinct values for the placeholders of ``statement`` (positional or named)."""
    found = [m for m in _PLACEHOLDER.finditer(statement) if m.group() != "%%"]
    named = sorted({m.group(1) for m in found if m.group(1)})
    if named:
        return {name: 7_000_001 + i for i, name in enumerate(named)}
    return tuple(7_000_001 + i for i in range(len(found)))


def _json_path_literal(name: str) -> str:
    """The string literal ``'$."name"'`` as MySQL reads it (JSON, then SQL escapes)."""
    path = '$."' + name.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return "'" + path.replace("\\", "\\\\").replace("'", "''") + "'"


def spellings(kind: str, stand_in: str, name: str) -> dict[str, str]:
    """How ``stand_in`` is spelled in a rendered statement -> how ``name`` must be."""
    if kind == MYSQL:
        return {my_queries.quote_ident(stand_in): my_queries.quote_ident(name),
                _json_path_literal(stand_in): _json_path_literal(name)}
    return {pg_queries.quote_ident(stand_in): pg_queries.quote_ident(name)}


def check(kind: str, build: Build, names: Sequence[str],
          mogrify: Callable[[str, Any], str]) -> None:
    plain = build(STAND_INS)
    params = parameters(plain)
    expected_text = mogrify(plain, params)
    replace: dict[str, str] = {}
    for stand_in, name in zip(STAND_INS, names, strict=True):
        replace |= spellings(kind, stand_in, name)
    if "stage_" in plain:  # a merge's staging table is named after its tables
        quote = pg_queries.quote_ident if kind == POSTGRESQL else my_queries.quote_ident
        batch = _pg_batch if kind == POSTGRESQL else _my_batch
        replace[quote(batch(STAND_INS).stage)] = quote(batch(names).stage)
    pattern = re.compile("|".join(re.escape(k) for k in sorted(replace, key=len, reverse=True)))
    expected = pattern.sub(lambda m: replace[m.group()], expected_text)
    rendered = mogrify(build(names), params)
    assert rendered == expected


@pytest.fixture(scope="module")
def pg_mogrify(postgres_server: PostgresServer) -> Iterator[Callable[[str, Any], str]]:
    with psycopg.connect(postgres_server.dsn()) as conn:
        cursor = psycopg.ClientCursor(conn)
        yield lambda statement, params: cursor.mogrify(statement, params)


@pytest.fixture(scope="module")
def my_mogrify(mariadb_server: MariaDBServer) -> Iterator[Callable[[str, Any], str]]:
    connection = pymysql.connect(**mariadb_server.connect_args())
    with connection, connection.cursor() as cursor:
        yield lambda statement, params: cursor.mogrify(statement, params)


PROPERTY = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.parametrize("builder", sorted(PG_BUILDERS))
@PROPERTY
@given(names=names_strategy(POSTGRESQL))
def test_postgresql_statements_keep_any_name(builder: str, names: list[str],
                                             pg_mogrify: Callable[[str, Any], str]) -> None:
    check(POSTGRESQL, PG_BUILDERS[builder], names, pg_mogrify)


@pytest.mark.parametrize("builder", sorted(MY_BUILDERS))
@PROPERTY
@given(names=names_strategy(MYSQL))
def test_mysql_statements_keep_any_name(builder: str, names: list[str],
                                        my_mogrify: Callable[[str, Any], str]) -> None:
    check(MYSQL, MY_BUILDERS[builder], names, my_mogrify)


def test_the_check_catches_a_name_read_as_a_placeholder(
        pg_mogrify: Callable[[str, Any], str], my_mogrify: Callable[[str, Any], str]) -> None:
    """The property fails for a builder that quotes without doubling ``%``."""
    def unsafe_pg(n: Sequence[str]) -> str:
        return f"SELECT {pg_queries.quote_ident(n[2])} FROM t WHERE k = %s"

    def unsafe_my(n: Sequence[str]) -> str:
        return f"SELECT {my_queries.quote_ident(n[2])} FROM t WHERE k = %s"

    names = ["s", "t", "a%sb", "b", "c", "d"]
    with pytest.raises((AssertionError, psycopg.ProgrammingError)):
        check(POSTGRESQL, unsafe_pg, names, pg_mogrify)
    with pytest.raises((AssertionError, pymysql.err.ProgrammingError)):
        check(MYSQL, unsafe_my, names, my_mogrify)
    silent = ["s", "t", "%%", "b", "c", "d"]  # no error: the name just loses a %
    with pytest.raises(AssertionError):
        check(POSTGRESQL, unsafe_pg, silent, pg_mogrify)
    with pytest.raises(AssertionError):
        check(MYSQL, unsafe_my, silent, my_mogrify)
