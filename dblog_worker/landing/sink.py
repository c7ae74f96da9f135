"""The sink seam: where the worker's output becomes durable, and how it is read back.

The worker hands a :class:`Sink` ordered, position-stamped batches of one table
(:meth:`Sink.commit`) once it holds the sink's fencing token (:meth:`Sink.fence`: from
then on no older writer can publish), and gets back the position the table is durable up
to. After a crash, :meth:`Sink.recover` says, per table, how far output is durable: the
worker drops what it replays up to there. The merge planner, the Spark job and tests read
landed output through a :class:`LandedReader`, which sees only whole segments.

A format is a module registered in :data:`FORMATS` with ``open_sink(root, source)`` and
``open_reader(root, source)``. Today's one is ``parquet`` (immutable Parquet files in a
folder per table: :mod:`dblog_worker.landing.parquet`); a lake format or an object store
is a new module here, and the worker, the merge and the Spark job do not change.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from dblog_worker.position import Position

if TYPE_CHECKING:
    import pyarrow as pa

    from dblog_worker.landing.arrow import Item

FORMATS: Mapping[str, str] = {"parquet": "dblog_worker.landing.parquet"}
DEFAULT_FORMAT = "parquet"


class Segment(Protocol):
    """One landed batch of one table: its place in the table's order and its positions."""

    @property
    def table(self) -> str: ...
    @property
    def seq(self) -> int: ...
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


class _Format(Protocol):
    def open_sink(self, root: Path, source: str) -> Sink: ...
    def open_reader(self, root: Path, source: str) -> LandedReader: ...


def _format(name: str) -> _Format:
    try:
        module: _Format = importlib.import_module(FORMATS[name])
    except KeyError:
        raise ValueError(f"landing format {name!r} is not one of "
                         f"{', '.join(sorted(FORMATS))}") from None
    return module


def open_sink(root: Path, source: str, format_name: str = DEFAULT_FORMAT) -> Sink:
    """The sink of ``source``'s output under ``root`` (``[landing] path``)."""
    return _format(format_name).open_sink(root, source)


def open_reader(root: Path, source: str, format_name: str = DEFAULT_FORMAT) -> LandedReader:
    """A reader of what ``source`` has landed under ``root``."""
    return _format(format_name).open_reader(root, source)
