"""The files of the Parquet landing format: their names, and reading one back.

A segment is ``segment-<seq:012d>-<first position>-<last position>.parquet``: its place in
its table's order and its positions are in its name, so a listing orders segments without
opening them. A schema version is ``schema-<version:06d>.json``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

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
SCHEMA_RE = re.compile(r"schema-([0-9]{6})\.json")


def segment_file_name(seq: int, first: Position, last: Position) -> str:
    return f"segment-{seq:012d}-{first.encode()}-{last.encode()}.parquet"


def schema_file_name(version: int) -> str:
    return f"schema-{version:06d}.json"


@dataclass(frozen=True, slots=True)
class FileSegment:
    """A segment of the Parquet format: a file (a :class:`~dblog_worker.landing.sink.Segment`)."""

    table: str
    seq: int
    first: Position
    last: Position
    path: Path

    @property
    def location(self) -> str:
        return str(self.path)


def read_segment(path: Path | str) -> pa.Table:
    """Read one segment; ValueError naming ``path`` unless it is a complete dblog segment."""
    path = Path(path)
    try:
        with pq.ParquetFile(path) as parquet:
            metadata = parquet.schema_arrow.metadata or {}
            if metadata.get(b"dblog.format", b"").decode(errors="replace") not in FORMAT_VERSIONS:
                raise ValueError(
                    f"{path} is not a dblog segment (no dblog.format={FORMAT_VERSION})"
                )
            data = parquet.read()
    except FileNotFoundError:
        raise
    except (pa.ArrowException, OSError) as exc:
        raise ValueError(f"{path} is not a complete dblog segment: {exc}") from exc
    if not data.schema.equals(SEGMENT_SCHEMA, check_metadata=False):
        raise ValueError(f"{path} is not a dblog segment: columns are {data.schema}")
    match = SEGMENT_RE.fullmatch(path.name)
    if match is not None:
        positions = data.column("position")
        if (
            data.num_rows == 0
            or positions[0].as_py() != match[2]
            or positions[-1].as_py() != match[3]
        ):
            raise ValueError(f"{path}: the positions in the file do not match its name")
    return data


def summarize(segment: FileSegment, source: str) -> SegmentSummary:
    """Check a segment from its footer alone (no data page is read); SegmentCorrupt unless
    it is a complete file of this source and table whose positions match its name.

    Segments written before the footer carried the plan (``dblog.truncate_at``,
    ``dblog.schema_versions``) are summarized from their small columns instead."""
    path = segment.path
    try:
        with pq.ParquetFile(path) as parquet:
            metadata = parquet.schema_arrow.metadata or {}
            if metadata.get(b"dblog.format", b"").decode(errors="replace") not in FORMAT_VERSIONS:
                raise SegmentCorrupt(f"{path} is not a dblog segment (no dblog.format)")
            if metadata.get(b"dblog.table") != segment.table.encode() or metadata.get(
                b"dblog.source"
            ) != source.encode():
                raise SegmentCorrupt(f"{path} belongs to another table or source")
            if not parquet.schema_arrow.equals(SEGMENT_SCHEMA, check_metadata=False):
                raise SegmentCorrupt(f"{path} does not have the columns of a dblog segment")
            footer = _from_footer(parquet.metadata, metadata)
            if footer is not None:
                rows, ends, truncate_at, versions = footer
            else:
                small = parquet.read(columns=["position", "op", "schema_version"])
                rows, ends, truncate_at, versions = _from_columns(small)
    except FileNotFoundError:
        raise SegmentCorrupt(f"{path} disappeared while the merge read it") from None
    except (pa.ArrowException, OSError) as exc:
        raise SegmentCorrupt(f"{path} is truncated or damaged: {exc}") from None
    if rows == 0 or ends != (segment.first.encode(), segment.last.encode()):
        raise SegmentCorrupt(f"{path}: the positions in the file do not match its name")
    return SegmentSummary(rows, truncate_at, versions)


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
