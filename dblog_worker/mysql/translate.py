"""Binlog events of MySQL or MariaDB translated into log items, in log order: the pure
part of the binary log reader (:mod:`dblog_worker.mysql.binlog`).

* A row of a captured table becomes a :class:`ChangeEvent` at position (binlog file
  number, end position of its rows event, twice the index of the row in the event). An
  update that changes the primary key becomes a delete of the old key and, at the
  next position (twice the index, plus one), a create of the new one.
* A row written to ``dblog.watermark`` with this source's name becomes a
  :class:`Watermark` (the worker's low and high watermarks, and its heartbeats).
* ``TRUNCATE`` of a captured table becomes a truncate event.
* The end of a transaction (``XID``, ``COMMIT``, or a statement logged on its own,
  such as DDL) becomes a :class:`Checkpoint` that carries where to resume: a
  transaction is never half-checkpointed.
* An XA transaction's rows, logged at ``XA PREPARE``, become change events only at its
  ``XA COMMIT``, at positions of that event (file number, its position, twice the row's
  index in the transaction): the reader reads the prepared group again then, so memory
  holds no prepared transaction. Until then no checkpoint resumes after the group's
  start. After ``XA ROLLBACK`` nothing of it is emitted.
* An event the reader cannot decode but that carries changes (compressed, partial JSON)
  stops the worker: the setting that writes it loses changes.
* A delete, or an update of referenced columns, of a parent of a foreign key that cascades
  (:mod:`dblog_worker.foreign_keys`; the parent captured or not) becomes, per captured
  child, a foreign-key action event at the parent row's position (twice the row's index:
  the child's stream has nothing else there; a table that references itself, plus one),
  unless the rows event says the session ran with ``foreign_key_checks = 0`` (then nothing
  cascaded); the captured tables it reaches where no event can say how (or whose parent
  image the log cut short) follow as :class:`Cascaded`. A DDL statement that can add or
  drop a foreign key reads the foreign keys again.
* A row image decoded by mysql-replication (not by ``rowimage.py``: a table with a MySQL 8
  JSON column) with a zero or invalid date, which the library gives as None like NULL,
  was cut short: an insert or the new image of an update becomes an
  :class:`IncompleteRow` (its key is dumped again, and the dump reads the true value);
  an old image (of a delete, of an update) is left out (``before`` null).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from pymysqlreplication.constants import NONE_SOURCE
from pymysqlreplication.event import (
    GtidEvent,
    MariadbGtidEvent,
    NotImplementedEvent,
    QueryEvent,
    RotateEvent,
    XAPrepareEvent,
    XidEvent,
)
from pymysqlreplication.gtid import Gtid, GtidSet
from pymysqlreplication.row_event import (
    DeleteRowsEvent,
    PartialUpdateRowsEvent,
    UpdateRowsEvent,
    WriteRowsEvent,
)

from dblog_worker.errors import ConfigError, ProtocolError
from dblog_worker.events import (
    Cascaded,
    ChangeEvent,
    Checkpoint,
    IncompleteRow,
    LogItem,
    Op,
    Origin,
    Watermark,
)
from dblog_worker.foreign_keys import CascadePlan, action_images
from dblog_worker.mysql.checkpoint import (
    BinlogCheckpoint,
    PreparedXa,
    XaCommit,
    Xid,
    file_number,
    gtids_by_domain,
    xid_text,
)
from dblog_worker.mysql.rowimage import RowImages
from dblog_worker.position import Position
from dblog_worker.table_patterns import TableSelector, escape
from dblog_worker.tables import WATERMARK_SCHEMA

__all__ = [
    "WATERMARK_TABLE",
    "BinlogTranslator",
    "Describe",
    "RowEncoder",
    "TableView",
    "truncated_table",
]

log = logging.getLogger(__name__)

WATERMARK_TABLE = "watermark"
_new = tuple.__new__
_FL_STANDALONE = 1  # MariaDB GTID flag: the group is one statement, no XID follows
_FL_PREPARED_XA = 64  # MariaDB GTID flag: an XA transaction's group, up to XA PREPARE
_NO_FOREIGN_KEY_CHECKS = 2  # rows event flag: the session ran with foreign_key_checks = 0
# DDL that can add, drop or move a foreign key (or a table that has one)
_FOREIGN_KEY_DDL = re.compile(r"\b(FOREIGN|REFERENCES|CONSTRAINT|DROP|RENAME|ALTER|CREATE)\b",
                              re.IGNORECASE)
# Events that carry changes mysql-replication cannot decode, by type: the setting that
# makes the server write them (catalog.REFUSED_SETTINGS).
_UNREADABLE = {
    39: "binlog_row_value_options=PARTIAL_JSON",  # MySQL PARTIAL_UPDATE_ROWS_EVENT
    40: "binlog_transaction_compression",  # MySQL TRANSACTION_PAYLOAD_EVENT
    **dict.fromkeys(range(165, 172), "log_bin_compress"),  # MariaDB's compressed events
}
XA_CHANGES_KEPT = 10_000  # keys of one XA commit's changes kept (xa_visibility.py)
_XA_RESOLVED = re.compile(
    r"\s*XA\s+(COMMIT|ROLLBACK)\s+X'([0-9A-F]*)'\s*,\s*X'([0-9A-F]*)'\s*,\s*(\d+)",
    re.IGNORECASE,
)


_LAST = Position(2**64, 0, 0)


def _position_or_last(item: LogItem) -> Position:
    return item.position if type(item) is ChangeEvent else _LAST


def _text(value: str | bytes) -> str:
    return value if isinstance(value, str) else bytes(value).decode()


class RowEncoder(Protocol):
    """What the translator needs of a table's codec for rows decoded from the binlog."""

    def key_row_from_binlog(
        self, values: Mapping[str, object], none_sources: Mapping[str, str] | None = None
    ) -> tuple[str, str]: ...

    def key_texts_from_binlog(
        self, values: Mapping[str, object], none_sources: Mapping[str, str] | None = None
    ) -> tuple[str, ...]: ...

    def key_from_texts(self, texts: Sequence[str]) -> str: ...


# What mysql-replication says of a value it could not decode (a zero or invalid date).
_LOST = frozenset({NONE_SOURCE.OUT_OF_DATE_RANGE, NONE_SOURCE.OUT_OF_DATETIME_RANGE,
                   NONE_SOURCE.OUT_OF_DATETIME2_RANGE})


@dataclass(frozen=True, slots=True)
class _CutShort:
    """A row image whose values mysql-replication could not all decode: its key's texts."""

    key: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class TableView:
    """A captured table as its rows event describes it: codec and schema version, and the
    decoder of its row images when mysql-replication's is not needed (``rowimage.py``,
    ``rowtext.py``). No codec: a table the worker cannot read (a column of a type it
    does not read), whose rows are skipped."""

    table: str
    codec: RowEncoder | None
    schema_version: int
    images: RowImages | None = None


# What of a binlog column decides how its value is laid out and encoded besides its type:
# a view (its codec and its row-image decoder) is made again when one of these changes.
_LAYOUT = ("max_length", "length_size", "precision", "decimals", "fsp", "unsigned",
           "character_set_name", "bits", "bytes", "size")

# (database.table, rows event) → view; None: a table a pattern matched that cannot be
# captured as the event describes it (no key, a mask on its key): its rows are skipped
Describe = Callable[[str, Any], TableView | None]
NO_CASCADES = CascadePlan((), frozenset())


def _cut_short(table: str, codec: RowEncoder, values: Mapping[str, object],
               sources: Mapping[str, str]) -> tuple[str, str] | _CutShort:
    """An image with values mysql-replication could not decode, as its key's texts (to
    be dumped again); an image whose key itself is lost is encoded as it is (null where the
    library gave None), with an error in the log."""
    try:
        return _CutShort(codec.key_texts_from_binlog(values, sources))
    except ValueError:
        log.error("a row of %s has a primary key the binary log reader could not decode (a "
                  "zero or invalid date): its change lands with null for it; dump the table",
                  table)
        return codec.key_row_from_binlog(values, sources)


def _whole(view: TableView, image: tuple[str, str] | _CutShort) -> tuple[str, str | None]:
    """An old image: its key and row JSON, the row None where the log cut it short."""
    if isinstance(image, _CutShort):
        return _key_json(view, image), None
    return image


def _key_json(view: TableView, image: _CutShort) -> str:
    assert view.codec is not None
    return view.codec.key_from_texts(image.key)


_TRUNCATE = re.compile(
    r"\s*TRUNCATE\s+(?:TABLE\s+)?(?:(`(?:[^`]|``)+`|\w+)\s*\.\s*)?(`(?:[^`]|``)+`|\w+)\s*;?\s*$",
    re.IGNORECASE,
)


def _unquote(name: str) -> str:
    return name[1:-1].replace("``", "`") if name.startswith("`") else name


def truncated_table(query: str, schema: str) -> str | None:
    """The ``database.table`` a TRUNCATE statement empties, or None for other statements."""
    match = _TRUNCATE.match(query)
    if match is None:
        return None
    database = _unquote(match.group(1)) if match.group(1) else schema
    return f"{database}.{_unquote(match.group(2))}" if database else None


class BinlogTranslator:
    """Binlog events → log items, for the captured tables and this source's watermarks.

    An XA transaction's rows are logged at XA PREPARE and commit (or not) at a later XA
    COMMIT (XA ROLLBACK): the translator keeps where each prepared group lies, emits
    nothing of it, and at its XA COMMIT sets :attr:`committing` for the reader, which
    reads the group again through :meth:`read_again` and ends with :meth:`committed`.
    """

    def __init__(self, source: str, tables: Iterable[str] | TableSelector, describe: Describe,
                 start: BinlogCheckpoint, *, cascades: CascadePlan = NO_CASCADES,
                 describe_parent: Describe | None = None,
                 reload_cascades: Callable[[], CascadePlan] | None = None,
                 version_of: Callable[[str], int] = lambda table: 0) -> None:
        self.source = source
        # which tables are captured, decided in log order by name: a table a pattern matches
        # is captured from its first row in the log, whenever the catalog shows it
        self.selector = tables if isinstance(tables, TableSelector) \
            else TableSelector([escape(t) for t in tables])
        self._describe = describe
        # foreign keys: the parents' rows are decoded (without a schema version, when they
        # are not captured) and a DDL statement reads the foreign keys again
        self.cascades = cascades
        self._describe_parent = describe_parent or describe
        self._reload_cascades = reload_cascades
        self._version_of = version_of
        self._views: dict[tuple[str, bool, int], TableView | None] = {}
        self._uncaptured: set[str] = set()  # tables a pattern matched that its views refused
        self._versions: dict[str, int] = {}  # the last schema version seen per table
        self.file = start.file
        self.server = start.server
        self._gtids = {} if start.mysql_gtid_set else gtids_by_domain(start.gtid)
        # MySQL: the executed set, grown by each committed GTID. Only when it started from
        # the server's whole set: a set grown from nothing would claim too little.
        self._gtid_set = GtidSet(start.gtid) if start.mysql_gtid_set else None
        self._pending_gtid: tuple[int, str] | None = None
        self.in_transaction = False
        self._standalone = False
        self._boundary = start  # the last end of a transaction read
        self._xa: PreparedXa | None = None  # the XA transaction's group being read
        self._prepared: dict[Xid, PreparedXa] = {}  # waiting for XA COMMIT, oldest first
        self.committing: XaCommit | None = None

    @property
    def gtid(self) -> str:
        if self._gtid_set is not None:
            return str(self._gtid_set)
        return ",".join(self._gtids[d] for d in sorted(self._gtids))

    def translate(self, event: Any, out: list[LogItem]) -> None:
        kind = type(event)
        if kind in (WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent):
            self._rows(event, out)
        elif kind is XidEvent:
            self._commit(event.packet.log_pos, out)
        elif kind is MariadbGtidEvent:
            self._pending_gtid = (event.domain_id, event.gtid)
            self._standalone = bool(event.flags & _FL_STANDALONE)
            self.in_transaction = not self._standalone
            if event.flags & _FL_PREPARED_XA:
                self._begin_xa(event)
        elif kind is GtidEvent:
            if self._gtid_set is not None:
                self._pending_gtid = (0, str(event.gtid))
        elif kind is QueryEvent:
            self._query(event, out)
        elif kind is XAPrepareEvent:
            self._xa_prepared(event, out)
        elif kind is RotateEvent:
            self.file = event.next_binlog
        elif kind is NotImplementedEvent or kind is PartialUpdateRowsEvent:
            self._unreadable(event)

    def _query(self, event: Any, out: list[LogItem]) -> None:
        query = _text(event.query)
        statement = query.strip().upper()
        if statement == "BEGIN":
            self.in_transaction = True
            return
        if statement.startswith("XA "):
            self._xa_statement(event, query, out)
            return
        if statement != "COMMIT":
            # DDL, perhaps of a captured table. The row events after it describe the table
            # anew; a view is found by its columns' names, types and layout (_LAYOUT), but
            # ENUM/SET members are not in it, and the old codec would write them wrong.
            self._views.clear()
            if self._reload_cascades is not None and _FOREIGN_KEY_DDL.search(query):
                self.cascades = self._reload_cascades()
        schema = event.schema.decode() if isinstance(event.schema, bytes) else event.schema
        table = truncated_table(query, schema or "")
        if table is not None and self.selector.captures(table) \
                and table not in self._uncaptured:
            position = Position(file_number(self.file), event.packet.log_pos)
            out.append(ChangeEvent(table, Op.TRUNCATE, position, None, None, None, Origin.LOG,
                                   event.timestamp * 1_000_000, self._versions.get(table, 0)))
        if statement == "COMMIT" or not self.in_transaction:
            self._commit(event.packet.log_pos, out)

    def _commit(self, pos: int, out: list[LogItem]) -> None:
        """The end of a transaction at ``pos``: a checkpoint, which resumes no later than
        the oldest prepared XA transaction (a restart must read its rows again)."""
        self.in_transaction = False
        if self._pending_gtid is not None:
            domain, gtid = self._pending_gtid
            if self._gtid_set is not None:
                self._gtid_set.merge_gtid(Gtid(gtid))
            else:
                self._gtids[domain] = gtid
            self._pending_gtid = None
        self._boundary = BinlogCheckpoint(self.file, pos, self.gtid, self.server)
        resume = next(iter(self._prepared.values())).resume if self._prepared else self._boundary
        out.append(Checkpoint(Position(file_number(self.file), pos), resume.encode()))

    # -- XA transactions ------------------------------------------------------

    def _begin_xa(self, event: Any) -> None:
        """MariaDB's GTID event of an XA group, or MySQL's ``XA START`` that opens one."""
        start = event.packet.log_pos - event.packet.event_size
        self._xa = PreparedXa(self.file, start, 0, self._boundary)
        self.in_transaction = True

    def _xa_statement(self, event: Any, query: str, out: list[LogItem]) -> None:
        """``XA START`` (MySQL) opens a group; ``XA END`` is inside it; ``XA COMMIT`` and
        ``XA ROLLBACK`` of a prepared transaction are each a group of their own."""
        if query.split(None, 2)[1].upper() == "START":
            self._begin_xa(event)
            return
        resolved = _XA_RESOLVED.match(query)
        if resolved is None:
            return
        xid = (int(resolved[4]), bytes.fromhex(resolved[2]), bytes.fromhex(resolved[3]))
        prepared = self._prepared.pop(xid, None)
        pos = event.packet.log_pos
        if resolved[1].upper() == "COMMIT":
            if prepared is None:
                log.warning(
                    "XA transaction %s was committed at %s:%d, but it was prepared before "
                    "the position capture started from: if it changed captured tables, "
                    "those changes are not in the output; dump them (dblog dump --table ...)",
                    xid_text(xid), self.file, pos)
            elif prepared.captured:
                self.committing = XaCommit(xid, prepared, Position(file_number(self.file), pos),
                                           event.timestamp * 1_000_000)
                return
        self._commit(pos, out)

    def _xa_prepared(self, event: Any, out: list[LogItem]) -> None:
        """The end of an XA group: prepared, or (MySQL's XA COMMIT … ONE PHASE) committed."""
        pos = event.packet.log_pos
        xid = (event.xid_format_id, bytes(event.xid_gtrid), bytes(event.xid_bqual))
        group, self._xa = self._xa, None
        if group is not None:
            group = replace(group, end=pos)
            if not event.one_phase:
                self._prepared[xid] = group
            elif group.captured:
                self.committing = XaCommit(xid, group, Position(file_number(self.file), pos),
                                           event.timestamp * 1_000_000)
                return
        self._commit(pos, out)

    def read_again(self, event: Any, out: list[LogItem]) -> None:
        """An event of :attr:`committing`'s group, read again at its commit: its rows of
        captured tables become events at the commit's positions."""
        commit = self.committing
        assert commit is not None
        kind = type(event)
        start = event.packet.log_pos - event.packet.event_size
        if not commit.opened:
            commit.opened = start == commit.prepared.start and (
                (kind is MariadbGtidEvent and bool(event.flags & _FL_PREPARED_XA))
                or (kind is QueryEvent and _text(event.query).strip().upper().startswith(
                    "XA START")))
            if not commit.opened:
                raise self._not_found(commit)
        elif kind is XAPrepareEvent:
            xid = (event.xid_format_id, bytes(event.xid_gtrid), bytes(event.xid_bqual))
            commit.complete = xid == commit.xid and event.packet.log_pos == commit.prepared.end
        elif kind in (WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent):
            table = f"{event.schema}.{event.table}"
            if self._read(table):  # a captured table, or the parent of one
                first = len(out)
                commit.rows += self._changes(table, event, commit.position, commit.rows,
                                             commit.commit_ts_us, out)
                added = [c for c in out[first:] if type(c) is ChangeEvent]
                # a foreign-key action event names no key: its table counts whole
                commit.overflow.update(c.table for c in added if c.op is Op.FOREIGN_KEY)
                keyed = [(c.table, c.key) for c in added if c.op is not Op.FOREIGN_KEY]
                if len(commit.changes) + len(keyed) > XA_CHANGES_KEPT:
                    commit.overflow.update(t for t, _ in keyed)
                else:
                    commit.changes.extend(keyed)

    def committed(self, out: list[LogItem]) -> XaCommit:
        """The group of :attr:`committing` is read again: the checkpoint of its commit;
        returns the commit, with its changes (keys kept up to :data:`XA_CHANGES_KEPT`)."""
        commit, self.committing = self.committing, None
        assert commit is not None
        if not commit.complete:
            raise self._not_found(commit)
        self._commit(commit.position.minor, out)
        return commit

    def _not_found(self, commit: XaCommit) -> ProtocolError:
        prepared = commit.prepared
        return ProtocolError(
            f"XA transaction {xid_text(commit.xid)} was committed at {self.file}:"
            f"{commit.position.minor}, but its prepared changes are not at {prepared.file}:"
            f"{prepared.start}-{prepared.end} any more (the binary log was replaced?): they "
            "cannot be captured. Run `dblog reset --yes --config <file>`, start the worker, "
            "then `dblog dump --all` to bring the output back in sync")

    def _unreadable(self, event: Any) -> None:
        setting = _UNREADABLE.get(event.packet.event_type)
        if setting is not None:
            raise ConfigError(
                f"the binary log holds an event the worker cannot read at {self.file}:"
                f"{event.packet.log_pos} (type {event.packet.event_type}, written because "
                f"{setting} is on): its changes would be lost. Turn {setting} off (`dblog "
                "preflight` prints how); as the binary log keeps such events, then run `dblog "
                "reset --yes --config <file>`, start the worker, and `dblog dump --all`")

    # -- rows -----------------------------------------------------------------

    def _read(self, table: str) -> bool:
        """Whether rows of ``table`` are read: a captured table, or a cascading parent."""
        return self.selector.captures(table) or table in self.cascades.parents

    def _rows(self, event: Any, out: list[LogItem]) -> None:
        table = f"{event.schema}.{event.table}"
        if self._xa is not None:  # emitted at its XA COMMIT, if that comes
            if not self._xa.captured and self._read(table):
                self._xa = replace(self._xa, captured=True)
            return
        position = Position(file_number(self.file), event.packet.log_pos)
        ts = event.timestamp * 1_000_000
        if not self._read(table):
            if event.schema == WATERMARK_SCHEMA and event.table == WATERMARK_TABLE:
                self._watermarks(event, position.major, position.minor, ts, out)
            return
        self._changes(table, event, position, 0, ts, out)

    def _changes(self, table: str, event: Any, at: Position, first: int, ts: int,
                 out: list[LogItem]) -> int:
        """The rows of a rows event as change events: row ``i`` at (``at``'s file number
        and event position, twice (``first`` + i)), a key change's create at the next one;
        then what they cascaded to. Returns how many rows the event has (none for a table
        that cannot be captured or that the worker cannot read)."""
        captured = self.selector.captures(table)
        view = self._view(table, event, captured)
        if view is None or view.codec is None:
            return 0
        kind = type(event)
        encoded = self._encoded(view, event)
        step = 2 if kind is UpdateRowsEvent else 1
        start = len(out)
        if captured:
            self._emit(table, view, kind, encoded, step, at, first, ts, out)
        if (kind is not WriteRowsEvent and table in self.cascades.parents
                and not event.flags & _NO_FOREIGN_KEY_CHECKS):
            self._cascaded(table, view, encoded, step, at, first, ts, out)
            if any(key.child == table for key in self.cascades.children(table)):
                # a table that references itself: its events and its rows' cascades into
                # it interleave (2 * i, 2 * i + 1); a stable sort keeps each table's order
                out[start:] = sorted(out[start:], key=_position_or_last)
        return len(encoded) // step

    def _cascaded(self, table: str, view: TableView,
                  encoded: Sequence[tuple[str, str] | _CutShort], step: int, at: Position,
                  first: int, ts: int, out: list[LogItem]) -> None:
        """The foreign-key action events of a parent's deleted or updated rows, each at its
        row's position in each captured child's stream; then the tables to prune (a row
        whose image the log cut short says nothing of its values: its children too)."""
        derive, pruned = self.cascades.derive, set[str]()
        for index in range(0, len(encoded), step):
            old_key, before = _whole(view, encoded[index])
            new = encoded[index + 1] if step == 2 else None
            after = None if new is None or isinstance(new, _CutShort) else new[1]
            if before is None or isinstance(new, _CutShort):
                pruned.update(self._children_of(table))
                continue
            actions, reached = derive(table, before, after)
            pruned.update(reached)
            sub = 2 * (first + index // step)
            for child, child_actions in actions.items():
                if child == table:  # a table that references itself: its row took 2 * i
                    if new is not None and new[0] != old_key:
                        pruned.add(child)  # and its key change's create 2 * i + 1
                        continue
                    position = Position(at.major, at.minor, sub + 1)
                else:
                    position = Position(at.major, at.minor, sub)
                matches, values = action_images(child_actions)
                out.append(ChangeEvent(child, Op.FOREIGN_KEY, position, None, values, matches,
                                       Origin.LOG, ts, self._child_version(child)))
        if pruned:
            out.append(Cascaded(frozenset(pruned)))

    def _children_of(self, table: str) -> set[str]:
        """Every captured table a change of ``table``'s rows can reach, by any rule."""
        reached = set(self.cascades.reached().get(table, ()))
        return reached | {k.child for k in self.cascades.children(table)
                          if k.child in self.cascades.captured}

    def _child_version(self, table: str) -> int:
        version = self._versions.get(table)
        return self._version_of(table) if version is None else version

    def _emit(self, table: str, view: TableView, kind: type,
              encoded: Sequence[tuple[str, str] | _CutShort], step: int, at: Position,
              first: int, ts: int, out: list[LogItem]) -> None:
        version = view.schema_version
        major, minor = at.major, at.minor
        origin, create = Origin.LOG, Op.CREATE
        # tuple.__new__ builds the NamedTuples in C: the same values, without a Python frame
        for index in range(0, len(encoded), step):
            position = _new(Position, (major, minor, 2 * (first + index // step)))
            if kind is WriteRowsEvent:
                image = encoded[index]
                if isinstance(image, _CutShort):
                    out.append(IncompleteRow(table, image.key))
                    continue
                key, after = image
                out.append(_new(ChangeEvent, (table, create, position, key, after, None, origin,
                                              ts, version, None)))
            elif kind is DeleteRowsEvent:
                key, before = _whole(view, encoded[index])
                out.append(_new(ChangeEvent, (table, Op.DELETE, position, key, None, before,
                                              origin, ts, version, None)))
            else:
                (old_key, before), new = _whole(view, encoded[index]), encoded[index + 1]
                if isinstance(new, _CutShort):  # the key's row is dumped again
                    if _key_json(view, new) != old_key:
                        out.append(_new(ChangeEvent, (table, Op.DELETE, position, old_key,
                                                      None, before, origin, ts, version, None)))
                    out.append(IncompleteRow(table, new.key))
                    continue
                new_key, after = new
                if old_key == new_key:
                    out.append(_new(ChangeEvent, (table, Op.UPDATE, position, new_key, after,
                                                  before, origin, ts, version, None)))
                else:  # a key change: the old key is gone, the new one is created
                    out.append(_new(ChangeEvent, (table, Op.DELETE, position, old_key, None,
                                                  before, origin, ts, version, None)))
                    out.append(_new(ChangeEvent, (
                        table, create, _new(Position, (major, minor, position.sub + 1)),
                        new_key, after, None, origin, ts, version, None)))

    @staticmethod
    def _encoded(view: TableView, event: Any) -> Sequence[tuple[str, str] | _CutShort]:
        """Each row image's ``(key, row)`` JSON, an update's before and after images one
        after the other: decoded and encoded from the event's bytes where the table's
        reader can (``rowtext.py``), else from mysql-replication's rows (an image with a
        value the library could not decode is :class:`_CutShort`)."""
        images = view.images
        if images is not None:
            encoded = images.key_rows(event)
            if encoded is not None:
                return encoded
        codec = view.codec
        assert codec is not None
        rows = images.rows(event) if images is not None else None
        if rows is None:
            rows = event.rows
        names = (("before_values", "before_none_sources"), ("after_values",
                                                            "after_none_sources")) \
            if type(event) is UpdateRowsEvent else (("values", "none_sources"),)
        result: list[tuple[str, str] | _CutShort] = []
        for row in rows:
            for values_name, sources_name in names:
                values, sources = row[values_name], row.get(sources_name)
                if sources and not _LOST.isdisjoint(sources.values()):
                    result.append(_cut_short(view.table, codec, values, sources))
                else:
                    result.append(codec.key_row_from_binlog(values, sources))
        return result

    def _view(self, table: str, event: Any, captured: bool = True) -> TableView | None:
        # a parent's view has only the columns its children reference: never a captured one
        signature = (table, captured, hash(tuple(
            (c.name, c.type, *(getattr(c, name, None) for name in _LAYOUT))
            for c in event.columns)))
        if signature in self._views:
            view = self._views[signature]
        else:
            describe = self._describe if captured else self._describe_parent
            view = self._views[signature] = describe(table, event)
        if not captured:
            return view
        if view is None:
            self._uncaptured.add(table)
        else:
            self._uncaptured.discard(table)
            self._versions[table] = view.schema_version
        return view

    def _watermarks(self, event: Any, major: int, minor: int, ts: int,
                    out: list[LogItem]) -> None:
        if type(event) is DeleteRowsEvent:
            return
        for index, row in enumerate(event.rows):
            values = row["values"] if type(event) is WriteRowsEvent else row["after_values"]
            if values.get("source") == self.source:
                out.append(Watermark(str(values.get("value")),
                                     Position(major, minor, 2 * index), ts))
