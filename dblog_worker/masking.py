r"""Column exclusion and masking (``[source.columns]``), applied to canonical JSON.

::

    [source.columns]
    key_env = "DBLOG_COLUMN_KEY"          # the HMAC key: an environment variable

    [source.columns."shop.customers"]     # a table: a name or a pattern (table_patterns.py)
    notes = "exclude"                     # not landed at all
    email = "hash"                        # "<HMAC-SHA256 in hex>": joins still work
    ssn = { mask = "XXX-XX-XXXX" }        # a fixed text; "mask" alone is "****"
    "*_phone" = "hash"                    # a column name may be a pattern too

What is hashed
==============

A column's value is first encoded as every value is (its *canonical JSON*, the fragment
the row image would hold: ``docs/landing-format.md``), and that fragment is replaced:

* ``hash``: by the JSON string of the lowercase hex HMAC-SHA256, keyed by the UTF-8
  bytes of ``key_env``'s value, of the fragment's UTF-8 bytes. The text ``a@b.com`` is
  hashed as the 9 bytes ``"a@b.com"`` (quotes included, escapes as landed), the integer
  42 as the 2 bytes ``42``, the numeric 1.50 as ``"1.50"``, a PostgreSQL bytea as its
  base64 string, quotes included. Since a value read by a dump and the same value read
  from the log have the same canonical JSON (DESIGN.md, invariant 7), they hash alike.
* ``mask``: by the JSON string of the mask text.
* NULL stays ``null`` either way (a hash of nothing would match every other NULL).

``exclude`` leaves the column out of the row image. A key column can be neither excluded
nor masked: dumps, repairs and ``dblog verify`` address rows by their key values (a hash
would keep the key unique, HMAC being collision-resistant, but a repair's keys and
verify's key ranges are the source's values, which the target would not hold). A rule that
reaches a key column keeps the table from being captured (named: preflight says so;
matched by a pattern: left out, and the selection says why).

Which rule applies
==================

Each column gets the first rule that matches it: tables in the order the file lists them,
columns in the order each table lists them. The key never appears in a log, a status or
an error: :class:`ColumnRules` and :class:`TableMasks` do not show it.
"""

from __future__ import annotations

import functools
import hmac
import logging
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from json.encoder import encode_basestring
from typing import Any

from dblog_worker.errors import ConfigError
from dblog_worker.table_patterns import NamePattern, PatternError, TablePattern

__all__ = [
    "MIN_KEY_BYTES",
    "Action",
    "ColumnMask",
    "ColumnRules",
    "MaskConflict",
    "TableMasks",
    "generated_left_out",
    "hmac_hex",
]

log = logging.getLogger(__name__)

MIN_KEY_BYTES = 16
DEFAULT_MASK = "****"

try:
    from dblog_worker import _masks  # type: ignore[attr-defined]

    HASHER = "c"
except ImportError:  # not built: the Python loop
    _masks = None
    HASHER = "python"


class Action(StrEnum):
    EXCLUDE = "exclude"
    HASH = "hash"
    MASK = "mask"


class MaskConflict(ValueError):
    """A rule reaches a key column: the table cannot be captured as configured."""


@dataclass(frozen=True, slots=True)
class ColumnMask:
    """What becomes of one column: left out, hashed, or a fixed text."""

    action: Action
    text: str = ""  # MASK: the text every non-NULL value becomes

    def describe(self) -> str:
        return f"mask {self.text!r}" if self.action is Action.MASK else self.action.value


def hmac_hex(key: bytes, fragment: str) -> str:
    """The JSON string of the HMAC-SHA256 (hex) of one canonical JSON fragment."""
    return '"' + hmac.digest(key, fragment.encode(), "sha256").hex() + '"'


@dataclass(frozen=True)
class TableMasks:
    """The masks of one table's columns (only the columns a rule reaches)."""

    masks: Mapping[str, ColumnMask] = field(default_factory=dict)
    key: bytes = field(default=b"", repr=False)

    def __bool__(self) -> bool:
        return bool(self.masks)

    def excluded(self, column: str) -> bool:
        mask = self.masks.get(column)
        return mask is not None and mask.action is Action.EXCLUDE

    def scalar(self, column: str) -> Callable[[str], str] | None:
        """The transform of one non-NULL JSON fragment of ``column`` (None: as it is)."""
        mask = self.masks.get(column)
        if mask is None or mask.action is Action.EXCLUDE:
            return None
        if mask.action is Action.MASK:
            constant = encode_basestring(mask.text)
            return lambda fragment: constant
        if _masks is not None:
            return functools.partial(_masks.hmac_one, _masks.key_state(self.key))
        key = self.key
        return lambda fragment: hmac_hex(key, fragment)

    def vector(self, column: str) -> Callable[[Any, bool], Any] | None:
        """The transform of a column of fragments: ``(array, quoted)`` → fragments, where
        ``array`` is a pa.string() array (null for NULL) of the fragments, or of their
        insides when ``quoted`` (each fragment is ``"`` + value + ``"``). Nulls stay null.
        None: as it is."""
        mask = self.masks.get(column)
        if mask is None or mask.action is Action.EXCLUDE:
            return None
        if mask.action is Action.MASK:
            import pyarrow as pa  # here: the CLI reads this module without needing pyarrow
            import pyarrow.compute as pc

            constant = pa.scalar(encode_basestring(mask.text), pa.string())
            return lambda array, quoted: pc.if_else(pc.is_null(array), None, constant)
        key = self.key
        return lambda array, quoted: hash_column(key, array, quoted)

    def schema(self) -> dict[str, str]:
        """For the schema document: column → what was done to it."""
        return {name: mask.action.value for name, mask in self.masks.items()}


def generated_left_out(generated: Iterable[tuple[str, str]], masks: TableMasks) -> set[str]:
    """The generated columns ``(name, expression)`` (PostgreSQL's STORED ones, which a
    target computes from the other columns) that the schema document and verify leave out:
    those a rule reaches, and those whose expression may read a masked or excluded column
    (a target would compute them from the masked text, or fail, or a rule would be undone).
    The expression is ``pg_get_expr``'s: every column it reads is spelled as an
    identifier, quoted where it must be; at worst a word that only looks like a column
    leaves a generated column out."""
    reached = set(masks.masks)
    left_out = set()
    for name, expression in generated:
        if name in reached:
            left_out.add(name)
            continue
        for quoted, word in _IDENTIFIER.findall(expression):
            if (quoted.replace('""', '"') if quoted else word.lower()) in reached:
                left_out.add(name)
                break
    return left_out


_IDENTIFIER = re.compile(r'"((?:[^"]|"")*)"|([A-Za-z_][A-Za-z0-9_$]*)')


def hash_column(key: bytes, array: Any, quoted: bool) -> Any:
    """:func:`hmac_hex` of each fragment of a pa.string() array, nulls kept: in C (no
    Python object per value, the GIL released) where ``_masks.c`` is built."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    count = len(array)
    if _masks is None:
        quote = '"' if quoted else ""
        return pa.array([None if v is None else hmac_hex(key, quote + v + quote)
                         for v in array.to_pylist()], pa.string())
    _, offsets, data = array.buffers()
    offsets_out, data_out = _masks.hmac_hex(
        key, offsets if offsets is not None else b"\0\0\0\0",
        data if data is not None else b"", array.offset, count, quoted)
    hashed = pa.Array.from_buffers(pa.string(), count,
                                   [None, pa.py_buffer(offsets_out), pa.py_buffer(data_out)])
    if array.null_count:
        hashed = pc.if_else(pc.is_valid(array), hashed, pa.scalar(None, pa.string()))
    return hashed


@dataclass(frozen=True)
class _Rule:
    tables: TablePattern
    columns: tuple[tuple[NamePattern, ColumnMask], ...]


@dataclass(frozen=True)
class ColumnRules:
    """``[source.columns]``, parsed: which mask each column of a table gets."""

    rules: tuple[_Rule, ...] = ()
    key: bytes = field(default=b"", repr=False)
    key_env: str = ""

    def __bool__(self) -> bool:
        return bool(self.rules)

    def for_table(self, table: str, columns: Sequence[str],
                  key_columns: Sequence[str] = ()) -> TableMasks:
        """The masks of ``table``'s ``columns``; MaskConflict if a rule reaches a key
        column."""
        masks: dict[str, ColumnMask] = {}
        for rule in self.rules:
            if not rule.tables.matches(table):
                continue
            for column in columns:
                if column in masks:
                    continue
                for pattern, mask in rule.columns:
                    if pattern.matches(column):
                        if column in key_columns:
                            raise MaskConflict(
                                f"[source.columns] {rule.tables.text!r} would "
                                f"{mask.action.value} {column!r}, a key column of {table}: a "
                                "key column can be neither excluded nor masked (dumps, "
                                "repairs and verify address rows by their key)")
                        masks[column] = mask
                        break
        return TableMasks(masks, self.key)

    def require(self, table: str, columns: Sequence[str],
                key_columns: Sequence[str]) -> TableMasks:
        """:meth:`for_table` where the table is being captured: a rule that reaches a key
        column (its key changed since the selection) stops capture with a ConfigError,
        since landing the key in clear is not an option."""
        try:
            return self.for_table(table, columns, key_columns)
        except MaskConflict as exc:
            raise ConfigError(f"{exc}; change [source.columns] and reload the worker"
                              ) from None

    def reaches(self, table: str) -> bool:
        """Whether any rule names a table pattern that matches ``table``."""
        return any(rule.tables.matches(table) for rule in self.rules)

    def fingerprint(self) -> tuple[object, ...]:
        """What a reload compares: the rules and the key's presence (never the key)."""
        return (tuple((r.tables.text, tuple((p.text, m) for p, m in r.columns))
                      for r in self.rules), self.key_env, bool(self.key))


def parse_rules(section: object, env: Mapping[str, str], form: str = "schema.table"
                ) -> ColumnRules:
    """``[source.columns]`` → :class:`ColumnRules`; ValueError with a one-line reason (the
    caller prefixes ``source.columns``)."""
    if section is None:
        return ColumnRules()
    if not isinstance(section, dict):
        raise ValueError(' must be a table: [source.columns."schema.table"] with column = '
                         '"exclude", "hash", "mask" or { mask = "text" }')
    rules = []
    key_env = section.get("key_env")
    for name, columns in section.items():
        if name == "key_env":
            continue
        try:
            tables = TablePattern.parse(str(name), form)
        except PatternError as exc:
            raise ValueError(f": {exc}") from None
        if not isinstance(columns, dict) or not columns:
            raise ValueError(f".{name!r} must be a table of column = \"exclude\", \"hash\", "
                             '"mask" or { mask = "text" }')
        parsed = []
        for column, action in columns.items():
            try:
                pattern = NamePattern.parse(str(column))
            except PatternError as exc:
                raise ValueError(f".{name!r}: {exc}") from None
            parsed.append((pattern, _mask(f".{name!r}.{column!r}", action)))
        rules.append(_Rule(tables, tuple(parsed)))
    hashing = any(m.action is Action.HASH for r in rules for _, m in r.columns)
    key = b""
    if key_env is not None:
        if not isinstance(key_env, str) or not key_env:
            raise ValueError(".key_env must name an environment variable, like "
                             '"DBLOG_COLUMN_KEY"')
        if key_env not in env:
            raise ValueError(f".key_env names {key_env}, which is not set")
        key = env[key_env].encode()
        if len(key) < MIN_KEY_BYTES:
            raise ValueError(f".key_env: {key_env} holds {len(key)} bytes; an HMAC key needs "
                             f"at least {MIN_KEY_BYTES} (e.g. `openssl rand -hex 32`)")
    elif hashing:
        raise ValueError(': a column is hashed, so key_env must name the environment variable '
                         'that holds the HMAC key (key_env = "DBLOG_COLUMN_KEY")')
    return ColumnRules(tuple(rules), key, key_env or "")


def _mask(where: str, action: object) -> ColumnMask:
    if isinstance(action, dict):
        text = action.get("mask")
        if set(action) != {"mask"} or not isinstance(text, str):
            raise ValueError(f'{where} must be {{ mask = "text" }}, got {action!r}')
        return ColumnMask(Action.MASK, text)
    if action == "mask":
        return ColumnMask(Action.MASK, DEFAULT_MASK)
    if action in ("exclude", "hash"):
        return ColumnMask(Action(action))
    raise ValueError(f'{where} must be "exclude", "hash", "mask" or {{ mask = "text" }}, got '
                     f"{action!r}")
