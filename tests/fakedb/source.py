"""The source over a fake database: what a kind's package implements (``dblog_worker.source``).

The log is the database's commits in order: commit ``n``'s ``i``-th change is at position
``(n, i, 0)``, and after each commit comes the checkpoint ``(n + 1, 0, 0)`` (``"n+1"``:
the next commit to read). Watermarks are upserts of this source's row of the database's
``dblog.watermark`` table, read back from the log like the real kinds' watermark tables.
A low watermark's write remembers the commits logged before it that its snapshot did not
see; the log gives their changes as :class:`~dblog_worker.events.Unseen` right after the
low watermark (unless ``source.unseen = false``).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Sequence

import pyarrow as pa

from dblog_worker.config import SourceConfig
from dblog_worker.dump.requests import KeyTexts
from dblog_worker.dump.row_filter import Condition, RowFilter
from dblog_worker.dump.row_filter import Op as Cmp
from dblog_worker.errors import DumpFailed, LogGone, RequestRejected, SourceUnavailable
from dblog_worker.events import (
    ChangeEvent,
    Checkpoint,
    LogItem,
    Op,
    Origin,
    Unseen,
    Watermark,
    is_low_watermark,
)
from dblog_worker.position import Position
from dblog_worker.source import Chunk, ChunkReader, KeysChunk, Problem, SchemaVersion, locked
from dblog_worker.table_patterns import Candidate, Rescan, Selection
from dblog_worker.tables import HEARTBEAT, WATERMARK_SCHEMA, CapturedSet
from tests.fakedb.database import (
    Column,
    DatabaseError,
    FakeDatabase,
    Key,
    Row,
    Snapshot,
    Table,
    Value,
    sort_key,
)
from tests.fakedb.options import SCHEME, FakeOptions

WATERMARK_TABLE = f"{WATERMARK_SCHEMA}.watermark"
MAX_COMMITS = 2000  # read by one poll
_OPS = {"c": Op.CREATE, "u": Op.UPDATE, "d": Op.DELETE, "t": Op.TRUNCATE}


def key_json(key: Key) -> str:
    return json.dumps(list(key), separators=(",", ":"), ensure_ascii=False)


def row_json(row: Row) -> str:
    return json.dumps(row, separators=(",", ":"), ensure_ascii=False)


def key_texts(key: Key) -> KeyTexts:
    return tuple(str(v) for v in key)


def parse_value(column: Column, text: str) -> Value:
    """A text as the column's type; ValueError if it does not fit."""
    return int(text) if column.type == "int" else text


class FakeSource:
    """One fake database (``fake:<name>`` in :data:`tests.fakedb.DATABASES`) as the worker
    sees it."""

    def __init__(self, config: SourceConfig, schema_version: SchemaVersion) -> None:
        assert isinstance(config.options, FakeOptions)
        self.config = config
        self.options = config.options
        self.name = config.name
        self._schema_version = locked(schema_version)
        self._versions: dict[tuple[str, tuple[Column, ...], tuple[str, ...]], int] = {}
        self._versions_lock = threading.Lock()
        self._db: FakeDatabase | None = None
        self.capture = CapturedSet(config.selector, config.columns, self._candidates)
        self.chunks = FakeReads(self)
        self.tables = self.chunks
        self.pressure = FakePressure()
        self.log = FakeLog(self)
        self.watermarks = FakeWatermarks(self, self.log)

    # -- setup -------------------------------------------------------------------------------

    @property
    def db(self) -> FakeDatabase:
        if self._db is None:
            raise SourceUnavailable("not connected")
        if not self._db.available:
            raise SourceUnavailable(f"fake database {self.config.dsn} is down")
        return self._db

    def connect(self) -> None:
        from tests.fakedb import DATABASES

        found = DATABASES.get(self.config.dsn.removeprefix(SCHEME))
        if found is None:
            raise SourceUnavailable(f"fake database {self.config.dsn} does not exist")
        self._db = found
        self.db  # noqa: B018 -- refuses a database that is down

    def _candidates(self) -> list[Candidate]:
        with self.db.lock:
            return [Candidate(name, tuple(table.key)) for name, table in self.db.tables.items()
                    if name != WATERMARK_TABLE]

    def selection(self) -> Selection:
        return self.capture.selection()

    def rescan(self) -> Rescan:
        return self.capture.rescan()

    def preflight(self) -> list[Problem]:
        problems = []
        for table in self.capture.rescan().selection.missing:
            problems.append(Problem(f"table {table} does not exist", f"create {table}",
                                    capture=False))
        return problems

    def modes(self) -> list[str]:
        return ["watermarks: upserts of dblog.watermark, read back from the fake's log"]

    def cascades(self) -> list[str]:
        return ["the fake kind has no foreign keys"]

    def capture_exists(self) -> bool:
        with self.db.lock:
            return self.name in self.db.slots

    def readers(self) -> dict[str, str]:
        return {}

    def prepare(self) -> str | None:
        db = self.db
        with db.lock:
            if WATERMARK_TABLE not in db.tables:
                db.create_table(WATERMARK_TABLE, [("source", "text"), ("value", "text")],
                                ["source"])
            if self.name in db.slots:
                return None
            db.slots[self.name] = db.next_seq()
            return str(db.slots[self.name])

    def close(self) -> None:
        self._db = None

    # -- schema versions ---------------------------------------------------------------------

    def version(self, table: str, columns: tuple[Column, ...], key: tuple[str, ...]) -> int:
        with self._versions_lock:
            known = self._versions.get((table, columns, key))
        if known is None:
            document = {"columns": [{"name": c.name, "type": c.type} for c in columns],
                        "key": list(key)}
            known = self._schema_version(table, document)
            with self._versions_lock:
                self._versions[(table, columns, key)] = known
        return known


class FakeLog:
    """The fake source's log part: its database's commits from a checkpoint on."""

    def __init__(self, source: FakeSource) -> None:
        self._source = source
        self._next = 0  # the next commit the log reader reads
        self.unseen: dict[str, frozenset[int]] = {}  # LW token -> commits it did not see

    def start(self, checkpoint: str | None, landed: Position | None = None) -> str:
        db = self._source.db
        with db.lock:
            slot = db.slots.get(self._source.name)
            if slot is None:
                raise LogGone(f"capture {self._source.name} does not exist in "
                              f"{self._source.config.dsn}")
            self._next = int(checkpoint) if checkpoint else slot
            if self._next < slot:
                raise LogGone(f"the log before {slot} is gone (checkpoint {checkpoint})")
        self.unseen = {}
        return str(self._next)

    def poll(self, timeout: float, out: list[LogItem]) -> None:
        commits = self._source.db.commits_from(self._next, timeout)[:MAX_COMMITS]
        captured = self._source.config.tables
        for commit in commits:
            seq, ts = commit.seq, commit.ts_us
            for index, change in enumerate(commit.changes):
                if change.table == WATERMARK_TABLE:
                    assert change.after is not None
                    if change.after["source"] == self._source.name:
                        token = str(change.after["value"])
                        out.append(Watermark(token, Position(seq, index, 0), ts))
                        if token in self.unseen:
                            out.append(self._unseen_of(self.unseen.pop(token)))
                elif change.table in captured:
                    version = self._source.version(change.table, change.columns, change.key_columns)
                    out.append(ChangeEvent(
                        change.table, _OPS[change.op], Position(seq, index, 0),
                        None if change.key is None else key_json(change.key),
                        None if change.after is None else row_json(change.after),
                        None if change.before is None else row_json(change.before),
                        Origin.LOG, ts, version))
            out.append(Checkpoint(Position(seq + 1, 0, 0)))
            self._next = seq + 1

    def _unseen_of(self, seqs: frozenset[int]) -> Unseen:
        changes: list[tuple[str, str | None]] = []
        with self._source.db.lock:
            for seq in sorted(seqs):
                for change in self._source.db.log[seq - 1].changes:
                    if change.table in self._source.config.tables:
                        changes.append((change.table,
                                        None if change.key is None else key_json(change.key)))
        return Unseen(tuple(changes))

    def encode_checkpoint(self, checkpoint: Checkpoint) -> str:
        return str(checkpoint.position.major)

    def confirm(self, checkpoint: str) -> None:
        with self._source.db.lock:
            self._source.db.slots[self._source.name] = int(checkpoint)

    def log_position(self) -> Position:
        return Position(self._source.db.next_seq(), 0, 0)

    def lag_bytes(self) -> int:
        return max(0, self._source.db.next_seq() - self._next)


class FakeWatermarks:
    """The fake source's watermarks part: upserts of its row of ``dblog.watermark``."""

    def __init__(self, source: FakeSource, log: FakeLog) -> None:
        self._source = source
        self._log = log

    def write_watermark(self, token: str) -> None:
        db = self._source.db
        with db.lock:
            if WATERMARK_TABLE not in db.tables:
                raise SourceUnavailable(f"the watermark table {WATERMARK_TABLE} is gone; the "
                                        "next session creates it again")
            seen = db.snapshot()  # the watermark statement's snapshot
            with db.transaction() as tx:
                tx.upsert(WATERMARK_TABLE, {"source": self._source.name, "value": token})
            if self._source.options.unseen and token != HEARTBEAT and is_low_watermark(token) \
                    and seen.invisible:
                self._log.unseen[token] = seen.invisible

    def await_low_watermark(self) -> None:
        return None

    def heartbeat(self) -> None:
        self.write_watermark(HEARTBEAT)


class FakePressure:
    """No other session, no replica."""

    def active_sessions(self) -> int:
        return 0

    def replica_lag_ms(self) -> float | None:
        return None


class FakeReads:
    """The fake source's ``chunks`` and ``tables`` parts: its captured tables and their
    reads."""

    def __init__(self, source: FakeSource) -> None:
        self._source = source

    def masked_columns(self, table: str) -> dict[str, str]:
        """None: the fake kind applies no ``[source.columns]``."""
        return {}

    def _table(self, table: str) -> Table:
        if table not in self._source.capture:
            raise RequestRejected(f"table {table} is not captured by source {self._source.name}; "
                                  f"captured: {', '.join(self._source.capture.tables())}")
        found = self._source.db.tables.get(table)
        if found is None:
            raise DumpFailed(f"table {table} does not exist any more")
        return found

    def _current_version(self, table: Table) -> int:
        return self._source.version(table.name, tuple(table.columns), table.key)

    def refresh(self, table: str) -> None:
        with self._source.db.lock:
            self._table(table)

    def key_arity(self, table: str) -> int:
        with self._source.db.lock:
            return len(self._table(table).key)

    def check_keys(self, table: str, keys: Sequence[KeyTexts]) -> None:
        with self._source.db.lock:
            found = self._table(table)
            for key in keys:
                self._key(found, key, RequestRejected)

    def check_filter(self, table: str, row_filter: RowFilter) -> None:
        with self._source.db.lock:
            found = self._table(table)
            columns = {c.name: c for c in found.columns}
            for condition in row_filter.conditions:
                column = columns.get(condition.column)
                if column is None:
                    raise RequestRejected(f"table {table} has no column {condition.column}")
                for value in condition.values:
                    try:
                        parse_value(column, value)
                    except ValueError:
                        raise RequestRejected(f"{value!r} is not a value of {table}."
                                              f"{column.name} ({column.type})") from None
            for key in (row_filter.from_key, row_filter.to_key):
                if key is not None:
                    self._key(found, key, RequestRejected)

    def _key(self, table: Table, texts: KeyTexts,
             error: type[Exception] = DumpFailed) -> Key:
        columns = {c.name: c for c in table.columns}
        if len(texts) != len(table.key):
            raise error(f"a key of {table.name} has {len(table.key)} value(s), got {len(texts)}")
        try:
            return tuple(parse_value(columns[name], text)
                         for name, text in zip(table.key, texts, strict=True))
        except ValueError:
            raise error(f"{list(texts)} is not a key of {table.name}") from None

    # -- the chunks ------------------------------------------------------------------------------

    def _selected(self, table: str, after: KeyTexts | None, upper: KeyTexts | None,
                  row_filter: RowFilter | None) -> tuple[Table, list[tuple[Key, Row]]]:
        """The rows a new snapshot sees after ``after``, up to ``upper``, that meet the
        filter, in key order."""
        db = self._source.db
        with db.lock:
            found = self._table(table)
            snapshot: Snapshot = db.snapshot()
            low = None if after is None else sort_key(self._key(found, after))
            high = None if upper is None else sort_key(self._key(found, upper))
            meets = _filter(found, row_filter)
            rows = []
            for key, row in db.rows(table, snapshot).items():
                ordered = sort_key(key)
                if (low is None or ordered > low) and (high is None or ordered <= high) \
                        and meets(key, row):
                    rows.append((key, row))
            return found, rows

    def _after_read(self, table: str, keys: list[Key]) -> None:
        hook = self._source.db.on_read
        if hook is not None and keys:
            hook(table, keys)

    def upper_bound(self, table: str, row_filter: RowFilter | None = None) -> KeyTexts | None:
        _, rows = self._selected(table, None, None, row_filter)
        return key_texts(rows[-1][0]) if rows else None

    def read_chunk(self, table: str, after: KeyTexts | None, upper: KeyTexts, limit: int,
                   row_filter: RowFilter | None = None) -> Chunk:
        found, rows = self._selected(table, after, upper, row_filter)
        rows = rows[:limit]
        keys = [key_json(k) for k, _ in rows]
        afters = [row_json(r) for _, r in rows]
        self._after_read(table, [k for k, _ in rows])
        return Chunk(len(rows), key_texts(rows[-1][0]) if rows else None,
                     self._current_version(found),
                     lambda: (pa.array(keys, pa.string()), pa.array(afters, pa.string())))

    def read_keys(self, table: str, keys: Sequence[KeyTexts]) -> KeysChunk:
        db = self._source.db
        with db.lock:
            found = self._table(table)
            wanted = [self._key(found, texts) for texts in keys]
            rows = db.rows(table)
        missing, encoded, afters = [], [], []
        for texts, key in zip(keys, wanted, strict=True):
            row = rows.get(key)
            if row is None:
                missing.append(texts)
            elif key_json(key) not in encoded:
                encoded.append(key_json(key))
                afters.append(row_json(row))
        self._after_read(table, [k for k in wanted if k in rows])
        return KeysChunk(pa.array(encoded, pa.string()), pa.array(afters, pa.string()), missing,
                         self._current_version(found))

    def key_after(self, table: str, after: KeyTexts | None, upper: KeyTexts, offset: int,
                  row_filter: RowFilter | None = None) -> KeyTexts | None:
        _, rows = self._selected(table, after, upper, row_filter)
        return key_texts(rows[offset - 1][0]) if len(rows) >= offset else None

    def lane(self, index: int) -> ChunkReader:
        return self  # every call takes the database's lock: one reader serves every lane


def _filter(table: Table, row_filter: RowFilter | None) -> Callable[[Key, Row], bool]:
    """Whether a row (its key, its values) meets ``row_filter``; SQL's NULL logic."""
    if row_filter is None:
        return lambda key, row: True
    columns = {c.name: c for c in table.columns}
    try:
        conditions = [(c, [parse_value(columns[c.column], v) for v in c.values])
                      for c in row_filter.conditions]
    except KeyError as exc:
        raise DumpFailed(f"table {table.name} has no column {exc.args[0]} any more") from None

    def keyed(texts: KeyTexts | None) -> tuple[tuple[int, int | str], ...] | None:
        if texts is None:
            return None
        return sort_key(tuple(parse_value(columns[n], t)
                              for n, t in zip(table.key, texts, strict=True)))

    first, last = keyed(row_filter.from_key), keyed(row_filter.to_key)

    def meets(key: Key, row: Row) -> bool:
        ordered = sort_key(key)
        if (first is not None and ordered < first) or (last is not None and ordered > last):
            return False
        return all(_holds(c, values, row.get(c.column)) for c, values in conditions)

    return meets


def _holds(condition: Condition, values: list[Value], value: Value) -> bool:
    op = condition.op
    if op is Cmp.IS_NULL:
        return value is None
    if op is Cmp.IS_NOT_NULL:
        return value is not None
    if value is None:
        return False
    if op is Cmp.IN:
        return value in values
    if op is Cmp.NOT_IN:
        return value not in values
    bound = values[0]
    assert bound is not None
    if op is Cmp.EQ:
        return value == bound
    if op is Cmp.NE:
        return value != bound
    if type(value) is not type(bound):
        raise DatabaseError(f"{condition.column}: cannot compare {value!r} with {bound!r}")
    return bool({Cmp.LT: value < bound, Cmp.LE: value <= bound,  # type: ignore[operator]
                 Cmp.GT: value > bound, Cmp.GE: value >= bound}[op])  # type: ignore[operator]
