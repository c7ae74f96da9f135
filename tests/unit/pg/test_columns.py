"""ColumnCodec (dblog_worker.pg.column_codec): byte-identical to values.RowCodec, a
column at a time."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dblog_worker.pg import column_codec as columns
from dblog_worker.pg.column_codec import ColumnCodec
from dblog_worker.pg.encoders import BUILTIN_TYPES, PgType
from dblog_worker.pg.values import RowCodec

# OIDs of builtin types used below.
BOOL, BYTEA, CHAR, NAME, INT8, INT2, INT2VECTOR, INT4, TEXT, OID = (
    16,
    17,
    18,
    19,
    20,
    21,
    22,
    23,
    25,
    26,
)
XID, CID, OIDVECTOR, JSON, XML, INET, MONEY = 28, 29, 30, 114, 142, 869, 790
FLOAT4, FLOAT8, BPCHAR, VARCHAR, NUMERIC, UUID, JSONB, XID8 = (
    700,
    701,
    1042,
    1043,
    1700,
    2950,
    3802,
    5069,
)
DATE, TIME, TIMESTAMP, TIMESTAMPTZ, INTERVAL, TIMETZ = 1082, 1083, 1114, 1184, 1186, 1266
INT4_ARR, TEXT_ARR, FLOAT8_ARR, BOOL_ARR = 1007, 1009, 1022, 1000
D_INT, D_TEXT, D_FLOAT, D_BOOL, MOOD, D_INT_ARR = 90001, 90002, 90003, 90004, 90005, 90006
UNKNOWN = 99999

CATALOG: Mapping[int, PgType] = {
    **BUILTIN_TYPES,
    D_INT: PgType(D_INT, "d_int", "N", base_oid=INT8),
    D_TEXT: PgType(D_TEXT, "d_text", "S", base_oid=TEXT),
    D_FLOAT: PgType(D_FLOAT, "d_float", "N", base_oid=FLOAT8),
    D_BOOL: PgType(D_BOOL, "d_bool", "B", base_oid=BOOL),
    MOOD: PgType(MOOD, "mood", "E"),
    D_INT_ARR: PgType(D_INT_ARR, "d_int_arr", "A", base_oid=INT4_ARR),
}

Rows = Sequence[Sequence[str | None]]


def expected(
    names: Sequence[str], oids: Sequence[int], keys: Sequence[str], rows: Rows
) -> tuple[list[str], list[str]]:
    codec = RowCodec(names, oids, keys, CATALOG)
    return [codec.key(r) for r in rows], [codec.row(r) for r in rows]


def to_columns(width: int, rows: Rows) -> list[Any]:
    return [pa.array([r[i] for r in rows], pa.string()) for i in range(width)]


def encode(
    names: Sequence[str], oids: Sequence[int], keys: Sequence[str], rows: Rows
) -> tuple[list[str], list[str]]:
    out_keys, out_rows = ColumnCodec(names, oids, keys, CATALOG).encode(
        to_columns(len(names), rows)
    )
    assert out_keys.type == pa.string()
    assert out_rows.type == pa.string()
    assert len(out_keys) == len(out_rows) == len(rows)
    return out_keys.to_pylist(), out_rows.to_pylist()


def assert_same(names: Sequence[str], oids: Sequence[int], keys: Sequence[str], rows: Rows) -> None:
    """ColumnCodec gives exactly RowCodec's strings, or both raise ValueError."""
    try:
        want = expected(names, oids, keys, rows)
    except ValueError:
        with pytest.raises(ValueError):
            encode(names, oids, keys, rows)
        return
    assert encode(names, oids, keys, rows) == want


# --- realistic PostgreSQL text values per type ------------------------------------------

# Characters that JSON escaping must get right, mixed into arbitrary (UTF-8) text.
_SPECIAL_CHARS = [chr(c) for c in range(0x20)] + [
    '"',
    "\\",
    "\x7f",
    "\u2028",
    "\u2029",
    "\ufeff",
    "é",
    "😀",
    " ",
    "/",
    "{",
    ",",
]
_chars = st.one_of(st.sampled_from(_SPECIAL_CHARS), st.characters(codec="utf-8"))
_text = st.text(_chars, max_size=12)
# Text with a few control characters only: the replace path rather than the scalar one.
_text_few_controls = st.text(st.sampled_from(['"', "\\", "\n", "\t", "a", "é", "\x00", "😀"]))


def _ints(bits: int) -> st.SearchStrategy[str]:
    return st.integers(-(2 ** (bits - 1)), 2 ** (bits - 1) - 1).map(str)


def _numeric(value: tuple[int, int]) -> str:
    digits, scale = value
    return f"{Decimal(digits).scaleb(-scale):f}"


def _float_text(x: float) -> str:
    """PostgreSQL's float output (extra_float_digits=1): shortest exact digits."""
    if x != x:
        return "NaN"
    if x in (float("inf"), float("-inf")):
        return "Infinity" if x > 0 else "-Infinity"
    text = repr(x)
    return text[:-2] if text.endswith(".0") else text


def _timestamptz(t: dt.datetime) -> str:
    return t.isoformat(sep=" ").replace("+00:00", "+00")


def _array_element(element: str | None) -> str:
    """One text[] element quoted as array_out does."""
    if element is None:
        return "NULL"
    if element == "" or element.upper() == "NULL" or any(c in '{}",\\ \t\n\r\v\f' for c in element):
        return '"' + element.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return element


def _array(items: list[str | None]) -> str:
    return "{" + ",".join(_array_element(i) for i in items) + "}"


def _json_text(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | _text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_text, inner, max_size=3),
    max_leaves=6,
)
_datetimes = st.datetimes(
    min_value=dt.datetime(1, 1, 1), max_value=dt.datetime(9999, 12, 31), timezones=st.just(dt.UTC)
)

VALUES: dict[int, st.SearchStrategy[str]] = {
    INT2: _ints(16),
    INT4: _ints(32),
    INT8: _ints(64),
    OID: st.integers(0, 2**32 - 1).map(str),
    XID: st.integers(0, 2**32 - 1).map(str),
    CID: st.integers(0, 2**32 - 1).map(str),
    XID8: st.integers(0, 2**64 - 1).map(str),
    D_INT: _ints(64),
    NUMERIC: st.one_of(
        st.tuples(st.integers(-(10**30), 10**30), st.integers(0, 12)).map(_numeric),
        st.sampled_from(["NaN", "Infinity", "-Infinity", "0", "0.00", "-0.001"]),
    ),
    FLOAT8: st.one_of(
        st.floats().map(_float_text),
        st.sampled_from(["-0", "1e+20", "1.2345678e-05", "5e-324", "nan", "inf", "NaN "]),
    ),
    FLOAT4: st.floats(width=32).map(_float_text),
    D_FLOAT: st.sampled_from(["NaN", "Infinity", "-Infinity", "1.5", "-0"]),
    BOOL: st.sampled_from(["t", "f"]),
    D_BOOL: st.sampled_from(["t", "f"]),
    TEXT: _text,
    VARCHAR: _text_few_controls,
    BPCHAR: _text.map(lambda s: s + "   "),
    CHAR: st.characters(codec="utf-8"),
    NAME: _text,
    D_TEXT: _text,
    MOOD: st.sampled_from(["happy", "sad", "so-so"]),
    UNKNOWN: _text,
    UUID: st.uuids().map(str),
    DATE: st.dates().map(str) | st.sampled_from(["infinity", "0044-03-15 BC"]),
    TIME: st.times().map(str),
    TIMETZ: st.times().map(lambda t: f"{t}+00"),
    TIMESTAMP: _datetimes.map(lambda t: _timestamptz(t)[:-3]),
    TIMESTAMPTZ: _datetimes.map(_timestamptz) | st.sampled_from(["infinity", "-infinity"]),
    INTERVAL: st.sampled_from(["00:00:00", "1 day 02:03:04.5", "-1 years -2 mons", "3 mons"]),
    INET: st.ip_addresses().map(str),
    MONEY: st.sampled_from(["$0.00", "-$1,234.56", "$92,233,720,368,547,758.07"]),
    JSON: _json_values.map(_json_text),
    JSONB: _json_values.map(_json_text),
    XML: _text.map(lambda s: "<a>" + s + "</a>"),
    BYTEA: st.binary(max_size=20).map(lambda b: "\\x" + b.hex()),
    INT4_ARR: st.lists(st.none() | st.integers(-(2**31), 2**31 - 1)).map(
        lambda xs: "{" + ",".join("NULL" if x is None else str(x) for x in xs) + "}"
    ),
    D_INT_ARR: st.lists(st.integers(-(2**31), 2**31 - 1), max_size=4).map(
        lambda xs: "{" + ",".join(map(str, xs)) + "}"
    ),
    TEXT_ARR: st.lists(st.none() | _text | st.just("NULL"), max_size=5).map(_array),
    INT2VECTOR: st.lists(st.integers(0, 2**15 - 1), max_size=4).map(
        lambda xs: " ".join(map(str, xs))
    ),
}

# Column names that need JSON escaping too.
_names = st.text(st.sampled_from(["a", "b", "é", '"', "\\", "\n", "\x00", " ", "😀"]), min_size=1)


def _column(oid: int, rows: int) -> st.SearchStrategy[list[str | None]]:
    value = VALUES[oid]
    # Sometimes all NULL, sometimes none; mostly some.
    return st.one_of(
        st.lists(st.none() | value, min_size=rows, max_size=rows),
        st.lists(value, min_size=rows, max_size=rows),
        st.just([None] * rows),
    )


@st.composite
def tables(draw: st.DrawFn) -> tuple[list[str], list[int], list[str], list[list[str | None]]]:
    width = draw(st.integers(1, 6))
    oids = draw(st.lists(st.sampled_from(sorted(VALUES)), min_size=width, max_size=width))
    names = draw(st.lists(_names, min_size=width, max_size=width, unique=True))
    keys = draw(st.permutations(names))[: draw(st.integers(0, width))]
    height = draw(st.integers(0, 12))
    cols = [draw(_column(oid, height)) for oid in oids]
    rows = [[col[i] for col in cols] for i in range(height)]
    return names, oids, keys, rows


# --- the property ----------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(tables())
def test_random_tables_match_row_codec(
    table: tuple[list[str], list[int], list[str], list[list[str | None]]],
) -> None:
    names, oids, keys, rows = table
    assert encode(names, oids, keys, rows) == expected(names, oids, keys, rows)
    # the log's one-pass form gives the same bytes as key() and row()
    codec = RowCodec(names, oids, keys, CATALOG)
    for row in rows:
        try:
            pair = (codec.key(row), codec.row(row))
        except ValueError:
            with pytest.raises(ValueError):
                codec.key_row(row)
            continue
        assert codec.key_row(row) == pair


@pytest.mark.parametrize("oid", sorted(VALUES))
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_each_type_matches_row_codec(oid: int, data: st.DataObject) -> None:
    height = data.draw(st.integers(0, 20))
    values = data.draw(_column(oid, height))
    ids = [str(i) for i in range(height)]
    # The column alone, then between two others, keyed on itself and the id.
    assert encode(["c"], [oid], ["c"], [[v] for v in values]) == expected(
        ["c"], [oid], ["c"], [[v] for v in values]
    )
    rows = [[i, v, v] for i, v in zip(ids, values, strict=True)]
    names, oids = ["id", "c", "d"], [INT8, oid, TEXT]
    assert encode(names, oids, ["c", "id"], rows) == expected(names, oids, ["c", "id"], rows)


# --- table-driven edge cases -----------------------------------------------------------

EDGE_VALUES: list[tuple[int, list[str | None]]] = [
    (INT8, ["-9223372036854775808", "9223372036854775807", "0", None]),
    (INT2, ["-32768", "32767"]),
    (OID, ["4294967295"]),
    (XID8, ["18446744073709551615"]),
    (NUMERIC, ["1.50", "-0.000100", "12345678901234567890.123", "NaN", "-Infinity", None]),
    (NUMERIC, ['1"2', "3\\4", "5\n"]),  # never from PostgreSQL, but still RowCodec's bytes
    (FLOAT8, ["NaN", "Infinity", "-Infinity", "-0", "1e+20", "1.2345678e-05", None]),
    (FLOAT8, ["1.5", "nan", "infinity", " NaN", "NaN\n"]),  # only the exact specials quoted
    (FLOAT4, ["NaN", "3.4e+38", "1e-45"]),
    (BOOL, ["t", "f", None, "t"]),
    (TEXT, ["", "plain", 'say "hi"', "back\\slash", '\\"', "\\\\n", "\\u0041"]),
    (TEXT, [chr(c) for c in range(0x20)]),  # every control char: more than 4 distinct
    (TEXT, ["a\nb", "c\n", "\n", "none", None]),  # one control char: the replace path
    (TEXT, ["\x00\x01\x1f\n", "\\\x00"]),  # exactly 4 distinct: the replace path
    (TEXT, ["\x00\x01\x1f\n\t"]),  # 5 distinct: the scalar path
    (TEXT, ["\x7f", "\u2028", "\u2029", "\ufeff", "😀", "héllo wörld", "\x80\u0800"]),
    (TEXT, ["", "", ""]),
    (BPCHAR, ["ab   ", "    "]),
    (CHAR, ['"', "\\", "\x01"]),
    (JSON, ['{"a" : 1,  "b":[true]}', '{"x": "a\\nb", "q": "\\""}', "null"]),
    (JSONB, ['{"é": "x\\ny", "t": "\\t\\u0000"}']),
    (XML, ["<a b='1'>\n  x\r\n</a>"]),
    (TIMESTAMPTZ, ["2024-01-02 03:04:05.123456+00", "infinity", "0044-03-15 12:00:00+00 BC"]),
    (TIMESTAMP, ["2024-01-02 03:04:05"]),
    (DATE, ["2024-02-29", "0769-02-04 BC"]),
    (TIME, ["12:34:56.789"]),
    (TIMETZ, ["12:00:00+00"]),
    (INTERVAL, ["1 day 02:03:00", "-00:00:01"]),
    (UUID, ["a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"]),
    (INET, ["192.168.0.1/24", "::1"]),
    (MONEY, ["$12.50", "-$1,000.00"]),
    (MOOD, ["happy", 'so "so"']),
    (UNKNOWN, ["whatever \\ it is"]),
    (D_INT, ["42", None]),
    (D_TEXT, ['a "b"']),
    (D_FLOAT, ["NaN", "2"]),
    (D_BOOL, ["f"]),
    (BYTEA, ["\\x", "\\x00ff", "\\xdeadbeef", None]),
    (INT4_ARR, ["{1,NULL,-3}", "{}", "[0:1]={1,2}"]),
    (TEXT_ARR, ['{"a,b","NULL","",NULL,"q\\"\\\\"}', "{{a,b},{c,d}}"]),
    (FLOAT8_ARR, ["{NaN,1.5,-Infinity}"]),
    (BOOL_ARR, ["{t,f,NULL}"]),
    (D_INT_ARR, ["{1,2}"]),
    (INT2VECTOR, ["1 2 3", ""]),
    (OIDVECTOR, ["23 25"]),
]


@pytest.mark.parametrize(("oid", "values"), EDGE_VALUES)
def test_edge_values(oid: int, values: list[str | None]) -> None:
    rows = [[str(i), v, v] for i, v in enumerate(values)]
    assert encode(["c"], [oid], ["c"], [[v] for v in values]) == expected(
        ["c"], [oid], ["c"], [[v] for v in values]
    )
    assert encode(["id", "c", "d"], [INT4, oid, oid], ["d", "id"], rows) == expected(
        ["id", "c", "d"], [INT4, oid, oid], ["d", "id"], rows
    )


@pytest.mark.parametrize("code", [*range(0x20), 0x20, 0x7F, 0x80, 0x2028])
def test_each_control_character_alone(code: int) -> None:
    """The only special character of its column: each must be escaped (or not) exactly."""
    values: list[str | None] = [f"a{chr(code)}b", chr(code), "plain", None]
    rows = [[v] for v in values]
    assert encode(["t"], [TEXT], ["t"], rows) == expected(["t"], [TEXT], ["t"], rows)


@pytest.mark.parametrize("oid", sorted(BUILTIN_TYPES))
def test_every_builtin_type_matches_or_raises_like_row_codec(oid: int) -> None:
    """Whatever the type, generic texts give RowCodec's bytes, or ValueError like it."""
    for value in ["1", "-2.5", "t", "NaN", "abc", "", '"q"\n', "{1,2}", "\\x00ff", "1 2", None]:
        assert_same(["v"], [oid], ["v"], [[value], [None]])
        assert_same(["k", "v"], [INT8, oid], ["v", "k"], [["1", value], ["2", value]])


def test_malformed_values_raise_value_error_like_row_codec() -> None:
    for oid, value in [(BOOL, "true"), (BOOL, "T"), (BYTEA, "abc"), (INT4_ARR, "{1,2")]:
        with pytest.raises(ValueError):
            expected(["v"], [oid], [], [["t"], [value]])
        with pytest.raises(ValueError):
            encode(["v"], [oid], [], [["t" if oid == BOOL else "{}"], [value]])


MIXED_NAMES = ["id", "n", "label", "amount", "created_at", "ok", "ratio", "payload", "tags"]
MIXED_OIDS = [INT8, INT4, TEXT, NUMERIC, TIMESTAMPTZ, BOOL, FLOAT8, BYTEA, TEXT_ARR]


def _mixed_row(i: int) -> list[str | None]:
    return [
        str(i * 7919 - 10**12),
        None if i % 5 == 0 else str(i % 1000),
        f'label "{i}"\\' if i % 3 else f"line\n{i}",
        f"{i}.{i % 100:02d}",
        f"2024-01-{1 + i % 28:02d} 03:04:05.{i % 10**6:06d}+00",
        None if i % 7 == 0 else "tf"[i % 2],
        ["NaN", "1.5", "-Infinity", "1e+20"][i % 4],
        "\\x" + i.to_bytes(4, "big").hex(),
        '{a,"b c",NULL}',
    ]


def test_composite_key_in_other_order_than_columns() -> None:
    rows = [_mixed_row(i) for i in range(50)]
    keys = ["created_at", "label", "id"]
    assert encode(MIXED_NAMES, MIXED_OIDS, keys, rows) == expected(
        MIXED_NAMES, MIXED_OIDS, keys, rows
    )


def test_key_columns_may_be_empty() -> None:
    rows = [_mixed_row(i) for i in range(3)]
    out_keys, _ = encode(MIXED_NAMES, MIXED_OIDS, [], rows)
    assert out_keys == ["[]"] * 3 == expected(MIXED_NAMES, MIXED_OIDS, [], rows)[0]


def test_all_null_rows() -> None:
    rows: list[list[str | None]] = [[None] * len(MIXED_NAMES) for _ in range(4)]
    keys = ["ok", "id"]
    out = encode(MIXED_NAMES, MIXED_OIDS, keys, rows)
    assert out == expected(MIXED_NAMES, MIXED_OIDS, keys, rows)
    assert out[0] == ["[null,null]"] * 4


def test_zero_rows() -> None:
    assert encode(MIXED_NAMES, MIXED_OIDS, ["id"], []) == ([], [])
    assert encode(MIXED_NAMES, MIXED_OIDS, [], []) == ([], [])


def test_one_row() -> None:
    rows = [_mixed_row(1)]
    assert encode(MIXED_NAMES, MIXED_OIDS, ["id"], rows) == expected(
        MIXED_NAMES, MIXED_OIDS, ["id"], rows
    )
    assert encode(["x"], [INT4], ["x"], [["5"]]) == (["[5]"], ['{"x":5}'])


def test_column_names_are_escaped_like_row_codec() -> None:
    names = ['a"b', "c\\d", "é\n", "\x00", "😀"]
    rows: list[list[str | None]] = [["1", "x", "t", "2", "y"], [None] * 5]
    oids = [INT8, TEXT, BOOL, FLOAT8, UUID]
    assert encode(names, oids, ["😀", 'a"b'], rows) == expected(names, oids, ["😀", 'a"b'], rows)


def test_many_rows() -> None:
    """A 100k-row chunk (a performance smoke test, not timed)."""
    rows = [_mixed_row(i) for i in range(100_000)]
    keys = ["id", "label"]
    assert encode(MIXED_NAMES, MIXED_OIDS, keys, rows) == expected(
        MIXED_NAMES, MIXED_OIDS, keys, rows
    )


# --- input arrays ----------------------------------------------------------------------


def test_sliced_and_chunked_arrays() -> None:
    values = ['a"', "b\n", None, "c\\", "d", "e\x01", "f"]
    ids = [str(i) for i in range(len(values))]
    names, oids = ["id", "t"], [INT8, TEXT]
    codec = ColumnCodec(names, oids, ["t"], CATALOG)
    sliced = [pa.array(ids, pa.string())[2:5], pa.array(values, pa.string())[2:5]]
    want = expected(names, oids, ["t"], list(zip(ids[2:5], values[2:5], strict=True)))
    keys, rows = codec.encode(sliced)
    assert (keys.to_pylist(), rows.to_pylist()) == want
    chunked = [pa.chunked_array([a[:1], a[1:]]) for a in sliced]
    keys, rows = codec.encode(chunked)
    assert (keys.to_pylist(), rows.to_pylist()) == want


def test_vectorized_types_do_not_fall_back(monkeypatch: pytest.MonkeyPatch) -> None:
    """The types the dump path is full of never take the scalar per-value loop."""

    def no_fallback(encoder: Any, column: Any) -> Any:
        raise AssertionError("scalar fallback used")

    monkeypatch.setattr(columns, "_scalar", no_fallback)
    oids = [INT8, INT4, NUMERIC, FLOAT8, BOOL, TEXT, TIMESTAMPTZ, UUID, JSONB, D_INT, MOOD, 1]
    names = [f"c{i}" for i in range(len(oids))]
    full: list[str | None] = ["1", "2", "3.0", "NaN", "t", 'x"\\\n', "2024-01-01 00:00:00+00"]
    full += ["u", '{"a": 1}', "4", "happy", "z"]
    rows: list[list[str | None]] = [full, [None] * len(oids)]
    assert encode(names, oids, ["c1"], rows) == expected(names, oids, ["c1"], rows)


def test_bad_input_is_refused() -> None:
    codec = ColumnCodec(["a", "b"], [INT8, TEXT], ["a"], CATALOG)
    one = pa.array(["1"], pa.string())
    with pytest.raises(ValueError, match="1 columns for a table of 2"):
        codec.encode([one])
    with pytest.raises(ValueError, match="has 2 values"):
        codec.encode([one, pa.array(["x", "y"], pa.string())])
    with pytest.raises(TypeError):
        codec.encode([one, pa.array([1], pa.int64())])
    with pytest.raises(TypeError):
        codec.encode([one, pa.array(["x"], pa.large_string())])
    with pytest.raises(ValueError, match="without columns"):
        ColumnCodec([], [], [], CATALOG).encode([])


@pytest.mark.parametrize(
    ("names", "oids", "keys"),
    [
        (["a", "a"], [INT4, INT4], []),
        (["a"], [INT4, INT4], []),
        (["a"], [INT4], ["b"]),
        (["a", "b"], [INT4, INT4], ["a", "a"]),
    ],
)
def test_construction_is_validated_like_row_codec(
    names: list[str], oids: list[int], keys: list[str]
) -> None:
    with pytest.raises(ValueError):
        RowCodec(names, oids, keys, CATALOG)
    with pytest.raises(ValueError):
        ColumnCodec(names, oids, keys, CATALOG)
