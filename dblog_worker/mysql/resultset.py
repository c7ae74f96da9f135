"""Result rows read by dblog: PyMySQL's connection, with the rows of a result set parsed
by a function generated for its columns.

PyMySQL reads each row as a packet object, then each cell with a few method calls (about
4.5 µs a row of five cells here); a dump reads every row of a table. A :class:`DumpConnection`
is PyMySQL's ``Connection`` (the handshake, the commands, the result header and the column
descriptions, errors, the OK and EOF packets all stay PyMySQL's), except that the rows of a
buffered text result come from :func:`row_parser`: the packet's header read from the
connection's buffered reader, then its cells in one straight-line function per column
layout (a length byte, the slice, ``decode`` for a text column) — the very tuples PyMySQL
makes, a third of the time.

Where a result is not that, PyMySQL reads it: a column with a converter (the dump
connection has none: :data:`~dblog_worker.mysql.connection.DUMP_CONV`), a row that does not
parse (PyMySQL then says what is wrong), an unbuffered result.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, cast

from pymysql import err
from pymysql.connections import MAX_PACKET_LEN, MySQLResult
from pymysql.constants import CR
from pymysql.protocol import MysqlPacket

from dblog_worker.mysql.tls import SharedTlsConnection

__all__ = ["DumpConnection", "row_parser"]

Row = tuple[str | bytes | None, ...]
RowParser = Callable[[bytes], Row]

_NULL, _LONGER = 251, 252  # a length byte: NULL; 252 and up: a 2, 3 or 8 byte length follows


def _cell(data: bytes, off: int) -> tuple[bytes | None, int]:
    """A cell whose length does not fit in its first byte (the general case)."""
    first = data[off]
    if first == _NULL:
        return None, off + 1
    size = {252: 2, 253: 3, 254: 8}[first]
    length = int.from_bytes(data[off + 1:off + 1 + size], "little")
    start = off + 1 + size
    if start + length > len(data):
        raise IndexError("a cell overruns its row")
    return data[start:start + length], start + length


@functools.cache
def row_parser(encodings: tuple[str | None, ...]) -> RowParser:
    """A function ``row packet -> row`` for columns with these encodings (None: the
    cell's bytes as they are): the tuple PyMySQL's ``_read_row_from_packet`` makes with no
    converters. It raises (IndexError, ValueError, ...) where the packet is not such a
    row; the caller then lets PyMySQL read it.

    Generated the way ``dataclasses`` generates ``__init__``: the source holds only names
    made from column numbers and the encodings' names, checked to be codec names."""
    namespace: dict[str, object] = {"cell": _cell}
    lines = ["def parse(data):", "    off = 0"]
    for i, encoding in enumerate(encodings):
        if encoding is not None and not encoding.replace("_", "").replace("-", "").isalnum():
            raise ValueError(f"not a codec name: {encoding!r}")
        decode = "" if encoding is None else f".decode({encoding!r})"
        lines += [
            "    length = data[off]",
            f"    if length < {_NULL}:",
            "        start = off + 1",
            "        off = start + length",
            f"        v{i} = data[start:off]{decode}",
            "    else:",
            f"        v{i}, off = cell(data, off)",
            f"        if v{i} is not None:" if decode else "        pass",
            f"            v{i} = v{i}{decode}" if decode else "",
        ]
    lines += [
        "    if off != len(data):",
        "        raise ValueError('bytes left over after the last cell')",
        f"    return ({''.join(f'v{i}, ' for i in range(len(encodings)))})",
    ]
    exec("\n".join(line for line in lines if line), namespace)  # noqa: S102 - see above
    parser: RowParser = namespace["parse"]  # type: ignore[assignment]
    return parser


class _Result(MySQLResult):  # type: ignore[misc]
    """A buffered result whose rows :func:`row_parser` reads when it can."""

    connection: DumpConnection | None

    def _read_rowdata_packet(self) -> None:
        converters: Sequence[tuple[str | None, Any]] = self.converters
        if any(converter is not None for _, converter in converters):
            super()._read_rowdata_packet()
            return
        parse = row_parser(tuple(encoding for encoding, _ in converters))
        conn = cast(DumpConnection, self.connection)
        rows: list[Row] = []
        append = rows.append
        read = conn.read_payload
        while True:
            data = read()
            if data[0] == 0xFE and len(data) < 9:  # EOF
                self._check_packet_is_eof(MysqlPacket(data, conn.encoding))
                break
            if data[0] == 0xFF:
                MysqlPacket(data, conn.encoding).raise_for_error()
            try:
                append(parse(data))
            except Exception:  # PyMySQL's reading says what is wrong, or reads it
                append(self._read_row_from_packet(MysqlPacket(data, conn.encoding)))
        self.connection = None  # as PyMySQL does: no cycle
        self.affected_rows = len(rows)
        self.rows = tuple(rows)


class DumpConnection(SharedTlsConnection):
    """PyMySQL's connection, reading the rows of its buffered results with
    :func:`row_parser`."""

    _next_seq_id: int

    def _read_query_result(self, unbuffered: bool = False) -> int:
        if unbuffered:
            return int(super()._read_query_result(unbuffered))
        self._result = None
        result = _Result(self)
        result.read()
        self._result = result
        if result.server_status is not None:
            self.server_status = result.server_status
        return int(result.affected_rows)

    def read_payload(self) -> bytes:
        """The next packet's payload, read and checked as ``_read_packet`` does, without
        the packet object (a payload of 16 MB or more continues in the next packets)."""
        parts: list[bytes] = []
        while True:
            header = self._read_bytes(4)
            length = header[0] | header[1] << 8 | header[2] << 16
            expected = self._next_seq_id
            if header[3] != expected:
                self._force_close()
                if header[3] == 0:  # MariaDB sends an error packet numbered 0 at shutdown
                    raise err.OperationalError(CR.CR_SERVER_LOST,
                                               "Lost connection to MySQL server during query")
                raise err.InternalError(f"Packet sequence number wrong - got {header[3]} "
                                        f"expected {expected}")
            self._next_seq_id = (expected + 1) % 256
            data: bytes = self._read_bytes(length)
            if length < MAX_PACKET_LEN and not parts:
                return data
            parts.append(data)
            if length < MAX_PACKET_LEN:
                return b"".join(parts)
