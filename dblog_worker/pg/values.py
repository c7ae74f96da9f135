r"""Canonical serialization of PostgreSQL values: same value, same bytes.

The worker reads every row two ways: from a dump chunk's ``SELECT`` (text result
format, each cell's bytes decoded as UTF-8) and from the pgoutput log (text
values).  Both connections run with :data:`PG_SESSION_SETTINGS` (pass
:func:`libpq_options` as the ``options`` connection parameter), so both give the
same PostgreSQL text output for the same value.  This module turns that text,
per column type, into a JSON fragment (the encoder of each type is
:func:`dblog_worker.pg.encoders.encoder_for`); since both paths apply the same
function to the same text, a row from a dump and the same row from the log
serialize to identical bytes.

Canonical encodings (``text`` is PostgreSQL's text output of a non-NULL value)
==============================================================================

======================  ===================================================================
PostgreSQL type         canonical JSON; examples as PostgreSQL text → JSON
======================  ===================================================================
NULL                    ``null``, for every type and inside arrays
int2, int4, int8        number, the text as is: ``-42`` → ``-42``
oid, xid, xid8, cid     number, the text as is: ``4294967295`` → ``4294967295``
float4, float8          finite: number, the text as is (shortest exact digits with
                        ``extra_float_digits=1``): ``1.5`` → ``1.5``, ``-0`` → ``-0``,
                        ``1e+20`` → ``1e+20``, ``1.2345678e-05`` → ``1.2345678e-05``;
                        special: string: ``NaN`` → ``"NaN"``, ``Infinity`` →
                        ``"Infinity"``, ``-Infinity`` → ``"-Infinity"``
numeric                 string, the text as is (keeps the scale): ``1.50`` → ``"1.50"``,
                        ``NaN`` → ``"NaN"``, ``-Infinity`` → ``"-Infinity"``
bool                    ``t`` → ``true``, ``f`` → ``false``
bytea                   string, standard base64 (``+/``, ``=`` padding) of the bytes:
                        ``\x00ff`` → ``"AP8="``, ``\x`` → ``""``
int2vector, oidvector   array of numbers: ``1 2 3`` → ``[1,2,3]``, empty → ``[]``
arrays (category 'A')   array of the element type's encodings, nested for several
                        dimensions, bounds decoration dropped: ``{1,NULL}`` →
                        ``[1,null]``, ``{{t,f},{f,t}}`` → ``[[true,false],[false,true]]``,
                        ``[0:1]={1,2}`` → ``[1,2]``, ``{"a,b","NULL",""}`` →
                        ``["a,b","NULL",""]``, ``{}`` → ``[]``
domains                 the encoding of the base type
everything else         string, the text as is: text, varchar, bpchar (padding kept:
                        ``ab   `` → ``"ab   "``), char, name, uuid, date, time, timetz,
                        timestamp, timestamptz, interval, inet, cidr, macaddr, money
                        (locale formatted), json, jsonb, xml (*not* re-parsed:
                        ``{"a": 1}`` → ``"{\"a\": 1}"``), bit, geometric, range, enum,
                        composite, reg*, and every unknown type
======================  ===================================================================

Strings are JSON-escaped like ``json.dumps(s, ensure_ascii=False)``: ``"``,
``\``, and control characters are escaped, everything else (non-ASCII, emoji) is
kept as UTF-8.  Numbers are exactly PostgreSQL's text, which is valid JSON;
int8 values beyond 2**53 and float8 digits are exact in the bytes, consumers
that parse them into IEEE doubles may lose precision.

A row is a JSON object ``{"col":value,...}`` in the table's column order, with
no whitespace; a key is a JSON array ``[value,...]`` of the key columns' values
in key order.  Both are produced by :class:`RowCodec`.

The time types are strings in ISO form in UTC (``DateStyle=ISO, MDY``,
``TimeZone=UTC``), intervals in the ``postgres`` style; these depend on the
session settings, which is why both connections must use
:data:`PG_SESSION_SETTINGS`.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping, Sequence
from json.encoder import encode_basestring
from types import MappingProxyType

from dblog_worker.masking import TableMasks
from dblog_worker.pg.encoders import Encoder, PgType, encoder_for

__all__ = [
    "PG_SESSION_SETTINGS",
    "RowCodec",
    "libpq_options",
]

PG_SESSION_SETTINGS: Mapping[str, str] = MappingProxyType(
    {
        # Values as ``SHOW`` prints them, so a connection can be checked against them.
        "DateStyle": "ISO, MDY",
        "TimeZone": "UTC",
        "IntervalStyle": "postgres",
        "extra_float_digits": "1",
        "bytea_output": "hex",
        "client_encoding": "UTF8",
    }
)
"""Session settings of both the chunk and the replication connection."""


def libpq_options() -> str:
    r"""The libpq ``options`` connection parameter that applies :data:`PG_SESSION_SETTINGS`.

    Spaces and backslashes in values are backslash-escaped as libpq requires
    (``DateStyle=ISO,\ MDY``).
    """
    parts = []
    for name, value in PG_SESSION_SETTINGS.items():
        escaped = value.replace("\\", "\\\\").replace(" ", "\\ ")
        parts.append(f"-c {name}={escaped}")
    return " ".join(parts)


# --- rows -------------------------------------------------------------------------------


class RowCodec:
    """Serializes rows of one table version: built once per (columns, types), used per row.

    ``row(values)`` gives the canonical JSON object of a row, ``key(values)`` the
    canonical JSON array of its key columns (in ``key_columns`` order) and
    ``key_from_key_values`` the same bytes from only the key columns' texts.  Values
    are PostgreSQL text output, ``None`` for NULL.
    """

    __slots__ = (
        "_key_encoders",
        "_key_positions",
        "_key_row",
        "_prefixes",
        "_row_at",
        "_row_encoders",
        "_width",
        "column_names",
        "key_columns",
        "tuple_key_row",
    )

    def __init__(
        self,
        column_names: Sequence[str],
        type_oids: Sequence[int],
        key_columns: Sequence[str],
        types: Mapping[int, PgType],
        masks: TableMasks | None = None,
    ) -> None:
        if len(column_names) != len(type_oids):
            raise ValueError(f"{len(column_names)} column names but {len(type_oids)} type OIDs")
        position: dict[str, int] = {}
        for i, name in enumerate(column_names):
            if name in position:
                raise ValueError(f"duplicate column name {name!r}")
            position[name] = i
        missing = [k for k in key_columns if k not in position]
        if missing:
            raise ValueError(f"key columns {missing!r} are not among the columns")
        if len(set(key_columns)) != len(key_columns):
            raise ValueError(f"duplicate key columns in {list(key_columns)!r}")
        self.column_names: tuple[str, ...] = tuple(column_names)
        self.key_columns: tuple[str, ...] = tuple(key_columns)
        self._width = len(column_names)
        masks = masks or TableMasks()
        encoders = tuple(encoder_for(oid, types) for oid in type_oids)
        self._prefixes = tuple(encode_basestring(name) + ":" for name in column_names)
        # the row leaves the excluded columns out, and masks the masked ones (never a key)
        self._row_at = tuple(i for i, n in enumerate(column_names) if not masks.excluded(n))
        self._row_encoders = tuple(_masked(e, masks.scalar(n))
                                   for e, n in zip(encoders, column_names, strict=True))
        self._key_positions = tuple((position[k], encoders[position[k]]) for k in key_columns)
        self._key_encoders = tuple(encoders[position[k]] for k in key_columns)
        key_at = tuple(position[k] for k in key_columns)
        self._key_row = _compile_key_row(self._row_encoders, self._prefixes, key_at,
                                         self._row_at)
        # tuple_key_row(message, offset): key_row of the pgoutput TupleData at offset of
        # message, the rest of it; None when it must be decoded the general way
        self.tuple_key_row = _compile_tuple_key_row(self._row_encoders, self._prefixes,
                                                    key_at, self._row_at)

    def row(self, values: Sequence[str | None]) -> str:
        """The canonical JSON object of a row: ``{"col":value,...}`` in column order (the
        excluded columns left out, the masked ones masked)."""
        if len(values) != self._width:
            raise ValueError(f"row has {len(values)} values, the table {self._width} columns")
        prefixes, encoders = self._prefixes, self._row_encoders
        return (
            "{"
            + ",".join(
                [
                    prefixes[i] + ("null" if (v := values[i]) is None else encoders[i](v))
                    for i in self._row_at
                ]
            )
            + "}"
        )

    def key_row(self, values: Sequence[str | None]) -> tuple[str, str]:
        """``(key(values), row(values))`` in one pass, each value encoded once: the log's
        hot path. The function is generated per table (see :func:`_compile_key_row`)."""
        return self._key_row(values)

    def key(self, values: Sequence[str | None]) -> str:
        """The canonical JSON array of the key columns' values, taken from a full row."""
        if len(values) != self._width:
            raise ValueError(f"row has {len(values)} values, the table {self._width} columns")
        return (
            "["
            + ",".join(
                ["null" if (v := values[i]) is None else e(v) for i, e in self._key_positions]
            )
            + "]"
        )

    def key_from_key_values(self, key_values: Sequence[str | None]) -> str:
        """Same bytes as :meth:`key`, from just the key columns' texts in key order."""
        if len(key_values) != len(self._key_encoders):
            raise ValueError(
                f"{len(key_values)} key values for {len(self._key_encoders)} key columns"
            )
        return (
            "["
            + ",".join(
                [
                    "null" if v is None else e(v)
                    for e, v in zip(self._key_encoders, key_values, strict=False)
                ]
            )
            + "]"
        )


def _masked(encoder: Encoder, mask: Callable[[str], str] | None) -> Encoder:
    """``encoder``, its JSON fragment masked (:mod:`dblog_worker.masking`)."""
    if mask is None:
        return encoder
    return lambda text: mask(encoder(text))


def _compile_key_row(
    encoders: Sequence[Encoder], prefixes: Sequence[str], key_positions: Sequence[int],
    row_positions: Sequence[int],
) -> Callable[[Sequence[str | None]], tuple[str, str]]:
    """A function ``values -> (key, row)`` for one table, with no loop and no dispatch.

    Generated the way ``dataclasses`` generates ``__init__``: the source holds only
    names made from column numbers; every value (encoders, the escaped column-name
    prefixes) comes in through the namespace, so no column name is ever code.
    """
    namespace: dict[str, object] = {}
    lines = [
        "def key_row(values):",
        f"    ({''.join(f'v{i}, ' for i in range(len(encoders)))}) = values",
    ]
    for i, encoder in enumerate(encoders):
        if i in key_positions or i in row_positions:
            encoded = _call(i, encoder, f"v{i}", namespace)
            lines.append(f"    x{i} = 'null' if v{i} is None else {encoded}")
    return _generated("key_row", lines, namespace, prefixes, key_positions,  # type: ignore[return-value]
                      row_positions)


def _compile_tuple_key_row(
    encoders: Sequence[Encoder], prefixes: Sequence[str], key_positions: Sequence[int],
    row_positions: Sequence[int],
) -> Callable[[bytes, int], tuple[str, str] | None]:
    """A function ``(message, offset) -> (key, row)`` for one table, reading a pgoutput
    TupleData of text and NULL values straight from the message's bytes: the same
    strings as :func:`_compile_key_row` over the values ``pgoutput`` decodes, without
    the tuple of values in between. None for a tuple that is not that (another column
    count, an unchanged TOAST value, binary data, bytes left over): the caller decodes it
    the general way, which says what is wrong."""
    namespace: dict[str, object] = {"u16": _U16, "u32": _U32}
    lines = [
        "def tuple_key_row(buf, off):",
        f"    if u16(buf, off)[0] != {len(encoders)}:",
        "        return None",
        "    off += 2",
    ]
    for i, encoder in enumerate(encoders):
        text = "buf[start:off].decode()"
        used = i in key_positions or i in row_positions  # an excluded column is skipped
        lines += [
            "    kind = buf[off]",
            "    if kind == 116:",  # 't': text
            "        start = off + 5",
            "        off = start + u32(buf, off + 1)[0]",
            f"        x{i} = {_call(i, encoder, text, namespace) if used else 'None'}",
            "    elif kind == 110:",  # 'n': NULL
            f"        x{i} = 'null'",
            "        off += 1",
            "    else:",
            "        return None",
        ]
    lines += ["    if off != len(buf):", "        return None"]
    return _generated("tuple_key_row", lines, namespace, prefixes,  # type: ignore[return-value]
                      key_positions, row_positions)


_U16 = struct.Struct(">H").unpack_from
_U32 = struct.Struct(">I").unpack_from


def _call(i: int, encoder: Encoder, text: str, namespace: dict[str, object]) -> str:
    """The expression that encodes column ``i``'s ``text``: for numbers the text is the
    JSON."""
    if encoder is str:
        return text
    namespace[f"e{i}"] = encoder
    return f"e{i}({text})"


def _generated(name: str, lines: list[str], namespace: dict[str, object],
               prefixes: Sequence[str], key_positions: Sequence[int],
               row_positions: Sequence[int]) -> object:
    """Define function ``name`` from ``lines``, which leave each column's JSON in ``x<i>``,
    returning ``(key, row)``: the row of the columns at ``row_positions``."""
    parts = []
    for n, i in enumerate(row_positions):
        namespace[f"p{i}"] = ("{" if n == 0 else ",") + prefixes[i]
        parts += [f"p{i}", f"x{i}"]
    key = ", ".join(f"x{i}" for i in key_positions)
    key_text = f"'[' + ','.join(({key},)) + ']'" if key_positions else "'[]'"
    row_text = f"''.join(({', '.join(parts)}, '}}'))" if parts else "'{}'"
    lines.append(f"    return {key_text}, {row_text}")
    exec("\n".join(lines), namespace)  # noqa: S102 - names only, see _compile_key_row
    return namespace[name]
