"""``dblog verify``: compare source tables with their merged targets, range by key range.

The walk over one table's key ranges is :mod:`dblog_worker.verify_walk`;
:class:`TableReader` runs its queries (:mod:`dblog_worker.verify_sql`).  Every query is
one short read-only statement in autocommit: no transaction is held open, no lock
taken.  The source's and the target's query of a step run at the same time (the
target's in a worker thread, :class:`InParallel`); :class:`Database` records when each
query ran, so a result splits its wall time into the time a database was busy
(:func:`busy_seconds`), the pauses, and Python.

Keys travel as their normalized texts (:class:`Key`), which are equal in both
databases for the same value; they are bound through the columns' ``key_param``
and reported through the source columns' ``key_json``, the form ``dblog dump
--keys`` takes.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from dblog_worker import verify_sql as vs
from dblog_worker.config import Config
from dblog_worker.errors import RequestRejected, SourceUnavailable
from dblog_worker.landing import table_dir_name
from dblog_worker.requests import MAX_KEYS
from dblog_worker.verify_sql import KeyParam, SideSql, TablePlan, VerifyFailed
from dblog_worker.verify_walk import Both, Key, Sides, Summary, WalkOptions, recheck, walk

_S = TypeVar("_S")
_T = TypeVar("_T")

# --- databases ------------------------------------------------------------------------

class Database:
    """One connection to the source or the target; counts the seconds spent in queries."""

    def __init__(self, role: str, kind: str, dsn: str, safe_dsn: str) -> None:
        self.role = role  # "source" or "target"
        self.kind = kind
        self._dsn = dsn
        self.safe_dsn = safe_dsn
        self.seconds = 0.0
        self.queries = 0
        self.intervals: list[tuple[float, float]] = []  # perf_counter start and end of each
        self._conn: vs.Connection | None = None

    def connect(self) -> None:
        started = time.perf_counter()
        try:
            self._connect()
        finally:
            ended = time.perf_counter()
            self.seconds += ended - started
            self.intervals.append((started, ended))

    def _connect(self) -> None:
        where = f"the {self.role} database ({self.safe_dsn})"
        self._conn = vs.sql_of(self.kind).connect(self._dsn, where)

    def query(self, sql: str, params: Sequence[object]) -> list[tuple[Any, ...]]:
        """Run one statement; always with a parameter list, so ``%%`` means ``%``."""
        started = time.perf_counter()
        try:
            if self._conn is None:
                raise SourceUnavailable(f"not connected to the {self.role} database")
            return self._conn.query(sql, params)
        finally:
            ended = time.perf_counter()
            self.seconds += ended - started
            self.queries += 1
            self.intervals.append((started, ended))

    def close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):
                self._conn.close()
        self._conn = None


def busy_seconds(intervals: Sequence[tuple[float, float]], since: float = 0.0) -> float:
    """How long at least one of these intervals (from ``since`` on) was running."""
    total, reach = 0.0, since
    for start, end in sorted(intervals):
        start = max(start, reach)
        if end > start:
            total += end - start
            reach = end
    return total


class InParallel:
    """Runs the target's call in a worker thread while the source's runs in this one."""

    def __init__(self, executor: ThreadPoolExecutor) -> None:
        self.executor = executor

    def __call__(self, source: Callable[[], _S], target: Callable[[], _T]) -> tuple[_S, _T]:
        future = self.executor.submit(target)
        try:
            first = source()
        except BaseException:
            with contextlib.suppress(Exception):  # let the target's query end first
                future.result()
            raise
        return first, future.result()


def _text(cell: object) -> str:
    return cell.decode() if isinstance(cell, bytes) else str(cell)


class TableReader:
    """A :class:`SourceReader` over one side of a table, in its database."""

    def __init__(self, db: Database, side: SideSql, params: Sequence[KeyParam]) -> None:
        self.db = db
        self.side = side
        self.params = tuple(params)

    def _bind(self, key: Key | None) -> list[object] | None:
        if key is None:
            return None
        return [param(text) for param, text in zip(self.params, key, strict=True)]

    def _range(self, lower: Key | None, upper: Key | None) -> list[object]:
        return vs.condition_params(self.side, self._bind(lower), self._bind(upper))

    def _keyed(self, rows: list[tuple[Any, ...]]) -> list[tuple[Key, str]]:
        width = len(self.side.keys)
        return [(tuple(_text(c) for c in row[:width]), _text(row[width])) for row in rows]

    def boundary(self, lower: Key | None, offset: int) -> Key | None:
        rows = self.db.query(vs.boundary_sql(self.side, lower=lower is not None),
                             [*self._range(lower, None), offset])
        return tuple(_text(c) for c in rows[0]) if rows else None

    def summaries(self, lower: Key | None, bounds: Sequence[Key],
                  upper: Key | None) -> list[Summary]:
        sql = vs.summary_sql(self.side, lower=lower is not None, upper=upper is not None,
                             buckets=len(bounds) + 1)
        params = vs.summary_params(self.side, self._bind(lower),
                                   [[p(t) for p, t in zip(self.params, b, strict=True)]
                                    for b in bounds], self._bind(upper))
        result = [Summary(0, 0)] * (len(bounds) + 1)
        for bucket, count, total in self.db.query(sql, params):
            result[int(bucket)] = Summary(int(count), int(_text(total)) if total else 0)
        return result

    def split_points(self, lower: Key | None, upper: Key | None, step: int,
                     limit: int) -> list[Key]:
        sql = vs.split_sql(self.side, lower=lower is not None, upper=upper is not None)
        rows = self.db.query(sql, [*self._range(lower, upper), step, limit])
        return [tuple(_text(c) for c in row) for row in rows]

    def rows(self, lower: Key | None, upper: Key | None,
             limit: int | None = None) -> list[tuple[Key, str]]:
        sql = vs.rows_sql(self.side, lower=lower is not None, upper=upper is not None)
        params = self._range(lower, upper)
        if limit is not None:
            sql, params = sql + " LIMIT %s", [*params, limit]
        return self._keyed(self.db.query(sql, params))

    def lookup(self, keys: Sequence[Key]) -> dict[Key, str]:
        if not keys:
            return {}
        bound = [self._bind(key) or [] for key in keys]
        rows = self.db.query(vs.lookup_sql(self.side, len(keys)), vs.lookup_params(bound))
        wanted = set(keys)
        return {key: digest for key, digest in self._keyed(rows) if key in wanted}


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


# --- the command ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class VerifyOptions:
    range_rows: int = 10_000
    delay_ms: int = 0
    recheck_s: float = 0.0  # wait, then compare the differing keys again
    leaf_rows: int = 64
    fanout: int = 16
    max_keys: int = MAX_KEYS

    def check(self) -> None:
        for name, value, low, high in (
            ("range rows", self.range_rows, 2, 1_000_000), ("delay", self.delay_ms, 0, 3_600_000),
            ("recheck", self.recheck_s, 0, 3600), ("leaf rows", self.leaf_rows, 1, 100_000),
            ("fanout", self.fanout, 2, 1000), ("max keys", self.max_keys, 1, MAX_KEYS),
        ):
            if not low <= value <= high:
                raise RequestRejected(f"{name} must be from {low} to {high}, got {value}")


def verify(config: Config, tables: Sequence[str] | None = None,
           options: VerifyOptions | None = None,
           sleep: Callable[[float], None] = time.sleep) -> VerifyResult:
    """Compare source tables (default: all captured ones) with their targets.

    Raises RequestRejected (a table not captured or missing, a primary key that differs,
    a type verify cannot compare) before comparing anything, SourceUnavailable when a
    database is unreachable.
    """
    options = options or VerifyOptions()
    options.check()
    started = time.perf_counter()
    target_config = config.require_target()
    names = list(dict.fromkeys(tables or config.source.tables))
    for name in names:
        if name not in config.source.tables:
            raise RequestRejected(f"{name} is not a captured table (source.tables)")
        schema = target_config.table(name).partition(".")[0]
        if schema == target_config.state_schema:
            raise RequestRejected(f"{target_config.table(name)} is in the merge's state schema "
                                  f"{schema}, which verify never compares")
    source = Database("source", config.source.kind, config.source.dsn, config.source.safe_dsn())
    target = Database("target", target_config.kind, target_config.dsn, target_config.safe_dsn())
    try:
        with ThreadPoolExecutor(1, thread_name_prefix="dblog-verify-target") as executor:
            both = InParallel(executor)
            both(source.connect, target.connect)
            plans = [_plan_table(source, target, name, target_config.table(name))
                     for name in names]
            results = [p if isinstance(p, TableResult) else
                       _compare(source, target, p, options, sleep, both) for p in plans]
    finally:
        source.close()
        target.close()
    return VerifyResult(tuple(results), time.perf_counter() - started,
                        busy_seconds(source.intervals + target.intervals),
                        source.seconds, target.seconds)


def _plan_table(source: Database, target: Database, name: str,
                target_name: str) -> TablePlan | TableResult:
    described = vs.describe(source.kind, source.query, name, "source")
    if described is None:
        raise RequestRejected(f"source table {name} does not exist")
    other = vs.describe(target.kind, target.query, target_name, "target")
    if other is None:
        raise RequestRejected(f"target table {target_name} does not exist (has the merge run?)")
    try:
        return vs.plan(described, other)
    except VerifyFailed as exc:
        return TableResult(name, target_name, described.key, error=str(exc))


def _compare(source: Database, target: Database, table: TablePlan, options: VerifyOptions,
             sleep: Callable[[float], None], both: Both) -> TableResult:
    started = time.perf_counter()
    before = (source.seconds, target.seconds, source.queries, target.queries)
    sides = Sides(TableReader(source, table.source, table.source_params),
                  TableReader(target, table.target, table.target_params), both)
    walk_options = WalkOptions(range_rows=options.range_rows, leaf_rows=options.leaf_rows,
                               fanout=options.fanout, max_keys=options.max_keys,
                               delay_s=options.delay_ms / 1000)
    differences, stats = walk(sides, walk_options, sleep)
    rechecked = False
    if options.recheck_s and len(differences):
        sleep(options.recheck_s)
        stats.delay_seconds += options.recheck_s
        differences = recheck(sides, differences.keys())
        rechecked = True

    def report(keys: list[Key]) -> tuple[KeyValues, ...]:
        return tuple(tuple(f(t) for f, t in zip(table.report, key, strict=True)) for key in keys)

    return TableResult(
        table=table.table, target_table=table.target_table, key_columns=table.key_columns,
        key_order=table.key_order, source_rows=stats.source_rows, target_rows=stats.target_rows,
        ranges=stats.ranges, differing_ranges=stats.differing_ranges,
        missing=report(differences.missing), extra=report(differences.extra),
        changed=report(differences.changed), truncated=stats.truncated, rechecked=rechecked,
        seconds=time.perf_counter() - started,
        database_seconds=busy_seconds(source.intervals + target.intervals, started),
        source_seconds=source.seconds - before[0],
        target_seconds=target.seconds - before[1], delay_seconds=stats.delay_seconds,
        source_queries=source.queries - before[2], target_queries=target.queries - before[3],
    )


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
