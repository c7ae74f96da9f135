"""log_capture: inserts streamed from the log into the landing zone vs. a bare pgoutput reader.

Workload: ``rows`` new rows in 100 transactions (one ``INSERT ... SELECT
generate_series`` each) into a captured table, as fast as one connection commits them.
Each transaction also reads ``pg_current_wal_insert_lsn()`` just before its commit: a
lower bound of its commit LSN.

Worker: ``dblog run`` on the table; done when its Redis checkpoint (saved only after the
landing output covering it is durable) passes the last transaction's LSN. Rate = rows /
(time done - time the first transaction committed). The landed row count is checked.

Raw: a plain pgoutput reader (``python -m bench.log_capture --reader``: psycopg
replication connection, ``START_REPLICATION ... (proto_version '1', publication_names
...)``, ``get_copy_data`` + ``select``, counting XLogData messages and inserts, answering
keepalives) on its own slot, over the same workload, timed the same way.

Each run does both phases, alternating the order, each on a freshly truncated table with
only its own slot in place (so neither decoder competes with the other).
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
    ROOT,
    Environment,
    Options,
    Result,
    create_table,
    die_with_parent,
    drop_slot,
    insert_rows,
    machine,
    median,
    progress,
    rounded,
    wait_until,
)
from dblog_worker.pg.pgoutput import parse_lsn

NAME = "log_capture"
TABLE = "public.log_src"
TRANSACTIONS = 100
TARGET_EVENTS_PER_S = 100_000
RAW_SLOT = "bench_raw"
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
            cpu = worker.cpu_seconds()
            first, inserted, last_lsn = workload(env, rows)
            wait_until(lambda: worker.checkpoint_lsn(client) >= last_lsn, 120 + rows / 5_000,
                       "the worker's checkpoint to pass the last commit",
                       worker.check_alive, 0.01)
            durable = time.time()
            cpu = worker.cpu_seconds() - cpu
        landed = worker.landed_rows(TABLE)
        if landed != rows:
            raise RuntimeError(f"{landed} rows landed, expected {rows}")
    finally:
        worker.cleanup()
    return {"insert_s": inserted - first, "seconds": durable - first, "cpu_s": cpu}


def raw_phase(env: Environment, rows: int) -> dict[str, float]:
    with env.connect() as conn:
        conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (RAW_SLOT,))
    reader = subprocess.Popen(
        [sys.executable, "-m", "bench.log_capture", "--reader", env.dsn, RAW_SLOT,
         RAW_PUBLICATION, str(rows)],
        stdout=subprocess.PIPE, text=True, cwd=ROOT, preexec_fn=die_with_parent(),
    )
    try:
        assert reader.stdout is not None
        if reader.stdout.readline().strip() != "ready":
            raise RuntimeError("the raw pgoutput reader did not start")
        first, inserted, _ = workload(env, rows)
        out, _ = reader.communicate(timeout=120 + rows / 5_000)
        report: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    finally:
        if reader.poll() is None:
            reader.kill()
            reader.wait()
        drop_slot(env, RAW_SLOT)
    if report["inserts"] != rows:
        raise RuntimeError(f"raw reader saw {report['inserts']} inserts, expected {rows}")
    return {"insert_s": inserted - first, "seconds": report["last_at"] - first,
            "messages": report["messages"]}


def run(options: Options) -> Result:
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
            progress(f"{NAME} run {i + 1}/{options.runs}: raw {rows / raw[-1]['seconds']:,.0f} "
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
        "worker_events_per_s": round(worker_rate),
        "ratio": rounded(median(ratios)),
        "worker_cpu_us_per_event": rounded(median([w["cpu_s"] for w in worker]) / rows * 1e6, 2),
        "target_events_per_s": TARGET_EVENTS_PER_S,
        "target_met": worker_rate >= TARGET_EVENTS_PER_S,
        "insert_s": rounded(median([r["insert_s"] for r in raw + worker])),
        "raw_s": [rounded(s) for s in raw_s],
        "worker_s": [rounded(s) for s in worker_s],
        "run_ratios": [rounded(r) for r in ratios],
        "machine": machine(),
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
                      "first_at": first_at, "last_at": last_at}), flush=True)
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 6 and sys.argv[1] == "--reader":
        sys.exit(reader_main(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])))
    sys.exit("usage: python -m bench.log_capture --reader DSN SLOT PUBLICATION INSERTS")
