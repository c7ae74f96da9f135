"""The seam between the worker and a database: one small Protocol per source.

The worker runs the algorithm; a source knows how to stream its log from a
checkpoint, write a watermark, and read a chunk. Nothing here is database specific.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import pyarrow as pa

from dblog_worker.events import Checkpoint, Encoded, LogItem
from dblog_worker.position import Position
from dblog_worker.requests import KeyTexts

SchemaVersion = Callable[[str, Mapping[str, object]], int]  # (table, schema) → version


@dataclass(frozen=True, slots=True)
class Problem:
    """Something that stops capture, and the change that fixes it."""

    what: str
    fix: str


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


class Source(Protocol):
    name: str

    def connect(self) -> None: ...

    def preflight(self) -> list[Problem]:
        """Every problem that stops capture, each with its fix. Changes nothing."""

    def capture_exists(self) -> bool:
        """Whether the database already keeps a log position for us (a slot)."""

    def prepare(self) -> str | None:
        """Check and create what capture needs; the first checkpoint if capture begins now."""

    def start(self, checkpoint: str | None) -> str:
        """Stream the log after ``checkpoint``; returns where it starts."""

    def poll(self, timeout: float, out: list[LogItem]) -> None:
        """Append what arrived (events, watermarks, checkpoints) to ``out``, in log order."""

    def encode_checkpoint(self, checkpoint: Checkpoint) -> str: ...

    def confirm(self, checkpoint: str) -> None:
        """Everything up to ``checkpoint`` is durable in the output."""

    def log_position(self) -> Position:
        """The end of the log now, comparable with the positions of checkpoints."""

    def lag_bytes(self) -> int: ...

    def write_watermark(self, token: str) -> None: ...

    def heartbeat(self) -> None: ...

    def refresh(self, table: str) -> None:
        """Read the table's columns again: the worker calls it before a window, not in it."""

    def key_arity(self, table: str) -> int: ...

    def upper_bound(self, table: str) -> KeyTexts | None: ...

    def read_chunk(
        self, table: str, after: KeyTexts | None, upper: KeyTexts, limit: int
    ) -> Chunk: ...

    def read_keys(self, table: str, keys: Sequence[KeyTexts]) -> KeysChunk: ...

    def check_keys(self, table: str, keys: Sequence[KeyTexts]) -> None: ...

    def close(self) -> None: ...

