"""Canonical JSON of PostgreSQL text values, a whole column at a time (pyarrow compute).

:class:`ColumnCodec` is :class:`dblog_worker.pg.values.RowCodec` for a chunk: the dump path
reads up to 100k rows as PostgreSQL text output, one ``pa.string()`` array per column,
and gets every row's canonical key and row JSON at once.  Its output MUST stay
byte-identical to ``RowCodec.key``/``RowCodec.row`` for every input (a dump row and the
same row from the log, which is encoded by ``RowCodec``, must serialize to the same
bytes); ``tests/unit/pg/test_columns.py`` checks this with hypothesis.  Any change to the
encodings in ``encoders.py`` must be mirrored here, or the type must fall back.

Which encoding a column gets is decided by ``encoders.encoder_for`` (domains resolved
there), by identity of the encoder it returns:

* number (int2/int4/int8/oid/xid/cid/xid8): the text as is;
* float4/float8: the text, but ``NaN``/``Infinity``/``-Infinity`` quoted;
* bool: ``t``/``f`` → ``true``/``false`` (anything else: the scalar encoder, which raises);
* plain JSON string (``json.encoder.encode_basestring``: numeric, text, time types,
  json, enums, unknown OIDs, ...): ``\\``, ``"`` and each control character
  U+0000..U+001F present in the column escaped by one ``replace_substring`` pass each
  (presence tested on the column's bytes), then quoted; a column with more than
  ``_MAX_CONTROL_PASSES`` distinct control characters is encoded by the scalar encoder;
* anything else (bytea, arrays, int2vector/oidvector): the scalar encoder per value.

Rows and keys are assembled from per-column pieces: each column's fragment gets its
constant prefix and suffix (``{"col":``, ``"``, ``}``, ...) with ``binary_replace_slice``,
NULLs become ``prefix + 'null' + suffix``, and the pieces are joined with
``binary_join_element_wise`` (its scalar arguments are much slower than these slices).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence
from json.encoder import encode_basestring
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from dblog_worker.masking import TableMasks
from dblog_worker.pg.encoders import BUILTIN_TYPES, Encoder, PgType, encoder_for
from dblog_worker.pg.values import RowCodec

__all__ = ["ColumnCodec"]

# The scalar encoders encoders.py hands out; a column is vectorized iff its encoder is one.
_STRING: Encoder = encoder_for(25, BUILTIN_TYPES)  # text
_NUMBER: Encoder = encoder_for(20, BUILTIN_TYPES)  # int8
_FLOAT: Encoder = encoder_for(701, BUILTIN_TYPES)  # float8
_BOOL: Encoder = encoder_for(16, BUILTIN_TYPES)  # bool

_FLOAT_SPECIALS = pa.array(["NaN", "Infinity", "-Infinity"], pa.string())
# U+0000..U+001F (their UTF-8 bytes are the bytes below 0x20, found in no other
# character's UTF-8) and their escapes, as encode_basestring writes them.
_CONTROLS = tuple((bytes([c]), chr(c), encode_basestring(chr(c))[1:-1]) for c in range(0x20))
# A column with more distinct control characters is encoded by the scalar encoder: one
# replace_substring pass costs about a sixth of a scalar encode_basestring per value.
_MAX_CONTROL_PASSES = 4
_END = sys.maxsize  # a slice start past every string: binary_replace_slice appends

# A column's fragments before framing: (array with nulls kept, whether to quote it).
_Core = tuple[Any, bool]


def _value_bytes(column: Any) -> Any:
    """The buffer of a string array's values' UTF-8 bytes, all concatenated (zero-copy)."""
    _, offsets, data = column.buffers()
    if offsets is None or data is None:
        return pa.py_buffer(b"")
    bounds = memoryview(offsets).cast("i")
    start, end = bounds[column.offset], bounds[column.offset + len(column)]
    return data.slice(start, end - start)


def _scalar(encoder: Encoder, column: Any) -> _Core:
    encoded = [None if v is None else encoder(v) for v in column.to_pylist()]
    return pa.array(encoded, pa.string()), False


def _number(encoder: Encoder, column: Any) -> _Core:
    return column, False


def _float(encoder: Encoder, column: Any) -> _Core:
    special = pc.is_in(column, value_set=_FLOAT_SPECIALS)
    if pc.any(special).as_py():
        column = pc.if_else(special, _frame(column, '"', '"'), column)
    return column, False


def _bool(encoder: Encoder, column: Any) -> _Core:
    true = pc.equal(column, "t")
    if not pc.all(pc.or_(true, pc.equal(column, "f")), min_count=0).as_py():
        return _scalar(encoder, column)  # raises the scalar encoder's ValueError
    return pc.if_else(true, "true", "false"), False


def _string(encoder: Encoder, column: Any) -> _Core:
    data = _value_bytes(column)
    if not data.size:
        return column, True
    raw = data.to_pybytes()
    controls: list[tuple[bytes, str, str]] = []
    # The minimum byte, over a uint8 view: far faster than any per-value or regex test.
    if pc.min(pa.Array.from_buffers(pa.uint8(), data.size, [None, data])).as_py() < 0x20:
        controls = [c for c in _CONTROLS if c[0] in raw]
        if len(controls) > _MAX_CONTROL_PASSES:
            return _scalar(encoder, column)
    if b"\\" in raw:  # first: the other escapes add backslashes
        column = pc.replace_substring(column, "\\", "\\\\")
    if b'"' in raw:
        column = pc.replace_substring(column, '"', '\\"')
    for _, char, escape in controls:
        column = pc.replace_substring(column, char, escape)
    return column, True


_VECTORIZED: tuple[tuple[Encoder, Callable[[Encoder, Any], _Core]], ...] = (
    (_STRING, _string),
    (_NUMBER, _number),
    (_FLOAT, _float),
    (_BOOL, _bool),
)


def _method(encoder: Encoder) -> Callable[[Encoder, Any], _Core]:
    """How to encode a column whose encoders.py encoder is ``encoder``."""
    return next((f for e, f in _VECTORIZED if e is encoder), _scalar)


def _frame(array: Any, prefix: str, suffix: str) -> Any:
    if prefix:
        array = pc.binary_replace_slice(array, start=0, stop=0, replacement=prefix)
    if suffix:
        array = pc.binary_replace_slice(array, start=_END, stop=_END, replacement=suffix)
    return array


def _piece(core: _Core, prefix: str, suffix: str) -> Any:
    """``prefix + fragment + suffix`` per row, ``prefix + 'null' + suffix`` for NULL."""
    array, quoted = core
    quote = '"' if quoted else ""
    framed = _frame(array, prefix + quote, quote + suffix)
    return pc.fill_null(framed, prefix + "null" + suffix)


def _join(cores: Sequence[_Core], names: Sequence[str], opening: str, closing: str) -> Any:
    """``opening + piece,piece,... + closing``; ``names`` are the JSON keys or empty."""
    last = len(cores) - 1
    pieces = [
        _piece(core, (opening if i == 0 else "") + name, closing if i == last else "")
        for i, (core, name) in enumerate(zip(cores, names, strict=True))
    ]
    return pieces[0] if len(pieces) == 1 else pc.binary_join_element_wise(*pieces, ",")


class ColumnCodec:
    """RowCodec's encodings, column-wise.

    Built once per (columns, types) like :class:`~dblog_worker.pg.values.RowCodec`, with
    the same arguments and the same validation; :meth:`encode` gives, for a chunk, the
    strings ``RowCodec.key`` and ``RowCodec.row`` give for each of its rows.
    """

    __slots__ = (
        "_encoders",
        "_key_positions",
        "_masks",
        "_methods",
        "_prefixes",
        "_row_at",
        "column_names",
        "key_columns",
    )

    def __init__(
        self,
        column_names: Sequence[str],
        type_oids: Sequence[int],
        key_columns: Sequence[str],
        types: Mapping[int, PgType],
        masks: TableMasks | None = None,
    ) -> None:
        masks = masks or TableMasks()
        RowCodec(column_names, type_oids, key_columns, types, masks)  # the same validation
        self.column_names: tuple[str, ...] = tuple(column_names)
        self.key_columns: tuple[str, ...] = tuple(key_columns)
        self._encoders = tuple(encoder_for(oid, types) for oid in type_oids)
        self._methods = tuple(_method(e) for e in self._encoders)
        self._prefixes = tuple(encode_basestring(name) + ":" for name in column_names)
        self._key_positions = tuple(self.column_names.index(k) for k in key_columns)
        # RowCodec's masks, a column at a time: excluded columns are not encoded at all
        self._row_at = tuple(i for i, n in enumerate(column_names) if not masks.excluded(n))
        self._masks = tuple(masks.vector(n) for n in column_names)

    def encode(self, columns: Sequence[Any]) -> tuple[Any, Any]:
        """(keys, rows): pa.string() arrays, one entry per row; ``columns`` are pa.string()
        arrays of PostgreSQL text output (null for NULL), one per column, in column order.

        Raises ValueError where ``RowCodec`` would (malformed bool, bytea, array text),
        and for a table without columns, whose row count the arguments cannot tell;
        ``pyarrow.ArrowCapacityError`` if the chunk's keys or rows exceed 2 GiB of JSON
        (a pa.string() array's limit): split such a chunk.
        """
        if len(columns) != len(self._encoders):
            raise ValueError(f"{len(columns)} columns for a table of {len(self._encoders)}")
        if not columns:
            raise ValueError("a table without columns: the number of rows is unknown")
        arrays = [c.combine_chunks() if isinstance(c, pa.ChunkedArray) else c for c in columns]
        length = len(arrays[0])
        for name, array in zip(self.column_names, arrays, strict=True):
            if not isinstance(array, pa.Array) or array.type != pa.string():
                raise TypeError(f"column {name!r} is not a pa.string() array")
            if len(array) != length:
                raise ValueError(f"column {name!r} has {len(array)} values, not {length}")
        if length == 0:
            return pa.array([], pa.string()), pa.array([], pa.string())
        cores: dict[int, _Core] = {}
        for i in sorted({*self._row_at, *self._key_positions}):
            core = self._methods[i](self._encoders[i], arrays[i])
            mask = self._masks[i]
            cores[i] = core if mask is None else (mask(*core), False)
        rows = _join([cores[i] for i in self._row_at], [self._prefixes[i] for i in self._row_at],
                     "{", "}") if self._row_at else pa.repeat(pa.scalar("{}", pa.string()), length)
        if not self._key_positions:
            return pa.repeat(pa.scalar("[]", pa.string()), length), rows
        key_cores = [cores[i] for i in self._key_positions]
        keys = _join(key_cores, [""] * len(key_cores), "[", "]")
        return keys, rows


def text_columns(rows: Sequence[Sequence[str | None]], width: int) -> list[Any]:
    """Rows of PostgreSQL texts to one pa.string() array per column."""
    if not rows:
        return [pa.array([], pa.string()) for _ in range(width)]
    return [pa.array(column, pa.string()) for column in zip(*rows, strict=True)]
