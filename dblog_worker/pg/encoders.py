"""PostgreSQL types and the encoder of each: a value's text output → its JSON fragment.

:func:`encoder_for` gives the encoder of a type OID from what the worker knows of
``pg_type`` (:class:`PgType`; :data:`BUILTIN_TYPES` without asking the catalog): a scalar
encoder (numbers, floats, bool, bytea, int2vector/oidvector, JSON strings), an array
encoder over its element's (the array-literal parser), a domain's base type's. The
encodings themselves, and why they are the same for the log and the chunks, are in
:mod:`dblog_worker.pg.values` (its table); :class:`~dblog_worker.pg.values.RowCodec`
applies them a row at a time, :class:`~dblog_worker.pg.column_codec.ColumnCodec` a column at
a time.
"""

from __future__ import annotations

import binascii
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from json.encoder import encode_basestring
from types import MappingProxyType

__all__ = [
    "BUILTIN_TYPES",
    "Encoder",
    "PgType",
    "encoder_for",
]

Encoder = Callable[[str], str]
"""Turns the text of a non-NULL PostgreSQL value into a JSON fragment."""


@dataclass(frozen=True, slots=True)
class PgType:
    """What the worker knows of a type from ``pg_type``."""

    oid: int
    name: str  # typname, e.g. "int4", "_int4", "my_enum"
    category: str  # typcategory, one character: 'N', 'S', 'B', 'D', 'A', 'U', 'E', ...
    element_oid: int = 0  # typelem of array types, else 0
    base_oid: int = 0  # typbasetype of domains, else 0
    delimiter: str = ","  # typdelim (box uses ';')
    namespace: str = ""  # the schema of a type of this database (builtin ones: "")
    labels: tuple[str, ...] = ()  # an enum's labels, in their order


# --- builtin types ----------------------------------------------------------------------

# (oid, name, category, array oid) of the builtin scalar types; delimiter ',' except box.
_BUILTIN_SCALARS: tuple[tuple[int, str, str, int], ...] = (
    (16, "bool", "B", 1000),
    (17, "bytea", "U", 1001),
    (18, "char", "Z", 1002),
    (19, "name", "S", 1003),
    (20, "int8", "N", 1016),
    (21, "int2", "N", 1005),
    (23, "int4", "N", 1007),
    (24, "regproc", "N", 1008),
    (25, "text", "S", 1009),
    (26, "oid", "N", 1028),
    (27, "tid", "U", 1010),
    (28, "xid", "U", 1011),
    (29, "cid", "U", 1012),
    (114, "json", "U", 199),
    (142, "xml", "U", 143),
    (600, "point", "G", 1017),
    (601, "lseg", "G", 1018),
    (602, "path", "G", 1019),
    (603, "box", "G", 1020),
    (604, "polygon", "G", 1027),
    (628, "line", "G", 629),
    (650, "cidr", "I", 651),
    (700, "float4", "N", 1021),
    (701, "float8", "N", 1022),
    (718, "circle", "G", 719),
    (774, "macaddr8", "U", 775),
    (790, "money", "N", 791),
    (829, "macaddr", "U", 1040),
    (869, "inet", "I", 1041),
    (1033, "aclitem", "U", 1034),
    (1042, "bpchar", "S", 1014),
    (1043, "varchar", "S", 1015),
    (1082, "date", "D", 1182),
    (1083, "time", "D", 1183),
    (1114, "timestamp", "D", 1115),
    (1184, "timestamptz", "D", 1185),
    (1186, "interval", "T", 1187),
    (1266, "timetz", "D", 1270),
    (1560, "bit", "V", 1561),
    (1562, "varbit", "V", 1563),
    (1700, "numeric", "N", 1231),
    (1790, "refcursor", "U", 2201),
    (2202, "regprocedure", "N", 2207),
    (2203, "regoper", "N", 2208),
    (2204, "regoperator", "N", 2209),
    (2205, "regclass", "N", 2210),
    (2206, "regtype", "N", 2211),
    (2950, "uuid", "U", 2951),
    (2970, "txid_snapshot", "U", 2949),
    (3220, "pg_lsn", "U", 3221),
    (3614, "tsvector", "U", 3643),
    (3615, "tsquery", "U", 3645),
    (3734, "regconfig", "N", 3735),
    (3769, "regdictionary", "N", 3770),
    (3802, "jsonb", "U", 3807),
    (3904, "int4range", "R", 3905),
    (3906, "numrange", "R", 3907),
    (3908, "tsrange", "R", 3909),
    (3910, "tstzrange", "R", 3911),
    (3912, "daterange", "R", 3913),
    (3926, "int8range", "R", 3927),
    (4072, "jsonpath", "U", 4073),
    (4089, "regnamespace", "N", 4090),
    (4096, "regrole", "N", 4097),
    (4191, "regcollation", "N", 4192),
    (4451, "int4multirange", "R", 6150),
    (4532, "nummultirange", "R", 6151),
    (4533, "tsmultirange", "R", 6152),
    (4534, "tstzmultirange", "R", 6153),
    (4535, "datemultirange", "R", 6155),
    (4536, "int8multirange", "R", 6157),
    (5038, "pg_snapshot", "U", 5039),
    (5069, "xid8", "U", 271),
)

_INT2VECTOR_OID = 22
_OIDVECTOR_OID = 30


def _builtin_types() -> dict[int, PgType]:
    types: dict[int, PgType] = {}
    for oid, name, category, array_oid in _BUILTIN_SCALARS:
        delimiter = ";" if name == "box" else ","
        types[oid] = PgType(oid, name, category, delimiter=delimiter)
        types[array_oid] = PgType(array_oid, "_" + name, "A", element_oid=oid, delimiter=delimiter)
    # The vectors are category 'A' in pg_type but print as space-separated numbers.
    types[_INT2VECTOR_OID] = PgType(_INT2VECTOR_OID, "int2vector", "A", element_oid=21)
    types[1006] = PgType(1006, "_int2vector", "A", element_oid=_INT2VECTOR_OID)
    types[_OIDVECTOR_OID] = PgType(_OIDVECTOR_OID, "oidvector", "A", element_oid=26)
    types[1013] = PgType(1013, "_oidvector", "A", element_oid=_OIDVECTOR_OID)
    return types


BUILTIN_TYPES: Mapping[int, PgType] = MappingProxyType(_builtin_types())
"""The builtin types this module knows, with their array types, by OID."""


# --- scalar encoders --------------------------------------------------------------------


class _StrictLookup(dict[str, str]):
    """A table lookup whose ``__getitem__`` is C-fast and raises ValueError on a miss."""

    __slots__ = ("what",)

    def __init__(self, what: str, table: Mapping[str, str]) -> None:
        super().__init__(table)
        self.what = what

    def __missing__(self, key: str) -> str:
        raise ValueError(f"not a PostgreSQL {self.what} text value: {key!r}")


_encode_string: Encoder = encode_basestring
# str() of a str returns it unchanged: the fastest identity call there is.
_encode_number: Encoder = str
_encode_bool: Encoder = _StrictLookup("bool", {"t": "true", "f": "false"}).__getitem__

_FLOAT_SPECIALS: Mapping[str, str] = {
    "NaN": '"NaN"',
    "Infinity": '"Infinity"',
    "-Infinity": '"-Infinity"',
}


def _encode_float(text: str, _specials: Mapping[str, str] = _FLOAT_SPECIALS) -> str:
    return _specials.get(text, text)


def _encode_bytea(text: str) -> str:
    if not text.startswith("\\x"):
        raise ValueError(f"bytea text is not in hex format (bytea_output=hex): {text[:20]!r}")
    try:
        data = binascii.a2b_hex(text[2:])
    except (binascii.Error, ValueError) as exc:
        raise ValueError(f"malformed bytea hex text: {text[:40]!r}") from exc
    return '"' + binascii.b2a_base64(data, newline=False).decode("ascii") + '"'


def _encode_vector(text: str) -> str:
    """int2vector / oidvector: space-separated integers."""
    return "[" + ",".join(text.split()) + "]"


_SCALAR_ENCODERS: Mapping[int, Encoder] = {
    16: _encode_bool,
    17: _encode_bytea,
    20: _encode_number,
    21: _encode_number,
    23: _encode_number,
    26: _encode_number,
    28: _encode_number,
    29: _encode_number,
    5069: _encode_number,
    700: _encode_float,
    701: _encode_float,
    1700: _encode_string,
    _INT2VECTOR_OID: _encode_vector,
    _OIDVECTOR_OID: _encode_vector,
}


# --- arrays -----------------------------------------------------------------------------

# PostgreSQL's array_isspace(): only these count as whitespace in an array literal.
_WS = " \t\n\r\v\f"
_WS_CLASS = r" \t\n\r\v\f"
# Dimension decoration of arrays whose lower bounds are not 1: "[0:1][1:2]=".
_DIMS = re.compile(
    rf"[{_WS_CLASS}]*(?:\[[{_WS_CLASS}]*[+-]?\d+[{_WS_CLASS}]*"
    rf"(?::[{_WS_CLASS}]*[+-]?\d+[{_WS_CLASS}]*)?\])+[{_WS_CLASS}]*="
)
_UNESCAPE = re.compile(r"\\(.)", re.DOTALL)

_OPEN, _CLOSE, _DELIM, _QUOTED, _UNQUOTED = 1, 2, 3, 4, 5
_tokenizers: dict[str, re.Pattern[str]] = {}


def _tokenizer(delimiter: str) -> re.Pattern[str]:
    """A regex matching one token (with the whitespace around it) of an array literal."""
    pattern = _tokenizers.get(delimiter)
    if pattern is None:
        d = re.escape(delimiter)
        plain = rf'[^{{}}"\\{d}]'  # a character of an unquoted element
        edge = rf'[^{{}}"\\{d}{_WS_CLASS}]'  # ... that is not whitespace
        pattern = re.compile(
            rf"[{_WS_CLASS}]*(?:"
            r"(\{)|(\})|"
            rf"({d})|"
            r'"((?:[^"\\]|\\.)*)"|'
            rf"((?:{edge}|\\.)(?:(?:{plain}|\\.)*(?:{edge}|\\.))?)"
            rf")[{_WS_CLASS}]*",
            re.DOTALL,
        )
        _tokenizers[delimiter] = pattern
    return pattern


def _malformed(text: str, why: str) -> ValueError:
    shown = text if len(text) <= 80 else text[:77] + "..."
    return ValueError(f"malformed array literal ({why}): {shown!r}")


def _parse_array(text: str, element: Encoder, delimiter: str) -> str:
    """The general array-literal parser: quoting, escapes, several dimensions."""
    token = _tokenizer(delimiter).match
    out: list[str] = []
    append = out.append
    depth = 0
    leaf_depth = 0  # depth at which elements sit, once known
    # What may come next: "open" (only at the start), "value" (after a delimiter),
    # "value_or_close" (after an opening brace), "delim_or_close", "end".
    expect = "open"
    pos, end = 0, len(text)
    while pos < end:
        m = token(text, pos)
        if m is None:
            raise _malformed(text, f"unexpected character at offset {pos}")
        pos = m.end()
        kind = m.lastindex
        if kind is None:  # cannot happen: every alternative is one group
            raise _malformed(text, f"unexpected character at offset {pos}")
        if kind == _OPEN:
            if expect not in ("open", "value", "value_or_close"):
                raise _malformed(text, "unexpected '{'")
            depth += 1
            if leaf_depth and depth > leaf_depth:
                raise _malformed(text, "elements and sub-arrays mixed")
            append("[")
            expect = "value_or_close"
        elif kind == _CLOSE:
            if expect not in ("value_or_close", "delim_or_close"):
                raise _malformed(text, "unexpected '}'")
            if expect == "value_or_close" and depth != 1:
                raise _malformed(text, "empty sub-array")
            depth -= 1
            append("]")
            expect = "delim_or_close" if depth else "end"
        elif kind == _DELIM:
            if expect != "delim_or_close":
                raise _malformed(text, "unexpected delimiter")
            append(",")
            expect = "value"
        else:
            if expect not in ("value", "value_or_close"):
                raise _malformed(text, "unexpected element")
            if leaf_depth == 0:
                leaf_depth = depth
            elif depth != leaf_depth:
                raise _malformed(text, "elements and sub-arrays mixed")
            value = m.group(kind)
            if kind == _UNQUOTED and len(value) == 4 and value.upper() == "NULL":
                append("null")
            else:
                if "\\" in value:
                    value = _UNESCAPE.sub(r"\1", value)
                append(element(value))
            expect = "delim_or_close"
    if expect != "end":
        raise _malformed(text, "unterminated")
    return "".join(out)


def _array_encoder(element: Encoder, delimiter: str) -> Encoder:
    def encode_array(text: str) -> str:
        if text[:1] != "{":
            m = _DIMS.match(text)
            text = text[m.end() :] if m is not None else text
            text = text.lstrip(_WS)
        # Fast path: one dimension, no quoting or escaping (int, float, bool, ... arrays).
        if (
            '"' not in text
            and "\\" not in text
            and text[:1] == "{"
            and text[-1:] == "}"
            and text.count("{") == 1
            and text.count("}") == 1
        ):
            inner = text[1:-1]
            if not inner.strip(_WS):
                return "[]"
            parts = []
            for item in inner.split(delimiter):
                item = item.strip(_WS)
                if not item:
                    raise _malformed(text, "empty unquoted element")
                if len(item) == 4 and item.upper() == "NULL":
                    parts.append("null")
                else:
                    parts.append(element(item))
            return "[" + ",".join(parts) + "]"
        return _parse_array(text, element, delimiter)

    return encode_array


# --- type resolution --------------------------------------------------------------------

_MAX_NESTING = 32  # domain chains and array elements deeper than this are garbage


def _lookup(oid: int, types: Mapping[int, PgType]) -> PgType | None:
    t = types.get(oid)
    return t if t is not None else BUILTIN_TYPES.get(oid)


def _resolve_domain(oid: int, types: Mapping[int, PgType]) -> PgType | None:
    t = _lookup(oid, types)
    for _ in range(_MAX_NESTING):
        if t is None or not t.base_oid:
            return t
        t = _lookup(t.base_oid, types)
    return None


def encoder_for(type_oid: int, types: Mapping[int, PgType]) -> Encoder:
    """The encoder of values of type ``type_oid``.

    ``types`` is what the worker knows of ``pg_type`` (at least :data:`BUILTIN_TYPES`,
    which is also consulted on its own).  Domains resolve to their base type, arrays to
    an array encoder over their element's encoder; an unknown OID gets the JSON-string
    encoder.  Never raises.
    """
    return _encoder_for(type_oid, types, 0)


def _encoder_for(type_oid: int, types: Mapping[int, PgType], depth: int) -> Encoder:
    if depth > _MAX_NESTING:
        return _encode_string
    t = _resolve_domain(type_oid, types)
    if t is None:
        return _encode_string
    scalar = _SCALAR_ENCODERS.get(t.oid)
    if scalar is not None:
        return scalar
    if t.category == "A" and t.element_oid:
        element = _encoder_for(t.element_oid, types, depth + 1)
        # array_out() uses the element type's delimiter (a domain copies its base's).
        element_type = _lookup(t.element_oid, types)
        delimiter = (element_type or t).delimiter
        return _array_encoder(element, delimiter)
    return _encode_string
