"""Where a key lies in a table's key range, from 0 to 1: a dump's progress by its keys."""

from __future__ import annotations

import math
import re

HEX = re.compile(r"[0-9a-fA-F-]+")


def scalar(value: object) -> float | str | None:
    """The first column of a key as a number, else as a string (None for other values)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value
    return None


def _string_number(text: str, hexadecimal: bool) -> float:
    """A string as a number that keeps the order of its first characters: hex digits
    (UUIDs, hashes) as such, other strings by their first bytes in base 256."""
    if hexadecimal:
        digits = text.replace("-", "")[:12].ljust(12, "0")
        return float(int(digits, 16))
    number = 0.0
    for byte in text.encode()[:8].ljust(8, b"\0"):
        number = number * 256 + byte
    return number


def key_ratio(low: float | str | None, last: str, upper: str) -> float | None:
    """Where ``last`` lies between the first key ``low`` and ``upper``, from 0 to 1.

    Keys are compared by their first column: numbers as numbers, strings by their first
    bytes. Without a known first key, numbers count from 0 and strings from "".
    """
    last_value, upper_value = scalar(last), scalar(upper)
    if isinstance(last_value, float) and isinstance(upper_value, float):
        start = low if isinstance(low, float) else min(0.0, last_value)
        lo, hi, at = start, upper_value, last_value
    elif last_value is None or upper_value is None:
        return None
    else:
        texts = [str(v) for v in (low, upper, last) if v is not None]
        hexadecimal = all(HEX.fullmatch(text) for text in texts)
        lo = _string_number(str(low), hexadecimal) if low is not None else 0.0
        hi, at = _string_number(str(upper), hexadecimal), _string_number(str(last), hexadecimal)
    if hi <= lo:
        return None
    ratio = (at - lo) / (hi - lo)
    return None if math.isnan(ratio) else min(1.0, max(0.0, ratio))
