"""The values that flow through the worker: change events, watermarks, windows."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, NamedTuple

from dblog_worker.position import Position

if TYPE_CHECKING:  # imported where rows are built: the CLI does without pyarrow
    import pyarrow as pa

Encoded = tuple["pa.Array", "pa.Array"]  # (keys, afters): pa.string() arrays of canonical JSON


class Op(StrEnum):
    CREATE = "c"
    UPDATE = "u"
    DELETE = "d"
    READ = "r"  # a row read by a dump chunk
    TRUNCATE = "t"
    FOREIGN_KEY = "f"  # what a foreign key's cascade did to child rows (foreign_keys.py)
    PRUNE = "p"  # a pruning dump's end: rows no event wrote since it began are gone


class Origin(StrEnum):
    LOG = "log"
    DUMP = "dump"


class ChangeEvent(NamedTuple):
    """One output event (a NamedTuple: immutable, and cheap on the hot path).

    ``key`` is the canonical JSON array of the primary-key values and ``after`` /
    ``before`` the canonical JSON objects of the row images (see
    :mod:`dblog_worker.pg.values`); a truncate has neither key nor images.
    """

    table: str
    op: Op
    position: Position
    key: str | None
    after: str | None
    before: str | None
    origin: Origin
    commit_ts_us: int
    schema_version: int
    dump_id: str | None = None


@dataclass(frozen=True, slots=True)
class Watermark:
    """A write to the watermark table, as read back from the log."""

    token: str
    position: Position
    commit_ts_us: int


LOW_WATERMARK = ".lw"  # the end of a window's low watermark token (Reconciler.next_tokens)
HIGH_WATERMARK = ".hw"


def is_low_watermark(token: str) -> bool:
    """Whether a window's token (``<run>.<window>.lw``) is its low watermark."""
    return token.endswith(LOW_WATERMARK)


@dataclass(frozen=True, slots=True)
class DumpRows:
    """The surviving rows of one window, column-wise, as the output writes them.

    Row ``i`` is a read (``r``) event of ``dump_id`` at ``high.dump_row(i)``: the high
    watermark's position plus its index among the survivors.
    """

    table: str
    keys: pa.Array  # canonical JSON arrays, pa.string()
    afters: pa.Array  # canonical JSON objects, pa.string()
    high: Position
    commit_ts_us: int
    schema_version: int
    dump_id: str

    def __len__(self) -> int:
        return len(self.keys)

    @property
    def first(self) -> Position:
        return self.high.dump_row(0)

    @property
    def last(self) -> Position:
        return self.high.dump_row(len(self.keys) - 1)


@dataclass(frozen=True, slots=True)
class PendingRows:
    """A window's surviving rows while its chunk is still being encoded in another thread.

    The output writer waits for the chunk and turns this into :class:`DumpRows`, so that
    the log goes on meanwhile; ``count`` is the number of survivors.
    """

    table: str
    chunk: Future[Encoded]
    survivors: Sequence[int]  # indices into the chunk, in chunk order
    count: int
    high: Position
    commit_ts_us: int
    schema_version: int
    dump_id: str
    # survivors whose image a foreign-key cascade in the window changed: index → image
    replaced: Mapping[int, str] = field(default_factory=dict)

    def __len__(self) -> int:
        return self.count

    def rows(self) -> DumpRows:
        import pyarrow as pa

        keys, afters = self.chunk.result()
        if self.count < len(keys):
            survivors = pa.array(self.survivors, pa.int32())
            keys, afters = keys.take(survivors), afters.take(survivors)
        if self.replaced:
            images = afters.to_pylist()
            for at, index in enumerate(self.survivors):
                images[at] = self.replaced.get(index, images[at])
            afters = pa.array(images, pa.string())
        return DumpRows(self.table, keys, afters, self.high, self.commit_ts_us,
                        self.schema_version, self.dump_id)


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """A transaction boundary of the log: everything before ``position`` has been read.

    For PostgreSQL the position is (end LSN of a commit, or a keepalive's WAL end, 0, 0).
    ``resume`` is where the source restarts the log from this point, when the position
    alone cannot say it (MySQL: binlog file name, position and GTID state; PostgreSQL:
    the start of a transaction not yet visible to every snapshot, which a restart must
    read again -- see ``pg/visibility.py``).
    """

    position: Position
    resume: str | None = None


@dataclass(frozen=True, slots=True)
class IncompleteRow:
    """A change whose row image the log did not carry whole; its key is dumped instead.

    PostgreSQL leaves an unchanged large (TOASTed) value out of an update unless the
    table has REPLICA IDENTITY FULL.
    """

    table: str
    key: tuple[str, ...]  # texts of the key columns


EVERY_TABLE = "*"  # in Unseen.overflow: changes of tables not known


@dataclass(frozen=True, slots=True)
class Unseen:
    """Changes logged before a low watermark that the chunk SELECT after it may not have
    seen (their transactions were not visible yet): they count as inside the window.

    It follows its low watermark in the log items. The changes were emitted already;
    they only remove chunk rows: ``changes`` holds (table, key) of each, the key None for a
    truncate. ``overflow`` names tables with such changes that were too many to keep (or
    :data:`EVERY_TABLE`: of unknown tables): a window of one of them is discarded and its
    chunk read again.
    """

    changes: tuple[tuple[str, str | None], ...]
    overflow: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class Cascaded:
    """Captured tables a foreign-key cascade may have changed where no event can say which
    rows (two foreign keys away, or values the database compares by collation): a pruning
    dump of each is queued once the output up to here is durable."""

    tables: frozenset[str]


LogItem = ChangeEvent | Watermark | Checkpoint | IncompleteRow | Unseen | Cascaded
