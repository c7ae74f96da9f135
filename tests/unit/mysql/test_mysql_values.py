"""Canonical serialization of MySQL/MariaDB values (dblog_worker.mysql.values), no server.

Binlog values below are what mysql-replication 1.0.17 decodes (as observed against
MariaDB 10.11, see tests/integration/test_mysql_values.py); dump cells are what PyMySQL
returns with DUMP_CONV.
"""

from __future__ import annotations

import base64
import datetime
import ipaddress
import json
import math
import re
import struct
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pymysqlreplication.column import Column
from pymysqlreplication.constants import FIELD_TYPE

from dblog_worker.mysql.column_model import (
    COLUMNS_SQL,
    Kind,
    MyColumn,
    UnsupportedType,
    column_from_binlog,
    column_from_information_schema,
    columns_from_binlog,
    schema_document,
    select_list,
)
from dblog_worker.mysql.connection import (
    BINLOG_READER_OPTIONS,
    DUMP_CONV,
    MY_SESSION_SETTINGS,
    dump_connection_options,
    session_init_command,
)
from dblog_worker.mysql.texts import inet6_text
from dblog_worker.mysql.values import MyRowCodec
from tests.mysql_columns import same_column

ID = MyColumn("id", Kind.INTEGER)
POINT = bytes.fromhex("e61000000101000000000000000000f03f0000000000000040")
EMPTY_SET = {"c": "empty set"}


def binlog_column(type_code: int, name: str | None, **attrs: Any) -> Any:
    """A mysql-replication Column as a table map event with full metadata builds it."""
    fields: dict[str, Any] = {
        "type": type_code,
        "name": name,
        "unsigned": False,
        "is_primary": False,
        "character_set_name": None,
        "enum_values": None,
        "set_values": None,
    }
    fields.update(attrs)
    return Column(**fields)


def is_row(name: str, data_type: str, column_type: str, **extra: object) -> tuple[object, ...]:
    """A row of COLUMNS_SQL as the dump connection (DUMP_CONV: all text) returns it."""
    return (
        name,
        data_type,
        column_type,
        extra.get("precision"),
        extra.get("scale"),
        extra.get("fsp"),
        extra.get("charset"),
        extra.get("octets"),
    )


def codec_of(column: MyColumn) -> MyRowCodec:
    return MyRowCodec([ID, column], ["id"])


def dump_json(column: MyColumn, cell: str | bytes | None) -> str:
    return codec_of(column).row_from_dump(("1", cell))


def binlog_json(column: MyColumn, value: object, none_sources: dict[str, str] | None = None) -> str:
    name = column.name
    return codec_of(column).row_from_binlog({"id": 1, name: value}, none_sources)


def row(column: MyColumn, json_value: str) -> str:
    return '{"id":1,' + json.dumps(column.name) + ":" + json_value + "}"


# --- descriptors ------------------------------------------------------------------------------

ENUM_MEMBERS = ("x", "y'q", "z,w", "a\\b", "", "c\nd")
SET_MEMBERS = ("p", "q", "r", "s t")

# (information_schema row, binlog column, descriptor both must give)
SAME_COLUMNS = [
    (
        is_row("a", "tinyint", "tinyint(4)", precision="3", scale="0"),
        binlog_column(FIELD_TYPE.TINY, "a"),
        MyColumn("a", Kind.INTEGER),
    ),
    (
        is_row("b", "bigint", "bigint(20) unsigned", precision="20", scale="0"),
        binlog_column(FIELD_TYPE.LONGLONG, "b", unsigned=True),
        MyColumn("b", Kind.INTEGER, unsigned=True),
    ),
    (
        is_row("c", "mediumint", "mediumint(8) unsigned zerofill", precision=8, scale=0),
        binlog_column(FIELD_TYPE.INT24, "c", unsigned=True),
        MyColumn("c", Kind.INTEGER, unsigned=True),
    ),
    (
        is_row("d", "decimal", "decimal(12,2)", precision="12", scale="2"),
        binlog_column(FIELD_TYPE.NEWDECIMAL, "d", precision=12, decimals=2),
        MyColumn("d", Kind.DECIMAL, scale=2),
    ),
    (
        is_row("e", "decimal", "decimal(65,30) unsigned", precision=65, scale=30),
        binlog_column(FIELD_TYPE.NEWDECIMAL, "e", precision=65, decimals=30, unsigned=True),
        MyColumn("e", Kind.DECIMAL, unsigned=True, scale=30),
    ),
    (
        is_row("f", "float", "float unsigned", precision="12"),
        binlog_column(FIELD_TYPE.FLOAT, "f", size=4, unsigned=True),
        MyColumn("f", Kind.FLOAT, unsigned=True),
    ),
    (
        is_row("g", "double", "double(10,3)", precision="10", scale="3"),
        binlog_column(FIELD_TYPE.DOUBLE, "g", size=8),
        MyColumn("g", Kind.DOUBLE),
    ),
    (
        is_row("h", "char", "char(5)", charset="utf8mb4", octets="20"),
        binlog_column(FIELD_TYPE.STRING, "h", character_set_name="utf8", max_length=20),
        MyColumn("h", Kind.TEXT),
    ),
    (
        is_row("i", "longtext", "longtext", charset="utf8mb4", octets="4294967295"),
        binlog_column(FIELD_TYPE.BLOB, "i", character_set_name="utf8", length_size=4),
        MyColumn("i", Kind.TEXT),
    ),
    (
        is_row("j", "binary", "binary(4)", octets="4"),
        binlog_column(FIELD_TYPE.STRING, "j", character_set_name="binary", max_length=4),
        MyColumn("j", Kind.BINARY, length=4),
    ),
    (
        is_row("k", "varbinary", "varbinary(10)", octets="10"),
        binlog_column(FIELD_TYPE.VARCHAR, "k", character_set_name="binary", max_length=10),
        MyColumn("k", Kind.BINARY),
    ),
    (
        is_row("l", "blob", "blob", octets="65535"),
        binlog_column(FIELD_TYPE.BLOB, "l", character_set_name="binary", length_size=2),
        MyColumn("l", Kind.BINARY),
    ),
    (
        is_row("m", "date", "date"),
        binlog_column(FIELD_TYPE.DATE, "m"),
        MyColumn("m", Kind.DATE),
    ),
    (
        is_row("n", "datetime", "datetime(3)", fsp="3"),
        binlog_column(FIELD_TYPE.DATETIME2, "n", fsp=3),
        MyColumn("n", Kind.DATETIME, fsp=3),
    ),
    (
        is_row("o", "timestamp", "timestamp(6)", fsp=6),
        binlog_column(FIELD_TYPE.TIMESTAMP2, "o", fsp=6),
        MyColumn("o", Kind.TIMESTAMP, fsp=6),
    ),
    (
        is_row("p", "time", "time", fsp="0"),
        binlog_column(FIELD_TYPE.TIME2, "p", fsp=0),
        MyColumn("p", Kind.TIME),
    ),
    (
        is_row("q", "year", "year(4)"),
        binlog_column(FIELD_TYPE.YEAR, "q", unsigned=True),
        MyColumn("q", Kind.YEAR),
    ),
    (
        is_row("r", "enum", "enum('x','y''q','z,w','a\\\\b','','c\\nd')", charset="utf8mb4"),
        binlog_column(
            FIELD_TYPE.ENUM, "r", character_set_name="utf8", enum_values=["", *ENUM_MEMBERS]
        ),
        MyColumn("r", Kind.ENUM, members=ENUM_MEMBERS),
    ),
    (
        is_row("s", "set", "set('p','q','r','s t')", charset="utf8mb4"),
        binlog_column(FIELD_TYPE.SET, "s", character_set_name="utf8", set_values=list(SET_MEMBERS)),
        MyColumn("s", Kind.SET, members=SET_MEMBERS),
    ),
    (
        is_row("t", "bit", "bit(10)", precision="10"),
        binlog_column(FIELD_TYPE.BIT, "t", bits=10, bytes=2),
        MyColumn("t", Kind.BIT),
    ),
    (
        is_row("u", "json", "json"),
        binlog_column(FIELD_TYPE.JSON, "u", length_size=4),
        MyColumn("u", Kind.JSON),
    ),
]


@pytest.mark.parametrize(("information_schema", "binlog", "expected"), SAME_COLUMNS)
def test_both_sources_give_the_same_descriptor(
    information_schema: tuple[object, ...], binlog: Any, expected: MyColumn
) -> None:
    assert column_from_information_schema(information_schema) == expected
    assert column_from_binlog(binlog) == expected
    assert same_column(expected, expected)


def test_information_schema_values_may_be_ints_or_bytes() -> None:
    row = (b"d", b"decimal", b"decimal(5,1) unsigned", 5, 1, None, None, None)
    assert column_from_information_schema(row) == MyColumn("d", Kind.DECIMAL, True, scale=1)
    assert column_from_information_schema(("x", "INT", "INT(11)", 10, 0, None, None, None)) == (
        MyColumn("x", Kind.INTEGER)
    )


@pytest.mark.parametrize(
    ("data_type", "column_type"),
    [
        ("year", "year(2)"),
        ("vector", "vector(3)"),
    ],
)
def test_unsupported_information_schema_types_are_refused(data_type: str, column_type: str) -> None:
    message = re.escape(f"column 'g': type '{column_type}' is not supported")
    with pytest.raises(UnsupportedType, match=message) as raised:
        column_from_information_schema(is_row("g", data_type, column_type))
    assert (raised.value.column, raised.value.type_name) == ("g", column_type)


def test_unsupported_binlog_types_are_refused() -> None:
    with pytest.raises(UnsupportedType, match="column 'g': type '200' is not supported"):
        column_from_binlog(binlog_column(200, "g"))


@pytest.mark.parametrize("spatial", ["geometry", "point", "linestring", "polygon", "multipoint",
                                     "multilinestring", "multipolygon", "geometrycollection"])
def test_spatial_types_are_read_with_their_type(spatial: str) -> None:
    column = column_from_information_schema(is_row("g", spatial, spatial))
    assert column == MyColumn("g", Kind.GEOMETRY, spatial=spatial)
    assert schema_document([column], []) == {
        "columns": [{"name": "g", "type": "geometry", "spatial": spatial}], "key": []}


def test_uuid_inet_and_spatial_types_come_from_the_catalog() -> None:
    """The table map shows MariaDB's UUID/INET6 as BINARY(16) and INET4 as BINARY(4), and
    mysql-replication's columns have no spatial type: the catalog's descriptors decide."""
    table_map = [binlog_column(FIELD_TYPE.STRING, name, character_set_name="binary",
                               max_length=length)
                 for name, length in (("u", 16), ("i6", 16), ("i4", 4), ("b16", 16), ("b4", 4))]
    table_map += [binlog_column(FIELD_TYPE.GEOMETRY, name, character_set_name="binary",
                                length_size=4) for name in ("g", "p")]
    catalog = {"u": MyColumn("u", Kind.UUID), "i6": MyColumn("i6", Kind.INET6),
               "i4": MyColumn("i4", Kind.INET4), "b16": MyColumn("b16", Kind.BINARY),
               "b4": MyColumn("b4", Kind.UUID),  # no UUID has 4 bytes: BINARY(4) stays
               "p": MyColumn("p", Kind.GEOMETRY, spatial="point")}
    assert columns_from_binlog(table_map, catalog) == [
        MyColumn("u", Kind.UUID), MyColumn("i6", Kind.INET6), MyColumn("i4", Kind.INET4),
        MyColumn("b16", Kind.BINARY, length=16), MyColumn("b4", Kind.BINARY, length=4),
        MyColumn("g", Kind.GEOMETRY, spatial="geometry"),
        MyColumn("p", Kind.GEOMETRY, spatial="point")]
    assert [c.kind for c in columns_from_binlog(table_map)][:3] == [Kind.BINARY] * 3


def test_binlog_without_metadata_is_refused() -> None:
    with pytest.raises(ValueError, match="binlog_row_metadata=FULL"):
        column_from_binlog(binlog_column(FIELD_TYPE.LONG, "UNKNOWN_COL0"))
    with pytest.raises(ValueError, match="binlog_row_metadata=FULL"):
        column_from_binlog(binlog_column(FIELD_TYPE.LONG, None))
    with pytest.raises(ValueError, match="no enum members"):
        column_from_binlog(binlog_column(FIELD_TYPE.ENUM, "e", enum_values=None))


def test_malformed_members_are_refused() -> None:
    with pytest.raises(ValueError, match="cannot read the members"):
        column_from_information_schema(is_row("e", "enum", "enum('a',b)"))


def test_same_column_allows_what_information_schema_cannot_show() -> None:
    shown = MyColumn("e", Kind.ENUM, members=("a?b", "?"))
    logged = MyColumn("e", Kind.ENUM, members=("a😀b", "🎉"))
    assert shown != logged
    assert same_column(shown, logged)
    assert not same_column(shown, MyColumn("e", Kind.ENUM, members=("a😀b", "x")))
    assert not same_column(MyColumn("e", Kind.SET, members=shown.members), logged)


def test_schema_document() -> None:
    columns = [
        MyColumn("id", Kind.INTEGER, unsigned=True),
        MyColumn("d", Kind.DECIMAL, scale=2),
        MyColumn("t", Kind.TIMESTAMP, fsp=6),
        MyColumn("b", Kind.BINARY, length=4),
        MyColumn("e", Kind.ENUM, members=("a", "😀")),
        MyColumn("s", Kind.TEXT),
    ]
    assert schema_document(columns, ["id"]) == {
        "columns": [
            {"name": "id", "type": "integer", "unsigned": True},
            {"name": "d", "type": "decimal", "unsigned": False, "scale": 2},
            {"name": "t", "type": "timestamp", "fsp": 6},
            {"name": "b", "type": "binary", "length": 4},
            {"name": "e", "type": "enum", "members": ["a", "?"]},
            {"name": "s", "type": "text"},
        ],
        "key": ["id"],
    }
    shown = [*columns[:4], MyColumn("e", Kind.ENUM, members=("a", "?")), columns[5]]
    assert schema_document(shown, ["id"]) == schema_document(columns, ["id"])
    json.dumps(schema_document(columns, ["id"]))


# --- session and dump connection ------------------------------------------------------------


def test_session_settings_and_dump_connection() -> None:
    assert MY_SESSION_SETTINGS["time_zone"] == "+00:00"
    assert "PAD_CHAR_TO_FULL_LENGTH" not in MY_SESSION_SETTINGS["sql_mode"]
    assert "NO_BACKSLASH_ESCAPES" not in MY_SESSION_SETTINGS["sql_mode"]
    command = session_init_command()
    assert command.startswith("SET SESSION ")
    for name, value in MY_SESSION_SETTINGS.items():
        assert f"{name} = '{value}'" in command
    options = dump_connection_options()
    assert options["init_command"] == command
    assert options["charset"] == "utf8mb4"
    conv = options["conv"]
    assert isinstance(conv, dict)
    assert not any(isinstance(k, int) for k in conv)  # no result decoders: cells are text
    assert str in conv and bytes in conv and Decimal in conv  # parameters are still escaped
    assert dict(DUMP_CONV) == conv
    assert BINLOG_READER_OPTIONS == {"ignore_decode_errors": False}
    assert COLUMNS_SQL.count("%s") == 2


def test_select_list_reads_floats_as_doubles() -> None:
    columns = [
        MyColumn("id", Kind.INTEGER),
        MyColumn("f", Kind.FLOAT),
        MyColumn("d`x", Kind.DOUBLE),
        MyColumn("b", Kind.BIT),
    ]
    assert select_list(columns) == "`id`, CAST(`f` AS DOUBLE), CAST(`d``x` AS DOUBLE), `b`"
    assert select_list(columns[:2], "t") == "`t`.`id`, CAST(`t`.`f` AS DOUBLE)"


# --- encodings --------------------------------------------------------------------------------

D = datetime.datetime
T = datetime.timedelta

# (column, dump cell, binlog value, canonical JSON, key text)
CASES: list[tuple[MyColumn, str | bytes, object, str, str]] = [
    (MyColumn("i", Kind.INTEGER), "-128", -128, "-128", "-128"),
    (MyColumn("i", Kind.INTEGER), "0", 0, "0", "0"),
    (
        MyColumn("i", Kind.INTEGER, unsigned=True),
        "18446744073709551615",
        18446744073709551615,
        "18446744073709551615",
        "18446744073709551615",
    ),
    (
        MyColumn("i", Kind.INTEGER),
        "-9223372036854775808",
        -9223372036854775808,
        "-9223372036854775808",
        "-9223372036854775808",
    ),
    (MyColumn("i", Kind.INTEGER, unsigned=True), "00042", 42, "42", "42"),  # ZEROFILL
    (MyColumn("i", Kind.INTEGER, unsigned=True), "00000", 0, "0", "0"),
    (MyColumn("d", Kind.DECIMAL, scale=2), "1.50", Decimal("1.50"), '"1.50"', "1.50"),
    (MyColumn("d", Kind.DECIMAL, scale=2), "-0.50", Decimal("-0.50"), '"-0.50"', "-0.50"),
    (MyColumn("d", Kind.DECIMAL, scale=2), "0.00", Decimal("0.00"), '"0.00"', "0.00"),
    (MyColumn("d", Kind.DECIMAL, scale=0), "-12345", Decimal("-12345"), '"-12345"', "-12345"),
    (
        MyColumn("d", Kind.DECIMAL, scale=30),
        "0.000000000000000000000000000000",
        Decimal("0E-30"),
        '"0.000000000000000000000000000000"',
        "0.000000000000000000000000000000",
    ),
    (
        MyColumn("d", Kind.DECIMAL, scale=30),
        "12345678901234567890123456789012345.123456789012345678901234567890",
        Decimal("12345678901234567890123456789012345.123456789012345678901234567890"),
        '"12345678901234567890123456789012345.123456789012345678901234567890"',
        "12345678901234567890123456789012345.123456789012345678901234567890",
    ),
    (MyColumn("d", Kind.DECIMAL, True, scale=2), "0001.50", Decimal("1.50"), '"1.50"', "1.50"),
    (MyColumn("d", Kind.DECIMAL, True, scale=2), "0000.05", Decimal("0.05"), '"0.05"', "0.05"),
    (MyColumn("d", Kind.DECIMAL, True, scale=0), "0000", Decimal("0"), '"0"', "0"),
    (MyColumn("f", Kind.FLOAT), "0.10000000149011612", 0.10000000149011612, "0.1", "0.1"),
    (MyColumn("f", Kind.FLOAT), "16777216", 16777216.0, "16777216", "16777216"),
    (MyColumn("f", Kind.FLOAT), "123456.703125", 123456.703125, "123456.7", "123456.7"),
    (MyColumn("f", Kind.FLOAT), "0", 0.0, "0", "0"),
    (
        MyColumn("f", Kind.FLOAT),
        "3.4028234663852886e38",
        3.4028234663852886e38,
        "3.4028235e+38",
        "3.4028235e+38",
    ),
    (MyColumn("f", Kind.FLOAT), "1.401298464324817e-45", 1.401298464324817e-45, "1e-45", "1e-45"),
    (
        MyColumn("f", Kind.FLOAT),
        "1.0000000200408773e20",
        1.0000000200408773e20,
        "1e+20",
        "1e+20",
    ),
    (MyColumn("f", Kind.FLOAT), "-1.5", -1.5, "-1.5", "-1.5"),
    (
        MyColumn("g", Kind.DOUBLE),
        "0.30000000000000004",
        0.30000000000000004,
        "0.30000000000000004",
        "0.30000000000000004",
    ),
    (MyColumn("g", Kind.DOUBLE), "1e20", 1e20, "1e+20", "1e+20"),
    (MyColumn("g", Kind.DOUBLE), "0.000012345", 1.2345e-05, "1.2345e-05", "1.2345e-05"),
    (MyColumn("g", Kind.DOUBLE), "5e-324", 5e-324, "5e-324", "5e-324"),
    (MyColumn("g", Kind.DOUBLE), "1e15", 1e15, "1000000000000000", "1000000000000000"),
    (MyColumn("g", Kind.DOUBLE), "1e16", 1e16, "1e+16", "1e+16"),
    (MyColumn("g", Kind.DOUBLE), "-0", -0.0, "-0", "-0"),
    (
        MyColumn("g", Kind.DOUBLE),
        "1.7976931348623157e308",
        1.7976931348623157e308,
        "1.7976931348623157e+308",
        "1.7976931348623157e+308",
    ),
    (MyColumn("s", Kind.TEXT), "ab", "ab", '"ab"', "ab"),
    (MyColumn("s", Kind.TEXT), "", "", '""', ""),
    (MyColumn("s", Kind.TEXT), "x  ", "x  ", '"x  "', "x  "),
    (MyColumn("s", Kind.TEXT), "😀é", "😀é", '"😀é"', "😀é"),
    (
        MyColumn("s", Kind.TEXT),
        '\x00\n"\\\x1a\b',
        '\x00\n"\\\x1a\b',
        '"\\u0000\\n\\"\\\\\\u001a\\b"',
        '\x00\n"\\\x1a\b',
    ),
    (MyColumn("s", Kind.TEXT), '{"a":  1}', '{"a":  1}', '"{\\"a\\":  1}"', '{"a":  1}'),
    (MyColumn("b", Kind.BINARY), b"\x00\xff", b"\x00\xff", '"AP8="', "AP8="),
    (MyColumn("b", Kind.BINARY), b"", "", '""', ""),  # the log gives '' when empty
    (MyColumn("b", Kind.BINARY), b"", b"", '""', ""),
    (MyColumn("b", Kind.BINARY, length=4), b"a\x00\x00\x00", b"a", '"YQAAAA=="', "YQAAAA=="),
    (MyColumn("b", Kind.BINARY, length=4), b"\x00" * 4, "", '"AAAAAA=="', "AAAAAA=="),
    (MyColumn("b", Kind.BINARY, length=4), b"A \x00\x00", b"A ", '"QSAAAA=="', "QSAAAA=="),
    (MyColumn("b", Kind.BINARY, length=2), b"  ", b"  ", '"ICA="', "ICA="),
    (
        MyColumn("t", Kind.DATE),
        "1000-01-01",
        datetime.date(1000, 1, 1),
        '"1000-01-01"',
        "1000-01-01",
    ),
    (
        MyColumn("t", Kind.DATE),
        "2024-02-29",
        datetime.date(2024, 2, 29),
        '"2024-02-29"',
        "2024-02-29",
    ),
    (
        MyColumn("t", Kind.DATETIME),
        "0001-01-01 00:00:00",
        D(1, 1, 1),
        '"0001-01-01 00:00:00"',
        "0001-01-01 00:00:00",
    ),
    (
        MyColumn("t", Kind.DATETIME, fsp=3),
        "9999-12-31 23:59:59.999",
        D(9999, 12, 31, 23, 59, 59, 999000),
        '"9999-12-31 23:59:59.999"',
        "9999-12-31 23:59:59.999",
    ),
    (
        MyColumn("t", Kind.DATETIME, fsp=6),
        "2020-01-01 00:00:00.000000",
        D(2020, 1, 1),
        '"2020-01-01 00:00:00.000000"',
        "2020-01-01 00:00:00.000000",
    ),
    (
        MyColumn("t", Kind.DATETIME, fsp=1),
        "0001-01-01 00:00:00.5",
        D(1, 1, 1, 0, 0, 0, 500000),
        '"0001-01-01 00:00:00.5"',
        "0001-01-01 00:00:00.5",
    ),
    (
        MyColumn("t", Kind.TIMESTAMP),
        "1970-01-01 00:00:01",
        D(1970, 1, 1, 0, 0, 1),
        '"1970-01-01 00:00:01"',
        "1970-01-01 00:00:01",
    ),
    (
        MyColumn("t", Kind.TIMESTAMP, fsp=2),
        "1970-01-01 00:00:00.50",
        D(1970, 1, 1, 0, 0, 0, 500000),
        '"1970-01-01 00:00:00.50"',
        "1970-01-01 00:00:00.50",
    ),
    (
        MyColumn("t", Kind.TIMESTAMP, fsp=6),
        "2038-01-19 03:14:07.999999",
        D(2038, 1, 19, 3, 14, 7, 999999),
        '"2038-01-19 03:14:07.999999"',
        "2038-01-19 03:14:07.999999",
    ),
    (
        MyColumn("t", Kind.TIME),
        "-838:59:59",
        T(days=-35, seconds=3601),
        '"-838:59:59"',
        "-838:59:59",
    ),
    (MyColumn("t", Kind.TIME), "00:00:00", T(0), '"00:00:00"', "00:00:00"),
    (MyColumn("t", Kind.TIME), "24:00:00", T(days=1), '"24:00:00"', "24:00:00"),
    (MyColumn("t", Kind.TIME), "-01:00:00", T(hours=-1), '"-01:00:00"', "-01:00:00"),
    (
        MyColumn("t", Kind.TIME, fsp=1),
        "838:59:59.9",
        T(days=34, seconds=82799, microseconds=900000),
        '"838:59:59.9"',
        "838:59:59.9",
    ),
    # Negative with a fraction: as mysql-replication decodes them (off, see mysql/texts.py).
    (
        MyColumn("t", Kind.TIME, fsp=4),
        "-00:00:01.2345",
        T(days=-1, seconds=86398, microseconds=234500),
        '"-00:00:01.2345"',
        "-00:00:01.2345",
    ),
    (
        MyColumn("t", Kind.TIME, fsp=6),
        "-00:00:00.000001",
        T(days=-1, seconds=86399, microseconds=1),
        '"-00:00:00.000001"',
        "-00:00:00.000001",
    ),
    (
        MyColumn("t", Kind.TIME, fsp=1),
        "-00:00:00.1",
        T(days=-1, seconds=86399, microseconds=100000),
        '"-00:00:00.1"',
        "-00:00:00.1",
    ),
    (
        MyColumn("t", Kind.TIME, fsp=4),
        "-12:00:00.0001",
        T(days=-1, seconds=43199, microseconds=100),
        '"-12:00:00.0001"',
        "-12:00:00.0001",
    ),
    (
        MyColumn("t", Kind.TIME, fsp=6),
        "-100:00:01.500000",
        T(days=-5, seconds=71998, microseconds=500000),
        '"-100:00:01.500000"',
        "-100:00:01.500000",
    ),
    (
        MyColumn("t", Kind.TIME, fsp=1),
        "-838:59:59.9",
        T(days=-35, seconds=3600, microseconds=900000),
        '"-838:59:59.9"',
        "-838:59:59.9",
    ),
    (
        MyColumn("t", Kind.TIME, fsp=4),
        "-00:00:01.9999",
        T(days=-1, seconds=86398, microseconds=999900),
        '"-00:00:01.9999"',
        "-00:00:01.9999",
    ),
    (MyColumn("y", Kind.YEAR), "2024", 2024, "2024", "2024"),
    (MyColumn("y", Kind.YEAR), "1901", 1901, "1901", "1901"),
    (MyColumn("y", Kind.YEAR), "0000", 1900, "0", "0"),
    (MyColumn("e", Kind.ENUM, members=ENUM_MEMBERS), "y'q", "y'q", '"y\'q"', "y'q"),
    (MyColumn("e", Kind.ENUM, members=ENUM_MEMBERS), "a\\b", "a\\b", '"a\\\\b"', "a\\b"),
    (MyColumn("e", Kind.ENUM, members=ENUM_MEMBERS), "", "", '""', ""),
    (MyColumn("e", Kind.ENUM, members=("😀",)), "😀", "😀", '"😀"', "😀"),
    (MyColumn("c", Kind.SET, members=SET_MEMBERS), "p,r", {"r", "p"}, '"p,r"', "p,r"),
    (
        MyColumn("c", Kind.SET, members=SET_MEMBERS),
        "p,q,r,s t",
        {"s t", "r", "q", "p"},
        '"p,q,r,s t"',
        "p,q,r,s t",
    ),
    (MyColumn("c", Kind.SET, members=("😀", "b")), "😀,b", {"b", "😀"}, '"😀,b"', "😀,b"),
    (MyColumn("x", Kind.BIT), b"\x01", "1", "1", "1"),
    (MyColumn("x", Kind.BIT), b"\x00\x00", "0000000000", "0", "0"),
    (MyColumn("x", Kind.BIT), b"\x02\x01", "1000000001", "513", "513"),
    (
        MyColumn("x", Kind.BIT),
        b"\xff" * 8,
        "1" * 64,
        "18446744073709551615",
        "18446744073709551615",
    ),
    # SRID 4326, POINT(1 2): the same bytes from SELECT and from the row image
    (
        MyColumn("g", Kind.GEOMETRY, spatial="point"),
        POINT,
        POINT,
        '"' + base64.b64encode(POINT).decode() + '"',
        base64.b64encode(POINT).decode(),
    ),
    (
        MyColumn("u", Kind.UUID),
        "550e8400-e29b-41d4-a716-446655440000",
        bytes.fromhex("550e8400e29b41d4a71644665544"),  # the log strips trailing zeros
        '"550e8400-e29b-41d4-a716-446655440000"',
        "550e8400-e29b-41d4-a716-446655440000",
    ),
    (MyColumn("i", Kind.INET4), "192.168.0.1", b"\xc0\xa8\x00\x01", '"192.168.0.1"',
     "192.168.0.1"),
    (MyColumn("i", Kind.INET4), "10.0.0.0", b"\x0a", '"10.0.0.0"', "10.0.0.0"),
    (MyColumn("i", Kind.INET6), "2001:db8::ff00:42:8329",
     bytes.fromhex("20010db8000000000000ff0000428329"), '"2001:db8::ff00:42:8329"',
     "2001:db8::ff00:42:8329"),
    (MyColumn("i", Kind.INET6), "fe80::", b"\xfe\x80", '"fe80::"', "fe80::"),
]


@pytest.mark.parametrize(("column", "cell", "value", "expected", "key_text"), CASES)
def test_both_paths_give_the_canonical_bytes(
    column: MyColumn, cell: str | bytes, value: object, expected: str, key_text: str
) -> None:
    codec = MyRowCodec([column, ID], [column.name, "id"])
    from_dump = codec.key_row_from_dump((cell, "7"))
    from_binlog = codec.key_row_from_binlog({column.name: value, "id": 7})
    assert (
        from_dump
        == from_binlog
        == (
            f"[{expected},7]",
            "{" + json.dumps(column.name) + f":{expected}," + '"id":7}',
        )
    )
    assert codec.row_from_dump((cell, "7")) == codec.row_from_binlog({column.name: value, "id": 7})
    assert codec.key_from_dump((cell, "7")) == codec.key_from_binlog({column.name: value, "id": 7})
    texts = codec.key_texts_from_dump((cell, "7"))
    assert texts == codec.key_texts_from_binlog({column.name: value, "id": 7})
    assert texts == (key_text, "7")
    assert codec.key_texts_from_key_cells((cell, "7")) == texts  # a key-only SELECT's row
    reversed_key = MyRowCodec([column, ID], ["id", column.name])
    assert reversed_key.key_texts_from_key_cells(("7", cell)) == ("7", key_text)
    assert codec.key_from_texts(texts) == from_dump[0]
    json.loads(from_dump[1])


@pytest.mark.parametrize("column", sorted({case[0] for case in CASES}, key=repr))
def test_null_is_null_on_both_paths(column: MyColumn) -> None:
    assert dump_json(column, None) == binlog_json(column, None) == row(column, "null")
    codec = MyRowCodec([column], [column.name])
    assert codec.key_from_dump((None,)) == codec.key_from_binlog({column.name: None}) == "[null]"
    with pytest.raises(ValueError, match=f"key column '{column.name}' is NULL"):
        codec.key_texts_from_dump((None,))
    with pytest.raises(ValueError, match=f"key column '{column.name}' is NULL"):
        codec.key_texts_from_key_cells((None,))
    with pytest.raises(ValueError, match="2 cells for 1 key columns"):
        codec.key_texts_from_key_cells((None, None))
    with pytest.raises(ValueError, match=f"key column '{column.name}' is NULL"):
        codec.key_texts_from_binlog({column.name: None})


@pytest.mark.parametrize(
    ("column", "cell", "value"),
    [
        (MyColumn("t", Kind.DATE), "0000-00-00", None),
        (MyColumn("t", Kind.DATE), "2020-05-00", None),
        (MyColumn("t", Kind.DATE), "2020-00-05", None),
        (MyColumn("t", Kind.DATE), "0000-05-05", None),
        (MyColumn("t", Kind.DATE), "2021-02-29", None),
        (MyColumn("t", Kind.DATETIME), "0000-00-00 00:00:00", None),
        (MyColumn("t", Kind.DATETIME, fsp=3), "2020-00-00 00:00:00.000", None),
        (MyColumn("t", Kind.DATETIME, fsp=6), "0000-01-01 00:00:00.000000", None),
        (MyColumn("t", Kind.DATETIME, fsp=1), "2020-05-00 10:00:00.1", None),
        (MyColumn("t", Kind.DATETIME), "2020-04-31 00:00:00", None),
        (MyColumn("t", Kind.TIMESTAMP), "0000-00-00 00:00:00", D(1970, 1, 1)),
        (MyColumn("t", Kind.TIMESTAMP, fsp=6), "0000-00-00 00:00:00.000000", D(1970, 1, 1)),
    ],
)
def test_zero_and_invalid_dates_are_their_text_on_both_paths(
    column: MyColumn, cell: str, value: object
) -> None:
    """The dump reads MySQL's text; the log path gets it from rowimage.py (a date Python
    cannot hold is its text) or, for the zero TIMESTAMP, the epoch."""
    logged = cell if value is None else value
    assert dump_json(column, cell) == binlog_json(column, logged) == row(column, f'"{cell}"')
    codec = MyRowCodec([column], [column.name])
    assert codec.key_texts_from_dump((cell,)) == codec.key_texts_from_binlog(
        {column.name: logged}) == (cell,)
    assert codec.key_params([cell]) == [cell]


def test_valid_dates_near_the_end_of_a_month_are_kept() -> None:
    column = MyColumn("t", Kind.DATE)
    for text in ("2024-02-29", "2023-12-31", "2023-04-30", "2023-01-29"):
        assert dump_json(column, text) == row(column, f'"{text}"')


def test_an_empty_set_is_told_from_null_by_none_sources() -> None:
    column = MyColumn("c", Kind.SET, members=SET_MEMBERS)
    assert dump_json(column, "") == binlog_json(column, None, EMPTY_SET) == row(column, '""')
    assert binlog_json(column, None, {"c": "null"}) == row(column, "null")
    assert binlog_json(column, None, {}) == row(column, "null")
    codec = MyRowCodec([column], ["c"])
    assert codec.key_texts_from_binlog({"c": None}, EMPTY_SET) == ("",)
    assert codec.key_texts_from_dump(("",)) == ("",)
    assert codec.key_from_binlog({"c": None}, EMPTY_SET) == '[""]'
    assert codec.key_row_from_binlog({"c": None}, EMPTY_SET) == ('[""]', '{"c":""}')


def test_a_set_member_unknown_to_the_codec_is_an_error() -> None:
    shown = MyColumn("c", Kind.SET, members=("a", "?"))
    with pytest.raises(ValueError, match="build the codec from column_from_binlog"):
        binlog_json(shown, {"a", "😀"})


def test_the_binlog_path_refuses_values_of_the_wrong_kind() -> None:
    with pytest.raises(ValueError, match="no Python codec"):
        binlog_json(MyColumn("s", Kind.TEXT), b"\xff")
    with pytest.raises(ValueError, match="gave text for a binary column"):
        binlog_json(MyColumn("b", Kind.BINARY), "x")
    with pytest.raises(ValueError, match="must use DUMP_CONV"):
        dump_json(MyColumn("b", Kind.BINARY), "x")
    with pytest.raises(ValueError, match="must use DUMP_CONV"):
        dump_json(MyColumn("x", Kind.BIT), "1")


def test_mysql_json_documents_from_the_binlog() -> None:
    """MySQL 8 only; what MySQL prints, as far as known (untested against a server)."""
    column = MyColumn("j", Kind.JSON)
    document = {b"a": [1, 2.5, None, True, False, b"x\n"], b"b": {b"c": 1e20}}
    text = '{"a": [1, 2.5, null, true, false, "x\\n"], "b": {"c": 1e20}}'
    assert binlog_json(column, document) == dump_json(column, text) == row(column, json.dumps(text))
    assert binlog_json(column, Decimal("1.50")) == row(column, '"1.50"')
    with pytest.raises(ValueError, match="unexpected JSON value"):
        binlog_json(column, object())


def test_negative_time_fractions_are_corrected_for_every_fsp() -> None:
    # -S.f is decoded as -(S + 1 - f) whatever the fsp.
    for fsp in range(1, 7):
        fraction = "1" * fsp
        micros = int(fraction.ljust(6, "0"))
        decoded = -T(seconds=3, microseconds=-micros)  # -(2 + 1 - 0.1...)
        assert binlog_json(MyColumn("t", Kind.TIME, fsp=fsp), decoded) == row(
            MyColumn("t", Kind.TIME), f'"-00:00:02.{fraction}"'
        )


# --- properties -----------------------------------------------------------------------------

FLOAT32 = st.floats(width=32, allow_nan=False, allow_infinity=False)
DOUBLE = st.floats(allow_nan=False, allow_infinity=False)


def to_float32(value: float) -> float:
    result: float = struct.unpack("<f", struct.pack("<f", value))[0]
    return result


def mysql_double_text(value: float) -> str:
    """A double as MariaDB prints it: shortest digits, exponent without '+' or padding."""
    text = repr(value).removesuffix(".0")
    if "e" in text:
        mantissa, exponent = text.split("e")
        text = f"{mantissa}e{int(exponent)}"
    return text


def significant_digits(text: str) -> int:
    mantissa = text.lstrip("-").split("e")[0].replace(".", "").lstrip("0")
    return len(mantissa.rstrip("0")) or 1


@given(FLOAT32)
def test_float_is_the_shortest_float32_round_trip(value: float) -> None:
    column = MyColumn("f", Kind.FLOAT)
    from_binlog = binlog_json(column, value)
    assert from_binlog == dump_json(column, mysql_double_text(value))
    assert from_binlog == dump_json(column, repr(value))
    canonical = from_binlog[len('{"id":1,"f":') : -1]
    assert to_float32(float(canonical)) == value
    assert math.copysign(1, float(canonical)) == math.copysign(1, value)
    digits = significant_digits(canonical)
    if digits > 1:
        shorter = float(format(value, f".{digits - 1}g"))
        assert abs(shorter) > 3.4028235e38 or to_float32(shorter) != value
    assert not canonical.endswith(".0")


@given(DOUBLE)
def test_double_is_the_shortest_round_trip(value: float) -> None:
    column = MyColumn("g", Kind.DOUBLE)
    from_binlog = binlog_json(column, value)
    assert from_binlog == dump_json(column, mysql_double_text(value))
    canonical = from_binlog[len('{"id":1,"g":') : -1]
    assert float(canonical) == value
    assert canonical == repr(value).removesuffix(".0")
    assert json.loads(from_binlog)["g"] == value


@given(st.text())
def test_strings_are_escaped_like_json_dumps(text: str) -> None:
    column = MyColumn("s", Kind.TEXT)
    expected = row(column, json.dumps(text, ensure_ascii=False))
    assert dump_json(column, text) == binlog_json(column, text) == expected
    assert json.loads(expected)["s"] == text


@given(st.binary(), st.integers(0, 8))
def test_binary_is_base64_of_the_padded_bytes(data: bytes, length: int) -> None:
    column = MyColumn("b", Kind.BINARY, length=length)
    data = data[:length] if length else data  # BINARY(n) holds at most n bytes
    padded = data.ljust(length, b"\0")
    logged = data.rstrip(b"\0") if length else data  # BINARY(n): the log strips the zeros
    assert dump_json(column, padded) == binlog_json(column, logged or "")
    codec = MyRowCodec([column], ["b"])
    (text,) = codec.key_texts_from_dump((padded,))
    assert codec.key_params([text]) == [padded]


@given(st.integers(-(838 * 3600 + 59 * 60 + 59) * 10**6 - 999999, 0), st.integers(0, 6))
def test_time_from_the_binlog_matches_mysql_text(micros: int, fsp: int) -> None:
    micros = micros // 10 ** (6 - fsp) * 10 ** (6 - fsp) if micros >= 0 else micros
    for true in (micros, -micros):
        scale = 10 ** (6 - fsp)
        true = int(true / scale) * scale  # MySQL keeps fsp digits
        magnitude = abs(true)
        seconds, fraction = divmod(magnitude, 10**6)
        text = f"{'-' if true < 0 else ''}{seconds // 3600:02d}:{seconds // 60 % 60:02d}:"
        text += f"{seconds % 60:02d}" + (f".{fraction:06d}"[: fsp + 1] if fsp else "")
        if true < 0 and fraction:  # how mysql-replication decodes it
            decoded = -T(seconds=seconds + 1, microseconds=-fraction)
        else:
            decoded = T(microseconds=true)
        column = MyColumn("t", Kind.TIME, fsp=fsp)
        assert binlog_json(column, decoded) == dump_json(column, text) == row(column, f'"{text}"')


@given(st.datetimes(min_value=D(1000, 1, 1)), st.integers(0, 6))
def test_datetime_from_the_binlog_matches_mysql_text(value: D, fsp: int) -> None:
    value = value.replace(microsecond=value.microsecond // 10 ** (6 - fsp) * 10 ** (6 - fsp))
    text = value.strftime("%Y-%m-%d %H:%M:%S") + (
        f".{value.microsecond:06d}"[: fsp + 1] if fsp else ""
    )
    for kind in (Kind.DATETIME, Kind.TIMESTAMP):
        column = MyColumn("t", kind, fsp=fsp)
        if kind is Kind.TIMESTAMP and value == D(1970, 1, 1):
            continue
        assert binlog_json(column, value) == dump_json(column, text) == row(column, f'"{text}"')
    date_column = MyColumn("t", Kind.DATE)
    assert binlog_json(date_column, value.date()) == dump_json(date_column, text[:10])


# --- codec --------------------------------------------------------------------------------------


def test_codec_refuses_bad_column_lists() -> None:
    with pytest.raises(ValueError, match="duplicate column name 'a'"):
        MyRowCodec([MyColumn("a", Kind.TEXT), MyColumn("a", Kind.TEXT)], ["a"])
    with pytest.raises(ValueError, match=r"key columns \['b'\] are not among the columns"):
        MyRowCodec([MyColumn("a", Kind.TEXT)], ["b"])
    with pytest.raises(ValueError, match="duplicate key columns"):
        MyRowCodec([MyColumn("a", Kind.TEXT)], ["a", "a"])


def test_codec_refuses_rows_of_another_width() -> None:
    codec = MyRowCodec([ID, MyColumn("a", Kind.TEXT)], ["id"])
    with pytest.raises(ValueError):
        codec.row_from_dump(("1",))
    with pytest.raises(ValueError):
        codec.key_row_from_dump(("1", "a", "b"))
    with pytest.raises(ValueError, match="row has 1 cells, the table 2 columns"):
        codec.key_texts_from_dump(("1",))
    with pytest.raises(ValueError, match=r"binlog row has no column .a.*binlog_row_metadata"):
        codec.row_from_binlog({"id": 1})
    with pytest.raises(ValueError, match="binlog row has no column 'id'"):
        codec.key_texts_from_binlog({"a": "x"})


def test_keys_follow_key_order_and_names_are_escaped() -> None:
    odd = ['a"b', "c\\d", "{x}", "e\nf", "v0", "p0"]
    columns = [MyColumn(name, Kind.INTEGER) for name in odd]
    codec = MyRowCodec(columns, ["v0", 'a"b'])
    cells = ("1", "2", "3", "4", "5", "6")
    values = dict(zip(odd, [1, 2, 3, 4, 5, 6], strict=True))
    expected_row = json.dumps(
        dict(zip(odd, [1, 2, 3, 4, 5, 6], strict=True)), separators=(",", ":")
    )
    assert codec.key_row_from_dump(cells) == ("[5,1]", expected_row)
    assert codec.key_row_from_binlog(values) == ("[5,1]", expected_row)
    assert codec.key_texts_from_dump(cells) == codec.key_texts_from_binlog(values) == ("5", "1")
    assert codec.column_names == tuple(odd)
    assert codec.key_columns == ("v0", 'a"b')


def test_a_table_without_key() -> None:
    codec = MyRowCodec([MyColumn("a", Kind.TEXT)], [])
    assert codec.key_row_from_dump(("x",)) == ("[]", '{"a":"x"}')
    assert codec.key_row_from_binlog({"a": "x"}) == ("[]", '{"a":"x"}')
    assert codec.key_texts_from_dump(("x",)) == ()
    assert MyRowCodec([], []).row_from_dump(()) == "{}"


KEY_PARAMS: list[tuple[MyColumn, str, object]] = [
    (MyColumn("k", Kind.INTEGER, unsigned=True), "18446744073709551615", 18446744073709551615),
    (MyColumn("k", Kind.INTEGER), "-5", -5),
    (MyColumn("k", Kind.DECIMAL, scale=2), "1.50", Decimal("1.50")),
    (MyColumn("k", Kind.FLOAT), "0.1", 0.10000000149011612),
    (MyColumn("k", Kind.DOUBLE), "1e+20", 1e20),
    (MyColumn("k", Kind.TEXT), "😀 ", "😀 "),
    (MyColumn("k", Kind.BINARY), "AP8=", b"\x00\xff"),
    (MyColumn("k", Kind.DATE), "2024-02-29", "2024-02-29"),
    (MyColumn("k", Kind.DATETIME, fsp=3), "2024-02-29 01:02:03.456", "2024-02-29 01:02:03.456"),
    (MyColumn("k", Kind.TIMESTAMP), "2024-02-29 01:02:03", "2024-02-29 01:02:03"),
    (MyColumn("k", Kind.TIME, fsp=1), "-838:59:59.9", "-838:59:59.9"),
    (MyColumn("k", Kind.YEAR), "0", 0),
    (MyColumn("k", Kind.ENUM, members=ENUM_MEMBERS), "z,w", 3),
    (MyColumn("k", Kind.ENUM, members=ENUM_MEMBERS), "", 5),  # the '' member
    (MyColumn("k", Kind.ENUM, members=("a",)), "", 0),  # the invalid value
    (MyColumn("k", Kind.SET, members=SET_MEMBERS), "p,s t", 0b1001),
    (MyColumn("k", Kind.SET, members=SET_MEMBERS), "", 0),
    (MyColumn("k", Kind.BIT), "513", 513),
]


@pytest.mark.parametrize(("column", "text", "param"), KEY_PARAMS)
def test_key_params(column: MyColumn, text: str, param: object) -> None:
    codec = MyRowCodec([ID, column], ["k", "id"])
    params = codec.key_params([text, "7"])
    assert params == [param, 7]
    assert type(params[0]) is type(param)


@pytest.mark.parametrize(
    ("column", "text"),
    [
        (MyColumn("k", Kind.INTEGER), "4 2"),
        (MyColumn("k", Kind.INTEGER), "1_0"),
        (MyColumn("k", Kind.INTEGER), "1.0"),
        (MyColumn("k", Kind.DECIMAL), "abc"),
        (MyColumn("k", Kind.DECIMAL), "NaN"),
        (MyColumn("k", Kind.FLOAT), "1e39"),
        (MyColumn("k", Kind.FLOAT), "x"),
        (MyColumn("k", Kind.DOUBLE), "inf"),
        (MyColumn("k", Kind.BINARY), "AP8"),
        (MyColumn("k", Kind.BINARY), "A-8="),
        (MyColumn("k", Kind.DATE), "2024-2-29"),
        (MyColumn("k", Kind.DATETIME), "2024-02-29T01:02:03"),
        (MyColumn("k", Kind.TIME), "1:02:03"),
        (MyColumn("k", Kind.YEAR), "twenty"),
        (MyColumn("k", Kind.ENUM, members=ENUM_MEMBERS), "nope"),
        (MyColumn("k", Kind.SET, members=SET_MEMBERS), "p,nope"),
        (MyColumn("k", Kind.BIT), "0b1"),
    ],
)
def test_key_params_refuse_texts_the_column_cannot_hold(column: MyColumn, text: str) -> None:
    codec = MyRowCodec([column], ["k"])
    with pytest.raises(ValueError, match="key column 'k'"):
        codec.key_params([text])


def test_key_params_and_texts_need_one_text_per_key_column() -> None:
    codec = MyRowCodec([ID], ["id"])
    with pytest.raises(ValueError, match="2 key texts for 1 key columns"):
        codec.key_params(["1", "2"])
    with pytest.raises(ValueError, match="0 key texts for 1 key columns"):
        codec.key_from_texts([])


@pytest.mark.parametrize(
    ("hexed", "text"),
    [  # as MariaDB 10.11 prints them (SELECT of an INET6 column)
        ("00000000000000000000000000000000", "::"),
        ("00000000000000000000000000000001", "::1"),
        ("00010000000200030004000500060007", "1::2:3:4:5:6:7"),
        ("00010000000000020000000000000003", "1:0:0:2::3"),
        ("00000000000000000000000001020304", "::1.2.3.4"),
        ("00000000000000000000ffff01020304", "::ffff:1.2.3.4"),
        ("00000000000000000000000000000100", "::100"),
        ("fe800000000000000000000000000000", "fe80::"),
        ("00000002000300040005000600070008", "::2:3:4:5:6:7:8"),
        ("20010db8000000000000ff0000428329", "2001:db8::ff00:42:8329"),
        ("ffffffffffffffffffffffffffffffff", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"),
    ],
)
def test_inet6_text_is_mariadbs(hexed: str, text: str) -> None:
    assert inet6_text(bytes.fromhex(hexed)) == text
    assert ipaddress.IPv6Address(text).packed == bytes.fromhex(hexed)


def test_uuid_and_inet_key_texts_are_checked() -> None:
    for column, good, bad in (
            (MyColumn("u", Kind.UUID), "550e8400-e29b-41d4-a716-446655440000", "550e8400"),
            (MyColumn("i", Kind.INET4), "1.2.3.4", "::1"),
            (MyColumn("i", Kind.INET6), "::1", "x")):
        codec = MyRowCodec([column], [column.name])
        assert codec.key_params([good]) == [good]
        with pytest.raises(ValueError, match=f"key column '{column.name}'"):
            codec.key_params([bad])
