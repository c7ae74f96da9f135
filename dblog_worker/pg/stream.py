"""The PostgreSQL log: a pgoutput stream read at the libpq level, without blocking.

``poll`` reads what the server has sent (waiting on the socket at most
``timeout`` when nothing is there), decodes it and hands the messages to the
:class:`LogTranslator`. Keepalives are answered; between transactions a keepalive's
WAL end becomes a :class:`Checkpoint`, so an idle slot advances. ``confirm`` tells
the server what is durable; nothing else is ever confirmed.
"""

from __future__ import annotations

import contextlib
import select
import struct
import time

import psycopg
from psycopg import pq

from dblog_worker.errors import SourceUnavailable
from dblog_worker.events import LogItem
from dblog_worker.pg import pgoutput as pg
from dblog_worker.pg.translate import LogTranslator
from dblog_worker.pg.values import libpq_options

_XLOG_HEADER = 25  # 'w', start LSN, WAL end, send time
_XLOG_LSNS = struct.Struct(">QQ")


class ReplicationStream:
    def __init__(
        self,
        dsn: str,
        slot: str,
        publication: str,
        translator: LogTranslator,
        *,
        status_interval_s: float = 10.0,
        messages: bool = False,
    ) -> None:
        self._dsn = dsn
        self._messages = messages  # logical decoding messages too (watermarks = "message")
        self._slot = slot
        self._publication = publication
        self.translator = translator
        self._status_interval_s = status_interval_s
        self._conn: psycopg.Connection[tuple[object, ...]] | None = None
        self.received_lsn = 0  # end of the last XLogData or keepalive seen
        self.confirmed_lsn = 0  # durable in the output; what the slot may forget
        self.server_wal_end = 0
        self._last_status = 0.0

    def start(self, lsn: int) -> None:
        try:
            self._conn = psycopg.connect(
                self._dsn, replication="database", autocommit=True, options=libpq_options()
            )
            pgconn = self._conn.pgconn
            command = (
                f'START_REPLICATION SLOT "{self._slot}" LOGICAL {pg.format_lsn(lsn)} '
                f"(proto_version '1', publication_names '{self._publication}'"
                + (", messages 'true')" if self._messages else ")")
            )
            pgconn.send_query(command.encode())
            while True:
                pgconn.consume_input()
                if not pgconn.is_busy():
                    break
                select.select([pgconn.socket], [], [], 1.0)
            result = pgconn.get_result()
        except psycopg.OperationalError as exc:
            self.close()
            raise SourceUnavailable(f"cannot start the log stream: {exc}") from exc
        if result is None or result.status != pq.ExecStatus.COPY_BOTH:
            message = pgconn.get_error_message().strip()
            self.close()
            raise SourceUnavailable(f"START_REPLICATION failed: {message}")
        self.confirmed_lsn = lsn
        self.received_lsn = lsn

    def poll(self, timeout: float, out: list[LogItem], max_messages: int = 20_000) -> None:
        """Append what arrived to ``out``; wait up to ``timeout`` seconds if nothing did."""
        pgconn = self._pgconn()
        translate, insert = self.translator.translate, self.translator.insert
        decode = pg.decode_message
        count = 0
        waited = False
        last_xlog = None
        try:
            while count < max_messages:
                size, data = pgconn.get_copy_data(1)
                if size == 0:
                    if waited or count:
                        break
                    waited = True
                    if select.select([pgconn.socket], [], [], timeout)[0]:
                        pgconn.consume_input()
                    continue
                if size < 0:
                    raise SourceUnavailable("the server ended the log stream")
                count += 1
                if data[0] == 0x77 and size > _XLOG_HEADER:  # 'w' XLogData: the hot path
                    message = bytes(data[_XLOG_HEADER:])
                    if message[0] != 0x49 or not insert(message, out):  # 'I' Insert
                        translate(decode(message), out)
                    last_xlog = data
                    continue
                frame = pg.parse_copy_data(data)
                if isinstance(frame, pg.XLogData):
                    translate(decode(frame.payload), out)
                    last_xlog = data
                else:
                    self.server_wal_end = frame.wal_end
                    if not self.translator.in_transaction and frame.wal_end > self.received_lsn:
                        self.received_lsn = frame.wal_end
                        out.append(self.translator.checkpoint(frame.wal_end))
                    if frame.reply_requested:
                        self.send_status()
        except psycopg.OperationalError as exc:
            raise SourceUnavailable(f"the log stream broke: {exc}") from exc
        if last_xlog is not None:
            start, wal_end = _XLOG_LSNS.unpack_from(last_xlog, 1)
            self.received_lsn = max(self.received_lsn, start)
            self.server_wal_end = wal_end
        if time.monotonic() - self._last_status > self._status_interval_s:
            self.send_status()

    def confirm(self, lsn: int) -> None:
        """Everything before ``lsn`` is durable: the slot may release it."""
        if lsn > self.confirmed_lsn:
            self.confirmed_lsn = lsn
            self.send_status()

    def send_status(self) -> None:
        pgconn = self._pgconn()
        now = pg.unix_us_to_pg_time(time.time_ns() // 1000)
        message = pg.standby_status_update(
            self.received_lsn, self.confirmed_lsn, self.confirmed_lsn, now
        )
        try:
            if pgconn.put_copy_data(message) != 1 or pgconn.flush() != 0:
                raise SourceUnavailable("cannot send a status update to the server")
        except psycopg.OperationalError as exc:
            raise SourceUnavailable(f"the log stream broke: {exc}") from exc
        self._last_status = time.monotonic()

    def close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):  # a broken connection may not close cleanly
                self._conn.close()
            self._conn = None

    def _pgconn(self) -> pq.abc.PGconn:
        if self._conn is None:
            raise SourceUnavailable("the log stream is not started")
        return self._conn.pgconn
