"""The demo (``scripts/demo.py``) runs end to end and its landing zone converges to the source.

It starts its own PostgreSQL and Redis, dumps 120k rows under a live write load, replays the
output and compares it with the source tables; this test runs it as a user would (with the
current interpreter, in a directory of the test) and reads its summary.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_demo_converges(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "demo.py"), "--workdir", str(tmp_path)],
        capture_output=True, text=True, timeout=240, cwd=tmp_path, check=False,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-6000:]
    assert "RESULT: converged" in result.stdout, output[-6000:]
    for table in ("public.customers", "public.orders"):
        line = next(line for line in result.stdout.splitlines()
                    if line.strip().startswith(table) and line.rstrip().endswith("converged"))
        source_rows, output_rows = re.findall(r"[\d,]+", line.split(table, 1)[1])[:2]
        assert source_rows == output_rows
    assert "no time travel" in result.stdout
    # The two keys that never existed are reported (the load may have deleted a sampled one).
    assert re.search(r"reported missing: (.+, )?90000001, 90000002$", result.stdout, re.M)
    assert re.search(r"dump-1\s+completed\s+all\s+2/2", result.stdout)
    assert re.search(r"dump-2\s+completed\s+keys\s+1/1", result.stdout)
    segments = list((tmp_path / "landing" / "shop").glob("*/segment-*.parquet"))
    assert segments, "the landing zone is empty"
