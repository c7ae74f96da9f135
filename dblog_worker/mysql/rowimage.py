"""The row images of a rows event, decoded from its bytes by code made for the table.

mysql-replication frames the binary log (connection, table maps, rotation, GTIDs) and
decodes a rows event's header; its row decoding, one method call and a dozen checks per
cell, is the ceiling of MariaDB's capture, and it loses values: a zero or invalid date
(``0000-00-00``, ``2020-00-15``, ``2020-02-31``) is None to it, like NULL. For a table
whose columns are all of the types below, :func:`row_images` generates straight-line
Python that reads each row image from the event's bytes into *the values
mysql-replication gives* (same types, same conversions, written after its
``row_event.py`` 1.0.17), with two exceptions where the library's value is lossy: a date
Python cannot hold is its text as MySQL prints it (``"0000-00-00"``, ``"2020-05-00
10:00:00.100"``), and the empty SET is an empty set (the library gives None and says
"empty set" in ``none_sources``). tests/integration/test_mysql_values.py decodes every
event both ways and compares.

Integers (signed and unsigned), FLOAT, DOUBLE, DECIMAL, YEAR, CHAR/VARCHAR/TEXT/BINARY/
VARBINARY/BLOB (so MariaDB's UUID, INET4 and INET6), DATE, DATETIME(fsp), TIMESTAMP(fsp),
TIME(fsp), ENUM, SET, BIT and the spatial types are decoded here: every type of MariaDB. A
table with a MySQL 8 ``JSON`` column or a pre-5.6.4 temporal column, or without column
names, keeps mysql-replication's decoding; so does an event whose row images are not full
(``binlog_row_image`` other than FULL) or that does not decode here (the library then
decodes it, and raises what it raises).
"""

from __future__ import annotations

import codecs
import datetime
import decimal
import struct
from collections.abc import Callable, Sequence
from typing import Any

from pymysqlreplication.constants import FIELD_TYPE
from pymysqlreplication.row_event import RowsEvent, UpdateRowsEvent

__all__ = [
    "NAMES",
    "KeyRow",
    "RowImages",
    "column_lines",
    "decimal_group",
    "decimal_groups",
    "decimal_head",
    "fraction_lines",
    "null_bitmap",
    "row_images",
    "text_encoding",
]

Image = Callable[[bytes, int], tuple[dict[str, object], int]]
KeyRow = Callable[[bytes, int], tuple[tuple[str, str], int]]  # an image → its (key, row) JSON

_STRUCTS = {
    FIELD_TYPE.SHORT: ("<h", "<H", 2),
    FIELD_TYPE.LONG: ("<i", "<I", 4),
    FIELD_TYPE.LONGLONG: ("<q", "<Q", 8),
    FIELD_TYPE.FLOAT: ("<f", "<f", 4),
    FIELD_TYPE.DOUBLE: ("<d", "<d", 8),
}
_DECODED = "_RowsEvent__rows"  # where RowsEvent keeps its decoded rows (``event.rows``)
_BUFFERED = "_BinLogPacketWrapper__data_buffer"  # bytes the wrapper was given back
_FSP_BYTES = {0: 0, 1: 1, 2: 1, 3: 2, 4: 2, 5: 3, 6: 3}
_COMPRESSED_BYTES = [0, 1, 1, 2, 2, 3, 3, 4, 4, 4]


class RowImages:
    """Decodes every row of a rows event of one table shape."""

    def __init__(self, image: Image, columns: int, key_row: KeyRow | None = None) -> None:
        self._image = image
        self._key_row = key_row
        self._full = bytes([0xFF] * (columns // 8) + ([(1 << columns % 8) - 1]
                                                         if columns % 8 else []))

    def rows(self, event: Any, *, keep: bool = False) -> list[dict[str, Any]] | None:
        """The rows as mysql-replication's ``event.rows`` has them (without
        ``none_sources``: no value decoded here needs one), or None when this event is not
        for this decoder (the caller uses ``event.rows``). The bytes are read where the
        event's packet holds them and consumed only once every row decoded, so a row this
        code cannot read leaves the event to the library whole. ``keep``: consume nothing,
        so that ``event.rows`` reads them as well (tests compare both)."""
        images = self._read(event, self._image, keep)
        if images is None:
            return None
        if isinstance(event, UpdateRowsEvent):
            rows = [{"before_values": before, "after_values": after}
                    for before, after in zip(images[::2], images[1::2], strict=True)]
        else:
            rows = [{"values": values} for values in images]
        if not keep:
            setattr(event, _DECODED, rows)  # ``event.rows`` has them now
        return rows

    def key_rows(self, event: Any, *, keep: bool = False) -> list[tuple[str, str]] | None:
        """Each row image's ``(key, row)`` JSON, read straight from the bytes by the table's
        ``key_row`` reader (``rowtext.py``): an update's before and after images one after
        the other. None as for :meth:`rows`, and when there is no such reader."""
        if self._key_row is None:
            return None
        images = self._read(event, self._key_row, keep)
        if images is None:
            return None
        if not keep:
            setattr(event, _DECODED, [])  # read here, as ``event.rows`` would have: not again
        return images

    def _read(self, event: Any, decode: Callable[[bytes, int], tuple[Any, int]],
              keep: bool) -> list[Any] | None:
        """Every row image of the event, decoded by ``decode``, in order (an update's
        before and after images one after the other); None: the library's to read."""
        if getattr(event, _DECODED, None) is not None:
            return None  # decoded before: ``event.rows`` has the rows
        update = isinstance(event, UpdateRowsEvent)
        if event.columns_present_bitmap != self._full or (
                update and event.columns_present_bitmap2 != self._full):
            return None
        packet = event.packet
        if getattr(packet, _BUFFERED, b""):
            return None  # bytes given back to the wrapper (not after a header): the library's
        raw = packet.packet  # pymysql's MysqlPacket: the event's bytes, and a cursor in them
        position = getattr(raw, "_position", None)
        if not isinstance(position, int) or not hasattr(raw, "get_all_data"):
            return None  # another pymysql: the library decodes, as before rowimage.py
        data = raw.get_all_data()
        size = event.event_size - packet.read_bytes
        end = position + size
        images: list[Any] = []
        try:
            while position < end:
                image, position = decode(data, position)
                images.append(image)
        except Exception:
            return None  # nothing was consumed: the library decodes it, and says what is wrong
        if position != end or (update and len(images) % 2):
            return None
        if not keep:
            packet.advance(size)  # as if ``event.rows`` had read them
        return images


def odd_datetime(t: int, us: int, fsp: int) -> str:
    """The text of a DATETIME2 (its 5 bytes ``t``, fraction ``us``) that Python cannot
    hold: MySQL's digits, ``fsp`` of the fraction (ValueError past 999,999 µs, a corrupt
    image, as the library's ``datetime.replace``)."""
    if us > 999_999:
        raise ValueError(us)
    ym = t >> 22 & 0x1FFFF
    text = (f"{ym // 13:04d}-{ym % 13:02d}-{t >> 17 & 0x1F:02d} "
            f"{t >> 12 & 0x1F:02d}:{t >> 6 & 0x3F:02d}:{t & 0x3F:02d}")
    return text + f".{max(us, 0) // 10 ** (6 - fsp):0{fsp}d}" if fsp else text


def _time2(t: int, us: int) -> datetime.timedelta:
    """A TIME2 (3 bytes, ``t`` their signed big-endian value; fraction ``us``) as
    mysql-replication's ``__read_time2`` decodes it."""
    if not t >> 23 & 1:
        t = ~t + 1
        return -datetime.timedelta(hours=t >> 12 & 0x3FF, minutes=t >> 6 & 0x3F,
                                   seconds=t & 0x3F, microseconds=us)
    return datetime.timedelta(hours=t >> 12 & 0x3FF, minutes=t >> 6 & 0x3F,
                              seconds=t & 0x3F, microseconds=us)


# Names the generated decoders use (besides the per-column ones they bind).
NAMES: dict[str, object] = {
    "date": datetime.date, "datetime": datetime.datetime,
    "utcfromtimestamp": datetime.datetime.utcfromtimestamp,
    "Decimal": decimal.Decimal, "int_from": int.from_bytes, "BIG": "big",
    "odd_datetime": odd_datetime, "time2": _time2,
}


def row_images(columns: Sequence[Any], key_row: KeyRow | None = None) -> RowImages | None:
    """A decoder of the row images of a table with these binlog columns (a table map's
    ``Column`` objects), or None if one of them is not decoded here. ``key_row``: the
    table's reader of an image straight to its key and row JSON (``rowtext.py``)."""
    lines = ["def image(data, p):", *null_bitmap(len(columns))]
    namespace = dict(NAMES)
    names = []
    for i, column in enumerate(columns):
        if not isinstance(column.name, str):
            return None
        body = column_lines(i, column, namespace)
        if body is None:
            return None
        names.append(column.name)
        lines += [f"    if nb[{i >> 3}] & {1 << (i & 7)}:", f"        v{i} = None", "    else:"]
        lines += [f"        {line}" for line in body]
    for i, name in enumerate(names):
        namespace[f"n{i}"] = name
    lines.append("    return {" + ", ".join(f"n{i}: v{i}" for i in range(len(names))) + "}, p")
    exec("\n".join(lines), namespace)  # noqa: S102 - values reach it only by namespace names
    return RowImages(namespace["image"], len(columns), key_row)  # type: ignore[arg-type]


def null_bitmap(count: int) -> list[str]:
    """The lines that read an image's NULL bitmap into ``nb`` (bit i: column i is NULL)."""
    return [f"    nb = data[p:p + {(count + 7) // 8}]", f"    p += {(count + 7) // 8}"]


def text_encoding(column: Any) -> str | None:
    """The Python codec a string column's bytes are decoded with, as mysql-replication
    decodes them (None: Python has none, the library gives bytes)."""
    name = column.character_set_name
    encoding = "utf-8" if name is None else RowsEvent.charset_to_encoding(name)
    try:
        codecs.lookup(encoding)
    except LookupError:
        return None
    return encoding


def column_lines(i: int, column: Any, namespace: dict[str, object]) -> list[str] | None:
    """Lines that set ``v{i}`` from ``data`` at ``p`` to mysql-replication's value and move
    ``p`` past it (None: a type not decoded here)."""
    kind = column.type
    v = f"v{i}"
    unsigned = bool(getattr(column, "unsigned", False))
    if kind == FIELD_TYPE.TINY:
        return [f"{v} = data[p]", "p += 1"] if unsigned else [
            f"{v} = data[p]", "p += 1", f"if {v} > 127: {v} -= 256"]
    if kind == FIELD_TYPE.INT24:
        lines = [f"{v} = data[p] | data[p + 1] << 8 | data[p + 2] << 16", "p += 3"]
        return lines if unsigned else [*lines, f"if {v} >= 0x800000: {v} -= 0x1000000"]
    if kind in _STRUCTS:
        signed, not_signed, size = _STRUCTS[kind]
        namespace[f"u{i}"] = struct.Struct(not_signed if unsigned else signed).unpack_from
        return [f"{v} = u{i}(data, p)[0]", f"p += {size}"]
    if kind == FIELD_TYPE.YEAR:
        return [f"{v} = data[p] + 1900", "p += 1"]
    if kind in (FIELD_TYPE.VARCHAR, FIELD_TYPE.STRING):
        return _string(i, column, 2 if column.max_length > 255 else 1, namespace)
    if kind == FIELD_TYPE.BLOB:
        return _string(i, column, column.length_size, namespace)
    if kind == FIELD_TYPE.DATE:  # a date Python cannot hold: its text
        return ["t = data[p] | data[p + 1] << 8 | data[p + 2] << 16", "p += 3",
                "y, m, d = t >> 9 & 0x7FFF, t >> 5 & 0xF, t & 0x1F",
                "try:", f"    {v} = date(y, m, d)",
                "except ValueError:", f"    {v} = f'{{y:04d}}-{{m:02d}}-{{d:02d}}'"]
    if kind == FIELD_TYPE.DATETIME2:
        fsp = column.fsp
        return ["t = int_from(data[p:p + 5], 'big')", "p += 5", "ym = t >> 22 & 0x1FFFF",
                "try:",
                f"    {v} = datetime(ym // 13, ym % 13, t >> 17 & 0x1F, t >> 12 & 0x1F,"
                " t >> 6 & 0x3F, t & 0x3F)",
                "except ValueError:",
                f"    {v} = None", *_fractions(v, fsp, skip_when_none=True),
                f"if {v} is None: {v} = odd_datetime(t, {'us' if fsp else 0}, {fsp})"]
    if kind == FIELD_TYPE.TIME2:
        fraction = fraction_lines(column.fsp)
        return ["t = int_from(data[p:p + 3], 'big', signed=True)", "p += 3", *fraction,
                f"{v} = time2(t, {'us' if fraction else 0})"]
    if kind == FIELD_TYPE.GEOMETRY:
        size = column.length_size
        if size not in (1, 2, 3, 4):
            return None
        return [f"n = int_from(data[p:p + {size}], 'little')",
                f"{v} = data[p + {size}:p + {size} + n]", f"p += {size} + n"]
    if kind == FIELD_TYPE.BIT:
        bits, size = column.bits, column.bytes
        namespace[f"f{i}"] = f"0{bits}b"
        return [f"{v} = format(int_from(data[p:p + {size}], 'big') & {(1 << bits) - 1}, f{i})",
                f"p += {size}"]
    if kind == FIELD_TYPE.ENUM:
        if not column.enum_values or column.size not in (1, 2):
            return None
        namespace[f"e{i}"] = tuple(column.enum_values)
        return [f"{v} = e{i}[int_from(data[p:p + {column.size}], 'little')]",
                f"p += {column.size}"]
    if kind == FIELD_TYPE.SET:  # the empty set is an empty set (the library: None)
        if not column.set_values or column.size not in range(1, 9):
            return None
        namespace[f"s{i}"] = tuple((1 << n, member) for n, member
                                   in enumerate(column.set_values))
        return [f"m = int_from(data[p:p + {column.size}], 'little')", f"p += {column.size}",
                f"{v} = {{member for bit, member in s{i} if m & bit}}"]
    if kind == FIELD_TYPE.TIMESTAMP2:
        return [f"{v} = utcfromtimestamp(int_from(data[p:p + 4], 'big', signed=True))",
                "p += 4", *_fractions(v, column.fsp, skip_when_none=False)]
    if kind == FIELD_TYPE.NEWDECIMAL:
        return _decimal(v, column.precision, column.decimals)
    return None


def _string(i: int, column: Any, length_bytes: int, namespace: dict[str, object]
            ) -> list[str] | None:
    """A length-prefixed string, decoded as mysql-replication decodes it: with the codec of
    the column's character set, bytes where Python has none (``binary``)."""
    if length_bytes not in (1, 2, 3, 4):
        return None
    v = f"v{i}"
    lines = ["n = data[p]" if length_bytes == 1 else
             f"n = int_from(data[p:p + {length_bytes}], 'little')",
             f"{v} = data[p + {length_bytes}:p + {length_bytes} + n]",
             f"p += {length_bytes} + n"]
    encoding = text_encoding(column)
    if encoding is None:  # bytes; but ``b"".decode(x)`` is "" whatever x: so is the library's
        return [*lines, f"if not {v}: {v} = ''"]
    namespace[f"e{i}"] = encoding
    return [*lines, f"{v} = {v}.decode(e{i})"]


def fraction_lines(fsp: int) -> list[str]:
    """Lines that read the fractional seconds (``fsp`` digits, big-endian) into ``us``
    (microseconds) and move ``p`` past them; none for ``fsp`` 0."""
    size = _FSP_BYTES.get(fsp, 0)
    if size == 0:
        return []
    micro = f"int_from(data[p:p + {size}], 'big', signed=True)"
    if fsp % 2:
        micro = f"int({micro} / 10)"
    return [f"us = {micro} * {10 ** (6 - fsp)}", f"p += {size}"]


def _fractions(v: str, fsp: int, *, skip_when_none: bool) -> list[str]:
    """Lines that read the fractional seconds into ``v``, a datetime (or None)."""
    lines = fraction_lines(fsp)
    if not lines:
        return []
    test = f"{v} is not None and us > 0" if skip_when_none else "us > 0"
    return [*lines, f"if {test}: {v} = {v}.replace(microsecond=us)"]


def decimal_groups(precision: int, scale: int) -> tuple[int, list[tuple[int, int, str]]]:
    """DECIMAL(precision, scale)'s binary form: its size, and its groups of digits as
    ``(offset, size, format)`` in order, the fraction's first after a ``(0, 0, ".")``:
    groups of 9 digits in 4 big-endian bytes, the rest in 1-4 (``__read_new_decimal``)."""
    whole, whole_rest = divmod(precision - scale, 9)
    fraction, fraction_rest = divmod(scale, 9)
    sizes = ([(_COMPRESSED_BYTES[whole_rest], "")] if _COMPRESSED_BYTES[whole_rest] else [])
    sizes += [(4, ":09d")] * whole + [(0, ".")] + [(4, ":09d")] * fraction
    if _COMPRESSED_BYTES[fraction_rest]:
        sizes.append((_COMPRESSED_BYTES[fraction_rest], f":0{fraction_rest}d"))
    groups, offset = [], 0
    for size, form in sizes:
        groups.append((offset, size, form))
        offset += size
    return offset, groups


def decimal_head(total: int) -> list[str]:
    """Lines that take a DECIMAL's ``total`` bytes into ``b``, its sign into ``m`` (0, or -1
    for a negative number, whose bytes are all inverted) and move ``p`` past it."""
    return [f"b = bytearray(data[p:p + {total}])", f"p += {total}",
            "m = 0 if b[0] & 0x80 else -1", "b[0] ^= 0x80"]


def decimal_group(offset: int, size: int) -> str:
    """The source of one group's value (``b`` and ``m`` as :func:`decimal_head` sets)."""
    return f"(int_from(b[{offset}:{offset + size}], BIG, signed=True) ^ m)"


def _decimal(v: str, precision: int, scale: int) -> list[str]:
    """DECIMAL read as mysql-replication reads it: the text of the digits (the sign, then
    each group) made a ``Decimal``."""
    total, groups = decimal_groups(precision, scale)
    text = "".join("." if form == "." else f"{{{decimal_group(offset, size)}{form}}}"
                   for offset, size, form in groups)
    return [*decimal_head(total), f"{v} = Decimal(('-' if m else '') + f'{text}')"]
