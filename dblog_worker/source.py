"""The seam between the worker and a database: small protocols, one per concern.

The worker runs the algorithm; a source connects and prepares (:class:`Setup`) and has
its parts: ``log`` streams the log from a checkpoint (:class:`LogReader`), ``watermarks``
writes a watermark (:class:`WatermarkWriter`), ``chunks`` reads a chunk
(:class:`DumpReader`), ``tables`` describes the captured tables (their keys, to check a
request: :class:`Tables`) and ``pressure`` says how busy the database is
(:class:`Pressure`). :class:`Source` is what a kind's package implements; code that needs
one concern takes that part only. Nothing here is database specific.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from dblog_worker.dump.requests import KeyTexts
from dblog_worker.dump.row_filter import RowFilter
from dblog_worker.events import Checkpoint, Encoded, LogItem
from dblog_worker.position import Position
from dblog_worker.table_patterns import Rescan, Selection

if TYPE_CHECKING:  # the CLI does without pyarrow
    import pyarrow as pa

SchemaVersion = Callable[[str, Mapping[str, object]], int]  # (table, schema) → version


@dataclass(frozen=True, slots=True)
class Problem:
    """Something that stops capture, and the change that fixes it. A problem that stops
    only part of it (``capture`` False: a read replica unreachable, whose dumps wait; a
    table with a column of a type the worker does not read, which it leaves out) is
    reported by ``dblog preflight`` and logged by the worker, which streams the log anyway.
    ``dblog preflight`` fails on every problem but a ``warning`` (one of a table a pattern
    brought in, which capture leaves out)."""

    what: str
    fix: str
    capture: bool = True
    warning: bool = False


@dataclass(frozen=True, slots=True)
class Chunk:
    """One chunk SELECT: how many rows it selected, the last key, and its rows to encode.

    ``encode()`` gives the rows, in key order, as pa.string() arrays of canonical key and
    row JSON. The worker calls it in another thread, off the path from LW to HW to the
    next LW: it must use nothing but what the chunk holds.
    """

    rows: int
    last_key: KeyTexts | None
    schema_version: int
    encode: Callable[[], Encoded]


@dataclass(frozen=True, slots=True)
class KeysChunk:
    """Rows of a primary-key batch, column-wise, and the requested keys that did not exist."""

    keys: pa.Array
    afters: pa.Array
    missing: list[KeyTexts]
    schema_version: int


class Setup(Protocol):
    """Connecting, and what the source must have before capture starts."""

    name: str

    def connect(self) -> None: ...

    def preflight(self) -> list[Problem]:
        """Every problem that stops capture, each with its fix. Changes nothing."""

    def modes(self) -> list[str]:
        """For ``dblog preflight``: the ways this source can write watermarks and read
        chunks, each with whether it can here and why. Changes nothing."""

    def cascades(self) -> list[str]:
        """For ``dblog preflight``, after :meth:`preflight`: the foreign keys whose cascades
        the log does not carry and that reach captured tables, and what the worker does
        about each (:mod:`dblog_worker.foreign_keys`). Changes nothing."""

    def capture_exists(self) -> bool:
        """Whether the database already keeps a log position for us (a slot)."""

    def selection(self) -> Selection:
        """The tables ``source.tables`` captures now, each with why, and those its patterns
        match but leave out, each with why not: the catalog read once, then at each
        :meth:`rescan`. Changes nothing."""

    def rescan(self) -> Rescan:
        """Read the catalog again: which tables joined capture (created, renamed into a
        pattern) and left it (dropped, renamed out) since the last look. The source follows
        at once (PostgreSQL: its publication gets the new tables and loses the others); a
        new table's dump waits, if it must, until what the log may have missed of it is
        visible to its chunk SELECTs."""

    def readers(self) -> dict[str, str]:
        """Which implementation reads each part of this source, as ``dblog status`` and the
        metrics show it (PostgreSQL: ``{"chunk_cells": "c"}``, or ``"python"`` where the C
        reader is not built or psycopg's libpq is not found)."""

    def prepare(self) -> str | None:
        """Create what capture needs (its preflight passed); the first checkpoint if
        capture begins now."""

    def close(self) -> None: ...


class LogReader(Protocol):
    """The log from a checkpoint on: events, watermarks and checkpoints in log order."""

    def start(self, checkpoint: str | None, landed: Position | None = None) -> str:
        """Stream the log after ``checkpoint``; returns where it starts. ``landed`` is the
        last position durable in the output: what the worker writes from now on goes
        after it."""

    def poll(self, timeout: float, out: list[LogItem]) -> None:
        """Append what arrived (events, watermarks, checkpoints) to ``out``, in log order."""

    def encode_checkpoint(self, checkpoint: Checkpoint) -> str: ...

    def confirm(self, checkpoint: str) -> None:
        """Everything up to ``checkpoint`` is durable in the output."""

    def log_position(self) -> Position:
        """The end of the log now, comparable with the positions of checkpoints."""

    def lag_bytes(self) -> int: ...


class WatermarkWriter(Protocol):
    """Writes that come back through the log: the low and high watermarks of a window,
    and the heartbeat that moves an idle log on."""

    def write_watermark(self, token: str) -> None: ...

    def await_low_watermark(self) -> None:
        """Return once the chunk SELECTs that follow see every commit up to the low
        watermark just written (at once, unless they run on a read replica: then once it
        has replayed it); ReplicaBehind (a ChunkStale) if it does not in time."""

    def heartbeat(self) -> None: ...


class Tables(Protocol):
    """The captured tables as the source describes them: their columns and keys."""

    def refresh(self, table: str) -> None:
        """Read the table's columns again: the worker calls it before a window, not in it."""

    def key_arity(self, table: str) -> int:
        """The number of key columns; DumpFailed for a table not captured, gone or keyless."""

    def masked_columns(self, table: str) -> dict[str, str]:
        """What ``[source.columns]`` does to the table's columns: column -> "exclude",
        "hash" or "mask '<text>'" (the columns it leaves as they are are not named)."""

    def check_keys(self, table: str, keys: Sequence[KeyTexts]) -> None:
        """RequestRejected unless every key fits the key columns' types."""

    def check_filter(self, table: str, row_filter: RowFilter) -> None:
        """RequestRejected unless the table has the filter's columns, its values fit their
        types and the database accepts its conditions (checked on no row)."""


def locked(schema_version: SchemaVersion) -> SchemaVersion:
    """``schema_version`` for several threads (a window's parallel chunk readers): one
    call at a time."""
    lock = threading.Lock()

    def version(table: str, schema: Mapping[str, object]) -> int:
        with lock:
            return schema_version(table, schema)

    return version


class ChunkReader(Protocol):
    """The chunk SELECTs of a dump: a key range, or a batch of keys."""

    def upper_bound(self, table: str, row_filter: RowFilter | None = None) -> KeyTexts | None:
        """The largest key (of the rows that meet ``row_filter``); None for no row."""

    def read_chunk(self, table: str, after: KeyTexts | None, upper: KeyTexts, limit: int,
                   row_filter: RowFilter | None = None) -> Chunk:
        """Up to ``limit`` rows (that meet ``row_filter``) after ``after``, up to ``upper``."""

    def read_keys(self, table: str, keys: Sequence[KeyTexts]) -> KeysChunk: ...

    def key_after(self, table: str, after: KeyTexts | None, upper: KeyTexts, offset: int,
                  row_filter: RowFilter | None = None) -> KeyTexts | None:
        """The ``offset``-th key after ``after`` (from the first key if None), up to
        ``upper``, of the rows that meet ``row_filter``; None when there are fewer keys."""


class DumpReader(ChunkReader, Protocol):
    """The chunk SELECTs of a dump, and the connections of a window's parallel ones."""

    def lane(self, index: int) -> ChunkReader:
        """A reader on source connection ``index`` of a window's parallel chunk SELECTs:
        0 is this reader; the others are opened on first use and closed with the source."""


Lanes = Callable[[int], ChunkReader]  # index (1, 2, ...) -> the reader of that lane


class Pressure(Protocol):
    """What the throttle (:mod:`dblog_worker.dump.throttle`) reads of the source: one light
    query on the worker's connection, between windows, at most about once a second."""

    def active_sessions(self) -> int:
        """Sessions running a statement now, the worker's own left out."""

    def replica_lag_ms(self) -> float | None:
        """How far the read replica's replay is behind, in milliseconds; None without
        ``[source.replica]`` or when the replica does not say. ReplicaBehind if it cannot
        be reached."""


class Source(Setup, Protocol):
    """Everything the worker needs of a database: what its kind's package implements.
    Its parts are objects of their own, each with its protocol: callers take the part."""

    @property
    def log(self) -> LogReader:
        """The log from a checkpoint on."""

    @property
    def watermarks(self) -> WatermarkWriter:
        """The writes that come back through the log."""

    @property
    def chunks(self) -> DumpReader:
        """The chunk SELECTs of dumps, and their lanes."""

    @property
    def tables(self) -> Tables:
        """The captured tables' columns and keys, as requests and windows check them."""

    @property
    def pressure(self) -> Pressure:
        """What the throttle reads of the database."""
