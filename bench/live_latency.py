"""live_latency: commit-to-durable latency of a trickle of inserts, idle and during a dump.

A thread inserts one row per transaction into ``public.trickle`` at a steady 50 rows/s
(each row also carries the client's send time). A watcher thread lists the table's
landing directory every 10 ms, reads each new segment and notes, per row, the time the
listing first showed it. Latency = that arrival time - the row's commit timestamp (the
``commit_ts`` column the worker writes, the server's commit time from the log; client
and server share a clock).

Phases of a run, on one fresh worker (``flush_interval_s = 1.0``): a warm-up of 2 s;
``idle_s`` seconds with only the trickle (idle); then a full dump of the ``rows``-row
table with chunk size 10000, the trickle going on (during dump: rows committed between
the request's creation and its completion). Percentiles per phase and run; the
reported figures are medians over runs.

Targets: p99 during dump <= 2 s, and <= 2 x idle p99 + the flush interval.

MariaDB (``--source mariadb``): the same on ``bench.trickle`` and ``bench.latency_dump``,
the trickle through PyMySQL (autocommit). The binary log's commit timestamps have whole
second resolution (the worker's ``commit_ts`` is that second), so a row's commit time
is taken as the client's send time instead (``client_ts``, read just before the
INSERT is sent; it is earlier than the commit, so the latency is an upper bound).
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

import psycopg
import pyarrow as pa
import pyarrow.parquet as pq

from bench.common import (
    FLUSH_INTERVAL_S,
    MARIADB,
    Environment,
    Options,
    Result,
    create_table,
    dump_timeout,
    machine,
    median,
    percentile,
    progress,
    rounded,
    wait_until,
)

NAME = "live_latency"
# What a run must produce: finite numbers above 0 (tests/bench: each benchmark, tiny).
FIGURES = ("idle_p99_s", "dump_p99_s")
DUMP_TABLE_NAME = "latency_dump"
TRICKLE_NAME = "trickle"
RATE_PER_S = 50.0
WARMUP_S = 2.0
TARGET_P99_S = 2.0


class Background(threading.Thread):
    """A daemon thread that works until stopped; ``stop`` raises what its run raised."""

    what = "thread"

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.stopping = threading.Event()
        self.error: BaseException | None = None

    def stop(self) -> None:
        self.stopping.set()
        self.join(30)
        if self.error is not None:
            raise RuntimeError(f"the {self.what} failed: {self.error!r}")


class Trickle(Background):
    """Single-row insert transactions at a steady rate, until stopped."""

    what = "trickle"

    def __init__(self, env: Environment, table: str, first_id: int) -> None:
        super().__init__()
        self.env = env
        self.table = table
        self.next_id = first_id
        self.committed: list[int] = []
        self.sent_at: dict[int, float] = {}  # id -> the client's send time (client_ts)

    def run(self) -> None:
        try:
            if self.env.is_mariadb:
                with self.env.mysql_connect() as conn, conn.cursor() as cursor:
                    self._loop(lambda sql, params: cursor.execute(sql, params))
            else:
                with psycopg.connect(self.env.dsn, autocommit=True) as pg:
                    self._loop(lambda sql, params: pg.execute(sql.encode(), params))
        except BaseException as exc:  # reported by stop()
            self.error = exc

    def _loop(self, execute: Callable[[str, tuple[int, float]], object]) -> None:
        sql = f"INSERT INTO {self.table} (id, client_ts) VALUES (%s, %s)"
        started = time.monotonic()
        sent = 0
        while not self.stopping.is_set():
            delay = started + sent / RATE_PER_S - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            sent_at = time.time()
            execute(sql, (self.next_id, sent_at))
            self.sent_at[self.next_id] = sent_at
            self.committed.append(self.next_id)
            self.next_id += 1
            sent += 1



class Watcher(Background):
    """Polls a table's landing directory; per row id: (commit time, first arrival time)."""

    what = "landing watcher"

    def __init__(self, directory: Path) -> None:
        super().__init__()
        self.directory = directory
        self.rows: dict[int, tuple[float, float]] = {}

    def run(self) -> None:
        seen: set[str] = set()
        try:
            while not self.stopping.is_set():
                try:
                    names = os.listdir(self.directory)
                except FileNotFoundError:
                    names = []
                now = time.time()
                for name in sorted(names):
                    if name in seen or not name.startswith("segment-"):
                        continue
                    seen.add(name)
                    data = pq.read_table(self.directory / name, columns=["key", "commit_ts"])
                    keys = data.column("key").to_pylist()
                    commits = data.column("commit_ts").cast(pa.int64()).to_pylist()
                    for key, commit_us in zip(keys, commits, strict=True):
                        self.rows.setdefault(int(json.loads(key)[0]), (commit_us / 1e6, now))
                time.sleep(0.01)
        except BaseException as exc:  # reported by stop()
            self.error = exc



def create_trickle_table(env: Environment, trickle: str) -> None:
    """The table :class:`Trickle` inserts into: ``id``, the server's ``sent_at`` and the
    client's ``client_ts``."""
    if env.is_mariadb:
        with env.mysql_connect() as my, my.cursor() as cursor:
            cursor.execute(f"CREATE TABLE {trickle} (id bigint PRIMARY KEY, "
                           "sent_at timestamp(6) NOT NULL DEFAULT current_timestamp(6), "
                           "client_ts double NOT NULL) ENGINE=InnoDB")
    else:
        with env.connect() as conn:
            conn.execute(f"CREATE TABLE {trickle} (id bigint PRIMARY KEY, "
                         "sent_at timestamptz NOT NULL DEFAULT clock_timestamp(), "
                         "client_ts double precision NOT NULL)".encode())
            conn.execute(f"ALTER TABLE {trickle} REPLICA IDENTITY FULL".encode())


def one_run(env: Environment, options: Options, index: int) -> dict[str, float]:
    dump_table, trickle_table = env.table(DUMP_TABLE_NAME), env.table(TRICKLE_NAME)
    worker = env.worker(f"ll{index}", [dump_table, trickle_table],
                        flush_interval_s=FLUSH_INTERVAL_S).start()
    watcher = Watcher(worker.landing.table_dir(trickle_table))
    trickle = Trickle(env, trickle_table, first_id=index * 10_000_000 + 1)
    try:
        watcher.start()
        trickle.start()
        time.sleep(WARMUP_S)
        idle_from = time.time()
        time.sleep(options.idle_s)
        idle_to = time.time()
        request = worker.request_dump(dump_table)
        dump_from, dump_to = worker.wait_dump(request, dump_timeout(options.rows))
        trickle.stop()
        wait_until(lambda: all(i in watcher.rows for i in trickle.committed), 30,
                   "every trickle row to land", worker.check_alive)
        watcher.stop()
    finally:
        trickle.stopping.set()
        watcher.stopping.set()
        worker.cleanup()
    landed = list(watcher.rows.values())
    if env.is_mariadb:  # the binlog's commit time is whole seconds: the client's send time
        landed = [(trickle.sent_at[i], a) for i, (_, a) in watcher.rows.items()]
    idle = [a - c for c, a in landed if idle_from <= c < idle_to]
    dump = [a - c for c, a in landed if dump_from <= c <= dump_to]
    result = {
        "idle_p50_s": percentile(idle, 50), "idle_p99_s": percentile(idle, 99),
        "idle_max_s": max(idle), "idle_events": len(idle),
        "dump_p50_s": percentile(dump, 50), "dump_p99_s": percentile(dump, 99),
        "dump_max_s": max(dump), "dump_events": len(dump), "dump_s": dump_to - dump_from,
    }
    progress(f"{NAME} run {index + 1}/{options.runs}: idle p50 {result['idle_p50_s']:.3f} s "
             f"p99 {result['idle_p99_s']:.3f} s; during dump p50 {result['dump_p50_s']:.3f} s "
             f"p99 {result['dump_p99_s']:.3f} s ({len(dump)} rows in {result['dump_s']:.1f} s)")
    return result


def run(options: Options) -> Result:
    with Environment(NAME, options) as env:
        create_table(env, env.table(DUMP_TABLE_NAME), options.rows)
        create_trickle_table(env, env.table(TRICKLE_NAME))
        runs = [one_run(env, options, i) for i in range(options.runs)]

    def med(name: str) -> float:
        return rounded(median([r[name] for r in runs]))

    idle_p99, dump_p99 = med("idle_p99_s"), med("dump_p99_s")
    bound = 2 * idle_p99 + FLUSH_INTERVAL_S
    mariadb: Result = {"commit_time": "client send time (binlog commit timestamps are whole "
                                      "seconds)"} if options.source == MARIADB else {}
    return {
        "benchmark": NAME,
        "rows": options.rows,
        "chunk_size": 10_000,
        "runs": options.runs,
        "rate_per_s": RATE_PER_S,
        "flush_interval_s": FLUSH_INTERVAL_S,
        "idle_s": options.idle_s,
        "idle_p50_s": med("idle_p50_s"),
        "idle_p99_s": idle_p99,
        "dump_p50_s": med("dump_p50_s"),
        "dump_p99_s": dump_p99,
        "idle_max_s": med("idle_max_s"),
        "dump_max_s": med("dump_max_s"),
        "dump_s": med("dump_s"),
        "idle_events": sum(int(r["idle_events"]) for r in runs),
        "dump_events": sum(int(r["dump_events"]) for r in runs),
        "target_dump_p99_s": TARGET_P99_S,
        "target_dump_p99_vs_idle_s": rounded(bound),
        "target_met": dump_p99 <= TARGET_P99_S and dump_p99 <= bound,
        "run_dump_p99_s": [rounded(r["dump_p99_s"]) for r in runs],
        "run_idle_p99_s": [rounded(r["idle_p99_s"]) for r in runs],
        **mariadb,
        "machine": machine(options.source),
    }
