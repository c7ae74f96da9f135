"""The pgoutput decoder against messages built byte by byte from the PostgreSQL docs."""

from __future__ import annotations

import contextlib
import copy
import pickle
import struct
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dblog_worker.errors import ProtocolError
from dblog_worker.pg.pgoutput import (
    PG_EPOCH_US,
    UNCHANGED_TOAST,
    Begin,
    Column,
    Commit,
    Delete,
    Insert,
    Keepalive,
    LogicalMessage,
    Message,
    Origin,
    Relation,
    Truncate,
    TypeMsg,
    Unchanged,
    Update,
    XLogData,
    decode_message,
    format_lsn,
    parse_copy_data,
    parse_lsn,
    pg_time_to_unix_us,
    standby_status_update,
    unix_us_to_pg_time,
)

# A commit time, 2024-05-06T07:08:09.123456Z, as PostgreSQL sends it and as we return it.
TS_UNIX = 1_714_979_289_123_456
TS_PG = TS_UNIX - 946_684_800_000_000


def text(value: str) -> bytes:
    raw = value.encode("utf-8")
    return b"t" + struct.pack(">i", len(raw)) + raw


NULL = b"n"
TOAST = b"u"


def tupledata(*columns: bytes) -> bytes:
    return struct.pack(">h", len(columns)) + b"".join(columns)


def cstr(value: str) -> bytes:
    return value.encode("utf-8") + b"\x00"


def column(flags: int, name: str, type_oid: int, typmod: int) -> bytes:
    return struct.pack(">b", flags) + cstr(name) + struct.pack(">Ii", type_oid, typmod)


ROW = tupledata(text("42"), NULL, TOAST, text(""), text("héllo ✓ 😀"))
ROW_VALUES = ("42", None, UNCHANGED_TOAST, "", "héllo ✓ 😀")
KEY = tupledata(text("42"), NULL, NULL, NULL, NULL)
KEY_VALUES = ("42", None, None, None, None)
NEW = tupledata(text("43"), text("x"), TOAST, text("y"), text("z"))
NEW_VALUES = ("43", "x", UNCHANGED_TOAST, "y", "z")
OID = 0xF000_0001  # above 2**31: OIDs are unsigned

MESSAGES: list[tuple[str, bytes, Message]] = [
    (
        "begin",
        b"B" + struct.pack(">Qqi", 0x1_016B_3748, TS_PG, -2),
        Begin(final_lsn=0x1_016B_3748, commit_ts_us=TS_UNIX, xid=0xFFFF_FFFE),
    ),
    (
        "commit",
        b"C" + struct.pack(">bQQq", 0, 0x16B_3748, 0x16B_3780, TS_PG),
        Commit(flags=0, commit_lsn=0x16B_3748, end_lsn=0x16B_3780, commit_ts_us=TS_UNIX),
    ),
    (
        "origin",
        b"O" + struct.pack(">Q", 0xABC) + cstr("node_ä"),
        Origin(lsn=0xABC, name="node_ä"),
    ),
    (
        "relation",
        b"R"
        + struct.pack(">I", OID)
        + cstr("public")
        + cstr("users")
        + b"d"
        + struct.pack(">h", 3)
        + column(1, "id", 23, -1)
        + column(0, "name", 1043, 68)
        + column(0, "ünïcode", 25, -1),
        Relation(
            relation_oid=OID,
            namespace="public",
            name="users",
            replica_identity="d",
            columns=(
                Column(flags=1, name="id", type_oid=23, type_modifier=-1),
                Column(flags=0, name="name", type_oid=1043, type_modifier=68),
                Column(flags=0, name="ünïcode", type_oid=25, type_modifier=-1),
            ),
        ),
    ),
    (
        "relation in pg_catalog, no columns",
        b"R" + struct.pack(">I", 1259) + cstr("") + cstr("t") + b"f" + struct.pack(">h", 0),
        Relation(relation_oid=1259, namespace="", name="t", replica_identity="f", columns=()),
    ),
    (
        "type",
        b"Y" + struct.pack(">I", 16390) + cstr("public") + cstr("mood"),
        TypeMsg(type_oid=16390, namespace="public", name="mood"),
    ),
    (
        "insert",
        b"I" + struct.pack(">I", OID) + b"N" + ROW,
        Insert(relation_oid=OID, new=ROW_VALUES),
    ),
    (
        "insert, no columns",
        b"I" + struct.pack(">I", 7) + b"N" + tupledata(),
        Insert(relation_oid=7, new=()),
    ),
    (
        "update without old",
        b"U" + struct.pack(">I", OID) + b"N" + NEW,
        Update(relation_oid=OID, old=None, new=NEW_VALUES, old_is_key_only=False),
    ),
    (
        "update with key",
        b"U" + struct.pack(">I", OID) + b"K" + KEY + b"N" + NEW,
        Update(relation_oid=OID, old=KEY_VALUES, new=NEW_VALUES, old_is_key_only=True),
    ),
    (
        "update with old row",
        b"U" + struct.pack(">I", OID) + b"O" + ROW + b"N" + NEW,
        Update(relation_oid=OID, old=ROW_VALUES, new=NEW_VALUES, old_is_key_only=False),
    ),
    (
        "delete with key",
        b"D" + struct.pack(">I", OID) + b"K" + KEY,
        Delete(relation_oid=OID, old=KEY_VALUES, old_is_key_only=True),
    ),
    (
        "delete with old row",
        b"D" + struct.pack(">I", OID) + b"O" + ROW,
        Delete(relation_oid=OID, old=ROW_VALUES, old_is_key_only=False),
    ),
    (
        "truncate several, cascade and restart identity",
        b"T" + struct.pack(">ib", 3, 3) + struct.pack(">III", 16384, 16390, OID),
        Truncate(options=3, relation_oids=(16384, 16390, OID)),
    ),
    (
        "truncate one, no options",
        b"T" + struct.pack(">ib", 1, 0) + struct.pack(">I", 16384),
        Truncate(options=0, relation_oids=(16384,)),
    ),
    (
        "transactional logical message",
        b"M" + struct.pack(">bQ", 1, 0x99) + cstr("dblog") + struct.pack(">i", 4) + b"a\x00\xffb",
        LogicalMessage(transactional=True, lsn=0x99, prefix="dblog", content=b"a\x00\xffb"),
    ),
    (
        "non-transactional empty logical message",
        b"M" + struct.pack(">bQ", 0, 0x99) + cstr("p") + struct.pack(">i", 0),
        LogicalMessage(transactional=False, lsn=0x99, prefix="p", content=b""),
    ),
]
IDS = [m[0] for m in MESSAGES]


@pytest.mark.parametrize(("raw", "expected"), [m[1:] for m in MESSAGES], ids=IDS)
def test_decodes_every_message_kind(raw: bytes, expected: Message) -> None:
    assert decode_message(raw) == expected
    assert decode_message(memoryview(raw)) == expected
    assert decode_message(memoryview(b"xx" + raw)[2:]) == expected


def test_values_keep_their_types() -> None:
    message = decode_message(MESSAGES[IDS.index("insert")][1])
    assert isinstance(message, Insert)
    assert [type(v) for v in message.new] == [str, type(None), Unchanged, str, str]
    assert message.new[2] is UNCHANGED_TOAST


def test_unchanged_toast_is_a_singleton_with_a_readable_repr() -> None:
    assert repr(UNCHANGED_TOAST) == "UNCHANGED_TOAST"
    assert Unchanged() is UNCHANGED_TOAST
    assert copy.deepcopy(UNCHANGED_TOAST) is UNCHANGED_TOAST
    assert pickle.loads(pickle.dumps(UNCHANGED_TOAST)) is UNCHANGED_TOAST  # noqa: S301


@pytest.mark.parametrize("raw", [m[1] for m in MESSAGES], ids=IDS)
def test_every_truncation_raises(raw: bytes) -> None:
    for cut in range(len(raw)):
        with pytest.raises(ProtocolError):
            decode_message(raw[:cut])


@pytest.mark.parametrize("raw", [m[1] for m in MESSAGES], ids=IDS)
def test_trailing_bytes_raise(raw: bytes) -> None:
    with pytest.raises(ProtocolError, match="trailing"):
        decode_message(raw + b"\x00")


MALFORMED = [
    ("stream start", b"S" + struct.pack(">ib", 1, 1), "'S'"),
    ("stream abort", b"A" + struct.pack(">II", 1, 1), "'A'"),
    ("unknown tag", b"X", "'X'"),
    (
        "binary value",
        b"I" + struct.pack(">I", 1) + b"N" + tupledata(b"b\x00\x00\x00\x01\x01"),
        "binary",
    ),
    ("unknown value kind", b"I" + struct.pack(">I", 1) + b"N" + tupledata(b"x"), "'x'"),
    (
        "negative length",
        b"I" + struct.pack(">I", 1) + b"N" + tupledata(b"t\xff\xff\xff\xff"),
        "overruns",
    ),
    ("insert without N", b"I" + struct.pack(">I", 1) + b"K" + tupledata(), "'K'"),
    ("update without N", b"U" + struct.pack(">I", 1) + b"K" + KEY + b"O" + NEW, "'O'"),
    ("delete with N", b"D" + struct.pack(">I", 1) + b"N" + KEY, "'N'"),
    (
        "invalid UTF-8",
        b"I" + struct.pack(">I", 1) + b"N" + tupledata(b"t\x00\x00\x00\x01\xff"),
        "UTF",
    ),
    ("negative truncate count", b"T" + struct.pack(">ib", -1, 0), "overruns"),
    ("empty", b"", "empty"),
]


@pytest.mark.parametrize(
    ("raw", "message"), [m[1:] for m in MALFORMED], ids=[m[0] for m in MALFORMED]
)
def test_malformed_messages_raise(raw: bytes, message: str) -> None:
    with pytest.raises(ProtocolError, match=message):
        decode_message(raw)


@given(st.sampled_from(b"BCORYIUDTMx"), st.binary(max_size=64))
def test_arbitrary_bytes_decode_or_raise_protocol_error(tag: int, rest: bytes) -> None:
    with contextlib.suppress(ProtocolError):
        decode_message(bytes([tag]) + rest)


def test_xlogdata_payload_is_a_view_of_the_rest() -> None:
    body = MESSAGES[IDS.index("insert")][1]
    data = b"w" + struct.pack(">QQq", 0x16B_3748, 0x16B_4000, TS_PG) + body
    frame = parse_copy_data(data)
    assert isinstance(frame, XLogData)
    assert (frame.data_start, frame.wal_end, frame.send_time_us) == (
        0x16B_3748,
        0x16B_4000,
        TS_UNIX,
    )
    assert frame.payload == body
    assert frame.payload.obj is data
    assert decode_message(frame.payload) == MESSAGES[IDS.index("insert")][2]


def test_xlogdata_from_a_memoryview_does_not_copy() -> None:
    data = bytearray(b"w" + bytes(24) + b"payload")
    frame = parse_copy_data(memoryview(data))
    assert isinstance(frame, XLogData)
    data[-1] = ord("D")
    assert bytes(frame.payload) == b"payloaD"


@pytest.mark.parametrize(("flag", "expected"), [(0, False), (1, True)])
def test_keepalive(flag: int, expected: bool) -> None:
    data = b"k" + struct.pack(">Qqb", 0x1_0000_0010, TS_PG, flag)
    assert parse_copy_data(data) == Keepalive(0x1_0000_0010, TS_UNIX, expected)


BAD_FRAMES = [
    ("empty", b"", "empty"),
    ("unknown tag", b"r" + bytes(33), "'r'"),
    ("short xlogdata", b"w" + bytes(23), "'w'"),
    ("short keepalive", b"k" + bytes(16), "'k'"),
    ("long keepalive", b"k" + bytes(18), "'k'"),
]


@pytest.mark.parametrize(
    ("data", "message"), [b[1:] for b in BAD_FRAMES], ids=[b[0] for b in BAD_FRAMES]
)
def test_bad_frames_raise(data: bytes, message: str) -> None:
    with pytest.raises(ProtocolError, match=message):
        parse_copy_data(data)


def test_standby_status_update_bytes() -> None:
    expected = bytes.fromhex(
        "72"  # 'r'
        "0000000100000010"  # written
        "00000000016b3778"  # flushed
        "0000000000000001"  # applied
        "0002bac2801b6a80"  # 2024-05-06T07:08:09.123456Z in PostgreSQL microseconds
        "01"
    )
    got = standby_status_update(0x1_0000_0010, 0x16B_3778, 1, TS_UNIX, reply_requested=True)
    assert got == expected
    assert standby_status_update(0, 0, 0, PG_EPOCH_US) == b"r" + bytes(33)


@pytest.mark.parametrize(
    ("lsn", "text"),
    [
        (0, "0/0"),
        (0x16B_3748, "0/16B3748"),
        (0x1_0000_0000, "1/0"),
        (0x1_016B_3748, "1/16B3748"),
        ((1 << 64) - 1, "FFFFFFFF/FFFFFFFF"),
    ],
)
def test_lsn_format_and_parse(lsn: int, text: str) -> None:
    assert format_lsn(lsn) == text
    assert parse_lsn(text) == lsn
    assert parse_lsn(text.lower()) == lsn


@pytest.mark.parametrize(
    "junk",
    [
        "",
        "0",
        "0/",
        "/0",
        "0/0/0",
        "0x1/0",
        " 0/1",
        "0/1\n",
        "+1/0",
        "-1/0",
        "1_0/0",
        "123456789/0",
        "0/G",
        "0/\uff11",
    ],
)
def test_parse_lsn_rejects_junk(junk: str) -> None:
    with pytest.raises(ValueError, match="LSN"):
        parse_lsn(junk)


@pytest.mark.parametrize("lsn", [-1, 1 << 64])
def test_format_lsn_rejects_out_of_range(lsn: int) -> None:
    with pytest.raises(ValueError, match="LSN"):
        format_lsn(lsn)


def test_timestamp_conversion() -> None:
    assert int(datetime(2000, 1, 1, tzinfo=UTC).timestamp()) * 1_000_000 == PG_EPOCH_US
    assert pg_time_to_unix_us(0) == PG_EPOCH_US
    assert pg_time_to_unix_us(TS_PG) == TS_UNIX
    assert unix_us_to_pg_time(TS_UNIX) == TS_PG
    assert unix_us_to_pg_time(0) == -PG_EPOCH_US
