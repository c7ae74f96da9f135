"""A landing zone with a lifecycle: compaction and retention of a table's segments.

**Compaction** rewrites runs of consecutive small segments as one: the same rows, in the
same order, with the same positions (the Parquet columns are concatenated, nothing is
decoded). The compacted file covers the run's sequence numbers ``lo..hi`` and appears
atomically beside them (:meth:`~dblog_worker.landing.sink.Maintained.write_compacted`);
from then on readers use it instead of them (:mod:`~dblog_worker.landing.chain`). The
files it replaced are deleted by a later run, ``grace_s`` after it appeared, so that a
merge or a reader that listed the table before still finds every file it chose. A kill
-9 at any step leaves either the old files, or the old ones and the new one (which
readers resolve), never a hole; two runs at once write the same file, or the second's
partly overlapping one loses. The worker is not stopped: compaction takes only segments
at least ``min_age_s`` old and never changes a table's newest sequence number or
position.

**Retention** deletes the oldest segments once every target has merged past them (the
merge logs' sequence numbers, given by the caller) and they landed more than ``keep_s``
ago; the newest segment of a table always stays (the worker continues after it).

Both take ``now`` and are planned first (:func:`plan_table`), so a dry run lists exactly
what a run would do.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import pyarrow as pa

from dblog_worker.landing.arrow import SEGMENT_SCHEMA, plan_metadata
from dblog_worker.landing.chain import Candidate
from dblog_worker.landing.parquet_files import SEQS_KEY
from dblog_worker.landing.policy import CompactionPolicy, RetentionPolicy
from dblog_worker.landing.sink import Maintained, Segment, TableFiles


@dataclass(frozen=True)
class TablePlan:
    """What one run does to one table."""

    table: str
    compact: list[list[Segment]] = field(default_factory=list)  # runs, each in order
    expire: list[Segment] = field(default_factory=list)  # replaced a grace period ago
    retire: list[Segment] = field(default_factory=list)  # merged everywhere, old enough

    def as_dict(self) -> dict[str, object]:
        return {
            "table": self.table,
            "compact": [{"segments": f"{run[0].lo}-{run[-1].seq}", "files": len(run),
                         "bytes": sum(s.size for s in run)} for run in self.compact],
            "remove_replaced": [_describe(s) for s in self.expire],
            "remove_merged": [_describe(s) for s in self.retire],
        }


def _describe(segment: Segment) -> dict[str, object]:
    return {"segments": f"{segment.lo}-{segment.seq}", "bytes": segment.size,
            "location": segment.location}


def plan_table(zone: Maintained, table: str, now: float, *,
               compaction: CompactionPolicy | None = None,
               retention: RetentionPolicy | None = None,
               merged_seq: int | None = None) -> TablePlan:
    """What a run does to ``table`` at ``now``: compacted runs and replaced files to delete
    (with ``compaction``), merged files to delete (with ``retention`` and ``merged_seq``,
    the lowest sequence number every target has merged up to)."""
    files = zone.files(table)
    plan = TablePlan(table)
    if compaction is not None:
        plan.compact.extend(_runs(files, zone, now, compaction))
        plan.expire.extend(_replaced(files, zone, now, compaction.grace_s))
    if retention is not None and merged_seq is not None:
        plan.retire.extend(_merged(files, zone, now, retention, merged_seq))
    return plan


def _runs(files: TableFiles, zone: Maintained, now: float, policy: CompactionPolicy
          ) -> list[list[Segment]]:
    """Consecutive small, settled segments, grouped until a group reaches the target."""
    runs: list[list[Segment]] = []
    current: list[Segment] = []
    size = 0

    def close() -> None:
        nonlocal current, size
        if len(current) >= policy.min_segments:
            runs.append(current)
        current, size = [], 0

    for candidate in files.resolution.active:
        segment = files.segment(candidate)
        settled = now - candidate.mtime >= policy.min_age_s
        if not settled or candidate.size >= policy.target_bytes:
            close()
            continue
        current.append(segment)
        size += candidate.size
        if size >= policy.target_bytes:
            close()
    close()
    return runs


def _replaced(files: TableFiles, zone: Maintained, now: float, grace_s: float
              ) -> list[Segment]:
    """Files a compacted segment replaced (or a racing compaction lost), a grace period
    after the file that readers use instead appeared."""
    gone: list[Segment] = []
    for old, cover in sorted(files.resolution.superseded.items()):
        if now - cover.mtime >= grace_s:
            gone.append(files.segment(old))
    gone.extend(files.segment(c) for c in sorted(files.resolution.losers)
                if now - c.mtime >= grace_s)
    return gone


def _merged(files: TableFiles, zone: Maintained, now: float, policy: RetentionPolicy,
            merged_seq: int) -> list[Segment]:
    """The oldest active segments every target merged, old enough, never the newest;
    with them the replaced files that lie wholly before what stays."""
    active = files.resolution.active
    retired: list[Candidate] = []
    for candidate in active[:-1]:
        if candidate.hi > merged_seq or now - candidate.mtime < policy.keep_s:
            break
        retired.append(candidate)
    if not retired:
        return []
    cut = retired[-1].hi
    stale = [c for c in itertools.chain(files.resolution.superseded, files.resolution.losers)
             if c.hi <= cut]
    return [files.segment(c) for c in [*retired, *sorted(stale)]]


def compacted_rows(zone: Maintained, run: Sequence[Segment]) -> pa.Table:
    """The rows of ``run`` as one table, in order, with a compacted segment's metadata;
    ValueError unless each segment starts after the one before ends."""
    parts = [zone.read(segment) for segment in run]
    for before, after in itertools.pairwise(run):
        if not after.first > before.last or after.lo != before.seq + 1:
            raise ValueError(f"{before.location} and {after.location} are not consecutive")
    first_meta = parts[0].schema.metadata or {}
    writers = [int(m.get(b"dblog.writer", b"0")) for m in (p.schema.metadata or {}
                                                              for p in parts)]
    data = pa.concat_tables([p.replace_schema_metadata(None) for p in parts])
    metadata = {
        # the highest: a run that holds foreign-key action or prune events stays format 2
        "dblog.format": max(m.get(b"dblog.format", b"").decode() for m in (
            p.schema.metadata or {} for p in parts)),
        "dblog.source": first_meta[b"dblog.source"].decode(),
        "dblog.table": first_meta[b"dblog.table"].decode(),
        **plan_metadata(data.columns),
        SEQS_KEY: f"{run[0].lo}-{run[-1].seq}",
    }
    if any(writers):
        metadata["dblog.writer"] = str(max(writers))
    return data.cast(SEGMENT_SCHEMA.with_metadata(metadata))


@dataclass
class TableReport:
    table: str
    compacted_runs: int = 0
    compacted_files: int = 0
    compacted_bytes: int = 0
    written_bytes: int = 0
    removed_files: int = 0
    removed_bytes: int = 0
    error: str = ""

    def as_dict(self) -> dict[str, object]:
        return dict(self.__dict__)


def run_plan(zone: Maintained, plan: TablePlan,
             step: Callable[[str], None] = lambda _: None) -> TableReport:
    """Carry ``plan`` out: each run compacted (read, concatenated, published), then the
    files to delete deleted, oldest first. ``step`` is called between the actions, with
    their names (the tests kill the process there): ``compact lo-hi`` before a run is
    read, ``publish lo-hi`` once its file is ready to appear, ``published lo-hi`` once it
    has, ``remove n`` before the deletions and ``removed k/n`` halfway through them."""
    report = TableReport(plan.table)
    for run in plan.compact:
        span = f"{run[0].lo}-{run[-1].seq}"
        step(f"compact {span}")
        data = compacted_rows(zone, run)
        written = zone.write_compacted(plan.table, run, data, step)
        step(f"published {span}")
        report.compacted_runs += 1
        report.compacted_files += len(run)
        report.compacted_bytes += sum(s.size for s in run)
        report.written_bytes += written.size
    doomed = sorted([*plan.expire, *plan.retire], key=lambda s: (s.lo, s.seq))
    if doomed:
        half = len(doomed) // 2
        step(f"remove {len(doomed)}")
        zone.remove(plan.table, doomed[:half])
        step(f"removed {half}/{len(doomed)}")
        zone.remove(plan.table, doomed[half:])
        report.removed_files += len(doomed)
        report.removed_bytes += sum(s.size for s in doomed)
    return report
