"""The merge loop of one source: per table, batch after batch, stage then apply.

Staging is the Spark job's part (``spark/merge.py``): it reads a batch's
segments, keeps the latest event per key and writes them into the batch's
staging table over JDBC. Everything else runs here, in the Spark driver, on one
connection to the target: the plan, the target table's DDL, and the apply
transaction that also records the batch in the merge log. A job killed at any
instant leaves the merge log at the last applied batch; the next run stages that
batch again and applies it once.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Sequence
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
    truncated: bool = False
    seconds: float = 0.0
    merged_to: str = ""  # the last position merged, after this run
    error: str = ""

    def as_dict(self) -> dict[str, object]:
        return dict(self.__dict__)


@dataclass
class MergeReport:
    tables: list[TableReport] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not any(t.error for t in self.tables)

    def as_dict(self) -> dict[str, object]:
        return {"ok": self.ok, "tables": [t.as_dict() for t in self.tables]}


def merge_source(config: Config, stage: Stager, tables: Sequence[str] = ()) -> MergeReport:
    """Merge what is new in the landing zone of ``config``'s source into its target.

    A table whose segments are damaged or whose target cannot take its events is
    reported and left as it was; the other tables go on. TargetUnavailable (the target
    went away) stops the whole run: nothing of the batch in flight was applied.
    """
    target_config = config.require_target()
    config.source.check_table_names(tables)
    reader = open_reader(config.landing_path, config.source.name, config.landing_format)
    chosen = list(tables) or sorted(set(reader.tables()) | set(config.source.tables))
    target = open_target(target_config)
    target.connect()
    report = MergeReport()
    try:
        target.ensure_state()
        for table in chosen:
            result = TableReport(table=table, target_table=target_config.table(table))
            report.tables.append(result)
            started = time.monotonic()
            try:
                _merge_table(reader, config, target, stage, result)
            except (SegmentCorrupt, TargetError) as exc:
                result.error = str(exc)
                log.error("%s: not merged: %s", table, exc)
            finally:
                result.seconds = round(time.monotonic() - started, 3)
    finally:
        target.close()
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
                return
            types = target.prepare_table(batch)
            target.prepare_stage(batch.stage)
            stage(batch, target, reader)
            applied = target.apply(batch, types, merge.tombstone_retention_h)
            result.batches += 1
            result.events += batch.events
            result.upserted += applied.upserted
            result.deleted += applied.deleted
            result.truncated |= applied.truncated
            result.merged_to = batch.last_position
            log.info("%s -> %s: segments %d-%d, %d events: %d upserted, %d deleted%s",
                     result.table, result.target_table, batch.segments[0].seq,
                     batch.last_segment, batch.events, applied.upserted, applied.deleted,
                     ", truncated" if applied.truncated else "")
    finally:
        with contextlib.suppress(TargetUnavailable):  # a lost session lost its lock too
            target.unlock(lock)
