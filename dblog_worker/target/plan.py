"""Which landed segments a merge takes next, checked before anything is applied.

The merge log in the target records, per (source, source table, target table),
the sequence number of the last segment merged. A batch is the segments after
it, in order, up to ``batch_max_events`` events (at least one segment). A compacted
segment (:mod:`~dblog_worker.landing.maintenance`) may cover segments merged already and
others not: the batch then starts after the merge log's position
(:attr:`Batch.after_position`), which the stager filters on. Each is checked before the
batch is staged: a complete Parquet file of the dblog format,
of the right table, whose positions are in order and match its name. A
truncated or damaged file stops its table (:class:`SegmentCorrupt`, naming the
file); the job goes on with the other tables.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from dblog_worker.errors import SegmentCorrupt
from dblog_worker.landing.sink import DEFAULT_FORMAT, LandedReader, Segment
from dblog_worker.target.columns import (
    GeneratedColumn,
    SourceColumn,
    columns_of,
    generated_of,
    key_of,
    union_columns,
)

__all__ = ["Batch", "MergeLogEntry", "Pending", "next_batch", "pending_segments", "stage_name"]


@dataclass(frozen=True, slots=True)
class MergeLogEntry:
    """What the target has merged of one source table: the merge log's row."""

    last_segment: int = 0
    last_position: str = ""
    truncated_at: str = ""  # the newest truncate applied; older events cannot apply


@dataclass(frozen=True)
class Batch:
    source: str
    source_table: str
    target_table: str
    segments: tuple[Segment, ...]
    after_segment: int  # the merge log's last segment when the batch was planned
    events: int
    last_position: str
    truncate_at: str  # the last truncate in the batch, or ""
    columns: tuple[SourceColumn, ...]  # every column of the batch's schema versions
    key: tuple[str, ...]
    format: str = DEFAULT_FORMAT  # the landing format, as Spark reads it
    # generated columns of the newest schema version, same kind of target only
    generated: tuple[GeneratedColumn, ...] = ()
    after_position: str = ""  # events at or before it are merged already ("": none)

    @property
    def last_segment(self) -> int:
        return self.segments[-1].seq

    @property
    def locations(self) -> list[str]:
        return [s.location for s in self.segments]

    @property
    def stage(self) -> str:
        return stage_name(self.source, self.source_table, self.target_table)


def stage_name(source: str, source_table: str, target_table: str) -> str:
    """The staging table of one merge: a fixed, safe name per (source, tables)."""
    digest = hashlib.sha1(  # noqa: S324 - a name, not a secret
        f"{source}\0{source_table}\0{target_table}".encode()
    ).hexdigest()
    return f"stage_{digest[:16]}"


@dataclass(frozen=True, slots=True)
class Pending:
    """A segment not merged yet, checked whole."""

    segment: Segment
    rows: int
    truncate_at: str
    versions: frozenset[int]


def pending_segments(reader: LandedReader, table: str, merged: MergeLogEntry
                     ) -> list[Pending]:
    """Every segment of ``table`` after the merge log's, each checked: SegmentCorrupt
    names the first damaged one, before anything of the table is applied, and says so
    when retention removed segments this target never merged."""
    try:
        segments = reader.segments(table)
    except ValueError as exc:
        raise SegmentCorrupt(str(exc)) from None
    if segments and segments[0].lo > merged.last_segment + 1:
        raise SegmentCorrupt(
            f"{reader.table_location(table)}: segments {merged.last_segment + 1}.."
            f"{segments[0].lo - 1} were removed (retention) before this target merged them;"
            " dump the table again (dblog dump --table) and merge what it lands")
    result = []
    for segment in segments:
        if segment.seq > merged.last_segment:
            summary = reader.summary(segment)
            result.append(Pending(segment, summary.rows, summary.truncate_at, summary.versions))
    return result


def next_batch(reader: LandedReader, source_kind: str, table: str, target_table: str,
               merged: MergeLogEntry, pending: list[Pending], max_events: int) -> Batch | None:
    """The first segments of ``pending`` after ``merged``, up to ``max_events`` events
    (at least one segment); None when nothing is new."""
    chosen: list[Pending] = []
    events = 0
    for item in pending:
        if item.segment.seq <= merged.last_segment:
            continue
        chosen.append(item)
        events += item.rows
        if events >= max_events:
            break
    if not chosen:
        return None
    after = merged.last_position if chosen[0].segment.lo <= merged.last_segment else ""
    versions = frozenset().union(*(item.versions for item in chosen))
    schemas = reader.schemas(table)
    missing = sorted(versions - schemas.keys())
    if missing:
        raise SegmentCorrupt(
            f"{reader.table_location(table)}: schema version {missing[0]} is used by a segment but"
            " its schema file is missing"
        )
    documents = [schemas[v] for v in sorted(versions)]
    return Batch(
        source=reader.source,
        source_table=table,
        target_table=target_table,
        segments=tuple(item.segment for item in chosen),
        after_segment=merged.last_segment,
        events=events,
        last_position=chosen[-1].segment.last.encode(),
        truncate_at=max((t for item in chosen if (t := item.truncate_at) > after),
                        default=""),
        columns=tuple(union_columns([columns_of(source_kind, d) for d in documents])),
        key=tuple(key_of(documents[-1])),
        format=reader.format,
        generated=tuple(generated_of(documents[-1])),
        after_position=after,
    )
