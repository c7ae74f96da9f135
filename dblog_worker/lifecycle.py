"""The landing zone's lifecycle for one source: ``dblog landing status | compact | retain``,
``POST /v1/landing/...`` and the ``dblog_landing`` Airflow DAG all run these.

Compaction and retention themselves are :mod:`dblog_worker.landing.maintenance`; this
module adds what they need from outside the landing zone: how far every target has
merged each table (its merge log, :meth:`~dblog_worker.target.base.Target.merged`), and
per table the figures operators watch (files, bytes, the oldest position not merged by
every target).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import pyarrow.compute as pc

from dblog_worker.config import Config, TargetConfig
from dblog_worker.errors import ConfigInvalid
from dblog_worker.landing.maintenance import TableReport, plan_table, run_plan
from dblog_worker.landing.sink import Maintained, Segment, open_reader
from dblog_worker.target.plan import MergeLogEntry

__all__ = ["LandingTable", "MaintenanceReport", "MergedUpTo", "landing_status", "maintain",
           "merged_up_to"]

log = logging.getLogger("dblog.landing")

MergedUpTo = Callable[[str], MergeLogEntry]
"""A source table's name -> the merge log entry of the target that merged the least."""


def targets_of(config: Config) -> list[TargetConfig]:
    """Every target whose merge log says how far the landing zone is consumed."""
    return [config.target] if config.target is not None else []


def merged_up_to(config: Config, targets: Sequence[TargetConfig] | None = None) -> MergedUpTo:
    """How far every target has merged a table (0: some target merged nothing of it).
    Each call reads the merge logs now: retention asks right before it deletes."""
    from dblog_worker.target.merge import open_target

    chosen = list(targets_of(config) if targets is None else targets)
    if not chosen:
        raise ConfigInvalid("retention needs the [target] section: segments go only once every"
                          " target's merge log says it merged them")

    def lowest(table: str) -> MergeLogEntry:
        entries = []
        for target_config in chosen:
            target = open_target(target_config)
            target.connect()
            try:
                target.ensure_state()
                entry = target.merged(config.source.name, table, target_config.table(table))
            finally:
                target.close()
            entries.append(entry)
        return min(entries, key=lambda e: (e.last_segment, e.last_position))

    return lowest


def _tables(zone: Maintained, config: Config, tables: Sequence[str]) -> list[str]:
    config.source.check_table_names(tables)
    return list(tables) or zone.tables()


@dataclass
class LandingTable:
    """One table's landing figures."""

    table: str
    files: int = 0  # every segment file, replaced ones and compacted runs included
    bytes: int = 0
    active_files: int = 0  # the files readers use
    first_segment: int = 0
    last_segment: int = 0
    merged_segment: int | None = None  # every target merged up to it (None: not asked)
    oldest_unmerged: str = ""  # the first position some target has not merged
    oldest_unmerged_age_s: float | None = None  # since its segment landed
    error: str = ""

    def as_dict(self) -> dict[str, object]:
        return dict(self.__dict__)


def landing_status(config: Config, tables: Sequence[str] = (), *, with_targets: bool = True,
                   now: float | None = None) -> list[LandingTable]:
    """Files, bytes and the oldest unmerged position per table (merge logs read when
    ``with_targets`` and a target is configured)."""
    zone = open_reader(config.landing_path, config.source.name, config.landing_format)
    merged = merged_up_to(config) if with_targets and targets_of(config) else None
    at = time.time() if now is None else now
    result = []
    for table in _tables(zone, config, tables):
        row = LandingTable(table)
        try:
            files = zone.files(table)
            row.files = len(files.segments)
            row.bytes = sum(s.size for s in files.segments.values())
            active = files.resolution.active
            row.active_files = len(active)
            if active:
                row.first_segment, row.last_segment = active[0].lo, active[-1].hi
            if merged is not None:
                entry = merged(table)
                row.merged_segment = entry.last_segment
                pending = [c for c in active if c.hi > entry.last_segment]
                if pending:
                    segment = files.segment(pending[0])
                    row.oldest_unmerged = (segment.first.encode()
                                           if pending[0].lo > entry.last_segment else
                                           _first_after(zone, segment, entry.last_position))
                    row.oldest_unmerged_age_s = round(max(0.0, at - pending[0].mtime), 3)
        except (ValueError, OSError) as exc:
            row.error = str(exc)
        result.append(row)
    return result


def _first_after(zone: Maintained, segment: Segment, position: str) -> str:
    """In a compacted segment that the merge log falls inside: its first event after."""
    positions = zone.read(segment).column("position")
    later = pc.filter(positions, pc.greater(positions, position))
    return str(later[0].as_py()) if len(later) else ""


@dataclass
class MaintenanceReport:
    dry_run: bool
    compact: bool
    retain: bool
    tables: list[dict[str, object]] = field(default_factory=list)
    cleaned_files: int = 0  # what killed maintenance runs had left (a folder's temp files)

    @property
    def ok(self) -> bool:
        return not any(t.get("error") for t in self.tables)

    def as_dict(self) -> dict[str, object]:
        return {"ok": self.ok, "dry_run": self.dry_run, "compact": self.compact,
                "retain": self.retain, "cleaned_files": self.cleaned_files,
                "tables": self.tables}


def maintain(config: Config, *, compact: bool, retain: bool, dry_run: bool = False,
             tables: Sequence[str] = (), now: float | None = None,
             merged: MergedUpTo | None = None,
             step: Callable[[str], None] = lambda _: None) -> MaintenanceReport:
    """Compact and/or apply retention to each table (all landed ones by default), after
    removing what killed runs left behind. A dry run plans only and lists what would be
    written and deleted. A table that fails is reported; the others go on."""
    zone = open_reader(config.landing_path, config.source.name, config.landing_format)
    chosen = _tables(zone, config, tables)
    if retain and merged is None:
        merged = merged_up_to(config)
    report = MaintenanceReport(dry_run, compact, retain)
    if not dry_run:
        report.cleaned_files = zone.clean_up()
        if report.cleaned_files:
            log.info("removed %d file(s) that killed maintenance runs left in %s",
                     report.cleaned_files, zone.where)
    for table in chosen:
        at = time.time() if now is None else now
        try:
            merged_seq = (merged(table).last_segment if retain and merged is not None
                          else None)
            plan = plan_table(zone, table, at,
                              compaction=config.compaction if compact else None,
                              retention=config.retention if retain else None,
                              merged_seq=merged_seq)
            entry: dict[str, object] = {**plan.as_dict(), "merged_segment": merged_seq}
            if not dry_run:
                done: TableReport = run_plan(zone, plan, step)
                entry.update(done.as_dict())
                log.info("%s: %d run(s) compacted (%d files), %d file(s) removed (%d bytes)",
                         table, done.compacted_runs, done.compacted_files, done.removed_files,
                         done.removed_bytes)
        except (ValueError, OSError) as exc:
            entry = {"table": table, "error": str(exc)}
            log.error("%s: landing maintenance failed: %s", table, exc)
        report.tables.append(entry)
    return report
