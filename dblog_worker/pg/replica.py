"""Chunk reads on a read replica: a hot standby that streams the primary's WAL.

With ``[source.replica]`` configured, a window runs: LW written on the primary; the
primary's WAL insert position read (every commit up to LW is before it); the replica
polled until ``pg_last_wal_replay_lsn()`` reaches that position (a standby makes a
transaction visible when it replays its commit, in WAL order); the chunk SELECTs on the
replica; HW written on the primary. So the SELECT sees a state between LW and HW, as the
paper's rule needs. A replica that does not replay LW within ``max_wait_ms``, cannot be
reached, or cancels a SELECT for a recovery conflict makes the window read nothing
(:class:`ReplicaBehind`): the dump waits and tries again, longer each time, and never
reads an older state. The log, the watermarks, the catalog and the dump's upper bound
stay on the primary.
"""

from __future__ import annotations

import contextlib
import time

import psycopg

from dblog_worker.config import ReplicaConfig, SourceConfig
from dblog_worker.errors import ReplicaBehind
from dblog_worker.names import split_table
from dblog_worker.pg.connection import Connection, connect_replica, replica_errors
from dblog_worker.source import Problem

POLL_S = 0.001  # between two reads of the replica's replay position


IDENTITY_SQL = "SELECT system_identifier::text FROM pg_control_system()"


def identity(conn: Connection) -> str | None:
    """The cluster's system identifier (a standby has its primary's); None if the role
    may not read it."""
    try:
        row = conn.execute(IDENTITY_SQL).fetchone()
    except psycopg.errors.InsufficientPrivilege:
        return None
    return None if row is None else str(row[0])


class Replica:
    """A connection to the source's read replica (opened again after a failure, checked
    to be a standby of the source's cluster each time), and the wait for it to replay a
    window's low watermark. ``primary_identity``: the source's system identifier, once
    the worker has read it (None: not checked)."""

    def __init__(self, source: SourceConfig, primary_identity: str | None = None) -> None:
        assert source.replica is not None
        self.source = source
        self.config: ReplicaConfig = source.replica
        self.primary_identity = primary_identity
        self._conn: Connection | None = None

    def connection(self) -> Connection:
        if self._conn is None or self._conn.closed or self._conn.broken:
            self.close()
            conn = connect_replica(self.source)
            try:
                with replica_errors("checking the read replica"):
                    self._check(conn)
            except BaseException:
                conn.close()
                raise
            self._conn = conn
        return self._conn

    def _check(self, conn: Connection) -> None:
        """Read only from a standby of the source's cluster: another server's rows or
        replay position would mean nothing."""
        if conn.execute("SELECT pg_is_in_recovery()").fetchone() != (True,):
            raise ReplicaBehind("the read replica is not a standby (it is not in recovery): "
                                "fix [source.replica] dsn; the dump waits")
        if self.primary_identity is not None and identity(conn) not in (
                None, self.primary_identity):
            raise ReplicaBehind("the read replica is a standby of another cluster (its "
                                "system identifier differs from the source's): fix "
                                "[source.replica] dsn; the dump waits")

    def catch_up(self, target: str) -> None:
        """Return once the replica has replayed the primary's WAL up to ``target`` (an
        LSN); ReplicaBehind if it does not within ``max_wait_ms``."""
        deadline = time.monotonic() + self.config.max_wait_ms / 1000
        with replica_errors("waiting for the read replica"):
            conn = self.connection()
            while True:
                row = conn.execute(
                    "SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn, "
                    "pg_wal_lsn_diff(%s::pg_lsn, pg_last_wal_replay_lsn())::bigint",
                    (target, target)).fetchone()
                assert row is not None
                if row[0]:
                    return
                if time.monotonic() >= deadline:
                    behind = "no replay position (is it a standby?)" if row[1] is None \
                        else f"{int(str(row[1])):,} bytes of WAL behind"
                    raise ReplicaBehind(
                        f"the read replica has not replayed the low watermark within "
                        f"{self.config.max_wait_ms} ms ({behind}); the dump waits for it")
                time.sleep(POLL_S)

    def problems(self, primary: Connection, tables: list[str]) -> list[Problem]:
        """What stops chunk reads on the replica: unreachable, not a standby, a standby of
        another cluster, a captured table it does not have. They stop the dumps only."""
        where = f"[source.replica] ({self.config.safe_dsn(self.source.kind)})"
        checked = Replica(self.source, identity(primary))
        try:
            conn = checked.connection()
        except ReplicaBehind as exc:
            return [Problem(f"{where}: {exc}", "point [source.replica] dsn at a hot standby "
                            "(hot_standby = on) of the source database", capture=False)]
        try:
            return [
                Problem(f"table {table} is not found on the read replica {where}",
                        "connect to the same database on a standby of the source",
                        capture=False)
                for table in tables
                if conn.execute("SELECT FROM pg_class c JOIN pg_namespace n ON n.oid = "
                                "c.relnamespace WHERE n.nspname = %s AND c.relname = %s",
                                split_table(table)).fetchone() is None
            ]
        finally:
            checked.close()

    def close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):
                self._conn.close()
            self._conn = None
