"""Row images read straight from their bytes to their canonical key and row JSON.

``rowimage.py`` decodes a row image into the values mysql-replication gives, and the
codec (``values.py``) encodes those: for the types most tables have, that works twice — a
``datetime`` made only to be printed, a ``Decimal`` made from digits only to be printed
again. :func:`key_row_reader` generates, per table, one function that reads an image and
returns its key and row JSON: integers, YEAR, DECIMAL, DATE, DATETIME, TIMESTAMP and text
strings go from their bytes to their canonical text (zero and invalid dates too: MySQL's
text, never checked); every other column is decoded as ``rowimage.py`` decodes it and
encoded by the codec's own lines.

Same value, same bytes: tests/integration/test_mysql_values.py reads every event of its
type tables both ways (this reader, and the codec over mysql-replication's rows) and
compares them byte for byte; tests/unit/mysql/test_rowtext.py does the same over random bytes of
each type read here.
"""

from __future__ import annotations

import datetime
import struct
from collections.abc import Sequence
from json.encoder import encode_basestring
from typing import Any

from pymysqlreplication.constants import FIELD_TYPE

from dblog_worker.mysql.column_model import Kind
from dblog_worker.mysql.rowimage import (
    NAMES,
    KeyRow,
    column_lines,
    decimal_group,
    decimal_groups,
    decimal_head,
    fraction_lines,
    null_bitmap,
    text_encoding,
)
from dblog_worker.mysql.texts import zero_timestamp
from dblog_worker.mysql.values import MyRowCodec

__all__ = ["key_row_reader"]

_INTEGERS = (FIELD_TYPE.TINY, FIELD_TYPE.SHORT, FIELD_TYPE.INT24, FIELD_TYPE.LONG,
             FIELD_TYPE.LONGLONG)
_STRINGS = (FIELD_TYPE.VARCHAR, FIELD_TYPE.STRING, FIELD_TYPE.BLOB)
_STRUCT_CODES = {1: "b", 2: "h", 4: "i"}  # signed big-endian integers of these sizes


def key_row_reader(columns: Sequence[Any], codec: MyRowCodec) -> KeyRow | None:
    """The reader of a row image of a table with these binlog columns (a table map's
    ``Column`` objects, in the codec's column order) to ``((key, row), position after)``;
    None where ``rowimage.py`` decodes no image of the table."""
    if len(columns) != len(codec.columns):
        return None
    lines = ["def key_row(data, p):", *null_bitmap(len(columns))]
    namespace = {**NAMES, **_CALENDAR, "quote": encode_basestring}
    for i, column in enumerate(columns):
        direct = _json_lines(i, column, codec, namespace)
        if direct is not None:
            lines += [f"    if nb[{i >> 3}] & {1 << (i & 7)}:", f"        x{i} = 'null'",
                      "    else:", *(f"        {line}" for line in direct)]
            continue
        decoded = column_lines(i, column, namespace)
        if decoded is None:
            return None
        lines += [f"    if nb[{i >> 3}] & {1 << (i & 7)}:", f"        v{i} = None", "    else:",
                  *(f"        {line}" for line in decoded),
                  *(f"    {line}" for line in codec.json_lines(i, namespace))]
    lines.append(f"    return ({codec.key_row_source(namespace)}), p")
    exec("\n".join(lines), namespace)  # noqa: S102 - values reach it only by namespace names
    reader: KeyRow = namespace["key_row"]  # type: ignore[assignment]
    return reader


def _json_lines(i: int, column: Any, codec: MyRowCodec, namespace: dict[str, object]
                ) -> list[str] | None:
    """Lines that read column ``i``'s value at ``p`` straight to its JSON ``x{i}`` (the
    codec's text, see ``values.py``) and move ``p`` past it; None for a column read the
    general way."""
    kind, mine, x = column.type, codec.columns[i], f"x{i}"
    if kind in _INTEGERS and mine.kind is Kind.INTEGER:
        decoded = column_lines(i, column, namespace)
        return None if decoded is None else [*decoded, f"{x} = str(v{i})"]
    if kind == FIELD_TYPE.YEAR and mine.kind is Kind.YEAR:  # 0 is the year 0000
        return [f"{x} = str(data[p] + 1900) if data[p] else '0'", "p += 1"]
    if kind in _STRINGS and mine.kind is Kind.TEXT and text_encoding(column) is not None:
        decoded = column_lines(i, column, namespace)
        return None if decoded is None else [*decoded, f"{x} = quote(v{i})"]
    if kind == FIELD_TYPE.NEWDECIMAL and mine.kind is Kind.DECIMAL and (
            mine.scale == column.decimals):
        return _decimal(x, column.precision, column.decimals, namespace)
    if kind == FIELD_TYPE.DATE and mine.kind is Kind.DATE:
        return ["t = data[p] | data[p + 1] << 8 | data[p + 2] << 16", "p += 3",
                f"{x} = dates.get(t) or date_json(t)"]
    if kind == FIELD_TYPE.DATETIME2 and mine.kind is Kind.DATETIME and mine.fsp == column.fsp:
        # a time past its range (a corrupt image) is printed as rowimage.py prints it
        fsp = column.fsp
        return ["t = int_from(data[p:p + 5], 'big')", "p += 5", *_fraction_lines(fsp),
                "k = t >> 17 & 0x3FFFFF", "day = days.get(k) or day_text(k)",
                "h, mi, se = t >> 12 & 0x1F, t >> 6 & 0x3F, t & 0x3F",
                f"{x} = f'\"{{day}}{{clock[h * 60 + mi]}}{{seconds[se]}}{_fraction(fsp)}\"'"
                f" if h < 24 and mi < 60 and se < 60 else"
                f" quote(odd_datetime(t, {'us' if fsp else 0}, {fsp}))"]
    if kind == FIELD_TYPE.TIMESTAMP2 and mine.kind is Kind.TIMESTAMP and (
            mine.fsp == column.fsp):
        # The zero TIMESTAMP is stored as 0 seconds (decoded as the epoch).
        zero = "s == 0 and us <= 0" if column.fsp else "s == 0"
        namespace[f"z{i}"] = '"' + zero_timestamp(column.fsp) + '"'
        namespace["unix"] = struct.Struct(">i").unpack_from
        return ["s = unix(data, p)[0]", "p += 4", *_fraction_lines(column.fsp),
                "d, r = divmod(s, 86400)",
                f"{x} = z{i} if {zero} else f'\"{{unix_days.get(d) or unix_day(d)}}"
                f"{{clock[r // 60]}}{{seconds[r % 60]}}{_fraction(column.fsp)}\"'"]
    return None


def _fraction_lines(fsp: int) -> list[str]:
    """:func:`rowimage.fraction_lines`, refusing a fraction past 999,999 µs as the library's
    ``datetime.replace`` does (a corrupt image: the library then decodes it, and raises)."""
    lines = fraction_lines(fsp)
    return [*lines, "if us > 999999: raise ValueError(us)"] if lines else []


def _fraction(fsp: int) -> str:
    """The f-string part of a DATETIME's/TIMESTAMP's fraction from ``us`` (microseconds,
    taken as 0 unless positive, as mysql-replication does): a dot and ``fsp`` digits."""
    if not fsp:
        return ""
    return f".{{(us if us > 0 else 0) // {10 ** (6 - fsp)}:0{fsp}d}}"


# Calendar texts, made once each and kept (up to _KEPT of each, bounded memory): dates
# repeat in a log.
_KEPT = 25_000  # about 70 years of days: some 2.5 MB in each table below, at most
_EPOCH = datetime.date(1970, 1, 1)
_DATES: dict[int, str] = {}  # DATE's 3 bytes → its JSON
_DAYS: dict[int, str] = {}  # DATETIME2's year*13+month and day bits → "YYYY-MM-DD "
_UNIX_DAYS: dict[int, str] = {}  # days since 1970-01-01 → "YYYY-MM-DD "


def _date_json(t: int) -> str:
    """A DATE's JSON from its 3 bytes: MySQL's text, zero and invalid dates too."""
    text = f'"{t >> 9 & 0x7FFF:04d}-{t >> 5 & 0xF:02d}-{t & 0x1F:02d}"'
    if len(_DATES) < _KEPT:
        _DATES[t] = text
    return text


def _day_text(bits: int) -> str:
    ym = bits >> 5
    text = f"{ym // 13:04d}-{ym % 13:02d}-{bits & 0x1F:02d} "
    if len(_DAYS) < _KEPT:
        _DAYS[bits] = text
    return text


def _unix_day(days: int) -> str:
    text = (_EPOCH + datetime.timedelta(days)).isoformat() + " "
    if len(_UNIX_DAYS) < _KEPT:
        _UNIX_DAYS[days] = text
    return text


_CALENDAR: dict[str, object] = {
    "dates": _DATES, "date_json": _date_json, "days": _DAYS, "day_text": _day_text,
    "unix_days": _UNIX_DAYS, "unix_day": _unix_day,
    "clock": [f"{h:02d}:{m:02d}:" for h in range(24) for m in range(60)],
    "seconds": [f"{s:02d}" for s in range(60)],
}


def _decimal(x: str, precision: int, scale: int, namespace: dict[str, object]) -> list[str]:
    """DECIMAL(precision, scale) as its JSON string: the sign, the whole part without
    leading zeros (``0`` when it is zero) and the ``scale`` digits of the fraction, as
    ``format(Decimal(text), f".{scale}f")`` prints the library's value. The groups are read
    by one ``struct`` where their sizes allow (1, 2 or 4 bytes), else one by one."""
    total, groups = decimal_groups(precision, scale)
    dot = next(n for n, (_, _, form) in enumerate(groups) if form == ".")
    digits = [(offset, size, form) for offset, size, form in groups if form != "."]
    if all(size in _STRUCT_CODES for _, size, _ in digits):
        # Read in place: the first group unsigned, less its sign bit's weight, is the
        # signed value of its bytes with that bit flipped (what the library reads).
        codes = [_STRUCT_CODES[size] for _, size, _ in digits]
        namespace[f"{x}_groups"] = struct.Struct(">" + codes[0].upper() + "".join(
            codes[1:])).unpack_from
        names = [f"g{n}" for n in range(len(digits))]
        head = ["m = 0 if data[p] & 0x80 else -1",
                f"{''.join(f'{name}, ' for name in names)}= {x}_groups(data, p)",
                f"p += {total}"]
        values = [f"((g0 - {1 << (8 * digits[0][1] - 1)}) ^ m)",
                  *(f"({name} ^ m)" for name in names[1:])]
    else:
        head = decimal_head(total)
        values = [decimal_group(offset, size) for offset, size, _ in digits]
    whole = "0"
    for value in values[:dot]:
        whole = value if whole == "0" else f"({whole}) * 1000000000 + {value}"
    fraction = "".join(f"{{{value}{form}}}"
                       for value, (_, _, form) in zip(values[dot:], digits[dot:], strict=True))
    text = f"{{{whole}}}" + (f".{fraction}" if scale else "")
    return [*head, f"{x} = f'\"{{\"-\" if m else \"\"}}{text}\"'"]
