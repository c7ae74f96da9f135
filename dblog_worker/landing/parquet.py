"""The Parquet landing format: the sink of today (``[landing] format = "parquet"``).

Layout (see ``docs/landing-format.md`` for the consumer's view)::

    <root>/<source>/<table dir>/
        segment-<seq:012d>-<first position>-<last position>.parquet
        schema-<version:06d>.json
        .tmp-<uuid>                      # being written, or left by a crash
    <root>/<source>/.writer-<token:012d>/.tmp-<uuid>   # the same, by a fenced writer
    <root>/<source>/.capture-started                 # a worker has streamed this source

``<table dir>`` is :func:`~dblog_worker.landing.names.table_dir_name` of the table's schema
and name. A segment is immutable and published atomically
(:func:`~dblog_worker.landing.files.publish`).

One :class:`LandingZone` per source is the only writer of that source's directories; it
caches the newest segment of each table it has written to. Several workers of one source
(one leading, the others standing by) take turns: :meth:`LandingZone.fence` makes the new
leader's writer directory the only one a segment can be published from (see there), so a
worker that lost the lease cannot publish once the next one has started. A
:class:`LandingZone` is both the format's :class:`~dblog_worker.landing.sink.Sink` and its
:class:`~dblog_worker.landing.sink.LandedReader`.
"""

from __future__ import annotations

import contextlib
import fcntl
import io
import itertools
import json
import os
import re
import shutil
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from operator import attrgetter
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from dblog_worker.errors import LeaseLost
from dblog_worker.landing.arrow import Item, first_position, last_position, segment_table
from dblog_worker.landing.chain import Candidate, resolve
from dblog_worker.landing.files import (
    TMP_PREFIX,
    create_file,
    ensure_dir,
    fsync_dir,
    make_dir,
    publish,
)
from dblog_worker.landing.names import parse_table_dir_name, table_dir_name
from dblog_worker.landing.parquet_files import (
    COMPACTED_RE,
    SCHEMA_RE,
    SEGMENT_RE,
    FileSegment,
    compacted_file_name,
    read_segment,
    schema_file_name,
    segment_file_name,
    summarize,
    write_parquet,
)
from dblog_worker.landing.s3 import S3LandingZone
from dblog_worker.landing.s3_objects import S3Location
from dblog_worker.landing.sink import (
    LandedReader,
    LandingAhead,
    LandingRoot,
    Segment,
    SegmentSummary,
    TableFiles,
)
from dblog_worker.names import split_table
from dblog_worker.position import Position

__all__ = ["LandingAhead", "LandingZone", "open_reader", "open_sink", "read_events"]

FORMAT = "parquet"
WRITER_PREFIX = ".writer-"
FENCED_PREFIX = ".fenced-"
CAPTURE_MARKER = ".capture-started"
MAINTENANCE_DIR = ".maintenance"  # compaction's temporary files, linked into place
STALE_S = 10.0  # a file under .maintenance/ no run holds, this old, was left by a crash
_MAX_SEQ = 10**12 - 1
_MAX_SCHEMA_VERSION = 10**6 - 1
_SOURCE_RE = re.compile(r"[A-Za-z0-9_-]+")
_WRITER_RE = re.compile(r"\.writer-([0-9]{12})")

_get_table = attrgetter("table")


def _no_step(_: str) -> None:
    pass


def open_sink(root: LandingRoot, source: str) -> LandingZone | S3LandingZone:
    if isinstance(root, S3Location):
        return S3LandingZone(root, source)
    return LandingZone(root, source)


def open_reader(root: LandingRoot, source: str) -> LandingZone | S3LandingZone:
    return open_sink(root, source)


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

    @property
    def where(self) -> str:
        return str(self.source_dir)

    @property
    def format(self) -> str:
        return FORMAT

    # ----------------------------------------------------------------- fencing

    def capture_started(self) -> bool:
        """Whether a worker of this source has streamed its log into this landing zone."""
        return (self.source_dir / CAPTURE_MARKER).exists()

    def mark_capture_started(self) -> None:
        """Note (once, durably) that capture has started: a later start that finds no
        checkpoint in Redis knows that Redis lost it."""
        marker = self.source_dir / CAPTURE_MARKER
        if not marker.exists():
            ensure_dir(self.source_dir)
            create_file(marker)
            fsync_dir(self.source_dir)

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
        ensure_dir(self.source_dir)
        own = self.source_dir / f"{WRITER_PREFIX}{token:012d}"
        try:
            make_dir(own)
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
        fsync_dir(self.source_dir)
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

    def table_location(self, table: str) -> str:
        return str(self.table_dir(table))

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

    def segments(self, table: str) -> list[FileSegment]:
        """The segments of ``table`` readers use, in order (the chain: compacted segments
        in place of what they replace; :mod:`~dblog_worker.landing.chain`).

        Temporary and foreign files are ignored. Raises ValueError if two segments
        carry the same sequence number (two writers: the order is undefined), or if
        sequence numbers are missing.
        """
        return self.files(table).active  # type: ignore[return-value]

    def files(self, table: str) -> TableFiles:
        """Every segment file of ``table`` from its name and ``stat``, resolved."""
        directory = self.table_dir(table)
        try:
            entries = list(os.scandir(directory))
        except FileNotFoundError:
            return TableFiles(resolve([]), {})
        segments: dict[str, FileSegment] = {}
        candidates = []
        originals = []
        for entry in entries:
            segment = _parse_segment(table, directory, entry.name)
            if segment is None:
                continue
            try:
                stat = entry.stat()
            except FileNotFoundError:
                continue  # removed while listed
            segment = FileSegment(segment.table, segment.seq, segment.first, segment.last,
                                  segment.path, segment.first_seq, stat.st_size)
            segments[entry.name] = segment
            candidates.append(Candidate(segment.lo, segment.seq, entry.name,
                                        stat.st_mtime, stat.st_size))
            if not segment.first_seq:
                originals.append(segment)
        originals.sort(key=attrgetter("seq"))
        for before, after in itertools.pairwise(originals):
            if before.seq == after.seq:
                raise ValueError(
                    f"{before.path.name} and {after.path.name} have the same sequence number;"
                    " was the landing zone written by two workers?"
                )
        return TableFiles(resolve(candidates, str(directory)), segments)

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
            match = SCHEMA_RE.fullmatch(name)
            if match is None:
                continue
            result[int(match[1])] = self._read_schema(directory / name)
        return result

    def landed_at(self, segment: Segment) -> float:
        return self._own(segment).path.stat().st_mtime

    def summary(self, segment: Segment) -> SegmentSummary:
        return summarize(self._own(segment), self.source)

    def read(self, segment: Segment) -> pa.Table:
        return read_segment(self._own(segment).path)

    def _own(self, segment: Segment) -> FileSegment:
        if not isinstance(segment, FileSegment):
            raise TypeError(f"{segment!r} is not a segment of the {FORMAT} format")
        return segment

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
        """Remove ``.tmp-*`` files left by a crash (and by killed maintenance runs:
        :meth:`clean_up`); the last committed position per table.

        The worker drops every event at or before a table's last position before it
        commits again: :meth:`commit_segment` refuses to go backwards.
        """
        self._newest.clear()
        self.clean_up()
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
                fsync_dir(directory)
            segments = self.segments(table)
            if segments:
                result[table] = segments[-1].last
                self._newest[table] = (segments[-1].seq, segments[-1].last)
        return result

    def commit_segment(self, table: str, events: Sequence[Item]) -> FileSegment:
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
        data = segment_table(events, self.source, table, self.writer)
        rows = data.num_rows
        position_column = data.column(0)
        if (
            rows > 1
            and pc.any(
                pc.less(position_column.slice(1), position_column.slice(0, rows - 1))
            ).as_py()
        ):
            raise ValueError(f"positions of the events of {table!r} go backwards in a segment")
        first, last = first_position(events[0]), last_position(events[-1])

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

        ensure_dir(directory)

        def write(f: io.BufferedWriter) -> None:
            write_parquet(data, f)

        try:
            with self._fenced():
                path = publish(directory, segment_file_name(seq, first, last), write,
                                self._staging)
        except BaseException:
            # The rename may have happened: look at the directory again next time.
            self._newest.pop(table, None)
            raise
        self._newest[table] = (seq, last)
        return FileSegment(table=table, seq=seq, first=first, last=last, path=path)

    def commit(self, table: str, items: Sequence[Item]) -> Position:
        """The sink's commit: :meth:`commit_segment`, durable up to the position returned."""
        return self.commit_segment(table, items).last

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
        ensure_dir(directory)
        encoded = text.encode("utf-8")
        with self._fenced():
            publish(directory, name, lambda f: f.write(encoded), self._staging)


    # ----------------------------------------------------------------- maintenance

    def write_compacted(self, table: str, run: Sequence[Segment], data: pa.Table,
                        step: Callable[[str], None] = _no_step) -> FileSegment:
        """Publish a compacted segment: written under ``.maintenance/`` while this process
        holds a lock on it (:meth:`clean_up` leaves it alone), fsynced, then hard-linked
        into the table directory (a link never replaces a file: a run compacted twice at
        once is published once), the directory fsynced."""
        lo, hi = run[0].lo, run[-1].seq
        first, last = run[0].first, run[-1].last
        directory = self.table_dir(table)
        name = compacted_file_name(lo, hi, first, last)
        staging = self.source_dir / MAINTENANCE_DIR
        ensure_dir(staging)
        tmp = staging / f"{TMP_PREFIX}{uuid.uuid4().hex}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # released when this process ends, kill -9 too
            os.fchmod(fd, 0o600)
            with os.fdopen(fd, "wb", closefd=False) as f:
                write_parquet(data, f)
                f.flush()
                os.fsync(f.fileno())
            step(f"publish {lo}-{hi}")
            # the same run compacted by a concurrent run holds the same rows
            with contextlib.suppress(FileExistsError):
                os.link(tmp, directory / name)
            fsync_dir(directory)
        finally:
            tmp.unlink(missing_ok=True)
            os.close(fd)
        size = (directory / name).stat().st_size
        return FileSegment(table, hi, first, last, directory / name, lo, size)

    def clean_up(self) -> int:
        """Remove what killed maintenance runs left under ``.maintenance/``: the files no
        live process holds a lock on (a kill -9 releases it), written more than
        ``STALE_S`` ago (a run locks its file right after creating it); how many."""
        staging = self.source_dir / MAINTENANCE_DIR
        try:
            names = os.listdir(staging)
        except FileNotFoundError:
            return 0
        removed = 0
        for name in names:
            if not name.startswith(TMP_PREFIX):
                continue
            try:
                fd = os.open(staging / name, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
            except OSError:
                continue  # gone meanwhile, or not a file this format made
            try:
                if time.time() - os.fstat(fd).st_mtime < STALE_S:
                    continue
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    continue  # its run is alive
                (staging / name).unlink(missing_ok=True)
                removed += 1
            finally:
                os.close(fd)
        if removed:
            fsync_dir(staging)
        return removed

    def remove(self, table: str, segments: Sequence[Segment]) -> None:
        directory = self.table_dir(table)
        for segment in segments:
            self._own(segment).path.unlink(missing_ok=True)
        fsync_dir(directory)


def _parse_segment(table: str, directory: Path, name: str) -> FileSegment | None:
    match = SEGMENT_RE.fullmatch(name)
    if match is not None:
        return FileSegment(table, int(match[1]), Position.decode(match[2]),
                           Position.decode(match[3]), directory / name)
    match = COMPACTED_RE.fullmatch(name)
    if match is not None and int(match[1]) < int(match[2]):
        return FileSegment(table, int(match[2]), Position.decode(match[3]),
                           Position.decode(match[4]), directory / name, int(match[1]))
    return None


def read_events(zone: LandedReader, table: str) -> list[dict[str, object]]:
    """All rows of all segments of ``table`` in order, as dicts."""
    rows: list[dict[str, object]] = []
    for segment in zone.segments(table):
        rows.extend(zone.read(segment).to_pylist())
    return rows
