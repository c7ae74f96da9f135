"""A segment's rows as Arrow: the columns every landing format stores, in this order.

Log events (:class:`~dblog_worker.events.ChangeEvent`) and a window's surviving rows
(:class:`~dblog_worker.events.DumpRows`) become one Arrow table per segment
(:func:`segment_table`), built column-wise: the hot path of the writer thread.
"""

from __future__ import annotations

import array
import binascii
import itertools
import sys
from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc

from dblog_worker.events import ChangeEvent, DumpRows
from dblog_worker.position import Position

FORMAT_VERSION = "1"
# a segment holding foreign-key action or prune events (ops f, p), which a reader of
# version 1 would not apply: such a reader refuses it rather than go wrong
DERIVED_FORMAT_VERSION = "2"
FORMAT_VERSIONS = frozenset({FORMAT_VERSION, DERIVED_FORMAT_VERSION})
TRUNCATE_AT_KEY = "dblog.truncate_at"
SCHEMA_VERSIONS_KEY = "dblog.schema_versions"
_TIMESTAMP = pa.timestamp("us", tz="UTC")
SEGMENT_SCHEMA = pa.schema(
    [
        pa.field("position", pa.string(), nullable=False),
        pa.field("op", pa.string(), nullable=False),
        pa.field("origin", pa.string(), nullable=False),
        pa.field("key", pa.string()),
        pa.field("after", pa.string()),
        pa.field("before", pa.string()),
        pa.field("commit_ts", _TIMESTAMP, nullable=False),
        pa.field("schema_version", pa.int32(), nullable=False),
        pa.field("dump_id", pa.string()),
    ]
)


Item = ChangeEvent | DumpRows


def _event_arrays(events: Sequence[ChangeEvent]) -> list[pa.Array]:
    """Segment columns of log events, built column-wise (the hot path)."""
    # ChangeEvent is a NamedTuple: zip transposes in C.
    (_, op, position, key, after, before, origin, commit_ts, version, dump_id) = zip(
        *events, strict=True
    )
    return [
        _log_positions(position),
        _column(op, pa.string()),
        _column(origin, pa.string()),
        pa.array(key, pa.string()),
        pa.array(after, pa.string()),
        pa.array(before, pa.string()),
        _column(commit_ts, _TIMESTAMP),
        _column(version, pa.int32()),
        _column(dump_id, pa.string()),
    ]


def _column(values: Sequence[object], type_: pa.DataType) -> pa.Array:
    """A column of values that are often all the same (one operation, one transaction, one
    schema version): then made without converting each."""
    first = values[0]
    if first is not None and values.count(first) == len(values):
        return _constant(first, len(values), type_)
    return pa.array(values, type_)


def _log_positions(positions: Sequence[Position]) -> pa.Array:
    """Position.encode() of each position, with no Python code per position: the same 48
    lower-case hex digits (three big-endian 64-bit numbers), 2.5x faster."""
    return _hex_positions(array.array("Q", itertools.chain.from_iterable(positions)))


def _hex_positions(words: array.array[int]) -> pa.Array:
    """The positions whose (major, minor, sub) follow each other in ``words``, encoded."""
    if sys.byteorder == "little":
        words.byteswap()
    count = len(words) // 3
    return pa.StringArray.from_buffers(count, _position_offsets(count),
                                       pa.py_buffer(binascii.hexlify(words)))


_OFFSETS: list[pa.Buffer] = []  # the offsets 0, 48, 96, ... of the longest run yet


def _position_offsets(count: int) -> pa.Buffer:
    """The int32 offsets of ``count`` 48-character strings: a slice of one buffer, made
    again (twice as long) only when a longer run comes."""
    if not _OFFSETS or _OFFSETS[0].size < 4 * (count + 1):
        size = max(count + 1, 2 * _OFFSETS[0].size // 4 if _OFFSETS else 0)
        _OFFSETS[:] = [pa.py_buffer(array.array("i", range(0, 48 * size, 48)))]
    return _OFFSETS[0].slice(0, 4 * (count + 1))


def _dump_positions(high: Position, count: int) -> pa.Array:
    """The positions of a window's rows: the high watermark's, their subs following it."""
    words = array.array("Q", (high.major, high.minor, 0)) * count
    words[2::3] = array.array("Q", range(high.sub + 1, high.sub + 1 + count))
    return _hex_positions(words)


def _dump_arrays(rows: DumpRows) -> list[pa.Array]:
    """Segment columns of a window's surviving rows: their columns are used as they are."""
    count = len(rows)
    return [
        _dump_positions(rows.high, count),
        _constant("r", count, pa.string()),
        _constant("dump", count, pa.string()),
        rows.keys,
        rows.afters,
        pa.nulls(count, pa.string()),
        _constant(rows.commit_ts_us, count, _TIMESTAMP),
        _constant(rows.schema_version, count, pa.int32()),
        _constant(rows.dump_id, count, pa.string()),
    ]


def _constant(value: object, count: int, type_: pa.DataType) -> pa.Array:
    return pa.nulls(count, type_).fill_null(pa.scalar(value, type_))


def segment_table(items: Sequence[Item], source: str, table: str, writer: int | None
                   ) -> pa.Table:
    """The Arrow table of a segment: runs of log events and dump row batches, in order."""
    parts: list[list[pa.Array]] = []
    start = 0
    try:
        for index, item in enumerate(items):
            if type(item) is DumpRows:
                if start < index:
                    parts.append(_event_arrays(items[start:index]))  # type: ignore[arg-type]
                parts.append(_dump_arrays(item))
                start = index + 1
        if start < len(items):
            parts.append(_event_arrays(items[start:]))  # type: ignore[arg-type]
        columns = [pa.chunked_array([part[i] for part in parts], field.type)
                   for i, field in enumerate(SEGMENT_SCHEMA)]
    except (pa.ArrowException, OverflowError, TypeError) as exc:
        raise ValueError(f"events for {table!r} cannot be written: {exc}") from exc
    for field, column in zip(SEGMENT_SCHEMA, columns, strict=True):
        if not field.nullable and column.null_count:
            raise ValueError(f"events for {table!r} have a null {field.name}")
    op = columns[SEGMENT_SCHEMA.names.index("op")]
    derived = pc.any(pc.is_in(op, pa.array(["f", "p"]))).as_py()
    metadata = {"dblog.format": DERIVED_FORMAT_VERSION if derived else FORMAT_VERSION,
                "dblog.source": source, "dblog.table": table, **plan_metadata(columns)}
    if writer is not None:
        metadata["dblog.writer"] = str(writer)
    return pa.Table.from_arrays(columns, schema=SEGMENT_SCHEMA.with_metadata(metadata))


def plan_metadata(columns: Sequence[pa.ChunkedArray]) -> dict[str, str]:
    """What the merge planner needs of a segment, kept in its footer: the position of its
    last truncate (or "") and its schema versions (``1,3``)."""
    names = SEGMENT_SCHEMA.names
    op, position = columns[names.index("op")], columns[names.index("position")]
    truncates = pc.filter(position, pc.equal(op, "t"))
    versions = pc.unique(columns[names.index("schema_version")]).to_pylist()
    last_truncate = pc.max(truncates).as_py() if len(truncates) else None
    return {TRUNCATE_AT_KEY: last_truncate or "",
            SCHEMA_VERSIONS_KEY: ",".join(str(v) for v in sorted(versions))}


def first_position(item: Item) -> Position:
    return item.first if type(item) is DumpRows else item.position  # type: ignore[union-attr]


def last_position(item: Item) -> Position:
    return item.last if type(item) is DumpRows else item.position  # type: ignore[union-attr]
