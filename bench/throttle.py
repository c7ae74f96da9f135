"""throttle: a foreground workload's latency on the source during a full dump, with and
without automatic throttling.

The ``dump_throughput`` table (1M rows by default). A foreground workload runs on the
source all along: ``CLIENTS`` processes, each on a connection of its own, sending point
queries (``SELECT * FROM t WHERE id = <random key>``) one after the other with a
``THINK_S`` pause, every query's latency recorded. Each run dumps the table twice with a
fresh worker, the order reversed every other run: without a throttle, and with
``--max-chunk-ms`` (the throttle's target chunk SELECT time, ``LIMITS`` per source kind:
near what a 10,000-row chunk takes on the idle source, about 20 ms on PostgreSQL and 60 ms
on MariaDB here). Before the first dump, the workload runs alone for ``IDLE_S`` (its
latency with no dump).

Reported (medians of the runs): the foreground's p50/p99 latency alone, during the
unthrottled dump and during the throttled one; each dump's duration and rate; the
throttle's average delay (sampled from the worker's status) and the reasons it gave.
"""

from __future__ import annotations

import json
import multiprocessing
import random
import re
import time
from collections import Counter
from multiprocessing.synchronize import Event
from typing import Any

import psycopg
import pymysql

from bench.common import (
    CHUNK_SIZE,
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
)
from bench.dump_throughput import TABLE_NAME

NAME = "throttle"
# What a run must produce: finite numbers above 0 (tests/bench: each benchmark, tiny).
FIGURES = ("dump_rows_per_s", "throttled_dump_rows_per_s", "foreground_p99_ms.no_dump",
           "foreground_p99_ms.dump", "foreground_p99_ms.throttled_dump")
CLIENTS = 4
THINK_S = 0.0
IDLE_S = 5.0
TINY_IDLE_S = 1.0  # --tiny: enough foreground queries for the idle percentiles
# --tiny: one client with a pause; four clients without one used most of the CPU of the run
TINY_CLIENTS, TINY_THINK_S = 1, 0.002
LIMITS = {"postgresql": 20, "mariadb": 100}  # --max-chunk-ms, 10,000-row chunks
SAMPLE_S = 0.25  # how often the bench reads the throttle's decision


def _client(kind: str, connect: dict[str, Any], table: str, rows: int, seed: int,
            think_s: float, stop: Event, out: Any, ready: Any) -> None:
    """A foreground client: point queries until ``stop``; (start time, seconds) of each.
    ``ready`` gets a token once it is connected and has run its first query."""
    rnd = random.Random(seed)
    latencies: list[tuple[float, float]] = []
    if kind == "postgresql":
        conn: Any = psycopg.connect(connect["dsn"], autocommit=True)
        sql = f"SELECT * FROM {table} WHERE id = %s"

        def query(key: int) -> None:
            conn.execute(sql, (key,)).fetchall()
    else:
        conn = pymysql.connect(**connect, autocommit=True)
        cursor = conn.cursor()
        sql = f"SELECT * FROM {table} WHERE id = %s"

        def query(key: int) -> None:
            cursor.execute(sql, (key,))
            cursor.fetchall()
    try:
        while not stop.is_set():
            started = time.time()
            t0 = time.perf_counter()
            query(rnd.randint(1, rows))
            latencies.append((started, time.perf_counter() - t0))
            if len(latencies) == 1:
                ready.put(seed)
            time.sleep(think_s)
    finally:
        conn.close()
    out.put(latencies)


class Foreground:
    """The foreground workload's processes, started and stopped together."""

    def __init__(self, env: Environment, table: str, rows: int, seed: int, clients: int,
                 think_s: float) -> None:
        context = multiprocessing.get_context("spawn")
        self.stop_event = context.Event()
        self.out: Any = context.Queue()
        self.ready: Any = context.Queue()
        connect = ({"dsn": env.dsn} if not env.is_mariadb
                   else {**env.mysql_args(), "database": "bench"})
        self.procs = [context.Process(target=_client, args=(
            env.kind, connect, table, rows, seed * 100 + i, think_s, self.stop_event, self.out,
            self.ready), daemon=True) for i in range(clients)]

    def __enter__(self) -> Foreground:
        """Once every client runs (spawned processes take seconds to start on a busy
        machine, and the idle sample must not be empty)."""
        for proc in self.procs:
            proc.start()
        for _ in self.procs:
            self.ready.get(timeout=120)
        return self

    def stop(self) -> list[tuple[float, float]]:
        self.stop_event.set()
        latencies: list[tuple[float, float]] = []
        for _ in self.procs:
            latencies.extend(self.out.get(timeout=60))
        for proc in self.procs:
            proc.join(10)
        return latencies

    def __exit__(self, *exc: object) -> None:
        for proc in self.procs:
            if proc.is_alive():
                proc.terminate()


def within(latencies: list[tuple[float, float]], start: float, end: float) -> list[float]:
    return [seconds for at, seconds in latencies if start <= at <= end]


def dump(env: Environment, source: str, table: str, rows: int, limit_ms: int
         ) -> dict[str, Any]:
    """One full dump by a fresh worker; with ``limit_ms``, the throttle's decisions too."""
    worker = env.worker(source, [table]).start()
    delays: list[float] = []
    reasons: Counter[str] = Counter()
    try:
        extra = ["--max-chunk-ms", str(limit_ms)] if limit_ms else []
        request = worker.request_dump(table, CHUNK_SIZE, extra=extra)
        status_key = worker.key("worker")
        deadline = time.monotonic() + dump_timeout(rows)
        with env.redis_client() as client:
            while client.hget(worker.key("request", request), "state") not in (
                    "completed", "failed", "cancelled"):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"dump {request} did not end\n{worker.log_tail()}")
                worker.check_alive()
                ours = json.loads(client.hget(status_key, "dumps") or "{}").get(request)
                if limit_ms and ours is not None:
                    delays.append(float(ours.get("throttle_ms") or 0))
                    reasons[_reason(ours.get("throttle", ""))] += 1
                time.sleep(SAMPLE_S)
        created, completed = worker.wait_dump(request, 10)
        landed = worker.landed_rows(table)
        if landed != rows:
            raise RuntimeError(f"{landed} rows landed, expected {rows}")
    finally:
        worker.cleanup()
    return {"created": created, "completed": completed, "seconds": completed - created,
            "delay_ms": delays, "reasons": dict(reasons)}


def _reason(decision: str) -> str:
    """A decision without its figures: ``chunk SELECT N ms > N ms``, ``easing``, ``none``."""
    inner = decision.partition("(")[2].rstrip(")")
    if not inner:
        return "none"
    return re.sub(r"[0-9][0-9.]*", "N", inner.partition(":")[0] if ":" in inner else inner)


def run(options: Options) -> Result:
    rows = options.rows
    limit_ms = LIMITS[options.source]
    clients, think_s = (TINY_CLIENTS, TINY_THINK_S) if options.tiny else (CLIENTS, THINK_S)
    runs: list[dict[str, Any]] = []
    with Environment(NAME, options) as env:
        table = env.table(TABLE_NAME)
        create_table(env, table, rows)
        for i in range(options.runs):
            order = (0, limit_ms) if i % 2 == 0 else (limit_ms, 0)
            with Foreground(env, table, rows, i, clients, think_s) as foreground:
                started = time.time()
                time.sleep(TINY_IDLE_S if options.tiny else IDLE_S)
                idle_end = time.time()
                dumps = {}
                for limit in order:
                    if not options.tiny:  # the servers' background work of the last dump settles
                        time.sleep(1.0)
                    dumps[limit] = dump(env, f"th{i}{'t' if limit else 'n'}", table, rows,
                                        limit)
                latencies = foreground.stop()
            plain, throttled = dumps[0], dumps[limit_ms]
            result = {
                "idle": within(latencies, started, idle_end),
                "plain": within(latencies, plain["created"], plain["completed"]),
                "throttled": within(latencies, throttled["created"], throttled["completed"]),
                "plain_s": plain["seconds"], "throttled_s": throttled["seconds"],
                "delay_ms": throttled["delay_ms"], "reasons": throttled["reasons"],
            }
            runs.append(result)
            progress(f"{NAME} run {i + 1}/{options.runs}: foreground p99 idle "
                     f"{percentile(result['idle'], 99) * 1000:.2f} ms, dump "
                     f"{percentile(result['plain'], 99) * 1000:.2f} ms, throttled dump "
                     f"{percentile(result['throttled'], 99) * 1000:.2f} ms; dump "
                     f"{plain['seconds']:.1f} s, throttled {throttled['seconds']:.1f} s")

    def ms(key: str, q: float) -> float:
        return rounded(median([percentile(r[key], q) * 1000 for r in runs]))

    def average(values: list[float]) -> float:
        return sum(values) / len(values) if values else 0.0

    reasons: Counter[str] = Counter()
    for r in runs:
        reasons.update(r["reasons"])
    return {
        "benchmark": NAME,
        "rows": rows,
        "runs": options.runs,
        "chunk_size": CHUNK_SIZE,
        "throttle": {"max_chunk_ms": limit_ms},
        "foreground": f"{clients} client{'s' * (clients > 1)}, point SELECT by random key, "
                      f"{think_s * 1000:g} ms think time",
        "foreground_p50_ms": {"no_dump": ms("idle", 50), "dump": ms("plain", 50),
                              "throttled_dump": ms("throttled", 50)},
        "foreground_p99_ms": {"no_dump": ms("idle", 99), "dump": ms("plain", 99),
                              "throttled_dump": ms("throttled", 99)},
        "foreground_queries_per_s": {
            "dump": round(median([len(r["plain"]) / r["plain_s"] for r in runs])),
            "throttled_dump": round(median([len(r["throttled"]) / r["throttled_s"]
                                            for r in runs]))},
        "dump_s": rounded(median([r["plain_s"] for r in runs])),
        "throttled_dump_s": rounded(median([r["throttled_s"] for r in runs])),
        "dump_rows_per_s": round(rows / median([r["plain_s"] for r in runs])),
        "throttled_dump_rows_per_s": round(rows / median([r["throttled_s"] for r in runs])),
        "throttle_avg_delay_ms": round(median([average(r["delay_ms"]) for r in runs])),
        "throttle_reasons": dict(reasons),
        "p99_ratio": rounded(median([percentile(r["throttled"], 99)
                                     / percentile(r["plain"], 99) for r in runs])),
        "machine": machine(options.source),
    }
