"""Column masks: the rules of [source.columns], the hash (C and Python alike), and the codecs
of both kinds with masks: a masked column is its canonical JSON fragment transformed, the
same bytes on the log's and the dump's path."""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from collections.abc import Sequence
from json.encoder import encode_basestring
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dblog_worker import masking
from dblog_worker.errors import ConfigError
from dblog_worker.masking import (
    Action,
    ColumnMask,
    ColumnRules,
    MaskConflict,
    TableMasks,
    generated_left_out,
    hash_column,
    parse_rules,
)
from dblog_worker.mysql.column_model import Kind, MyColumn, schema_document
from dblog_worker.mysql.values import MyRowCodec
from dblog_worker.pg.column_codec import ColumnCodec
from dblog_worker.pg.reads import schema_document as pg_schema_document
from dblog_worker.pg.values import RowCodec
from tests.unit.pg.test_columns import CATALOG, INT4, TEXT, tables, to_columns

KEY = b"0123456789abcdef0123456789abcdef"
ENV = {"K": KEY.decode()}


def _hmac(fragment: str) -> str:
    return '"' + hmac.new(KEY, fragment.encode(), hashlib.sha256).hexdigest() + '"'


# -- the rules ---------------------------------------------------------------------------


def test_rules_first_match_wins_and_keys_are_out_of_reach() -> None:
    rules = parse_rules({
        "key_env": "K",
        "shop.customers": {"email": "hash", "notes": "exclude", "ssn": {"mask": "X"},
                           "[!i]*": "mask"},
        "shop.*": {"email": "exclude", "phone*": "hash"},
    }, ENV)
    masks = rules.for_table("shop.customers", ["id", "email", "notes", "ssn", "name"], ["id"])
    assert masks.masks == {"email": ColumnMask(Action.HASH), "notes": ColumnMask(Action.EXCLUDE),
                           "ssn": ColumnMask(Action.MASK, "X"),
                           "name": ColumnMask(Action.MASK, "****")}
    other = rules.for_table("shop.orders", ["id", "email", "phone_home"], ["id"])
    assert other.masks == {"email": ColumnMask(Action.EXCLUDE),
                           "phone_home": ColumnMask(Action.HASH)}
    with pytest.raises(MaskConflict, match=re.escape("'name', a key column of shop.customers")):
        rules.for_table("shop.customers", ["id", "name"], ["id", "name"])
    with pytest.raises(MaskConflict, match="would mask 'nid', a key column"):  # a pattern too
        rules.for_table("shop.customers", ["nid"], ["nid"])
    with pytest.raises(ConfigError, match="a key column can be neither excluded nor masked"):
        rules.require("shop.customers", ["id", "name"], ["name"])
    assert not rules.for_table("public.x", ["id", "email"], ["id"])
    assert KEY.decode() not in repr(rules) and KEY.decode() not in repr(masks)


@pytest.mark.parametrize(("section", "env", "error"), [
    ({"shop.t": {"c": "hash"}}, {}, ": a column is hashed, so key_env must name"),
    ({"key_env": "K", "shop.t": {"c": "hash"}}, {}, ".key_env names K, which is not set"),
    ({"key_env": "K"}, {"K": "short"}, ".key_env: K holds 5 bytes; an HMAC key needs at least"),
    ({"shop": {"c": "hash"}}, ENV, ": 'shop' must be qualified"),
    ({"shop.t": {"c": "blur"}}, ENV, ".'shop.t'.'c' must be \"exclude\", \"hash\", \"mask\""),
    ({"shop.t": {"c": {"mask": 1}}}, ENV, ".'shop.t'.'c' must be { mask = \"text\" }"),
    ({"shop.t": {"c[": "hash"}}, ENV, ".'shop.t': 'c[': a [ is never closed"),
    ({"shop.t": {}}, ENV, ".'shop.t' must be a table of column"),
    ("hash", ENV, " must be a table"),
])
def test_rule_errors(section: Any, env: dict[str, str], error: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_rules(section, env)
    assert str(info.value).startswith(error), info.value
    assert "0123456789" not in str(info.value)


# -- the hash ----------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(st.lists(st.none() | st.text(), max_size=30), st.booleans(), st.integers(0, 3),
       st.binary(min_size=16, max_size=100))
def test_c_and_python_hashes_agree(values: list[str | None], quoted: bool, start: int,
                                   key: bytes) -> None:
    array = pa.array(["x", *values], pa.string()).slice(min(start, len(values)))
    quote = '"' if quoted else ""
    want = [None if v is None else '"' + hmac.new(key, (quote + v + quote).encode(),
                                                  hashlib.sha256).hexdigest() + '"'
            for v in array.to_pylist()]
    assert hash_column(key, array, quoted).to_pylist() == want
    assert masking.HASHER == "c"  # the C hasher is built by `pip install -e .`


def test_python_hasher_where_c_is_not_built(monkeypatch: pytest.MonkeyPatch) -> None:
    array = pa.array(["a", None, "é"], pa.string())
    want = hash_column(KEY, array, True).to_pylist()
    monkeypatch.setattr(masking, "_masks", None)
    assert hash_column(KEY, array, True).to_pylist() == want


# -- PostgreSQL codecs -------------------------------------------------------------------


def _fragment(name: str, oid: int, value: str | None) -> str:
    row = RowCodec([name], [oid], [], CATALOG).row([value])
    return row[len("{" + encode_basestring(name) + ":"):-1]


def _expected_row(names: Sequence[str], oids: Sequence[int], row: Sequence[str | None],
                  masks: TableMasks) -> str:
    """The row as the definition says: each column's fragment, transformed."""
    parts = []
    for name, oid, value in zip(names, oids, row, strict=True):
        mask = masks.masks.get(name)
        fragment = _fragment(name, oid, value)
        if mask is not None and mask.action is Action.EXCLUDE:
            continue
        if mask is not None and value is not None:
            fragment = encode_basestring(mask.text) if mask.action is Action.MASK \
                else _hmac(fragment)
        parts.append(encode_basestring(name) + ":" + fragment)
    return "{" + ",".join(parts) + "}"


@st.composite
def masked_tables(draw: st.DrawFn) -> tuple[list[str], list[int], list[str],
                                            list[list[str | None]], TableMasks]:
    names, oids, keys, rows = draw(tables())
    masks = {}
    for name in names:
        if name not in keys:
            action = draw(st.sampled_from([None, *Action]))
            if action is not None:
                masks[name] = ColumnMask(action, "m\"ask" if action is Action.MASK else "")
    return names, oids, keys, rows, TableMasks(masks, KEY)


@settings(max_examples=300, deadline=None)
@given(masked_tables())
def test_postgresql_masks_are_the_same_bytes_on_both_paths(
        table: tuple[list[str], list[int], list[str], list[list[str | None]], TableMasks],
) -> None:
    names, oids, keys, rows, masks = table
    codec = RowCodec(names, oids, keys, CATALOG, masks)
    wanted = []
    for row in rows:
        try:
            wanted.append((codec.key(row), codec.row(row)))
        except ValueError:
            return  # a value the encoders refuse: covered by test_columns
        assert codec.key_row(row) == wanted[-1]
        assert codec.row(row) == _expected_row(names, oids, row, masks)
    keys_out, rows_out = ColumnCodec(names, oids, keys, CATALOG, masks).encode(
        to_columns(len(names), rows))
    assert list(zip(keys_out.to_pylist(), rows_out.to_pylist(), strict=True)) == wanted


def test_postgresql_log_tuples_and_schema_documents() -> None:
    masks = TableMasks({"secret": ColumnMask(Action.EXCLUDE), "email": ColumnMask(Action.HASH)},
                       KEY)
    names, oids = ["id", "secret", "email"], [INT4, TEXT, TEXT]
    codec = RowCodec(names, oids, ["id"], CATALOG, masks)
    # a pgoutput TupleData of three text values: 1, 'x', 'a@b'
    tuple_data = b"\x00\x03" + b"".join(b"t" + len(v).to_bytes(4, "big") + v
                                        for v in (b"1", b"x", b"a@b"))
    assert codec.tuple_key_row(tuple_data, 0) == ("[1]", '{"id":1,"email":'
                                                  + _hmac('"a@b"') + "}")
    document = pg_schema_document(list(zip(names, oids, strict=True)), ["id"], CATALOG, masks)
    assert document == {
        "columns": [{"name": "id", "type": "int4", "type_oid": INT4},
                    {"name": "email", "type": "text", "type_oid": TEXT, "masked": "hash",
                     "source_type": "text"}],
        "key": ["id"], "excluded": ["secret"]}


def test_generated_columns_that_read_what_a_mask_hides_are_left_out() -> None:
    """A PostgreSQL STORED generated column, which a target computes from the other
    columns: kept when it reads none of the masked or excluded ones, left out (and named
    under ``excluded``) when a rule reaches it or its expression may read one."""
    masks = TableMasks({"secret": ColumnMask(Action.EXCLUDE), "e Mail": ColumnMask(Action.HASH),
                        "code": ColumnMask(Action.MASK, "x")}, KEY)
    generated = [("name_len", "integer", "length(name)"),
                 ("domain", "text", "split_part(\"e Mail\", '@'::text, 2)"),
                 ("has_secret", "boolean", "(secret IS NOT NULL)"),
                 ("code", "text", "upper(name)"),  # a rule reaches it
                 ("secretive", "text", "lower(\"secretive_src\")")]  # a longer name: kept
    assert generated_left_out([(g[0], g[2]) for g in generated], masks) == {
        "domain", "has_secret", "code"}
    assert generated_left_out([(g[0], g[2]) for g in generated], TableMasks()) == set()
    names, oids = ["id", "name", "e Mail", "secret"], [INT4, TEXT, TEXT, TEXT]
    document = pg_schema_document(list(zip(names, oids, strict=True)), ["id"], CATALOG, masks,
                                  generated)
    assert document["generated"] == [
        {"name": "name_len", "type": "integer", "expression": "length(name)"},
        {"name": "secretive", "type": "text", "expression": 'lower("secretive_src")'}]
    assert document["excluded"] == ["secret", "domain", "has_secret", "code"]


# -- MySQL codecs ------------------------------------------------------------------------

MY_COLUMNS = [MyColumn("id", Kind.INTEGER), MyColumn("n", Kind.INTEGER),
              MyColumn("d", Kind.DECIMAL, scale=2), MyColumn("s", Kind.TEXT),
              MyColumn("b", Kind.BINARY), MyColumn("secret", Kind.TEXT)]


def test_mysql_masks_are_the_same_bytes_on_both_paths() -> None:
    masks = TableMasks({"n": ColumnMask(Action.HASH), "d": ColumnMask(Action.HASH),
                        "s": ColumnMask(Action.MASK, "***"), "b": ColumnMask(Action.HASH),
                        "secret": ColumnMask(Action.EXCLUDE)}, KEY)
    codec = MyRowCodec(MY_COLUMNS, ["id"], masks)
    plain = MyRowCodec(MY_COLUMNS, ["id"])
    from decimal import Decimal
    cells = ("7", "-3", "1.50", "text", b"\x00\xff", "hidden")
    values = {"id": 7, "n": -3, "d": Decimal("1.50"), "s": "text", "b": b"\x00\xff",
              "secret": "hidden"}
    masked = codec.key_row_from_dump(cells)
    assert masked == codec.key_row_from_binlog(values)
    assert json.loads(plain.row_from_dump(cells))["b"] == "AP8="
    assert masked == ("[7]", '{"id":7,"n":' + _hmac("-3") + ',"d":' + _hmac('"1.50"')
                      + ',"s":"***","b":' + _hmac('"AP8="') + "}")
    nulls = (None,) * 5
    assert codec.row_from_dump(("7", *nulls)) == codec.row_from_binlog(
        {"id": 7, **dict.fromkeys(["n", "d", "s", "b", "secret"])}) == \
        '{"id":7,"n":null,"d":null,"s":null,"b":null}'
    document: dict[str, Any] = schema_document(MY_COLUMNS, ["id"], masks)
    assert [c["name"] for c in document["columns"]] == ["id", "n", "d", "s", "b"]
    assert document["columns"][2] == {"name": "d", "type": "text", "masked": "hash",
                                      "source_type": "decimal"}
    assert document["excluded"] == ["secret"]


def test_rules_of_the_configuration() -> None:
    rules = ColumnRules()
    assert not rules and rules.for_table("a.b", ["x"], ["x"]) == TableMasks()


def test_the_key_is_never_shown() -> None:
    from dblog_worker.config import parse
    from dblog_worker.errors import DblogError

    config = parse({
        "source": {"name": "shop", "dsn": "host=db dbname=shop", "tables": ["shop.*"],
                   "columns": {"key_env": "K", "shop.c": {"email": "hash", "id": "hash"}}},
        "redis": {"url": "redis://127.0.0.1:6379/0"}, "landing": {"path": "/data"},
    }, ENV)
    assert config.source.columns.key == KEY
    shown = [repr(config), str(config), repr(config.source.columns.for_table(
        "shop.c", ["id", "email"], ["key"]))]
    try:
        config.source.columns.require("shop.c", ["id", "email"], ["id"])
    except DblogError as exc:
        shown.append(str(exc))
    assert len(shown) == 4 and not any(KEY.decode() in text for text in shown)
