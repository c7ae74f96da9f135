"""Every benchmark, at a tiny size, for every source kind it runs for: it must run to its end
and produce its figures (each module's ``FIGURES``: finite numbers above 0). A baseline or a
benchmark that breaks fails here, not in the hands of the next reader of docs/benchmarks.md.

``--tiny`` runs every path of each benchmark (its baseline, every variant, its kill) at
the least cost: no warm-ups, pauses or repetitions (docs/benchmarks.md). The figures of
such a run mean nothing (a few thousand rows on a busy machine); the full
runs are ``python -m bench.run`` (docs/benchmarks.md).
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from bench import run as bench_run

ROOT = Path(__file__).resolve().parents[2]
TINY = ["--tiny", "--quick", "--rows", "2000", "--runs", "1", "--kills", "1", "--idle-s", "2"]


def cases() -> Iterator[Any]:
    for name in bench_run.BENCHMARKS:
        for source in bench_run.source_kinds(name):
            yield pytest.param(name, source, id=f"{name}-{source}")


def module(name: str) -> ModuleType:
    found = bench_run.benchmark(name)
    assert getattr(found, "NAME", None) == name, found
    assert callable(getattr(found, "run", None)), found
    return found


def figure(result: Any, path: str) -> list[tuple[str, Any]]:
    """The values at ``path`` (dots between keys; ``*`` is every key holding the rest)."""
    head, _, rest = path.partition(".")
    if head == "*":
        holders = {key: value for key, value in result.items()
                   if isinstance(value, dict) and rest.split(".")[0] in value}
        found = [(f"{key}.{p}", v) for key, value in holders.items()
                 for p, v in figure(value, rest)]
        assert found, f"no key of {sorted(result)} holds {rest}"
        return found
    assert isinstance(result, dict) and head in result, f"{head} not in {result!r:.300}"
    return figure(result[head], rest) if rest else [(head, result[head])]


def test_every_benchmark_names_its_figures() -> None:
    for name in bench_run.BENCHMARKS:
        figures = getattr(module(name), "FIGURES", None)
        assert isinstance(figures, tuple) and figures, f"bench/{name}.py has no FIGURES"


@pytest.mark.timeout(900)
@pytest.mark.parametrize(("name", "source"), list(cases()))
def test_a_tiny_run_produces_its_figures(name: str, source: str, tmp_path: Path) -> None:
    out = tmp_path / "result.jsonl"
    done = subprocess.run(
        [sys.executable, "-m", "bench.run", *TINY, "--source", source, "--only", name,
         "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=840, check=False)
    assert done.returncode == 0, done.stderr[-6000:]
    lines = out.read_text().splitlines()
    assert len(lines) == 1, lines
    result = json.loads(lines[0])
    assert (result["benchmark"], result["source"]) == (name, source)
    for path in module(name).FIGURES:
        for where, value in figure(result, path):
            assert isinstance(value, (int, float)) and not isinstance(value, bool), (where, value)
            assert math.isfinite(value) and value > 0, (where, value, done.stderr[-3000:])
