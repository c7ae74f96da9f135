"""The landing zone: where the worker's output becomes durable.

Layout (see ``docs/landing-format.md`` for the consumer's view)::

    <root>/<source>/<table dir>/
        segment-<seq:012d>-<first position>-<last position>.parquet
        schema-<version:06d>.json
        .tmp-<uuid>                      # being written, or left by a crash
    <root>/<source>/.writer-<token:012d>/.tmp-<uuid>   # the same, by a fenced writer
    <root>/<source>/.capture-started                 # a worker has streamed this source

``<table dir>`` is :func:`table_dir_name` of the table's schema and name. A
segment is immutable and published atomically: written to ``.tmp-<uuid>``,
fsynced, renamed to its final name, and the directory fsynced. A reader that
lists names and ignores ``.tmp-*`` never sees a partial segment.

One :class:`LandingZone` per source is the only writer of that source's
directories; it caches the newest segment of each table it has written to.
Several workers of one source (one leading, the others standing by) take turns:
:meth:`LandingZone.fence` makes the new leader's writer directory the only one a
segment can be published from (see there), so a worker that lost the lease cannot
publish once the next one has started.
"""

from __future__ import annotations

import array
import binascii
import functools
import io
import itertools
import json
import os
import re
import shutil
import sys
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from operator import attrgetter
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from dblog_worker.errors import LeaseLost
from dblog_worker.events import ChangeEvent, DumpRows
from dblog_worker.names import split_table
from dblog_worker.position import Position
from dblog_worker.requests import MAX_CHUNK_SIZE

__all__ = [
    "FORMAT_VERSION",
    "MAX_ROW_GROUP_ROWS",
    "SEGMENT_SCHEMA",
    "LandingZone",
    "Segment",
    "parse_table_dir_name",
    "read_events",
    "read_segment",
    "split_table",
    "table_dir_name",
]

FORMAT_VERSION = "1"
MAX_ROW_GROUP_ROWS = 128 * 1024
TMP_PREFIX = ".tmp-"
WRITER_PREFIX = ".writer-"
FENCED_PREFIX = ".fenced-"
CAPTURE_MARKER = ".capture-started"
_NAME_MAX = 255  # bytes in one path component on every filesystem we care about
_MAX_SEQ = 10**12 - 1
_MAX_SCHEMA_VERSION = 10**6 - 1

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
_DICTIONARY_COLUMNS = ["op", "origin", "dump_id"]
# Statistics on the row images cost time and space and help no reader.
_STATISTICS_COLUMNS = ["position", "op", "origin", "commit_ts", "schema_version", "dump_id"]

_SOURCE_RE = re.compile(r"[A-Za-z0-9_-]+")
_SAFE_CHARS = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")
_DIR_PART = r"(?:[A-Za-z0-9_-]|%[0-9A-F]{2})+"
_DIR_RE = re.compile(rf"({_DIR_PART})\.({_DIR_PART})")
_PERCENT_RE = re.compile(r"%([0-9A-F]{2})")
_SEGMENT_RE = re.compile(r"segment-([0-9]{12})-([0-9a-f]{48})-([0-9a-f]{48})\.parquet")
_SCHEMA_RE = re.compile(r"schema-([0-9]{6})\.json")
_WRITER_RE = re.compile(r"\.writer-([0-9]{12})")

_get_table = attrgetter("table")


# --------------------------------------------------------------------------- names


def _encode_part(part: str) -> str:
    try:
        raw = part.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"{part!r} is not encodable as UTF-8") from None
    return "".join(chr(b) if b in _SAFE_CHARS else f"%{b:02X}" for b in raw)


def table_dir_name(schema: str, name: str) -> str:
    """The directory name of a table: each part percent-encoded, joined by ``.``.

    Every byte of the UTF-8 form outside ``[A-Za-z0-9_-]`` becomes ``%XX``
    (upper-case hex), so the separating dot is the only literal dot and the result
    is always one path component that is neither ``.`` nor ``..`` nor hidden.
    Raises ValueError for an empty part or a result over 255 bytes.
    """
    if not schema or not name:
        raise ValueError(f"schema and table name must be non-empty, got {schema!r}, {name!r}")
    result = f"{_encode_part(schema)}.{_encode_part(name)}"
    if len(result) > _NAME_MAX:
        raise ValueError(
            f"the directory name of table {schema!r}.{name!r} would be {len(result)} bytes,"
            f" over the filesystem limit of {_NAME_MAX}; rename the table or schema"
        )
    return result


def _decode_part(text: str) -> str:
    raw = bytearray()
    i = 0
    while i < len(text):
        if text[i] == "%":
            raw.append(int(text[i + 1 : i + 3], 16))
            i += 3
        else:
            raw.append(ord(text[i]))
            i += 1
    return raw.decode("utf-8")


def parse_table_dir_name(dir_name: str) -> tuple[str, str]:
    """Inverse of :func:`table_dir_name`; ValueError unless ``dir_name`` is its exact output."""
    match = _DIR_RE.fullmatch(dir_name)
    if match is None:
        raise ValueError(f"{dir_name!r} is not a table directory name")
    try:
        schema, name = _decode_part(match[1]), _decode_part(match[2])
    except UnicodeDecodeError:
        raise ValueError(f"{dir_name!r} is not a table directory name (bad UTF-8)") from None
    # Only the canonical spelling is accepted, so that names and tables are 1:1.
    if _encode_part(schema) != match[1] or _encode_part(name) != match[2]:
        raise ValueError(f"{dir_name!r} is not a table directory name (not canonical)")
    return schema, name


def segment_file_name(seq: int, first: Position, last: Position) -> str:
    return f"segment-{seq:012d}-{first.encode()}-{last.encode()}.parquet"


def schema_file_name(version: int) -> str:
    return f"schema-{version:06d}.json"


# --------------------------------------------------------------------------- files


@dataclass(frozen=True, slots=True)
class Segment:
    table: str
    seq: int
    first: Position
    last: Position
    path: Path


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _ensure_dir(path: Path) -> None:
    """Create ``path`` and missing parents, fsyncing each parent of a new directory."""
    if path.is_dir():
        return
    _ensure_dir(path.parent)
    try:
        path.mkdir()
    except FileExistsError:
        if not path.is_dir():
            raise
        return
    _fsync_dir(path.parent)


def _publish(
    directory: Path, final_name: str, data_writer: Callable[[io.BufferedWriter], object],
    staging: Path | None = None,
) -> Path:
    """Write a file under a temporary name (in ``staging``, else in ``directory``), fsync
    it, rename it into place, fsync the dir."""
    tmp = (staging or directory) / f"{TMP_PREFIX}{uuid.uuid4().hex}"
    final = directory / final_name
    try:
        with open(tmp, "xb") as f:
            data_writer(f)
            f.flush()
            os.fsync(f.fileno())
        os.rename(tmp, final)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(directory)
    return final


Item = ChangeEvent | DumpRows


def _event_arrays(events: Sequence[ChangeEvent]) -> list[pa.Array]:
    """Segment columns of log events, built column-wise (the hot path)."""
    # ChangeEvent is a NamedTuple: zip transposes in C.
    (_, op, position, key, after, before, origin, commit_ts, version, dump_id) = zip(
        *events, strict=True
    )
    return [
        _log_positions(position),
        pa.array(op, pa.string()),
        pa.array(origin, pa.string()),
        pa.array(key, pa.string()),
        pa.array(after, pa.string()),
        pa.array(before, pa.string()),
        pa.array(commit_ts, _TIMESTAMP),
        pa.array(version, pa.int32()),
        pa.array(dump_id, pa.string()),
    ]


def _log_positions(positions: Sequence[Position]) -> pa.Array:
    """Position.encode() of each position, with no Python code per position: the same 48
    lower-case hex digits (three big-endian 64-bit numbers), 2.5x faster."""
    words = array.array("Q", itertools.chain.from_iterable(positions))
    if sys.byteorder == "little":
        words.byteswap()
    count = len(positions)
    offsets = pa.array(range(0, 48 * count + 1, 48), pa.int32())
    return pa.StringArray.from_buffers(count, offsets.buffers()[1],
                                       pa.py_buffer(binascii.hexlify(words)))


@functools.cache
def _hex_suffixes() -> pa.Array:
    """The last 16 hex digits of dump row positions 1..MAX_CHUNK_SIZE, made once."""
    return pa.array([f"{sub:016x}" for sub in range(1, MAX_CHUNK_SIZE + 1)], pa.string())


def _dump_positions(high: Position, count: int) -> pa.Array:
    prefix = f"{high.major:016x}{high.minor:016x}"
    first = high.sub + 1
    if first + count - 1 <= MAX_CHUNK_SIZE:
        return pc.binary_join_element_wise(prefix, _hex_suffixes().slice(first - 1, count), "")
    return pa.array([f"{prefix}{sub:016x}" for sub in range(first, first + count)], pa.string())


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


def _segment_table(items: Sequence[Item], source: str, table: str, writer: int | None
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
    metadata = {"dblog.format": FORMAT_VERSION, "dblog.source": source, "dblog.table": table}
    if writer is not None:
        metadata["dblog.writer"] = str(writer)
    return pa.Table.from_arrays(columns, schema=SEGMENT_SCHEMA.with_metadata(metadata))


def _first(item: Item) -> Position:
    return item.first if type(item) is DumpRows else item.position  # type: ignore[union-attr]


def _last(item: Item) -> Position:
    return item.last if type(item) is DumpRows else item.position  # type: ignore[union-attr]


class LandingAhead(OSError, ValueError):
    """The table's landing directory holds output past the events to write: it changed
    since the writer looked (restored by hand, or written meanwhile by another worker).
    An OSError, so that the session starts again from the checkpoint and looks again."""


class LandingZone:
    """The landing output of one source under ``root``; the only writer of ``root/source``."""

    def __init__(self, root: Path | str, source: str) -> None:
        if not isinstance(source, str) or _SOURCE_RE.fullmatch(source) is None:
            raise ValueError(f"a source name is [A-Za-z0-9_-]+, got {source!r}")
        self.root = Path(root)
        self.source = source
        self.source_dir = self.root / source
        self._dirs: dict[str, Path] = {}
        # table -> (seq, last position) of its newest segment, once looked at
        self._newest: dict[str, tuple[int, Position]] = {}
        self.writer: int | None = None  # the lease token this zone writes with, once fenced
        self._staging: Path | None = None

    # ----------------------------------------------------------------- fencing

    def capture_started(self) -> bool:
        """Whether a worker of this source has streamed its log into this landing zone."""
        return (self.source_dir / CAPTURE_MARKER).exists()

    def mark_capture_started(self) -> None:
        """Note (once, durably) that capture has started: a later start that finds no
        checkpoint in Redis knows that Redis lost it."""
        marker = self.source_dir / CAPTURE_MARKER
        if not marker.exists():
            _ensure_dir(self.source_dir)
            marker.touch()
            _fsync_dir(self.source_dir)

    def writer_tokens(self) -> list[int]:
        """The tokens of the writer directories present, lowest first."""
        try:
            names = os.listdir(self.source_dir)
        except FileNotFoundError:
            return []
        return sorted(int(m[1]) for m in map(_WRITER_RE.fullmatch, names) if m is not None)

    def fence(self, token: int) -> None:
        """Become the only writer, as the holder of lease token ``token``.

        Every file is published by a rename out of ``.writer-<token>/``. This creates the
        token's directory, then renames every lower token's directory away: from that
        instant a worker holding an older token can publish nothing more (its rename
        finds no directory), and what it published before is visible to :meth:`recover`.
        A higher token's directory means a newer leader exists: ``LeaseLost``. (A writer
        that passed that check before the newer one created its directory is fenced out
        by the newer one's renames; one that checks later sees it.)
        """
        if isinstance(token, bool) or not 0 < token <= _MAX_SEQ:
            raise ValueError(f"a writer token is 1..{_MAX_SEQ}, got {token!r}")
        _ensure_dir(self.source_dir)
        own = self.source_dir / f"{WRITER_PREFIX}{token:012d}"
        try:
            own.mkdir()
        except FileExistsError:  # a session before this one, same lease
            for name in os.listdir(own):
                (own / name).unlink(missing_ok=True)
        for name in sorted(os.listdir(self.source_dir)):
            path = self.source_dir / name
            if name.startswith(FENCED_PREFIX):
                shutil.rmtree(path, ignore_errors=True)
                continue
            match = _WRITER_RE.fullmatch(name)
            if match is None or int(match[1]) == token:
                continue
            if int(match[1]) > token:
                raise LeaseLost(
                    f"the landing zone {self.source_dir} has a writer of token {match[1]}, "
                    f"newer than this worker's token {token}: another worker leads"
                )
            fenced = self.source_dir / f"{FENCED_PREFIX}{match[1]}-{uuid.uuid4().hex[:8]}"
            os.rename(path, fenced)
            shutil.rmtree(fenced, ignore_errors=True)
        _fsync_dir(self.source_dir)
        self.writer, self._staging = token, own

    @contextmanager
    def _fenced(self) -> Iterator[None]:
        """A publish that finds no writer directory was fenced out: say so, not ENOENT."""
        try:
            yield
        except FileNotFoundError:
            if self._staging is not None and not self._staging.is_dir():
                raise LeaseLost(
                    f"the landing zone's writer directory of token {self.writer} was moved "
                    "away: a newer leader has fenced this worker out"
                ) from None
            raise

    # ----------------------------------------------------------------- names

    def table_dir(self, table: str) -> Path:
        path = self._dirs.get(table)
        if path is None:
            path = self.source_dir / table_dir_name(*split_table(table))
            self._dirs[table] = path
        return path

    # ----------------------------------------------------------------- reading

    def tables(self) -> list[str]:
        """The tables that have a directory, sorted; foreign entries are ignored."""
        try:
            entries = list(os.scandir(self.source_dir))
        except FileNotFoundError:
            return []
        found = []
        for entry in entries:
            if not entry.is_dir():
                continue
            try:
                schema, name = parse_table_dir_name(entry.name)
            except ValueError:
                continue
            found.append(f"{schema}.{name}")
        return sorted(found)

    def segments(self, table: str) -> list[Segment]:
        """The committed segments of ``table`` in order, from the file names alone.

        Temporary and foreign files are ignored. Raises ValueError if two segments
        carry the same sequence number (two writers: the order is undefined).
        """
        directory = self.table_dir(table)
        try:
            names = os.listdir(directory)
        except FileNotFoundError:
            return []
        result = []
        for name in names:
            match = _SEGMENT_RE.fullmatch(name)
            if match is None:
                continue
            result.append(
                Segment(
                    table=table,
                    seq=int(match[1]),
                    first=Position.decode(match[2]),
                    last=Position.decode(match[3]),
                    path=directory / name,
                )
            )
        result.sort(key=attrgetter("seq"))
        for before, after in itertools.pairwise(result):
            if before.seq == after.seq:
                raise ValueError(
                    f"{before.path.name} and {after.path.name} have the same sequence number;"
                    " was the landing zone written by two workers?"
                )
        return result

    def last_position(self, table: str) -> Position | None:
        """The last position of the newest segment of ``table`` (from its name), or None."""
        segments = self.segments(table)
        return segments[-1].last if segments else None

    def schemas(self, table: str) -> dict[int, dict[str, object]]:
        """Every schema version written for ``table``."""
        directory = self.table_dir(table)
        try:
            names = os.listdir(directory)
        except FileNotFoundError:
            return {}
        result: dict[int, dict[str, object]] = {}
        for name in sorted(names):
            match = _SCHEMA_RE.fullmatch(name)
            if match is None:
                continue
            result[int(match[1])] = self._read_schema(directory / name)
        return result

    @staticmethod
    def _read_schema(path: Path) -> dict[str, object]:
        try:
            value = json.loads(path.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ValueError(f"{path} is not a JSON schema file: {exc}") from exc
        if not isinstance(value, dict):
            raise ValueError(f"{path} does not hold a JSON object")
        return value

    # ----------------------------------------------------------------- writing

    def recover(self) -> dict[str, Position]:
        """Remove ``.tmp-*`` files left by a crash; the last committed position per table.

        The worker drops every event at or before a table's last position before it
        commits again: :meth:`commit_segment` refuses to go backwards.
        """
        self._newest.clear()
        result: dict[str, Position] = {}
        for table in self.tables():
            directory = self.table_dir(table)
            removed = False
            for name in os.listdir(directory):
                if name.startswith(TMP_PREFIX):
                    path = directory / name
                    if path.is_file() or path.is_symlink():
                        path.unlink(missing_ok=True)
                        removed = True
            if removed:
                _fsync_dir(directory)
            segments = self.segments(table)
            if segments:
                result[table] = segments[-1].last
                self._newest[table] = (segments[-1].seq, segments[-1].last)
        return result

    def commit_segment(self, table: str, events: Sequence[Item]) -> Segment:
        """Write ``events`` (non-empty, all of ``table``, in order) as the next segment.

        Items are log events or a window's surviving rows (:class:`DumpRows`, non-empty).

        Positions must be non-decreasing within the segment and the first must be
        after the last position of the previous segment; else ValueError and nothing
        is written. When this returns the segment is durable.
        """
        if not events:
            raise ValueError(f"a segment of {table!r} needs at least one event")
        if len(set(map(_get_table, events))) != 1 or events[0].table != table:
            strays = sorted({e.table for e in events} - {table})
            raise ValueError(f"events of {strays} given in a segment of {table!r}")
        directory = self.table_dir(table)
        data = _segment_table(events, self.source, table, self.writer)
        rows = data.num_rows
        position_column = data.column(0)
        if (
            rows > 1
            and pc.any(
                pc.less(position_column.slice(1), position_column.slice(0, rows - 1))
            ).as_py()
        ):
            raise ValueError(f"positions of the events of {table!r} go backwards in a segment")
        first, last = _first(events[0]), _last(events[-1])

        newest = self._newest.get(table)
        if newest is None:
            segments = self.segments(table)
            if segments:
                newest = (segments[-1].seq, segments[-1].last)
        prev_seq, prev_last = newest if newest is not None else (0, None)
        if prev_last is not None and not first > prev_last:
            raise LandingAhead(
                f"segment of {table!r} starts at {first.encode()}, not after the last committed"
                f" position {prev_last.encode()}; drop events up to LandingZone.last_position()"
            )
        seq = prev_seq + 1
        if seq > _MAX_SEQ:
            raise ValueError(f"{table!r} has run out of segment sequence numbers")

        _ensure_dir(directory)

        def write(f: io.BufferedWriter) -> None:
            pq.write_table(
                data,
                f,
                row_group_size=MAX_ROW_GROUP_ROWS,
                compression="zstd",
                use_dictionary=_DICTIONARY_COLUMNS,
                write_statistics=_STATISTICS_COLUMNS,
            )

        try:
            with self._fenced():
                path = _publish(directory, segment_file_name(seq, first, last), write,
                                self._staging)
        except BaseException:
            # The rename may have happened: look at the directory again next time.
            self._newest.pop(table, None)
            raise
        self._newest[table] = (seq, last)
        return Segment(table=table, seq=seq, first=first, last=last, path=path)

    def write_schema(self, table: str, version: int, schema: Mapping[str, object]) -> None:
        """Write version ``version`` of the schema of ``table`` (pretty JSON, atomically).

        Writing an existing version again is a no-op if the content is equal and a
        ValueError if it differs.
        """
        if isinstance(version, bool) or not 0 <= version <= _MAX_SCHEMA_VERSION:
            raise ValueError(f"a schema version is 0..{_MAX_SCHEMA_VERSION}, got {version!r}")
        text = json.dumps(dict(schema), indent=2, ensure_ascii=False, allow_nan=False) + "\n"
        directory = self.table_dir(table)
        name = schema_file_name(version)
        existing_path = directory / name
        if existing_path.exists():
            existing = self._read_schema(existing_path)
            if existing != json.loads(text):
                raise ValueError(
                    f"schema version {version} of {table!r} is already written with"
                    f" different content ({existing_path})"
                )
            return
        _ensure_dir(directory)
        encoded = text.encode("utf-8")
        with self._fenced():
            _publish(directory, name, lambda f: f.write(encoded), self._staging)


# --------------------------------------------------------------------------- consumers


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
    match = _SEGMENT_RE.fullmatch(path.name)
    if match is not None:
        positions = data.column("position")
        if (
            data.num_rows == 0
            or positions[0].as_py() != match[2]
            or positions[-1].as_py() != match[3]
        ):
            raise ValueError(f"{path}: the positions in the file do not match its name")
    return data


def read_events(zone: LandingZone, table: str) -> list[dict[str, object]]:
    """All rows of all segments of ``table`` in order, as dicts."""
    rows: list[dict[str, object]] = []
    for segment in zone.segments(table):
        rows.extend(read_segment(segment.path).to_pylist())
    return rows
