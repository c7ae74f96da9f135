"""The demo (``scripts/demo.py``) runs end to end and its landing zone converges to the source.

It starts its own source database and Redis, dumps the shop's tables under a live write load,
replays the output and compares it with the source tables, merges the landing zone into
target tables with Spark and runs ``dblog verify`` on them; these tests run it as a user would
(with the current interpreter, in a directory of the test) and read its summary: the
PostgreSQL demo with its default 120k rows, the MariaDB one (``--source mariadb``) with small
tables.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_demo(workdir: Path, *args: str) -> str:
    """Run the demo; assert it converged; return its standard output."""
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "demo.py"), "--workdir", str(workdir), *args],
        capture_output=True, text=True, timeout=480, cwd=workdir, check=False,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-6000:]
    assert "RESULT: converged" in result.stdout, output[-6000:]
    return result.stdout


def check_summary(stdout: str, workdir: Path, tables: Sequence[str]) -> None:
    for table in tables:
        line = next(line for line in stdout.splitlines()
                    if line.strip().startswith(table) and line.rstrip().endswith("converged"))
        source_rows, output_rows = re.findall(r"[\d,]+", line.split(table, 1)[1])[:2]
        assert source_rows == output_rows
    assert "no time travel" in stdout
    # The two keys that never existed are reported (the load may have deleted a sampled one).
    assert re.search(r"reported missing: (.+, )?90000001, 90000002$", stdout, re.M)
    assert re.search(r"dump-1\s+completed\s+all\s+2/2", stdout)
    assert re.search(r"dump-2\s+completed\s+keys\s+1/1", stdout)
    segments = list((workdir / "landing" / "shop").glob("*/segment-*.parquet"))
    assert segments, "the landing zone is empty"
    for table in tables:  # dblog verify's line for each merged target table
        assert re.search(rf"^\s+{re.escape(table)} -> \S+: [\d,]+ rows, \d+ ranges, 0 missing"
                         r" or extra, 0 changed: EQUAL$", stdout, re.M), stdout[-3000:]
    assert "dblog verify` finds the merged target tables equal" in stdout


def test_demo_converges(tmp_path: Path) -> None:
    stdout = run_demo(tmp_path)
    check_summary(stdout, tmp_path, ("public.customers", "public.orders"))
    assert "has reached the source's WAL position" in stdout


def test_mariadb_demo_converges(tmp_path: Path) -> None:
    stdout = run_demo(tmp_path, "--source", "mariadb", "--customers", "2000", "--orders",
                      "10000", "--chunk-size", "500")
    check_summary(stdout, tmp_path, ("shop.customers", "shop.orders"))
    assert "starting a throwaway MariaDB" in stdout
    # The drain compared the worker's binlog checkpoint with SHOW MASTER STATUS.
    assert re.search(r"checkpoint \{\"file\":\"[^\"]+\.\d+\",\"pos\":\d+,\"gtid\":\"[^\"]*\"\} "
                     r"has reached the source's binlog position \S+\.\d+:\d+$", stdout, re.M)
