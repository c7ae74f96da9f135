"""The Parquet landing format on an S3-compatible object store (``path = "s3://..."``).

Layout (see ``docs/landing-format.md``)::

    <prefix>/<source>/<table dir>/
        segment-<seq:012d>.parquet             one segment, committed by _head.json
        segment-<lo:012d>-<hi:012d>.parquet    a compacted run of segments lo..hi
        schema-<version:06d>.json
        _head.json                             {"seq", "last", "writer"}: the commit point
    <prefix>/<source>/_fence.json              {"writer", "tables"}: the leader, its tables
    <prefix>/<source>/.capture-started

There is no rename, so a segment is published the way S3 makes atomic: one PUT of the
whole object (a reader never sees part of it; a kill -9 mid-upload leaves nothing).
Two conditional writes replace what the rename and the writer directories do on a
local disk:

* the segment's key is fixed by its sequence number alone and written with
  ``If-None-Match: *``: two writers can never both publish a sequence number;
* the table's ``_head.json`` names the last committed sequence number, its last
  position and the lease token of its writer, and is replaced with ``If-Match: <etag>``
  only (compare-and-swap). A segment is committed once the head names it; readers read
  the head first and ignore every segment after it.
* the source's ``_fence.json`` names the leader's lease token and every table a writer
  has begun. :meth:`S3LandingZone.fence` swaps it to the new leader's token (If-Match),
  then swaps the head of every table it names or the listing shows to that token,
  creating the heads that do not exist yet (If-None-Match). A writer begins a table
  (creates its head) only once the table is in ``_fence.json`` under its own token, a
  compare-and-swap too. So once ``fence`` returns, a worker that lost the lease fails its
  next swap on every table, the ones it had not written yet included, and publishes
  nothing more; a head or a fence that names a newer token means another worker leads
  (``LeaseLost``).

A crash between the segment's PUT and the head's swap leaves a segment after the head:
invisible, and deleted by :meth:`~S3LandingZone.recover` (or by the next commit of that
sequence number, which finds it in its way while the head is still its own).
"""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import re
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from dblog_worker.errors import LeaseLost, SegmentCorrupt
from dblog_worker.landing.arrow import Item, first_position, last_position, segment_table
from dblog_worker.landing.chain import Candidate, resolve
from dblog_worker.landing.names import parse_table_dir_name, table_dir_name
from dblog_worker.landing.parquet_files import (
    SCHEMA_RE,
    read_parquet_segment,
    schema_file_name,
    summarize_parquet,
    write_parquet,
)
from dblog_worker.landing.s3_objects import (
    Bucket,
    ObjectInfo,
    PreconditionFailed,
    S3Location,
    iter_keys,
)
from dblog_worker.landing.sink import (
    LandingAhead,
    LandingRoot,
    Segment,
    SegmentSummary,
    TableFiles,
)
from dblog_worker.names import split_table
from dblog_worker.position import Position

FORMAT = "parquet"
HEAD = "_head.json"
FENCE = "_fence.json"
CAPTURE_MARKER = ".capture-started"
ORIGINAL_RE = re.compile(r"segment-([0-9]{12})\.parquet")
COMPACTED_RE = re.compile(r"segment-([0-9]{12})-([0-9]{12})\.parquet")
_MAX_SEQ = 10**12 - 1
_SOURCE_RE = re.compile(r"[A-Za-z0-9_-]+")
_RETRIES = 5


def _no_step(_: str) -> None:
    pass


def open_zone(root: LandingRoot, source: str) -> S3LandingZone:
    if not isinstance(root, S3Location):
        raise TypeError(f"{root!r} is not an s3:// location")
    return S3LandingZone(root, source)


def segment_key_name(lo: int, hi: int) -> str:
    return f"segment-{lo:012d}.parquet" if lo == hi else f"segment-{lo:012d}-{hi:012d}.parquet"


@dataclass(frozen=True, slots=True)
class Head:
    """A table's commit point: the last committed sequence number and position."""

    seq: int = 0
    last: Position | None = None
    writer: int = 0
    etag: str = ""  # "" : no head object yet

    def document(self) -> bytes:
        return json.dumps({"format": 1, "seq": self.seq,
                           "last": self.last.encode() if self.last else "",
                           "writer": self.writer}).encode()


@dataclass(frozen=True, slots=True)
class Fence:
    """A source's leader (its lease token) and every table a writer has begun."""

    writer: int = 0
    tables: frozenset[str] = frozenset()
    etag: str = ""  # "" : no fence object yet

    def document(self) -> bytes:
        return json.dumps({"format": 1, "writer": self.writer,
                           "tables": sorted(self.tables)}).encode()


class S3Segment:
    """A segment object; its first and last positions are read from its footer when
    asked (two ranged GETs), once."""

    __slots__ = ("_ends", "_zone", "info", "lo", "seq", "table")

    def __init__(self, zone: S3LandingZone, table: str, lo: int, seq: int,
                 info: ObjectInfo) -> None:
        self._zone, self.table, self.lo, self.seq, self.info = zone, table, lo, seq, info
        self._ends: tuple[Position, Position] | None = None

    @property
    def size(self) -> int:
        return self.info.size

    @property
    def first(self) -> Position:
        return self._positions()[0]

    @property
    def last(self) -> Position:
        return self._positions()[1]

    @property
    def location(self) -> str:
        return self._zone.bucket.uri(self.info.key, "s3a")

    def _positions(self) -> tuple[Position, Position]:
        if self._ends is None:
            _, (first, last) = self._zone.summarize(self)
            self._ends = (Position.decode(first), Position.decode(last))
        return self._ends

    def __repr__(self) -> str:
        return f"S3Segment({self.table!r}, {self.lo}..{self.seq}, {self.info.key!r})"


class S3LandingZone:
    """One source's landing output in a bucket: its Sink, LandedReader and Maintained."""

    def __init__(self, location: S3Location, source: str, bucket: Bucket | None = None
                 ) -> None:
        if not isinstance(source, str) or _SOURCE_RE.fullmatch(source) is None:
            raise ValueError(f"a source name is [A-Za-z0-9_-]+, got {source!r}")
        self.location = location
        self.source = source
        self.bucket = bucket if bucket is not None else Bucket(location)
        self._base = location.key(source) + "/"
        self._heads: dict[str, Head] = {}  # what this writer last saw or swapped
        self._begun: set[str] = set()  # tables in _fence.json, as this writer last saw it
        self._lock = threading.Lock()
        self.writer: int | None = None

    @property
    def where(self) -> str:
        return self.bucket.uri(self._base.rstrip("/"))

    @property
    def format(self) -> str:
        return FORMAT

    def _table_prefix(self, table: str) -> str:
        return f"{self._base}{table_dir_name(*split_table(table))}/"

    def table_location(self, table: str) -> str:
        return self.bucket.uri(self._table_prefix(table).rstrip("/"), "s3a")

    # ----------------------------------------------------------------- heads

    def _read_head(self, table: str) -> Head:
        try:
            body, etag = self.bucket.get(self._table_prefix(table) + HEAD)
        except FileNotFoundError:
            return Head()
        try:
            value = json.loads(body)
            last = value["last"]
            return Head(int(value["seq"]), Position.decode(last) if last else None,
                        int(value["writer"]), etag)
        except (ValueError, KeyError, TypeError) as exc:
            raise SegmentCorrupt(f"{self.table_location(table)}/{HEAD} is not a head "
                                 f"document: {exc}") from None

    def _swap_head(self, table: str, old: Head, new: Head) -> Head:
        """Replace the head ``old`` by ``new`` (PreconditionFailed if it changed)."""
        key = self._table_prefix(table) + HEAD
        if old.etag:
            etag = self.bucket.put(key, new.document(), if_match=old.etag)
        else:
            etag = self.bucket.put(key, new.document(), if_none_match=True)
        swapped = Head(new.seq, new.last, new.writer, etag)
        self._heads[table] = swapped
        return swapped

    def _read_fence(self) -> Fence:
        try:
            body, etag = self.bucket.get(self._base + FENCE)
        except FileNotFoundError:
            return Fence()
        try:
            value = json.loads(body)
            tables = value["tables"]
            if not isinstance(tables, list) or not all(isinstance(t, str) for t in tables):
                raise TypeError("tables is not a list of names")
            return Fence(int(value["writer"]), frozenset(tables), etag)
        except (ValueError, KeyError, TypeError) as exc:
            raise SegmentCorrupt(f"{self.where}/{FENCE} is not a fence document: {exc}"
                                 ) from None

    def _put_fence(self, old: Fence, new: Fence) -> Fence:
        """Replace ``old`` by ``new`` (PreconditionFailed if it changed meanwhile)."""
        key = self._base + FENCE
        if old.etag:
            etag = self.bucket.put(key, new.document(), if_match=old.etag)
        else:
            etag = self.bucket.put(key, new.document(), if_none_match=True)
        self._begun = set(new.tables)
        return Fence(new.writer, new.tables, etag)

    def _begin(self, table: str, token: int) -> None:
        """Record ``table`` in ``_fence.json`` before its first head is created, as long as
        the fence names this writer's token (``LeaseLost`` once it names a newer one).
        Any leader fenced after this sees the table and fences its head too."""
        for _ in range(_RETRIES):
            current = self._read_fence()
            if current.writer > token:
                raise LeaseLost(f"the landing zone {self.where} is fenced by token "
                                f"{current.writer}, newer than this worker's token {token}:"
                                " another worker leads")
            if table in current.tables:
                self._begun = set(current.tables)
                return
            try:
                self._put_fence(current, Fence(max(current.writer, token),
                                               current.tables | {table}))
                return
            except PreconditionFailed:
                continue
        raise LeaseLost(f"{self.where}/{FENCE} keeps changing while this worker begins "
                        f"{table}: another worker writes there")

    # ----------------------------------------------------------------- fencing

    def capture_started(self) -> bool:
        try:
            self.bucket.head(self._base + CAPTURE_MARKER)
        except FileNotFoundError:
            return False
        return True

    def mark_capture_started(self) -> None:
        if not self.capture_started():
            self.bucket.put(self._base + CAPTURE_MARKER, b"")

    def writer_tokens(self) -> list[int]:
        heads = {self._read_head(t).writer for t in self.tables()}
        return sorted((heads | {self._read_fence().writer}) - {0})

    def fence(self, token: int) -> None:
        """Become the only writer as the holder of lease token ``token``: ``_fence.json``
        is swapped to name it (from then on no older writer begins a table), then every
        table it names or the listing shows gets a head naming it (swapped, or created),
        so an older writer's next swap or head creation fails. A fence or head of a newer
        token means another worker leads (``LeaseLost``)."""
        if isinstance(token, bool) or not 0 < token <= _MAX_SEQ:
            raise ValueError(f"a writer token is 1..{_MAX_SEQ}, got {token!r}")
        self._heads.clear()
        for _ in range(_RETRIES):
            current = self._read_fence()
            if current.writer > token:
                raise LeaseLost(f"the landing zone {self.where} is fenced by token "
                                f"{current.writer}, newer than this worker's token {token}:"
                                " another worker leads")
            try:
                fenced = (current if current.etag and current.writer == token
                          else self._put_fence(current, Fence(token, current.tables)))
                break
            except PreconditionFailed:
                continue
        else:
            raise LeaseLost(f"{self.where}/{FENCE} keeps changing while this worker fences "
                            "it: another worker writes there")
        self._begun = set(fenced.tables)
        for table in sorted(fenced.tables | set(self.tables())):
            for _ in range(_RETRIES):
                head = self._read_head(table)
                self._check_writer(table, head, token)
                if head.etag and head.writer == token:
                    self._heads[table] = head
                    break
                try:
                    self._swap_head(table, head, Head(head.seq, head.last, token))
                    break
                except PreconditionFailed:
                    continue
            else:
                raise LeaseLost(f"the head of {table} in {self.where} keeps changing while "
                                "this worker fences it: another worker writes there")
        self.writer = token

    def _check_writer(self, table: str, head: Head, token: int) -> None:
        if head.writer > token:
            raise LeaseLost(
                f"the landing zone {self.where} has {table} written by token {head.writer},"
                f" newer than this worker's token {token}: another worker leads")

    # ----------------------------------------------------------------- reading

    def tables(self) -> list[str]:
        _, prefixes = self.bucket.list(self._base, "/")
        found = []
        for prefix in prefixes:
            try:
                schema, name = parse_table_dir_name(prefix[len(self._base):].rstrip("/"))
            except ValueError:
                continue
            found.append(f"{schema}.{name}")
        return sorted(found)

    def files(self, table: str) -> TableFiles:
        """The table's segment objects up to its head, resolved into the chain."""
        head = self._read_head(table)
        prefix = self._table_prefix(table)
        objects, _ = self.bucket.list(prefix)
        candidates, segments = [], {}
        for name, info in iter_keys(objects, prefix):
            bounds = _bounds(name)
            if bounds is None or bounds[1] > head.seq:
                continue  # not a segment, or not committed (yet, or ever)
            candidates.append(Candidate(bounds[0], bounds[1], name, info.mtime, info.size))
            segments[name] = S3Segment(self, table, bounds[0], bounds[1], info)
        originals = sorted(c.lo for c in candidates if c.lo == c.hi)
        for before, after in itertools.pairwise(originals):
            if before == after:  # cannot happen: one key per sequence number
                raise ValueError(f"{self.table_location(table)}: two segments {before}")
        resolution = resolve(candidates, self.table_location(table))
        return TableFiles(resolution, segments)

    def segments(self, table: str) -> list[Segment]:
        return self.files(table).active

    def schemas(self, table: str) -> dict[int, dict[str, object]]:
        prefix = self._table_prefix(table)
        objects, _ = self.bucket.list(prefix + "schema-")
        result: dict[int, dict[str, object]] = {}
        for name, info in iter_keys(objects, prefix):
            match = SCHEMA_RE.fullmatch(name)
            if match is not None:
                result[int(match[1])] = self._read_schema(info.key)
        return result

    def _read_schema(self, key: str) -> dict[str, object]:
        body, _ = self.bucket.get(key)
        try:
            value = json.loads(body.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ValueError(f"{self.bucket.uri(key)} is not a JSON schema file: {exc}"
                             ) from exc
        if not isinstance(value, dict):
            raise ValueError(f"{self.bucket.uri(key)} does not hold a JSON object")
        return value

    def summarize(self, segment: S3Segment) -> tuple[SegmentSummary, tuple[str, str]]:
        with self.bucket.open(segment.info) as file:
            return summarize_parquet(file, segment.location, segment.table, self.source, None)

    def summary(self, segment: Segment) -> SegmentSummary:
        own = self._own(segment)
        summary, ends = self.summarize(own)
        own._ends = (Position.decode(ends[0]), Position.decode(ends[1]))
        return summary

    def read(self, segment: Segment) -> pa.Table:
        own = self._own(segment)
        body, _ = self.bucket.get(own.info.key)
        return read_parquet_segment(pa.BufferReader(body), own.location, None)

    def landed_at(self, segment: Segment) -> float:
        return self._own(segment).info.mtime

    def _own(self, segment: Segment) -> S3Segment:
        if not isinstance(segment, S3Segment):
            raise TypeError(f"{segment!r} is not a segment of an S3 landing zone")
        return segment

    # ----------------------------------------------------------------- writing

    def recover(self) -> dict[str, Position]:
        """Delete segments after each table's head (a crash between a segment's PUT and
        the head's swap); per table, the last committed position."""
        result: dict[str, Position] = {}
        for table in self.tables():
            head = self._read_head(table)
            if self.writer is not None:
                self._check_writer(table, head, self.writer)
            self._heads[table] = head
            prefix = self._table_prefix(table)
            objects, _ = self.bucket.list(prefix + "segment-")
            for name, info in iter_keys(objects, prefix):
                bounds = _bounds(name)
                if bounds is not None and bounds[0] > head.seq:
                    self.bucket.delete(info.key)
            if head.last is not None:
                result[table] = head.last
        return result

    def commit(self, table: str, items: Sequence[Item]) -> Position:
        """Publish ``items`` as the table's next segment: PUT it under its sequence
        number's key (If-None-Match), then swap the head to name it (If-Match)."""
        if not items:
            raise ValueError(f"a segment of {table!r} needs at least one event")
        if any(item.table != table for item in items):
            strays = sorted({item.table for item in items} - {table})
            raise ValueError(f"events of {strays} given in a segment of {table!r}")
        data = segment_table(items, self.source, table, self.writer)
        positions = data.column(0)
        rows = data.num_rows
        if rows > 1 and pc.any(pc.less(positions.slice(1), positions.slice(0, rows - 1))).as_py():
            raise ValueError(f"positions of the events of {table!r} go backwards in a segment")
        first, last = first_position(items[0]), last_position(items[-1])
        buffer = io.BytesIO()
        write_parquet(data, buffer)
        body = buffer.getvalue()
        with self._lock:
            head = self._heads.get(table) or self._read_head(table)
            token = self.writer or 0
            self._check_writer(table, head, token)
            if not head.etag and self.writer is not None and table not in self._begun:
                self._begin(table, token)  # the table's first segment
            if head.last is not None and not first > head.last:
                raise LandingAhead(
                    f"segment of {table!r} starts at {first.encode()}, not after the last "
                    f"committed position {head.last.encode()}")
            seq = head.seq + 1
            if seq > _MAX_SEQ:
                raise ValueError(f"{table!r} has run out of segment sequence numbers")
            key = self._table_prefix(table) + segment_key_name(seq, seq)
            metadata = {"dblog-first": first.encode(), "dblog-last": last.encode(),
                        "dblog-writer": str(token)}
            for _ in range(_RETRIES):
                try:
                    self.bucket.put(key, body, if_none_match=True, metadata=metadata)
                    break
                except PreconditionFailed:
                    # A segment after the head: uncommitted (a crash, or a fenced writer's
                    # PUT). Ours to remove only while the head is still the one we read.
                    self._heads.pop(table, None)
                    now = self._read_head(table)
                    if now != head:
                        self._check_writer(table, now, token)
                        raise LandingAhead(f"{table!r}: the head moved to segment {now.seq} "
                                           "meanwhile; looking again") from None
                    self.bucket.delete(key)
            else:
                raise LandingAhead(f"{key} keeps coming back: another writer is at work")
            try:
                self._swap_head(table, head, Head(seq, last, token))
            except PreconditionFailed:
                self._heads.pop(table, None)
                now = self._read_head(table)
                self._check_writer(table, now, token)
                raise LandingAhead(f"{table!r}: its head changed while this worker committed"
                                   f" segment {seq}; looking again") from None
        return last

    def write_schema(self, table: str, version: int, schema: Mapping[str, object]) -> None:
        text = json.dumps(dict(schema), indent=2, ensure_ascii=False, allow_nan=False) + "\n"
        key = self._table_prefix(table) + schema_file_name(version)
        try:
            self.bucket.put(key, text.encode("utf-8"), if_none_match=True)
        except PreconditionFailed:
            existing = self._read_schema(key)
            if existing != json.loads(text):
                raise ValueError(
                    f"schema version {version} of {table!r} is already written with"
                    f" different content ({self.bucket.uri(key)})") from None

    # ----------------------------------------------------------------- maintenance

    def write_compacted(self, table: str, run: Sequence[Segment], data: pa.Table,
                        step: Callable[[str], None] = _no_step) -> Segment:
        lo, hi = run[0].lo, run[-1].seq
        key = self._table_prefix(table) + segment_key_name(lo, hi)
        buffer = io.BytesIO()
        write_parquet(data, buffer)
        step(f"publish {lo}-{hi}")
        # the same run compacted by a concurrent run holds the same rows
        with contextlib.suppress(PreconditionFailed):
            self.bucket.put(key, buffer.getvalue(), if_none_match=True)
        info = self.bucket.head(key)
        return S3Segment(self, table, lo, hi, info)

    def remove(self, table: str, segments: Sequence[Segment]) -> None:
        for segment in segments:
            self.bucket.delete(self._own(segment).info.key)

    def clean_up(self) -> int:
        """Nothing to do: a compaction's file is one PUT, whole or absent."""
        return 0


def _bounds(name: str) -> tuple[int, int] | None:
    match = ORIGINAL_RE.fullmatch(name)
    if match is not None:
        return int(match[1]), int(match[1])
    match = COMPACTED_RE.fullmatch(name)
    if match is not None and int(match[1]) < int(match[2]):
        return int(match[1]), int(match[2])
    return None
