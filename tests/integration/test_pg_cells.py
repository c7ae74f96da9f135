"""A chunk's cells read by the C reader equal the Python reader's, on real PostgreSQL results.

``dblog_worker/pg/cells.py``: the C reader (``_textcells.c``) copies a libpq result's cells
into Arrow buffers; the Python reader makes them with ``PGresult.get_value``. Both must give
the same arrays for every text a column can hold: NULLs anywhere (the validity bitmap's
byte edges included), empty strings, multi-byte and control characters, TOASTed values,
no rows at all.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dblog_worker.pg import cells
from dblog_worker.pg.values import libpq_options

Connection = psycopg.Connection[tuple[Any, ...]]

# PostgreSQL text holds any character but NUL.
TEXTS = st.text(st.characters(exclude_characters="\x00", exclude_categories=["Cs"]),
                max_size=40)
CELL = st.one_of(st.none(), TEXTS)


@pytest.fixture
def conn(pg_dsn: str) -> Iterator[Connection]:
    with psycopg.connect(pg_dsn, autocommit=True, options=libpq_options()) as connection:
        connection.execute("CREATE TABLE cells (n integer PRIMARY KEY, a text, b text, c text)")
        yield connection


def _select(conn: Connection) -> Any:
    result = conn.execute("SELECT n, a, b, c FROM cells ORDER BY n").pgresult
    assert result is not None
    return result


def _both(result: Any, fields: list[int]) -> list[Any]:
    c_columns = cells.c_result_columns(result, fields)
    python_columns = cells.python_result_columns(result, fields)
    for c_column, python_column in zip(c_columns, python_columns, strict=True):
        c_column.validate(full=True)
        assert c_column.type == pa.string()
        assert c_column.equals(python_column), (c_column, python_column)
    return c_columns


def test_the_c_reader_is_built_and_used() -> None:
    assert cells.READER == "c", (
        "the C reader of chunk cells (dblog_worker/pg/_textcells.c) is not built or psycopg's "
        "libpq was not found: install gcc and the Python headers, then `pip install -e .`"
    )
    assert cells.libpq_functions() is not None


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=st.lists(st.tuples(CELL, CELL, CELL), max_size=40))
def test_random_cells_read_alike(conn: Connection, rows: list[tuple[str | None, ...]]) -> None:
    conn.execute("TRUNCATE cells")
    with conn.cursor() as cursor:
        cursor.executemany("INSERT INTO cells VALUES (%s, %s, %s, %s)",
                           [(n, *row) for n, row in enumerate(rows)])
    columns = _both(_select(conn), [1, 2, 3])
    assert [tuple(c[i].as_py() for c in columns) for i in range(len(rows))] == rows


def test_nulls_at_every_bitmap_edge_and_large_values(conn: Connection) -> None:
    big = "é" * 300_000  # TOASTed: the result still holds the whole value
    conn.execute("INSERT INTO cells SELECT g, CASE WHEN g %% 7 = 0 THEN NULL ELSE g::text END, "
                 "CASE WHEN g %% 8 IN (0, 7) THEN NULL ELSE '' END, "
                 "CASE WHEN g = 999 THEN %s END FROM generate_series(1, 1001) AS g", (big,))
    n, a, b, c = _both(_select(conn), [0, 1, 2, 3])
    assert len(n) == 1001 and n.null_count == 0
    assert a.null_count == 1001 // 7 and a[6].as_py() is None and a[7].as_py() == "8"
    assert b.null_count == sum(1 for g in range(1, 1002) if g % 8 in (0, 7))
    assert c.null_count == 1000 and c[998].as_py() == big


def test_no_rows_and_a_subset_of_fields_in_any_order(conn: Connection) -> None:
    assert [len(c) for c in _both(_select(conn), [3, 0])] == [0, 0]
    conn.execute("INSERT INTO cells VALUES (1, 'x', NULL, 'z')")
    c, n = _both(_select(conn), [3, 0])
    assert (c.to_pylist(), n.to_pylist()) == (["z"], ["1"])


def test_bad_fields_and_a_cleared_result_are_refused(conn: Connection) -> None:
    result = _select(conn)
    with pytest.raises(IndexError, match="field 4 of a result of 4"):
        cells.c_result_columns(result, [0, 4])
    with pytest.raises(IndexError, match="field -1"):
        cells.c_result_columns(result, [-1])
    result.clear()
    with pytest.raises(ValueError, match="cleared"):
        cells.c_result_columns(result, [0])


def test_the_c_reader_is_found_through_a_linked_virtual_environment(tmp_path: Path) -> None:
    """Deployments point a link (``current/``) at a release's virtual environment: the
    libpq psycopg maps is named by its real path in /proc/self/maps, the package's path by
    the link; the C reader must be chosen all the same."""
    link = tmp_path / "current"
    link.symlink_to(Path(sys.prefix), target_is_directory=True)
    python = link / "bin" / "python"
    result = subprocess.run(
        [str(python), "-c", "import sys; from dblog_worker.pg import cells; "
         "print(sys.prefix, cells.READER)"],
        capture_output=True, text=True, check=True, cwd=tmp_path)
    prefix, reader = result.stdout.split()
    assert (prefix, reader) == (str(link), "c"), result.stderr
