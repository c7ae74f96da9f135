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
from dblog_worker.landing.arrow import FORMAT_VERSION, SEGMENT_SCHEMA
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
            if metadata.get(b"dblog.format") != FORMAT_VERSION.encode():
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
    """Read a segment's footer and small columns; SegmentCorrupt unless it is whole."""
    path = segment.path
    try:
        with pq.ParquetFile(path) as parquet:
            metadata = parquet.schema_arrow.metadata or {}
            if metadata.get(b"dblog.format") != FORMAT_VERSION.encode():
                raise SegmentCorrupt(f"{path} is not a dblog segment (no dblog.format)")
            if metadata.get(b"dblog.table") != segment.table.encode() or metadata.get(
                b"dblog.source"
            ) != source.encode():
                raise SegmentCorrupt(f"{path} belongs to another table or source")
            if not parquet.schema_arrow.equals(SEGMENT_SCHEMA, check_metadata=False):
                raise SegmentCorrupt(f"{path} does not have the columns of a dblog segment")
            small = parquet.read(columns=["position", "op", "schema_version"])
    except FileNotFoundError:
        raise SegmentCorrupt(f"{path} disappeared while the merge read it") from None
    except (pa.ArrowException, OSError) as exc:
        raise SegmentCorrupt(f"{path} is truncated or damaged: {exc}") from None
    positions = small.column("position")
    if (
        small.num_rows == 0
        or positions[0].as_py() != segment.first.encode()
        or positions[-1].as_py() != segment.last.encode()
    ):
        raise SegmentCorrupt(f"{path}: the positions in the file do not match its name")
    truncates = small.filter(pc.equal(small.column("op"), "t")).column("position")
    last_truncate = pc.max(truncates).as_py() if len(truncates) else None
    versions = pc.unique(small.column("schema_version")).to_pylist()
    return SegmentSummary(small.num_rows, last_truncate or "", frozenset(versions))
