"""The merge loop of one source: per table, batch after batch, stage then apply.

Staging is the Spark job's part (``spark/merge.py``): it reads a batch's
segments, keeps the latest event per key and writes them into the batch's
staging table over JDBC. Everything else runs here, in the Spark driver, on one
connection to the target: the plan, the target table's DDL, and the apply
transaction that also records the batch in the merge log. A job killed at any
instant leaves the merge log at the last applied batch; the next run stages that
batch again and applies it once.

Tables merge concurrently, at most ``merge.parallel_tables`` at a time, each on its own
thread and its own connection to the target (its session lock, its transactions); the
Spark jobs of the tables in flight run at once in the one Spark application. A table's
batches stay in order on its thread, so what each table records is unchanged.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass, field

from dblog_worker.config import Config, TargetConfig
from dblog_worker.config_sections import MergeConfig
from dblog_worker.dialect import dialect
from dblog_worker.errors import SegmentCorrupt, TargetError, TargetUnavailable
from dblog_worker.landing.sink import LandedReader, open_reader
from dblog_worker.target.base import Target
from dblog_worker.target.plan import Batch, next_batch, pending_segments, stage_name

__all__ = ["MergeReport", "Stager", "TableReport", "merge_source", "open_target"]

log = logging.getLogger("dblog.merge")

Stager = Callable[[Batch, Target, LandedReader], None]  # stages a batch read by the reader
"""Writes the latest event per key of a batch into ``target``'s staging table."""


def open_target(config: TargetConfig) -> Target:
    """The target of ``config``'s kind (not connected yet)."""
    return dialect(config.kind).open_target(config)


@dataclass
class TableReport:
    table: str
    target_table: str
    batches: int = 0
    events: int = 0
    upserted: int = 0
    deleted: int = 0
    derived: int = 0  # of those deleted, and rows changed: by foreign-key and prune events
    truncated: bool = False
    seconds: float = 0.0
    started_at: float = 0.0  # wall clock (epoch seconds) when the table's merge began
    finished_at: float = 0.0
    merged_to: str = ""  # the last position merged, after this run
    error: str = ""

    def as_dict(self) -> dict[str, object]:
        return dict(self.__dict__)


@dataclass
class MergeReport:
    tables: list[TableReport] = field(default_factory=list)
    parallel_tables: int = 1  # the bound
    most_tables_in_flight: int = 0  # how many tables merged at once, at most

    @property
    def ok(self) -> bool:
        return not any(t.error for t in self.tables)

    def as_dict(self) -> dict[str, object]:
        return {"ok": self.ok, "parallel_tables": self.parallel_tables,
                "most_tables_in_flight": self.most_tables_in_flight,
                "tables": [t.as_dict() for t in self.tables]}


class _InFlight:
    """Counts the tables being merged; remembers the most at once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.now = 0
        self.most = 0

    @contextlib.contextmanager
    def one(self) -> Iterator[None]:
        with self._lock:
            self.now += 1
            self.most = max(self.most, self.now)
        try:
            yield
        finally:
            with self._lock:
                self.now -= 1


def merge_source(config: Config, stage: Stager, tables: Sequence[str] = (),
                 targets: Callable[[TargetConfig], Target] = open_target) -> MergeReport:
    """Merge what is new in the landing zone of ``config``'s source into its target
    (``targets`` opens one; a lake target's is the Spark job's).

    A table whose segments are damaged or whose target cannot take its events is
    reported and left as it was; the other tables go on. TargetUnavailable (the target
    went away) stops the whole run: nothing of the batch in flight was applied.
    """
    target_config = config.require_target()
    config.source.check_table_names(tables)
    reader = open_reader(config.landing_path, config.source.name, config.landing_format)
    chosen = list(tables) or sorted(set(reader.tables()) | set(config.source.selector.names))
    report = MergeReport(parallel_tables=config.merge.parallel_tables)
    report.tables = [TableReport(table=t, target_table=target_config.table(t)) for t in chosen]
    setup = targets(target_config)
    setup.connect()
    try:
        setup.ensure_state()
    finally:
        setup.close()
    in_flight = _InFlight()

    def merge_one(result: TableReport) -> None:
        with in_flight.one():
            result.started_at = time.time()
            started = time.monotonic()
            try:
                target = targets(target_config)
                target.connect()
                try:
                    target.ensure_state()  # exists by now; sets the session up (MySQL: USE)
                    _merge_table(reader, config, target, stage, result)
                finally:
                    target.close()
            except (SegmentCorrupt, TargetError) as exc:
                result.error = str(exc)
                log.error("%s: not merged: %s", result.table, exc)
            finally:
                result.seconds = round(time.monotonic() - started, 3)
                result.finished_at = time.time()

    with ThreadPoolExecutor(max_workers=config.merge.parallel_tables,
                            thread_name_prefix="merge") as pool:
        futures = [pool.submit(merge_one, result) for result in report.tables]
        wait(futures, return_when=FIRST_EXCEPTION)
        for future in futures:
            future.cancel()  # after a TargetUnavailable, tables not begun are not begun
        for future in futures:
            if not future.cancelled():
                future.result()  # re-raises TargetUnavailable (the first one)
    report.most_tables_in_flight = in_flight.most
    return report


def _merge_table(reader: LandedReader, config: Config, target: Target, stage: Stager,
                 result: TableReport) -> None:
    merge: MergeConfig = config.merge
    lock = stage_name(reader.source, result.table, result.target_table)
    if not target.try_lock(lock):
        raise TargetError(f"{result.table}: another merge into {result.target_table} is"
                          " running; this run left the table alone")
    try:
        merged = target.merged(reader.source, result.table, result.target_table)
        pending = pending_segments(reader, result.table, merged)
        while True:
            merged = target.merged(reader.source, result.table, result.target_table)
            result.merged_to = merged.last_position
            batch = next_batch(reader, config.source.kind, result.table, result.target_table,
                               merged, pending, merge.batch_max_events)
            if batch is None:
                if result.batches:
                    target.finish(reader.source, result.table, result.target_table,
                                  merge.tombstone_retention_h)
                return
            types = target.prepare_table(batch)
            target.prepare_stage(batch.stage)
            stage(batch, target, reader)
            applied = target.apply(batch, types, merge.tombstone_retention_h)
            result.batches += 1
            result.events += batch.events
            result.upserted += applied.upserted
            result.deleted += applied.deleted
            result.derived += applied.derived
            result.truncated |= applied.truncated
            result.merged_to = batch.last_position
            log.info("%s -> %s: segments %d-%d%s, %d events: %d upserted, %d deleted%s",
                     result.table, result.target_table, batch.segments[0].lo,
                     batch.last_segment,
                     f" after position {batch.after_position}" if batch.after_position else "",
                     batch.events, applied.upserted, applied.deleted,
                     ", truncated" if applied.truncated else "")
    finally:
        with contextlib.suppress(TargetUnavailable):  # a lost session lost its lock too
            target.unlock(lock)
