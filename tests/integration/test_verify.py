"""dblog verify against real servers, for every pair of source and target kinds.

Each scenario creates a source table and a target table with the types the merge gives it
(docs/verify.md), fills both with the same rows of edge values, checks that verify finds
them equal, then corrupts the target on purpose (changed values, NULL for '' and back,
deleted rows including the smallest and largest key, extra rows below, between and above
the source's keys) and checks that verify reports exactly those keys, by kind, in the
form `dblog dump --keys-file` takes: the keys file is read back with `parse_keys` and the
source's own primary-key read (`read_keys`) finds the missing and changed keys and not the
extra ones.  The CLI runs in-process (`dblog_worker.cli.main`).
"""

from __future__ import annotations

import datetime as dt
import json
import math
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg
import pymysql
import pytest

from dblog_worker import config as config_module
from dblog_worker.cli import main
from dblog_worker.dialect import open_source
from dblog_worker.dump.requests import parse_keys
from dblog_worker.verify.command import VerifyOptions, verify
from tests.services import MariaDBServer, PostgresServer, free_port

UTC = dt.UTC
Row = tuple[Any, ...]


# --- databases --------------------------------------------------------------------------


@dataclass(frozen=True)
class Db:
    """One side: a PostgreSQL database or a MariaDB database on a server."""

    kind: str  # "postgresql" or "mysql"
    dsn: str  # as the configuration takes it
    schema: str  # PostgreSQL: public; MariaDB: the database
    connect_args: dict[str, Any] | None = None

    def table(self, name: str) -> str:
        return f"{self.schema}.{name}"

    def run(self, *statements: str | tuple[str, Sequence[Any]]) -> None:
        if self.kind == "postgresql":
            with psycopg.connect(self.dsn, autocommit=True) as conn:
                for statement in statements:
                    sql, params = (statement, None) if isinstance(statement, str) else statement
                    if params and isinstance(params[0], tuple | list):
                        conn.cursor().executemany(sql, params)
                    else:
                        conn.execute(sql, params)
            return
        assert self.connect_args is not None
        with pymysql.connect(**self.connect_args) as conn, conn.cursor() as cur:
            cur.execute("SET SESSION sql_mode = '', time_zone = '+00:00'")
            for statement in statements:
                sql, params = (statement, None) if isinstance(statement, str) else statement
                if params and isinstance(params[0], tuple | list):
                    cur.executemany(sql, params)
                else:
                    cur.execute(sql, params)


@pytest.fixture
def pg_source(pg_dsn: str) -> Db:
    return Db("postgresql", pg_dsn, "public")


@pytest.fixture
def pg_target(postgres_server: PostgresServer) -> Iterator[Db]:
    name = f"t_{uuid.uuid4().hex[:16]}"
    yield Db("postgresql", postgres_server.create_database(name), "public")
    postgres_server.drop_database(name)


@pytest.fixture
def my_source(mariadb_server: MariaDBServer, mariadb_database: str) -> Db:
    return Db("mysql", mariadb_server.url(), mariadb_database,
              mariadb_server.connect_args(mariadb_database))


@pytest.fixture
def my_target(mariadb_server: MariaDBServer) -> Iterator[Db]:
    name = mariadb_server.create_database(f"t_{uuid.uuid4().hex[:16]}")
    yield Db("mysql", mariadb_server.url(), name, mariadb_server.connect_args(name))
    mariadb_server.drop_database(name)


def write_config(tmp_path: Path, source: Db, target: Db, tables: Sequence[str]) -> Path:
    renames = ", ".join(f'"{source.table(t)}" = "{target.table(t)}"' for t in tables)
    path = tmp_path / "worker.toml"
    path.write_text(f"""
[source]
name = "verify"
kind = "{source.kind}"
dsn = "{source.dsn}"
tables = {json.dumps([source.table(t) for t in tables])}

[redis]
url = "redis://127.0.0.1:1/0"

[landing]
path = "{tmp_path / 'landing'}"

[target]
kind = "{target.kind}"
dsn = "{target.dsn}"
tables = {{ {renames} }}
""")
    return path


def run_verify(config: Path, capsys: pytest.CaptureFixture[str], *args: str
               ) -> tuple[int, dict[str, Any]]:
    code = main(["verify", "--config", str(config), "--json", *args])
    out = capsys.readouterr().out
    return code, json.loads(out) if out.strip() else {}


def keys_of(document: dict[str, Any], kind: str) -> list[Any]:
    (table,) = document["tables"]
    keys = [k[0] if len(k) == 1 else k for k in table[kind]]
    return sorted(keys, key=lambda k: (0, k, "") if isinstance(k, int) else (1, 0, json.dumps(k)))


def assert_dump_reads(config: Path, table: str, keys_file: Path, arity: int,
                      found: Sequence[Any], absent: Sequence[Any]) -> None:
    """The keys file is what `dblog dump --keys-file` takes: the source finds the rows of
    the missing and changed keys, and reports the extra ones as missing."""
    keys = parse_keys(json.loads(keys_file.read_text()), arity)
    source = open_source(config_module.load(config).source, lambda table, schema: 1)
    source.connect()
    try:
        assert source.tables.key_arity(table) == arity
        source.tables.check_keys(table, keys)
        chunk = source.chunks.read_keys(table, keys)
    finally:
        source.close()
    assert len(chunk.keys) == len(found)
    assert len(chunk.missing) == len(absent)


# --- the scenarios ----------------------------------------------------------------------


@dataclass(frozen=True)
class Spec:
    """A column: its source and target types, and values that cycle over the rows."""

    name: str
    source_type: str
    target_type: str
    values: Sequence[Any]
    to_target: Callable[[Any], Any] = lambda value: value


def utc(value: str | None) -> dt.datetime | None:
    return None if value is None else dt.datetime.fromisoformat(value).replace(tzinfo=UTC)


def bit(value: int | None) -> int | None:
    return value


DOUBLES = [1e23, 0.1 + 0.2, -0.0, 5e-324, 1.7976931348623157e308, 2.0**60 + 2**10,
           -1.2345e-05, 123456.789, -2.5, 9007199254740993.0, 1e15, None]
TEXTS = ["é😀", "", None, "a'b\"c\\d", " trailing ", "line\nbreak", "N", "3:abc", "x" * 300]
TIMES = ["-838:59:59", "00:00:00.5", "100:00:01.000001", "-00:00:01.25", "00:00:00", None]

MARIADB_TO_POSTGRESQL = [
    Spec("ti", "TINYINT", "bigint", [-128, 127, 0, None]),
    Spec("iu", "INT UNSIGNED", "numeric(20,0)", [0, 4294967295, 7]),
    Spec("bu", "BIGINT UNSIGNED", "numeric(20,0)", [18446744073709551615, 0, 1]),
    Spec("de", "DECIMAL(10,2)", "numeric",
         [Decimal("-12345678.90"), Decimal("0.00"), Decimal("1.50"), None, Decimal("10.00")]),
    Spec("fl", "FLOAT", "real", [0.1, -3.4028234663852886e38, 16777217.0, 0.0, None]),
    Spec("db", "DOUBLE", "double precision", DOUBLES),
    Spec("vc", "VARCHAR(300)", "text", TEXTS),
    Spec("ch", "CHAR(5)", "text", ["ab", "", "ü", None]),
    Spec("tx", "TEXT", "text", ["", "text 😀", None]),
    Spec("en", "ENUM('a','b','ü')", "text", ["a", "ü", None]),
    Spec("st", "SET('x','y')", "text", ["x,y", "", "y"]),
    Spec("js", "JSON", "json", ['{"a":  [1, 2.50]}', "[]", None, '"ü"']),
    Spec("bi", "BINARY(4)", "bytea", [b"\x00\x01\x02\x03", b"abcd", None]),
    Spec("vb", "VARBINARY(10)", "bytea", [b"", b"\xff\x00", None]),
    Spec("bl", "BLOB", "bytea", [bytes(range(256)), b"x"]),
    Spec("da", "DATE", "date", ["2024-02-29", "1000-01-01", "9999-12-31", None]),
    Spec("dt", "DATETIME(6)", "timestamp(6)",
         ["2024-02-29 12:34:56.789012", "1000-01-01 00:00:00", None]),
    Spec("ts", "TIMESTAMP(3) NULL", "timestamptz(3)",
         ["2038-01-19 03:14:07.999", "1970-01-01 00:00:01", None], utc),
    Spec("tm", "TIME(6)", "interval", TIMES),
    Spec("yr", "YEAR", "smallint", [2024, 1901, 2155, None]),
    Spec("bt", "BIT(10)", "numeric(20,0)", [0, 513, 1023, None], bit),
]

MARIADB_TO_MARIADB = [
    Spec("ti", "TINYINT", "BIGINT", [-128, 127, 0, None]),
    Spec("iu", "INT UNSIGNED", "BIGINT UNSIGNED", [0, 4294967295, 7]),
    Spec("bu", "BIGINT UNSIGNED", "BIGINT UNSIGNED", [18446744073709551615, 0, 1]),
    Spec("de", "DECIMAL(10,2)", "DECIMAL(65,2)",
         [Decimal("-12345678.90"), Decimal("0.00"), Decimal("1.50"), None]),
    Spec("fl", "FLOAT", "FLOAT", [0.1, -3.4028234663852886e38, 16777217.0, None]),
    Spec("db", "DOUBLE", "DOUBLE", DOUBLES),
    Spec("vc", "VARCHAR(300)", "LONGTEXT", TEXTS),
    Spec("ch", "CHAR(5)", "LONGTEXT", ["ab", "", "ü", None]),
    Spec("en", "ENUM('a','b','ü')", "ENUM('a','b','ü')", ["a", "ü", None]),
    Spec("st", "SET('x','y')", "SET('x','y')", ["x,y", "", "y"]),
    Spec("js", "JSON", "LONGTEXT", ['{"a":  [1, 2.50]}', "[]", None]),
    Spec("bi", "BINARY(4)", "BINARY(4)", [b"\x00\x01\x02\x03", b"abcd", None]),
    Spec("vb", "VARBINARY(10)", "LONGBLOB", [b"", b"\xff\x00", None]),
    Spec("da", "DATE", "DATE", ["2024-02-29", "0000-00-00", "2020-05-00", None]),  # as they are
    Spec("dt", "DATETIME(3)", "DATETIME(3)", ["2024-02-29 12:34:56.789", "1000-01-01", None]),
    Spec("ts", "TIMESTAMP(6) NULL", "TIMESTAMP(6) NULL",
         ["2038-01-19 03:14:07.999999", "1970-01-01 00:00:01", None]),
    Spec("tm", "TIME(6)", "TIME(6)", TIMES),
    Spec("yr", "YEAR", "YEAR", [2024, 1901, 2155, None]),
    Spec("bt", "BIT(10)", "BIGINT UNSIGNED", [0, 513, 1023, None], bit),
]

POSTGRESQL_TO_POSTGRESQL = [
    Spec("i2", "int2", "int2", [-32768, 32767, 0, None]),
    Spec("i8", "int8", "int8", [-9223372036854775808, 9223372036854775807, None]),
    Spec("nu", "numeric(10,2)", "numeric", [Decimal("-12345678.90"), Decimal("1.50"), None]),
    Spec("f4", "float4", "float4", [0.1, float("inf"), float("nan"), None]),
    Spec("f8", "float8", "float8", [*DOUBLES, float("-inf")]),
    Spec("bo", "bool", "bool", [True, False, None]),
    Spec("tx", "text", "text", TEXTS),
    Spec("vc", "varchar(20)", "varchar", ["é😀", "", None]),
    Spec("ch", "char(5)", "bpchar", ["ab", "", None]),
    Spec("by", "bytea", "bytea", [b"", b"\x00\xff", None]),
    Spec("da", "date", "date", ["2024-02-29", "infinity", "0044-03-15 BC", None]),
    Spec("ts", "timestamp(3)", "timestamp", ["2024-02-29 12:34:56.789", "-infinity", None]),
    Spec("tz", "timestamptz", "timestamptz", ["2024-02-29 12:34:56.789012+02", None]),
    Spec("ti", "time", "time", ["23:59:59.999999", None]),
    Spec("iv", "interval", "interval", ["1 mon 2 days -00:00:01.25", None]),
    Spec("uu", "uuid", "uuid", ["a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", None]),
    Spec("js", "json", "json", ['{"a":  1}', None]),
    Spec("jb", "jsonb", "jsonb", ['{"b": [1, 2.50], "a": null}', None]),
    Spec("ar", "int4[]", "int4[]", ["{1,NULL,3}", "{}", None]),
    Spec("bi", "bit(4)", "varbit", ["1010", None]),
    Spec("ip", "inet", "inet", ["10.0.0.1/8", "::1", None]),
]

POSTGRESQL_TO_MARIADB = [
    Spec("i2", "int2", "SMALLINT", [-32768, 32767, 0, None]),
    Spec("i4", "int4", "INT", [-2147483648, 2147483647, None]),
    Spec("i8", "int8", "BIGINT", [-9223372036854775808, 9223372036854775807, None]),
    Spec("nu", "numeric", "DECIMAL(65,30)",
         [Decimal("-12345678.90"), Decimal("1.5"), Decimal("0.000001"), Decimal("100"), None]),
    Spec("f4", "float4", "FLOAT", [0.1, -3.4028234663852886e38, 16777217.0, None]),
    Spec("f8", "float8", "DOUBLE", DOUBLES),
    Spec("bo", "bool", "BOOLEAN", [True, False, None]),
    Spec("tx", "text", "LONGTEXT", TEXTS),
    Spec("vc", "varchar(20)", "LONGTEXT", ["é😀", "", None]),
    Spec("ch", "char(5)", "LONGTEXT", ["ab", "", None],
         lambda v: None if v is None else v.ljust(5)),
    Spec("ba", "bytea", "LONGBLOB", [b"", b"\x00\xff", bytes(range(256)), None]),
    Spec("da", "date", "DATE", ["2024-02-29", "1000-01-01", None]),
    Spec("ts", "timestamp(3)", "DATETIME(6)", ["2024-02-29 12:34:56.789", "1970-01-01", None]),
    Spec("tz", "timestamptz", "DATETIME(6)", ["2024-02-29 12:34:56.789012+02", None],
         lambda v: None if v is None else "2024-02-29 10:34:56.789012"),
    Spec("ti", "time", "TIME(6)", ["23:59:59.999999", "00:00:00", None]),
    Spec("js", "json", "LONGTEXT", ['{"a":  1}', None]),
    Spec("jb", "jsonb", "LONGTEXT", ['{"b": [1, 2.50], "a": null}', None],
         lambda v: None if v is None else '{"a": null, "b": [1, 2.50]}'),
    Spec("uu", "uuid", "CHAR(36)", ["a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", None]),
]

IDS = list(range(0, 3000, 2))  # 1,500 rows: even keys, so odd ones are between them


def value(spec: Spec, column: int, row: int) -> Any:
    return spec.values[(row * 7 + column) % len(spec.values)]


def fill(source: Db, target: Db, specs: Sequence[Spec], name: str = "items") -> None:
    """Create the table on both sides (the target with the merge's extra column) and
    insert the same rows."""
    key_type = "BIGINT" if source.kind == "mysql" else "int8"
    target_key = "BIGINT" if target.kind == "mysql" else "int8"
    position = "CHAR(48)" if target.kind == "mysql" else "char(48)"

    def ddl(db: Db, key: str, types: Sequence[str], extra: str = "") -> str:
        columns = ", ".join(f"{s.name} {t}" for s, t in zip(specs, types, strict=True))
        return f"CREATE TABLE {db.table(name)} (id {key} PRIMARY KEY, {columns}{extra})"

    names = ", ".join(["id", *(s.name for s in specs)])
    marks = ", ".join(["%s"] * (len(specs) + 1))
    rows = [(k, *(value(s, c, i) for c, s in enumerate(specs))) for i, k in enumerate(IDS)]
    copies = [(k, *(s.to_target(value(s, c, i)) for c, s in enumerate(specs)), "p")
              for i, k in enumerate(IDS)]
    source.run(ddl(source, key_type, [s.source_type for s in specs]),
               (f"INSERT INTO {source.table(name)} ({names}) VALUES ({marks})", rows))
    target.run(ddl(target, target_key, [s.target_type for s in specs],
                   f", _dblog_position {position}"),
               (f"INSERT INTO {target.table(name)} ({names}, _dblog_position) "
                f"VALUES ({marks}, %s)", copies))


DELETED = (IDS[0], 100, 102, IDS[-1])
EXTRA = (-5, 1001, 10**12)
_picked: set[int] = set()


def row_where(specs: Sequence[Spec], name: str, wanted: Any) -> int:
    """A key whose row has ``wanted`` in column ``name``, not deleted, not picked before."""
    column = next(c for c, s in enumerate(specs) if s.name == name)
    key = next(k for i, k in enumerate(IDS) if value(specs[column], column, i) == wanted
               and k not in DELETED and k not in _picked)
    _picked.add(key)
    return key


def corrupt(target: Db, specs: Sequence[Spec], changes: Sequence[tuple[str, str, Any]]
            ) -> dict[str, list[int]]:
    """Change the target; returns the keys that now differ, by kind."""
    table = target.table("items")
    changed = []
    statements: list[str | tuple[str, Sequence[Any]]] = []
    for column, set_sql, row in changes:
        statements.append((f"UPDATE {table} SET {column} = {set_sql} WHERE id = %s", [row]))
        changed.append(row)
    deleted, extra = list(DELETED), list(EXTRA)
    statements.append((f"DELETE FROM {table} WHERE id IN (%s, %s, %s, %s)", deleted))
    statements += [(f"INSERT INTO {table} (id) VALUES (%s)", [k]) for k in extra]
    target.run(*statements)
    return {"missing": sorted(deleted), "extra": sorted(extra), "changed": sorted(changed)}


def check(tmp_path: Path, capsys: pytest.CaptureFixture[str], source: Db, target: Db,
          specs: Sequence[Spec], changes: Sequence[tuple[str, str, Any]]) -> None:
    fill(source, target, specs)
    config = write_config(tmp_path, source, target, ["items"])
    code, document = run_verify(config, capsys, "--range-rows", "100")
    assert (code, document["equal"], document["tables"][0]["source_rows"]) == (0, True, 1500)
    assert document["tables"][0]["target_rows"] == 1500
    assert document["tables"][0]["ranges"] == 16  # of 100 rows each in key order, then open
    expected = corrupt(target, specs, changes)
    keys_file = tmp_path / "keys.json"
    code, document = run_verify(config, capsys, "--keys-out", str(keys_file))
    assert code == 1
    assert {kind: keys_of(document, kind) for kind in expected} == expected
    assert_dump_reads(config, source.table("items"), keys_file, 1,
                      found=expected["missing"] + expected["changed"], absent=expected["extra"])


def test_mariadb_to_postgresql(tmp_path: Path, capsys: pytest.CaptureFixture[str], my_source: Db,
                               pg_target: Db) -> None:
    specs = MARIADB_TO_POSTGRESQL
    check(tmp_path, capsys, my_source, pg_target, specs, [
        ("de", "de + 0.01", row_where(specs, "de", Decimal("1.50"))),
        ("vc", "NULL", row_where(specs, "vc", "")),
        ("vc", "''", row_where(specs, "vc", None)),
        ("db", str(math.nextafter(0.1 + 0.2, 1)), row_where(specs, "db", 0.1 + 0.2)),
        ("bl", "'\\x00'", row_where(specs, "bl", b"x")),
        ("tm", "tm + interval '1 microsecond'", row_where(specs, "tm", "-838:59:59")),
        ("ts", "ts + interval '1 millisecond'", row_where(specs, "ts", "1970-01-01 00:00:01")),
        ("fl", "'0.100001'", row_where(specs, "fl", 0.1)),
        ("js", "'{\"a\": [1, 2.50]}'", row_where(specs, "js", '{"a":  [1, 2.50]}')),
        ("bt", "512", row_where(specs, "bt", 513)),
    ])


def test_mariadb_to_mariadb(tmp_path: Path, capsys: pytest.CaptureFixture[str], my_source: Db,
                            my_target: Db) -> None:
    specs = MARIADB_TO_MARIADB
    check(tmp_path, capsys, my_source, my_target, specs, [
        ("de", "de + 0.01", row_where(specs, "de", Decimal("1.50"))),
        ("vc", "NULL", row_where(specs, "vc", "")),
        ("ch", "'ab '", row_where(specs, "ch", "ab")),  # LONGTEXT keeps the space
        ("db", str(math.nextafter(1e23, 0)), row_where(specs, "db", 1e23)),
        ("en", "'b'", row_where(specs, "en", "a")),
        ("da", "'2020-05-01'", row_where(specs, "da", "2020-05-00")),
        ("da", "NULL", row_where(specs, "da", "0000-00-00")),  # verify once took it for equal
        ("tm", "'-838:59:58.999999'", row_where(specs, "tm", "-838:59:59")),
        ("vb", "X'FF01'", row_where(specs, "vb", b"\xff\x00")),
    ])


def test_postgresql_to_postgresql(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                  pg_source: Db, pg_target: Db) -> None:
    specs = POSTGRESQL_TO_POSTGRESQL
    check(tmp_path, capsys, pg_source, pg_target, specs, [
        ("nu", "nu + 0.01", row_where(specs, "nu", Decimal("1.50"))),
        ("tx", "NULL", row_where(specs, "tx", "")),
        ("tx", "''", row_where(specs, "tx", None)),
        ("f4", "'NaN'", row_where(specs, "f4", 0.1)),
        ("ar", "'{1,NULL,4}'", row_where(specs, "ar", "{1,NULL,3}")),
        ("jb", "'{\"b\": [1, 2.5], \"a\": null}'",
         row_where(specs, "jb", '{"b": [1, 2.50], "a": null}')),
        ("ch", "'ab '", row_where(specs, "ch", "")),
    ])


def test_postgresql_to_mariadb(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                               pg_source: Db, my_target: Db) -> None:
    specs = POSTGRESQL_TO_MARIADB
    check(tmp_path, capsys, pg_source, my_target, specs, [
        ("nu", "nu + 0.000001", row_where(specs, "nu", Decimal("0.000001"))),
        ("bo", "2", row_where(specs, "bo", True)),
        ("ch", "'ab'", row_where(specs, "ch", "ab")),  # the padding is part of the value
        ("f8", str(math.nextafter(2.0**60 + 2**10, 0)), row_where(specs, "f8", 2.0**60 + 2**10)),
        ("tz", "'2024-02-29 12:34:56.789012'",
         row_where(specs, "tz", "2024-02-29 12:34:56.789012+02")),
        ("vc", "NULL", row_where(specs, "vc", "")),
    ])


# --- keys -------------------------------------------------------------------------------

REGIONS = ["a", "B", "é", "z", "😀", "Zü", " x", "ab", "\uffff", "ß"]


@pytest.mark.parametrize(("source_kind", "target_kind", "order"), [
    ("mysql", "postgresql", "binary"), ("postgresql", "mysql", "binary"),
    ("postgresql", "postgresql", "native"), ("mysql", "mysql", "native"),
])
def test_composite_text_keys_in_ranges_of_both_orders(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], request: pytest.FixtureRequest,
        source_kind: str, target_kind: str, order: str) -> None:
    source: Db = request.getfixturevalue("my_source" if source_kind == "mysql" else "pg_source")
    target: Db = request.getfixturevalue("my_target" if target_kind == "mysql" else "pg_target")

    def create(db: Db) -> str:
        text = "VARCHAR(255)" if db.kind == "mysql" else "text"
        return (f"CREATE TABLE {db.table('regions')} (region {text}, n int, v {text}, "
                "PRIMARY KEY (region, n))")

    rows = [(r, n, f"{r}-{n}") for r in REGIONS for n in range(1, 41)]
    insert = "INSERT INTO {} (region, n, v) VALUES (%s, %s, %s)"
    source.run(create(source), (insert.format(source.table("regions")), rows))
    target.run(create(target), (insert.format(target.table("regions")), rows))
    config = write_config(tmp_path, source, target, ["regions"])
    code, document = run_verify(config, capsys, "--range-rows", "37")
    assert (code, document["tables"][0]["key_order"]) == (0, order)
    assert document["tables"][0]["ranges"] == 11  # 400 rows / 37, and the open last range
    table = target.table("regions")
    target.run((f"DELETE FROM {table} WHERE region = %s AND n = %s", ["😀", 3]),
               (f"DELETE FROM {table} WHERE region = %s AND n = %s", [" x", 40]),
               (f"UPDATE {table} SET v = %s WHERE region = %s AND n = %s", ["", "B", 7]),
               (f"UPDATE {table} SET v = NULL WHERE region = %s AND n = %s", ["\uffff", 1]),
               (insert.format(table), [("ñ", 1, "x"), ("", 5, "x"), ("😀😀", 1, "x")]))
    keys_file = tmp_path / "keys.json"
    code, document = run_verify(config, capsys, "--range-rows", "37", "--keys-out",
                                str(keys_file))
    assert code == 1
    assert keys_of(document, "missing") == [[" x", 40], ["😀", 3]]
    assert keys_of(document, "changed") == [["B", 7], ["\uffff", 1]]
    assert keys_of(document, "extra") == [["", 5], ["ñ", 1], ["😀😀", 1]]
    assert_dump_reads(config, source.table("regions"), keys_file, 2, found=[1, 2, 3, 4],
                      absent=[1, 2, 3])


def test_binary_and_time_keys_across_databases(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str],
                                               my_source: Db, pg_target: Db) -> None:
    my_source.run(f"CREATE TABLE {my_source.table('events')} (b VARBINARY(16), "
                  "at DATETIME(6), v INT, PRIMARY KEY (b, at))")
    pg_target.run(f"CREATE TABLE {pg_target.table('events')} (b bytea, at timestamp(6), "
                  "v bigint, _dblog_position char(48), PRIMARY KEY (b, at))")
    rows = [(bytes([i % 7, 255 - i]), f"2024-01-01 00:00:{i % 60:02d}.{i:06d}", i)
            for i in range(200)]
    my_source.run((f"INSERT INTO {my_source.table('events')} VALUES (%s, %s, %s)", rows))
    pg_target.run((f"INSERT INTO {pg_target.table('events')} (b, at, v) VALUES (%s, %s, %s)",
                   [*rows[1:], (b"", "1999-12-31 23:59:59.999999", 0)]))
    config = write_config(tmp_path, my_source, pg_target, ["events"])
    keys_file = tmp_path / "keys.json"
    code, document = run_verify(config, capsys, "--keys-out", str(keys_file))
    assert code == 1
    assert keys_of(document, "missing") == [["AP8=", "2024-01-01 00:00:00.000000"]]
    assert keys_of(document, "extra") == [["", "1999-12-31 23:59:59.999999"]]
    assert_dump_reads(config, my_source.table("events"), keys_file, 2, found=[1], absent=[1])


# --- edges and refusals -----------------------------------------------------------------


def test_empty_tables(tmp_path: Path, capsys: pytest.CaptureFixture[str], pg_source: Db,
                      my_target: Db) -> None:
    pg_source.run("CREATE TABLE public.empty (id int8 PRIMARY KEY, v text)")
    my_target.run(f"CREATE TABLE {my_target.table('empty')} (id BIGINT PRIMARY KEY, "
                  "v LONGTEXT, _dblog_position CHAR(48))")
    config = write_config(tmp_path, pg_source, my_target, ["empty"])
    code, document = run_verify(config, capsys)
    assert (code, document["tables"][0]["ranges"], document["tables"][0]["source_rows"]) == (
        0, 1, 0)
    my_target.run(f"INSERT INTO {my_target.table('empty')} (id, v) VALUES (-1, ''), (7, NULL)")
    code, document = run_verify(config, capsys)
    assert (code, keys_of(document, "extra")) == (1, [-1, 7])


def test_refusals_and_schema_differences(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                         pg_source: Db, pg_target: Db) -> None:
    pg_source.run("CREATE TABLE public.a (id int8 PRIMARY KEY, v text, w int)",
                  "CREATE TABLE public.b (id int8, k int8, PRIMARY KEY (id, k))")
    pg_target.run("CREATE TABLE public.a (id int8 PRIMARY KEY, v text)",
                  "CREATE TABLE public.b (id int8, k int8, PRIMARY KEY (k, id))")
    config = write_config(tmp_path, pg_source, pg_target, ["a", "b"])
    code, _ = run_verify(config, capsys, "--table", "public.a")
    assert code == 1
    code, document = run_verify(config, capsys, "--table", "public.a")
    assert document["tables"][0]["error"] == (
        "column w of public.a is missing in target table public.a: every row differs")
    assert main(["verify", "--config", str(config), "--table", "public.b"]) == 2
    assert "the primary key of target table public.b (k, id) is not the one of source " \
           "table public.b (id, k)" in capsys.readouterr().err
    assert main(["verify", "--config", str(config), "--table", "public.nope"]) == 2
    assert main(["verify", "--config", str(config), "--keys-out", str(tmp_path / "k.json")]) == 2
    assert "{table}" in capsys.readouterr().err
    unreachable = Db("postgresql", f"host=127.0.0.1 port={free_port()} dbname=x user=x",
                     "public")
    config = write_config(tmp_path, pg_source, unreachable, ["a"])
    assert main(["verify", "--config", str(config)]) == 3
    assert "target database" in capsys.readouterr().err


def test_recheck_drops_keys_that_caught_up(tmp_path: Path, pg_source: Db,
                                           pg_target: Db) -> None:
    for db in (pg_source, pg_target):
        db.run("CREATE TABLE public.r (id int8 PRIMARY KEY, v text)",
               ("INSERT INTO public.r VALUES (%s, %s)", [(i, str(i)) for i in range(100)]))
    pg_target.run("UPDATE public.r SET v = 'stale' WHERE id IN (3, 4)")
    config = config_module.load(write_config(tmp_path, pg_source, pg_target, ["r"]))
    pauses: list[float] = []

    def merge_one(seconds: float) -> None:  # the merge catches up with key 3 meanwhile
        pauses.append(seconds)
        pg_target.run("UPDATE public.r SET v = '3' WHERE id = 3")

    result = verify(config, None, VerifyOptions(recheck_s=2.5), sleep=merge_one)
    (table,) = result.tables
    assert (table.changed, table.rechecked, pauses) == (((4,),), True, [2.5])
    assert table.delay_seconds == 2.5
    assert table.seconds >= table.source_seconds + table.target_seconds
