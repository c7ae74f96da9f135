"""priorities: a repair's key dump during a paced full dump, and what it costs the full dump.

The ``dump_throughput`` table (1M rows by default). Each run, with a fresh worker each
time, the order swapped every other run:

- **alone**: a paced full dump of the table (``--chunk-size 10000 --delay-ms 250
  --priority background``, what a backfill is; chunks of a hundredth of the table below
  1M rows, so that it has some 100 windows), timed from its request to its completion;
  its *window time* is that duration over its windows: one chunk's SELECT, its watermarks
  and the delay.
- **with repairs**: the same full dump; once it has dumped a tenth of the table,
  ``REPAIRS`` key dumps of three random keys each (what ``dblog dump --keys`` queues:
  urgent by default; queued straight into Redis), one at a time, a second apart. Each key
  dump's *time to completion* is from its request's ``created_at`` to its ``completed``
  state as Redis records them (the worker's control interval, 0.2 s, included).

Reported (medians of the runs, with the 90th percentile, min and max): the window time;
each key dump's time to completion, in seconds and in window times (the goal: under two;
``under_goal`` is the share of key dumps that met it, ``goal_met`` says whether the median
did); the full dump's duration alone and with the repairs, and its slowdown (the per-run
ratio, minus one).
"""

from __future__ import annotations

import json
import random
import time
from typing import Any

from bench.common import (
    CHUNK_SIZE,
    Environment,
    Options,
    Result,
    WorkerRun,
    create_table,
    dump_timeout,
    machine,
    median,
    percentile,
    progress,
    rounded,
    wait_until,
)
from bench.dump_throughput import TABLE_NAME
from dblog_worker.control.store import StateStore
from dblog_worker.dump.requests import DumpKind, RequestState

NAME = "priorities"
DELAY_MS = 250
REPAIRS = 5
QUICK_REPAIRS = 3
# --tiny: the same paced dump and repairs, in fewer and shorter windows (some 6 s a dump).
TINY_WINDOWS = 40
TINY_DELAY_MS = 100
TINY_PAUSE_S = 0.2
KEYS_PER_REPAIR = 3
GOAL_WINDOWS = 2.0
FIGURES = ("window_s.median", "repair_s.median", "repair_windows.median",
           "full_dump_alone_s.median", "full_dump_with_repairs_s.median")


def chunk_size(rows: int, tiny: bool = False) -> int:
    """Some 100 windows for the full dump (``tiny``: 40), at most ``CHUNK_SIZE`` rows each."""
    return min(CHUNK_SIZE, max(10, rows // (TINY_WINDOWS if tiny else 100)))


def delay_ms(tiny: bool) -> int:
    return TINY_DELAY_MS if tiny else DELAY_MS


def backfill(worker: WorkerRun, table: str, rows: int, tiny: bool) -> str:
    return worker.request_dump(table, chunk_size(rows, tiny),
                               extra=["--delay-ms", str(delay_ms(tiny)),
                                      "--priority", "background"])


def windows_of(env: Environment, worker: WorkerRun, request_id: str) -> int:
    """The windows the request closed so far (its saved progress)."""
    with env.redis_client() as client:
        texts = client.hvals(worker.key("request", request_id, "progress"))
    return sum(int(json.loads(text)["chunks"]) for text in texts)


def alone(env: Environment, source: str, table: str, rows: int,
          tiny: bool) -> tuple[float, int]:
    """The paced full dump by itself: its seconds and its windows."""
    worker = env.worker(source, [table]).start()
    try:
        request_id = backfill(worker, table, rows, tiny)
        created, completed = worker.wait_dump(request_id, dump_timeout(rows) * 3)
        windows = windows_of(env, worker, request_id)
    finally:
        worker.cleanup()
    return completed - created, windows


def with_repairs(env: Environment, source: str, table: str, rows: int, repairs: int,
                 rnd: random.Random, tiny: bool) -> tuple[float, list[float]]:
    """The paced full dump with key dumps during it: its seconds, and each key dump's
    time to completion."""
    worker = env.worker(source, [table]).start()
    times: list[float] = []
    try:
        request_id = backfill(worker, table, rows, tiny)
        wait_until(lambda: windows_of(env, worker, request_id) * chunk_size(rows, tiny)
                   >= rows / 10,
                   dump_timeout(rows), "a tenth of the full dump", worker.check_alive)
        store = StateStore(env.redis.url, source)
        try:
            for _ in range(repairs):
                keys = sorted(rnd.sample(range(1, rows + 1), KEYS_PER_REPAIR))
                repair = store.create_request(  # what `dblog dump --keys` queues, at once
                    DumpKind.KEYS, [table], chunk_size=10, delay_ms=0,
                    keys=[(str(key),) for key in keys])
                created, completed = worker.wait_dump(repair.id, 60)
                times.append(completed - created)
                if store.get_request(request_id).state is not RequestState.RUNNING:
                    raise RuntimeError("the full dump ended before the repairs: give it "
                                       "more rows (--rows)")
                time.sleep(TINY_PAUSE_S if tiny else 1.0)
        finally:
            store.close()
        created, completed = worker.wait_dump(request_id, dump_timeout(rows) * 3)
    finally:
        worker.cleanup()
    return completed - created, times


def spread(values: list[float]) -> dict[str, float]:
    return {"median": rounded(median(values)), "p90": rounded(percentile(values, 90)),
            "min": rounded(min(values)), "max": rounded(max(values))}


def run(options: Options) -> Result:
    rows = options.rows
    repairs = QUICK_REPAIRS if options.quick else REPAIRS
    rnd = random.Random(7)
    alone_s: list[float] = []
    with_s: list[float] = []
    window_s: list[float] = []
    repair_s: list[float] = []
    with Environment(NAME, options) as env:
        table = env.table(TABLE_NAME)
        create_table(env, table, rows)
        for i in range(options.runs):
            steps = ["alone", "with"] if i % 2 == 0 else ["with", "alone"]
            for step in steps:
                if not options.tiny:  # the server's background work of the last dump settles
                    time.sleep(1.0)
                if step == "alone":
                    seconds, windows = alone(env, f"pa{i}", table, rows, options.tiny)
                    alone_s.append(seconds)
                    window_s.append(seconds / max(1, windows))
                else:
                    seconds, times = with_repairs(env, f"pw{i}", table, rows, repairs, rnd,
                                                  options.tiny)
                    with_s.append(seconds)
                    repair_s.extend(times)
            progress(f"{NAME} run {i + 1}/{options.runs}: alone {alone_s[-1]:.2f} s "
                     f"({window_s[-1] * 1000:.0f} ms a window), with repairs {with_s[-1]:.2f} s, "
                     f"repairs {', '.join(f'{t:.3f}' for t in repair_s[-repairs:])} s")

    window = median(window_s)
    in_windows = [t / window for t in repair_s]
    report: dict[str, Any] = {
        "benchmark": NAME,
        "rows": rows,
        "runs": options.runs,
        "full_dump": {"chunk_size": chunk_size(rows, options.tiny),
                      "delay_ms": delay_ms(options.tiny),
                      "priority": "background"},
        "repairs_per_run": repairs,
        "keys_per_repair": KEYS_PER_REPAIR,
        "window_s": spread(window_s),
        "repair_s": spread(repair_s),
        "repair_windows": spread(in_windows),
        "goal_windows": GOAL_WINDOWS,
        "under_goal": rounded(sum(w < GOAL_WINDOWS for w in in_windows) / len(in_windows)),
        "goal_met": median(in_windows) < GOAL_WINDOWS,
        "full_dump_alone_s": spread(alone_s),
        "full_dump_with_repairs_s": spread(with_s),
        "full_dump_slowdown": spread([w / a - 1 for w, a in zip(with_s, alone_s,
                                                                strict=True)]),
        "machine": machine(options.source),
    }
    return report
