"""A chunk's cells, from libpq's result to one Arrow string array per column.

The chunk SELECT's result is read in text format; its cells are PostgreSQL's text output,
valid UTF-8 (the worker refuses other encodings), viewed as strings without decoding.

Two readers give the same arrays:

* the C reader (``_textcells.c``, built by ``pip install``): copies the cells into the
  arrays' buffers with the GIL released, no Python object per cell. It calls the libpq
  functions of the libpq psycopg uses, found among the process's loaded libraries and
  checked against psycopg's own report of its version;
* the Python reader: ``PGresult.get_value`` per cell, used where the C reader is not
  built or no such libpq is found (psycopg's pure-Python implementation on another system).

:data:`READER` says which one this process uses.
"""

from __future__ import annotations

import ctypes
import functools
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psycopg
import pyarrow as pa
from psycopg.pq.abc import PGresult

log = logging.getLogger(__name__)

LibpqFunctions = tuple[int, int, int]  # PQgetvalue, PQgetlength, PQgetisnull


def _loaded_libpq_paths() -> list[str]:
    """The libpq files mapped into this process (Linux: /proc/self/maps)."""
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return []
    paths = {line.split(maxsplit=5)[-1] for line in maps.splitlines() if "/libpq" in line}
    return sorted(p for p in paths if Path(p).name.startswith("libpq") and ".so" in p)


def _resolved(path: Path) -> Path:
    """``path`` with every symbolic link resolved, as /proc/self/maps names files (a
    virtual environment reached through a link, such as ``current/`` -> a release)."""
    try:
        return path.resolve()
    except OSError:
        return path


@functools.cache
def libpq_functions() -> LibpqFunctions | None:
    """The addresses of the libpq functions the C reader calls, from the libpq psycopg
    uses; None if that libpq cannot be told apart (then the Python reader is used)."""
    if psycopg.pq.__impl__ not in ("binary", "c"):
        return None
    candidates = _loaded_libpq_paths()
    if psycopg.pq.__impl__ == "binary":  # its own copy, beside the psycopg_binary package
        import psycopg_binary

        bundled = _resolved(Path(psycopg_binary.__file__).parent.parent / "psycopg_binary.libs")
        candidates = [p for p in candidates if _resolved(Path(p)).parent == bundled]
    if len(candidates) != 1:
        return None
    try:
        library = ctypes.CDLL(candidates[0])  # already loaded: the same library, not a copy
        if library.PQlibVersion() != psycopg.pq.version():
            return None
        functions = (library.PQgetvalue, library.PQgetlength, library.PQgetisnull)
    except (OSError, AttributeError):
        return None
    addresses = tuple(ctypes.cast(f, ctypes.c_void_p).value or 0 for f in functions)
    return (addresses[0], addresses[1], addresses[2]) if all(addresses) else None


def _c_reader() -> Any:
    try:
        from dblog_worker.pg import _textcells
    except ImportError:
        return None
    return _textcells if libpq_functions() is not None else None


_TEXTCELLS = _c_reader()
READER = "c" if _TEXTCELLS is not None else "python"


@functools.cache
def announce() -> None:
    """Say once which reader this process uses; the Python one is a warning."""
    if READER == "c":
        log.info("chunk cells are read by the C reader (dblog_worker/pg/_textcells.c)")
    else:
        log.warning("the C reader of chunk cells is not built, or psycopg's libpq was not found "
                    "(psycopg.pq.__impl__ = %s): PostgreSQL dumps read cells in Python, slower; "
                    "install gcc and the Python headers, then reinstall dblog",
                    psycopg.pq.__impl__)


def result_columns(result: PGresult, fields: Sequence[int]) -> list[Any]:
    """Columns ``fields`` of ``result`` (text format), each a pa.string() array, null for
    NULL; OverflowError if a column holds more than 2 GiB (a string array's limit)."""
    if _TEXTCELLS is None:
        return python_result_columns(result, fields)
    return c_result_columns(result, fields)


def c_result_columns(result: PGresult, fields: Sequence[int]) -> list[Any]:
    """:func:`result_columns` by the C reader (ImportError if it is not built)."""
    from dblog_worker.pg import _textcells

    functions = libpq_functions()
    if functions is None:
        raise ImportError("psycopg's libpq is not found among the process's libraries")
    address = getattr(result, "pgresult_ptr", None)  # psycopg's, not in its PGresult protocol
    if not address:
        raise ValueError("the result is cleared")
    count = result.ntuples
    return [
        pa.Array.from_buffers(
            pa.string(), count,
            [None if validity is None else pa.py_buffer(validity), pa.py_buffer(offsets),
             pa.py_buffer(data)],
            null_count=nulls,
        )
        for nulls, validity, offsets, data in _textcells.text_columns(
            address, count, result.nfields, tuple(fields), *functions)
    ]


def python_result_columns(result: PGresult, fields: Sequence[int]) -> list[Any]:
    """:func:`result_columns` by ``PGresult.get_value``, one cell at a time."""
    count, get = result.ntuples, result.get_value
    return [pa.array([get(r, c) for r in range(count)], pa.binary()).view(pa.string())
            for c in fields]
