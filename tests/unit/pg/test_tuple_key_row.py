"""The log's hot path: an Insert read from its bytes (``RowCodec.tuple_key_row``,
``LogTranslator.insert``) gives exactly what decoding it first gives (``pgoutput`` then
``RowCodec.key_row``), or hands it back to the general way."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dblog_worker.errors import ProtocolError
from dblog_worker.events import LogItem
from dblog_worker.pg import pgoutput as pg
from dblog_worker.pg.encoders import BUILTIN_TYPES
from dblog_worker.pg.translate import LogTranslator, RelationKind, RelationView
from dblog_worker.pg.values import RowCodec

OID = 16_401
# int8, text, numeric, bool, bytea, float8, timestamptz, int4[], jsonb
TYPES = (20, 25, 1700, 16, 17, 701, 1184, 1007, 3802)
NAMES = ("id", 'we"ird\\name', "amount", "flag", "data", "ratio", "at", "tags", "doc")
CODEC = RowCodec(NAMES, TYPES, ["at", "id"], BUILTIN_TYPES)

texts = st.text(st.characters(codec="utf-8"), max_size=12)
VALUES = (
    st.integers(-(2**63), 2**63 - 1).map(str),
    texts,
    st.decimals(allow_nan=False, places=3).map(str),
    st.sampled_from(["t", "f"]),
    st.binary(max_size=8).map(lambda b: "\\x" + b.hex()),
    st.sampled_from(["1.5", "-0", "NaN", "Infinity", "1e+20"]),
    st.sampled_from(["2024-01-01 00:00:00+00", "infinity", "1999-12-31 23:59:59.5+00"]),
    st.lists(st.one_of(st.none(), st.integers(-9, 9)), max_size=3).map(
        lambda xs: "{" + ",".join("NULL" if x is None else str(x) for x in xs) + "}"),
    texts,
)
rows = st.tuples(*(st.one_of(st.none(), v) for v in VALUES))


def tuple_data(values: tuple[str | None, ...]) -> bytes:
    """A pgoutput TupleData of text and NULL values."""
    out = struct.pack(">H", len(values))
    for value in values:
        if value is None:
            out += b"n"
        else:
            data = value.encode()
            out += b"t" + struct.pack(">I", len(data)) + data
    return out


def insert(values: tuple[str | None, ...], oid: int = OID) -> bytes:
    return b"I" + struct.pack(">I", oid) + b"N" + tuple_data(values)


@given(rows)
def test_the_same_strings_as_decoding_first(values: tuple[str | None, ...]) -> None:
    message = insert(values)
    decoded = pg.decode_message(message)
    assert isinstance(decoded, pg.Insert)
    assert decoded.new == values
    assert CODEC.tuple_key_row(message, 6) == CODEC.key_row(values)


ROW = ("7", "x", "1.50", "t", "\\x00ff", "2.5", "2024-01-01 00:00:00+00", "{1,NULL}", "{}")


@pytest.mark.parametrize("message", [
    insert(ROW[:-1]),  # a column fewer than the codec's
    insert((*ROW, "1")),  # one more
    insert(ROW)[:-1],  # the last value cut short
    insert(ROW) + b"\x00",  # bytes left over
    insert(ROW).replace(b"t\x00\x00\x00\x02{}", b"u"),  # an unchanged TOAST value
    insert(ROW).replace(b"t\x00\x00\x00\x01x", b"b\x00\x00\x00\x01x"),  # binary data
], ids=["fewer", "more", "cut", "trailing", "toast", "binary"])
def test_a_tuple_that_is_not_plain_goes_the_general_way(message: bytes) -> None:
    assert message != insert(ROW)
    out: list[LogItem] = []
    assert not translator().insert(message, out)
    assert out == []


def translator() -> LogTranslator:
    views = {OID: RelationView(RelationKind.CAPTURED, "public.t", CODEC, schema_version=4),
             OID + 1: RelationView(RelationKind.WATERMARK, "dblog.watermark")}
    translator = LogTranslator("src", lambda relation: views[relation.relation_oid])
    for oid in views:
        translator.translate(pg.Relation(oid, "public", "t", "f", ()), [])
    translator.translate(pg.Begin(0x1000, 5, 9), [])
    return translator


@given(st.lists(rows, min_size=1, max_size=4))
def test_insert_makes_the_events_translate_makes(batch: list[tuple[str | None, ...]]) -> None:
    fast, general = translator(), translator()
    fast_out: list[LogItem] = []
    general_out: list[LogItem] = []
    for values in batch:
        assert fast.insert(insert(values), fast_out)
        general.translate(pg.decode_message(insert(values)), general_out)
    commit = pg.Commit(0, 0x1000, 0x1010, 5)
    fast.translate(commit, fast_out)
    general.translate(commit, general_out)
    assert fast_out == general_out
    assert fast.recent.oldest() == general.recent.oldest()


def test_insert_declines_what_is_not_a_plain_row_of_a_captured_table() -> None:
    t = translator()
    out: list[LogItem] = []
    assert not t.insert(insert(ROW, OID + 1), out)  # the watermark table's
    assert not t.insert(insert(ROW, OID + 2), out)  # a relation not described yet
    assert not t.insert(insert(ROW)[:-1], out)  # cut short
    assert out == []
    with pytest.raises(ProtocolError):  # what the general way then says
        t.translate(pg.decode_message(insert(ROW)[:-1]), out)
