"""Same value, same bytes, against a real MariaDB: the dump path and the binlog path.

Each test creates a table, writes edge values with an ordinary connection, reads them by
the dump path (PyMySQL with ``dump_connection_options()``, ``select_list``) and from the
binary log (``BinLogStreamReader`` from the position before the writes, without
``is_mariadb``), and checks that both give the same descriptors, row JSON and key texts.
The rows are then updated (key changed) and deleted, so before/after images are checked
as well.
"""

from __future__ import annotations

import base64
import ipaddress
import itertools
import json
import math
import random
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import pymysql
import pytest
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

from dblog_worker.mysql.column_model import (
    COLUMNS_SQL,
    Kind,
    MyColumn,
    UnsupportedType,
    column_from_information_schema,
    columns_from_binlog,
    select_list,
)
from dblog_worker.mysql.connection import (
    BINLOG_READER_OPTIONS,
    MY_SESSION_SETTINGS,
    dump_connection_options,
)
from dblog_worker.mysql.resultset import DumpConnection
from dblog_worker.mysql.rowimage import row_images
from dblog_worker.mysql.rowtext import key_row_reader
from dblog_worker.mysql.values import MyRowCodec
from tests.mysql_columns import same_column
from tests.services import MariaDBServer

_server_ids = itertools.count(1000)

Statement = str | tuple[str, Sequence[Any]]


@dataclass
class Captured:
    """What both paths read of one table."""

    columns: list[MyColumn]
    dump: dict[int, str] = field(default_factory=dict)  # id → row JSON, before the update


class Db:
    def __init__(self, server: MariaDBServer, database: str) -> None:
        self.server, self.database = server, database

    def writer(self) -> pymysql.Connection[Any]:
        return pymysql.connect(**self.server.connect_args(self.database))

    def dumper(self, connect: Any = pymysql.connect) -> pymysql.Connection[Any]:
        args = {**self.server.connect_args(self.database), **dump_connection_options()}
        return connect(**args)

    def execute(self, statements: Sequence[Statement]) -> None:
        with self.writer() as conn, conn.cursor() as cur:
            for statement in statements:
                if isinstance(statement, str):
                    cur.execute(statement)
                else:
                    sql, params = statement
                    if params and isinstance(params[0], tuple | list):
                        cur.executemany(sql, params)
                    else:
                        cur.execute(sql, params)

    def position(self) -> tuple[str, int]:
        with self.writer() as conn, conn.cursor() as cur:
            cur.execute("SHOW MASTER STATUS")
            row = cur.fetchone()
            assert row is not None
            return str(row[0]), int(row[1])

    def columns(self, table: str = "t") -> list[MyColumn]:
        with self.dumper() as conn, conn.cursor() as cur:
            cur.execute(COLUMNS_SQL, (self.database, table))
            return [column_from_information_schema(row) for row in cur.fetchall()]

    def dump(self, columns: Sequence[MyColumn], table: str = "t") -> list[tuple[Any, ...]]:
        """The rows as the worker's dump connection reads them, checked to be the very
        rows (types included) and description PyMySQL's own reading gives."""
        return self.select(f"SELECT {select_list(columns)} FROM `{table}` ORDER BY 1")

    def select(self, sql: str) -> list[tuple[Any, ...]]:
        results = []
        for connect in (pymysql.connect, DumpConnection):
            with self.dumper(connect) as conn, conn.cursor() as cur:
                cur.execute(sql)
                results.append((cur.description, list(cur.fetchall())))
        assert results[0] == results[1]
        return results[1][1]

    def binlog(self, start: tuple[str, int]) -> Iterator[Any]:
        settings = {
            "host": "127.0.0.1",
            "port": self.server.port,
            "user": "root",
            "password": "",
        }
        stream = BinLogStreamReader(
            connection_settings=settings,
            # With a database of its own, the control connection's "db" is not used (its
            # use warns in PyMySQL).
            ctl_connection_settings={**settings, "database": "information_schema"},
            server_id=next(_server_ids),
            only_schemas=[self.database],
            only_events=[WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent],
            blocking=False,
            resume_stream=True,
            log_file=start[0],
            log_pos=start[1],
            **BINLOG_READER_OPTIONS,
        )
        try:
            yield from stream
        finally:
            stream.close()


@pytest.fixture
def db(mariadb_server: MariaDBServer, mariadb_database: str) -> Db:
    return Db(mariadb_server, mariadb_database)


def _cells_by_id(rows: Sequence[tuple[Any, ...]]) -> dict[int, tuple[Any, ...]]:
    return {int(row[0]): row for row in rows}


def capture(db: Db, ddl: str, writes: Sequence[Statement]) -> Captured:
    """Create table ``t`` (first column ``id``, the key), insert with ``writes`` (the rows
    must not change after their insert), then compare both paths for the inserts, an update
    of every row's key (+1000000) and the deletes."""
    db.execute([ddl])
    start = db.position()
    db.execute(writes)
    columns = db.columns()
    codec = MyRowCodec(columns, ["id"])
    inserted = _cells_by_id(db.dump(columns))
    assert inserted, "no row was written"
    db.execute(["UPDATE t SET id = id + 1000000"])
    updated = _cells_by_id(db.dump(columns))
    db.execute(["DELETE FROM t"])
    captured = Captured(columns, {i: codec.row_from_dump(c) for i, c in inserted.items()})

    seen = {"insert": 0, "update": 0, "delete": 0}
    for event in db.binlog(start):
        logged = columns_from_binlog(event.columns, {c.name: c for c in columns})
        # the rows as the worker reads them: rowimage.py's (the library's where it cannot)
        direct, library_rows = _same_images(event, MyRowCodec(logged, ["id"]))
        worker_rows = direct or library_rows or []
        assert len(logged) == len(columns)
        assert all(map(same_column, columns, logged)), (columns, logged)
        library_rows = library_rows or [{} for _ in worker_rows]
        for log_codec in (codec, MyRowCodec(logged, ["id"])):
            for image, library in zip(worker_rows, library_rows, strict=True):
                image = {**_NO_SOURCES, **library, **image}  # the library's none_sources
                if isinstance(event, WriteRowsEvent):
                    pairs = [(image["values"], image["none_sources"], inserted)]
                elif isinstance(event, UpdateRowsEvent):
                    pairs = [
                        (image["before_values"], image["before_none_sources"], inserted),
                        (image["after_values"], image["after_none_sources"], updated),
                    ]
                else:
                    pairs = [(image["values"], image["none_sources"], updated)]
                for values, none_sources, dumped in pairs:
                    _same_bytes(codec, log_codec, dumped[values["id"]], values, none_sources)
        kind = {WriteRowsEvent: "insert", UpdateRowsEvent: "update", DeleteRowsEvent: "delete"}
        seen[kind[type(event)]] += len(worker_rows)
    assert seen == {"insert": len(inserted), "update": len(inserted), "delete": len(inserted)}
    return captured


DECODED: list[int] = []  # how many events rowimage.py decoded (and matched)


Rows = list[dict[str, Any]]


def _same_images(event: Any, codec: MyRowCodec) -> tuple[Rows | None, Rows | None]:
    """Where rowimage.py decodes the event's row images, it gets mysql-replication's values:
    the same types and the same values (repr: ``Decimal('1.50')`` is not ``Decimal('1.5')``),
    except where the library loses them (zero and invalid dates, the empty SET); and the
    key and row JSON the worker makes from them without a dictionary (``key_rows``:
    rowtext.py's reader, straight from the bytes) are those of its rows, byte for byte.
    Returns rowimage.py's rows (None where it does not decode the event) and the library's
    (None where it cannot)."""
    images = row_images(event.columns, key_row_reader(event.columns, codec))
    direct = None if images is None else images.rows(event, keep=True)
    if direct is None:
        return None, _library_rows(event)
    assert images is not None
    encoded = images.key_rows(event, keep=True)
    assert encoded is not None, "a table rowimage.py decodes has no rowtext.py reader"
    assert encoded == [codec.key_row_from_binlog(values) for row in direct
                       for values in _images_of(row)]
    library = _library_rows(event)
    if library is None:  # an impossible date: the library raises, rowimage.py has its text
        DECODED.append(len(direct))
        return direct, None
    typed = [[{k: (type(v), repr(v)) for k, v in values.items()} for values in _images_of(row)]
             for row in direct]
    expected = [[{k: _library_value(v, sources.get(k), direct_value)
                  for (k, v), direct_value in zip(values.items(), mine.values(), strict=True)}
                 for (values, sources), mine in zip(_with_sources(row), _images_of(ours),
                                                    strict=True)]
                for row, ours in zip(library, direct, strict=True)]
    assert typed == expected
    DECODED.append(len(direct))
    return direct, library


_NO_SOURCES: dict[str, dict[str, str]] = {
    "none_sources": {}, "before_none_sources": {}, "after_none_sources": {}}


def _library_rows(event: Any) -> list[dict[str, Any]] | None:
    """mysql-replication's rows of the event; None where it cannot decode them (a DATE
    with an impossible day, ``ALLOW_INVALID_DATES``: it raises ValueError)."""
    try:
        return list(event.rows)
    except ValueError:
        return None


def _images_of(row: dict[str, Any]) -> list[dict[str, Any]]:
    return [row["before_values"], row["after_values"]] if "before_values" in row else [
        row["values"]]


def _with_sources(row: dict[str, Any]) -> list[tuple[dict[str, Any], dict[str, str]]]:
    if "before_values" in row:
        return [(row["before_values"], row["before_none_sources"]),
                (row["after_values"], row["after_none_sources"])]
    return [(row["values"], row["none_sources"])]


LOST = {"out of date range", "out of datetime2 range"}


def _library_value(value: Any, source: str | None, ours: Any) -> tuple[type, str]:
    """mysql-replication's value as rowimage.py gives it: the same, except that a date the
    library cannot hold (None, said "out of ... range") is MySQL's text, and the empty
    SET (None, said "empty set") an empty set."""
    if value is None and source in LOST:
        assert isinstance(ours, str), ours
        return str, repr(ours)
    if value is None and source == "empty set":
        return set, repr(set())
    return type(value), repr(value)


def _same_bytes(
    codec: MyRowCodec,
    log_codec: MyRowCodec,
    cells: tuple[Any, ...],
    values: dict[str, Any],
    none_sources: dict[str, str],
) -> None:
    from_dump = codec.key_row_from_dump(cells)
    from_log = log_codec.key_row_from_binlog(values, none_sources)
    assert from_dump == from_log, (cells, values)
    assert codec.row_from_dump(cells) == log_codec.row_from_binlog(values, none_sources)
    assert codec.key_from_dump(cells) == log_codec.key_from_binlog(values, none_sources)
    texts = codec.key_texts_from_dump(cells)
    assert texts == log_codec.key_texts_from_binlog(values, none_sources)
    json.loads(from_dump[1])


class _Number(str):
    """A JSON number's text, as written."""


def field_of(captured: Captured, row_id: int, name: str) -> str:
    """The canonical JSON of one column of a dumped row, as written in the row."""
    value = json.loads(captured.dump[row_id], parse_int=_Number, parse_float=_Number)[name]
    if value is None or isinstance(value, _Number):
        return "null" if value is None else str(value)
    assert isinstance(value, str)
    return json.dumps(value, ensure_ascii=False)  # how the codec escapes strings


# --- the session --------------------------------------------------------------------------


def test_the_row_reader_reads_long_cells_and_stops_on_an_error(db: Db) -> None:
    """Cells of 250 bytes and more have 2, 3 (and 8) byte lengths; an error after some
    rows (a subquery of two rows, met at id 40) is raised as PyMySQL raises it."""
    db.execute(["CREATE TABLE t (id int PRIMARY KEY, b longblob, s mediumtext)",
                ("INSERT INTO t VALUES (%s, %s, %s)",
                 [(i, bytes(range(256)) * (i * 13), "é" * (i * 97)) for i in range(60)])])
    rows = db.select("SELECT id, b, s, NULL, '' FROM t ORDER BY id")
    assert [len(r[1]) for r in rows] == [256 * 13 * i for i in range(60)]
    assert rows[59][2] == "é" * 97 * 59 and rows[0][3:] == (None, "")
    failing = "SELECT id, IF(id < 40, 1, (SELECT 1 UNION SELECT 2)) FROM t ORDER BY id"
    errors = []
    for connect in (pymysql.connect, DumpConnection):
        with db.dumper(connect) as conn, conn.cursor() as cur:
            with pytest.raises(pymysql.MySQLError) as raised:
                cur.execute(failing)
            errors.append((type(raised.value), raised.value.args))
            cur.execute("SELECT 1")  # the connection goes on
            assert cur.fetchall() == (("1",),)
    assert errors[0] == errors[1] and errors[0][1][0] == 1242


def test_the_dump_connection_runs_with_the_session_settings(db: Db) -> None:
    with db.dumper() as conn, conn.cursor() as cur:
        names = list(MY_SESSION_SETTINGS)
        cur.execute("SELECT " + ", ".join(f"@@session.{name}" for name in names))
        assert dict(zip(names, cur.fetchone(), strict=True)) == dict(MY_SESSION_SETTINGS)
        cur.execute("SELECT 42, 1.50, 'é', _binary'x', NULL")
        assert cur.fetchone() == ("42", "1.50", "é", b"x", None)


# --- numbers ------------------------------------------------------------------------------


def test_integers(db: Db) -> None:
    types = {
        "tinyint": (-128, 127, 255),
        "smallint": (-32768, 32767, 65535),
        "mediumint": (-8388608, 8388607, 16777215),
        "int": (-2147483648, 2147483647, 4294967295),
        "bigint": (-9223372036854775808, 9223372036854775807, 18446744073709551615),
    }
    columns = ", ".join(f"s_{n} {n}, u_{n} {n} unsigned" for n in types)
    names = [f"{p}_{n}" for n in types for p in ("s", "u")]
    insert = f"INSERT INTO t VALUES (%s{', %s' * len(names)}, %s, %s)"
    minimum = [v for lo, _, _ in types.values() for v in (lo, 0)]
    maximum = [v for _, hi, umax in types.values() for v in (hi, umax)]
    captured = capture(
        db,
        f"CREATE TABLE t (id int PRIMARY KEY, {columns}, z int(5) zerofill, b bool)",
        [
            (insert, [1, *minimum, 42, True]),
            (insert, [2, *maximum, 0, False]),
            (insert, [3, *([0] * len(names)), 99999, 127]),
            (insert, [4, *([None] * len(names)), None, None]),
        ],
    )
    assert field_of(captured, 2, "u_bigint") == "18446744073709551615"
    assert field_of(captured, 1, "s_bigint") == "-9223372036854775808"
    assert field_of(captured, 1, "z") == "42"
    assert field_of(captured, 2, "z") == "0"
    assert field_of(captured, 4, "u_int") == "null"


def test_decimals(db: Db) -> None:
    captured = capture(
        db,
        "CREATE TABLE t (id int PRIMARY KEY, a decimal(12,2), b decimal(65,30) unsigned,"
        " c decimal(5,0), d decimal(6,2) zerofill, e decimal(65,0), f decimal(3,3))",
        [
            "INSERT INTO t VALUES (1, -0.50, 0.000000000000000000000000000001, -12345, 1.5,"
            " -99999999999999999999999999999999999999999999999999999999999999999, -0.999)",
            "INSERT INTO t VALUES (2, 9999999999.99,"
            " 99999999999999999999999999999999999.999999999999999999999999999999, 99999,"
            " 0, 99999999999999999999999999999999999999999999999999999999999999999, 0.001)",
            "INSERT INTO t VALUES (3, 0, 0, 0, 0.05, 0, 0)",
            "INSERT INTO t VALUES (4, NULL, NULL, NULL, NULL, NULL, NULL)",
            "INSERT INTO t VALUES (5, -123456.78, 1.5, -1, 1234.56, 123456789012345678, -0.001)",
        ],
    )
    assert field_of(captured, 1, "a") == '"-0.50"'
    assert field_of(captured, 3, "b") == '"0.000000000000000000000000000000"'
    assert field_of(captured, 1, "d") == '"1.50"'
    assert field_of(captured, 3, "d") == '"0.05"'
    assert field_of(captured, 1, "f") == '"-0.999"'


def test_floats_and_doubles(db: Db) -> None:
    captured = capture(
        db,
        "CREATE TABLE t (id int PRIMARY KEY, f float, d double, f2 float(7,2),"
        " d2 double(10,3), fu float unsigned)",
        [
            "INSERT INTO t VALUES (1, 0.1, 0.30000000000000004, 12345.67, 1234567.891, 1.5)",
            "INSERT INTO t VALUES (2, 3.4028234e38, 1e20, -99999.99, 0.1, 0)",
            "INSERT INTO t VALUES (3, 1.17549435e-38, 1.2345e-5, 0.01, 0.001, 3.3e38)",
            "INSERT INTO t VALUES (4, 16777217, 1.7976931348623157e308, 0, 0, 1e-45)",
            "INSERT INTO t VALUES (5, 1e-45, 5e-324, NULL, NULL, NULL)",
            "INSERT INTO t VALUES (6, -0e0, -0e0, 1, 1, 1)",
            "INSERT INTO t VALUES (7, 123456.7, 123456789012345678, 1, 1, 1)",
            "INSERT INTO t VALUES (8, NULL, NULL, NULL, NULL, NULL)",
        ],
    )
    assert field_of(captured, 1, "f") == "0.1"
    assert field_of(captured, 2, "f") == "3.4028235e+38"
    assert field_of(captured, 4, "f") == "16777216"
    assert field_of(captured, 7, "f") == "123456.7"
    assert field_of(captured, 5, "f") == "1e-45"
    assert field_of(captured, 2, "d") == "1e+20"
    assert field_of(captured, 3, "d") == "1.2345e-05"
    assert field_of(captured, 1, "f2") == "12345.67"


def test_random_floats_and_doubles(db: Db) -> None:
    rng = random.Random(20261122)
    rows = []
    for i in range(1, 1501):
        single = struct.unpack("<f", rng.getrandbits(32).to_bytes(4, "little"))[0]
        double = struct.unpack("<d", rng.getrandbits(64).to_bytes(8, "little"))[0]
        finite = [v if math.isfinite(v) else 0.0 for v in (single, double)]
        rows.append((i, *finite))
    capture(
        db,
        "CREATE TABLE t (id int PRIMARY KEY, f float, d double)",
        [("INSERT INTO t VALUES (%s, %s, %s)", rows)],
    )


# --- strings ------------------------------------------------------------------------------

CONTROL = "".join(chr(c) for c in range(32)) + '"\\\x7f'


def test_text(db: Db) -> None:
    captured = capture(
        db,
        "CREATE TABLE t (id int PRIMARY KEY, a char(5), b varchar(20), c text, d tinytext,"
        " e mediumtext, f longtext, g char(3) CHARACTER SET latin1, j json,"
        " k varchar(40) COLLATE utf8mb4_bin)",
        [
            (
                "INSERT INTO t VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
                [
                    (1, "ab  ", "x  ", "y ", "", "m", "😀", "é", '{"a":  1}', "Ab "),
                    (2, "", "", CONTROL, "😀", "😀" * 1000, "a" * 70000, "", "[1, 2]", ""),
                    (3, "😀😀", "😀", None, None, None, None, None, None, None),
                    (4, "  x", "\u2028\u00a0", "\ufeff", "ü", "\U0010ffff", "'", "ÿ", "null", "😀"),
                ],
            )
        ],
    )
    assert field_of(captured, 1, "a") == '"ab"'  # CHAR padding stripped on both paths
    assert field_of(captured, 1, "b") == '"x  "'
    assert field_of(captured, 1, "j") == '"{\\"a\\":  1}"'
    assert json.loads(captured.dump[2])["c"] == CONTROL


def test_binary(db: Db) -> None:
    every_byte = bytes(range(256))
    captured = capture(
        db,
        "CREATE TABLE t (id int PRIMARY KEY, a binary(4), b varbinary(300), c blob,"
        " d tinyblob, e longblob, f char(4) CHARACTER SET binary, g binary(1))",
        [
            (
                "INSERT INTO t VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
                [
                    (1, b"a", b"b\0", b"", b"\0", every_byte * 300, b"A ", b"\0"),
                    (2, b"\0\0\0\0", b"\0\0", b"\0\xff", b"", b"", b"", b""),
                    (3, b"    ", b" ", every_byte, b"x", b"\0" * 10, b"\0\0\0\x01", b"\xff"),
                    (4, None, None, None, None, None, None, None),
                    (5, b"", every_byte[:255], b"", b"", b"", b"\0", b" "),
                ],
            )
        ],
    )
    assert field_of(captured, 1, "a") == '"YQAAAA=="'
    assert field_of(captured, 2, "a") == '"AAAAAA=="'
    assert field_of(captured, 5, "a") == '"AAAAAA=="'
    assert field_of(captured, 1, "c") == '""'
    assert field_of(captured, 2, "c") == '"AP8="'


# --- dates and times ----------------------------------------------------------------------


def test_dates_and_times(db: Db) -> None:
    fsps = range(7)
    ddl = (
        "CREATE TABLE t (id int PRIMARY KEY, d date, y year, "
        + ", ".join(f"dt{p} datetime({p}), ts{p} timestamp({p}) NULL, t{p} time({p})" for p in fsps)
        + ")"
    )
    names = ["d", "y", *(f"{k}{p}" for p in fsps for k in ("dt", "ts", "t"))]

    def insert(
        row_id: int, d: str | None, y: int | None, values: list[tuple[Any, ...]]
    ) -> Statement:
        cells = [row_id, d, y, *(v for triple in values for v in triple)]
        placeholders = ", ".join(["%s"] * len(cells))
        return f"INSERT INTO t (id, {', '.join(names)}) VALUES ({placeholders})", cells

    def each(dt: str | None, ts: str | None, t: str | None) -> list[tuple[Any, ...]]:
        return [(dt, ts, t)] * len(fsps)

    captured = capture(
        db,
        ddl,
        [
            insert(
                1,
                "1000-01-01",
                1901,
                each("1000-01-01 00:00:00", "1970-01-01 00:00:01", "-838:59:59"),
            ),
            insert(
                2,
                "9999-12-31",
                2155,
                each(
                    "9999-12-31 23:59:59.999999", "2038-01-19 03:14:07.999999", "838:59:59.999999"
                ),
            ),
            insert(
                3,
                "2024-02-29",
                0,
                each(
                    "2024-02-29 12:34:56.123456", "2024-02-29 12:34:56.654321", "-00:00:01.234567"
                ),
            ),
            insert(4, None, None, each(None, None, None)),
            insert(
                5,
                "0001-01-01",
                2024,
                each("0001-01-01 00:00:00.5", "1970-01-01 00:00:01.5", "-00:00:00.000001"),
            ),
            insert(6, "2023-12-31", 1999, each("2020-01-01", "2020-01-01", "24:00:00")),
            insert(
                7,
                "2020-01-01",
                1970,
                each("2020-01-01 00:00:00.1", "2000-01-01 00:00:00.01", "-100:00:01.5"),
            ),
            insert(
                8,
                "2020-01-01",
                1970,
                each(
                    "2020-01-01 00:00:00.999999", "2000-01-01 00:00:00.999999", "-00:00:59.999999"
                ),
            ),
            "SET time_zone = '+05:00'",  # TIMESTAMP is stored in UTC, dumped in UTC
            insert(
                9,
                "2020-01-01",
                None,
                each("2020-01-01 05:00:00", "2020-01-01 05:00:00.5", "-12:00:00.0001"),
            ),
        ],
    )
    assert field_of(captured, 1, "t0") == '"-838:59:59"'
    assert field_of(captured, 2, "t6") == '"838:59:59.999999"'
    assert field_of(captured, 3, "t4") == '"-00:00:01.2345"'  # truncated
    assert field_of(captured, 3, "t6") == '"-00:00:01.234567"'
    assert field_of(captured, 7, "t6") == '"-100:00:01.500000"'
    assert field_of(captured, 6, "t0") == '"24:00:00"'
    assert field_of(captured, 3, "dt3") == '"2024-02-29 12:34:56.123"'
    assert field_of(captured, 6, "dt6") == '"2020-01-01 00:00:00.000000"'
    assert field_of(captured, 9, "ts0") == '"2020-01-01 00:00:00"'
    assert field_of(captured, 9, "ts1") == '"2020-01-01 00:00:00.5"'
    assert field_of(captured, 5, "ts2") == '"1970-01-01 00:00:01.50"'
    assert field_of(captured, 3, "y") == "0"
    assert field_of(captured, 2, "y") == "2155"


def test_zero_and_invalid_dates_are_their_text(db: Db) -> None:
    """What MySQL prints on both paths, the log's read from the row images' bytes (where
    mysql-replication gives None, as for NULL): none of them lands as null."""
    captured = capture(
        db,
        "CREATE TABLE t (id int PRIMARY KEY, d date, dt datetime, dt3 datetime(3),"
        " ts timestamp NULL, ts6 timestamp(6) NULL, e enum('a'), s set('x','y'))",
        [
            "SET sql_mode = 'ALLOW_INVALID_DATES'",
            "INSERT INTO t VALUES (1, '0000-00-00', '0000-00-00 00:00:00',"
            " '0000-00-00 00:00:00', '0000-00-00 00:00:00', '0000-00-00 00:00:00', 'a', '')",
            "INSERT INTO t VALUES (2, '2020-05-00', '2020-00-05 00:00:00',"
            " '2020-05-00 10:00:00.1', NULL, NULL, NULL, NULL)",
            "INSERT INTO t VALUES (3, '0000-05-05', '0000-01-01 00:00:00',"
            " '2020-04-31 00:00:00', '2020-01-01', '2020-01-01', 'a', 'y')",
            # Not the zero TIMESTAMP, though its seconds are 0.
            "INSERT INTO t VALUES (4, NULL, NULL, NULL, NULL, '1970-01-01 00:00:00.5', NULL,"
            " 'x,y')",
            "INSERT INTO t VALUES (5, '2020-02-31', '2021-02-29 23:59:59', NULL, NULL, NULL,"
            " NULL, NULL)",
        ],
    )
    assert json.loads(captured.dump[1]) == {
        "id": 1,
        "d": "0000-00-00",
        "dt": "0000-00-00 00:00:00",
        "dt3": "0000-00-00 00:00:00.000",
        "ts": "0000-00-00 00:00:00",
        "ts6": "0000-00-00 00:00:00.000000",
        "e": "a",
        "s": "",
    }
    assert json.loads(captured.dump[2])["d"] == "2020-05-00"
    assert json.loads(captured.dump[2])["dt3"] == "2020-05-00 10:00:00.100"
    assert json.loads(captured.dump[3])["dt3"] == "2020-04-31 00:00:00.000"
    assert json.loads(captured.dump[3])["ts"] == "2020-01-01 00:00:00"
    assert json.loads(captured.dump[4])["ts6"] == "1970-01-01 00:00:00.500000"
    assert json.loads(captured.dump[5])["d"] == "2020-02-31"


# --- enum, set, bit -----------------------------------------------------------------------


def test_enum_set_bit(db: Db) -> None:
    captured = capture(
        db,
        "CREATE TABLE t (id int PRIMARY KEY,"
        " e enum('x','y''q','z,w','a\\\\b','','c\\nd', 'é'),"
        " s set('p','q','r','s t','é'),"
        " n set('a','b','c','d','e','f','g','h','i') NOT NULL,"
        " b1 bit(1), b10 bit(10), b64 bit(64))",
        [
            "SET sql_mode = ''",
            "INSERT INTO t VALUES (1, 'y''q', 'r,p', 'i,a', b'1', b'1000000001',"
            " x'ffffffffffffffff')",
            "INSERT INTO t VALUES (2, 'invalid', '', '', b'0', b'0', 0)",
            "INSERT INTO t VALUES (3, 'é', 's t,é', 'a', NULL, NULL, NULL)",
            "INSERT INTO t VALUES (4, 'a\\\\b', NULL, 'b', NULL, NULL, 1)",
            "INSERT INTO t VALUES (5, '', 'q', 'c', NULL, NULL, NULL)",
            "INSERT INTO t VALUES (6, 'c\\nd', 'p,q,r,s t,é', 'a,b,c,d,e,f,g,h,i', 1, 1023, 2)",
            "INSERT INTO t VALUES (7, NULL, NULL, 'd', NULL, NULL, NULL)",
        ],
    )
    assert field_of(captured, 1, "s") == '"p,r"'
    assert field_of(captured, 1, "n") == '"a,i"'
    assert field_of(captured, 2, "s") == '""'  # empty set (the log says None + none_sources)
    assert field_of(captured, 2, "n") == '""'
    assert field_of(captured, 7, "s") == "null"
    assert field_of(captured, 2, "e") == '""'
    assert field_of(captured, 1, "b10") == "513"
    assert field_of(captured, 1, "b64") == "18446744073709551615"


def test_members_outside_the_bmp(db: Db) -> None:
    """information_schema shows them as '?': the binlog's descriptors have them right."""
    db.execute(["CREATE TABLE t (id int PRIMARY KEY, e enum('a','😀'), s set('b','🎉'))"])
    start = db.position()
    db.execute(["INSERT INTO t VALUES (1, '😀', 'b,🎉'), (2, 'a', '')"])
    shown = db.columns()
    dumped = _cells_by_id(db.dump(shown))
    (event,) = list(db.binlog(start))
    logged = columns_from_binlog(event.columns)
    assert shown[1].members == ("a", "?")
    assert logged[1].members == ("a", "😀")
    assert all(map(same_column, shown, logged))
    codec = MyRowCodec(logged, ["id"])
    for image in event.rows:
        values, none_sources = image["values"], image["none_sources"]
        cells = dumped[values["id"]]
        assert codec.row_from_dump(cells) == codec.row_from_binlog(values, none_sources)
        assert MyRowCodec(shown, ["id"]).row_from_dump(cells) == codec.row_from_dump(cells)
    assert codec.row_from_dump(dumped[1]) == '{"id":1,"e":"😀","s":"b,🎉"}'


# --- spatial, UUID, INET: MariaDB's types ------------------------------------------------

SPATIAL = ("geometry", "point", "linestring", "polygon", "multipoint", "multilinestring",
           "multipolygon", "geometrycollection")


def test_spatial_types_uuid_and_inet(db: Db) -> None:
    """Every spatial type (with and without an SRID), UUID, INET4 and INET6: the same JSON
    from the dump and from the log; UUID and INET columns are told from BINARY(16) and
    BINARY(4) by the catalog (the log shows them alike)."""
    wkt = {
        "geometry": "POLYGON((0 0,1 0,1 1,0 0))", "point": "POINT(1.5 -2)",
        "linestring": "LINESTRING(0 0,1 1,2 5)",
        "polygon": "POLYGON((0 0,10 0,10 10,0 10,0 0),(5 5,7 5,7 7,5 7,5 5))",
        "multipoint": "MULTIPOINT(0 0,1 1)", "multilinestring": "MULTILINESTRING((0 0,1 1))",
        "multipolygon": "MULTIPOLYGON(((0 0,1 0,1 1,0 0)))",
        "geometrycollection": "GEOMETRYCOLLECTION(POINT(1 1),LINESTRING(0 0,1 1))",
    }
    columns = ", ".join(f"g_{name} {name}" for name in SPATIAL)
    inserts = []
    for i, srid in enumerate((0, 4326, 3857), 1):
        shapes = ", ".join(f"ST_GeomFromText('{wkt[name]}', {srid})" for name in SPATIAL)
        inserts.append(f"INSERT INTO t VALUES ({i}, {shapes}, %s, %s, %s, %s, %s)")
    values = [("550e8400-e29b-41d4-a716-446655440000", "192.168.0.1", "2001:db8::ff00:42:8329",
               b"\x01" * 16, b"\x02\0\0\0"),
              ("00000000-0000-0000-0000-000000000000", "0.0.0.0", "::", b"\0" * 16,  # noqa: S104
               b"\0" * 4),
              ("ffffffff-ffff-4fff-bfff-ffffffffffff", "255.255.255.255", "::ffff:1.2.3.4",
               b"\xff" * 16, b"\xff" * 4)]
    captured = capture(
        db,
        f"CREATE TABLE t (id int PRIMARY KEY, {columns}, u uuid, i4 inet4, i6 inet6,"
        " b16 binary(16), b4 binary(4))",
        [(sql, params) for sql, params in zip(inserts, values, strict=True)]
        + ["INSERT INTO t (id) VALUES (4)"],
    )
    assert [c.spatial for c in captured.columns[1:9]] == list(SPATIAL)
    assert [c.kind for c in captured.columns[9:]] == [Kind.UUID, Kind.INET4, Kind.INET6,
                                                      Kind.BINARY, Kind.BINARY]
    row = json.loads(captured.dump[2])
    point = base64.b64decode(row["g_point"])
    assert point[:4] == (4326).to_bytes(4, "little") and point[4:9] == b"\x01\x01\0\0\0"
    assert (row["u"], row["i4"], row["i6"]) == (
        "00000000-0000-0000-0000-000000000000", "0.0.0.0", "::")  # noqa: S104
    assert json.loads(captured.dump[3])["i6"] == "::ffff:1.2.3.4"
    assert json.loads(captured.dump[4])["u"] is None


def test_inet6_texts_are_mariadbs(db: Db) -> None:
    """Random addresses, many with runs of zero groups: the log path's text of the 16
    bytes (texts.inet6_text) is the text MariaDB prints for the column."""
    rng = random.Random(28)
    addresses = []
    for _ in range(400):
        words = [rng.choice([0, 0, 0, 1, 0xFFFF, rng.randrange(1 << 16)]) for _ in range(8)]
        addresses.append(ipaddress.IPv6Address(b"".join(w.to_bytes(2, "big") for w in words)))
    addresses += [ipaddress.IPv6Address(f"::{v}") for v in ("1.2.3.4", "ffff:1.2.3.4", "1:2")]
    capture(db, "CREATE TABLE t (id int PRIMARY KEY, a inet6)",
            [("INSERT INTO t VALUES (%s, %s)",
              [(i, str(a)) for i, a in enumerate(addresses, 1)])])


def test_a_type_the_worker_does_not_read_is_named(db: Db) -> None:
    """YEAR(2), still accepted by MariaDB 10.11: refused by both descriptors, naming the
    column and its type."""
    db.execute(["CREATE TABLE t (id int PRIMARY KEY, y year(2))"])
    with db.dumper() as conn, conn.cursor() as cur:
        cur.execute(COLUMNS_SQL, (db.database, "t"))
        rows = cur.fetchall()
    with pytest.raises(UnsupportedType, match=r"column 'y': type 'year\(2\)' is not supported"):
        [column_from_information_schema(row) for row in rows]


# --- keys ---------------------------------------------------------------------------------


def test_keyset_pagination_with_key_params(db: Db) -> None:
    """Paging by ``(k1,k2,k3,k4) > key_params(last key texts)`` visits every row once, in
    ``ORDER BY k1,k2,k3,k4`` order (ENUM and SET sort by number, so their parameters are)."""
    db.execute(
        [
            "CREATE TABLE t (e enum('z','a','m') NOT NULL, b varbinary(3) NOT NULL,"
            " d decimal(30,10) NOT NULL, f float NOT NULL, s set('z','a') NOT NULL, x int,"
            " PRIMARY KEY (e, b, d, f, s))",
            (
                "INSERT INTO t VALUES (%s, %s, %s, %s, %s, %s)",
                [
                    (e, b, d, f, s, i)
                    for i, (e, b, d, f, s) in enumerate(
                        itertools.product(
                            ["z", "a", "m"],
                            [b"\x00", b"\xff\x00", b"a"],
                            ["0.1000000001", "0.1", "-5"],
                            [0.1, 0.30000001192092896],
                            ["a", "z,a"],
                        )
                    )
                ],
            ),
        ]
    )
    columns = db.columns()
    key = ["e", "b", "d", "f", "s"]
    codec = MyRowCodec(columns, key)
    order = ", ".join(f"`{k}`" for k in key)
    full = db.dump(columns)
    with db.dumper() as conn, conn.cursor() as cur:
        cur.execute(f"SELECT {select_list(columns)} FROM t ORDER BY {order}")
        expected = [codec.key_from_dump(row) for row in cur.fetchall()]
        assert len(expected) == len(full) == 108
        paged: list[str] = []
        last: tuple[str, ...] | None = None
        while True:
            where = "" if last is None else f"WHERE ({order}) > ({', '.join(['%s'] * len(key))})"
            cur.execute(
                f"SELECT {select_list(columns)} FROM t {where} ORDER BY {order} LIMIT 7",
                [] if last is None else codec.key_params(last),
            )
            rows = cur.fetchall()
            if not rows:
                break
            paged += [codec.key_from_dump(row) for row in rows]
            last = codec.key_texts_from_dump(rows[-1])
        assert paged == expected
        # The key columns alone (a range's end of a parallel window) give the same texts.
        key_select = select_list([next(c for c in columns if c.name == k) for k in key])
        cur.execute(f"SELECT {select_list(columns)} FROM t ORDER BY {order}")
        whole = [codec.key_texts_from_dump(row) for row in cur.fetchall()]
        cur.execute(f"SELECT {key_select} FROM t ORDER BY {order}")
        assert [codec.key_texts_from_key_cells(row) for row in cur.fetchall()] == whole
        # A key typed by a user finds its row.
        typed = ("a", "/wA=", "0.1", "0.1", "z,a")
        cur.execute(
            f"SELECT {select_list(columns)} FROM t WHERE ({order}) = (%s, %s, %s, %s, %s)",
            codec.key_params(typed),
        )
        (found,) = cur.fetchall()
        assert codec.key_texts_from_dump(found) == ("a", "/wA=", "0.1000000000", "0.1", "z,a")
        assert codec.key_from_dump(found) == '["a","/wA=","0.1000000000",0.1,"z,a"]'


# --- rowimage.py: the row images decoded without mysql-replication's row decoding -------


def test_row_images_decode_every_type(db: Db) -> None:
    """A table of the common types: every event is decoded by rowimage.py (and matches
    mysql-replication, in capture); a table of MariaDB's other types gets a decoder too."""
    before = sum(DECODED)
    capture(
        db,
        "CREATE TABLE t (id bigint PRIMARY KEY, a int, b varchar(20), c decimal(12,2),"
        " d timestamp(6) NULL, e datetime(3), f date, g double, h float, i year,"
        " j char(3), k text, l blob, m varbinary(300), n tinyint unsigned, o mediumint,"
        " p smallint unsigned, q varchar(300) CHARACTER SET latin1, r decimal(3,3))",
        [
            ("INSERT INTO t VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s,"
             " %s, %s, %s, %s, %s)", [
                 (i, i * 7 - 500, f"r{i}é", f"{i * 13 - 900}.{i % 100:02d}",
                  f"2026-01-{i % 28 + 1:02d} 10:11:12.{i:06d}",
                  f"2025-12-{i % 28 + 1:02d} 23:59:59.{i % 1000:03d}",
                  f"20{i % 100:02d}-03-0{i % 9 + 1}", i / 3, i / 7, 1901 + i % 200,
                  "ab" if i % 2 else "", "t" * (i % 500), bytes([i % 256]) * (i % 70),
                  bytes(range(i % 256)) * 1, i % 256, -i * 999, i * 3, "Ä" * (i % 300),
                  f"0.{i % 1000:03d}")
                 for i in range(1, 200)]),
            "INSERT INTO t (id) VALUES (1000)",
        ],
    )
    assert sum(DECODED) - before >= 3 * 199  # inserts, updates, deletes

    # every other type of MariaDB too: no table is left to mysql-replication's decoding
    db.execute(["DROP TABLE t", "CREATE TABLE t (id int PRIMARY KEY, e enum('x', 'y'),"
                " s set('a'), b bit(3), t time(2), g point, u uuid, i inet6, j json)"])
    start = db.position()
    db.execute(["INSERT INTO t VALUES (1, 'y', 'a', b'101', '-1:00:00.5',"
                " ST_GeomFromText('POINT(1 1)'), UUID(), '::1', '[]')"])
    events = list(db.binlog(start))
    assert events and all(row_images(event.columns) is not None for event in events)
