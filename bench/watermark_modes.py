"""watermark_modes: a whole-table dump with each way of writing watermarks, side by side.

The ``dump_throughput`` table (1M rows by default), dumped by a fresh worker per mode, the
order rotated every run: PostgreSQL ``watermarks = "table"`` (upserts of dblog.watermark)
and ``"message"`` (pg_logical_emit_message); MariaDB ``"table"`` and ``"position"`` (each
chunk SELECT in a consistent snapshot, no write). The landed rows are checked.

Reported (medians): each mode's seconds and rows/s, its seconds as a share of the table
mode's (``seconds_ratio``, the per-run ratio's median), and what the dump wrote to the
source's log (``log_bytes``: WAL or binary log bytes from the dump's request to its
completion, the source idle otherwise): the cost on the source the modes differ in.
"""

from __future__ import annotations

import time
from typing import Any

from bench.common import (
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
from bench.dump_throughput import TABLE_NAME

NAME = "watermark_modes"
# What a run must produce: finite numbers above 0 (tests/bench: each benchmark, tiny).
FIGURES = ("table.rows_per_s", "table.seconds", "*.rows_per_s")
CHUNK_SIZE = 10_000


def modes(env: Environment) -> list[str]:
    return ["table", "position"] if env.is_mariadb else ["table", "message"]


def dump(env: Environment, source: str, table: str, rows: int, mode: str
         ) -> tuple[float, int | None]:
    """One dump by a fresh worker: its seconds (created to completed, as Redis has them)
    and the log bytes written meanwhile (None across a binary log file)."""
    worker = env.worker(source, [table], source_config=f'watermarks = "{mode}"').start()
    try:
        before = env.log_position()
        request = worker.request_dump(table, chunk_size=CHUNK_SIZE)
        created, completed = worker.wait_dump(request, dump_timeout(rows))
        after = env.log_position()
        landed = worker.landed_rows(table)
        if landed != rows:
            raise RuntimeError(f"{landed} rows landed, expected {rows} ({mode})")
    finally:
        worker.cleanup()
    written = after[1] - before[1] if after[0] == before[0] else None
    return completed - created, written


def run(options: Options) -> Result:
    rows = options.rows
    with Environment(NAME, options) as env:
        table = env.table(TABLE_NAME)
        create_table(env, table, rows)
        names = modes(env)
        seconds: dict[str, list[float]] = {name: [] for name in names}
        written: dict[str, list[int]] = {name: [] for name in names}
        for i in range(options.runs):
            for name in names[i % 2:] + names[:i % 2]:
                if not options.tiny:  # the server's background work of the last dump settles
                    time.sleep(1.0)
                took, log_bytes = dump(env, f"wm{i}{name[0]}", table, rows, name)
                seconds[name].append(took)
                if log_bytes is not None:
                    written[name].append(log_bytes)
            progress(f"{NAME} run {i + 1}/{options.runs}: " + ", ".join(
                f"{name} {seconds[name][-1]:.2f} s" for name in names))

    report: dict[str, Any] = {"benchmark": NAME, "rows": rows, "runs": options.runs,
                              "chunk_size": CHUNK_SIZE}
    for name in names:
        report[name] = {
            "seconds": rounded(median(seconds[name])),
            "rows_per_s": round(rows / median(seconds[name])),
            "log_bytes": round(median(written[name])) if written[name] else None,
        }
        if name != "table":
            report[name]["seconds_ratio"] = rounded(median(
                [s / t for s, t in zip(seconds[name], seconds["table"], strict=True)]))
    report["machine"] = machine(options.source)
    return report
