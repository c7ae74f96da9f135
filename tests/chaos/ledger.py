"""The ledger: every write the chaos workload committed, checked against the output.

:class:`LedgerWorkload` is a seeded random workload like the scenario suite's
:class:`~tests.integration.harness.Workload`, but it knows each write it made: the
table, key, version and op of every statement whose rowcount was 1, kept once the
transaction committed. It takes each version from the sequence first (``SELECT
nextval``) and writes it as a literal, and reads a row's version (``FOR UPDATE``)
before it deletes the row or moves it to another key, so the landed event of every
write can be named: the ``after`` image of a create or update carries the version
written, the ``before`` image of a delete the version deleted.

It reconnects when the source goes away. A transaction whose COMMIT may or may not
have happened (the connection broke on the way) is *uncertain*: not counted either way.

:func:`tally` compares the ledger with the landing zone: **lost** are recorded writes
with no log event; **duplicated** are log events whose position landed twice (never
allowed) and dump rows landed twice for the same (dump id, key) (reported).
:func:`writer_tokens` reads the ``dblog.writer`` token of every segment.
"""

from __future__ import annotations

import contextlib
import json
import random
import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any, Protocol

import psycopg
import pyarrow.parquet as pq
import pymysql

from dblog_worker.landing.parquet_files import FileSegment
from dblog_worker.landing.sink import open_reader
from tests.integration.harness import (
    SOURCE,
    Backend,
    Database,
    MySession,
    PgSession,
    Session,
    assert_converged,
    events_of,
)

# The errors after which the workload connects again: the source went away.
CONNECTION_ERRORS: tuple[type[BaseException], ...] = (
    psycopg.OperationalError,
    psycopg.InterfaceError,
    pymysql.err.OperationalError,
    pymysql.err.InterfaceError,
)


@dataclass(frozen=True)
class Write:
    """One committed row change, as the output names it: ``key`` is the output's key
    text (``[id]``), ``op`` is ``c``, ``u`` or ``d``; ``version`` is the version column
    of the row image that event carries (``after``, or ``before`` for a delete)."""

    table: str
    key: str
    version: int
    op: str


def key_text(key: int) -> str:
    return json.dumps([key])


def fetch_one(session: Session, statement: str, params: Sequence[Any] = ()
              ) -> tuple[Any, ...] | None:
    """The first row of a query on one of the harness's sessions."""
    if isinstance(session, PgSession):
        row: tuple[Any, ...] | None = session.conn.execute(statement.encode(),
                                                           params).fetchone()
        return row
    assert isinstance(session, MySession)
    with session.conn.cursor() as cursor:
        cursor.execute(statement, tuple(params) or None)
        found: tuple[Any, ...] | None = cursor.fetchone()
        return found


def backend_id(session: Session) -> int:
    """The server's id of the session's connection (to spare it when killing others')."""
    query = ("SELECT pg_backend_pid()" if isinstance(session, PgSession)
             else "SELECT CONNECTION_ID()")
    row = fetch_one(session, query)
    assert row is not None
    return int(row[0])


class LedgerWorkload(threading.Thread):
    """Seeded random transactions of 1 to 3 writes; records the committed ones."""

    def __init__(self, database: Database, tables: Sequence[str], seed: int, *,
                 key_space: int = 3000, pause_s: float = 0.003) -> None:
        super().__init__(daemon=True, name=f"ledger-workload-{seed}")
        self.database = database
        self.tables = list(tables)
        self.random = random.Random(seed)
        self.key_space = key_space
        self.pause_s = pause_s
        self.stop_event = threading.Event()
        self.lock = threading.Lock()
        self.committed: list[Write] = []
        self.uncertain: list[Write] = []
        self.transactions = 0
        self.reconnects = 0
        self.connection_errors: list[str] = []
        self.connection_ids: set[int] = set()  # every connection it used (server ids)
        self.error: BaseException | None = None

    # -- the thread ------------------------------------------------------------------

    def run(self) -> None:
        session: Session | None = None
        try:
            while not self.stop_event.is_set():
                if session is None:
                    session = self._connect()
                    if session is None:
                        continue
                pending: list[Write] = []
                try:
                    self._transaction(session, pending)
                except CONNECTION_ERRORS as exc:
                    # rolled back, or committed without our hearing of it
                    with self.lock:
                        self.uncertain.extend(pending)
                    self.connection_errors.append(repr(exc))
                    self._close(session)
                    session = None
                    continue
                with self.lock:
                    self.committed.extend(pending)
                self.transactions += 1
                time.sleep(self.pause_s)
        except BaseException as exc:  # reported by stop()
            self.error = exc
        finally:
            if session is not None:
                self._close(session)

    def _connect(self) -> Session | None:
        try:
            session = self.database.connect()
            identity = backend_id(session)
        except CONNECTION_ERRORS as exc:
            self.connection_errors.append(repr(exc))
            self.stop_event.wait(0.2)
            return None
        with self.lock:
            self.connection_ids.add(identity)
        if self.transactions or self.connection_errors:
            self.reconnects += 1
        return session

    @staticmethod
    def _close(session: Session) -> None:
        with contextlib.suppress(Exception):  # a broken connection may fail to close
            session.close()

    def _transaction(self, session: Session, pending: list[Write]) -> None:
        rnd, db = self.random, self.database
        with session.transaction():
            for _ in range(rnd.choice([1, 1, 2, 3])):
                table = rnd.choice(self.tables)
                key = rnd.randrange(1, self.key_space)
                action = rnd.random()
                if action < 0.3:
                    version = self._next_version(session)
                    if session.execute(db.insert_ignore(table, "(%s, %s, 'ledger')"),
                                       (key, version)) == 1:
                        pending.append(Write(table, key_text(key), version, "c"))
                elif action < 0.75:
                    version = self._next_version(session)
                    if session.execute(f"UPDATE {table} SET version = %s, "
                                       f"payload = {db.random_text} WHERE id = %s",
                                       (version, key)) == 1:
                        pending.append(Write(table, key_text(key), version, "u"))
                elif action < 0.9:
                    old = self._lock_row(session, table, key)
                    if old is not None and session.execute(
                            f"DELETE FROM {table} WHERE id = %s", (key,)) == 1:
                        pending.append(Write(table, key_text(key), old, "d"))
                else:
                    target = rnd.randrange(1, self.key_space)
                    old = self._lock_row(session, table, key)
                    if old is None or target == key:
                        continue
                    version = self._next_version(session)
                    moved = session.execute(
                        f"UPDATE {table} SET id = %s, version = %s WHERE id = %s AND NOT "
                        f"EXISTS (SELECT 1 FROM {table} AS other WHERE other.id = %s)",
                        (target, version, key, target))
                    if moved == 1:
                        pending.append(Write(table, key_text(key), old, "d"))
                        pending.append(Write(table, key_text(target), version, "c"))

    def _next_version(self, session: Session) -> int:
        row = fetch_one(session, f"SELECT {self.database.next_version}")
        assert row is not None
        return int(row[0])

    @staticmethod
    def _lock_row(session: Session, table: str, key: int) -> int | None:
        row = fetch_one(session, f"SELECT version FROM {table} WHERE id = %s FOR UPDATE",
                        (key,))
        return None if row is None else int(row[0])

    # -- control ---------------------------------------------------------------------

    def spared(self) -> set[int]:
        """The server ids of the workload's connections (not to be killed)."""
        with self.lock:
            return set(self.connection_ids)

    def stop(self) -> None:
        self.stop_event.set()
        self.join(60)
        assert not self.is_alive(), "the ledger workload did not stop"
        if self.error is not None:
            raise AssertionError(f"ledger workload failed: {self.error!r}") from self.error


# -- the ledger against the output ------------------------------------------------------


@dataclass
class Tally:
    """What the chaos did to the output."""

    recorded: int = 0  # writes committed, with certainty
    uncertain: int = 0  # writes whose commit the workload could not hear
    log_events: int = 0
    dump_rows: int = 0
    lost: list[Write] = field(default_factory=list)
    duplicated_log: int = 0  # log events whose position landed more than once
    duplicated_dump: int = 0  # dump rows landed again for the same (dump id, key)
    duplicated_examples: list[str] = field(default_factory=list)

    def summary(self) -> dict[str, object]:
        return {
            "recorded": self.recorded, "uncertain": self.uncertain,
            "log_events": self.log_events, "dump_rows": self.dump_rows,
            "lost": len(self.lost), "duplicated_log": self.duplicated_log,
            "duplicated_dump": self.duplicated_dump,
        }


def _version(image: object) -> int | None:
    if not image:
        return None
    version = json.loads(str(image)).get("version")
    return None if version is None else int(version)


def tally(backend: Backend, workload: LedgerWorkload, tables: Sequence[str]) -> Tally:
    """Compare the workload's ledger with the events landed for ``tables``."""
    result = Tally(recorded=len(workload.committed), uncertain=len(workload.uncertain))
    landed: set[Write] = set()
    for table in tables:
        events = events_of(backend, table)
        log_positions: Counter[str] = Counter()
        dumped: Counter[tuple[str, str]] = Counter()
        for event in events:
            op, key = str(event["op"]), str(event["key"])
            if event["origin"] == "dump":
                dumped[(str(event["dump_id"]), key)] += 1
                result.dump_rows += 1
                continue
            result.log_events += 1
            log_positions[str(event["position"])] += 1
            version = _version(event["before"] if op == "d" else event["after"])
            if version is not None:
                landed.add(Write(table, key, version, op))
        for position, count in log_positions.items():
            if count > 1:
                result.duplicated_log += count - 1
                result.duplicated_examples.append(f"{table} log {position} x{count}")
        for (dump_id, key), count in dumped.items():
            if count > 1:
                result.duplicated_dump += count - 1
                if len(result.duplicated_examples) < 20:
                    result.duplicated_examples.append(f"{table} dump {dump_id} {key} x{count}")
    result.lost = [w for w in workload.committed if w.table in tables and w not in landed]
    return result


# -- who wrote the segments ---------------------------------------------------------------


def writer_tokens(backend: Backend, table: str) -> list[tuple[int, int, float]]:
    """(sequence number, ``dblog.writer`` token, commit time) of each segment of ``table``
    in sequence order; the commit time is the file's ctime (set by the rename), or in a
    bucket the object's LastModified (whole seconds: :func:`time_resolution`)."""
    found = []
    zone = open_reader(backend.landing_root, SOURCE)
    for segment in zone.segments(table):
        if isinstance(segment, FileSegment):
            metadata = pq.read_schema(segment.path).metadata or {}
            landed = segment.path.stat().st_ctime
        else:
            metadata = zone.read(segment).schema.metadata or {}
            landed = zone.landed_at(segment)
        token = metadata.get(b"dblog.writer")
        assert token is not None, f"{segment.location} has no dblog.writer metadata"
        found.append((segment.seq, int(token), landed))
    return found


def time_resolution(backend: Backend) -> float:
    """How coarse :func:`writer_tokens`' times are: a bucket's are whole seconds."""
    return 1.0 if backend.s3 is not None else 0.0


def assert_writers_in_order(backend: Backend, *tables: str) -> set[int]:
    """Within each table the writer tokens, in sequence order, never decrease; returns
    every token seen."""
    seen: set[int] = set()
    for table in tables:
        segments = writer_tokens(backend, table)
        for (seq_a, token_a, _), (seq_b, token_b, _) in pairwise(segments):
            assert token_b >= token_a, (
                f"{table}: segment {seq_b} written by token {token_b} after segment {seq_a} "
                f"of token {token_a}: two writers interleaved"
            )
        seen.update(token for _, token, _ in segments)
    return seen


# -- the end of every scenario --------------------------------------------------------------


class Reporter(Protocol):
    def add(self, name: str, value: object) -> None: ...


def finish(backend: Backend, workload: LedgerWorkload, tables: Sequence[str],
           report: Reporter) -> Tally:
    """Stop the workload; the scenario suite's checks (convergence, no time travel); the
    ledger: nothing lost, no log event twice (dump rows twice are reported); the writer
    tokens of each table's segments never decrease."""
    workload.stop()
    report.add("transactions", workload.transactions)
    report.add("workload_reconnects", workload.reconnects)
    assert workload.transactions > 10, "the workload hardly ran"
    assert_converged(backend, *tables)
    result = tally(backend, workload, tables)
    for name, value in result.summary().items():
        report.add(name, value)
    tokens = assert_writers_in_order(backend, *tables)
    report.add("writer_tokens", sorted(tokens))
    assert result.duplicated_log == 0, result.duplicated_examples[:10]
    assert not result.lost, (f"{len(result.lost)} of {result.recorded} committed writes "
                             f"never landed, e.g. {result.lost[:10]}")
    return result
