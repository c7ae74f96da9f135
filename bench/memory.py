"""memory: peak RSS of the worker while it dumps a table, for two table sizes.

Two tables of the benchmark shape (default 1M and 5M rows, ``--quick`` 100k and 500k),
each filled by one ``INSERT ... SELECT generate_series``. Per run and table, a fresh
worker (default flush settings: 1 s / 50000 events) dumps the table with chunk size
10000; a thread samples the worker process's RSS (psutil, the process alone, no
children) every 50 ms from its start until the dump completes.

Targets: both peaks < 400 MB, and the larger table's peak within 15 % of the smaller's
(memory does not grow with the table). Figures are medians over runs.

MariaDB (``--source mariadb``): the same on ``bench.mem_small`` and ``bench.mem_large``,
loaded with ``INSERT ... SELECT`` from the SEQUENCE engine (one million rows a
statement, not in the binary log).
"""

from __future__ import annotations

import threading

import psutil

from bench.common import (
    Environment,
    Options,
    Result,
    WorkerRun,
    create_table,
    dump_timeout,
    machine,
    median,
    progress,
    rounded,
)

NAME = "memory"
# What a run must produce: finite numbers above 0 (tests/bench: each benchmark, tiny).
FIGURES = ("small_peak_rss_mb", "large_peak_rss_mb")
TARGET_MB = 400
TARGET_SPREAD = 0.15
MB = 2**20


class RssSampler(threading.Thread):
    def __init__(self, pid: int, interval_s: float = 0.05) -> None:
        super().__init__(daemon=True)
        self.process = psutil.Process(pid)
        self.interval_s = interval_s
        self.peak = 0
        self.samples = 0
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.wait(self.interval_s):
            try:
                rss = int(self.process.memory_info().rss)
            except psutil.Error:
                return
            self.peak = max(self.peak, rss)
            self.samples += 1

    def stop(self) -> int:
        self.stopping.set()
        self.join(10)
        return self.peak


def dump_peak(env: Environment, source: str, table: str, rows: int) -> tuple[float, float]:
    """(peak RSS in MB during the dump, RSS in MB once started and idle)."""
    worker: WorkerRun = env.worker(source, [table])
    try:
        worker.start()
        sampler = RssSampler(worker.pid)
        sampler.start()
        idle = psutil.Process(worker.pid).memory_info().rss
        request = worker.request_dump(table)
        worker.wait_dump(request, dump_timeout(rows))
        peak = sampler.stop()
    finally:
        worker.cleanup()
    return peak / MB, idle / MB


def run(options: Options) -> Result:
    small_rows, large_rows = options.memory_rows
    peaks: dict[str, list[float]] = {"small": [], "large": []}
    idle: list[float] = []
    with Environment(NAME, options) as env:
        tables = {"small": (env.table("mem_small"), small_rows),
                  "large": (env.table("mem_large"), large_rows)}
        for table, rows in tables.values():
            create_table(env, table, rows)
        for i in range(options.runs):
            for size, (table, rows) in tables.items():
                peak, started = dump_peak(env, f"mem{i}{size}", table, rows)
                peaks[size].append(peak)
                idle.append(started)
                progress(f"{NAME} run {i + 1}/{options.runs}: {rows} rows, peak RSS "
                         f"{peak:.0f} MB (idle {started:.0f} MB)")
    small, large = median(peaks["small"]), median(peaks["large"])
    spread = abs(large - small) / small
    return {
        "benchmark": NAME,
        "rows": [small_rows, large_rows],
        "chunk_size": 10_000,
        "runs": options.runs,
        "small_peak_rss_mb": rounded(small, 1),
        "large_peak_rss_mb": rounded(large, 1),
        "idle_rss_mb": rounded(median(idle), 1),
        "spread": rounded(spread),
        "target_mb": TARGET_MB,
        "target_spread": TARGET_SPREAD,
        "target_met": small < TARGET_MB and large < TARGET_MB and spread <= TARGET_SPREAD,
        "run_small_peak_rss_mb": [rounded(p, 1) for p in peaks["small"]],
        "run_large_peak_rss_mb": [rounded(p, 1) for p in peaks["large"]],
        "machine": machine(options.source),
    }
