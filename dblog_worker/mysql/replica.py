"""Chunk reads on a MariaDB read replica that replicates the source by GTID.

With ``[source.replica]`` configured, a window runs: LW written on the primary; the
primary's GTID position read once LW has committed (``@@gtid_binlog_pos``: the last GTID of
every replication domain, LW's included); the replica waits for that position with
``MASTER_GTID_WAIT`` (within a domain a replica commits in the binary log's order, parallel
replication included; across domains it may not, so every domain is waited for); the
chunk SELECTs on the replica; HW on the primary. So the SELECT sees a state between LW
and HW. A replica that does not apply LW within ``max_wait_ms``, cannot be reached, or is
not a replica of the source holds the dump (:class:`ReplicaBehind`): the window reads
nothing and the dump waits, never reading an older state. MySQL
(``WAIT_FOR_EXECUTED_GTID_SET``) is not supported yet.
"""

from __future__ import annotations

import contextlib
from typing import Any

from dblog_worker.config import ReplicaConfig, SourceConfig
from dblog_worker.errors import ReplicaBehind
from dblog_worker.mysql.chunks import connect, replica_errors
from dblog_worker.mysql.resultset import DumpConnection
from dblog_worker.names import split_table
from dblog_worker.source import Problem


def _one(conn: DumpConnection, sql: str, params: tuple[Any, ...] = ()) -> tuple[Any, ...] | None:
    with conn.cursor() as cursor:
        cursor.execute(sql, params)
        row = cursor.fetchone()
    return None if row is None else tuple(row)


class MyReplica:
    """A connection to the source's read replica (opened again after a failure, checked
    to be a MariaDB replica other than the source each time), and the wait for it to apply
    a window's low watermark. ``primary_server``: the source's ``@@server_id`` once read."""

    def __init__(self, source: SourceConfig, primary_server: str | None = None) -> None:
        assert source.replica is not None
        self.source = source
        self.config: ReplicaConfig = source.replica
        self.primary_server = primary_server
        self._conn: DumpConnection | None = None

    def connection(self) -> DumpConnection:
        if self._conn is None or not self._conn.open:
            self.close()
            conn = connect(self.config.dsn, replica_errors)
            try:
                with replica_errors("checking the read replica"):
                    self._check(conn)
            except BaseException:
                conn.close()
                raise
            self._conn = conn
        return self._conn

    def _check(self, conn: DumpConnection) -> None:
        row = _one(conn, "SELECT VERSION(), @@server_id, @@gtid_slave_pos")
        assert row is not None
        version, server, slave_pos = (str(v) for v in row)
        if "mariadb" not in version.lower():
            raise ReplicaBehind("the read replica is not MariaDB: reads on a MySQL replica are "
                                "not supported yet; remove [source.replica]; the dump waits")
        if server == self.primary_server:
            raise ReplicaBehind("the read replica is the source itself (the same server_id): "
                                "fix [source.replica] dsn; the dump waits")
        if not slave_pos:
            raise ReplicaBehind("the read replica has applied no GTID of a primary (empty "
                                "gtid_slave_pos): is it a replica using GTIDs "
                                "(MASTER_USE_GTID)? The dump waits")

    def catch_up(self, gtid: str) -> None:
        """Return once the replica has applied the GTID position ``gtid`` (one GTID per
        domain); ReplicaBehind if it does not within ``max_wait_ms``."""
        with replica_errors("waiting for the read replica"):
            conn = self.connection()
            row = _one(conn, "SELECT MASTER_GTID_WAIT(%s, %s), @@gtid_slave_pos",
                       (gtid, self.config.max_wait_ms / 1000))
        assert row is not None
        if str(row[0]) != "0":  # -1: timed out (cells are the server's text)
            raise ReplicaBehind(
                f"the read replica has not applied the low watermark ({gtid}) within "
                f"{self.config.max_wait_ms} ms (it is at {row[1] or 'nothing'}); the dump "
                "waits for it")

    def problems(self, tables: list[str]) -> list[Problem]:
        """What stops chunk reads on the replica (the dumps only)."""
        where = "[source.replica]"
        checked = MyReplica(self.source, self.primary_server)
        try:
            conn = checked.connection()
        except ReplicaBehind as exc:
            return [Problem(f"{where}: {exc}", "point [source.replica] dsn at a MariaDB "
                            "replica of the source that uses GTIDs", capture=False)]
        try:
            problems = []
            for table in tables:
                if _one(conn, "SELECT 1 FROM information_schema.TABLES WHERE table_schema = "
                              "%s AND table_name = %s", split_table(table)) is None:
                    problems.append(Problem(
                        f"table {table} is not found on the read replica",
                        "replicate the captured databases to the replica", capture=False))
            return problems
        finally:
            checked.close()

    def close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):
                self._conn.close()
            self._conn = None
