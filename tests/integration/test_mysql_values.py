"""Same value, same bytes, against a real MariaDB: the dump path and the binlog path.

Each test creates a table, writes edge values with an ordinary connection, reads them by
the dump path (PyMySQL with ``dump_connection_options()``, ``select_list``) and from the
binary log (``BinLogStreamReader`` from the position before the writes, without
``is_mariadb``), and checks that both give the same descriptors, row JSON and key texts.
The rows are then updated (key changed) and deleted, so before/after images are checked
as well.
"""

from __future__ import annotations

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

from dblog_worker.mysql.columns import (
    COLUMNS_SQL,
    MyColumn,
    column_from_binlog,
    column_from_information_schema,
    select_list,
)
from dblog_worker.mysql.resultset import DumpConnection
from dblog_worker.mysql.rowimage import row_images
from dblog_worker.mysql.rowtext import key_row_reader
from dblog_worker.mysql.session import (
    BINLOG_READER_OPTIONS,
    MY_SESSION_SETTINGS,
    dump_connection_options,
)
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
        logged = [column_from_binlog(c) for c in event.columns]
        _same_images(event, MyRowCodec(logged, ["id"]))
        assert len(logged) == len(columns)
        assert all(map(same_column, columns, logged)), (columns, logged)
        for log_codec in (codec, MyRowCodec(logged, ["id"])):
            for image in event.rows:
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
        seen[kind[type(event)]] += len(event.rows)
    assert seen == {"insert": len(inserted), "update": len(inserted), "delete": len(inserted)}
    return captured


DECODED: list[int] = []  # how many events rowimage.py decoded (and matched)


def _same_images(event: Any, codec: MyRowCodec) -> None:
    """Where rowimage.py decodes the event's row images, it gets mysql-replication's values:
    the same types and the same values (repr: ``Decimal('1.50')`` is not ``Decimal('1.5')``);
    and the key and row JSON the worker makes from them without a dictionary
    (``key_rows``: rowtext.py's reader, straight from the bytes) are those of the library's
    rows, byte for byte."""
    images = row_images(event.columns, key_row_reader(event.columns, codec))
    direct = None if images is None else images.rows(event, keep=True)
    if direct is None:
        return
    assert images is not None
    encoded = images.key_rows(event, keep=True)
    assert encoded is not None, "a table rowimage.py decodes has no rowtext.py reader"
    names = ("before", "after") if "before_values" in direct[0] else ("",)
    assert encoded == [codec.key_row_from_binlog(row[f"{n}_values" if n else "values"],
                                                 row.get(f"{n}_none_sources" if n else
                                                         "none_sources"))
                       for row in event.rows for n in names]
    images_of = ("before_values", "after_values") if "before_values" in direct[0] else (
        "values",)
    typed = [[{k: (type(v), repr(v)) for k, v in row[i].items()} for i in images_of]
             for row in direct]
    expected = [[{k: (type(v), repr(v)) for k, v in row[i].items()} for i in images_of]
                for row in event.rows]
    assert typed == expected
    DECODED.append(len(direct))


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


def test_zero_and_invalid_dates_are_null(db: Db) -> None:
    captured = capture(
        db,
        "CREATE TABLE t (id int PRIMARY KEY, d date, dt datetime, dt3 datetime(3),"
        " ts timestamp NULL, ts6 timestamp(6) NULL)",
        [
            "SET sql_mode = 'ALLOW_INVALID_DATES'",
            "INSERT INTO t VALUES (1, '0000-00-00', '0000-00-00 00:00:00',"
            " '0000-00-00 00:00:00', '0000-00-00 00:00:00', '0000-00-00 00:00:00')",
            "INSERT INTO t VALUES (2, '2020-05-00', '2020-00-05 00:00:00',"
            " '2020-05-00 10:00:00.1', NULL, NULL)",
            "INSERT INTO t VALUES (3, '0000-05-05', '0000-01-01 00:00:00',"
            " '2020-04-31 00:00:00', '2020-01-01', '2020-01-01')",
            # Not the zero TIMESTAMP, though its seconds are 0.
            "INSERT INTO t VALUES (4, NULL, NULL, NULL, NULL, '1970-01-01 00:00:00.5')",
        ],
    )
    assert json.loads(captured.dump[1]) == {
        "id": 1,
        "d": None,
        "dt": None,
        "dt3": None,
        "ts": None,
        "ts6": None,
    }
    assert json.loads(captured.dump[2])["d"] is None
    assert json.loads(captured.dump[3])["dt3"] is None
    assert json.loads(captured.dump[3])["ts"] == "2020-01-01 00:00:00"
    assert json.loads(captured.dump[4])["ts6"] == "1970-01-01 00:00:00.500000"


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
    logged = [column_from_binlog(c) for c in event.columns]
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


# --- unsupported types --------------------------------------------------------------------


@pytest.mark.parametrize("column_type", ["geometry", "point", "uuid", "inet6", "inet4"])
def test_unsupported_types_are_refused(db: Db, column_type: str) -> None:
    db.execute([f"CREATE TABLE t (id int PRIMARY KEY, x {column_type})"])
    with db.dumper() as conn, conn.cursor() as cur:
        cur.execute(COLUMNS_SQL, (db.database, "t"))
        rows = cur.fetchall()
    with pytest.raises(ValueError, match=f"column 'x': type '{column_type}' is not supported"):
        [column_from_information_schema(row) for row in rows]


def test_geometry_in_the_binlog_is_refused(db: Db) -> None:
    db.execute(["CREATE TABLE t (id int PRIMARY KEY, g geometry)"])
    start = db.position()
    db.execute(["INSERT INTO t VALUES (1, ST_GeomFromText('POINT(1 1)'))"])
    (event,) = list(db.binlog(start))
    with pytest.raises(ValueError, match="column 'g': type 'geometry' is not supported"):
        [column_from_binlog(c) for c in event.columns]


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


def test_row_images_decode_the_common_types(db: Db) -> None:
    """A table of the types rowimage.py decodes: every event is decoded by it (and matches
    mysql-replication, in capture); a table with an ENUM keeps the library's decoding."""
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

    db.execute(["DROP TABLE t", "CREATE TABLE t (id int PRIMARY KEY, e enum('x', 'y'))"])
    start = db.position()
    db.execute(["INSERT INTO t VALUES (1, 'y')"])
    events = list(db.binlog(start))
    assert events and all(row_images(event.columns) is None for event in events)
