"""pgoutput messages to what the worker consumes: change events, watermarks, checkpoints.

Pure apart from the ``describe`` callback, which the source answers from the
catalog when a Relation message names a table for the first time or anew.

Positions: every event of a transaction gets ``(commit LSN, index, 0)``, the index
counting the events this translator produces in that transaction (a key change
produces two), so a replay of the same transaction yields the same positions.

It also remembers each committed transaction's changes (:mod:`dblog_worker.pg.visibility`)
until a snapshot sees it: after a watermark whose snapshot the source reported
(:meth:`LogTranslator.observe`), the changes that snapshot did not see follow as one
:class:`Unseen` item.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Collection
from dataclasses import dataclass
from enum import Enum

from dblog_worker.errors import ProtocolError
from dblog_worker.events import (
    ChangeEvent,
    Checkpoint,
    IncompleteRow,
    LogItem,
    Op,
    Origin,
    Watermark,
)
from dblog_worker.pg import pgoutput as pg
from dblog_worker.pg.values import RowCodec
from dblog_worker.pg.visibility import RecentCommits, Snapshot
from dblog_worker.position import Position

_new = tuple.__new__
_u32 = struct.Struct(">I").unpack_from


class RelationKind(Enum):
    CAPTURED = "captured"
    WATERMARK = "watermark"
    IGNORED = "ignored"


@dataclass(frozen=True, slots=True)
class RelationView:
    """How to translate the rows of one relation (one version of its columns)."""

    kind: RelationKind
    table: str
    codec: RowCodec | None = None
    schema_version: int = 0
    full_identity: bool = False
    watermark_columns: tuple[int, int] = (0, 1)  # positions of (source, value)


def message_prefix(source_name: str) -> str:
    """The prefix of this source's watermark messages (``watermarks = "message"``)."""
    return f"dblog.{source_name}"


Describe = Callable[[pg.Relation], RelationView]
TupleKeyRow = Callable[[bytes, int], tuple[str, str] | None]


class LogTranslator:
    """Keeps the open transaction and the relations; turns messages into log items."""

    def __init__(self, source_name: str, describe: Describe,
                 recent: RecentCommits | None = None) -> None:
        self.source_name = source_name
        self._message_prefix = message_prefix(source_name)
        self._describe = describe
        self._relations: dict[int, RelationView] = {}
        self._messages: dict[int, pg.Relation] = {}  # each relation's last description
        # the captured ones, with the reader of their inserts (the hot path)
        self._captured: dict[int, tuple[RelationView, TupleKeyRow]] = {}
        self._lsn = 0
        self._ts = 0
        self._index = 0
        self.in_transaction = False
        self.recent = recent if recent is not None else RecentCommits()
        self._xid = 0
        # the open transaction's changes, up to the limit: their tables and keys
        self._tables: list[str] = []
        self._keys: list[str | None] = []
        self._room = self.recent.limit
        self._more: set[str] = set()  # tables with changes beyond the limit
        self._snapshots: dict[str, Snapshot] = {}  # watermarks written, not read back yet
        self.read_to = 0  # the last checkpoint's position: every transaction before is read

    def observe(self, snapshot: Snapshot, token: str | None = None) -> None:
        """A snapshot taken now (by the write of watermark ``token``): what every snapshot
        still to come sees need not be remembered any more."""
        if token is not None:
            self._snapshots[token] = snapshot
        self.recent.forget([*self._snapshots.values(), snapshot])

    def checkpoint(self, lsn: int) -> Checkpoint:
        """Everything before ``lsn`` is read; a restart resumes before the oldest transaction
        not yet seen by a snapshot, so that it is read (and known) again."""
        self.read_to = max(self.read_to, lsn)
        oldest = self.recent.oldest()
        if oldest is None or oldest >= lsn:
            return Checkpoint(Position(lsn, 0))
        return Checkpoint(Position(lsn, 0), pg.format_lsn(oldest))

    def _changed(self, event: ChangeEvent) -> None:
        if self._room:
            self._room -= 1
            self._tables.append(event.table)
            self._keys.append(event.key)
        else:
            self._more.add(event.table)

    def insert(self, message: bytes, out: list[LogItem]) -> bool:
        """The hot path: an Insert message of a captured table, read from its bytes by the
        table's codec (``RowCodec.tuple_key_row``); False when it must go through
        :meth:`translate` instead (another relation, a tuple that is not plain text)."""
        captured = self._captured.get(_u32(message, 1)[0])
        if captured is None or message[5] != 0x4E:  # 'N': the new tuple
            return False
        view, tuple_key_row = captured
        try:
            key_row = tuple_key_row(message, 6)
        except Exception:  # the general way raises what is wrong
            return False
        if key_row is None:
            return False
        key, after = key_row
        # tuple.__new__ builds the NamedTuples in C: the same values, half the time
        out.append(_new(ChangeEvent, (
            view.table, Op.CREATE, _new(Position, (self._lsn, self._index, 0)),
            key, after, None, Origin.LOG, self._ts, view.schema_version, None,
        )))
        self._index += 1
        if self._room:
            self._room -= 1
            self._tables.append(view.table)
            self._keys.append(key)
        else:
            self._more.add(view.table)
        return True

    def translate(self, message: pg.Message, out: list[LogItem]) -> None:
        if type(message) is pg.Insert:
            view = self._view(message.relation_oid)
            if view.kind is RelationKind.CAPTURED:
                codec = view.codec
                assert codec is not None
                key, after = codec.key_row(message.new)  # type: ignore[arg-type]
                self._append(out, view, Op.CREATE, key, after, None)
            elif view.kind is RelationKind.WATERMARK:
                self._watermark(out, view, message.new)
        elif isinstance(message, pg.Update):
            view = self._view(message.relation_oid)
            if view.kind is RelationKind.CAPTURED:
                self._update(out, view, message)
            elif view.kind is RelationKind.WATERMARK:
                self._watermark(out, view, message.new)
        elif isinstance(message, pg.Delete):
            view = self._view(message.relation_oid)
            if view.kind is RelationKind.CAPTURED:
                self._delete(out, view, message)
        elif type(message) is pg.LogicalMessage:
            if message.transactional and message.prefix == self._message_prefix:
                self._emit_watermark(out, bytes(message.content).decode(errors="replace"))
        elif isinstance(message, pg.Begin):
            self.in_transaction = True
            self._lsn, self._ts, self._index = message.final_lsn, message.commit_ts_us, 0
            self._xid = message.xid
        elif isinstance(message, pg.Commit):
            self.in_transaction = False
            if self._keys or self._more:
                self.recent.committed(self._xid, self._lsn, self._tables, self._keys, self._more)
                self._tables, self._keys = [], []
                self._room, self._more = self.recent.limit, set()
            out.append(self.checkpoint(message.end_lsn))
        elif isinstance(message, pg.Relation):
            self._messages[message.relation_oid] = message
            self._relate(message)
        elif isinstance(message, pg.Truncate):
            for oid in message.relation_oids:
                view = self._view(oid)
                if view.kind is RelationKind.CAPTURED:
                    self._append(out, view, Op.TRUNCATE, None, None, None)

    def _relate(self, message: pg.Relation) -> None:
        view = self._describe(message)
        self._relations[message.relation_oid] = view
        if view.kind is RelationKind.CAPTURED:
            assert view.codec is not None
            self._captured[message.relation_oid] = (view, view.codec.tuple_key_row)
        else:
            self._captured.pop(message.relation_oid, None)

    def describe_again(self, tables: Collection[str]) -> None:
        """``tables`` joined capture: a relation of that name described as ignored (renamed
        into a pattern while its rows were in the publication) is described again, so that
        its next rows are captured. A relation that left capture keeps its view: its rows
        still on their way through the log were written while it was captured."""
        for oid, view in list(self._relations.items()):
            if view.kind is RelationKind.IGNORED and view.table in tables:
                self._relate(self._messages[oid])

    def _view(self, oid: int) -> RelationView:
        try:
            return self._relations[oid]
        except KeyError:
            raise ProtocolError(f"row of relation {oid} before its Relation message") from None

    def _position(self) -> Position:
        position = Position(self._lsn, self._index)
        self._index += 1
        return position

    def _update(self, out: list[LogItem], view: RelationView, message: pg.Update) -> None:
        codec = view.codec
        assert codec is not None
        new, old = message.new, message.old
        full_old = None if message.old_is_key_only else old
        new_texts = _texts(new, full_old, view)
        old_texts = None if old is None else _texts(old, None, view)
        if new_texts is None or (old is not None and old_texts is None):
            new_key = _key_texts(new, view)
            if old_texts is not None:
                old_key = codec.key(old_texts)
                if old_key != codec.key_from_key_values(new_key):
                    before = None if full_old is None else codec.row(old_texts)
                    self._append(out, view, Op.DELETE, old_key, None, before)
            out.append(IncompleteRow(view.table, new_key))
            return
        key, after = codec.key_row(new_texts)
        if old_texts is None:
            self._append(out, view, Op.UPDATE, key, after, None)
            return
        old_key, old_row = codec.key_row(old_texts)
        before = None if full_old is None else old_row
        if old_key == key:
            self._append(out, view, Op.UPDATE, key, after, before)
        else:
            self._append(out, view, Op.DELETE, old_key, None, before)
            self._append(out, view, Op.CREATE, key, after, None)

    def _delete(self, out: list[LogItem], view: RelationView, message: pg.Delete) -> None:
        codec = view.codec
        assert codec is not None
        texts = _texts(message.old, None, view)
        if texts is None:
            out.append(IncompleteRow(view.table, _key_texts(message.old, view)))
            return
        key, row = codec.key_row(texts)
        self._append(out, view, Op.DELETE, key, None, None if message.old_is_key_only else row)

    def _append(
        self, out: list[LogItem], view: RelationView, op: Op,
        key: str | None, after: str | None, before: str | None,
    ) -> None:
        event = ChangeEvent(
            view.table, op, self._position(), key, after, before, Origin.LOG, self._ts,
            view.schema_version,
        )
        out.append(event)
        self._changed(event)

    def _watermark(self, out: list[LogItem], view: RelationView, row: pg.Tuple) -> None:
        source_at, value_at = view.watermark_columns
        if row[source_at] == self.source_name and isinstance(row[value_at], str):
            self._emit_watermark(out, str(row[value_at]))

    def _emit_watermark(self, out: list[LogItem], token: str) -> None:
        out.append(Watermark(token, self._position(), self._ts))
        snapshot = self._snapshots.pop(token, None)
        if snapshot is not None:
            unseen = self.recent.unseen(snapshot)
            if unseen is not None:
                out.append(unseen)


def _texts(
    row: pg.Tuple, old: pg.Tuple | None, view: RelationView
) -> tuple[str | None, ...] | None:
    """Text values of a tuple; an unchanged TOASTed value is taken from the old row.

    None when a value was left out and no complete old row came with it.
    """
    if pg.UNCHANGED_TOAST not in row:
        return row  # type: ignore[return-value]
    if old is None:
        return None
    return tuple(
        o if v is pg.UNCHANGED_TOAST else v  # type: ignore[misc]
        for v, o in zip(row, old, strict=True)
    )


def _key_texts(row: pg.Tuple, view: RelationView) -> tuple[str, ...]:
    assert view.codec is not None
    names = view.codec.column_names
    return tuple(str(row[names.index(column)]) for column in view.codec.key_columns)
