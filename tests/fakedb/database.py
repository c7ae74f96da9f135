"""An in-memory database: tables with key columns, transactions that commit into an ordered
log, snapshots that see the commits up to a point (MVCC), and DDL.

Every commit takes the next sequence number (its place in the log) and is visible to new
snapshots at once, unless the test holds it back (:meth:`FakeDatabase.hold_visibility`):
then it is in the log before a snapshot sees it, as a PostgreSQL commit is between its
WAL record and the ProcArray, or a MariaDB XA / group commit between the binlog and the
engine. Thread-safe: one lock guards everything, one condition wakes the log's readers.

Values are ints or texts (or None); a key is a tuple of its columns' values.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Literal

Value = int | str | None
Row = dict[str, Value]
Key = tuple[Value, ...]
ColumnType = Literal["int", "text"]


class DatabaseError(Exception):
    """What the fake refuses: a table or column that does not exist, a duplicate key."""


@dataclass(frozen=True, slots=True)
class Column:
    name: str
    type: ColumnType


@dataclass(frozen=True, slots=True)
class Change:
    """One logged row change: ``op`` c, u, d or t (a truncate: no key, no images); the
    table's columns when it was logged (a reader's schema version)."""

    table: str
    op: str
    key: Key | None
    before: Row | None
    after: Row | None
    columns: tuple[Column, ...]
    key_columns: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Commit:
    seq: int  # its place in the log, from 1
    ts_us: int
    changes: tuple[Change, ...]  # empty for DDL


@dataclass(frozen=True, slots=True)
class Snapshot:
    """What a reader sees: the commits before ``xmax`` but those in ``invisible``."""

    xmax: int
    invisible: frozenset[int]

    def sees(self, seq: int) -> bool:
        return seq < self.xmax and seq not in self.invisible


@dataclass
class Table:
    name: str
    columns: list[Column]
    key: tuple[str, ...]
    # each key's versions, oldest first: (commit seq, the row, None once deleted)
    versions: dict[Key, list[tuple[int, Row | None]]] = field(default_factory=dict)

    def latest(self, key: Key) -> Row | None:
        history = self.versions.get(key)
        return history[-1][1] if history else None

    def at(self, key: Key, snapshot: Snapshot) -> Row | None:
        for seq, row in reversed(self.versions.get(key, ())):
            if snapshot.sees(seq):
                return row
        return None

    def shaped(self, row: Row) -> Row:
        """A stored row as the table's columns are now (a column added since: None)."""
        return {c.name: row.get(c.name) for c in self.columns}


class FakeDatabase:
    """``stamp`` names a column that every write sets to its commit's sequence number (where
    the table has it), as a trigger would: a key's values there only grow, in log order."""

    def __init__(self, stamp: str | None = None) -> None:
        self.stamp = stamp
        self.lock = threading.RLock()
        self.logged = threading.Condition(self.lock)
        self.tables: dict[str, Table] = {}
        self.log: list[Commit] = []
        self.invisible: set[int] = set()  # logged, not yet seen by new snapshots
        self.slots: dict[str, int] = {}  # a capture's confirmed position: the next seq
        self.available = True  # False: every reader's call fails as a lost connection does
        self.on_commit: Callable[[Commit], None] | None = None  # a test's hook, in the lock
        # a test's hook after a chunk's SELECT (the table, the keys it read), before the
        # reader goes on: writes there are the paper's race, between SELECT and HW
        self.on_read: Callable[[str, list[Key]], None] | None = None
        self._hold = False

    # -- DDL (each a commit of its own, with no row change) ----------------------------

    def create_table(self, name: str, columns: Sequence[tuple[str, ColumnType]],
                     key: Sequence[str]) -> None:
        with self.lock:
            if name in self.tables:
                raise DatabaseError(f"table {name} exists")
            cols = [Column(n, t) for n, t in columns]
            if not set(key) <= {c.name for c in cols}:
                raise DatabaseError(f"key {key} is not among the columns of {name}")
            self.tables[name] = Table(name, cols, tuple(key))
            self._append(())

    def drop_table(self, name: str) -> None:
        with self.lock:
            self.table(name)
            del self.tables[name]
            self._append(())

    def add_column(self, table: str, name: str, type_: ColumnType) -> None:
        with self.lock:
            found = self.table(table)
            if any(c.name == name for c in found.columns):
                raise DatabaseError(f"column {name} of {table} exists")
            found.columns.append(Column(name, type_))
            self._append(())

    def drop_column(self, table: str, name: str) -> None:
        with self.lock:
            found = self.table(table)
            if name in found.key:
                raise DatabaseError(f"column {name} is in the key of {table}")
            found.columns = [c for c in found.columns if c.name != name]
            self._append(())

    def table(self, name: str) -> Table:
        found = self.tables.get(name)
        if found is None:
            raise DatabaseError(f"table {name} does not exist")
        return found

    # -- transactions --------------------------------------------------------------------

    @contextmanager
    def transaction(self) -> Iterator[Transaction]:
        """Writes applied together at the end of the block, as one commit (none if the
        block raises); its sequence number is then ``transaction.seq``."""
        tx = Transaction(self)
        yield tx
        tx.commit()

    def write(self, table: str, row: Row) -> None:
        """Insert ``row``, or replace the row of its key: one transaction."""
        with self.transaction() as tx:
            tx.upsert(table, row)

    # -- visibility ------------------------------------------------------------------------

    @contextmanager
    def hold_visibility(self) -> Iterator[None]:
        """Commits inside are logged but unseen by new snapshots until :meth:`publish`."""
        with self.lock:
            self._hold = True
        try:
            yield
        finally:
            with self.lock:
                self._hold = False

    def publish(self, seq: int | None = None) -> None:
        """Make commit ``seq`` (every held one if None) visible to new snapshots."""
        with self.lock:
            if seq is None:
                self.invisible.clear()
            else:
                self.invisible.discard(seq)

    def snapshot(self) -> Snapshot:
        with self.lock:
            return Snapshot(len(self.log) + 1, frozenset(self.invisible))

    # -- reads ----------------------------------------------------------------------------

    def rows(self, table: str, snapshot: Snapshot | None = None) -> dict[Key, Row]:
        """The table's rows a snapshot (a new one if None) sees, by key, in key order."""
        with self.lock:
            seen = snapshot or self.snapshot()
            found = self.table(table)
            rows = {}
            for key in sorted(found.versions, key=sort_key):
                row = found.at(key, seen)
                if row is not None:
                    rows[key] = found.shaped(row)
            return rows

    def next_seq(self) -> int:
        with self.lock:
            return len(self.log) + 1

    def commits_from(self, seq: int, timeout: float) -> list[Commit]:
        """The commits from ``seq`` on; waits up to ``timeout`` for one if there is none."""
        with self.logged:
            if len(self.log) < seq:
                self.logged.wait(timeout)
            return self.log[seq - 1:]

    def _append(self, changes: tuple[Change, ...]) -> int:
        seq = len(self.log) + 1
        self.log.append(Commit(seq, time.time_ns() // 1000, changes))
        if self._hold:
            self.invisible.add(seq)
        self.logged.notify_all()
        if self.on_commit is not None:
            self.on_commit(self.log[-1])
        return seq


def sort_key(key: Key) -> tuple[tuple[int, int | str], ...]:
    """Keys in the database's order: NULLs first, then values (ints or texts)."""
    return tuple((0, 0) if v is None else (1, v) for v in key)


class Transaction:
    """Writes of one transaction: applied, in order, against the latest committed rows."""

    def __init__(self, db: FakeDatabase) -> None:
        self.db = db
        self.ops: list[tuple[str, str, Key | None, Row | None]] = []
        self.seq: int | None = None

    def upsert(self, table: str, row: Row) -> None:
        self.ops.append(("upsert", table, None, dict(row)))

    def update(self, table: str, key: Key, values: Mapping[str, Value]) -> None:
        """Change ``values`` of the row of ``key`` (its key too): nothing if there is none."""
        self.ops.append(("update", table, tuple(key), dict(values)))

    def delete(self, table: str, key: Key) -> None:
        self.ops.append(("delete", table, tuple(key), None))

    def truncate(self, table: str) -> None:
        self.ops.append(("truncate", table, None, None))

    def commit(self) -> int:
        db = self.db
        with db.lock:
            seq = len(db.log) + 1
            for _, name, _, values in self.ops:  # all or nothing: check before any write
                columns = {c.name for c in db.table(name).columns}
                unknown = set(values or ()) - columns
                if unknown:
                    raise DatabaseError(f"{name} has no column {sorted(unknown)}")
            changes: list[Change] = []
            for op, name, key, values in self.ops:
                table = db.table(name)
                if values is not None and db.stamp in {c.name for c in table.columns}:
                    values = {**values, db.stamp: seq}
                changes += _apply(table, seq, op, key, values)
            self.seq = db._append(tuple(changes))
            return self.seq


def _apply(table: Table, seq: int, op: str, key: Key | None, values: Row | None
           ) -> list[Change]:
    columns, key_columns = tuple(table.columns), table.key

    def change(op: str, key: Key | None, before: Row | None, after: Row | None) -> Change:
        return Change(table.name, op, key,
                      None if before is None else table.shaped(before),
                      None if after is None else table.shaped(after), columns, key_columns)

    def put(key: Key, row: Row | None) -> None:
        table.versions.setdefault(key, []).append((seq, row))

    if op == "truncate":
        for existing in list(table.versions):
            if table.latest(existing) is not None:
                put(existing, None)
        return [change("t", None, None, None)]
    if op == "upsert":
        assert values is not None
        new_key = tuple(values.get(k) for k in key_columns)
        before = table.latest(new_key)
        after = table.shaped({**(before or {}), **values})
        put(new_key, after)
        return [change("u" if before else "c", new_key, before, after)]
    assert key is not None
    before = table.latest(key)
    if before is None:
        return []  # no such row: the statement changes nothing
    if op == "delete":
        put(key, None)
        return [change("d", key, before, None)]
    assert values is not None
    after = table.shaped({**before, **values})
    new_key = tuple(after[k] for k in key_columns)
    if new_key == key:
        put(key, after)
        return [change("u", key, before, after)]
    if table.latest(new_key) is not None:
        return []  # the new key is taken: a unique violation, the statement is skipped
    put(key, None)
    put(new_key, after)
    return [change("d", key, before, None), change("c", new_key, None, after)]
