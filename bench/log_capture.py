"""log_capture: inserts streamed from the log into the landing zone vs. a bare pgoutput reader.

Workload: ``rows`` new rows in 100 transactions (one ``INSERT ... SELECT
generate_series`` each) into a captured table, as fast as one connection commits them.
Each transaction also reads ``pg_current_wal_insert_lsn()`` just before its commit: a
lower bound of its commit LSN.

Worker: ``dblog run`` on the table; done when its Redis checkpoint (saved only after the
landing output covering it is durable) passes the last transaction's LSN. Rate = rows /
(time done - time the first transaction committed). The landed row count is checked.

Physical limit: ``pg_recvlogical`` (PostgreSQL's C client) on a slot of its own made
before the workload, streaming the same changes with pgoutput to ``/dev/null`` up to the
WAL's end, timed alone after the workload (``c_client_inserts_per_s``).

Raw: a plain pgoutput reader (``python -m bench.log_capture --reader``: psycopg
replication connection, ``START_REPLICATION ... (proto_version '1', publication_names
...)``, ``get_copy_data`` + ``select``, counting XLogData messages and inserts, answering
keepalives) on its own slot, over the same workload, timed the same way.

Each run does both phases, alternating the order, each on a freshly truncated table with
only its own slot in place (so neither decoder competes with the other).

CPU: the worker's, the raw reader's and the database server's (its process and children:
the inserts, the walsender's decoding) CPU seconds in each phase, per event, and the rate
the machine's cores allow each phase if all of it overlapped perfectly
(``cpu_bound_events_per_s``; ``bench.common.cpu_bound``), so a figure can be read against
what the machine can do, not only against another reader.

MariaDB (``--source mariadb``): the same workload (``INSERT ... SELECT`` from the
SEQUENCE engine's ``seq_<first>_to_<last>``, autocommit: one statement, one
transaction) into ``bench.log_src``; the end of the last transaction is ``SHOW MASTER
STATUS`` right after it, and the worker is done when its Redis checkpoint (binlog file
and position, saved once durable) reaches it. Raw: ``python -m bench.log_capture
--binlog-reader SPEC``, mysql-replication alone: a ``BinLogStreamReader`` with the
worker's options (``binlog.BinlogReader``: blocking, 1 s heartbeat, the same event
types and schemas, ``values.BINLOG_READER_OPTIONS``, resuming by file and position; its
own replica id) from the binlog position before the workload, decoding every row of
the table's row events (``event.rows``) until it has all of them. Then a second phase
on the same rows: ``rows`` rows updated (``UPDATE ... SET a = a + 1, d = d + INTERVAL 1
SECOND WHERE id BETWEEN ...``, 100 transactions), raw reader (a new one, from the
position before the updates) vs. the same worker, timed the same way. Targets (issue
16): worker inserts/s >= 3 x raw inserts/s, measured in the same run, and >= 100,000;
updates >= 60,000 events/s. PostgreSQL: >= 150,000 events/s and >= 0.8 x the raw reader.
The physical limit, after each raw phase: ``mariadb-binlog --verbose`` (MariaDB's own C
decoder) reading the same range of the binary log from the server, every row decoded to
text, timed alone (``c_decoder_inserts_per_s``, ``c_decoder_updates_per_s``).
"""

from __future__ import annotations

import json
import select
import struct
import subprocess
import sys
import time
from typing import Any

import psycopg
from psycopg import pq

from bench.common import (
    MARIADB,
    ROOT,
    Environment,
    Options,
    Result,
    cpu_bound,
    create_table,
    die_with_parent,
    drop_slot,
    insert_rows,
    machine,
    mariadb_row_select,
    median,
    mysql_log_position,
    mysql_master_status,
    progress,
    rounded,
    wait_until,
)
from dblog_worker.pg.pgoutput import parse_lsn

NAME = "log_capture"
# What a run must produce: finite numbers above 0 (tests/bench: each benchmark, tiny).
FIGURES = ("raw_inserts_per_s", "worker_events_per_s", "ratio")
TABLE = "public.log_src"
TRANSACTIONS = 100
TARGET_EVENTS_PER_S = 150_000  # issue 16: and >= TARGET_RATIO x the bare pgoutput reader
TARGET_RATIO = 0.8
RAW_SLOT = "bench_raw"
C_SLOT = "bench_c"  # pg_recvlogical's, for the physical limit
C_CLIENT = "pg_recvlogical"
RAW_PUBLICATION = "bench_raw"
PG_EPOCH_OFFSET_US = 946_684_800 * 1_000_000


def workload(env: Environment, rows: int) -> tuple[float, float, int]:
    """Insert the rows; (first commit, last commit) as Unix times, and the last LSN bound."""
    per = rows // TRANSACTIONS
    first_commit = 0.0
    last_lsn = ""
    with env.connect() as conn:
        for t in range(TRANSACTIONS):
            last = rows if t == TRANSACTIONS - 1 else (t + 1) * per
            with conn.transaction():
                insert_rows(conn, TABLE, t * per + 1, last)
                row = conn.execute("SELECT pg_current_wal_insert_lsn()::text").fetchone()
                assert row is not None
                last_lsn = str(row[0])
            if t == 0:
                first_commit = time.time()
        return first_commit, time.time(), parse_lsn(last_lsn)


def reset_table(env: Environment) -> None:
    with env.connect() as conn:
        conn.execute(f"TRUNCATE {TABLE}".encode())
        conn.execute("CHECKPOINT")


def worker_phase(env: Environment, source: str, rows: int) -> dict[str, float]:
    worker = env.worker(source, [TABLE]).start()
    try:
        with env.redis_client() as client:
            cpu, server_cpu = worker.cpu_seconds(), env.server_cpu_seconds()
            first, inserted, last_lsn = workload(env, rows)
            wait_until(lambda: worker.checkpoint_lsn(client) >= last_lsn, 120 + rows / 5_000,
                       "the worker's checkpoint to pass the last commit",
                       worker.check_alive, 0.01)
            durable = time.time()
            cpu = worker.cpu_seconds() - cpu
            server_cpu = env.server_cpu_seconds() - server_cpu
        landed = worker.landed_rows(TABLE)
        if landed != rows:
            raise RuntimeError(f"{landed} rows landed, expected {rows}")
    finally:
        worker.cleanup()
    return {"insert_s": inserted - first, "seconds": durable - first, "cpu_s": cpu,
            "server_cpu_s": server_cpu}


def raw_phase(env: Environment, rows: int) -> dict[str, float]:
    with env.connect() as conn:
        for slot in (RAW_SLOT, C_SLOT):
            conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))
    reader = subprocess.Popen(
        [sys.executable, "-m", "bench.log_capture", "--reader", env.dsn, RAW_SLOT,
         RAW_PUBLICATION, str(rows)],
        stdout=subprocess.PIPE, text=True, cwd=ROOT, preexec_fn=die_with_parent(),
    )
    try:
        assert reader.stdout is not None
        if reader.stdout.readline().strip() != "ready":
            raise RuntimeError("the raw pgoutput reader did not start")
        server_cpu = env.server_cpu_seconds()
        first, inserted, _ = workload(env, rows)
        out, _ = reader.communicate(timeout=120 + rows / 5_000)
        server_cpu = env.server_cpu_seconds() - server_cpu
        report: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    finally:
        if reader.poll() is None:
            reader.kill()
            reader.wait()
        drop_slot(env, RAW_SLOT)
    try:
        c_decoder_s = c_client_seconds(env)
    finally:
        drop_slot(env, C_SLOT)
    if report["inserts"] != rows:
        raise RuntimeError(f"raw reader saw {report['inserts']} inserts, expected {rows}")
    return {"insert_s": inserted - first, "seconds": report["last_at"] - first,
            "messages": report["messages"], "c_decoder_s": c_decoder_s,
            "cpu_s": report["cpu_s"], "server_cpu_s": server_cpu}


def c_client_seconds(env: Environment) -> float:
    """The physical limit: ``pg_recvlogical`` (PostgreSQL's C client) streaming the same
    changes with pgoutput from a slot made before the workload, to the WAL's end now; its
    wall time (after the workload: the walsender's decoding and the transfer alone)."""
    with env.connect() as conn:
        row = conn.execute("SELECT pg_current_wal_insert_lsn()::text").fetchone()
        assert row is not None
    started = time.perf_counter()
    subprocess.run([C_CLIENT, "--dbname", env.dsn, "--slot", C_SLOT, "--start",
                    f"--endpos={row[0]}", "--no-loop", "-o", "proto_version=1",
                    "-o", f"publication_names={RAW_PUBLICATION}", "-f", "-"],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=600)
    return time.perf_counter() - started


def run(options: Options) -> Result:
    if options.source == MARIADB:
        return run_mariadb(options)
    rows = options.rows
    with Environment(NAME, options) as env:
        create_table(env, TABLE, 0)
        with env.connect() as conn:
            conn.execute(f"CREATE PUBLICATION {RAW_PUBLICATION} FOR TABLE {TABLE}".encode())
        worker: list[dict[str, float]] = []
        raw: list[dict[str, float]] = []
        for i in range(options.runs):
            order = ("raw", "worker") if i % 2 == 0 else ("worker", "raw")
            for what in order:
                reset_table(env)
                if what == "raw":
                    raw.append(raw_phase(env, rows))
                else:
                    worker.append(worker_phase(env, f"lc{i}", rows))
            progress(f"{NAME} run {i + 1}/{options.runs}: pg_recvlogical "
                     f"{rows / raw[-1]['c_decoder_s']:,.0f} inserts/s, raw "
                     f"{rows / raw[-1]['seconds']:,.0f} "
                     f"inserts/s, worker {rows / worker[-1]['seconds']:,.0f} events/s "
                     f"(inserting took {worker[-1]['insert_s']:.2f} s)")
    raw_s = [r["seconds"] for r in raw]
    worker_s = [w["seconds"] for w in worker]
    ratios = [r / w for r, w in zip(raw_s, worker_s, strict=True)]
    worker_rate = rows / median(worker_s)
    return {
        "benchmark": NAME,
        "rows": rows,
        "transactions": TRANSACTIONS,
        "runs": options.runs,
        "raw_messages_per_s": round(median([r["messages"] / r["seconds"] for r in raw])),
        "raw_inserts_per_s": round(rows / median(raw_s)),
        "c_client_inserts_per_s": round(rows / median([r["c_decoder_s"] for r in raw])),
        "worker_events_per_s": round(worker_rate),
        "ratio": rounded(median(ratios)),
        "worker_cpu_us_per_event": rounded(median([w["cpu_s"] for w in worker]) / rows * 1e6, 2),
        **cpu_figures(rows, worker, raw),
        "target_events_per_s": TARGET_EVENTS_PER_S,
        "target_ratio": TARGET_RATIO,
        "target_met": worker_rate >= TARGET_EVENTS_PER_S and median(ratios) >= TARGET_RATIO,
        "insert_s": rounded(median([r["insert_s"] for r in raw + worker])),
        "raw_s": [rounded(s) for s in raw_s],
        "worker_s": [rounded(s) for s in worker_s],
        "run_ratios": [rounded(r) for r in ratios],
        "machine": machine(),
    }


CPU_FIGURES = ("server_cpu_us_per_event", "raw_server_cpu_us_per_event", "raw_cpu_us_per_event",
               "cpu_bound_events_per_s", "cpu_bound_raw_events_per_s",
               "cpu_bound_free_worker_events_per_s")


def cpu_figures(rows: int, worker: list[dict[str, float]],
                raw: list[dict[str, float]]) -> dict[str, Any]:
    """Where the machine's CPU goes in each phase, per event, and the rates its cores allow
    (:func:`bench.common.cpu_bound`): the server's work (the inserts, the log's decoding
    for the reader) is the same in both phases, and the readers' own cost is the rest."""
    server_s = median([w["server_cpu_s"] for w in worker])
    worker_s = median([w["cpu_s"] for w in worker])
    raw_server_s = median([r["server_cpu_s"] for r in raw])
    raw_s = median([r["cpu_s"] for r in raw])
    return {
        "server_cpu_us_per_event": rounded(server_s / rows * 1e6, 2),
        "raw_server_cpu_us_per_event": rounded(raw_server_s / rows * 1e6, 2),
        "raw_cpu_us_per_event": rounded(raw_s / rows * 1e6, 2),
        "cpu_bound_events_per_s": cpu_bound(rows, server_s, worker_s),
        "cpu_bound_raw_events_per_s": cpu_bound(rows, raw_server_s, raw_s),
        "cpu_bound_free_worker_events_per_s": cpu_bound(rows, server_s),
    }


# -- the raw reader (a child process) ---------------------------------------------------


def _status_update(lsn: int) -> bytes:
    now = time.time_ns() // 1000 - PG_EPOCH_OFFSET_US
    return struct.pack(">cQQQqB", b"r", lsn, lsn, lsn, now, 0)


def reader_main(dsn: str, slot: str, publication: str, expected: int) -> int:
    """Count XLogData messages and inserts until ``expected`` inserts; report as JSON."""
    conn = psycopg.connect(dsn, replication="database", autocommit=True)
    try:
        pgconn = conn.pgconn
        pgconn.send_query(f"START_REPLICATION SLOT {slot} LOGICAL 0/0 (proto_version '1', "
                          f"publication_names '{publication}')".encode())
        while True:
            pgconn.consume_input()
            if not pgconn.is_busy():
                break
            select.select([pgconn.socket], [], [], 1.0)
        result = pgconn.get_result()
        if result is None or result.status != pq.ExecStatus.COPY_BOTH:
            raise RuntimeError(pgconn.get_error_message())
        print("ready", flush=True)
        sock, get = pgconn.socket, pgconn.get_copy_data
        unpack_lsn = struct.Struct(">Q").unpack_from
        messages = inserts = size_total = 0
        received = 0
        first_at = 0.0
        while inserts < expected:
            size, data = get(1)
            if size == 0:
                select.select([sock], [], [], 1.0)
                pgconn.consume_input()
                continue
            if size < 0:
                raise RuntimeError("the server ended the stream")
            tag = data[0]
            if tag == 0x77:  # 'w': XLogData
                messages += 1
                size_total += size
                if data[25] == 0x49:  # 'I': Insert
                    if not inserts:
                        first_at = time.time()
                    inserts += 1
            elif tag == 0x6B:  # 'k': keepalive
                received = max(received, unpack_lsn(data, 1)[0])
                if data[17]:
                    pgconn.put_copy_data(_status_update(received))
                    pgconn.flush()
        last_at = time.time()
    finally:
        conn.close()
    print(json.dumps({"messages": messages, "inserts": inserts, "bytes": size_total,
                      "first_at": first_at, "last_at": last_at,
                      "cpu_s": time.process_time()}), flush=True)
    return 0


# -- MariaDB -------------------------------------------------------------------------

MY_TABLE_NAME = "log_src"
MY_TARGET_RATIO = 3.0  # issue 16: >= 3 x mysql-replication alone, and >= MY_TARGET_EVENTS_PER_S
MY_TARGET_EVENTS_PER_S = 100_000
MY_TARGET_UPDATES_PER_S = 60_000
C_DECODER = "mariadb-binlog"  # MariaDB's own binary log decoder (mariadb-client-core)
RAW_SERVER_ID = 4_242_424  # the raw reader's replica id (a worker's is 10**9 + crc32)
INSERT, UPDATE = "insert", "update"


def my_workload(env: Environment, table: str, rows: int,
                kind: str) -> tuple[float, float, tuple[int, int]]:
    """Insert (or update) rows 1..rows in TRANSACTIONS autocommit statements; (first
    commit, last commit) as Unix times and the binlog position after the last one."""
    per = rows // TRANSACTIONS
    first_commit = 0.0
    with env.mysql_connect() as conn, conn.cursor() as cursor:
        for t in range(TRANSACTIONS):
            first, last = t * per + 1, rows if t == TRANSACTIONS - 1 else (t + 1) * per
            if kind == INSERT:
                cursor.execute(f"INSERT INTO {table} {mariadb_row_select(first, last)}")
            else:
                cursor.execute(f"UPDATE {table} SET a = a + 1, d = d + INTERVAL 1 SECOND "
                               "WHERE id BETWEEN %s AND %s", (first, last))
            if t == 0:
                first_commit = time.time()
        committed = time.time()
        return first_commit, committed, mysql_log_position(cursor)


def my_reset_table(env: Environment, table: str) -> None:
    with env.mysql_connect() as conn, conn.cursor() as cursor:
        cursor.execute(f"TRUNCATE TABLE {table}")


def my_worker_phase(env: Environment, source: str, table: str,
                    rows: int) -> dict[str, dict[str, float]]:
    """One worker: the inserts, then the updates; per kind, timings and CPU seconds."""
    worker = env.worker(source, [table]).start()
    result: dict[str, dict[str, float]] = {}
    try:
        with env.redis_client() as client:
            for kind, timeout in ((INSERT, 120 + rows / 5_000), (UPDATE, 120 + rows / 2_000)):
                worker.profile_phase(kind)
                cpu, server_cpu = worker.cpu_seconds(), env.server_cpu_seconds()
                first, committed, last = my_workload(env, table, rows, kind)

                def passed(last: tuple[int, int] = last) -> bool:
                    return worker.checkpoint_position(client) >= last

                wait_until(passed, timeout, "the worker's checkpoint to pass the last commit",
                           worker.check_alive, 0.01)
                durable = time.time()
                cpu = worker.cpu_seconds() - cpu
                result[kind] = {"workload_s": committed - first, "seconds": durable - first,
                                "cpu_s": cpu,
                                "server_cpu_s": env.server_cpu_seconds() - server_cpu}
            worker.profile_phase("end")
        landed, expected = worker.landed_rows(table), 2 * rows
        if landed != expected:
            raise RuntimeError(f"{landed} rows landed, expected {expected}")
    finally:
        worker.cleanup()
    return result


def my_raw_phase(env: Environment, table: str, rows: int) -> dict[str, dict[str, float]]:
    """A raw reader for the inserts, then another for the updates."""
    database, name = table.split(".", 1)
    result: dict[str, dict[str, float]] = {}
    for kind in (INSERT, UPDATE):
        with env.mysql_connect() as conn, conn.cursor() as cursor:
            file, pos = mysql_master_status(cursor)
        args = env.mysql_args()
        spec = {"host": args["host"], "port": args["port"], "user": args["user"],
                "password": args["password"], "file": file, "pos": pos,
                "database": database, "table": name, "rows": rows}
        reader = subprocess.Popen(
            [sys.executable, "-m", "bench.log_capture", "--binlog-reader", json.dumps(spec)],
            stdout=subprocess.PIPE, text=True, cwd=ROOT, preexec_fn=die_with_parent(),
        )
        try:
            assert reader.stdout is not None
            if reader.stdout.readline().strip() != "ready":
                raise RuntimeError("the raw binlog reader did not start")
            server_cpu = env.server_cpu_seconds()
            first, committed, _ = my_workload(env, table, rows, kind)
            out, _ = reader.communicate(timeout=120 + rows / 2_000)
            server_cpu = env.server_cpu_seconds() - server_cpu
            report: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
        finally:
            if reader.poll() is None:
                reader.kill()
                reader.wait()
        if report["rows"] != rows:
            raise RuntimeError(f"raw reader saw {report['rows']} {kind}s, expected {rows}")
        result[kind] = {"workload_s": committed - first, "seconds": report["last_at"] - first,
                        "row_events": report["row_events"], "cpu_s": report["cpu_s"],
                        "server_cpu_s": server_cpu,
                        "c_decoder_s": c_decoder_seconds(env, (file, pos))}
    return result


def c_decoder_seconds(env: Environment, start: tuple[str, int]) -> float:
    """The physical limit: ``mariadb-binlog --verbose`` (MariaDB's C decoder) reading the
    same binary log from the server, from ``start`` to the end, every row decoded to text;
    its wall time (after the workload: decoding alone)."""
    with env.mysql_connect() as conn, conn.cursor() as cursor:
        end_file, end_pos = mysql_master_status(cursor)
    args = env.mysql_args()
    command = [C_DECODER, "--read-from-remote-server", "--host", str(args["host"]),
               "--port", str(args["port"]), "--user", str(args["user"]),
               f"--start-position={start[1]}", "--verbose", "--base64-output=DECODE-ROWS",
               start[0]]
    if args.get("password"):
        command.insert(-1, f"--password={args['password']}")
    if end_file == start[0]:
        command.insert(-1, f"--stop-position={end_pos}")
    else:
        command.insert(-1, "--to-last-log")
    started = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                   timeout=600)
    return time.perf_counter() - started


def run_mariadb(options: Options) -> Result:
    rows = options.rows
    with Environment(NAME, options) as env:
        table = env.table(MY_TABLE_NAME)
        create_table(env, table, 0)
        worker: list[dict[str, dict[str, float]]] = []
        raw: list[dict[str, dict[str, float]]] = []
        for i in range(options.runs):
            order = ("raw", "worker") if i % 2 == 0 else ("worker", "raw")
            for what in order:
                my_reset_table(env, table)
                if what == "raw":
                    raw.append(my_raw_phase(env, table, rows))
                else:
                    worker.append(my_worker_phase(env, f"lc{i}", table, rows))
            progress(f"{NAME} run {i + 1}/{options.runs}: mariadb-binlog decodes "
                     f"{rows / raw[-1][INSERT]['c_decoder_s']:,.0f} inserts/s, "
                     f"{rows / raw[-1][UPDATE]['c_decoder_s']:,.0f} updates/s")
            progress(f"{NAME} run {i + 1}/{options.runs}: inserts: raw "
                     f"{rows / raw[-1][INSERT]['seconds']:,.0f} rows/s, worker "
                     f"{rows / worker[-1][INSERT]['seconds']:,.0f} events/s (inserting took "
                     f"{worker[-1][INSERT]['workload_s']:.2f} s); updates: raw "
                     f"{rows / raw[-1][UPDATE]['seconds']:,.0f} rows/s, worker "
                     f"{rows / worker[-1][UPDATE]['seconds']:,.0f} events/s (updating took "
                     f"{worker[-1][UPDATE]['workload_s']:.2f} s)")

    def figures(kind: str) -> dict[str, Any]:
        raw_s = [r[kind]["seconds"] for r in raw]
        worker_s = [w[kind]["seconds"] for w in worker]
        ratios = [r / w for r, w in zip(raw_s, worker_s, strict=True)]
        return {
            "raw_rows_per_s": round(rows / median(raw_s)),
            "worker_events_per_s": round(rows / median(worker_s)),
            "ratio": rounded(median(ratios)),
            "worker_cpu_us_per_event": rounded(
                median([w[kind]["cpu_s"] for w in worker]) / rows * 1e6, 2),
            "workload_s": rounded(median([p[kind]["workload_s"] for p in raw + worker])),
            "raw_row_events": round(median([r[kind]["row_events"] for r in raw])),
            **cpu_figures(rows, [w[kind] for w in worker], [r[kind] for r in raw]),
            "c_decoder_rows_per_s": round(rows / median([r[kind]["c_decoder_s"] for r in raw])),
            "raw_s": [rounded(s) for s in raw_s],
            "worker_s": [rounded(s) for s in worker_s],
            "run_ratios": [rounded(r) for r in ratios],
        }

    inserts, updates = figures(INSERT), figures(UPDATE)
    return {
        "benchmark": NAME,
        "rows": rows,
        "transactions": TRANSACTIONS,
        "runs": options.runs,
        "raw_inserts_per_s": inserts["raw_rows_per_s"],
        "c_decoder_inserts_per_s": inserts["c_decoder_rows_per_s"],
        "worker_events_per_s": inserts["worker_events_per_s"],
        "ratio": inserts["ratio"],
        "worker_cpu_us_per_event": inserts["worker_cpu_us_per_event"],
        **{key: inserts[key] for key in CPU_FIGURES},
        **{f"update_{key}": updates[key] for key in CPU_FIGURES},
        "target_ratio": MY_TARGET_RATIO,
        "target_events_per_s": MY_TARGET_EVENTS_PER_S,
        "target_update_events_per_s": MY_TARGET_UPDATES_PER_S,
        "target_met": (inserts["ratio"] >= MY_TARGET_RATIO
                       and inserts["worker_events_per_s"] >= MY_TARGET_EVENTS_PER_S
                       and updates["worker_events_per_s"] >= MY_TARGET_UPDATES_PER_S),
        "insert_s": inserts["workload_s"],
        "raw_row_events": inserts["raw_row_events"],
        "raw_s": inserts["raw_s"],
        "worker_s": inserts["worker_s"],
        "run_ratios": inserts["run_ratios"],
        "raw_updates_per_s": updates["raw_rows_per_s"],
        "c_decoder_updates_per_s": updates["c_decoder_rows_per_s"],
        "worker_update_events_per_s": updates["worker_events_per_s"],
        "update_ratio": updates["ratio"],
        "worker_cpu_us_per_update_event": updates["worker_cpu_us_per_event"],
        "update_s": updates["workload_s"],
        "raw_update_row_events": updates["raw_row_events"],
        "raw_update_s": updates["raw_s"],
        "worker_update_s": updates["worker_s"],
        "update_run_ratios": updates["run_ratios"],
        "machine": machine(options.source),
    }


def binlog_reader_main(spec: dict[str, Any]) -> int:
    """mysql-replication alone, with the worker's reader options: decode every row of the
    table's row events from the given position until ``rows`` rows; report as JSON."""
    from pymysqlreplication import BinLogStreamReader
    from pymysqlreplication.event import (
        GtidEvent,
        HeartbeatLogEvent,
        MariadbGtidEvent,
        QueryEvent,
        RotateEvent,
        XidEvent,
    )
    from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

    from dblog_worker.mysql.connection import BINLOG_READER_OPTIONS
    from dblog_worker.tables import WATERMARK_SCHEMA

    settings = {"host": spec["host"], "port": spec["port"], "user": spec["user"],
                "password": spec["password"]}
    # As dblog_worker.mysql.binlog.BinlogReader opens its stream (file/position resume).
    stream = BinLogStreamReader(
        connection_settings=settings,
        ctl_connection_settings={**settings, "database": "information_schema"},
        server_id=RAW_SERVER_ID,
        blocking=True,
        slave_heartbeat=1.0,
        only_events=[WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent, XidEvent, QueryEvent,
                     RotateEvent, GtidEvent, MariadbGtidEvent, HeartbeatLogEvent],
        only_schemas=sorted({spec["database"], WATERMARK_SCHEMA}),
        enable_logging=False,
        **BINLOG_READER_OPTIONS,
        log_file=spec["file"], log_pos=spec["pos"], resume_stream=True,
    )
    database, table, expected = spec["database"], spec["table"], int(spec["rows"])
    row_kinds = (WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent)
    print("ready", flush=True)
    rows = row_events = events = 0
    try:
        while rows < expected:
            event = stream.fetchone()
            if event is None:
                raise RuntimeError("the server ended the binary log stream")
            events += 1
            if type(event) in row_kinds and event.schema == database and event.table == table:
                row_events += 1
                rows += len(event.rows)  # decodes every row of the event
        last_at = time.time()
    finally:
        stream.close()
    print(json.dumps({"rows": rows, "row_events": row_events, "events": events,
                      "last_at": last_at, "cpu_s": time.process_time()}), flush=True)
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 6 and sys.argv[1] == "--reader":
        sys.exit(reader_main(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])))
    if len(sys.argv) == 3 and sys.argv[1] == "--binlog-reader":
        sys.exit(binlog_reader_main(json.loads(sys.argv[2])))
    sys.exit("usage: python -m bench.log_capture --reader DSN SLOT PUBLICATION INSERTS\n"
             "       python -m bench.log_capture --binlog-reader SPEC_JSON")
