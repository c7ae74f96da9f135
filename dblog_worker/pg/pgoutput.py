"""Pure decoder for PostgreSQL logical replication: COPY framing and pgoutput messages.

Bytes in, frozen values out; no I/O. It covers:

* the CopyData payloads of ``START_REPLICATION``: XLogData (``'w'``) and primary
  keepalive (``'k'``), and the standby status update (``'r'``) we send back;
* pgoutput protocol version 1 messages: Begin, Commit, Origin, Relation, Type, Insert,
  Update, Delete, Truncate and logical decoding messages, with text-format values;
* LSN and timestamp conversions.

It does not support streaming of in-progress transactions (``streaming = on``),
two-phase commit messages, protocol versions above 1 or binary mode: their tags or
values raise :class:`~dblog_worker.errors.ProtocolError`. Text values are decoded as
UTF-8, so the source database must use the UTF8 encoding.

Decoding is strict: a truncated message, an unknown tag or trailing bytes raise
``ProtocolError``, because a misread change log must stop the worker, not go on.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass
from typing import Final, NamedTuple, TypeAlias

from dblog_worker.errors import ProtocolError

PG_EPOCH_US: Final = 946_684_800 * 1_000_000
"""Microseconds from the Unix epoch to PostgreSQL's epoch, 2000-01-01T00:00:00Z."""

_XLOG = struct.Struct(">QQq")  # after 'w': start LSN, WAL end, send time
_KEEPALIVE = struct.Struct(">QqB")  # after 'k': WAL end, send time, reply requested
_STATUS = struct.Struct(">cQQQqB")
_BEGIN = struct.Struct(">QqI")
_COMMIT = struct.Struct(">BQQq")
_u64 = struct.Struct(">Q").unpack_from
_u32 = struct.Struct(">I").unpack_from  # lengths too: a "negative" one overruns the message
_u16 = struct.Struct(">H").unpack_from
_COLUMN = struct.Struct(">Ii")  # type OID, type modifier
_TRUNCATE = struct.Struct(">IB")
_MESSAGE = struct.Struct(">BQ")
_LSN = re.compile(r"([0-9A-Fa-f]{1,8})/([0-9A-Fa-f]{1,8})")


def pg_time_to_unix_us(t: int) -> int:
    return t + PG_EPOCH_US


def unix_us_to_pg_time(t: int) -> int:
    return t - PG_EPOCH_US


def format_lsn(lsn: int) -> str:
    if not 0 <= lsn < 1 << 64:
        raise ValueError(f"an LSN is an unsigned 64-bit number, got {lsn}")
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


def parse_lsn(text: str) -> int:
    match = _LSN.fullmatch(text)
    if match is None:
        raise ValueError(f"an LSN looks like '0/16B3748', got {text!r}")
    return int(match[1], 16) << 32 | int(match[2], 16)


class Unchanged:
    """The type of :data:`UNCHANGED_TOAST`: a TOASTed value the server did not send."""

    __slots__ = ()
    _instance: Unchanged | None = None

    def __new__(cls) -> Unchanged:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "UNCHANGED_TOAST"

    def __reduce__(self) -> str:
        return "UNCHANGED_TOAST"


UNCHANGED_TOAST: Final = Unchanged()

Tuple: TypeAlias = tuple[str | Unchanged | None, ...]


@dataclass(frozen=True, slots=True)
class XLogData:
    data_start: int
    wal_end: int
    send_time_us: int
    payload: memoryview


@dataclass(frozen=True, slots=True)
class Keepalive:
    wal_end: int
    send_time_us: int
    reply_requested: bool


class Begin(NamedTuple):
    final_lsn: int
    commit_ts_us: int
    xid: int


class Commit(NamedTuple):
    flags: int
    commit_lsn: int
    end_lsn: int
    commit_ts_us: int


@dataclass(frozen=True, slots=True)
class Origin:
    lsn: int
    name: str


@dataclass(frozen=True, slots=True)
class Column:
    flags: int  # 1: part of the replica identity key
    name: str
    type_oid: int
    type_modifier: int


@dataclass(frozen=True, slots=True)
class Relation:
    relation_oid: int
    namespace: str
    name: str
    replica_identity: str  # 'd' default, 'n' nothing, 'f' full, 'i' index
    columns: tuple[Column, ...]


@dataclass(frozen=True, slots=True)
class TypeMsg:
    type_oid: int
    namespace: str
    name: str


class Insert(NamedTuple):
    relation_oid: int
    new: Tuple


class Update(NamedTuple):
    relation_oid: int
    old: Tuple | None
    new: Tuple
    old_is_key_only: bool


class Delete(NamedTuple):
    relation_oid: int
    old: Tuple
    old_is_key_only: bool


@dataclass(frozen=True, slots=True)
class Truncate:
    options: int  # 1: CASCADE, 2: RESTART IDENTITY
    relation_oids: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class LogicalMessage:
    transactional: bool
    lsn: int
    prefix: str
    content: bytes


Message: TypeAlias = (
    Begin
    | Commit
    | Origin
    | Relation
    | TypeMsg
    | Insert
    | Update
    | Delete
    | Truncate
    | LogicalMessage
)


def parse_copy_data(data: bytes | memoryview) -> XLogData | Keepalive:
    """Decode one CopyData payload of ``START_REPLICATION``; the XLogData payload is a view."""
    size = len(data)
    if not size:
        raise ProtocolError("empty replication CopyData message; the stream is corrupt")
    tag = data[0]
    if tag == 0x77 and size >= 25:  # 'w'
        start, wal_end, send_time = _XLOG.unpack_from(data, 1)
        return XLogData(start, wal_end, send_time + PG_EPOCH_US, memoryview(data)[25:])
    if tag == 0x6B and size == 18:  # 'k'
        wal_end, send_time, reply = _KEEPALIVE.unpack_from(data, 1)
        return Keepalive(wal_end, send_time + PG_EPOCH_US, reply != 0)
    if tag in (0x77, 0x6B):
        raise ProtocolError(f"replication {chr(tag)!r} message of {size} bytes is malformed")
    raise ProtocolError(f"unknown replication message {chr(tag)!r}: expected 'w' or 'k'")


def standby_status_update(
    written: int, flushed: int, applied: int, now_us: int, reply_requested: bool = False
) -> bytes:
    """The 'r' message; LSNs are the next byte to write/flush/apply, ``now_us`` is Unix µs."""
    return _STATUS.pack(
        b"r", written, flushed, applied, unix_us_to_pg_time(now_us), 1 if reply_requested else 0
    )


def decode_message(payload: bytes | memoryview) -> Message:
    """Decode one pgoutput (protocol v1) message, the payload of an XLogData."""
    # One copy up front is faster than decoding values out of memoryview slices.
    buf = payload if type(payload) is bytes else bytes(payload)
    end = len(buf)
    if not end:
        raise ProtocolError("empty pgoutput message; the replication stream is corrupt")
    tag = buf[0]
    try:
        msg: Message
        if tag == 0x49:  # 'I'
            oid = _u32(buf, 1)[0]
            if buf[5] != 0x4E:
                raise ProtocolError(f"pgoutput Insert has {chr(buf[5])!r} where 'N' belongs")
            new, off = _tuple(buf, 6, end)
            msg = tuple.__new__(Insert, (oid, new))  # the NamedTuple, built in C
        elif tag == 0x55:  # 'U'
            oid = _u32(buf, 1)[0]
            kind = buf[5]
            old = None
            off = 6
            if kind == 0x4B or kind == 0x4F:  # 'K', 'O'
                old, off = _tuple(buf, 6, end)
                kind = buf[off]
                off += 1
            if kind != 0x4E:
                raise ProtocolError(f"pgoutput Update has {chr(kind)!r} where 'N' belongs")
            new, off = _tuple(buf, off, end)
            msg = Update(oid, old, new, buf[5] == 0x4B)
        elif tag == 0x44:  # 'D'
            oid = _u32(buf, 1)[0]
            kind = buf[5]
            if kind != 0x4B and kind != 0x4F:
                raise ProtocolError(f"pgoutput Delete has {chr(kind)!r} where 'K' or 'O' belongs")
            old_key, off = _tuple(buf, 6, end)
            msg = Delete(oid, old_key, kind == 0x4B)
        elif tag == 0x42:  # 'B'
            final_lsn, ts, xid = _BEGIN.unpack_from(buf, 1)
            msg, off = Begin(final_lsn, ts + PG_EPOCH_US, xid), 1 + _BEGIN.size
        elif tag == 0x43:  # 'C'
            flags, commit_lsn, end_lsn, ts = _COMMIT.unpack_from(buf, 1)
            msg = Commit(flags, commit_lsn, end_lsn, ts + PG_EPOCH_US)
            off = 1 + _COMMIT.size
        else:
            msg, off = _decode_rare(buf, tag)
    except UnicodeDecodeError as exc:
        raise ProtocolError(
            f"pgoutput {chr(tag)!r} message has text that is not UTF-8 ({exc}); "
            "the source database must use the UTF8 encoding"
        ) from exc
    except (struct.error, IndexError, ValueError) as exc:  # ValueError: no NUL in a string
        raise ProtocolError(
            f"truncated or malformed pgoutput {chr(tag)!r} message of {end} bytes ({exc}); "
            "the replication stream is corrupt or not pgoutput protocol v1 text"
        ) from exc
    if off != end:
        raise ProtocolError(
            f"pgoutput {chr(tag)!r} message has {end - off} unexpected trailing bytes; "
            "the replication stream is corrupt or not pgoutput protocol v1"
        )
    return msg


def _tuple(buf: bytes, off: int, end: int) -> tuple[Tuple, int]:
    count = _u16(buf, off)[0]
    off += 2
    values: list[str | Unchanged | None] = []
    append = values.append
    for _ in range(count):
        kind = buf[off]
        if kind == 0x74:  # 't'
            start = off + 5
            off = start + _u32(buf, off + 1)[0]
            if off > end:
                raise ProtocolError(
                    f"text value at {start} of {off - start} bytes overruns the message"
                )
            append(buf[start:off].decode())
        elif kind == 0x6E:  # 'n'
            append(None)
            off += 1
        elif kind == 0x75:  # 'u'
            append(UNCHANGED_TOAST)
            off += 1
        elif kind == 0x62:  # 'b'
            raise ProtocolError("binary tuple data is not supported; do not request binary mode")
        else:
            raise ProtocolError(f"unknown tuple value kind {chr(kind)!r} at offset {off}")
    return tuple(values), off


def _cstring(buf: bytes, off: int) -> tuple[str, int]:
    nul = buf.index(0, off)
    return buf[off:nul].decode(), nul + 1


def _decode_rare(buf: bytes, tag: int) -> tuple[Message, int]:
    if tag == 0x52:  # 'R'
        oid = _u32(buf, 1)[0]
        namespace, off = _cstring(buf, 5)
        name, off = _cstring(buf, off)
        identity = chr(buf[off])
        count = _u16(buf, off + 1)[0]
        off += 3
        columns = []
        for _ in range(count):
            flags = buf[off]
            column, off = _cstring(buf, off + 1)
            type_oid, modifier = _COLUMN.unpack_from(buf, off)
            off += _COLUMN.size
            columns.append(Column(flags, column, type_oid, modifier))
        return Relation(oid, namespace, name, identity, tuple(columns)), off
    if tag == 0x59:  # 'Y'
        oid = _u32(buf, 1)[0]
        namespace, off = _cstring(buf, 5)
        name, off = _cstring(buf, off)
        return TypeMsg(oid, namespace, name), off
    if tag == 0x4F:  # 'O'
        lsn = _u64(buf, 1)[0]
        name, off = _cstring(buf, 9)
        return Origin(lsn, name), off
    if tag == 0x54:  # 'T'
        count, options = _TRUNCATE.unpack_from(buf, 1)
        off = 1 + _TRUNCATE.size
        if off + 4 * count > len(buf):
            raise ProtocolError(f"Truncate of {count} relations overruns the message")
        return Truncate(options, struct.unpack_from(f">{count}I", buf, off)), off + 4 * count
    if tag == 0x4D:  # 'M'
        flags, lsn = _MESSAGE.unpack_from(buf, 1)
        prefix, off = _cstring(buf, 1 + _MESSAGE.size)
        size = _u32(buf, off)[0]
        start = off + 4
        off = start + size
        if off > len(buf):
            raise ProtocolError(f"logical message content of {size} bytes overruns the message")
        return LogicalMessage(flags & 1 == 1, lsn, prefix, buf[start:off]), off
    raise ProtocolError(
        f"unsupported pgoutput message {chr(tag)!r}; request proto_version '1' without "
        "streaming or two_phase"
    )
