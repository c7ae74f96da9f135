"""dump_throughput: a full table dump through the worker vs. the bare keyset SELECTs.

Raw rate, PostgreSQL: the worker's own chunk query (``queries.chunk_sql``: keyset on
the primary key up to the table's largest key, ``LIMIT 10000``) run by psycopg over the
whole table, every cell read as bytes with ``pgresult.get_value`` (text format, as the
worker reads). Raw rate, MariaDB: the worker's own chunk query
(``mysql.catalog.chunk_sql`` with ``columns.select_list``; key parameters from the
worker's codec, ``MyRowCodec.key_params``) run by PyMySQL on a connection opened as
the worker's dump connection (``session.dump_connection_options()``: every cell the
server's text, the worker's session settings), each chunk read with ``fetchall`` as the
worker reads it. Worker rate: ``dblog dump --table ... --chunk-size 10000`` against a
running worker, from the request's creation to its ``completed`` state (both times
recorded in Redis), i.e. until every row is durable in the landing zone.

Parallel: the same dump with ``--parallelism 2`` and ``4`` (windows of that many chunk
SELECTs on as many connections), reported beside (``worker_parallelism_<p>_rows_per_s``,
``parallelism_<p>_ratio``); the target is the sequential worker's.

All are measured in every run, the order reversed every other run; the ratio is the
median of the per-run ratios. Each run uses a fresh worker (new source name, slot and
landing directory); the table stays.
"""

from __future__ import annotations

import time
from typing import Any

import psycopg
import pymysql

from bench.common import (
    CHUNK_SIZE,
    MARIADB,
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
from dblog_worker.mysql import catalog as my_catalog
from dblog_worker.mysql.column_model import COLUMNS_SQL, column_from_information_schema, select_list
from dblog_worker.mysql.connection import dump_connection_options
from dblog_worker.mysql.values import MyRowCodec
from dblog_worker.names import split_table
from dblog_worker.pg.queries import TableShape, chunk_sql
from dblog_worker.pg.values import libpq_options

NAME = "dump_throughput"
# What a run must produce: finite numbers above 0 (tests/bench: each benchmark, tiny).
FIGURES = ("raw_select_rows_per_s", "worker_rows_per_s", "worker_parallelism_2_rows_per_s",
           "worker_parallelism_4_rows_per_s", "ratio")
TABLE_NAME = "dump_src"
TARGET_RATIO = 0.7  # issue 16: PostgreSQL dumps at >= 0.7 x the raw keyset SELECT loop
TARGET_RATIOS = {MARIADB: 0.8}  # MariaDB at >= 0.8 x raw PyMySQL
PARALLELISM = ("2", "4")  # also timed: windows of that many chunk SELECTs (reported)
SHAPE = TableShape("public", "dump_src", ("id",), ("bigint",))


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


def raw_select_mariadb(env: Environment, table: str,
                       chunk_size: int = CHUNK_SIZE) -> tuple[int, float]:
    """The MariaDB twin of :func:`raw_select`: the worker's chunk SQL, cells as the dump
    connection reads them; (rows, seconds)."""
    database, name = split_table(table)
    conn = pymysql.connect(**env.mysql_args(), **dump_connection_options(), autocommit=True)
    try:
        with conn.cursor() as cursor:
            cursor.execute(COLUMNS_SQL, (database, name))
            columns = [column_from_information_schema(r) for r in cursor.fetchall()]
            cursor.execute(my_catalog.KEY_COLUMNS_SQL, (database, name))
            key = tuple(str(r[0]) for r in cursor.fetchall())
        shape = my_catalog.TableShape(table, tuple(c.name for c in columns), key,
                                      select_list(columns), select_list(columns, "t"))
        codec = MyRowCodec(columns, list(key))
        first = my_catalog.chunk_sql(shape, first=True)
        rest = my_catalog.chunk_sql(shape, first=False)
        started = time.perf_counter()
        with conn.cursor() as cursor:
            cursor.execute(my_catalog.upper_bound_sql(shape))
            upper = my_catalog.at_most_params(codec.key_params(
                codec.key_texts_from_key_cells(cursor.fetchone())))
            params: list[Any] = [*upper, chunk_size]
            sql = first
            rows = 0
            while True:
                cursor.execute(sql, params)
                chunk = list(cursor.fetchall())
                rows += len(chunk)
                if len(chunk) < chunk_size:
                    break
                after = codec.key_params(codec.key_texts_from_dump(chunk[-1]))
                params = [*my_catalog.after_params(after), *upper, chunk_size]
                sql = rest
        return rows, time.perf_counter() - started
    finally:
        conn.close()


def worker_dump(env: Environment, source: str, table: str, rows: int,
                parallelism: int = 1) -> tuple[float, float]:
    """Seconds from the dump request's creation to its completion; worker CPU seconds."""
    worker = env.worker(source, [table]).start()
    try:
        cpu = worker.cpu_seconds()
        request = worker.request_dump(table, parallelism=parallelism)
        created, completed = worker.wait_dump(request, dump_timeout(rows))
        cpu = worker.cpu_seconds() - cpu
        landed = worker.landed_rows(table)
        if landed != rows:
            raise RuntimeError(f"{landed} rows landed, expected {rows}")
    finally:
        worker.cleanup()
    return completed - created, cpu


def run(options: Options) -> Result:
    rows = options.rows
    target_ratio = TARGET_RATIOS.get(options.source, TARGET_RATIO)
    with Environment(NAME, options) as env:
        table = env.table(TABLE_NAME)
        create_table(env, table, rows)

        def raw() -> tuple[int, float]:
            return raw_select_mariadb(env, table) if env.is_mariadb else raw_select(env.dsn)

        raw()  # warm the caches once, untimed
        raw_s: list[float] = []
        worker_s: list[float] = []
        worker_cpu_s: list[float] = []
        parallel_s: dict[int, list[float]] = {int(p): [] for p in PARALLELISM}
        for i in range(options.runs):
            order = ("raw", "worker", *PARALLELISM)
            for what in order if i % 2 == 0 else reversed(order):
                if what == "raw":
                    count, seconds = raw()
                    if count != rows:
                        raise RuntimeError(f"raw select read {count} rows, expected {rows}")
                    raw_s.append(seconds)
                elif what == "worker":
                    seconds, cpu = worker_dump(env, f"dt{i}", table, rows)
                    worker_s.append(seconds)
                    worker_cpu_s.append(cpu)
                else:
                    lanes = int(what)
                    parallel_s[lanes].append(
                        worker_dump(env, f"dt{i}p{lanes}", table, rows, lanes)[0])
            progress(f"{NAME} run {i + 1}/{options.runs}: raw {rows / raw_s[-1]:,.0f} rows/s, "
                     f"worker {rows / worker_s[-1]:,.0f} rows/s, "
                     + ", ".join(f"parallelism {p}: {rows / s[-1]:,.0f} rows/s"
                                 for p, s in parallel_s.items()))
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
        **{f"worker_parallelism_{p}_rows_per_s": round(rows / median(s))
           for p, s in parallel_s.items()},
        **{f"parallelism_{p}_ratio": rounded(median(
            [r / w for r, w in zip(raw_s, s, strict=True)])) for p, s in parallel_s.items()},
        "target_ratio": target_ratio,
        "target_met": ratio >= target_ratio,
        "raw_select_s": [rounded(s) for s in raw_s],
        "worker_s": [rounded(s) for s in worker_s],
        "worker_cpu_s": [rounded(s) for s in worker_cpu_s],
        "run_ratios": [rounded(r) for r in ratios],
        "machine": machine(options.source),
    }
