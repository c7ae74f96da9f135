"""The worker's process leaves pandas out: pyarrow would load it for nothing. The CLI's
control commands (``dblog dump``, ``list``, ``pause``...) start without pyarrow and numpy:
a third of their start-up time."""

from __future__ import annotations

import subprocess
import sys

import pytest

CHECK = """
import sys
from dblog_worker.cli import without_pandas
without_pandas()
import dblog_worker.capture.session, dblog_worker.pg.source, dblog_worker.mysql.source
import io, pyarrow as pa, pyarrow.parquet as pq
table = pa.table({"a": pa.array(["x", None]), "b": pa.array([1, 2], pa.int64())})
buffer = io.BytesIO()
pq.write_table(table, buffer, compression="zstd")
assert pq.ParquetFile(buffer).read().equals(table)  # not read_table: apache/arrow#34314
assert "pandas" not in sys.modules
try:
    import pandas
except ModuleNotFoundError as exc:
    print(exc)
"""


def test_the_worker_writes_parquet_without_loading_pandas() -> None:
    done = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True,
                          check=False, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "the dblog worker does not load pandas"


def test_a_process_that_has_pandas_keeps_it() -> None:
    pytest.importorskip("pandas")
    check = ("import sys, pandas\nfrom dblog_worker.cli import without_pandas\n"
             "without_pandas()\nimport pandas.api\nprint(len(sys.meta_path))")
    plain = "import sys, pandas\nprint(len(sys.meta_path))"
    runs = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           check=True, timeout=120).stdout for code in (check, plain)]
    assert runs[0] == runs[1]


def test_the_cli_starts_without_pyarrow() -> None:
    check = ("import sys, dblog_worker.cli\n"
             "print(sorted(m for m in ('pyarrow', 'numpy', 'pandas') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True,
                          check=True, timeout=120)
    assert done.stdout.strip() == "[]", done.stdout
