"""Run the benchmarks: ``python -m bench.run [--source KIND] [--only NAME] [--rows N]
[--runs K] [--quick]``.

One JSON object per benchmark and source kind is printed on stdout, one per line (and
appended to ``--out FILE``), with the kind in its ``source`` field; progress goes to
stderr. See ``docs/benchmarks.md``.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

from bench.common import SOURCES, Options, emit, progress

# The benchmarks: each the module bench.<name>, with NAME, run(options), FIGURES and, if it
# runs for some source kinds only, SOURCE_KINDS. Imported when they run: their imports
# (pyarrow, the drivers, the worker's modules) take seconds, and a run is often of one.
BENCHMARKS = (
    "cascade_merge",
    "dump_throughput",
    "filtered_dumps",
    "lake_merge",
    "landing_stores",
    "log_capture",
    "live_latency",
    "memory",
    "merge_throughput",
    "metrics_exposition",
    "priorities",
    "replica_identity",
    "replica_reads",
    "takeover",
    "throttle",
    "verify_throughput",
    "watermark_modes",
)


def benchmark(name: str) -> ModuleType:
    """The module of benchmark ``name``."""
    return importlib.import_module(f"bench.{name}")


def source_kinds(name: str) -> tuple[str, ...]:
    """The source kinds benchmark ``name`` runs for."""
    kinds: tuple[str, ...] = getattr(benchmark(name), "SOURCE_KINDS", SOURCES)
    return kinds


QUICK_ROWS = 50_000
QUICK_MEMORY_ROWS = (100_000, 500_000)
QUICK_IDLE_S = 5.0
QUICK_KILLS = 3


def parse_options(
    argv: Sequence[str] | None,
) -> tuple[Options, list[str], list[str], Path | None]:
    parser = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__)
    parser.add_argument("--source", choices=[*SOURCES, "all"], default="all",
                        help="the source kind to benchmark (default: all, one after the other)")
    parser.add_argument("--only", action="append", choices=sorted(BENCHMARKS), metavar="NAME",
                        help=f"run only this benchmark (repeatable): {', '.join(BENCHMARKS)}")
    parser.add_argument("--rows", type=int,
                        help="table size; merge_throughput: landed events "
                             "(default 1000000; --quick 50000)")
    parser.add_argument("--runs", type=int, help="runs per benchmark (default 3; --quick 1)")
    parser.add_argument("--quick", action="store_true",
                        help="a smoke run: 50k rows, 1 run, memory 100k/500k, 5 s idle, "
                             "3 kills")
    parser.add_argument("--idle-s", type=float,
                        help="live_latency: seconds of idle trickle (default 30; --quick 5)")
    parser.add_argument("--kills", type=int,
                        help="takeover: leader kills per run and lease configuration "
                             f"(default {Options.kills}; --quick {QUICK_KILLS})")
    parser.add_argument("--masks", action="store_true",
                        help="the workers hash, mask and exclude columns of the benchmark "
                             "tables ([source.columns]; bench.common.MASKS)")
    parser.add_argument("--tiny", action="store_true",
                        help="the test suite's smoke run (with --quick --rows 2000 --runs 1): "
                             "each benchmark runs every path at the least cost (smaller "
                             "sizes and waits, no warm-ups, local[1] Spark); figures mean "
                             "nothing")
    parser.add_argument("--out", type=Path, help="also append the JSON lines to this file")
    parser.add_argument("--profile", type=Path, metavar="DIR",
                        help="sample every worker with py-spy into DIR (raw collapsed stacks)")
    parser.add_argument("--profile-gil", action="store_true",
                        help="with --profile: sample only the thread holding the GIL")
    args = parser.parse_args(argv)
    if args.profile_gil and args.profile is None:
        parser.error("--profile-gil needs --profile DIR")
    rows = args.rows if args.rows is not None else (QUICK_ROWS if args.quick else 1_000_000)
    runs = args.runs if args.runs is not None else (1 if args.quick else 3)
    kills = args.kills if args.kills is not None else (
        QUICK_KILLS if args.quick else Options.kills)
    if rows < 1_000 or runs < 1 or kills < 1:
        parser.error("--rows must be at least 1000, --runs and --kills at least 1")
    memory_rows = QUICK_MEMORY_ROWS if args.quick and args.rows is None else (rows, 5 * rows)
    idle_s = args.idle_s if args.idle_s is not None else (QUICK_IDLE_S if args.quick else 30.0)
    options = Options(rows=rows, runs=runs, quick=args.quick, memory_rows=memory_rows,
                      idle_s=idle_s, profile_dir=args.profile,
                      profile_gil=args.profile_gil, kills=kills, masks=args.masks,
                      tiny=args.tiny)
    sources = list(SOURCES) if args.source == "all" else [args.source]
    return options, sources, args.only or list(BENCHMARKS), args.out


def main(argv: Sequence[str] | None = None) -> int:
    options, sources, names, out = parse_options(argv)
    shown = dataclasses.replace(options, source="+".join(sources))
    progress(f"benchmarks {', '.join(names)}: {shown}")
    for source in sources:
        for name in names:
            if source not in source_kinds(name):
                progress(f"== {name} ({source}): skipped, it runs for "
                         f"{', '.join(source_kinds(name))} only")
                continue
            progress(f"== {name} ({source})")
            result = benchmark(name).run(dataclasses.replace(options, source=source))
            emit({"benchmark": result["benchmark"], "source": source,
                  **({"masks": True} if options.masks else {}), **result}, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
