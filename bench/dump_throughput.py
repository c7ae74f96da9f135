"""dump_throughput: a full table dump through the worker vs. the bare keyset SELECTs.

Raw rate: the worker's own chunk query (``queries.chunk_sql``: keyset on the primary
key up to the table's largest key, ``LIMIT 10000``) run by psycopg over the whole
table, every cell read as bytes with ``pgresult.get_value`` (text format, as the
worker reads). Worker rate: ``dblog dump --table ... --chunk-size 10000`` against a
running worker, from the request's creation to its ``completed`` state (both times
recorded in Redis), i.e. until every row is durable in the landing zone.

Both are measured in every run, alternating which goes first; the ratio is the
median of the per-run ratios. Each run uses a fresh worker (new source name, slot and
landing directory); the table stays.
"""

from __future__ import annotations

import time
from typing import Any

import psycopg

from bench.common import (
    CHUNK_SIZE,
    Environment,
    Options,
    Result,
    create_table,
    dump_timeout,
    machine,
    median,
    progress,
    rounded,
)
from dblog_worker.pg.queries import TableShape, chunk_sql
from dblog_worker.values import libpq_options

NAME = "dump_throughput"
TABLE = "public.dump_src"
TARGET_RATIO = 0.4
SHAPE = TableShape("public", "dump_src", ("id", "a", "b", "c", "d"), ("id",), ("bigint",))


def raw_select(dsn: str, chunk_size: int = CHUNK_SIZE) -> tuple[int, float]:
    """Read the whole table in keyset chunks; (rows, seconds)."""
    first, rest = chunk_sql(SHAPE, first=True).encode(), chunk_sql(SHAPE, first=False).encode()
    with psycopg.connect(dsn, autocommit=True, options=libpq_options()) as conn:
        started = time.perf_counter()
        row = conn.execute(b'SELECT "id" FROM "public"."dump_src" ORDER BY "id" DESC LIMIT 1'
                           ).fetchone()
        assert row is not None
        upper = str(row[0])
        after: str | None = None
        rows = 0
        while True:
            params: list[Any] = [upper, chunk_size] if after is None else [after, upper,
                                                                          chunk_size]
            result = conn.execute(first if after is None else rest, params).pgresult
            assert result is not None
            count, width, get = result.ntuples, result.nfields, result.get_value
            for r in range(count):
                for c in range(width):
                    get(r, c)
            rows += count
            if count < chunk_size:
                break
            last = get(count - 1, 0)
            assert last is not None
            after = bytes(last).decode()
        return rows, time.perf_counter() - started


def worker_dump(env: Environment, source: str, rows: int) -> tuple[float, float]:
    """Seconds from the dump request's creation to its completion; worker CPU seconds."""
    worker = env.worker(source, [TABLE]).start()
    try:
        cpu = worker.cpu_seconds()
        request = worker.request_dump(TABLE)
        created, completed = worker.wait_dump(request, dump_timeout(rows))
        cpu = worker.cpu_seconds() - cpu
        landed = worker.landed_rows(TABLE)
        if landed != rows:
            raise RuntimeError(f"{landed} rows landed, expected {rows}")
    finally:
        worker.cleanup()
    return completed - created, cpu


def run(options: Options) -> Result:
    rows = options.rows
    with Environment(NAME, options) as env:
        create_table(env, TABLE, rows)
        raw_select(env.dsn)  # warm the caches once, untimed
        raw_s: list[float] = []
        worker_s: list[float] = []
        worker_cpu_s: list[float] = []
        for i in range(options.runs):
            order = ("raw", "worker") if i % 2 == 0 else ("worker", "raw")
            for what in order:
                if what == "raw":
                    count, seconds = raw_select(env.dsn)
                    if count != rows:
                        raise RuntimeError(f"raw select read {count} rows, expected {rows}")
                    raw_s.append(seconds)
                else:
                    seconds, cpu = worker_dump(env, f"dt{i}", rows)
                    worker_s.append(seconds)
                    worker_cpu_s.append(cpu)
            progress(f"{NAME} run {i + 1}/{options.runs}: raw {rows / raw_s[-1]:,.0f} rows/s, "
                     f"worker {rows / worker_s[-1]:,.0f} rows/s")
    ratios = [r / w for r, w in zip(raw_s, worker_s, strict=True)]
    ratio = median(ratios)
    return {
        "benchmark": NAME,
        "rows": rows,
        "chunk_size": CHUNK_SIZE,
        "runs": options.runs,
        "raw_select_rows_per_s": round(rows / median(raw_s)),
        "worker_rows_per_s": round(rows / median(worker_s)),
        "ratio": rounded(ratio),
        "worker_cpu_us_per_row": rounded(median(worker_cpu_s) / rows * 1e6, 2),
        "target_ratio": TARGET_RATIO,
        "target_met": ratio >= TARGET_RATIO,
        "raw_select_s": [rounded(s) for s in raw_s],
        "worker_s": [rounded(s) for s in worker_s],
        "worker_cpu_s": [rounded(s) for s in worker_cpu_s],
        "run_ratios": [rounded(r) for r in ratios],
        "machine": machine(),
    }
