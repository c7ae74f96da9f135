"""What the throttle reads of a PostgreSQL source: its active sessions, a standby's lag.

``pg_stat_activity`` shows the state of other roles' sessions only to a superuser or a
member of ``pg_read_all_stats`` (``pg_monitor``): without it, sessions of other roles
are not counted.
"""

from __future__ import annotations

from collections.abc import Callable

from dblog_worker.pg.connection import Connection, connection_errors, replica_errors

ACTIVE_SESSIONS = (
    "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend' "
    "AND state = 'active' AND pid <> pg_backend_pid()"
)
# A standby that has replayed all it received is not behind, however old its last replayed
# commit; otherwise, the age of that commit.
REPLAY_LAG_MS = (
    "SELECT CASE WHEN pg_last_wal_receive_lsn() IS NULL "
    "OR pg_last_wal_receive_lsn() <= pg_last_wal_replay_lsn() THEN 0 "
    "ELSE greatest(0, extract(epoch FROM clock_timestamp() - pg_last_xact_replay_timestamp())"
    " * 1000) END"
)


class PgPressure:
    """The source's pressure part: its active sessions on ``conn`` (the source's
    connection), and the lag of the read replica on ``replica`` (its connection) if any."""

    def __init__(self, conn: Callable[[], Connection],
                 replica: Callable[[], Connection] | None) -> None:
        self._conn = conn
        self._replica = replica

    def active_sessions(self) -> int:
        return active_sessions(self._conn())

    def replica_lag_ms(self) -> float | None:
        if self._replica is None:
            return None
        return replay_lag_ms(self._replica())


def active_sessions(conn: Connection) -> int:
    with connection_errors("counting the active sessions"):
        row = conn.execute(ACTIVE_SESSIONS).fetchone()
    return 0 if row is None else int(row[0])


def replay_lag_ms(replica: Connection) -> float | None:
    with replica_errors("reading the read replica's lag"):
        row = replica.execute(REPLAY_LAG_MS).fetchone()
    return None if row is None or row[0] is None else float(row[0])
