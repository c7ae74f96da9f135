"""The seam between the worker and a database: one small Protocol per source.

The worker runs the algorithm; a source knows how to stream its log from a
checkpoint, write a watermark, and read a chunk. Nothing here is database specific.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from dblog_worker.events import ChunkRow
from dblog_worker.requests import KeyTexts


@dataclass(frozen=True, slots=True)
class Chunk:
    """Rows of one chunk SELECT, in key order, and the last key it selected."""

    rows: list[ChunkRow]
    last_key: KeyTexts | None
    schema_version: int


@dataclass(frozen=True, slots=True)
class KeysChunk:
    """Rows of a primary-key batch, and the requested keys that did not exist."""

    rows: list[ChunkRow]
    missing: list[KeyTexts]
    schema_version: int


class LogCheckpoint(Protocol):
    """A transaction boundary of the log; what the source hands the worker to save."""


class Source(Protocol):
    name: str

    def tables(self) -> Sequence[str]:
        """The captured tables, ``schema.table``."""

    def start(self, checkpoint: str | None) -> str:
        """Start streaming after ``checkpoint`` (None: the start of capture); returns it."""

    def poll(self, timeout: float, out: list[object]) -> None:
        """Append the log items that arrived (events, watermarks, checkpoints) to ``out``."""

    def encode_checkpoint(self, checkpoint: object) -> str: ...

    def confirm(self, checkpoint: str) -> None:
        """Everything up to ``checkpoint`` is durable in the output."""

    def write_watermark(self, token: str) -> None: ...

    def heartbeat(self) -> None: ...

    def key_arity(self, table: str) -> int: ...

    def upper_bound(self, table: str) -> KeyTexts | None: ...

    def read_chunk(
        self, table: str, after: KeyTexts | None, upper: KeyTexts, limit: int
    ) -> Chunk: ...

    def read_keys(self, table: str, keys: Sequence[KeyTexts]) -> KeysChunk: ...

    def check_keys(self, table: str, keys: Sequence[KeyTexts]) -> None: ...

    def close(self) -> None: ...
