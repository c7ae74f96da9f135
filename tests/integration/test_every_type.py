"""Every type and edge value of both sources, end to end, into both target kinds.

One table per source holds a column per case of :data:`MARIADB` or :data:`POSTGRESQL`
(adding a type is one line there). Its rows are loaded before capture and dumped
(``dblog dump --all``); while the log streams, every row is changed (each column takes
another of its values; PostgreSQL's large TOASTed text is left unchanged by those
updates), rows are added and one is deleted. The landing zone is merged with the real
Spark merge (``merge_source`` with ``spark_stager``, what ``dblog merge`` runs) into a
PostgreSQL and a MariaDB target, one merge per target kind, and each target is compared
with its source **independently of dblog**: direct SELECTs of both, each value read as
text in its own database (:data:`READ`) and normalized in Python (:data:`NORMAL`), the
source's then mapped as docs/merge.md says a target of that kind holds it
(:data:`MAPPINGS`). ``dblog verify`` must agree: equal where this comparison is, and
different where a target value is damaged on purpose (a MariaDB zero date set to NULL,
which verify once took for equal; a PostgreSQL ``-infinity`` of a zero date set to a
date; a MySQL NULL of a ``NaN`` set to a number).

Types a target kind cannot hold (PostgreSQL arrays into MySQL) are in a table of their
own, which the merge into a MariaDB target refuses up front, naming the column and what
to do, while a PostgreSQL target takes it.
"""

from __future__ import annotations

import contextlib
import datetime
import io
import json
import math
import re
import struct
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from decimal import Decimal
from functools import partial
from pathlib import Path
from typing import Any

import psycopg
import pymysql
import pytest
from pyspark.sql import SparkSession

from dblog_worker import config as config_module
from dblog_worker.cli import main as cli_main
from dblog_worker.landing.parquet import LandingZone, read_events
from dblog_worker.merge.loop import MergeReport, merge_source
from spark.merge import spark_stager
from tests.integration.harness import Workers, cli, wait_for, write_config
from tests.services import MariaDBServer, PostgresServer

SOURCE = "src"
TABLE = "every_type"
ARRAYS = "every_type_arrays"  # PostgreSQL only: what a MySQL target cannot hold
MARKER = 1_000_000  # the last row inserted: once it landed, every change before has

# -- forms: how a value is read in each database and compared ----------------------------

INT, DEC, DOUBLE, FLOAT32, TEXT, BIN, DATE, DATETIME, TIME, JSON, BOOL = (
    "int", "dec", "double", "float32", "text", "bin", "date", "datetime", "time", "json",
    "bool")

# The SQL that reads a value as text, per form and kind of database.
READ: dict[str, dict[str, str]] = {
    "mariadb": {INT: "CAST({c} + 0 AS CHAR)", BOOL: "CAST({c} + 0 AS CHAR)",
                DOUBLE: "CAST(CAST({c} AS DOUBLE) AS CHAR)",
                FLOAT32: "CAST(CAST({c} AS DOUBLE) AS CHAR)", BIN: "LOWER(HEX({c}))"},
    "postgresql": {DOUBLE: "{c}::float8::text", FLOAT32: "{c}::float8::text",
                   BOOL: "{c}::int::text", BIN: "encode({c}, 'hex')", INT: "{c}::text",
                   DEC: "{c}::text"},
}
DEFAULT_READ = {"mariadb": "CAST({c} AS CHAR)",
                "postgresql": "CASE WHEN {c} IS NULL THEN NULL ELSE concat({c}) END"}


def _decimal(text: str) -> object:
    return text if text in ("NaN", "Infinity", "-Infinity") else Decimal(text)


def _double(text: str) -> object:
    value = float(text)
    return "NaN" if math.isnan(value) else struct.pack(">d", value).hex()


def _float32(text: str) -> object:
    value = float(text)
    return "NaN" if math.isnan(value) else struct.pack(">f", value).hex()


_FRACTION = re.compile(r"(\d\d:\d\d:\d\d)(\.\d*?)0*(?=$| BC)")


def _stamp(text: str) -> str:
    """A date or time stamp's text without a UTC offset and trailing fraction zeros:
    MariaDB prints DATETIME(6) with six digits, PostgreSQL as few as it needs."""
    text = text.replace("+00", "")
    return _FRACTION.sub(lambda m: m[1] + (m[2] if m[2] != "." else ""), text)


def _micros(text: str) -> int:
    """A TIME's or interval's ``[-]H:MM:SS[.f]`` in microseconds."""
    sign = -1 if text.startswith("-") else 1
    hours, minutes, seconds = text.lstrip("-").split(":")
    whole, _, fraction = seconds.partition(".")
    return sign * ((int(hours) * 3600 + int(minutes) * 60 + int(whole)) * 10**6
                   + int((fraction + "000000")[:6]))


NORMAL: dict[str, Callable[[str], object]] = {
    INT: int, BOOL: int, DEC: _decimal, DOUBLE: _double, FLOAT32: _float32, TEXT: str,
    BIN: str, DATE: _stamp, DATETIME: _stamp, TIME: _micros, JSON: json.loads,
}

# -- mappings: what a target of another kind holds (docs/merge.md, "Types") ---------------

SAME, REFUSED = "same", "refused"


def _no_date(value: object) -> object:
    """MariaDB → PostgreSQL: a date that is no date (a zero year, month or day; an
    impossible day) is ``-infinity``."""
    if not isinstance(value, str):
        return value
    year, month, day = int(value[0:4]), int(value[5:7]), int(value[8:10])
    try:
        datetime.date(year, month, day)
    except ValueError:
        return "-infinity"
    return value


def _outside_years(zero: str) -> Callable[[object], object]:
    """PostgreSQL → MySQL: a date outside the years 1 to 9999 (``±infinity``, BC) is the
    zero date."""
    def mapped(value: object) -> object:
        if not isinstance(value, str):
            return value
        if value in ("infinity", "-infinity") or value.endswith(" BC") or (
                value.index("-") > 4):
            return zero
        return value

    return mapped


def _not_a_number(value: object) -> object:
    """PostgreSQL → MySQL: ``NaN`` and ``±Infinity`` are NULL; MariaDB stores minus zero
    as zero."""
    if value in ("NaN", "Infinity", "-Infinity"):
        return None
    if isinstance(value, str) and value in ("8000000000000000", "80000000"):
        return "0" * len(value)  # -0.0 → 0.0, of a double or a float32
    if isinstance(value, str) and value in ("7ff0000000000000", "fff0000000000000",
                                            "7f800000", "ff800000"):
        return None  # ±Infinity of a double or a float32
    return value


MAPPINGS: dict[str, Callable[[object], object]] = {
    SAME: lambda value: value,
    "no date": _no_date,
    "outside years 1-9999 (date)": _outside_years("0000-00-00"),
    "outside years 1-9999 (time stamp)": _outside_years("0000-00-00 00:00:00"),
    "not a number": _not_a_number,
}


@dataclass(frozen=True)
class Case:
    """One column: its source type, values (SQL literals of the source), how it is
    compared, and what a PostgreSQL and a MySQL/MariaDB target hold (a mapping name)."""

    name: str
    ddl: str
    values: tuple[str, ...]
    form: str = TEXT
    on_postgresql: str = SAME
    on_mariadb: str = SAME


NO_DATE = "no date"
PG_DATE, PG_STAMP = "outside years 1-9999 (date)", "outside years 1-9999 (time stamp)"
NAN = "not a number"


def _geometry(wkt: str, srid: int = 4326) -> str:
    return f"ST_GeomFromText('{wkt}', {srid})"


MARIADB = (
    Case("i8", "tinyint", ("-128", "127", "0"), INT),
    Case("u8", "tinyint unsigned", ("0", "255"), INT),
    Case("i16", "smallint", ("-32768", "32767"), INT),
    Case("u16", "smallint unsigned", ("65535", "0"), INT),
    Case("i24", "mediumint", ("-8388608", "8388607"), INT),
    Case("u24", "mediumint unsigned", ("16777215", "1"), INT),
    Case("i32", "int", ("-2147483648", "2147483647"), INT),
    Case("u32", "int unsigned", ("4294967295", "0"), INT),
    Case("i64", "bigint", ("-9223372036854775808", "9223372036854775807"), INT),
    Case("u64", "bigint unsigned", ("18446744073709551615", "0"), INT),
    Case("z5", "int(5) zerofill", ("42", "99999"), INT),
    Case("d65", "decimal(65,30)", (f"{'9' * 35}.{'9' * 30}", f"-{'9' * 35}.{'9' * 30}",
                                   "0.000000000000000000000000000001", "0"), DEC),
    Case("d10u", "decimal(10,2) unsigned", ("99999999.99", "0.01"), DEC),
    Case("d5", "decimal(5,0)", ("-99999", "12345"), DEC),
    Case("f32", "float", ("3.4028235e38", "-3.4028235e38", "1.17549435e-38", "1e-45", "-0e0",
                          "0.1", "16777217"), FLOAT32),
    Case("f64", "double", ("1.7976931348623157e308", "-1.7976931348623157e308", "5e-324",
                           "-0e0", "0.30000000000000004", "2.2250738585072014e-308"), DOUBLE),
    Case("dt", "date", ("'0000-00-00'", "'2020-00-15'", "'2020-05-00'", "'2020-02-31'",
                        "'1000-01-01'", "'9999-12-31'", "'0001-01-01'", "'0000-05-05'"),
         DATE, on_postgresql=NO_DATE),
    Case("dtm0", "datetime", ("'0000-00-00 00:00:00'", "'9999-12-31 23:59:59'",
                              "'2021-02-29 10:00:00'"), DATETIME, on_postgresql=NO_DATE),
    Case("dtm6", "datetime(6)", ("'2020-00-00 10:00:00.5'", "'9999-12-31 23:59:59.999999'",
                                 "'1000-01-01 00:00:00.000001'", "'0000-00-00 00:00:00'"),
         DATETIME, on_postgresql=NO_DATE),
    Case("ts3", "timestamp(3) NULL", ("'0000-00-00 00:00:00'", "'1970-01-01 00:00:01.000'",
                                      "'2038-01-19 03:14:07.999'", "'2000-02-29 12:00:00.5'"),
         DATETIME, on_postgresql=NO_DATE),
    Case("tm0", "time", ("'-838:59:59'", "'838:59:59'", "'00:00:00'", "'24:00:00'"), TIME),
    Case("tm6", "time(6)", ("'-838:59:59.000000'", "'838:59:59.000000'",
                            "'-00:00:00.000001'", "'-12:34:56.789012'"), TIME),
    Case("yr", "year", ("0", "1901", "2155"), INT),
    Case("b1", "bit(1)", ("b'0'", "b'1'"), INT),
    Case("b10", "bit(10)", ("b'1000000001'", "0"), INT),
    Case("b64", "bit(64)", ("x'ffffffffffffffff'", "1"), INT),
    Case("ch", "char(5)", ("'ab'", "'😀é'", "''"), TEXT),
    Case("vc", "varchar(40) COLLATE utf8mb4_unicode_520_ci", ("'Grüße 😀 \"q\" \\\\ tab\\t'",
                                                               "'a  '"), TEXT),
    Case("vcb", "varchar(40) COLLATE utf8mb4_bin", ("'Ab '", "'漢字'"), TEXT),
    Case("txt", "text", ("REPEAT('ü', 3000)", "''", "'NULL'"), TEXT),
    Case("l1", "varchar(20) CHARACTER SET latin1 COLLATE latin1_german2_ci",
         ("'Grüße'", "'ÿ'"), TEXT),
    Case("asc", "varchar(20) CHARACTER SET ascii COLLATE ascii_bin", ("'abc'", "'~'"), TEXT),
    Case("u3", "varchar(20) CHARACTER SET utf8mb3", ("'héllo'", "'€'"), TEXT),
    Case("cy", "varchar(20) CHARACTER SET cp1251", ("'Привет'", "'ё'"), TEXT),
    Case("bn", "binary(4)", ("x'00ff0000'", "x'00'", "''"), BIN),
    Case("vb", "varbinary(300)", ("x'ff00ff'", "''", "x'00'"), BIN),
    Case("bl", "blob", ("x'0001feff'", "REPEAT(x'ff00', 500)"), BIN),
    Case("en", "enum('a','b c','','é')", ("'a'", "''", "'b c'", "'é'"), TEXT),
    Case("st", "set('x','y z','ü')", ("''", "'x,y z'", "'ü,x'"), TEXT),
    Case("js", "json", ("'{\"a\": [1, 2.5, null], \"b\": \"ü\"}'", "'[]'", "'\"x\"'"), JSON),
    Case("gm", "geometry", (_geometry("POLYGON((0 0,1 0,1 1,0 0))"),
                            _geometry("POINT(1 2)", 0)), BIN),
    Case("pt", "point", (_geometry("POINT(1.5 -2)"), _geometry("POINT(0 0)", 3857)), BIN),
    Case("ls", "linestring", (_geometry("LINESTRING(0 0,1 1,2 5)"),), BIN),
    Case("pg", "polygon", (_geometry("POLYGON((0 0,10 0,10 10,0 10,0 0),(5 5,7 5,7 7,5 5))"),),
         BIN),
    Case("mpt", "multipoint", (_geometry("MULTIPOINT(0 0,1 1)"),), BIN),
    Case("mls", "multilinestring", (_geometry("MULTILINESTRING((0 0,1 1),(2 2,3 3))"),), BIN),
    Case("mpg", "multipolygon", (_geometry("MULTIPOLYGON(((0 0,1 0,1 1,0 0)))"),), BIN),
    Case("gc", "geometrycollection",
         (_geometry("GEOMETRYCOLLECTION(POINT(1 1),LINESTRING(0 0,1 1))"),), BIN),
    Case("uu", "uuid", ("'550e8400-e29b-41d4-a716-446655440000'",
                        "'00000000-0000-0000-0000-000000000000'"), TEXT),
    Case("ip4", "inet4", ("'192.168.0.1'", "'0.0.0.0'", "'255.255.255.255'"), TEXT),
    Case("ip6", "inet6", ("'2001:db8::ff00:42:8329'", "'::'", "'::ffff:1.2.3.4'",
                          "'1:0:2:3:4:5:6:7'"), TEXT),
)

POSTGRESQL = (
    Case("i16", "smallint", ("-32768", "32767"), INT),
    Case("i32", "integer", ("-2147483648", "2147483647"), INT),
    Case("i64", "bigint", ("-9223372036854775808", "9223372036854775807"), INT),
    Case("oid", "oid", ("4294967295", "0"), INT),
    Case("num", "numeric", ("'NaN'", "'Infinity'", "'-Infinity'", "'-0.000000000000000000001'",
                            "12345678901234567890.123456789", "1.50"), DEC, on_mariadb=NAN),
    Case("n12", "numeric(12,2)", ("1.5", "-9999999999.99", "'NaN'"), DEC, on_mariadb=NAN),
    Case("f32", "real", ("'NaN'", "'Infinity'", "'-Infinity'", "'-0'", "'3.4028235e+38'",
                         "'1e-45'", "'0.1'"), FLOAT32, on_mariadb=NAN),
    Case("f64", "double precision", ("'NaN'", "'-Infinity'", "'-0'",
                                     "'1.7976931348623157e+308'", "'5e-324'", "'0.1'"),
         DOUBLE, on_mariadb=NAN),
    Case("bo", "boolean", ("true", "false"), BOOL),
    Case("tx", "text", ("E'Gr\\u00fc\\u00dfe \\U0001F600 \"q\" \\\\ tab\\tnl\\n'", "''"), TEXT),
    Case("vc", "varchar(10) COLLATE \"C\"", ("'Ab '", "'ü'"), TEXT),
    Case("bp", "char(5)", ("'ab'", "'😀'"), TEXT),
    Case("nm", "name", ("'a name'",), TEXT),
    Case("qc", "\"char\"", ("'x'",), TEXT),
    Case("by", "bytea", ("'\\x00ff00'::bytea", "'\\x'::bytea",
                         "decode(repeat('ff00', 300), 'hex')"), BIN),
    Case("dt", "date", ("'0044-03-15 BC'", "'infinity'", "'-infinity'", "'0001-01-01'",
                        "'9999-12-31'", "'10000-01-01'", "'2024-02-29'"), DATE, on_mariadb=PG_DATE),
    Case("ts", "timestamp(6)", ("'infinity'", "'-infinity'", "'0044-03-15 10:00:00 BC'",
                                "'9999-12-31 23:59:59.999999'", "'2024-01-02 03:04:05.5'"),
         DATETIME, on_mariadb=PG_STAMP),
    Case("tz", "timestamptz", ("'infinity'", "'2024-01-02 03:04:05.123456+05:30'",
                               "'0001-01-01 00:00:00+00'", "'-infinity'"),
         DATETIME, on_mariadb=PG_STAMP),
    Case("tm", "time", ("'24:00:00'", "'00:00:00.000001'", "'23:59:59.999999'"), TIME),
    Case("ttz", "timetz", ("'12:00:00+05:30'", "'00:00:00-00'"), TEXT),
    Case("iv", "interval", ("'1 year 2 mons 3 days 04:05:06.789'", "'-178000000 years'",
                            "'-1 mons -00:00:01'"), TEXT),
    Case("uu", "uuid", ("'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'",
                        "'ffffffff-ffff-ffff-ffff-ffffffffffff'"), TEXT),
    Case("js", "json", ("'{\"b\":  1, \"a\": [1, 2], \"b\": 3}'", "'null'"), JSON),
    Case("jb", "jsonb", ("'{\"b\": 1, \"a\": [1, 2.50]}'", "'\"str\"'"), JSON),
    Case("xm", "xml", ("'<a x=\"1\">ü</a>'",), TEXT),
    Case("pt", "point", ("'(1.5,-2)'",), TEXT),
    Case("ln", "line", ("'{1,-1,0}'",), TEXT),
    Case("lg", "lseg", ("'[(0,0),(1,1)]'",), TEXT),
    Case("bx", "box", ("'(1,1),(0,0)'",), TEXT),
    Case("ph", "path", ("'[(0,0),(1,1),(2,0)]'", "'((0,0),(1,1))'"), TEXT),
    Case("pl", "polygon", ("'((0,0),(1,0),(1,1))'",), TEXT),
    Case("ci", "circle", ("'<(0,0),1.5>'",), TEXT),
    Case("bt", "bit(3)", ("B'101'", "B'000'"), TEXT),
    Case("vbt", "varbit", ("B'1'", "B''", "B'0101010101'"), TEXT),
    Case("mo", "money", ("'1000.5'", "'-0.01'"), TEXT),
    Case("in", "inet", ("'192.168.0.1'", "'10.0.0.0/8'", "'::ffff:1.2.3.4'"), TEXT),
    Case("cd", "cidr", ("'10.0.0.0/8'", "'2001:db8::/32'"), TEXT),
    Case("ma", "macaddr", ("'08:00:2b:01:02:03'",), TEXT),
    Case("m8", "macaddr8", ("'08:00:2b:01:02:03:04:05'",), TEXT),
    Case("r4", "int4range", ("'[1,10)'", "'empty'", "'(,5]'"), TEXT),
    Case("rt", "tstzrange", ("'[2024-01-01 00:00:00+00,infinity)'",), TEXT),
    Case("mr", "int4multirange", ("'{[1,3), [5,8)}'", "'{}'"), TEXT),
    Case("tv", "tsvector", ("'a fat cat sat on a mat'",), TEXT),
    Case("tq", "tsquery", ("'fat & (rat | cat)'",), TEXT),
    Case("ls", "pg_lsn", ("'16/B374D848'",), TEXT),
    # 100 kB that do not compress: stored out of line (TOASTed), never updated
    Case("big", "text", ("(SELECT string_agg(md5(i::text), '') FROM generate_series(1, 3200) i)",),
         TEXT),
)
UNCHANGED = {"big"}  # the updates while the log streams leave these columns alone
POSTGRESQL_ARRAYS = (  # a MySQL target cannot hold them: refused up front
    Case("a_int", "integer[]", ("'{1,NULL,-3}'", "'{}'", "'{{1,2},{3,4}}'"), TEXT,
         on_mariadb=REFUSED),
    Case("a_txt", "text[]", ("ARRAY['a,b', 'q\"uote', NULL, 'NULL', '']",), TEXT,
         on_mariadb=REFUSED),
    Case("a_ts", "timestamptz[]", ("ARRAY['2024-01-02 03:04:05+02'::timestamptz, 'infinity']",),
         TEXT, on_mariadb=REFUSED),
)


# -- the databases -----------------------------------------------------------------------


class Db:
    """A source or target database: how the test reads and writes it."""

    def __init__(self, kind: str, dsn: str, namespace: str, connect: Callable[[], Any]
                 ) -> None:
        self.kind, self.dsn, self.namespace, self._connect = kind, dsn, namespace, connect

    def qualified(self, table: str) -> str:
        """``table``, or ``schema.table``, quoted: in the database's namespace by default."""
        schema, _, name = table.rpartition(".")
        return f"{self.quote(schema or self.namespace)}.{self.quote(name)}"

    def run(self, statements: Sequence[str]) -> None:
        with contextlib.closing(self._connect()) as conn:
            cursor = conn.cursor()
            if self.kind == "mariadb":  # zero and invalid dates, as legacy schemas have
                cursor.execute("SET sql_mode = 'ALLOW_INVALID_DATES', time_zone = '+00:00'")
            for statement in statements:
                cursor.execute(statement)
            conn.commit()

    def rows(self, table: str, cases: Sequence[Case]) -> dict[int, dict[str, object]]:
        """Every row of ``table`` (source or target): id → column → normalized value."""
        reads = [READ[self.kind].get(c.form, DEFAULT_READ[self.kind]).format(
            c=self.quote(c.name)) for c in cases]
        with contextlib.closing(self._connect()) as conn:
            cursor = conn.cursor()
            if self.kind == "mariadb":
                cursor.execute("SET time_zone = '+00:00'")
            cursor.execute(f"SELECT id, {', '.join(reads)} FROM {self.qualified(table)}")
            found = cursor.fetchall()
        return {int(row[0]): {c.name: None if v is None else NORMAL[c.form](_text(v))
                              for c, v in zip(cases, row[1:], strict=True)} for row in found}

    def quote(self, name: str) -> str:
        return f"`{name}`" if self.kind == "mariadb" else f'"{name}"'

    def has_table(self, table: str) -> bool:
        with contextlib.closing(self._connect()) as conn:
            cursor = conn.cursor()
            cursor.execute("SELECT count(*) FROM information_schema.tables WHERE"
                           " table_schema = %s AND table_name = %s", (self.namespace, table))
            return bool(cursor.fetchone()[0])

    def key_where(self, table: str, cases: Sequence[Case], column: str, value: object) -> int:
        """A key of a row of ``table`` whose ``column`` holds ``value`` (normalized)."""
        rows = self.rows(table, cases)
        return min(key for key, row in rows.items() if row[column] == value)


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes | bytearray) else str(value)


def _pg(dsn: str) -> Db:
    def connect() -> Any:
        return psycopg.connect(dsn, options="-c TimeZone=UTC -c DateStyle=ISO,MDY"
                                            " -c IntervalStyle=postgres -c extra_float_digits=1")

    return Db("postgresql", dsn, "public", connect)


def _my(server: MariaDBServer, database: str) -> Db:
    return Db("mariadb", server.url(), database,
              lambda: pymysql.connect(**server.connect_args(database)))


# -- the run -----------------------------------------------------------------------------


def _literal(case: Case, row: int) -> str:
    return case.values[row % len(case.values)]


def _table_sql(db: Db, table: str, cases: Sequence[Case]) -> list[str]:
    columns = ", ".join(f"{db.quote(c.name)} {c.ddl}" for c in cases)
    statements = [f"CREATE TABLE {db.qualified(table)} (id bigint PRIMARY KEY, {columns})"]
    if db.kind == "postgresql":  # every update carries its whole row (TOASTed values too)
        statements.append(f"ALTER TABLE {db.qualified(table)} REPLICA IDENTITY FULL")
    return statements


def _insert(db: Db, table: str, cases: Sequence[Case], key: int, shift: int) -> str:
    values = ", ".join(_literal(c, key + shift) for c in cases)
    names = ", ".join(db.quote(c.name) for c in cases)
    return f"INSERT INTO {db.qualified(table)} (id, {names}) VALUES ({key}, {values})"


def _update(db: Db, table: str, cases: Sequence[Case], key: int, shift: int) -> str:
    sets = ", ".join(f"{db.quote(c.name)} = {_literal(c, key + shift)}" for c in cases
                     if c.name not in UNCHANGED)
    return f"UPDATE {db.qualified(table)} SET {sets} WHERE id = {key}"


@dataclass
class Run:
    """One source captured, and its configurations for both targets."""

    source: Db
    tables: dict[str, tuple[Case, ...]]
    configs: dict[str, Path]  # target kind → configuration file
    targets: dict[str, Db]
    renames: dict[str, dict[str, str]]  # target kind → source table → target table
    landing: Path


def _rows_before(cases: Sequence[Case]) -> int:
    return max(len(c.values) for c in cases) + 1


def capture(run: Run) -> None:
    """Rows loaded, a full dump, then every row changed, rows added and one deleted while
    the log streams; returns once the last change has landed."""
    source = run.source
    statements = []
    for table, cases in run.tables.items():
        statements += _table_sql(source, table, cases)
        count = _rows_before(cases)
        statements += [_insert(source, table, cases, key, 0) for key in range(1, count)]
        statements.append(f"INSERT INTO {source.qualified(table)} (id) VALUES ({count})")
    source.run(statements)
    config = run.configs["postgresql"]
    with Workers(run.landing.parent / "worker.log") as workers:
        worker = workers.start(config)
        result = cli(config, "dump", "--all", "--wait", "--chunk-size", "3", timeout=180)
        assert "completed" in result.stdout, result.stdout
        changes = []
        for table, cases in run.tables.items():
            count = _rows_before(cases)
            changes += [_update(source, table, cases, key, 1) for key in range(1, count)]
            changes += [_insert(source, table, cases, key, 2)
                        for key in range(count + 1, 2 * count + 1)]
            changes += [f"UPDATE {source.qualified(table)} SET id = {3 * count} WHERE id = 2",
                        f"DELETE FROM {source.qualified(table)} WHERE id = 3",
                        f"INSERT INTO {source.qualified(table)} (id) VALUES ({MARKER})"]
        source.run(changes)
        zone = LandingZone(run.landing, SOURCE)

        def landed() -> bool:
            return all(any(e["key"] == f"[{MARKER}]" for e in read_events(zone,
                                                                         _landed(source, t)))
                       for t in run.tables)

        wait_for(landed, 120, "the last change to land", lambda: worker.log()[-4000:])
        dumped = [e for e in read_events(zone, _landed(source, TABLE)) if e["op"] == "r"]
        assert len(dumped) >= _rows_before(run.tables[TABLE]) - 1
        assert worker.stop() == 0


def _landed(db: Db, table: str) -> str:
    return f"{db.namespace}.{table}"


def merge(run: Run, target: str, spark: SparkSession) -> MergeReport:
    return merge_source(config_module.load(run.configs[target]), spark_stager(spark))


def compare(run: Run, target: str, table: str) -> dict[int, dict[str, tuple[object, object]]]:
    """The independent comparison: per differing key, column → (expected, found); a key
    missing in the target has ``found`` None for its id."""
    cases = run.tables[table]
    source_rows = run.source.rows(table, cases)
    target_rows = run.targets[target].rows(run.renames[target][table], cases)
    differences: dict[int, dict[str, tuple[object, object]]] = {}
    for key in source_rows.keys() | target_rows.keys():
        found, expected = target_rows.get(key), source_rows.get(key)
        if found is None or expected is None:
            differences[key] = {"id": (expected is not None, found is not None)}
            continue
        for case in cases:
            mapping = case.on_postgresql if target == "postgresql" else case.on_mariadb
            if target == run.source.kind:
                mapping = SAME
            want = MAPPINGS[mapping](expected[case.name])
            if want != found[case.name]:
                differences.setdefault(key, {})[case.name] = (want, found[case.name])
    return differences


def verify(run: Run, target: str, table: str) -> dict[str, Any]:
    output = io.StringIO()
    with contextlib.redirect_stdout(output):
        status = cli_main(["verify", "--config", str(run.configs[target]), "--table",
                           _landed(run.source, table), "--range-rows", "4", "--json"])
    result = json.loads(output.getvalue())
    (report,) = result["tables"]
    assert report["error"] is None, report
    assert status == (0 if report["equal"] else 1), (status, report)
    return dict(report)


def assert_agree(run: Run, target: str, table: str) -> None:
    """The target equals its source under the documented mappings, and verify says so."""
    differences = compare(run, target, table)
    assert not differences, f"{table} → {target} target: {differences}"
    report = verify(run, target, table)
    assert report["equal"], report


# -- fixtures ----------------------------------------------------------------------------


@pytest.fixture
def pg_target(postgres_server: PostgresServer) -> Iterator[str]:
    name = f"t_{uuid.uuid4().hex[:16]}"
    yield postgres_server.create_database(name)
    postgres_server.drop_database(name)


def _run(tmp_path: Path, source: Db, tables: dict[str, tuple[Case, ...]], redis_url: str,
         pg_target: str, mariadb: MariaDBServer, target_database: str) -> Run:
    state = f"{target_database}_state"
    renames = {"postgresql": {t: _landed(source, t) for t in tables},  # the same names
               "mariadb": {t: f"{target_database}.merged_{t}" for t in tables}}
    sections = {
        "postgresql": f'[target]\nkind = "postgresql"\ndsn = {json.dumps(pg_target)}\n',
        "mariadb": (f'[target]\nkind = "mariadb"\ndsn = {json.dumps(mariadb.url())}\n'
                    f'state_schema = "{state}"\ntables = {{ '
                    + ", ".join(f'"{_landed(source, s)}" = "{t}"'
                                for s, t in renames["mariadb"].items()) + " }\n"),
    }
    configs = {}
    for target, section in sections.items():
        directory = tmp_path / target
        directory.mkdir()
        path = write_config(tmp_path, source.dsn, redis_url,
                            [_landed(source, t) for t in tables], name=SOURCE,
                            kind=source.kind, extra=section)
        configs[target] = path.rename(directory / path.name)
    targets = {"postgresql": _pg(pg_target), "mariadb": _my(mariadb, target_database)}
    return Run(source, tables, configs, targets, renames, tmp_path / "landing")


# -- the test ----------------------------------------------------------------------------


def test_every_mariadb_type_end_to_end(
        tmp_path: Path, mariadb_server: MariaDBServer, mariadb_database: str, redis_url: str,
        pg_target: str, spark: SparkSession, request: pytest.FixtureRequest) -> None:
    target_database = f"{mariadb_database}_t"
    mariadb_server.create_database(target_database)
    request.addfinalizer(partial(mariadb_server.drop_database, target_database))
    request.addfinalizer(partial(mariadb_server.drop_database, f"{target_database}_state"))
    source = _my(mariadb_server, mariadb_database)
    run = _run(tmp_path, source, {TABLE: MARIADB}, redis_url, pg_target, mariadb_server,
               target_database)
    capture(run)
    for target in ("postgresql", "mariadb"):
        report = merge(run, target, spark)
        assert report.ok, report.as_dict()
        assert_agree(run, target, TABLE)

    # A damaged value is a difference for both comparisons: verify hides none (a MariaDB
    # zero date set to NULL, which it once took for equal; a -infinity set to a date).
    zero_date_key = source.key_where(TABLE, MARIADB, "dt", "0000-00-00")
    damages = {
        "mariadb": ("UPDATE {t} SET `dt` = NULL WHERE id = {k}",
                    "UPDATE {t} SET `dt` = '0000-00-00' WHERE id = {k}"),
        "postgresql": ("UPDATE {t} SET \"dt\" = '2000-01-01' WHERE id = {k}",
                       "UPDATE {t} SET \"dt\" = '-infinity' WHERE id = {k}"),
    }
    for target, (damage, repair) in damages.items():
        db = run.targets[target]
        table = db.qualified(run.renames[target][TABLE])
        db.run([damage.format(t=table, k=zero_date_key)])
        assert set(compare(run, target, TABLE)) == {zero_date_key}
        damaged = verify(run, target, TABLE)
        assert not damaged["equal"] and damaged["changed"] == [[zero_date_key]], damaged
        db.run([repair.format(t=table, k=zero_date_key)])
        assert_agree(run, target, TABLE)


def test_every_postgresql_type_end_to_end(
        tmp_path: Path, pg_dsn: str, mariadb_server: MariaDBServer, mariadb_database: str,
        redis_url: str, pg_target: str, spark: SparkSession,
        request: pytest.FixtureRequest) -> None:
    request.addfinalizer(partial(mariadb_server.drop_database, f"{mariadb_database}_state"))
    source = _pg(pg_dsn)
    run = _run(tmp_path, source, {TABLE: POSTGRESQL, ARRAYS: POSTGRESQL_ARRAYS}, redis_url,
               pg_target, mariadb_server, mariadb_database)
    capture(run)
    report = merge(run, "postgresql", spark)
    assert report.ok, report.as_dict()
    for table in run.tables:
        assert_agree(run, "postgresql", table)

    report = merge(run, "mariadb", spark)
    errors = {t.table: t.error for t in report.tables}
    assert errors[_landed(source, TABLE)] == "", errors
    refused = errors[_landed(source, ARRAYS)]  # up front: nothing of it applied
    assert "column 'a_int' has type int4[], which a MySQL/MariaDB target cannot hold" in refused
    assert "leave the table out of the merge" in refused
    assert not run.targets["mariadb"].has_table(f"merged_{ARRAYS}")
    assert_agree(run, "mariadb", TABLE)

    # a NaN is NULL in a MySQL target: a number there instead is a difference for both
    nan_key = source.key_where(TABLE, POSTGRESQL, "num", "NaN")
    db = run.targets["mariadb"]
    table = db.qualified(f"merged_{TABLE}")
    db.run([f"UPDATE {table} SET `num` = 1 WHERE id = {nan_key}"])
    assert set(compare(run, "mariadb", TABLE)) == {nan_key}
    damaged = verify(run, "mariadb", TABLE)
    assert not damaged["equal"] and damaged["changed"] == [[nan_key]], damaged
