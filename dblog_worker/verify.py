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
import dataclasses
import functools
import hashlib
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

from dblog_worker import kinds
from dblog_worker import verify_ranges as ranges
from dblog_worker import verify_sql as vs
from dblog_worker.config import Config
from dblog_worker.config_lake import LakeConfig
from dblog_worker.control import captured_tables
from dblog_worker.errors import RequestRejected, SourceUnavailable
from dblog_worker.masking import Action, ColumnRules, MaskConflict, hmac_hex
from dblog_worker.requests import MAX_KEYS
from dblog_worker.verify_report import KeyValues, TableResult, VerifyResult
from dblog_worker.verify_sql import KeyParam, SideSql, TablePlan, VerifyFailed
from dblog_worker.verify_walk import Both, Key, Sides, Summary, WalkOptions, recheck, walk

_S = TypeVar("_S")
_T = TypeVar("_T")

# --- databases ------------------------------------------------------------------------

class Database:
    """One connection to the source or the target; counts the seconds spent in queries."""

    def __init__(self, role: str, kind: str, dsn: str, safe_dsn: str,
                 lake: LakeConfig | None = None) -> None:
        self.role = role  # "source" or "target"
        self.kind = kind
        self._dsn = dsn
        self._lake = lake  # a lake target's tables: read into an embedded DuckDB
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
        if self._lake is not None:
            where = f"the {self.role} ({self.safe_dsn})"
            self._conn = kinds.lake("verify_sql").LakeConnection(self._lake, where)
            return
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
        return ranges.condition_params(self.side, self._bind(lower), self._bind(upper))

    def _keyed(self, rows: list[tuple[Any, ...]]) -> list[tuple[Key, str]]:
        width = len(self.side.keys)
        return [(tuple(_text(c) for c in row[:width]), _text(row[width])) for row in rows]

    def boundary(self, lower: Key | None, offset: int) -> Key | None:
        rows = self.db.query(ranges.boundary_sql(self.side, lower=lower is not None),
                             [*self._range(lower, None), offset])
        return tuple(_text(c) for c in rows[0]) if rows else None

    def summaries(self, lower: Key | None, bounds: Sequence[Key],
                  upper: Key | None) -> list[Summary]:
        sql = ranges.summary_sql(self.side, lower=lower is not None, upper=upper is not None,
                             buckets=len(bounds) + 1)
        params = ranges.summary_params(self.side, self._bind(lower),
                                   [[p(t) for p, t in zip(self.params, b, strict=True)]
                                    for b in bounds], self._bind(upper))
        result = [Summary(0, 0)] * (len(bounds) + 1)
        for bucket, count, total in self.db.query(sql, params):
            result[int(bucket)] = Summary(int(count), int(_text(total)) if total else 0)
        return result

    def split_points(self, lower: Key | None, upper: Key | None, step: int,
                     limit: int) -> list[Key]:
        sql = ranges.split_sql(self.side, lower=lower is not None, upper=upper is not None)
        rows = self.db.query(sql, [*self._range(lower, upper), step, limit])
        return [tuple(_text(c) for c in row) for row in rows]

    def rows(self, lower: Key | None, upper: Key | None,
             limit: int | None = None) -> list[tuple[Key, str]]:
        sql = ranges.rows_sql(self.side, lower=lower is not None, upper=upper is not None)
        params = self._range(lower, upper)
        if limit is not None:
            sql, params = sql + " LIMIT %s", [*params, limit]
        return self._keyed(self.db.query(sql, params))

    def lookup(self, keys: Sequence[Key]) -> dict[Key, str]:
        if not keys:
            return {}
        bound = [self._bind(key) or [] for key in keys]
        rows = self.db.query(ranges.lookup_sql(self.side, len(keys)), ranges.lookup_params(bound))
        wanted = set(keys)
        return {key: digest for key, digest in self._keyed(rows) if key in wanted}


class MaskedReader(TableReader):
    """The source side of a table whose columns ``[source.columns]`` masks: each row of a
    range is read (its key and values, a masked column as the worker's codec reads it) and
    its text and checksum computed here, each masked value as the target holds it
    (``masked``: position among the values -> that function). Boundaries and split
    points are the database's, as for any table."""

    def __init__(self, db: Database, side: SideSql, params: Sequence[KeyParam],
                 masked: Mapping[int, Callable[[Any], str | None]]) -> None:
        super().__init__(db, side, params)
        self.masked = dict(masked)

    def _digests(self, rows: list[tuple[Any, ...]]) -> list[tuple[int, Key, str]]:
        """(bucket, key, md5 of the row's text) of each row, as row_sql would make it."""
        width = len(self.side.keys)
        found = []
        for row in rows:
            items = []
            for i, (cell, free) in enumerate(zip(row[1 + width:], self.side.free,
                                                  strict=True)):
                value = self.masked[i](cell) if i in self.masked \
                    else None if cell is None else _text(cell)
                items.append("N" if value is None else f"{len(value)}:{value}" if free
                             else value)
            digest = hashlib.md5(",".join(items).encode(), usedforsecurity=False).hexdigest()
            found.append((int(row[0]), tuple(_text(c) for c in row[1:1 + width]), digest))
        return found

    def summaries(self, lower: Key | None, bounds: Sequence[Key],
                  upper: Key | None) -> list[Summary]:
        sql = ranges.values_sql(self.side, lower=lower is not None, upper=upper is not None,
                                buckets=len(bounds) + 1)
        params = ranges.summary_params(self.side, self._bind(lower),
                                       [[p(t) for p, t in zip(self.params, b, strict=True)]
                                        for b in bounds], self._bind(upper))
        counts, sums = [0] * (len(bounds) + 1), [0] * (len(bounds) + 1)
        for bucket, _, digest in self._digests(self.db.query(sql, params)):
            counts[bucket] += 1
            sums[bucket] += int(digest[:15], 16)
        return [Summary(c, s) for c, s in zip(counts, sums, strict=True)]

    def rows(self, lower: Key | None, upper: Key | None,
             limit: int | None = None) -> list[tuple[Key, str]]:
        sql = ranges.values_sql(self.side, lower=lower is not None, upper=upper is not None)
        params = self._range(lower, upper)
        if limit is not None:
            sql, params = sql + " LIMIT %s", [*params, limit]
        return [(key, digest) for _, key, digest in self._digests(self.db.query(sql, params))]

    def lookup(self, keys: Sequence[Key]) -> dict[Key, str]:
        if not keys:
            return {}
        bound = [self._bind(key) or [] for key in keys]
        rows = self.db.query(ranges.lookup_values_sql(self.side, len(keys)),
                             ranges.lookup_params(bound))
        wanted = set(keys)
        return {key: digest for _, key, digest in self._digests(rows) if key in wanted}


def masked_values(db: Database, table: TablePlan, key: bytes
                  ) -> dict[int, Callable[[Any], str | None]]:
    """For each masked column of ``table``, the function from what the source side reads
    of it to the text the target holds: the hex HMAC of its canonical JSON, or the mask."""
    functions: dict[int, Callable[[Any], str | None]] = {}
    for position, column, mask in table.masked:
        fragment = vs.sql_of(db.kind).fragment_of(db.query, column)
        if mask.action is Action.HASH:
            functions[position] = functools.partial(_hashed, fragment, key)
        else:
            functions[position] = functools.partial(_masked_text, fragment, mask.text)
    return functions


def _hashed(fragment: Callable[[Any], str | None], key: bytes, cell: Any) -> str | None:
    text = fragment(cell)
    return None if text is None else hmac_hex(key, text)[1:-1]


def _masked_text(fragment: Callable[[Any], str | None], mask: str, cell: Any) -> str | None:
    return None if fragment(cell) is None else mask


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
    names = list(dict.fromkeys(tables or captured_tables(config)))
    config.source.check_captured(names)
    for name in names:
        schema = target_config.table(name).partition(".")[0]
        if schema == target_config.state_schema:
            raise RequestRejected(f"{target_config.table(name)} is in the merge's state schema "
                                  f"{schema}, which verify never compares")
    source = Database("source", config.source.kind, config.source.dsn, config.source.safe_dsn())
    target = Database("target", target_config.kind, target_config.dsn, target_config.safe_dsn(),
                      target_config.lake)
    try:
        with ThreadPoolExecutor(1, thread_name_prefix="dblog-verify-target") as executor:
            both = InParallel(executor)
            both(source.connect, target.connect)
            plans = [_plan_table(source, target, name, target_config.table(name),
                                 config.source.columns, config.source.key_of(name))
                     for name in names]
            results = [p if isinstance(p, TableResult) else
                       _compare(source, target, p, options, sleep, both,
                                config.source.columns.key) for p in plans]
    finally:
        source.close()
        target.close()
    return VerifyResult(tuple(results), time.perf_counter() - started,
                        busy_seconds(source.intervals + target.intervals),
                        source.seconds, target.seconds)


def _plan_table(source: Database, target: Database, name: str, target_name: str,
                rules: ColumnRules, configured: Sequence[str] | None = None
                ) -> TablePlan | TableResult:
    """``rules``: [source.columns], what the target holds of each column; ``configured``:
    the key source.keys names for the table. A source table without a primary key is
    compared on the target's, which the merge gave it: the key the worker chose
    (source.keys, or a unique index)."""
    described = vs.describe(source.kind, source.query, name, "source")
    if described is None:
        raise RequestRejected(f"source table {name} does not exist")
    other = vs.describe(target.kind, target.query, target_name, "target")
    if other is None:
        raise RequestRejected(f"target table {target_name} does not exist (has the merge run?)")
    key = tuple(configured) if configured else described.key or other.key
    described = dataclasses.replace(described, key=key)
    try:
        masks = rules.for_table(name, [c.name for c in described.columns], described.key)
    except MaskConflict as exc:
        raise RequestRejected(str(exc)) from None
    try:
        return vs.plan(described, other, masks)
    except VerifyFailed as exc:
        return TableResult(name, target_name, described.key, error=str(exc))


def _compare(source: Database, target: Database, table: TablePlan, options: VerifyOptions,
             sleep: Callable[[float], None], both: Both, key: bytes = b"") -> TableResult:
    started = time.perf_counter()
    before = (source.seconds, target.seconds, source.queries, target.queries)
    reader = TableReader(source, table.source, table.source_params) if not table.masked \
        else MaskedReader(source, table.source, table.source_params,
                          masked_values(source, table, key))
    sides = Sides(reader, TableReader(target, table.target, table.target_params), both)
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
