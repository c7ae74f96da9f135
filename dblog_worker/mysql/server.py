"""A MySQL or MariaDB server as its source sees it: one PyMySQL connection in autocommit
(setup, the catalog, watermark writes and chunk SELECTs share it), which kind of server it
is, and where its binary log ends now."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

import pymysql

from dblog_worker.errors import SourceUnavailable
from dblog_worker.mysql.checkpoint import BinlogCheckpoint
from dblog_worker.mysql.connection import connect, connection_errors

_PARSE_ERROR = 1064  # SHOW BINARY LOG STATUS on MariaDB or MySQL before 8.2


class MyServer:
    """The source's connection (``connect``ed on its DSN), and the server's facts."""

    def __init__(self, dsn: str) -> None:
        self._dsn = dsn
        self._conn: pymysql.connections.Connection[Any] | None = None
        self.is_mariadb = False
        self.id = ""  # which server: "server_id=1" (MariaDB), "server_uuid=…" (MySQL)
        self._status_sql = "SHOW BINARY LOG STATUS"

    def connect(self) -> None:
        self._conn = connect(self._dsn)
        version = str(self.one("SELECT VERSION()")[0])
        self.is_mariadb = "mariadb" in version.lower()
        variable = "server_id" if self.is_mariadb else "server_uuid"
        self.id = f"{variable}={self.one(f'SELECT @@{variable}')[0]}"

    @property
    def conn(self) -> pymysql.connections.Connection[Any]:
        if self._conn is None or not self._conn.open:
            raise SourceUnavailable("not connected to the source database")
        return self._conn

    def rows(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with connection_errors("querying"), self.conn.cursor() as cursor:
            cursor.execute(sql, params)
            return list(cursor.fetchall())

    def one(self, sql: str, params: Sequence[Any] = ()) -> tuple[Any, ...]:
        rows = self.rows(sql, params)
        if not rows:
            raise SourceUnavailable(f"{sql.split()[0]} returned no row")
        return rows[0]

    def binlog_status(self) -> tuple[Any, ...]:
        """``SHOW BINARY LOG STATUS`` (MySQL 8.2+; 8.4 has nothing else), or ``SHOW MASTER
        STATUS`` (MariaDB, older MySQL): file, position, ..., and on MySQL the executed
        GTID set."""
        if self._status_sql == "SHOW BINARY LOG STATUS":
            try:
                return self.one(self._status_sql)
            except pymysql.err.ProgrammingError as exc:
                if not exc.args or exc.args[0] != _PARSE_ERROR:
                    raise
                self._status_sql = "SHOW MASTER STATUS"
        return self.one(self._status_sql)

    def current(self) -> BinlogCheckpoint:
        """The end of the binary log now, with the GTID state there."""
        row = self.binlog_status()
        file, pos = str(row[0]), int(row[1])
        if self.is_mariadb:
            gtid = str(self.one("SELECT BINLOG_GTID_POS(%s, %s)", (file, pos))[0] or "")
        else:  # Executed_Gtid_Set, consistent with file and position; empty if GTIDs are off
            gtid = "".join(str(row[4] or "").split()) if len(row) > 4 else ""
        return BinlogCheckpoint(file, pos, gtid, self.id)

    def binlog_state(self) -> str:
        return str(self.one("SELECT @@gtid_binlog_state")[0] or "")

    def close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):  # a broken connection may not close cleanly
                self._conn.close()
            self._conn = None
