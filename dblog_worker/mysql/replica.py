"""Chunk reads on a MariaDB read replica that replicates the source by GTID.

With ``[source.replica]`` configured, a window runs: LW written on the primary; the
primary's GTID position read once LW has committed (``@@gtid_binlog_pos``: the last GTID of
every replication domain, LW's included); the replica waits for that position with
``MASTER_GTID_WAIT`` (within a domain a replica commits in the binary log's order, parallel
replication included; across domains it may not, so every domain is waited for); the
chunk SELECTs on the replica; HW on the primary. So the SELECT sees a state between LW
and HW -- if the replica replicates this source: ``MASTER_GTID_WAIT`` compares sequence
numbers only, so a replica that applied a stranger's GTIDs of the same domain (re-pointed
to another primary, a domain id used twice, ``RESET MASTER`` on the source) would pass at
once and the chunks would read an unrelated state. After the wait, every GTID the replica
applied in the source's domains must be one the source logged (its
``@@gtid_binlog_state``, read after the wait: it only grows). A replica that does not
apply LW within ``max_wait_ms``, cannot be reached, or is not a replica of the source
holds the dump (:class:`ReplicaBehind`): the window reads nothing and the dump waits,
never reading an older or unrelated state. MySQL (``WAIT_FOR_EXECUTED_GTID_SET``) is not
supported yet.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

from dblog_worker.config import ReplicaConfig, SourceConfig
from dblog_worker.errors import ReplicaBehind
from dblog_worker.mysql.chunks import connect, replica_errors
from dblog_worker.mysql.resultset import DumpConnection
from dblog_worker.names import split_table
from dblog_worker.source import Problem


def foreign_gtids(applied: str, source_state: str) -> list[str]:
    """The GTIDs of ``applied`` (a replica's ``@@gtid_slave_pos``) in the domains of
    ``source_state`` (a source's ``@@gtid_binlog_state``: the last sequence number of
    every domain and server) that the source never logged: of a server it has no GTID of
    in that domain, or past its last one."""
    logged: dict[tuple[str, str], int] = {}
    for gtid in filter(None, (g.strip() for g in source_state.split(","))):
        domain, server, seq = gtid.split("-")
        logged[domain, server] = max(logged.get((domain, server), 0), int(seq))
    domains = {domain for domain, _ in logged}
    foreign = []
    for gtid in filter(None, (g.strip() for g in applied.split(","))):
        domain, server, seq = gtid.split("-")
        if domain in domains and int(seq) > logged.get((domain, server), -1):
            foreign.append(gtid)
    return foreign


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

    def catch_up(self, gtid: str, source_state: Callable[[], str]) -> None:
        """Return once the replica has applied the GTID position ``gtid`` (one GTID per
        domain) of the source, whose ``@@gtid_binlog_state`` ``source_state`` reads;
        ReplicaBehind if it does not within ``max_wait_ms``, or if what it applied is not
        the source's."""
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
        self.check_history(str(row[1] or ""), source_state())

    def xa_prepared(self, position: str) -> list[tuple[object, ...]] | None:
        """``XA RECOVER`` on the replica once it has applied the source's GTID position
        ``position`` (its prepared XA transactions then include every one the source
        logged up to there and the replica has not committed yet); None if it has not."""
        with replica_errors("asking the read replica for its prepared XA transactions"):
            conn = self.connection()
            row = _one(conn, "SELECT MASTER_GTID_WAIT(%s, 0)", (position,))
            if row is None or str(row[0]) != "0":
                return None
            with conn.cursor() as cursor:
                cursor.execute("XA RECOVER")
                return [tuple(r) for r in cursor.fetchall()]

    def check_history(self, applied: str, source_state: str) -> None:
        """ReplicaBehind unless every GTID the replica ``applied`` in the source's domains
        is one the source logged (``source_state``: its ``@@gtid_binlog_state``)."""
        stranger = foreign_gtids(applied, source_state)
        if stranger:
            raise ReplicaBehind(
                f"the read replica has applied {', '.join(stranger)}, which the source never "
                f"logged (its binary log state is {source_state or 'empty'}): it does not "
                "replicate this source (re-pointed to another primary, a domain id used "
                "twice, RESET MASTER on the source?). Point [source.replica] dsn at a replica "
                "of this source; the dump waits")

    def problems(self, tables: list[str], source_state: str) -> list[Problem]:
        """What stops chunk reads on the replica (the dumps only); ``source_state`` is the
        source's ``@@gtid_binlog_state``."""
        where = "[source.replica]"
        checked = MyReplica(self.source, self.primary_server)
        try:
            conn = checked.connection()
            row = _one(conn, "SELECT @@gtid_slave_pos")
            checked.check_history(str(row[0] or "") if row else "", source_state)
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
