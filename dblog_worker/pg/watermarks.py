"""The watermarks of a PostgreSQL source: upserts of its row of ``dblog.watermark``, or
transactional logical decoding messages (``watermarks = "message"``: no table).

:class:`PgWatermarks` is the source's ``watermarks`` part. Each write's snapshot goes to
the log reader (:meth:`~dblog_worker.pg.log_reader.PgLogReader.observe`); on a read
replica, a window waits until the replica has replayed its low watermark.
"""

from __future__ import annotations

from collections.abc import Callable

import psycopg

from dblog_worker.errors import ConfigError, SourceUnavailable
from dblog_worker.pg.connection import Connection, connection_errors
from dblog_worker.pg.log_reader import PgLogReader
from dblog_worker.pg.options import PgOptions
from dblog_worker.pg.replica import Replica
from dblog_worker.pg.translate import message_prefix
from dblog_worker.pg.visibility import Snapshot
from dblog_worker.tables import HEARTBEAT
from dblog_worker.tables import WATERMARK_SCHEMA as SCHEMA


class PgWatermarks:
    """The source's watermarks part, written on ``conn``."""

    def __init__(self, name: str, options: PgOptions, conn: Callable[[], Connection],
                 log: PgLogReader, replica: Replica | None) -> None:
        self.name = name
        self.options = options
        self._conn = conn
        self._log = log
        self._replica = replica

    @property
    def conn(self) -> Connection:
        return self._conn()

    def write_watermark(self, token: str) -> None:
        """Write a watermark; returns once it is committed (an upsert: a lost row comes back).

        The write's snapshot goes to the translator: the transactions it did not see count
        as inside the window this watermark opens, wherever the log has them.
        """
        with connection_errors("writing a watermark"):
            if not self.options.watermark_table:
                row = self._emit_watermark(token)
            else:
                row = self._upsert_watermark(token)
        assert row is not None
        self._log.observe(Snapshot.parse(str(row[0])), None if token == HEARTBEAT else token)

    def _emit_watermark(self, token: str) -> tuple[object, ...] | None:
        """The watermark as a transactional logical decoding message (no table): it commits
        in a transaction of its own, with the snapshot of its statement."""
        try:
            return self.conn.execute(
                "SELECT pg_current_snapshot()::text "
                "FROM pg_logical_emit_message(true, %s, %s) AS m",
                (message_prefix(self.name), token)).fetchone()
        except psycopg.errors.InsufficientPrivilege as exc:
            raise ConfigError(
                f"the worker may not write watermark messages: {exc.diag.message_primary}; "
                "run `dblog preflight` for the grant") from exc

    def _upsert_watermark(self, token: str) -> tuple[object, ...] | None:
        """The watermark as an upsert of this source's row of the watermark table."""
        try:
            return self.conn.execute(
                f"INSERT INTO {SCHEMA}.watermark (source, value, written_at) "
                "VALUES (%s, %s, now()) ON CONFLICT (source) DO UPDATE "
                "SET value = excluded.value, written_at = excluded.written_at "
                "RETURNING pg_current_snapshot()::text",
                (self.name, token),
            ).fetchone()
        except psycopg.errors.UndefinedTable as exc:
            raise SourceUnavailable(
                f"the watermark table {SCHEMA}.watermark is gone: {exc.diag.message_primary}"
                "; the next session creates it again") from exc
        except psycopg.errors.LockNotAvailable as exc:
            raise SourceUnavailable(
                f"the watermark table {SCHEMA}.watermark is locked by another session: "
                f"{exc.diag.message_primary}; trying again") from exc
        except psycopg.errors.InsufficientPrivilege as exc:
            raise ConfigError(
                f"the worker may not write the watermark table {SCHEMA}.watermark: "
                f"{exc.diag.message_primary}; run `dblog preflight` for the grant") from exc

    def await_low_watermark(self) -> None:
        if self._replica is None:
            return
        with connection_errors("reading the log position"):
            row = self.conn.execute("SELECT pg_current_wal_insert_lsn()::text").fetchone()
        assert row is not None
        self._replica.catch_up(str(row[0]))

    def heartbeat(self) -> None:
        """Write to the log on an idle database, so that the slot can advance."""
        self.write_watermark(HEARTBEAT)
