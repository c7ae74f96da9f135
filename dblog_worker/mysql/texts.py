"""Canonical texts of MySQL/MariaDB values, and key parameters parsed from such texts.

The ``dump_*`` functions turn a dump cell (the server's text, see
:data:`dblog_worker.mysql.connection.DUMP_CONV`) into its canonical text, the ``binlog_*``
functions a value decoded by mysql-replication; the ``param_*`` functions turn a canonical
key text back into the value to bind in a keyset ``WHERE``.  The texts are listed in the
module docstring of :mod:`dblog_worker.mysql.values`; :mod:`dblog_worker.mysql.encodings`
picks the functions of each column.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import ipaddress
import math
import re
import struct
from collections.abc import Callable
from decimal import Decimal, InvalidOperation
from json.encoder import encode_basestring

__all__ = [
    "DATETIME_TEXT",
    "DATE_TEXT",
    "TIME_TEXT",
    "base64_text",
    "binlog_bit",
    "binlog_date",
    "binlog_inet4",
    "binlog_inet6",
    "binlog_integer",
    "binlog_spatial",
    "binlog_text",
    "binlog_uuid",
    "binlog_year",
    "datetime_text",
    "double_text",
    "dump_binary",
    "dump_bit",
    "dump_decimal",
    "dump_double",
    "dump_float",
    "dump_integer",
    "dump_year",
    "float32_text",
    "inet6_text",
    "mysql_json_text",
    "param_binary",
    "param_decimal",
    "param_double",
    "param_enum",
    "param_float",
    "param_inet",
    "param_integer",
    "param_matching",
    "param_set",
    "param_text",
    "param_uuid",
    "time_text",
    "zero_timestamp",
]


# --- canonical texts ----------------------------------------------------------------------

_F32 = struct.Struct("<f")
_F32_FORMATS = tuple(f".{digits}g" for digits in range(1, 10))


def double_text(value: float) -> str:
    if not math.isfinite(value):
        raise ValueError(f"not a MySQL DOUBLE value: {value!r}")
    text = repr(value)
    return text[:-2] if text.endswith(".0") else text


def _to_float32(value: float) -> float:
    try:
        result: float = _F32.unpack(_F32.pack(value))[0]
    except OverflowError:
        raise ValueError(f"not a MySQL FLOAT value: {value!r}") from None
    return result


def float32_text(value: float) -> str:
    """The shortest ``%g`` decimal whose float32 is ``value``'s, in :func:`double_text` form."""
    value = _to_float32(value)
    text = format(value, _F32_FORMATS[-1])
    for spec in _F32_FORMATS:
        candidate = format(value, spec)
        try:
            if _F32.unpack(_F32.pack(float(candidate)))[0] == value:
                text = candidate
                break
        except OverflowError:  # rounded up past the largest float32
            continue
    return double_text(float(text))


def _unpadded_integer(text: str) -> str:
    """An integer's text without ZEROFILL padding (called for texts starting with 0)."""
    return str(int(text))


def _unpadded_decimal(text: str) -> str:
    """A decimal's text without ZEROFILL padding (called for texts starting with 0)."""
    stripped = text.lstrip("0")
    return stripped if stripped[:1].isdigit() else "0" + stripped


def dump_decimal(text: str) -> str:
    return text if text[0] != "0" else _unpadded_decimal(text)


def dump_integer(text: str) -> str:
    return text if text[0] != "0" else _unpadded_integer(text)


def dump_float(text: str) -> str:
    return float32_text(float(text))


def dump_double(text: str) -> str:
    return double_text(float(text))


def base64_text(data: bytes) -> str:
    return binascii.b2a_base64(data, newline=False).decode("ascii")


def dump_binary(data: bytes | str) -> str:
    if not isinstance(data, bytes):
        raise ValueError("binary column read as text: the dump connection must use DUMP_CONV")
    return base64_text(data)


def dump_year(text: str) -> str:
    return str(int(text))


def dump_bit(data: bytes | str) -> str:
    if not isinstance(data, bytes):
        raise ValueError("BIT column read as text: the dump connection must use DUMP_CONV")
    return str(int.from_bytes(data, "big"))


def binlog_integer(value: int) -> str:
    return str(int(value))


def binlog_text(value: str | bytes) -> str:
    if not isinstance(value, str):
        raise ValueError(
            "the binlog gave bytes for a text column: its character set has no Python codec"
        )
    return value


def binlog_bit(bits: str) -> str:
    return str(int(bits, 2))


def binlog_date(value: datetime.date | str) -> str:
    # rowimage.py gives the text of a date Python cannot hold (0000-00-00, 2020-02-31)
    return value if isinstance(value, str) else value.isoformat()


def zero_timestamp(fsp: int) -> str:
    """The zero TIMESTAMP's text with ``fsp`` fraction digits, as MySQL prints it."""
    return "0000-00-00 00:00:00" + ("." + "0" * fsp if fsp else "")


def binlog_spatial(value: bytes) -> str:
    """A spatial value: its SRID (4 bytes, little-endian) and WKB, as MySQL stores them."""
    return base64_text(value)


def _fixed(value: bytes | str, length: int) -> bytes:
    """A fixed binary string of the log (its trailing zero bytes stripped) at its length."""
    if isinstance(value, str):
        if value:
            raise ValueError("the binlog gave text for a binary column")
        value = b""
    return value.ljust(length, b"\0")


def binlog_uuid(value: bytes | str) -> str:
    """A MariaDB UUID's 16 bytes as MariaDB prints them: lower-case, hyphenated."""
    hexed = _fixed(value, 16).hex()
    return f"{hexed[:8]}-{hexed[8:12]}-{hexed[12:16]}-{hexed[16:20]}-{hexed[20:]}"


def binlog_inet4(value: bytes | str) -> str:
    return ".".join(str(b) for b in _fixed(value, 4))


def binlog_inet6(value: bytes | str) -> str:
    return inet6_text(_fixed(value, 16))


def inet6_text(data: bytes) -> str:
    """An IPv6 address as MariaDB prints an INET6: lower-case groups without leading
    zeros; the first longest run of zero groups, even a single one, as ``::``; an
    IPv4-compatible (``::a.b.c.d``) or IPv4-mapped (``::ffff:a.b.c.d``) address with its
    last 4 bytes dotted."""
    words = [data[i] << 8 | data[i + 1] for i in range(0, 16, 2)]
    gap_at, gap, run_at, run = -1, 0, -1, 0
    for i, word in enumerate([*words, 1]):  # a sentinel ends the last run
        if word == 0:
            run_at, run = (i, 1) if run_at < 0 else (run_at, run + 1)
        elif run_at >= 0:
            if run > gap:
                gap_at, gap = run_at, run
            run_at, run = -1, 0
    if gap_at == 0 and (gap == 6 or (gap == 5 and words[5] == 0xFFFF)):
        return ("::" if gap == 6 else "::ffff:") + ".".join(str(b) for b in data[12:])
    parts, i = [], 0
    while i < 8:
        if i == gap_at:
            parts.append("::" if i == 0 else ":")
            i += gap
            continue
        parts.append(f"{words[i]:x}" + (":" if i < 7 else ""))
        i += 1
    return "".join(parts)


def binlog_year(value: int) -> str:
    # The log stores YEAR as year - 1900, and 0 for 0000.
    return "0" if value == 1900 else str(value)


def _negative_fraction_fix(micros: int) -> int:
    """The true magnitude of a negative TIME(fsp>0) value decoded by mysql-replication.

    It decodes ``-S.f`` (f > 0) as ``-(S + 1 - f)``: MySQL stores the integer part rounded
    down and the fraction as its complement, and the library takes both as they are.
    """
    seconds, fraction = divmod(micros, 1_000_000)
    return micros if fraction == 0 else seconds * 1_000_000 + (1_000_000 - fraction)


def time_text(value: datetime.timedelta, fsp: int) -> str:
    micros = (value.days * 86_400 + value.seconds) * 1_000_000 + value.microseconds
    sign = ""
    if micros < 0:
        sign, micros = "-", _negative_fraction_fix(-micros)
    seconds, fraction = divmod(micros, 1_000_000)
    minutes, seconds = divmod(seconds, 60)
    hours, minutes = divmod(minutes, 60)
    text = f"{sign}{hours:02d}:{minutes:02d}:{seconds:02d}"
    return text + f".{fraction:06d}"[: fsp + 1] if fsp else text


def datetime_text(value: datetime.datetime, fsp: int) -> str:
    text = value.isoformat(" ", "microseconds")
    return text[: 20 + fsp] if fsp else text[:19]


def mysql_json_text(document: object) -> str:
    """MySQL's text of a JSON document decoded by mysql-replication (UNTESTED, see the
    module docstring of :mod:`dblog_worker.mysql.values`)."""
    if document is None:
        return "null"
    if document is True:
        return "true"
    if document is False:
        return "false"
    if isinstance(document, bytes):
        return encode_basestring(document.decode())
    if isinstance(document, str):
        return encode_basestring(document)
    if isinstance(document, int):
        return str(document)
    if isinstance(document, float):
        text = repr(document)
        if "e" in text:
            mantissa, exponent = text.split("e")
            return f"{mantissa}e{int(exponent)}"
        return text
    if isinstance(document, Decimal):
        return format(document, "f")
    if isinstance(document, datetime.datetime):
        return '"' + document.isoformat(" ", "microseconds") + '"'
    if isinstance(document, datetime.date):
        return '"' + document.isoformat() + '"'
    if isinstance(document, datetime.timedelta):
        return '"' + time_text(document, 6) + '"'
    if isinstance(document, list):
        return "[" + ", ".join(mysql_json_text(item) for item in document) + "]"
    if isinstance(document, dict):
        items = (
            f"{mysql_json_text(key)}: {mysql_json_text(item)}" for key, item in document.items()
        )
        return "{" + ", ".join(items) + "}"
    raise ValueError(f"unexpected JSON value from the binlog: {document!r}")


# --- key parameters -----------------------------------------------------------------------

DATE_TEXT = re.compile(r"\d{4}-\d{2}-\d{2}")
DATETIME_TEXT = re.compile(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}(\.\d{1,6})?")
TIME_TEXT = re.compile(r"-?\d{2,3}:\d{2}:\d{2}(\.\d{1,6})?")


_INTEGER_TEXT = re.compile(r"-?\d+")


def param_integer(text: str) -> int:
    if _INTEGER_TEXT.fullmatch(text) is None:
        raise ValueError(f"not an integer: {text!r}")
    return int(text)


def param_decimal(text: str) -> Decimal:
    try:
        value = Decimal(text)
    except InvalidOperation:
        raise ValueError(f"not a decimal: {text!r}") from None
    if not value.is_finite():
        raise ValueError(f"not a decimal: {text!r}")
    return value


def param_float(text: str) -> float:
    return _to_float32(float(text))


def param_double(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"not a MySQL DOUBLE value: {text!r}")
    return value


def param_binary(text: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except binascii.Error:
        raise ValueError(f"not standard base64: {text!r}") from None


def param_matching(pattern: re.Pattern[str], what: str) -> Callable[[str], object]:
    def param(text: str) -> str:
        if pattern.fullmatch(text) is None:
            raise ValueError(f"not a {what} text: {text!r}")
        return text

    return param


def param_enum(members: tuple[str, ...]) -> Callable[[str], object]:
    indexes = {member: index for index, member in enumerate(members, 1)}

    def param(text: str) -> int:
        try:
            return indexes[text]
        except KeyError:
            if text == "":
                return 0  # the invalid value (an explicit '' member prints the same)
            raise ValueError(f"not a member of ENUM{members!r}: {text!r}") from None

    return param


def param_set(members: tuple[str, ...]) -> Callable[[str], object]:
    bits = {member: 1 << index for index, member in enumerate(members)}

    def param(text: str) -> int:
        mask = 0
        for member in text.split(",") if text else ():
            try:
                mask |= bits[member]
            except KeyError:
                raise ValueError(f"not a member of SET{members!r}: {member!r}") from None
        return mask

    return param


def param_text(text: str) -> str:
    return text


_UUID_TEXT = re.compile(r"[0-9a-fA-F]{8}(-?[0-9a-fA-F]{4}){3}-?[0-9a-fA-F]{12}")


def param_uuid(text: str) -> str:
    if _UUID_TEXT.fullmatch(text) is None:
        raise ValueError(f"not a UUID: {text!r}")
    return text


def param_inet(version: int) -> Callable[[str], object]:
    def param(text: str) -> str:
        try:
            address = ipaddress.ip_address(text)
        except ValueError:
            address = None
        if address is None or (version == 4 and address.version != 4):
            raise ValueError(f"not an INET{version} address: {text!r}")
        return text

    return param
