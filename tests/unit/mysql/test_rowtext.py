"""rowtext.py reads row images straight to their JSON: the same JSON, byte for byte, as the
codec makes from the values rowimage.py decodes (mysql-replication's values, but for the
dates and empty sets it loses; that the two agree is tests/integration/test_mysql_values.py's),
over random images of each type, NULLs, zero or invalid dates and empty sets included."""

from __future__ import annotations

import random
import struct
from dataclasses import dataclass
from typing import Any

import pytest
from pymysqlreplication.constants import FIELD_TYPE

from dblog_worker.mysql.column_model import Kind, MyColumn
from dblog_worker.mysql.rowimage import row_images
from dblog_worker.mysql.rowtext import key_row_reader
from dblog_worker.mysql.values import MyRowCodec

IMAGES = 3000


@dataclass
class Column:
    """What rowimage.py and rowtext.py read of a table map's column."""

    name: str
    type: int
    unsigned: bool = False
    precision: int = 0
    decimals: int = 0
    fsp: int = 0
    max_length: int = 0
    length_size: int = 0
    character_set_name: str | None = None
    bits: int = 0
    bytes: int = 0
    size: int = 0
    enum_values: list[str] | None = None
    set_values: list[str] | None = None


def _decimal_bytes(rng: random.Random, precision: int, scale: int) -> bytes:
    """A random DECIMAL(precision, scale) in MySQL's binary form (groups of 9 digits in 4
    big-endian bytes, the rest in fewer, the sign bit flipped, all inverted if negative)."""
    sizes = [0, 1, 1, 2, 2, 3, 3, 4, 4, 4]
    whole, whole_rest = divmod(precision - scale, 9)
    fraction, fraction_rest = divmod(scale, 9)
    digits = ([whole_rest] if whole_rest else []) + [9] * whole + [9] * fraction + (
        [fraction_rest] if fraction_rest else [])
    out = bytearray()
    for count in digits:
        value = rng.choice([0, 10 ** count - 1, rng.randrange(10 ** count)])
        out += value.to_bytes(sizes[count], "big")
    if rng.random() < 0.5:
        out = bytearray(b ^ 0xFF for b in out)
    out[0] ^= 0x80
    return bytes(out)


def _value(rng: random.Random, column: Column) -> bytes:
    kind = column.type
    if kind == FIELD_TYPE.LONGLONG:
        return rng.randbytes(8)
    if kind == FIELD_TYPE.LONG:
        return rng.randbytes(4)
    if kind == FIELD_TYPE.INT24:
        return rng.randbytes(3)
    if kind == FIELD_TYPE.SHORT:
        return rng.randbytes(2)
    if kind in (FIELD_TYPE.TINY, FIELD_TYPE.YEAR):
        return rng.randbytes(1)
    if kind == FIELD_TYPE.DOUBLE:
        return struct.pack("<d", rng.uniform(-1e6, 1e6))
    if kind == FIELD_TYPE.NEWDECIMAL:
        return _decimal_bytes(rng, column.precision, column.decimals)
    if kind == FIELD_TYPE.DATE:
        y, m, d = rng.choice([0, 1, 2024, 9999]), rng.randrange(13), rng.randrange(32)
        return (y << 9 | m << 5 | d).to_bytes(3, "little")
    if kind == FIELD_TYPE.BIT:
        return rng.randbytes(column.bytes)
    if kind == FIELD_TYPE.ENUM:
        assert column.enum_values is not None
        return rng.randrange(len(column.enum_values)).to_bytes(column.size, "little")
    if kind == FIELD_TYPE.SET:
        assert column.set_values is not None
        return rng.randrange(1 << len(column.set_values)).to_bytes(column.size, "little")
    if kind == FIELD_TYPE.GEOMETRY:
        data = rng.randbytes(rng.choice([0, 25, rng.randrange(300)]))
        return len(data).to_bytes(column.length_size, "little") + data
    fraction = b""
    if column.fsp:
        size = (column.fsp + 1) // 2
        fraction = rng.randrange(10 ** (2 * size)).to_bytes(size, "big")
    if kind == FIELD_TYPE.DATETIME2:
        ym = rng.choice([0, rng.randrange(10000 * 13)])
        packed = (1 << 39 | ym << 22 | rng.randrange(32) << 17 | rng.randrange(24) << 12
                  | rng.randrange(60) << 6 | rng.randrange(60))
        return packed.to_bytes(5, "big") + fraction
    if kind == FIELD_TYPE.TIMESTAMP2:
        seconds = rng.choice([0, 1, 2**31 - 1, rng.randrange(2**31)])
        return seconds.to_bytes(4, "big") + (b"\0" * len(fraction) if rng.random() < 0.2
                                              else fraction)
    if kind == FIELD_TYPE.TIME2:
        magnitude = rng.choice([0, 1, rng.randrange(838 * 3600)])
        hours, rest = divmod(magnitude, 3600)
        packed = hours << 12 | rest // 60 << 6 | rest % 60
        if rng.random() < 0.5:  # negative: the value's complement, fraction too
            packed = (0x800000 - packed - (1 if fraction.strip(b"\0") else 0)) & 0xFFFFFF
            fraction = bytes(b ^ 0xFF for b in fraction) if fraction.strip(b"\0") else fraction
        else:
            packed |= 0x800000
        return packed.to_bytes(3, "big") + fraction
    text = "".join(rng.choice("aé\"\\\n😀 z\x01") for _ in range(rng.randrange(30)))
    data = text.encode()
    return len(data).to_bytes(column.length_size or (2 if column.max_length > 255 else 1),
                              "little") + data


def _image(rng: random.Random, columns: list[Column]) -> bytes:
    nulls = [rng.random() < 0.1 for _ in columns]
    bitmap = bytearray((len(columns) + 7) // 8)
    for i, null in enumerate(nulls):
        if null:
            bitmap[i >> 3] |= 1 << (i & 7)
    return bytes(bitmap) + b"".join(
        _value(rng, column) for column, null in zip(columns, nulls, strict=True) if not null)


TABLES: dict[str, list[tuple[Column, MyColumn]]] = {
    "integers": [
        (Column("id", FIELD_TYPE.LONGLONG), MyColumn("id", Kind.INTEGER)),
        (Column("u", FIELD_TYPE.LONGLONG, unsigned=True),
         MyColumn("u", Kind.INTEGER, unsigned=True)),
        (Column("i", FIELD_TYPE.LONG), MyColumn("i", Kind.INTEGER)),
        (Column("m", FIELD_TYPE.INT24, unsigned=True), MyColumn("m", Kind.INTEGER, True)),
        (Column("s", FIELD_TYPE.SHORT), MyColumn("s", Kind.INTEGER)),
        (Column("t", FIELD_TYPE.TINY), MyColumn("t", Kind.INTEGER)),
        (Column("y", FIELD_TYPE.YEAR), MyColumn("y", Kind.YEAR)),
    ],
    "decimals": [
        (Column("id", FIELD_TYPE.LONG), MyColumn("id", Kind.INTEGER)),
        (Column("a", FIELD_TYPE.NEWDECIMAL, precision=12, decimals=2),
         MyColumn("a", Kind.DECIMAL, scale=2)),
        (Column("b", FIELD_TYPE.NEWDECIMAL, precision=3, decimals=3),
         MyColumn("b", Kind.DECIMAL, scale=3)),
        (Column("c", FIELD_TYPE.NEWDECIMAL, precision=65, decimals=30),
         MyColumn("c", Kind.DECIMAL, scale=30)),
        (Column("d", FIELD_TYPE.NEWDECIMAL, precision=10, decimals=0),
         MyColumn("d", Kind.DECIMAL, scale=0)),
        (Column("e", FIELD_TYPE.NEWDECIMAL, precision=19, decimals=10),
         MyColumn("e", Kind.DECIMAL, scale=10)),
        (Column("f", FIELD_TYPE.NEWDECIMAL, precision=15, decimals=5),  # a 3-byte group
         MyColumn("f", Kind.DECIMAL, scale=5)),
    ],
    "dates": [
        (Column("id", FIELD_TYPE.LONG), MyColumn("id", Kind.INTEGER)),
        (Column("d", FIELD_TYPE.DATE), MyColumn("d", Kind.DATE)),
        *[(Column(f"t{fsp}", FIELD_TYPE.DATETIME2, fsp=fsp),
           MyColumn(f"t{fsp}", Kind.DATETIME, fsp=fsp)) for fsp in range(7)],
        *[(Column(f"s{fsp}", FIELD_TYPE.TIMESTAMP2, fsp=fsp),
           MyColumn(f"s{fsp}", Kind.TIMESTAMP, fsp=fsp)) for fsp in range(7)],
    ],
    "strings": [
        (Column("k", FIELD_TYPE.VARCHAR, max_length=80, character_set_name="utf8mb4"),
         MyColumn("k", Kind.TEXT)),
        (Column("w", FIELD_TYPE.VARCHAR, max_length=1200, character_set_name="utf8mb4"),
         MyColumn("w", Kind.TEXT)),
        (Column("c", FIELD_TYPE.STRING, max_length=120, character_set_name="utf8mb4"),
         MyColumn("c", Kind.TEXT)),
        (Column("x", FIELD_TYPE.BLOB, length_size=2, character_set_name="utf8mb4"),
         MyColumn("x", Kind.TEXT)),
        (Column("f", FIELD_TYPE.DOUBLE), MyColumn("f", Kind.DOUBLE)),  # the general way
    ],
    "others": [  # decoded by rowimage.py, encoded by the codec's lines
        (Column("id", FIELD_TYPE.LONG), MyColumn("id", Kind.INTEGER)),
        (Column("e", FIELD_TYPE.ENUM, size=1, enum_values=["", "a", "b''", ""]),
         MyColumn("e", Kind.ENUM, members=("a", "b''", ""))),
        (Column("s", FIELD_TYPE.SET, size=2, set_values=list("abcdefghij")),
         MyColumn("s", Kind.SET, members=tuple("abcdefghij"))),
        (Column("b1", FIELD_TYPE.BIT, bits=1, bytes=1), MyColumn("b1", Kind.BIT)),
        (Column("b10", FIELD_TYPE.BIT, bits=10, bytes=2), MyColumn("b10", Kind.BIT)),
        (Column("b64", FIELD_TYPE.BIT, bits=64, bytes=8), MyColumn("b64", Kind.BIT)),
        *[(Column(f"t{fsp}", FIELD_TYPE.TIME2, fsp=fsp),
           MyColumn(f"t{fsp}", Kind.TIME, fsp=fsp)) for fsp in range(7)],
        (Column("g", FIELD_TYPE.GEOMETRY, length_size=4, character_set_name="binary"),
         MyColumn("g", Kind.GEOMETRY, spatial="point")),
        (Column("u", FIELD_TYPE.STRING, max_length=16, character_set_name="binary"),
         MyColumn("u", Kind.UUID)),
        (Column("i6", FIELD_TYPE.STRING, max_length=16, character_set_name="binary"),
         MyColumn("i6", Kind.INET6)),
        (Column("i4", FIELD_TYPE.STRING, max_length=4, character_set_name="binary"),
         MyColumn("i4", Kind.INET4)),
    ],
}


@pytest.mark.parametrize("table", sorted(TABLES))
def test_the_reader_writes_the_codecs_json(table: str) -> None:
    columns = [column for column, _ in TABLES[table]]
    codec = MyRowCodec([mine for _, mine in TABLES[table]], [columns[0].name])
    reader = key_row_reader(columns, codec)
    images = row_images(columns)
    assert reader is not None and images is not None
    image = images._image
    rng = random.Random(table)
    compared = 0
    for _ in range(IMAGES):
        data = b"\x07" + _image(rng, columns) + b"\x09"
        values, end = image(data, 1)
        if values[columns[0].name] is None:
            continue  # the codec refuses a NULL key
        assert reader(data, 1) == (codec.key_row_from_binlog(values), end)
        assert end == len(data) - 1
        compared += 1
    assert compared > IMAGES // 2


def test_zero_and_invalid_dates_are_their_text() -> None:
    columns = [column for column, _ in TABLES["dates"]][:4]
    codec = MyRowCodec([mine for _, mine in TABLES["dates"]][:4], ["id"])
    reader = key_row_reader(columns, codec)
    assert reader is not None
    invalid_datetime = (1 << 39 | (2024 * 13 + 2) << 22 | 31 << 17).to_bytes(5, "big")
    data = bytes([0b0000]) + (5).to_bytes(4, "little", signed=True) + bytes(3) + \
        invalid_datetime + invalid_datetime + b"\x00"
    assert reader(data, 0) == (("[5]", '{"id":5,"d":"0000-00-00","t0":"2024-02-31 00:00:00",'
                                       '"t1":"2024-02-31 00:00:00.0"}'), len(data))
    images = row_images(columns)
    assert images is not None
    assert images._image(data, 0) == ({"id": 5, "d": "0000-00-00", "t0": "2024-02-31 00:00:00",
                                       "t1": "2024-02-31 00:00:00.0"}, len(data))


def test_an_empty_set_is_an_empty_set_and_null_is_none() -> None:
    columns = [Column("id", FIELD_TYPE.LONG), Column("s", FIELD_TYPE.SET, size=1,
                                                     set_values=["a", "b"])]
    codec = MyRowCodec([MyColumn("id", Kind.INTEGER), MyColumn("s", Kind.SET,
                                                                members=("a", "b"))], ["id"])
    reader, images = key_row_reader(columns, codec), row_images(columns)
    assert reader is not None and images is not None
    empty, null = b"\x00" + (1).to_bytes(4, "little") + b"\x00", b"\x02" + bytes(4)
    assert images._image(empty, 0) == ({"id": 1, "s": set()}, 6)
    assert reader(empty, 0) == (("[1]", '{"id":1,"s":""}'), 6)
    assert images._image(null, 0) == ({"id": 0, "s": None}, 5)
    assert reader(null, 0) == (("[0]", '{"id":0,"s":null}'), 5)


def test_decimal_text_keeps_the_scale_and_the_sign() -> None:
    columns: list[Any] = [Column("id", FIELD_TYPE.LONG),
                          Column("a", FIELD_TYPE.NEWDECIMAL, precision=5, decimals=2)]
    codec = MyRowCodec([MyColumn("id", Kind.INTEGER), MyColumn("a", Kind.DECIMAL, scale=2)],
                       ["id"])
    reader = key_row_reader(columns, codec)
    assert reader is not None

    def row(digits: bytes, negative: bool) -> str:
        data = bytearray(digits)
        if negative:
            data = bytearray(b ^ 0xFF for b in data)
        data[0] ^= 0x80
        image = b"\x00" + (1).to_bytes(4, "little") + bytes(data)
        return reader(image, 0)[0][1]

    # DECIMAL(5,2): 3 whole digits in 2 bytes, 2 fraction digits in 1 byte
    assert row((7).to_bytes(2, "big") + (5).to_bytes(1, "big"), False) == '{"id":1,"a":"7.05"}'
    assert row((0).to_bytes(2, "big") + (50).to_bytes(1, "big"), True) == '{"id":1,"a":"-0.50"}'
    assert row((999).to_bytes(2, "big") + (99).to_bytes(1, "big"), True) == (
        '{"id":1,"a":"-999.99"}')


def test_the_calendar_tables_stay_bounded() -> None:
    """More distinct dates than the tables keep: the texts are right beyond the bound too,
    and the tables do not grow past it."""
    import datetime

    from dblog_worker.mysql import rowtext

    first = datetime.date(1000, 1, 1)
    for n in range(rowtext._KEPT + 5_000):
        day = first + datetime.timedelta(n)
        t = day.year << 9 | day.month << 5 | day.day
        assert rowtext._date_json(t) == f'"{day.isoformat()}"'
        bits = (day.year * 13 + day.month) << 5 | day.day
        assert rowtext._day_text(bits) == f"{day.isoformat()} "
        assert rowtext._unix_day(n - 400_000) == (
            datetime.date(1970, 1, 1) + datetime.timedelta(n - 400_000)).isoformat() + " "
    assert max(len(rowtext._DATES), len(rowtext._DAYS), len(rowtext._UNIX_DAYS)) == rowtext._KEPT


def test_an_overlong_fraction_is_left_to_the_library() -> None:
    """A fraction past 999,999 µs (a corrupt image: 3 bytes hold up to 8,388,607) makes the
    reader raise, so that the event goes to mysql-replication, which raises too (its
    ``datetime.replace``), instead of printing seven digits."""
    columns = [Column("id", FIELD_TYPE.LONG), Column("s", FIELD_TYPE.TIMESTAMP2, fsp=6),
               Column("t", FIELD_TYPE.DATETIME2, fsp=6)]
    codec = MyRowCodec([MyColumn("id", Kind.INTEGER), MyColumn("s", Kind.TIMESTAMP, fsp=6),
                        MyColumn("t", Kind.DATETIME, fsp=6)], ["id"])
    reader, images = key_row_reader(columns, codec), row_images(columns)
    assert reader is not None and images is not None
    timestamp = (1_700_000_000).to_bytes(4, "big")
    datetime2 = (1 << 39 | (2024 * 13 + 2) << 22 | 3 << 17).to_bytes(5, "big")
    good, bad = (999_999).to_bytes(3, "big"), (1_000_000).to_bytes(3, "big")
    head = b"\x00" + (1).to_bytes(4, "little")
    (_, row), _ = reader(head + timestamp + good + datetime2 + good, 0)
    assert row == ('{"id":1,"s":"2023-11-14 22:13:20.999999",'
                   '"t":"2024-02-03 00:00:00.999999"}')
    for image in (head + timestamp + bad + datetime2 + good,
                  head + timestamp + good + datetime2 + bad):
        with pytest.raises(ValueError):
            reader(image, 0)
        with pytest.raises(ValueError):
            images._image(image, 0)
