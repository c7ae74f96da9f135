"""How a table is named in the landing zone: one safe path component per table.

Used by every format that keeps a folder (or an object-store prefix) per table, and by
``dblog verify`` to name a table's keys file the same way.
"""

from __future__ import annotations

import re

NAME_MAX = 255  # bytes in one path component on every filesystem we care about
_SAFE_CHARS = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")
_DIR_PART = r"(?:[A-Za-z0-9_-]|%[0-9A-F]{2})+"
_DIR_RE = re.compile(rf"({_DIR_PART})\.({_DIR_PART})")


def _encode_part(part: str) -> str:
    try:
        raw = part.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"{part!r} is not encodable as UTF-8") from None
    return "".join(chr(b) if b in _SAFE_CHARS else f"%{b:02X}" for b in raw)


def table_dir_name(schema: str, name: str) -> str:
    """The directory name of a table: each part percent-encoded, joined by ``.``.

    Every byte of the UTF-8 form outside ``[A-Za-z0-9_-]`` becomes ``%XX``
    (upper-case hex), so the separating dot is the only literal dot and the result
    is always one path component that is neither ``.`` nor ``..`` nor hidden.
    Raises ValueError for an empty part or a result over 255 bytes.
    """
    if not schema or not name:
        raise ValueError(f"schema and table name must be non-empty, got {schema!r}, {name!r}")
    result = f"{_encode_part(schema)}.{_encode_part(name)}"
    if len(result) > NAME_MAX:
        raise ValueError(
            f"the directory name of table {schema!r}.{name!r} would be {len(result)} bytes,"
            f" over the filesystem limit of {NAME_MAX}; rename the table or schema"
        )
    return result


def _decode_part(text: str) -> str:
    raw = bytearray()
    i = 0
    while i < len(text):
        if text[i] == "%":
            raw.append(int(text[i + 1 : i + 3], 16))
            i += 3
        else:
            raw.append(ord(text[i]))
            i += 1
    return raw.decode("utf-8")


def parse_table_dir_name(dir_name: str) -> tuple[str, str]:
    """Inverse of :func:`table_dir_name`; ValueError unless ``dir_name`` is its exact output."""
    match = _DIR_RE.fullmatch(dir_name)
    if match is None:
        raise ValueError(f"{dir_name!r} is not a table directory name")
    try:
        schema, name = _decode_part(match[1]), _decode_part(match[2])
    except UnicodeDecodeError:
        raise ValueError(f"{dir_name!r} is not a table directory name (bad UTF-8)") from None
    # Only the canonical spelling is accepted, so that names and tables are 1:1.
    if _encode_part(schema) != match[1] or _encode_part(name) != match[2]:
        raise ValueError(f"{dir_name!r} is not a table directory name (not canonical)")
    return schema, name

