"""filtered_dumps: what a filtered dump or a key range costs next to the whole table's dump.

The ``dump_throughput`` table (1M rows by default; column ``a`` spreads evenly over 0 to
1,000,002). Each run dumps it three ways, each by a fresh worker, the order rotated every
run: the whole table; ``--where a < 100000`` (about a tenth of the rows, spread over the
whole key range: every chunk walks the key index until it has its rows); ``--from-key 1
--to-key <rows/10>`` (a tenth of the rows, an index range). The landed rows are checked
against what the source holds for each.

Reported (medians): seconds and emitted rows/s of each way, and each filtered dump's
seconds as a share of the whole dump's (``seconds_ratio``, the per-run ratio's median):
the key range should cost about its share of the rows, the condition more (it reads every
row of the table to find its tenth).
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

NAME = "filtered_dumps"
# What a run must produce: finite numbers above 0 (tests/bench: each benchmark, tiny).
FIGURES = ("whole.rows_per_s", "where.rows_per_s", "key_range.rows_per_s")
BOUND = 100_000  # ``a < BOUND``: about a tenth of the rows


def ways(rows: int) -> dict[str, list[str]]:
    return {
        "whole": [],
        "where": ["--where", "a", "<", str(BOUND)],
        "key_range": ["--from-key", "1", "--to-key", str(max(1, rows // 10))],
    }


def expected_rows(env: Environment, table: str, rows: int) -> dict[str, int]:
    sql = f"SELECT count(*) FROM {table} WHERE a < {BOUND}"
    if env.is_mariadb:
        with env.mysql_connect() as conn, conn.cursor() as cursor:
            cursor.execute(sql)
            where = int(cursor.fetchone()[0])
    else:
        with env.connect() as conn:
            found = conn.execute(sql.encode()).fetchone()
            where = int(str(found[0])) if found else 0
    return {"whole": rows, "where": where, "key_range": max(1, rows // 10)}


def dump(env: Environment, source: str, table: str, rows: int, extra: list[str],
         expected: int) -> float:
    """One dump by a fresh worker: its seconds (created to completed, as Redis has them)."""
    worker = env.worker(source, [table]).start()
    try:
        request = worker.request_dump(table, extra=extra)
        created, completed = worker.wait_dump(request, dump_timeout(rows))
        landed = worker.landed_rows(table)
        if landed != expected:
            raise RuntimeError(f"{landed} rows landed, expected {expected} ({extra})")
    finally:
        worker.cleanup()
    return completed - created


def run(options: Options) -> Result:
    rows = options.rows
    with Environment(NAME, options) as env:
        table = env.table(TABLE_NAME)
        create_table(env, table, rows)
        counts = expected_rows(env, table, rows)
        names = list(ways(rows))
        seconds: dict[str, list[float]] = {name: [] for name in names}
        for i in range(options.runs):
            for name in names[i % 3:] + names[:i % 3]:
                if not options.tiny:  # the server's background work of the last dump settles
                    time.sleep(1.0)
                seconds[name].append(dump(env, f"fd{i}{name[0]}", table, rows,
                                          ways(rows)[name], counts[name]))
            progress(f"{NAME} run {i + 1}/{options.runs}: " + ", ".join(
                f"{name} {seconds[name][-1]:.2f} s" for name in names))

    report: dict[str, Any] = {
        "benchmark": NAME,
        "rows": rows,
        "runs": options.runs,
        "filters": {name: " ".join(args) or "-" for name, args in ways(rows).items()},
        "emitted_rows": counts,
    }
    for name in names:
        report[name] = {
            "seconds": rounded(median(seconds[name])),
            "rows_per_s": round(counts[name] / median(seconds[name])),
        }
        if name != "whole":
            report[name]["seconds_ratio"] = rounded(median(
                [s / w for s, w in zip(seconds[name], seconds["whole"], strict=True)]))
    report["machine"] = machine(options.source)
    return report
