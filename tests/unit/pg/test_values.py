"""Canonical serialization of PostgreSQL text values (dblog_worker.pg.values and
dblog_worker.pg.encoders)."""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dblog_worker.pg.encoders import BUILTIN_TYPES, PgType, encoder_for
from dblog_worker.pg.values import PG_SESSION_SETTINGS, RowCodec, libpq_options

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
XID, CID, OIDVECTOR, JSON, XML, BOX, CIDR = 28, 29, 30, 114, 142, 603, 650
FLOAT4, FLOAT8, MACADDR, MONEY, INET, BPCHAR, VARCHAR = 700, 701, 829, 790, 869, 1042, 1043
DATE, TIME, TIMESTAMP, TIMESTAMPTZ, INTERVAL, TIMETZ = 1082, 1083, 1114, 1184, 1186, 1266
NUMERIC, UUID, JSONB, XID8, INT4RANGE = 1700, 2950, 3802, 5069, 3904
BOOL_ARR, BYTEA_ARR, INT8_ARR, INT2_ARR, INT4_ARR, TEXT_ARR = 1000, 1001, 1016, 1005, 1007, 1009
FLOAT8_ARR, BOX_ARR, NUMERIC_ARR, JSONB_ARR, BPCHAR_ARR, INT2VECTOR_ARR = (
    1022,
    1020,
    1231,
    3807,
    1014,
    1006,
)
TIMESTAMPTZ_ARR, VARCHAR_ARR, UUID_ARR = 1185, 1015, 2951

# Types "loaded from the catalog" for the domain / enum tests.
D_INT, D_TEXT, D_D_INT, D_INT_ARR, D_INT_ARRAY_OF, MOOD, MOOD_ARR = (
    90001,
    90002,
    90003,
    90004,
    90005,
    90006,
    90007,
)
D_BOX, D_BOX_ARR, D_SELF, ARR_SELF, UNKNOWN_ELEM_ARR = 90008, 90009, 90010, 90011, 90012
UNKNOWN = 99999

CATALOG: Mapping[int, PgType] = {
    **BUILTIN_TYPES,
    D_INT: PgType(D_INT, "d_int", "N", base_oid=INT4),
    D_TEXT: PgType(D_TEXT, "d_text", "S", base_oid=TEXT),
    D_D_INT: PgType(D_D_INT, "d_d_int", "N", base_oid=D_INT),
    D_INT_ARR: PgType(D_INT_ARR, "d_int_arr", "A", base_oid=INT4_ARR),  # domain over int4[]
    D_INT_ARRAY_OF: PgType(D_INT_ARRAY_OF, "_d_int", "A", element_oid=D_INT),  # d_int[]
    MOOD: PgType(MOOD, "mood", "E"),
    MOOD_ARR: PgType(MOOD_ARR, "_mood", "A", element_oid=MOOD),
    D_BOX: PgType(D_BOX, "d_box", "G", base_oid=BOX, delimiter=";"),
    D_BOX_ARR: PgType(D_BOX_ARR, "_d_box", "A", element_oid=D_BOX, delimiter=";"),
    D_SELF: PgType(D_SELF, "d_self", "N", base_oid=D_SELF),  # corrupt: a domain over itself
    ARR_SELF: PgType(ARR_SELF, "arr_self", "A", element_oid=ARR_SELF),  # corrupt
    UNKNOWN_ELEM_ARR: PgType(UNKNOWN_ELEM_ARR, "_whatever", "A", element_oid=UNKNOWN),
}


def encode(oid: int, text: str) -> str:
    out = encoder_for(oid, CATALOG)(text)
    json.loads(out)  # every fragment is valid JSON
    return out


def dumps(value: Any) -> str:
    """The JSON this module must produce: compact, UTF-8 kept (ensure_ascii=False)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


# --- scalars ----------------------------------------------------------------------------

SCALAR_CASES: list[tuple[int, str, str]] = [
    # integers: the text as a JSON number
    (INT2, "-32768", "-32768"),
    (INT4, "0", "0"),
    (INT4, "2147483647", "2147483647"),
    (INT8, "-9223372036854775808", "-9223372036854775808"),
    (OID, "4294967295", "4294967295"),
    (XID, "742", "742"),
    (CID, "3", "3"),
    (XID8, "18446744073709551615", "18446744073709551615"),
    # numeric: a string of the text exactly as printed (scale kept)
    (NUMERIC, "1.50", '"1.50"'),
    (NUMERIC, "-0.000100", '"-0.000100"'),
    (NUMERIC, "12345678901234567890.123", '"12345678901234567890.123"'),
    (NUMERIC, "0", '"0"'),
    (NUMERIC, "NaN", '"NaN"'),
    (NUMERIC, "Infinity", '"Infinity"'),
    (NUMERIC, "-Infinity", '"-Infinity"'),
    # floats: PostgreSQL's shortest exact output (extra_float_digits=1) is a JSON number
    (FLOAT8, "1.5", "1.5"),
    (FLOAT8, "-0", "-0"),
    (FLOAT8, "0", "0"),
    (FLOAT8, "1e+20", "1e+20"),
    (FLOAT8, "1.2345678e-05", "1.2345678e-05"),
    (FLOAT8, "1.2345678901234568e+17", "1.2345678901234568e+17"),
    (FLOAT8, "5e-324", "5e-324"),
    (FLOAT8, "1.7976931348623157e+308", "1.7976931348623157e+308"),
    (FLOAT8, "-123456", "-123456"),
    (FLOAT4, "0.1", "0.1"),
    (FLOAT4, "3.4e+38", "3.4e+38"),
    (FLOAT4, "1e-45", "1e-45"),
    (FLOAT8, "NaN", '"NaN"'),
    (FLOAT8, "Infinity", '"Infinity"'),
    (FLOAT8, "-Infinity", '"-Infinity"'),
    (FLOAT4, "NaN", '"NaN"'),
    (FLOAT4, "-Infinity", '"-Infinity"'),
    # bool
    (BOOL, "t", "true"),
    (BOOL, "f", "false"),
    # strings: the text as is
    (TEXT, "", '""'),
    (TEXT, "hello", '"hello"'),
    (TEXT, 'say "hi"', '"say \\"hi\\""'),
    (TEXT, "back\\slash", '"back\\\\slash"'),
    (TEXT, "tab\tnl\ncr\rbs\bff\f", '"tab\\tnl\\ncr\\rbs\\bff\\f"'),
    (TEXT, "ctl\x01\x1f", '"ctl\\u0001\\u001f"'),
    (TEXT, "del\x7f", '"del\x7f"'),
    (TEXT, "héllo wörld", '"héllo wörld"'),
    (TEXT, "emoji 😀 ok", '"emoji 😀 ok"'),
    (TEXT, "line\u2028sep", '"line\u2028sep"'),
    (TEXT, "NULL", '"NULL"'),
    (TEXT, "{1,2}", '"{1,2}"'),
    (VARCHAR, "abc", '"abc"'),
    (BPCHAR, "ab   ", '"ab   "'),  # char(5): the padding is kept
    (CHAR, "x", '"x"'),
    (NAME, "my_table", '"my_table"'),
    (UUID, "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", '"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"'),
    (DATE, "2024-02-29", '"2024-02-29"'),
    (DATE, "0769-02-04 BC", '"0769-02-04 BC"'),
    (TIME, "12:34:56.789", '"12:34:56.789"'),
    (TIMETZ, "12:00:00+00", '"12:00:00+00"'),
    (TIMESTAMP, "2024-01-02 03:04:05", '"2024-01-02 03:04:05"'),
    (TIMESTAMPTZ, "2024-01-02 03:04:05.123456+00", '"2024-01-02 03:04:05.123456+00"'),
    (TIMESTAMPTZ, "infinity", '"infinity"'),
    (INTERVAL, "1 day 02:03:00", '"1 day 02:03:00"'),
    (INET, "192.168.0.1/24", '"192.168.0.1/24"'),
    (CIDR, "10.0.0.0/8", '"10.0.0.0/8"'),
    (MACADDR, "08:00:2b:01:02:03", '"08:00:2b:01:02:03"'),
    (MONEY, "$12.50", '"$12.50"'),
    (JSON, '{"a" : 1,  "b":[true]}', '"{\\"a\\" : 1,  \\"b\\":[true]}"'),  # not re-parsed
    (JSONB, '{"a": 1, "é": "x\\ny"}', '"{\\"a\\": 1, \\"é\\": \\"x\\\\ny\\"}"'),
    (XML, "<a b='1'>x</a>", "\"<a b='1'>x</a>\""),
    (BOX, "(3,4),(1,2)", '"(3,4),(1,2)"'),
    (INT4RANGE, "[1,5)", '"[1,5)"'),
    # bytea: \x + hex -> base64 string
    (BYTEA, "\\x", '""'),
    (BYTEA, "\\x00ff", '"AP8="'),
    (BYTEA, "\\x00", '"AA=="'),
    (BYTEA, "\\xdeadbeef", '"3q2+7w=="'),
    (BYTEA, "\\x" + bytes(range(256)).hex(), dumps(base64.b64encode(bytes(range(256))).decode())),
    # vectors print as space-separated numbers
    (INT2VECTOR, "1 2 3", "[1,2,3]"),
    (INT2VECTOR, "", "[]"),
    (OIDVECTOR, "23 25", "[23,25]"),
    # domains: the base type's encoding
    (D_INT, "42", "42"),
    (D_D_INT, "-7", "-7"),
    (D_TEXT, 'a "b"', '"a \\"b\\""'),
    # enums and unknown types: strings
    (MOOD, "happy", '"happy"'),
    (UNKNOWN, "whatever \\ it is", '"whatever \\\\ it is"'),
    (D_SELF, "1", '"1"'),  # a corrupt domain cycle falls back to a string, no exception
]


@pytest.mark.parametrize(("oid", "text", "expected"), SCALAR_CASES)
def test_scalar(oid: int, text: str, expected: str) -> None:
    assert encode(oid, text) == expected


@pytest.mark.parametrize("text", ["NaN", "Infinity", "-Infinity", "1e+20", "-0", "1.5e-07"])
def test_float_output_is_json(text: str) -> None:
    value = json.loads(encode(FLOAT8, text))
    assert value == (text if text[-1].isalpha() else float(text))


@pytest.mark.parametrize(
    ("oid", "text"),
    [
        (BOOL, "true"),
        (BOOL, ""),
        (BYTEA, "\\000"),  # escape format: bytea_output is not hex
        (BYTEA, "\\x0"),
        (BYTEA, "\\xzz"),
    ],
)
def test_malformed_scalar_text_raises_value_error(oid: int, text: str) -> None:
    with pytest.raises(ValueError):
        encoder_for(oid, CATALOG)(text)


def test_unknown_oid_with_builtin_types_only() -> None:
    assert encoder_for(UNKNOWN, BUILTIN_TYPES)("x") == '"x"'
    assert encoder_for(UNKNOWN, {})("x") == '"x"'
    assert encoder_for(INT4, {})("5") == "5"  # builtins are known even if types lacks them


# --- arrays -----------------------------------------------------------------------------

ARRAY_CASES: list[tuple[int, str, str]] = [
    (INT4_ARR, "{}", "[]"),
    (TEXT_ARR, "{}", "[]"),
    (INT4_ARR, "{1,2,3}", "[1,2,3]"),
    (INT4_ARR, "{1,NULL,3}", "[1,null,3]"),
    (INT4_ARR, "{NULL}", "[null]"),
    (INT8_ARR, "{-9223372036854775808}", "[-9223372036854775808]"),
    (INT2_ARR, "{{1,2},{3,4}}", "[[1,2],[3,4]]"),
    (INT4_ARR, "{{{1},{2}},{{3},{4}}}", "[[[1],[2]],[[3],[4]]]"),
    (INT4_ARR, "{{1,NULL},{NULL,4}}", "[[1,null],[null,4]]"),
    # bounds decoration is dropped
    (INT4_ARR, "[0:1]={1,2}", "[1,2]"),
    (INT4_ARR, "[-2:-1]={1,2}", "[1,2]"),
    (INT4_ARR, "[1:1][2:3]={{1,2}}", "[[1,2]]"),
    (TEXT_ARR, '[0:1]={"a b",NULL}', '["a b",null]'),
    # text quoting: what array_out quotes, and its backslash escapes
    (TEXT_ARR, "{a,b}", '["a","b"]'),
    (TEXT_ARR, '{"a b","c,d"}', '["a b","c,d"]'),
    (TEXT_ARR, '{"say \\"hi\\""}', '["say \\"hi\\""]'),
    (TEXT_ARR, '{"back\\\\slash"}', '["back\\\\slash"]'),
    (TEXT_ARR, '{"{","}","{}"}', '["{","}","{}"]'),
    (TEXT_ARR, '{NULL,"NULL","null",null,Null}', '[null,"NULL","null",null,null]'),
    (TEXT_ARR, '{"",""}', '["",""]'),
    (TEXT_ARR, '{""}', '[""]'),
    (TEXT_ARR, '{" x","x "}', '[" x","x "]'),
    (TEXT_ARR, '{"a\nb","t\tb"}', '["a\\nb","t\\tb"]'),
    (TEXT_ARR, "{é,😀,ctl\x01}", '["é","😀","ctl\\u0001"]'),
    (TEXT_ARR, '{{a,"b c"},{NULL,""}}', '[["a","b c"],[null,""]]'),
    (TEXT_ARR, '{"a\\"b\\\\c,d{e}f"}', '["a\\"b\\\\c,d{e}f"]'),
    (VARCHAR_ARR, "{x,y}", '["x","y"]'),
    (BPCHAR_ARR, '{"ab  ",NULL}', '["ab  ",null]'),
    (
        UUID_ARR,
        "{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11}",
        '["a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"]',
    ),
    (TIMESTAMPTZ_ARR, '{"2020-01-01 00:00:00+00",NULL}', '["2020-01-01 00:00:00+00",null]'),
    (JSONB_ARR, '{"{\\"a\\": 1}","[1, 2]"}', '["{\\"a\\": 1}","[1, 2]"]'),
    # input-format leniency: whitespace around elements and braces, escapes outside quotes
    (INT4_ARR, "{ 1 , 2 }", "[1,2]"),
    (INT4_ARR, " { { 1 } , { 2 } } ", "[[1],[2]]"),
    (TEXT_ARR, "{ a b ,  c }", '["a b","c"]'),
    (TEXT_ARR, "{a\\,b,\\NULL,x\\ }", '["a,b","NULL","x "]'),
    (TEXT_ARR, '{ "q" , NULL }', '["q",null]'),
    (TEXT_ARR, "{ }", "[]"),
    # element type bytea, bool, numeric, float
    (BYTEA_ARR, '{"\\\\x00ff","\\\\x",NULL}', '["AP8=","",null]'),
    (BOOL_ARR, "{t,f,NULL}", "[true,false,null]"),
    (BOOL_ARR, "{{t,f},{f,t}}", "[[true,false],[false,true]]"),
    (NUMERIC_ARR, "{1.50,NaN,NULL,-Infinity}", '["1.50","NaN",null,"-Infinity"]'),
    (FLOAT8_ARR, "{1.5,NaN,-0,1e+20,-Infinity}", '[1.5,"NaN",-0,1e+20,"-Infinity"]'),
    # box: the element type's delimiter is ';' and its commas are not quoted
    (BOX_ARR, "{(3,4),(1,2);(1,1),(0,0)}", '["(3,4),(1,2)","(1,1),(0,0)"]'),
    (BOX_ARR, "{(3,4),(1,2);NULL}", '["(3,4),(1,2)",null]'),
    (BOX_ARR, '{"(3,4),(1,2)"}', '["(3,4),(1,2)"]'),
    (D_BOX_ARR, "{(3,4),(1,2);(1,1),(0,0)}", '["(3,4),(1,2)","(1,1),(0,0)"]'),
    # vectors inside arrays
    (INT2VECTOR_ARR, '{"1 2",""}', "[[1,2],[]]"),
    (INT2VECTOR_ARR, "{1,2}", "[[1],[2]]"),
    # domains over arrays, arrays of domains and enums, unknown element types
    (D_INT_ARR, "{1,NULL}", "[1,null]"),
    (D_INT_ARRAY_OF, "{{1},{2}}", "[[1],[2]]"),
    (MOOD_ARR, "{happy,sad}", '["happy","sad"]'),
    (UNKNOWN_ELEM_ARR, '{1,"x y"}', '["1","x y"]'),
]


@pytest.mark.parametrize(("oid", "text", "expected"), ARRAY_CASES)
def test_array(oid: int, text: str, expected: str) -> None:
    assert encode(oid, text) == expected


def test_corrupt_self_referencing_array_type_does_not_raise() -> None:
    encoder = encoder_for(ARR_SELF, CATALOG)  # the recursion is cut, no exception
    assert encoder("{}") == "[]"


@pytest.mark.parametrize(
    "text",
    [
        "",
        "1,2",
        "{1,2",
        "{1,2}}",
        "{1,2},",
        "{1,,2}",
        "{,1}",
        "{1,}",
        "{{1},2}",
        "{1,{2}}",
        "{{}}",
        "{{1},{}}",
        '{"a}',
        '{a"b"}',
        "{1}{2}",
        "[0:1]{1,2}",
        "{1 2}x",
    ],
)
def test_malformed_array_raises_value_error(text: str) -> None:
    with pytest.raises(ValueError):
        encoder_for(TEXT_ARR, CATALOG)(text)


# --- hypothesis: the array encoder has json.dumps(list) semantics -----------------------

_ARRAY_SPECIAL = set('{}",\\') | set(" \t\n\r\v\f")


def pg_quote(element: str | None) -> str:
    """Quote one text[] element as PostgreSQL's array_out does (independent of the module)."""
    if element is None:
        return "NULL"
    if element == "" or element.upper() == "NULL" or any(c in _ARRAY_SPECIAL for c in element):
        return '"' + element.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return element


def pg_array_literal(items: list[Any]) -> str:
    return (
        "{"
        + ",".join(pg_array_literal(i) if isinstance(i, list) else pg_quote(i) for i in items)
        + "}"
    )


_texts = st.text(
    alphabet=st.one_of(st.sampled_from('{}",\\ \t\nNULnul;x'), st.characters()), max_size=8
)
_elements = st.one_of(st.none(), st.sampled_from(["NULL", "null", "Null", ""]), _texts)


@given(st.lists(_elements, max_size=8))
def test_text_array_matches_json_dumps(items: list[str | None]) -> None:
    out = encoder_for(TEXT_ARR, BUILTIN_TYPES)(pg_array_literal(items))
    assert out == dumps(items)
    assert json.loads(out) == items


@given(
    st.integers(min_value=1, max_value=4).flatmap(
        lambda width: st.lists(st.lists(_elements, min_size=width, max_size=width), min_size=1)
    )
)
def test_two_dimensional_text_array_matches_json_dumps(rows: list[list[str | None]]) -> None:
    assert encoder_for(TEXT_ARR, BUILTIN_TYPES)(pg_array_literal(rows)) == dumps(rows)


@given(st.lists(st.one_of(st.none(), st.integers(min_value=-(2**63), max_value=2**63 - 1))))
def test_int8_array_matches_json_dumps(items: list[int | None]) -> None:
    literal = "{" + ",".join("NULL" if i is None else str(i) for i in items) + "}"
    assert encoder_for(INT8_ARR, BUILTIN_TYPES)(literal) == dumps(items)


# --- rows and keys ----------------------------------------------------------------------

COLUMNS = ["id", "name", "amount", "at", "ok"]
TYPES = [INT8, TEXT, NUMERIC, TIMESTAMPTZ, BOOL]


def test_row() -> None:
    codec = RowCodec(COLUMNS, TYPES, ["id"], CATALOG)
    values = ["42", 'Zoë "Z"', "1.50", "2024-01-02 03:04:05+00", "t"]
    row = codec.row(values)
    assert row == (
        '{"id":42,"name":"Zoë \\"Z\\"","amount":"1.50","at":"2024-01-02 03:04:05+00","ok":true}'
    )
    assert json.loads(row) == {
        "id": 42,
        "name": 'Zoë "Z"',
        "amount": "1.50",
        "at": "2024-01-02 03:04:05+00",
        "ok": True,
    }
    assert "\\u" not in row  # non-ASCII kept as UTF-8, not \\u-escaped
    assert codec.key(values) == "[42]"
    assert codec.key_from_key_values(["42"]) == "[42]"


def test_row_with_nulls() -> None:
    codec = RowCodec(COLUMNS, TYPES, ["id"], CATALOG)
    row = codec.row(["1", None, None, None, None])
    assert row == '{"id":1,"name":null,"amount":null,"at":null,"ok":null}'
    assert json.loads(row)["name"] is None


def test_row_of_every_kind() -> None:
    names = ["i", "f", "b", "by", "arr", "d", "e", "u", "j"]
    oids = [INT4, FLOAT8, BOOL, BYTEA, TEXT_ARR, D_INT, MOOD, UNKNOWN, JSONB]
    codec = RowCodec(names, oids, [], CATALOG)
    row = codec.row(["1", "NaN", "f", "\\x00ff", '{"a,b",NULL}', "7", "ok", "?", '{"k": [1]}'])
    assert row == (
        '{"i":1,"f":"NaN","b":false,"by":"AP8=","arr":["a,b",null],"d":7,"e":"ok","u":"?",'
        '"j":"{\\"k\\": [1]}"}'
    )
    json.loads(row)
    assert codec.key(["1", "NaN", "f", "\\x00ff", "{}", "7", "ok", "?", "{}"]) == "[]"
    assert codec.key_from_key_values([]) == "[]"


def test_composite_key_in_key_order() -> None:
    # key order (tenant, id) differs from column order (id, name, tenant)
    codec = RowCodec(["id", "name", "tenant"], [INT4, TEXT, TEXT], ["tenant", "id"], CATALOG)
    values = ["7", "seven", 'acme "inc"']
    key = codec.key(values)
    assert key == '["acme \\"inc\\"",7]'
    assert codec.key_from_key_values(['acme "inc"', "7"]) == key
    assert json.loads(key) == ['acme "inc"', 7]
    assert codec.row(values) == '{"id":7,"name":"seven","tenant":"acme \\"inc\\""}'


@pytest.mark.parametrize(
    ("oids", "key_columns", "values", "key_values"),
    [
        ([INT8, INT4], ["b", "a"], ["1", "2"], ["2", "1"]),
        ([UUID, TIMESTAMPTZ], ["a", "b"], ["u-1", "2024-01-01 00:00:00+00"], None),
        ([BYTEA, NUMERIC], ["a", "b"], ["\\x00", "1.0"], None),
        ([D_INT, TEXT_ARR], ["b", "a"], ["3", "{x,NULL}"], ["{x,NULL}", "3"]),
        ([INT4, TEXT], ["a", "b"], ["1", None], None),  # e.g. REPLICA IDENTITY FULL
    ],
)
def test_key_and_key_from_key_values_agree(
    oids: list[int],
    key_columns: list[str],
    values: list[str | None],
    key_values: list[str | None] | None,
) -> None:
    codec = RowCodec(["a", "b"], oids, key_columns, CATALOG)
    if key_values is None:
        key_values = values
    key = codec.key(values)
    assert codec.key_from_key_values(key_values) == key
    assert key.startswith("[") and key.endswith("]")
    assert len(json.loads(key)) == 2
    json.loads(codec.row(values))


def test_column_names_are_json_escaped() -> None:
    names = ['we"ird', "back\\slash", "ünï", "new\nline", "😀"]
    codec = RowCodec(names, [INT4] * 5, ['we"ird'], CATALOG)
    row = codec.row(["1", "2", "3", "4", "5"])
    assert row == '{"we\\"ird":1,"back\\\\slash":2,"ünï":3,"new\\nline":4,"😀":5}'
    assert json.loads(row) == dict(zip(names, [1, 2, 3, 4, 5], strict=True))


def test_no_columns() -> None:
    codec = RowCodec([], [], [], CATALOG)
    assert codec.row([]) == "{}"
    assert codec.key([]) == "[]"


def test_row_and_key_check_lengths() -> None:
    codec = RowCodec(["a", "b"], [INT4, INT4], ["b"], CATALOG)
    with pytest.raises(ValueError):
        codec.row(["1"])
    with pytest.raises(ValueError):
        codec.row(["1", "2", "3"])
    with pytest.raises(ValueError):
        codec.key(["1"])
    with pytest.raises(ValueError):
        codec.key_from_key_values(["1", "2"])


@pytest.mark.parametrize(
    ("names", "oids", "keys"),
    [
        (["a", "b"], [INT4], ["a"]),  # names and types disagree
        (["a", "a"], [INT4, INT4], ["a"]),  # duplicate column
        (["a", "b"], [INT4, INT4], ["c"]),  # key not a column
        (["a", "b"], [INT4, INT4], ["a", "a"]),  # duplicate key column
    ],
)
def test_row_codec_rejects_bad_definitions(
    names: list[str], oids: list[int], keys: list[str]
) -> None:
    with pytest.raises(ValueError):
        RowCodec(names, oids, keys, CATALOG)


# --- session settings -------------------------------------------------------------------


def test_session_settings() -> None:
    assert dict(PG_SESSION_SETTINGS) == {
        "DateStyle": "ISO, MDY",
        "TimeZone": "UTC",
        "IntervalStyle": "postgres",
        "extra_float_digits": "1",
        "bytea_output": "hex",
        "client_encoding": "UTF8",
    }


def test_libpq_options() -> None:
    assert libpq_options() == (
        "-c DateStyle=ISO,\\ MDY -c TimeZone=UTC -c IntervalStyle=postgres "
        "-c extra_float_digits=1 -c bytea_output=hex -c client_encoding=UTF8"
    )


def test_builtin_types_table() -> None:
    for oid, t in BUILTIN_TYPES.items():
        assert t.oid == oid
        if t.category == "A":
            assert t.element_oid in BUILTIN_TYPES
    assert BUILTIN_TYPES[INT4_ARR] == PgType(INT4_ARR, "_int4", "A", element_oid=INT4)
    assert BUILTIN_TYPES[BOX].delimiter == ";"
    assert BUILTIN_TYPES[BOX_ARR].delimiter == ";"
