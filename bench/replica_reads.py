"""replica_reads: what a full dump costs the primary, read there or on a read replica.

The ``dump_throughput`` table (1M rows by default) on a primary with a replica: PostgreSQL,
a hot standby of the primary (``pg_basebackup``); MariaDB, a replica by GTID (the table's
rows, loaded outside the binary log as ``dump_throughput`` loads them, are loaded the same
way on the replica, so both hold the same rows). Each run dumps the table twice, the order
reversed every other run, with a fresh worker each time: chunks read on the primary, then
with ``[source.replica]`` (chunks on the replica, each window waiting for the replica to
apply its low watermark). For each: the dump's rate, the primary's CPU seconds during the
dump (its processes and children), and with the replica the replica's too.

Reported (medians): rows/s both ways, primary CPU seconds per million rows both ways, the
share of the primary's CPU the replica mode leaves (``primary_cpu_ratio``), the replica's
CPU. No target: the figure says what moving the reads costs and saves.
"""

from __future__ import annotations

import time
from typing import Any

import pymysql

from bench.common import (
    MARIADB,
    MARIADB_DATABASE,
    Environment,
    Options,
    Result,
    create_table,
    dump_timeout,
    machine,
    mariadb_row_select,
    median,
    process_cpu_seconds,
    progress,
    rounded,
)
from bench.dump_throughput import TABLE_NAME
from tests.services import MariaDBReplica, PostgresStandby

NAME = "replica_reads"
# What a run must produce: finite numbers above 0 (tests/bench: each benchmark, tiny).
FIGURES = ("primary_rows_per_s", "replica_rows_per_s")
Replica = PostgresStandby | MariaDBReplica


def start_replica(env: Environment, table: str, rows: int) -> Replica:
    if not env.is_mariadb:
        standby = PostgresStandby(env.postgres).start()
        standby.wait_replayed()
        return standby
    replica = MariaDBReplica(env.mariadb).start()
    replica.wait_applied()  # the table, not its rows (loaded outside the binary log)
    with pymysql.connect(**replica.connect_args(MARIADB_DATABASE)) as conn, \
            conn.cursor() as cursor:
        cursor.execute("SET time_zone = '+00:00'")
        cursor.execute("SET SESSION sql_log_bin = 0")
        for first in range(1, rows + 1, 1_000_000):
            cursor.execute(f"INSERT INTO {table} "
                           f"{mariadb_row_select(first, min(rows, first + 999_999))}")
    return replica


def replica_section(env: Environment, replica: Replica) -> str:
    dsn = replica.url() if isinstance(replica, MariaDBReplica) else replica.dsn(dbname="bench")
    return f'[source.replica]\ndsn = "{dsn}"\n'


def dump(env: Environment, source: str, table: str, rows: int, replica: Replica | None
         ) -> dict[str, float]:
    """One full dump by a fresh worker: seconds, and the servers' CPU seconds meanwhile."""
    worker = env.worker(source, [table], extra_config=replica_section(env, replica)
                        if replica is not None else "").start()
    try:
        primary = env.mariadb.pid if env.is_mariadb else env.postgres.pid
        def cpu() -> tuple[float, float]:
            return (process_cpu_seconds(primary),
                    0.0 if replica is None else process_cpu_seconds(replica.pid))

        before = cpu()
        request = worker.request_dump(table)
        created, completed = worker.wait_dump(request, dump_timeout(rows))
        after = cpu()
        landed = worker.landed_rows(table)
        if landed != rows:
            raise RuntimeError(f"{landed} rows landed, expected {rows}")
    finally:
        worker.cleanup()
    return {"seconds": completed - created, "primary_cpu_s": after[0] - before[0],
            "replica_cpu_s": after[1] - before[1]}


def ratio(values: list[float]) -> float | None:
    return rounded(median(values)) if values else None


def run(options: Options) -> Result:
    rows = options.rows
    with Environment(NAME, options) as env:
        table = env.table(TABLE_NAME)
        create_table(env, table, rows)
        replica = start_replica(env, table, rows)
        try:
            on_primary: list[dict[str, float]] = []
            on_replica: list[dict[str, float]] = []
            for i in range(options.runs):
                order = (False, True) if i % 2 == 0 else (True, False)
                for use_replica in order:
                    if not options.tiny:  # the servers' background work of the last dump settles
                        time.sleep(1.0)
                    result = dump(env, f"rr{i}{'r' if use_replica else 'p'}", table, rows,
                                  replica if use_replica else None)
                    (on_replica if use_replica else on_primary).append(result)
                progress(f"{NAME} run {i + 1}/{options.runs}: on the primary "
                         f"{rows / on_primary[-1]['seconds']:,.0f} rows/s, primary CPU "
                         f"{on_primary[-1]['primary_cpu_s']:.2f} s; on the replica "
                         f"{rows / on_replica[-1]['seconds']:,.0f} rows/s, primary CPU "
                         f"{on_replica[-1]['primary_cpu_s']:.2f} s, replica CPU "
                         f"{on_replica[-1]['replica_cpu_s']:.2f} s")
        finally:
            replica.stop()

    def med(runs: list[dict[str, float]], key: str) -> float:
        return median([r[key] for r in runs])

    per_million = 1e6 / rows
    report: dict[str, Any] = {
        "benchmark": NAME,
        "rows": rows,
        "runs": options.runs,
        "replica": "MariaDB replica by GTID" if options.source == MARIADB
        else "PostgreSQL hot standby (pg_basebackup)",
        "primary_rows_per_s": round(rows / med(on_primary, "seconds")),
        "replica_rows_per_s": round(rows / med(on_replica, "seconds")),
        "primary_cpu_s_per_million_rows": {
            "chunks_on_primary": rounded(med(on_primary, "primary_cpu_s") * per_million),
            "chunks_on_replica": rounded(med(on_replica, "primary_cpu_s") * per_million),
        },
        "replica_cpu_s_per_million_rows": rounded(med(on_replica, "replica_cpu_s")
                                                  * per_million),
        # runs where the primary's CPU was measurable (a tiny table can take none)
        "primary_cpu_ratio": ratio([r["primary_cpu_s"] / p["primary_cpu_s"]
                                    for r, p in zip(on_replica, on_primary, strict=True)
                                    if p["primary_cpu_s"] > 0]),
        "seconds_on_primary": [rounded(r["seconds"]) for r in on_primary],
        "seconds_on_replica": [rounded(r["seconds"]) for r in on_replica],
        "machine": machine(options.source),
    }
    return report
