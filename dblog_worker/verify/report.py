"""What ``dblog verify`` found: per table and in all, as JSON, text and keys files."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from dblog_worker.errors import RequestRejected
from dblog_worker.landing.names import table_dir_name

# --- results --------------------------------------------------------------------------

KeyValues = tuple[object, ...]
"""A primary key as JSON values, the form ``dblog dump --keys`` takes."""


@dataclass(frozen=True, slots=True)
class TableResult:
    """The comparison of one table.  Times in seconds: ``seconds`` is the wall time;
    ``source_seconds``/``target_seconds`` the time each database spent on queries (they
    run at the same time), ``database_seconds`` the time at least one of them did,
    ``delay_seconds`` the pauses (``--delay-ms``, ``--recheck``), ``python_seconds`` the
    rest."""

    table: str
    target_table: str
    key_columns: tuple[str, ...]
    key_order: str = "native"
    source_rows: int = 0
    target_rows: int = 0
    ranges: int = 0
    differing_ranges: int = 0
    missing: tuple[KeyValues, ...] = ()  # in the source only
    extra: tuple[KeyValues, ...] = ()  # in the target only
    changed: tuple[KeyValues, ...] = ()  # in both, with different values
    truncated: bool = False  # stopped after max_keys differing keys
    rechecked: bool = False  # the keys above differed again after a pause
    error: str | None = None  # the table could not be compared
    seconds: float = 0.0
    database_seconds: float = 0.0  # while a query ran on either database (they overlap)
    source_seconds: float = 0.0
    target_seconds: float = 0.0
    delay_seconds: float = 0.0
    source_queries: int = 0
    target_queries: int = 0

    @property
    def python_seconds(self) -> float:
        return max(0.0, self.seconds - self.database_seconds - self.delay_seconds)

    @property
    def equal(self) -> bool:
        return self.error is None and not (self.missing or self.extra or self.changed)

    @property
    def rows_per_s(self) -> float:
        busy = self.seconds - self.delay_seconds
        return self.source_rows / busy if busy > 0 else 0.0

    def keys(self) -> list[KeyValues]:
        """Every differing key: what a primary-key dump of the source table repairs."""
        return [*self.missing, *self.changed, *self.extra]

    def to_json(self) -> dict[str, object]:
        return {
            "table": self.table, "target_table": self.target_table, "equal": self.equal,
            "error": self.error, "key_columns": list(self.key_columns),
            "key_order": self.key_order, "source_rows": self.source_rows,
            "target_rows": self.target_rows, "ranges": self.ranges,
            "differing_ranges": self.differing_ranges,
            "missing": [list(k) for k in self.missing], "extra": [list(k) for k in self.extra],
            "changed": [list(k) for k in self.changed], "truncated": self.truncated,
            "rechecked": self.rechecked, "seconds": round(self.seconds, 6),
            "database_seconds": round(self.database_seconds, 6),
            "source_seconds": round(self.source_seconds, 6),
            "target_seconds": round(self.target_seconds, 6),
            "delay_seconds": round(self.delay_seconds, 6),
            "python_seconds": round(self.python_seconds, 6),
            "rows_per_s": round(self.rows_per_s, 1), "source_queries": self.source_queries,
            "target_queries": self.target_queries,
        }


@dataclass(frozen=True, slots=True)
class VerifyResult:
    """Every table's comparison.  The times cover the whole command: connecting and
    reading the catalogs too (see :class:`TableResult` for their meaning)."""

    tables: tuple[TableResult, ...]
    seconds: float = 0.0
    database_seconds: float = 0.0
    source_seconds: float = 0.0
    target_seconds: float = 0.0

    @property
    def equal(self) -> bool:
        return all(t.equal for t in self.tables)

    @property
    def delay_seconds(self) -> float:
        return sum(t.delay_seconds for t in self.tables)

    @property
    def python_seconds(self) -> float:
        return max(0.0, self.seconds - self.database_seconds - self.delay_seconds)

    def to_json(self) -> dict[str, object]:
        return {
            "equal": self.equal, "seconds": round(self.seconds, 6),
            "database_seconds": round(self.database_seconds, 6),
            "source_seconds": round(self.source_seconds, 6),
            "target_seconds": round(self.target_seconds, 6),
            "delay_seconds": round(self.delay_seconds, 6),
            "python_seconds": round(self.python_seconds, 6),
            "tables": [t.to_json() for t in self.tables],
        }


# --- output ---------------------------------------------------------------------------


def keys_document(keys: Sequence[KeyValues]) -> str:
    """Keys as ``dblog dump --keys-file`` reads them: ``[1, 2]`` for one key column,
    ``[[1, "a"], ...]`` for several."""
    items = [key[0] if len(key) == 1 else list(key) for key in keys]
    return json.dumps(items, ensure_ascii=False) + "\n"


def keys_paths(pattern: str, tables: Sequence[str]) -> dict[str, Path]:
    """The keys file of each table: ``pattern``, where ``{table}`` stands for the table's
    name as the landing zone spells it; needed when there are several tables."""
    if len(tables) > 1 and "{table}" not in pattern:
        raise RequestRejected("--keys-out with several tables needs {table} in the file name, "
                              "e.g. diff-{table}.json (a keys file holds one table's keys)")
    paths = {t: Path(pattern.replace("{table}", table_dir_name(*t.split(".", 1))))
             for t in tables}
    for path in paths.values():
        if not path.parent.is_dir():
            raise RequestRejected(f"--keys-out: the directory {path.parent} does not exist")
    return paths


def write_keys(result: TableResult, path: Path) -> bool:
    """Write the table's differing keys to ``path`` (atomically); with none, remove the file
    so that an old list is not replayed.  Returns whether a file was written."""
    keys = result.keys()
    if not keys:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        return False
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=".tmp-keys-")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(keys_document(keys))
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise
    return True


def render(result: VerifyResult, max_listed: int = 100) -> str:
    """The text report: a summary per table, then its differing keys."""
    lines = []
    for table in result.tables:
        head = f"{table.table} -> {table.target_table}: "
        if table.error is not None:
            lines.append(head + f"not compared: {table.error}")
            continue
        count = len(table.keys())
        verdict = "equal" if table.equal else (
            f"{count}{'+' if table.truncated else ''} keys differ ({len(table.missing)} "
            f"missing, {len(table.extra)} extra, {len(table.changed)} changed"
            + (", still after the recheck" if table.rechecked else "") + ")")
        lines.append(head + verdict)
        lines.append(f"  rows: source {table.source_rows:,}, target {table.target_rows:,}; "
                     f"{table.ranges:,} ranges, {table.differing_ranges:,} differing; "
                     f"key order {table.key_order}")
        lines.append(f"  time: {table.seconds:.2f} s, {table.rows_per_s:,.0f} rows/s; databases "
                     f"{table.database_seconds:.2f} s (source {table.source_seconds:.2f} s, "
                     f"target {table.target_seconds:.2f} s, side by side), python "
                     f"{table.python_seconds:.2f} s, delay {table.delay_seconds:.2f} s")
        for kind, keys in (("missing", table.missing), ("changed", table.changed),
                           ("extra", table.extra)):
            for key in keys[:max_listed]:
                lines.append(f"  {kind:8} {json.dumps(list(key), ensure_ascii=False)}")
            if len(keys) > max_listed:
                lines.append(f"  {kind:8} ... and {len(keys) - max_listed:,} more "
                             "(all of them: --keys-out FILE or --json)")
    differing = sum(1 for t in result.tables if not t.equal)
    lines.append(f"RESULT: {'equal' if result.equal else 'different'}: {differing} of "
                 f"{len(result.tables)} table(s) differ")
    return "\n".join(lines)
