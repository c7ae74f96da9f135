"""Per-column encodings: which canonical-text functions a column's values go through.

:func:`encoding_of` gives a column's :class:`Encoding`: its dump and binlog text
functions and key-parameter parser (from :mod:`dblog_worker.mysql.texts`, or closures
over the column's parameters here) and the style of its JSON.
:class:`~dblog_worker.mysql.values.MyRowCodec` generates its row functions from these.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from dblog_worker.mysql.column_model import Kind, MyColumn
from dblog_worker.mysql.texts import (
    DATE_TEXT,
    DATETIME_TEXT,
    TIME_TEXT,
    base64_text,
    binlog_bit,
    binlog_date,
    binlog_inet4,
    binlog_inet6,
    binlog_integer,
    binlog_spatial,
    binlog_text,
    binlog_uuid,
    binlog_year,
    datetime_text,
    double_text,
    dump_binary,
    dump_bit,
    dump_decimal,
    dump_double,
    dump_float,
    dump_integer,
    dump_year,
    float32_text,
    mysql_json_text,
    param_binary,
    param_decimal,
    param_double,
    param_enum,
    param_float,
    param_inet,
    param_integer,
    param_matching,
    param_set,
    param_text,
    param_uuid,
    time_text,
    zero_timestamp,
)

__all__ = ["NUMBER", "PLAIN", "STRING", "Encoding", "encoding_of"]

# How a column's canonical text becomes JSON: as is (a number), quoted and escaped, or just
# quoted (texts that never hold a character JSON escapes: digits, dates, base64).
NUMBER, STRING, PLAIN = "number", "string", "plain"

_EPOCH = datetime.datetime(1970, 1, 1)  # naive UTC, as mysql-replication decodes


@dataclass(frozen=True, slots=True)
class Encoding:
    """How one column's values become its canonical text and JSON.

    ``dump``/``binlog`` give the canonical text of a non-NULL cell/value; ``dump`` None
    means the cell is the text.  ``style`` says how the text becomes JSON.
    ``dump_inline`` is the generated dump code's ``(extra null test or "", text)`` of a cell
    ``{v}``, ``{d}`` being ``dump``: the same result as ``dump`` with fewer calls.
    """

    dump: Callable[[Any], str] | None
    binlog: Callable[[Any], str]
    style: str
    param: Callable[[str], object]
    dump_inline: tuple[str, str] | None = None


def _binlog_set(members: tuple[str, ...]) -> Callable[[Any], str]:
    def text(value: set[str] | frozenset[str]) -> str:
        ordered = [member for member in members if member in value]
        if len(ordered) != len(value):
            unknown = sorted(value - set(members))
            raise ValueError(
                f"SET value has members {unknown!r} not in the codec's {members!r} (MariaDB's"
                " information_schema shows characters outside the BMP as '?'"
                "; build the codec from column_from_binlog)"
            )
        return ",".join(ordered)

    return text


def _binlog_binary(length: int) -> Callable[[Any], str]:
    def text(value: bytes | str) -> str:
        if isinstance(value, str):
            if value:
                raise ValueError("the binlog gave text for a binary column")
            value = b""  # mysql-replication gives '' for an empty binary string
        return base64_text(value.ljust(length, b"\0"))

    return text


def _binlog_decimal(scale: int) -> Callable[[Any], str]:
    spec = f".{scale}f"

    def text(value: Decimal) -> str:
        return format(value, spec)

    return text


def _binlog_datetime(fsp: int) -> Callable[[Any], str]:
    def text(value: datetime.datetime | str) -> str:
        # rowimage.py gives the text of a date Python cannot hold (with fsp digits)
        return value if isinstance(value, str) else datetime_text(value, fsp)

    return text


def _binlog_timestamp(fsp: int) -> Callable[[Any], str]:
    zero = zero_timestamp(fsp)

    def text(value: datetime.datetime) -> str:
        # The zero TIMESTAMP is stored as 0 seconds, decoded as the epoch.
        return zero if value == _EPOCH else datetime_text(value, fsp)

    return text


def _binlog_time(fsp: int) -> Callable[[Any], str]:
    def text(value: datetime.timedelta) -> str:
        return time_text(value, fsp)

    return text


# dump_integer/dump_decimal without the call when there is no padding to drop.
_UNPADDED_INLINE = "({v} if {v}[0] != '0' else {d}({v}))"


def encoding_of(column: MyColumn) -> Encoding:
    """The encoding of ``column``'s values (ValueError for an unknown kind)."""
    kind = column.kind
    if kind is Kind.INTEGER:
        return Encoding(
            dump_integer,
            binlog_integer,
            NUMBER,
            param_integer,
            dump_inline=("", _UNPADDED_INLINE),
        )
    if kind is Kind.DECIMAL:
        return Encoding(
            dump_decimal,
            _binlog_decimal(column.scale),
            PLAIN,
            param_decimal,
            dump_inline=("", _UNPADDED_INLINE),
        )
    if kind is Kind.FLOAT:
        return Encoding(dump_float, float32_text, NUMBER, param_float)
    if kind is Kind.DOUBLE:
        return Encoding(dump_double, double_text, NUMBER, param_double)
    if kind is Kind.TEXT:
        return Encoding(None, binlog_text, STRING, param_text)
    if kind is Kind.BINARY:
        return Encoding(dump_binary, _binlog_binary(column.length), PLAIN, param_binary)
    # Dates are MySQL's text, zero and invalid dates too (0000-00-00, 2020-02-31).
    if kind is Kind.DATE:
        return Encoding(None, binlog_date, PLAIN, param_matching(DATE_TEXT, "DATE"))
    if kind is Kind.DATETIME:
        return Encoding(
            None, _binlog_datetime(column.fsp), PLAIN, param_matching(DATETIME_TEXT, "DATETIME")
        )
    if kind is Kind.TIMESTAMP:
        return Encoding(
            None,
            _binlog_timestamp(column.fsp),
            PLAIN,
            param_matching(DATETIME_TEXT, "TIMESTAMP"),
        )
    if kind is Kind.TIME:
        return Encoding(
            None, _binlog_time(column.fsp), PLAIN, param_matching(TIME_TEXT, "TIME")
        )
    if kind is Kind.YEAR:
        return Encoding(dump_year, binlog_year, NUMBER, param_integer)
    if kind is Kind.ENUM:
        return Encoding(None, binlog_text, STRING, param_enum(column.members))
    if kind is Kind.SET:
        return Encoding(None, _binlog_set(column.members), STRING, param_set(column.members))
    if kind is Kind.BIT:
        return Encoding(dump_bit, binlog_bit, NUMBER, param_integer)
    if kind is Kind.JSON:
        return Encoding(None, mysql_json_text, STRING, param_text)
    if kind is Kind.GEOMETRY:
        return Encoding(dump_binary, binlog_spatial, PLAIN, param_binary)
    if kind is Kind.UUID:
        return Encoding(None, binlog_uuid, PLAIN, param_uuid)
    if kind is Kind.INET4:
        return Encoding(None, binlog_inet4, PLAIN, param_inet(4))
    if kind is Kind.INET6:
        return Encoding(None, binlog_inet6, PLAIN, param_inet(6))
    raise ValueError(f"column {column.name!r}: unknown kind {kind!r}")
