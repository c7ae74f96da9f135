"""The files of the Parquet landing format: their names, and reading one back.

A segment is ``segment-<seq:012d>-<first position>-<last position>.parquet``: its place in
its table's order and its positions are in its name, so a listing orders segments without
opening them. A compacted segment, the events of segments ``lo..hi``, is
``segment-<lo:012d>-<hi:012d>-<first position>-<last position>.parquet``. A schema version
is ``schema-<version:06d>.json``.

The writer's options (:func:`write_parquet`) and the checks of a segment read back
(:func:`read_segment`, :func:`summarize`) serve every store: a local folder or a bucket.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from dblog_worker.errors import SegmentCorrupt
from dblog_worker.landing.arrow import (
    FORMAT_VERSION,
    FORMAT_VERSIONS,
    SCHEMA_VERSIONS_KEY,
    SEGMENT_SCHEMA,
    TRUNCATE_AT_KEY,
)
from dblog_worker.landing.sink import SegmentSummary
from dblog_worker.position import Position

SEGMENT_RE = re.compile(r"segment-([0-9]{12})-([0-9a-f]{48})-([0-9a-f]{48})\.parquet")
COMPACTED_RE = re.compile(
    r"segment-([0-9]{12})-([0-9]{12})-([0-9a-f]{48})-([0-9a-f]{48})\.parquet")
ParquetSource = Path | Any  # a path, or a seekable binary file (a bucket's object)
MAX_ROW_GROUP_ROWS = 128 * 1024
SEQS_KEY = "dblog.seqs"  # a compacted segment's "lo-hi"
_DICTIONARY_COLUMNS = ["op", "origin", "dump_id"]
# Statistics on the row images cost time and space and help no reader.
_STATISTICS_COLUMNS = ["position", "op", "origin", "commit_ts", "schema_version", "dump_id"]
SCHEMA_RE = re.compile(r"schema-([0-9]{6})\.json")


def segment_file_name(seq: int, first: Position, last: Position) -> str:
    return f"segment-{seq:012d}-{first.encode()}-{last.encode()}.parquet"


def compacted_file_name(lo: int, hi: int, first: Position, last: Position) -> str:
    return f"segment-{lo:012d}-{hi:012d}-{first.encode()}-{last.encode()}.parquet"


def write_parquet(data: pa.Table, sink: object) -> None:
    """A segment's bytes, the same in every store: zstd, row groups of 128 Ki rows,
    statistics on the small columns (the planner reads positions from the footer)."""
    pq.write_table(data, sink, row_group_size=MAX_ROW_GROUP_ROWS, compression="zstd",
                   use_dictionary=_DICTIONARY_COLUMNS, write_statistics=_STATISTICS_COLUMNS)


def schema_file_name(version: int) -> str:
    return f"schema-{version:06d}.json"


@dataclass(frozen=True, slots=True)
class FileSegment:
    """A segment of the Parquet format: a file (a :class:`~dblog_worker.landing.sink.Segment`)."""

    table: str
    seq: int  # the last sequence number it covers (its own, unless compacted)
    first: Position
    last: Position
    path: Path
    first_seq: int = 0  # the first it covers, when compacted (0: seq)
    size: int = field(default=0, compare=False)  # bytes, when listed

    @property
    def lo(self) -> int:
        return self.first_seq or self.seq

    @property
    def location(self) -> str:
        return str(self.path)


def read_segment(path: Path | str) -> pa.Table:
    """Read one segment; ValueError naming ``path`` unless it is a complete dblog segment."""
    path = Path(path)
    match = SEGMENT_RE.fullmatch(path.name) or COMPACTED_RE.fullmatch(path.name)
    ends = (match[match.re.groups - 1], match[match.re.groups]) if match is not None else None
    return read_parquet_segment(path, str(path), ends)


def read_parquet_segment(source: ParquetSource, where: str,
                         ends: tuple[str, str] | None) -> pa.Table:
    """Every row of one segment read from ``source`` (a path or a seekable file);
    ValueError naming ``where`` unless it is a complete dblog segment whose first and last
    positions are ``ends`` (when given)."""
    try:
        with pq.ParquetFile(source) as parquet:
            metadata = parquet.schema_arrow.metadata or {}
            if metadata.get(b"dblog.format", b"").decode(errors="replace") not in FORMAT_VERSIONS:
                raise ValueError(
                    f"{where} is not a dblog segment (no dblog.format={FORMAT_VERSION})"
                )
            data = parquet.read()
    except FileNotFoundError:
        raise
    except (pa.ArrowException, OSError) as exc:
        raise ValueError(f"{where} is not a complete dblog segment: {exc}") from exc
    if not data.schema.equals(SEGMENT_SCHEMA, check_metadata=False):
        raise ValueError(f"{where} is not a dblog segment: columns are {data.schema}")
    if ends is not None:
        positions = data.column("position")
        if (
            data.num_rows == 0
            or positions[0].as_py() != ends[0]
            or positions[-1].as_py() != ends[1]
        ):
            raise ValueError(f"{where}: the positions in the file do not match its name")
    return data


def summarize(segment: FileSegment, source: str) -> SegmentSummary:
    """Check a segment from its footer alone (no data page is read); SegmentCorrupt unless
    it is a complete file of this source and table whose positions match its name."""
    summary, _ = summarize_parquet(segment.path, str(segment.path), segment.table, source,
                                   (segment.first.encode(), segment.last.encode()))
    return summary


def summarize_parquet(parquet_source: ParquetSource, where: str, table: str, source: str,
                      ends: tuple[str, str] | None) -> tuple[SegmentSummary, tuple[str, str]]:
    """The footer's summary of one segment and its (first, last) positions; SegmentCorrupt
    unless it is a complete file of ``source`` and ``table`` (whose positions are ``ends``,
    when given).

    Segments written before the footer carried the plan (``dblog.truncate_at``,
    ``dblog.schema_versions``) are summarized from their small columns instead."""
    try:
        with pq.ParquetFile(parquet_source) as parquet:
            metadata = parquet.schema_arrow.metadata or {}
            if metadata.get(b"dblog.format", b"").decode(errors="replace") not in FORMAT_VERSIONS:
                raise SegmentCorrupt(f"{where} is not a dblog segment (no dblog.format)")
            if metadata.get(b"dblog.table") != table.encode() or metadata.get(
                b"dblog.source"
            ) != source.encode():
                raise SegmentCorrupt(f"{where} belongs to another table or source")
            if not parquet.schema_arrow.equals(SEGMENT_SCHEMA, check_metadata=False):
                raise SegmentCorrupt(f"{where} does not have the columns of a dblog segment")
            footer = _from_footer(parquet.metadata, metadata)
            if footer is not None:
                rows, found, truncate_at, versions = footer
            else:
                small = parquet.read(columns=["position", "op", "schema_version"])
                rows, found, truncate_at, versions = _from_columns(small)
    except FileNotFoundError:
        raise SegmentCorrupt(f"{where} disappeared while the merge read it") from None
    except (pa.ArrowException, OSError) as exc:
        raise SegmentCorrupt(f"{where} is truncated or damaged: {exc}") from None
    if rows == 0 or (ends is not None and found != ends):
        raise SegmentCorrupt(f"{where}: the positions in the file do not match its name")
    return SegmentSummary(rows, truncate_at, versions), found


_Plan = tuple[int, tuple[str, str], str, frozenset[int]]


def _from_footer(footer: pq.FileMetaData, metadata: dict[bytes, bytes]) -> _Plan | None:
    """Rows, (first, last) position, last truncate and schema versions from the footer:
    its key/value metadata and the position column's min/max statistics."""
    truncate_at = metadata.get(TRUNCATE_AT_KEY.encode())
    versions = metadata.get(SCHEMA_VERSIONS_KEY.encode())
    if truncate_at is None or versions is None or footer.num_row_groups == 0:
        return None
    column = SEGMENT_SCHEMA.names.index("position")
    first = footer.row_group(0).column(column).statistics
    last = footer.row_group(footer.num_row_groups - 1).column(column).statistics
    if first is None or last is None or not (first.has_min_max and last.has_min_max):
        return None
    try:
        parsed = frozenset(int(v) for v in versions.decode().split(","))
    except ValueError:
        return None
    return (footer.num_rows, (str(first.min), str(last.max)), truncate_at.decode(), parsed)


def _from_columns(small: pa.Table) -> _Plan:
    positions = small.column("position")
    if small.num_rows == 0:
        return 0, ("", ""), "", frozenset()
    truncates = small.filter(pc.equal(small.column("op"), "t")).column("position")
    last_truncate = pc.max(truncates).as_py() if len(truncates) else None
    versions = pc.unique(small.column("schema_version")).to_pylist()
    ends = (positions[0].as_py(), positions[-1].as_py())
    return small.num_rows, ends, last_truncate or "", frozenset(versions)
