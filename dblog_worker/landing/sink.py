"""The sink seam: where the worker's output becomes durable, and how it is read back.

The worker hands a :class:`Sink` ordered, position-stamped batches of one table
(:meth:`Sink.commit`) once it holds the sink's fencing token (:meth:`Sink.fence`: from
then on no older writer can publish), and gets back the position the table is durable up
to. After a crash, :meth:`Sink.recover` says, per table, how far output is durable: the
worker drops what it replays up to there. The merge planner, the Spark job and tests read
landed output through a :class:`LandedReader`, which sees only whole segments.

A format is a module registered in :data:`FORMATS` with ``open_sink(root, source)`` and
``open_reader(root, source)``. Today's one is ``parquet``: immutable Parquet files in a
folder per table (:mod:`dblog_worker.landing.parquet`), or under a prefix per table of an
S3-compatible bucket when the root is an :class:`~dblog_worker.landing.s3_objects.S3Location`
(:mod:`dblog_worker.landing.s3`). The worker, the merge and the Spark job do not change.

Both also implement :class:`Maintained`: what compaction and retention
(:mod:`dblog_worker.landing.maintenance`) do to a table's files.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from dblog_worker.landing.chain import Candidate, Resolution
from dblog_worker.landing.s3_objects import S3Location
from dblog_worker.position import Position

if TYPE_CHECKING:
    import pyarrow as pa

    from dblog_worker.landing.arrow import Item

LandingRoot = Path | S3Location  # [landing] path: a folder, or s3://bucket/prefix

FORMATS: Mapping[str, str] = {"parquet": "dblog_worker.landing.parquet"}
DEFAULT_FORMAT = "parquet"


class LandingAhead(OSError, ValueError):
    """The table's landed output holds events past the ones to write: it changed since the
    writer looked (restored by hand, or written meanwhile by another worker). An OSError,
    so that the session starts again from the checkpoint and looks again."""


class Segment(Protocol):
    """One landed batch of one table: its place in the table's order and its positions."""

    @property
    def table(self) -> str: ...
    @property
    def seq(self) -> int:
        """The last sequence number it covers: its own, or a compacted run's last."""
        ...
    @property
    def lo(self) -> int:
        """The first sequence number it covers (``seq`` unless compacted)."""
        ...
    @property
    def size(self) -> int:
        """Its size in bytes."""
        ...
    @property
    def first(self) -> Position: ...
    @property
    def last(self) -> Position: ...
    @property
    def location(self) -> str:
        """Where a reader of the format (Spark included) finds it: a path or a URI."""
        ...


@dataclass(frozen=True, slots=True)
class SegmentSummary:
    """What the merge planner needs of a segment, read without its row images."""

    rows: int
    truncate_at: str  # the position of its last truncate, or ""
    versions: frozenset[int]  # the schema versions its rows use


class Sink(Protocol):
    """The worker's side: fenced, ordered, durable writes of one source's output."""

    @property
    def where(self) -> str:
        """Where the output goes, as operators are told (a path or a URI)."""
        ...

    def writer_tokens(self) -> list[int]:
        """The fencing tokens of writers that have written here, lowest first."""
        ...

    def fence(self, token: int) -> None:
        """Become the only writer as the holder of lease token ``token``: an older token's
        writer can publish nothing more; a newer one's presence raises ``LeaseLost``."""
        ...

    def capture_started(self) -> bool:
        """Whether a worker of this source has streamed its log into this sink."""
        ...

    def mark_capture_started(self) -> None: ...

    def recover(self) -> dict[str, Position]:
        """Drop partial writes a crash left; per table, the position durable up to."""
        ...

    def commit(self, table: str, items: Sequence[Item]) -> Position:
        """Make ``items`` (non-empty, of ``table``, positions in order and after the
        table's durable position) durable; the position the table is now durable up to."""
        ...

    def schemas(self, table: str) -> dict[int, dict[str, object]]: ...

    def write_schema(self, table: str, version: int, schema: Mapping[str, object]) -> None:
        """Record version ``version`` of the table's schema (the same again: no-op)."""
        ...


class LandedReader(Protocol):
    """The readers' side: the merge planner, the Spark job, tests and tools."""

    @property
    def source(self) -> str: ...

    @property
    def format(self) -> str:
        """The format's name, which Spark reads too (``spark.read.format``)."""
        ...

    def tables(self) -> list[str]: ...

    def table_location(self, table: str) -> str: ...

    def segments(self, table: str) -> Sequence[Segment]:
        """The table's whole segments in order (``seq`` ascending)."""
        ...

    def schemas(self, table: str) -> dict[int, dict[str, object]]: ...

    def summary(self, segment: Segment) -> SegmentSummary:
        """Check that ``segment`` is whole and of this source and table, reading no row
        images; :class:`~dblog_worker.errors.SegmentCorrupt` names it otherwise."""
        ...

    def read(self, segment: Segment) -> pa.Table:
        """Every row of ``segment`` (columns :data:`~dblog_worker.landing.arrow.SEGMENT_SCHEMA`);
        ValueError naming it unless it is whole."""
        ...


@dataclass(frozen=True)
class TableFiles:
    """A table's segment files as listed, resolved into the chain readers use
    (:mod:`~dblog_worker.landing.chain`): each candidate's segment by its name."""

    resolution: Resolution
    segments: Mapping[str, Segment]

    @property
    def active(self) -> list[Segment]:
        return [self.segments[c.name] for c in self.resolution.active]

    def segment(self, candidate: Candidate) -> Segment:
        return self.segments[candidate.name]


class Maintained(LandedReader, Protocol):
    """What compaction and retention do to a table's files."""

    @property
    def where(self) -> str: ...

    def files(self, table: str) -> TableFiles:
        """Every segment file of ``table``, resolved (ValueError on a hole)."""
        ...

    def write_compacted(self, table: str, run: Sequence[Segment], data: pa.Table,
                        step: Callable[[str], None] = ...) -> Segment:
        """Publish ``data`` (the rows of ``run``, consecutive active segments, in order) as
        one segment covering them, atomically; an identical one already there is kept.
        ``step("publish lo-hi")`` is called once the file is ready, before it appears."""
        ...

    def clean_up(self) -> int:
        """Remove what killed maintenance runs left behind (never a file a live run
        still writes); how many files."""
        ...

    def remove(self, table: str, segments: Sequence[Segment]) -> None:
        """Delete these files (gone already: fine)."""
        ...

    def landed_at(self, segment: Segment) -> float:
        """When the file appeared (seconds since the epoch)."""
        ...


class _Format(Protocol):
    def open_sink(self, root: LandingRoot, source: str) -> Sink: ...
    def open_reader(self, root: LandingRoot, source: str) -> Maintained: ...


def _format(name: str) -> _Format:
    try:
        module: _Format = importlib.import_module(FORMATS[name])
    except KeyError:
        raise ValueError(f"landing format {name!r} is not one of "
                         f"{', '.join(sorted(FORMATS))}") from None
    return module


def open_sink(root: LandingRoot, source: str, format_name: str = DEFAULT_FORMAT) -> Sink:
    """The sink of ``source``'s output under ``root`` (``[landing] path``)."""
    return _format(format_name).open_sink(root, source)


def open_reader(root: LandingRoot, source: str, format_name: str = DEFAULT_FORMAT
                ) -> Maintained:
    """A reader (and maintainer) of what ``source`` has landed under ``root``."""
    return _format(format_name).open_reader(root, source)
