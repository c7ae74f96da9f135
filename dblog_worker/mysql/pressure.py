"""What the throttle reads of a MariaDB/MySQL source: its running threads, a replica's lag.

``Threads_running`` (no privilege needed) counts every thread running a command: the
worker's own query and the binary log dump threads (the worker's, and those of other
replicas when the role may see them: PROCESS) are left out.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dblog_worker.mysql.connection import connection_errors, replica_errors
from dblog_worker.mysql.resultset import DumpConnection

ACTIVE_SESSIONS = (
    "SELECT CAST(VARIABLE_VALUE AS SIGNED) - 1 - (SELECT COUNT(*) FROM "
    "information_schema.PROCESSLIST WHERE COMMAND LIKE 'Binlog Dump%') "
    "FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME = 'THREADS_RUNNING'"
)


class MyPressure:
    """The source's pressure part: its running threads on ``conn`` (the source's
    connection), and the lag of the read replica on ``replica`` (its connection) if any."""

    def __init__(self, conn: Callable[[], Any],
                 replica: Callable[[], DumpConnection] | None) -> None:
        self._conn = conn
        self._replica = replica

    def active_sessions(self) -> int:
        return active_sessions(self._conn())

    def replica_lag_ms(self) -> float | None:
        if self._replica is None:
            return None
        return replica_lag_ms(self._replica())


def active_sessions(conn: Any) -> int:
    with connection_errors("counting the active sessions"), conn.cursor() as cursor:
        cursor.execute(ACTIVE_SESSIONS)
        row = cursor.fetchone()
    return 0 if row is None or row[0] is None else max(0, int(row[0]))


def replica_lag_ms(replica: DumpConnection) -> float | None:
    """``Seconds_Behind_Master`` of the replica (whole seconds); None while its SQL thread
    does not run or the role may not read it."""
    with replica_errors("reading the read replica's lag"), replica.cursor() as cursor:
        cursor.execute("SHOW SLAVE STATUS")
        row = cursor.fetchone()
        names = [str(d[0]) for d in cursor.description or ()]
    if row is None or "Seconds_Behind_Master" not in names:
        return None
    value = row[names.index("Seconds_Behind_Master")]
    return None if value is None else float(value) * 1000
