"""What the scenario tests share: a worker process, the CLI, the output replayed, a workload."""

from __future__ import annotations

import contextlib
import io
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

import psycopg
import pymysql
import pymysql.cursors
import pytest
import redis

from dblog_worker.cli import main as cli_main
from dblog_worker.control.store import StateStore
from dblog_worker.errors import RequestRejected
from dblog_worker.foreign_keys import (
    NULL,
    Action,
    apply_actions,
    parse_actions,
    parse_prune,
    row_fragments,
)
from dblog_worker.landing.s3_objects import S3Location
from dblog_worker.landing.sink import LandedReader, LandingRoot, Segment, open_reader
from dblog_worker.mysql.catalog import ident as my_ident
from dblog_worker.mysql.checkpoint import BinlogCheckpoint, file_number
from dblog_worker.pg.pgoutput import parse_lsn
from dblog_worker.pg.queries import ident as pg_ident
from tests import forkserver
from tests.services import MariaDBServer

ROOT = Path(__file__).resolve().parents[2]


def write_config(
    directory: Path,
    dsn: str,
    redis_url: str,
    tables: Sequence[str],
    *,
    name: str = "src",
    flush_interval_s: float = 0.2,
    heartbeat_interval_s: float = 1.0,
    extra: str = "",
    kind: str = "postgresql",
    http: str = 'listen = "127.0.0.1:0"',
    source_extra: str = "",
    worker_extra: str = "",
    landing: str = "",
) -> Path:
    """A worker configuration; ``http`` is the body of its [http] section (by default any
    free port, so that workers of parallel tests do not collide); ``source_extra`` lines
    of [source] (``watermarks = "position"``), ``worker_extra`` of [worker]
    (``max_active_dumps = 1``); ``landing`` the [landing] path and its lines (default:
    ``directory/landing``)."""
    path = directory / f"{name}.toml"
    landing = landing or f'path = "{directory / "landing"}"'
    path.write_text(
        f"""
[source]
name = "{name}"
kind = "{kind}"
dsn = {json.dumps(dsn)}
tables = {toml_list(tables)}
{source_extra}

[redis]
url = "{redis_url}"

[landing]
{landing}
flush_interval_s = {flush_interval_s}

[worker]
heartbeat_interval_s = {heartbeat_interval_s}
control_interval_s = 0.05
reconnect_max_s = 1.0
{worker_extra}

[http]
{http}
{extra}
"""
    )
    return path


def toml_string(text: str) -> str:
    """``text`` as a TOML basic string (JSON's escapes are TOML's, but for characters
    outside the BMP, which JSON escapes as surrogate pairs: kept as they are here)."""
    assert "\x7f" not in text, "DEL must be escaped in TOML and JSON does not"
    return json.dumps(text, ensure_ascii=False)


def toml_list(texts: Sequence[str]) -> str:
    return "[" + ", ".join(toml_string(t) for t in texts) + "]"


# The commands that read the configuration and Redis and print: run in this process (main()
# itself, its output captured), as a test calls them hundreds of times and each interpreter
# start costs a second of CPU on the loaded 2-core machine. The others (run, preflight, merge,
# verify, landing, reset, wait: drivers, Spark, signals, timeouts) and every call with
# ``process=True`` run as a process of their own, forked from the test process's fork server
# (tests/forkserver.py; ``DBLOG_TESTS_FORK=0``: ``python -m dblog_worker`` as a user starts it).
IN_PROCESS = frozenset({"dump", "list", "show", "set", "status"})


def cli(config: Path, *args: str, check: bool = True, timeout: float = 60,
        process: bool = False) -> subprocess.CompletedProcess[str]:
    argv = [*args, "--config", str(config)]
    if args and args[0] in IN_PROCESS and not process:
        result = _in_process(argv)
    elif forkserver.enabled():
        result = forkserver.run(argv, timeout)
    else:
        result = subprocess.run([sys.executable, "-m", "dblog_worker", *argv],
                                capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    if check and result.returncode != 0:
        raise AssertionError(
            f"dblog {' '.join(args)} exited {result.returncode}\n{result.stdout}\n{result.stderr}"
        )
    return result


_REDIRECTED = threading.Lock()  # sys.stdout and sys.stderr are the process's: one at a time


def _in_process(argv: list[str]) -> subprocess.CompletedProcess[str]:
    out, err = io.StringIO(), io.StringIO()
    with _REDIRECTED, contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli_main(argv)
        except SystemExit as exc:  # argparse's usage errors (2), --help (0)
            code = exc.code if isinstance(exc.code, int) else 1
    return subprocess.CompletedProcess(["dblog", *argv], code, out.getvalue(), err.getvalue())


class WorkerProcess:
    """``dblog run`` as a process of its own (forked from the fork server, see ``cli``),
    killed at the end of the test."""

    def __init__(self, config: Path, log_path: Path, *args: str) -> None:
        self.config = config
        self.log_path = log_path
        self.args = args
        self.proc: subprocess.Popen[bytes] | forkserver.Forked | None = None

    def start(self) -> WorkerProcess:
        argv = ["run", "--config", str(self.config), "--log-level", "DEBUG", *self.args]
        if forkserver.enabled():
            self.proc = forkserver.spawn(argv, self.log_path)
            return self
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "dblog_worker", *argv],
                                         stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
        return self

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self, timeout: float = 20) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


def redis_request(redis_url: str, source: str, request_id: str) -> dict[str, str]:
    with redis.Redis.from_url(redis_url, decode_responses=True) as client:
        fields: dict[str, str] = client.hgetall(f"dblog:v1:{source}:request:{request_id}")
        return fields


def wait_for(predicate: Callable[[], bool], timeout: float, what: str,
             on_timeout: Callable[[], str] = lambda: "") -> None:
    deadline = time.monotonic() + timeout
    while (began := time.monotonic()) < deadline:
        if predicate():
            return
        # a predicate that reads the landing zone may take a while: poll so that it uses at
        # most a third of this process's time, whatever the machine's load
        time.sleep(max(0.05, 2 * (time.monotonic() - began)))
    raise AssertionError(f"timed out after {timeout} s waiting for {what}\n{on_timeout()}")


def wait_request(redis_url: str, source: str, request_id: str, states: Sequence[str],
                 timeout: float = 60, worker: WorkerProcess | None = None) -> dict[str, str]:
    # one client for the whole wait: a client made at each poll read the redis package's
    # metadata again (its version, for CLIENT SETINFO): 4 % of the pytest workers' CPU in the
    # scenario tests
    with redis.Redis.from_url(redis_url, decode_responses=True) as client:
        def fields() -> dict[str, str]:
            found: dict[str, str] = client.hgetall(f"dblog:v1:{source}:request:{request_id}")
            return found

        wait_for(lambda: fields().get("state") in states,
                 timeout, f"{request_id} to become {'/'.join(states)}",
                 lambda: (worker.log()[-5000:] if worker else "") + str(fields()))
        return fields()


# -- the output, replayed -----------------------------------------------------------


class _Images:
    """A replay's rows as their JSON (as landed, or as an ``f`` event left them), indexed by
    the columns ``f`` events match on: an event visits the rows it matches, not all."""

    def __init__(self) -> None:
        self.text: dict[str, str] = {}
        self._fragments: dict[str, dict[str, str]] = {}
        self._index: dict[tuple[str, ...], dict[tuple[str | None, ...], set[str]]] = {}

    def put(self, key: str, text: str) -> None:
        self.drop(key)
        fragments = row_fragments(text)
        self.text[key], self._fragments[key] = text, fragments
        for columns, by_values in self._index.items():
            by_values.setdefault(tuple(fragments.get(c) for c in columns), set()).add(key)

    def drop(self, key: str) -> None:
        fragments = self._fragments.pop(key, None)
        if fragments is None:
            return
        del self.text[key]
        for columns, by_values in self._index.items():
            by_values[tuple(fragments.get(c) for c in columns)].discard(key)

    def clear(self) -> None:
        self.text.clear()
        self._fragments.clear()
        self._index.clear()

    def matching(self, actions: Sequence[Action]) -> set[str]:
        """The keys of the rows one of ``actions`` matches (a NULL matches no row)."""
        keys: set[str] = set()
        for action in actions:
            values = tuple(v for _, v in action.match)
            if NULL not in values:
                keys |= self._by(action.columns).get(values, set())
        return keys

    def _by(self, columns: tuple[str, ...]) -> dict[tuple[str | None, ...], set[str]]:
        by_values = self._index.get(columns)
        if by_values is None:
            by_values = self._index[columns] = {}
            for key, fragments in self._fragments.items():
                by_values.setdefault(tuple(fragments.get(c) for c in columns), set()).add(key)
        return by_values


@dataclass
class Replay:
    """The output of one table applied in position order, and what was seen on the way."""

    rows: dict[str, dict[str, Any]] = field(default_factory=dict)
    events: list[dict[str, Any]] = field(default_factory=list)
    time_travel: list[str] = field(default_factory=list)


# Decoded segments, by what names their content (where, its size, the sequence numbers it
# covers): a landed segment never changes (a compaction writes another); the checks read a
# table's whole output several times in a test (decoding it again each time was a tenth of
# the load tests' CPU). The oldest go first past _DECODED_ROWS rows.
_DECODED: OrderedDict[tuple[object, ...], list[dict[str, Any]]] = OrderedDict()
_DECODED_ROWS = 500_000
_decoded_rows = 0


def _segment_key(segment: Segment) -> tuple[object, ...]:
    # not its positions: an object store's segment reads them from its footer (2 GETs)
    return (segment.location, segment.size, segment.lo, segment.seq)


def _decoded(zone: LandedReader, segment: Segment) -> list[dict[str, Any]]:
    """The rows of ``segment``, decoded once in the process (shared: do not change them)."""
    global _decoded_rows
    key = _segment_key(segment)
    decoded = _DECODED.get(key)
    if decoded is None:
        decoded = _DECODED[key] = zone.read(segment).to_pylist()
        _decoded_rows += len(decoded)
        while _decoded_rows > _DECODED_ROWS and len(_DECODED) > 1:
            _decoded_rows -= len(_DECODED.popitem(last=False)[1])
    return decoded


def landed_events(zone: LandedReader, table: str) -> list[dict[str, Any]]:
    """``read_events``: every row of every landed segment of ``table`` in order, as dicts
    (copies: a caller may change them), each segment decoded once in the process."""
    return [dict(row) for segment in zone.segments(table) for row in _decoded(zone, segment)]


class _Replaying:
    """A replay under way: what the segments applied so far left, ready for the next ones."""

    def __init__(self, version_column: str) -> None:
        self.version_column = version_column
        self.segments: list[tuple[object, ...]] = []  # the keys of the segments applied
        self.result = Replay()
        self.last_position = ""
        self.seen: dict[str, tuple[int, bool]] = {}  # key -> (version, deleted)
        self.images = _Images()  # key -> its row's JSON, as landed or as an f event left it
        self.written: dict[str, str] = {}  # key -> the position of its row's last write

    def apply(self, event: dict[str, Any]) -> None:
        result, images, written, seen = self.result, self.images, self.written, self.seen
        position = str(event["position"])
        assert position >= self.last_position, "output out of order"
        self.last_position = position
        result.events.append(event)
        op, key = event["op"], event["key"]
        if op == "t":
            result.rows.clear()
            seen.clear()
            images.clear()
            written.clear()
            return
        if op == "f":
            actions = parse_actions(str(event["before"]), str(event["after"]))
            for row_key in images.matching(actions):
                image = images.text[row_key]
                changed = apply_actions(image, [actions])
                if changed is None:
                    images.drop(row_key)
                    del result.rows[row_key], written[row_key]
                elif changed is not image:
                    result.rows[row_key] = json.loads(changed)
                    images.put(row_key, changed)
                    written[row_key] = position
            return
        if op == "p":
            older = parse_prune(str(event["before"]))
            for row_key in [k for k, at in written.items() if at < older]:
                images.drop(row_key)
                del result.rows[row_key], written[row_key]
            return
        assert isinstance(key, str)
        if op == "d":
            result.rows.pop(key, None)
            images.drop(key)
            written.pop(key, None)
            before = json.loads(str(event["before"])) if event["before"] else None
            if before is not None and self.version_column in before:
                seen[key] = (int(before[self.version_column]), True)
            return
        after = json.loads(str(event["after"]))
        version = after.get(self.version_column)
        if version is not None and key in seen:
            previous, deleted = seen[key]
            if version < previous or (deleted and version == previous):
                result.time_travel.append(
                    f"{key}: {op} version {version} at {position} after "
                    f"{'delete of ' if deleted else ''}version {previous}"
                )
        if version is not None:
            seen[key] = (int(version), False)
        result.rows[key] = after
        images.put(key, str(event["after"]))
        written[key] = position


# Replays under way, by table: the convergence checks replay a table's whole output at each
# poll, and a landed segment never changes (a compaction or retention changes the list:
# the replay starts over). The most recent _REPLAYS_KEPT are kept.
_REPLAYS: OrderedDict[tuple[object, ...], _Replaying] = OrderedDict()
_REPLAYS_KEPT = 8


def replay(landing: LandingRoot, source: str, table: str, version_column: str = "version"
           ) -> Replay:
    """Apply the landed events in order; check that no key's version ever goes back.

    A foreign-key action event (``f``) applies to every row it matches, a prune event
    (``p``) removes every row last written before the position it names
    (``dblog_worker/foreign_keys.py``): the order is the log's, so each meets only older
    rows. Each call applies only the segments landed since the last call for the table.
    The rows returned are copies; the events are shared with later calls: read them."""
    zone = open_reader(landing, source)
    segments = zone.segments(table)
    keys = [_segment_key(s) for s in segments]
    which = (type(landing).__name__, str(landing), source, table, version_column)
    # taken out while it applies: one that failed half-way is not kept
    replaying = _REPLAYS.pop(which, None)
    if replaying is None or keys[:len(replaying.segments)] != replaying.segments:
        replaying = _Replaying(version_column)
    for segment, key in zip(segments[len(replaying.segments):],
                            keys[len(replaying.segments):], strict=True):
        for row in _decoded(zone, segment):
            replaying.apply(dict(row))
        replaying.segments.append(key)
    _REPLAYS[which] = replaying
    while len(_REPLAYS) > _REPLAYS_KEPT:
        _REPLAYS.popitem(last=False)
    done = replaying.result
    return Replay({k: dict(v) for k, v in done.rows.items()}, list(done.events),
                  list(done.time_travel))


# -- the source databases -------------------------------------------------------------


class Session(ABC):
    """One autocommit connection to a source database (a context manager that closes it)."""

    @abstractmethod
    def execute(self, statement: str, params: Sequence[Any] = ()) -> int:
        """Run one statement; the number of rows it changed."""
        ...

    def run(self, statement: str, params: Sequence[Any] = ()) -> int:
        """Run a statement whose names are quoted for statements with parameters (``%``
        doubled: :meth:`Database.sql`), always with parameters, so that both drivers read
        ``%%`` back as ``%``; the number of rows it changed."""
        return self.execute(statement, params)

    @abstractmethod
    def transaction(self) -> AbstractContextManager[None]:
        """Statements executed inside are one transaction."""
        ...

    @abstractmethod
    def close(self) -> None:
        ...

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class PgSession(Session):
    def __init__(self, dsn: str) -> None:
        self.conn = psycopg.connect(dsn, autocommit=True)

    def execute(self, statement: str, params: Sequence[Any] = ()) -> int:
        return self.conn.execute(statement.encode(), params).rowcount

    @contextmanager
    def transaction(self) -> Iterator[None]:
        with self.conn.transaction():
            yield

    def close(self) -> None:
        self.conn.close()


class MySession(Session):
    def __init__(self, connect_args: dict[str, object]) -> None:
        self.conn = pymysql.connect(**{**connect_args, "autocommit": True})

    def execute(self, statement: str, params: Sequence[Any] = ()) -> int:
        with self.conn.cursor() as cursor:
            return int(cursor.execute(statement, tuple(params) or None))

    def run(self, statement: str, params: Sequence[Any] = ()) -> int:
        with self.conn.cursor() as cursor:
            return int(cursor.execute(statement, tuple(params)))

    @contextmanager
    def transaction(self) -> Iterator[None]:
        self.conn.begin()
        try:
            yield
        except BaseException:
            self.conn.rollback()
            raise
        self.conn.commit()

    def close(self) -> None:
        self.conn.close()


@dataclass(frozen=True)
class TableFlavour:
    """What the scenario test tables look like: their names and their DDL.

    A test table has a key column (integer, the primary key), a version column (every
    write takes it from one sequence, :attr:`Database.next_version`, so that a key's
    versions only grow) and a payload column (text). ``prefix`` goes before a table's base
    name (``items``). With ``quote``, the harness quotes the tables' names wherever it
    spells them in SQL (:meth:`Database.sql`); the plain flavour's names are written as
    they are, as the scenario tests write them (``f"UPDATE {t1} ..."``; some callers pass
    a name quoted already). ``pg_options`` follows the column list of PostgreSQL's
    ``CREATE TABLE`` (``PARTITION BY ...``); ``pg_after`` are statements run after it,
    ``{table}`` standing for the table in SQL; ``my_options`` follows MariaDB's column list.
    ``parent`` and ``ref`` name the columns of a child table's foreign keys
    (:meth:`Database.cascade`), which a flavour whose tables cannot have one (InnoDB's
    partitioned tables) leaves out (``foreign_keys``).
    """

    name: str = "plain"
    prefix: str = ""
    key: str = "id"
    version: str = "version"
    payload: str = "payload"
    quote: bool = False
    pg_options: str = ""
    pg_after: tuple[str, ...] = ()
    my_options: str = ""
    parent: str = "parent"
    ref: str = "ref"
    foreign_keys: bool = True


PLAIN = TableFlavour()
HOSTILE = TableFlavour("hostile", prefix='odd "na%me".', key="i d%", version="ver`sion",
                       payload="pay load", quote=True, parent='pa"re`nt %s', ref="ré f")
"""Names that need quoting everywhere: a dot, double quotes, ``%``, a space, a backtick."""
PARTITIONED = TableFlavour(
    "partitioned",
    pg_options=" PARTITION BY HASH (id)",
    pg_after=tuple(statement for i in range(4) for statement in (
        f"CREATE TABLE {{table}}_p{i} PARTITION OF {{table}} "
        f"FOR VALUES WITH (MODULUS 4, REMAINDER {i})",
        f"ALTER TABLE {{table}}_p{i} REPLICA IDENTITY FULL",
    )),
    my_options=" PARTITION BY HASH (id) PARTITIONS 4",
    foreign_keys=False,  # InnoDB's partitioned tables have no foreign keys
)
"""Tables partitioned by their key: a key change moves the row to another partition."""


class Database(ABC):
    """A source database as the tests write to it: the SQL that differs between kinds.

    The test tables are of :attr:`flavour` (:class:`TableFlavour`): by default ``id`` (the
    key), ``version`` and ``payload``.
    """

    kind: str  # the worker's source.kind
    dsn: str  # the worker's source.dsn
    next_version: str  # SQL expression: the next value of the version sequence
    random_text: str  # SQL expression: a random text
    flavour: TableFlavour = PLAIN

    @abstractmethod
    def table(self, name: str) -> str:
        """The worker's name of table ``name`` of this database (with the flavour's
        prefix)."""
        ...

    @abstractmethod
    def ident(self, name: str) -> str:
        """A column's or a schema's name in a statement run with parameters."""
        ...

    def sql(self, table: str) -> str:
        """A worker's table name in a statement run with parameters (see
        :class:`TableFlavour`)."""
        if not self.flavour.quote:
            return table
        schema, name = table.split(".", 1)
        return f"{self.ident(schema)}.{self.ident(name)}"

    @property
    def names(self) -> tuple[str, str, str]:
        """The flavour's key, version and payload columns, each in SQL."""
        f = self.flavour
        return self.ident(f.key), self.ident(f.version), self.ident(f.payload)

    @abstractmethod
    def connect(self) -> Session:
        ...

    def execute(self, statement: str, params: Sequence[Any] = ()) -> None:
        with self.connect() as session:
            session.execute(statement, params)

    @abstractmethod
    def create_test_table(self, table: str, rows: int = 0) -> None:
        """The test table, with ``rows`` rows of ids 10, 20, ..."""
        ...

    @abstractmethod
    def series(self, first: int, last: int) -> str:
        """A FROM item of the integers ``first`` to ``last`` as column ``g``."""
        ...

    @abstractmethod
    def upsert(self, table: str) -> str:
        """Insert row ``%s`` (an id), or give the row a new version and payload."""
        ...

    @abstractmethod
    def insert_ignore(self, table: str, values: str) -> str:
        """``INSERT INTO table VALUES values``, skipping rows whose key exists."""
        ...

    @abstractmethod
    def log_end(self) -> tuple[int, int]:
        """Where the log ends now, comparable with :func:`checkpoint_position`."""
        ...

    def key_change(self, table: str) -> str:
        """Move row ``%s`` (2nd parameter) to id ``%s`` (1st and 3rd), if that id is free."""
        sql, (key, version, _) = self.sql(table), self.names
        return (f"UPDATE {sql} SET {key} = %s, {version} = {self.next_version} WHERE {key} = %s "
                f"AND NOT EXISTS (SELECT 1 FROM {sql} AS other WHERE other.{key} = %s)")

    def update(self, table: str) -> str:
        """A new version and payload for row ``%s``."""
        key, version, payload = self.names
        return (f"UPDATE {self.sql(table)} SET {version} = {self.next_version}, "
                f"{payload} = {self.random_text} WHERE {key} = %s")

    def delete(self, table: str) -> str:
        """Delete row ``%s``."""
        return f"DELETE FROM {self.sql(table)} WHERE {self.names[0]} = %s"

    @abstractmethod
    def rows(self, table: str, key: Sequence[str] | None = None) -> dict[str, dict[str, Any]]:
        """The table as it is, keyed like the output (key columns of integers and text;
        by default the flavour's key)."""
        ...

    def cascade(self, parent: str, child: str) -> bool:
        """Make ``child`` a child of ``parent`` by foreign keys that cascade (only where the
        log does not carry cascades: MariaDB); whether it did."""
        return False


def _keyed(rows: Sequence[dict[str, Any]], key: Sequence[str]) -> dict[str, dict[str, Any]]:
    return {json.dumps([row[k] for k in key], ensure_ascii=False, separators=(",", ":")): row
            for row in rows}


class PgDatabase(Database):
    kind = "postgresql"
    next_version = "nextval('versions')"
    random_text = "md5(random()::text)"

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn

    def table(self, name: str) -> str:
        return f"public.{self.flavour.prefix}{name}"

    def ident(self, name: str) -> str:
        return pg_ident(name)

    def connect(self) -> Session:
        return PgSession(self.dsn)

    def create_test_table(self, table: str, rows: int = 0) -> None:
        sql, (key, version, payload) = self.sql(table), self.names
        flavour = self.flavour
        statements = [
            f"CREATE TABLE IF NOT EXISTS {sql} ({key} integer PRIMARY KEY, "
            f"{version} bigint NOT NULL, {payload} text){flavour.pg_options}",
            *(statement.format(table=sql) for statement in flavour.pg_after),
            f"ALTER TABLE {sql} REPLICA IDENTITY FULL",
            "CREATE SEQUENCE IF NOT EXISTS versions",
        ]
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            for statement in statements:
                conn.execute(statement.encode(), ())
            if rows:
                conn.execute(
                    f"INSERT INTO {sql} ({key}, {version}, {payload}) "
                    "SELECT g * 10, nextval('versions'), md5(g::text) "
                    "FROM generate_series(1, %s) g".encode(),
                    (rows,),
                )

    def series(self, first: int, last: int) -> str:
        return f"generate_series({int(first)}, {int(last)}) AS g"

    def upsert(self, table: str) -> str:
        key, version, payload = self.names
        return (f"INSERT INTO {self.sql(table)} ({key}, {version}, {payload}) VALUES "
                f"(%s, nextval('versions'), {self.random_text}) ON CONFLICT ({key}) DO "
                f"UPDATE SET {version} = nextval('versions'), {payload} = excluded.{payload}")

    def insert_ignore(self, table: str, values: str) -> str:
        return f"INSERT INTO {table} VALUES {values} ON CONFLICT (id) DO NOTHING"

    def log_end(self) -> tuple[int, int]:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            row = conn.execute(b"SELECT pg_current_wal_lsn() - '0/0'::pg_lsn").fetchone()
            assert row is not None
            return int(row[0]), 0

    def rows(self, table: str, key: Sequence[str] | None = None) -> dict[str, dict[str, Any]]:
        with (psycopg.connect(self.dsn) as conn,
              conn.cursor(row_factory=psycopg.rows.dict_row) as cur):
            schema, name = table.split(".", 1)
            cur.execute(f"SELECT * FROM {pg_ident(schema)}.{pg_ident(name)}".encode(), ())
            return _keyed(cur.fetchall(), key or (self.flavour.key,))


class MariaDatabase(Database):
    """A database of a MariaDB server; the version sequence is ``versions`` in it.

    A child table (:meth:`cascade`) has two foreign keys to its parent's key, which InnoDB
    applies without a row event of the child in the binary log: ``parent`` (ON DELETE
    CASCADE, ON UPDATE CASCADE), the parent of the same key, and ``ref`` (ON DELETE SET
    NULL, ON UPDATE SET NULL), the parent of the key 10 above. The workload's inserts and
    updates of a child point both at those parents when they exist (else null); its
    deletes and key changes of the parent cascade."""

    kind = "mariadb"
    next_version = "NEXTVAL(versions)"
    random_text = "MD5(RAND())"

    def __init__(self, server: MariaDBServer, name: str) -> None:
        self.server = server
        self.name = name
        self.dsn = server.url()
        self.parents: dict[str, str] = {}  # child table -> its parent (cascade)

    def cascade(self, parent: str, child: str) -> bool:
        f = self.flavour
        if not f.foreign_keys:
            return False
        key, version, _ = self.names
        up, ref = self.ident(f.parent), self.ident(f.ref)
        target = f"{self.sql(parent)} ({key})"
        self.parents[child] = parent
        with self.connect() as session:
            session.run(
                f"ALTER TABLE {self.sql(child)} ADD COLUMN {up} int NULL,"
                f" ADD COLUMN {ref} int NULL,"
                f" ADD FOREIGN KEY ({up}) REFERENCES {target} ON DELETE CASCADE"
                " ON UPDATE CASCADE,"
                f" ADD FOREIGN KEY ({ref}) REFERENCES {target} ON DELETE SET NULL"
                " ON UPDATE SET NULL")
            session.run(f"UPDATE {self.sql(child)} AS c SET {version} = {self.next_version},"
                        f" {self._pointers(child, 'c')}")
        return True

    def _pointers(self, child: str, row: str) -> str:
        """SQL that points a row of ``child`` (``row``: its key in SQL) at its parents."""
        f, key = self.flavour, self.names[0]
        parent = self.sql(self.parents[child])
        return (f"{self.ident(f.parent)} = (SELECT p.{key} FROM {parent} p"
                f" WHERE p.{key} = {row}.{key}), {self.ident(f.ref)} = (SELECT p.{key}"
                f" FROM {parent} p WHERE p.{key} = {row}.{key} + 10)")

    def upsert(self, table: str) -> str:
        if table not in self.parents:
            return self._plain_upsert(table)
        f, (key, version, payload) = self.flavour, self.names
        parent, sql = self.sql(self.parents[table]), self.sql(table)
        return (f"INSERT INTO {sql} ({key}, {version}, {payload}, {self.ident(f.parent)},"
                f" {self.ident(f.ref)}) SELECT k.g, {self.next_version}, {self.random_text},"
                f" (SELECT p.{key} FROM {parent} p WHERE p.{key} = k.g),"
                f" (SELECT p.{key} FROM {parent} p WHERE p.{key} = k.g + 10)"
                f" FROM (SELECT %s AS g) k ON DUPLICATE KEY UPDATE"
                f" {sql}.{version} = {self.next_version}, {sql}.{payload} = VALUES({payload})")

    def update(self, table: str) -> str:
        if table not in self.parents:
            return super().update(table)
        key, version, payload = self.names
        return (f"UPDATE {self.sql(table)} AS c SET {version} = {self.next_version},"
                f" {payload} = {self.random_text}, {self._pointers(table, 'c')}"
                f" WHERE c.{key} = %s")

    def table(self, name: str) -> str:
        return f"{self.name}.{self.flavour.prefix}{name}"

    def ident(self, name: str) -> str:
        return my_ident(name)

    def connect(self) -> Session:
        return MySession(self.server.connect_args(self.name))

    def create_test_table(self, table: str, rows: int = 0) -> None:
        sql, (key, version, payload) = self.sql(table), self.names
        with self.connect() as session:
            session.run(f"CREATE TABLE IF NOT EXISTS {sql} ({key} int PRIMARY KEY, "
                        f"{version} bigint NOT NULL, {payload} text){self.flavour.my_options}")
            session.run("CREATE SEQUENCE IF NOT EXISTS versions")
            if rows:
                session.run(f"INSERT INTO {sql} ({key}, {version}, {payload}) "
                            f"SELECT g * 10, NEXTVAL(versions), MD5(g) "
                            f"FROM {self.series(1, rows)}")

    def series(self, first: int, last: int) -> str:
        return f"(SELECT seq AS g FROM seq_{int(first)}_to_{int(last)}) AS series"

    def _plain_upsert(self, table: str) -> str:
        key, version, payload = self.names
        return (f"INSERT INTO {self.sql(table)} ({key}, {version}, {payload}) VALUES "
                f"(%s, NEXTVAL(versions), {self.random_text}) ON DUPLICATE KEY "
                f"UPDATE {version} = NEXTVAL(versions), {payload} = VALUES({payload})")

    def insert_ignore(self, table: str, values: str) -> str:
        return f"INSERT IGNORE INTO {table} VALUES {values}"

    def log_end(self) -> tuple[int, int]:
        connection = pymysql.connect(**self.server.connect_args(self.name))
        with connection, connection.cursor() as cur:
            cur.execute("SHOW MASTER STATUS")
            row = cur.fetchone()
            assert row is not None
            return file_number(str(row[0])), int(row[1])

    def rows(self, table: str, key: Sequence[str] | None = None) -> dict[str, dict[str, Any]]:
        connection = pymysql.connect(**self.server.connect_args(self.name),
                                     cursorclass=pymysql.cursors.DictCursor)
        schema, name = table.split(".", 1)
        with connection, connection.cursor() as cur:
            cur.execute(f"SELECT * FROM {my_ident(schema)}.{my_ident(name)}", ())
            return _keyed(list(cur.fetchall()), key or (self.flavour.key,))


def create_test_table(dsn: str, table: str, rows: int = 0) -> None:
    """The PostgreSQL test table (see :class:`Database`)."""
    PgDatabase(dsn).create_test_table(table, rows)


def source_rows(dsn: str, table: str, key: Sequence[str] = ("id",)
                ) -> dict[str, dict[str, Any]]:
    """The PostgreSQL table as it is, keyed like the output."""
    return PgDatabase(dsn).rows(table, key)


# -- a workload -------------------------------------------------------------------


class Workload(threading.Thread):
    """Seeded random writes: inserts, updates, deletes, key changes, multi-row transactions.

    Every write sets ``version`` from one sequence, so a key's versions only grow.
    """

    def __init__(self, database: Database, tables: Sequence[str], seed: int, *,
                 key_space: int = 2000, pause_s: float = 0.002) -> None:
        super().__init__(daemon=True)
        self.database = database
        self.tables = list(tables)
        self.random = random.Random(seed)
        self.key_space = key_space
        self.pause_s = pause_s
        self.stop_event = threading.Event()
        self.transactions = 0
        self.key_changes = 0  # rows whose key the workload changed
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with self.database.connect() as session:
                while not self.stop_event.is_set():
                    self._transaction(session)
                    self.transactions += 1
                    time.sleep(self.pause_s)
        except BaseException as exc:  # reported by stop()
            self.error = exc

    def _transaction(self, session: Session) -> None:
        rnd, db = self.random, self.database
        with session.transaction():
            for _ in range(rnd.choice([1, 1, 1, 2, 5])):
                table = rnd.choice(self.tables)
                key = rnd.randrange(1, self.key_space)
                action = rnd.random()
                if action < 0.3:
                    session.run(db.upsert(table), (key,))
                elif action < 0.7:
                    session.run(db.update(table), (key,))
                elif action < 0.85:
                    session.run(db.delete(table), (key,))
                else:
                    target = rnd.randrange(1, self.key_space)
                    self.key_changes += session.run(db.key_change(table), (target, key, target))

    def stop(self) -> None:
        self.stop_event.set()
        self.join(30)
        if self.error is not None:
            raise AssertionError(f"workload failed: {self.error!r}")


# -- the scenario suites' view of a source ---------------------------------------------


SOURCE = "src"
# The lease of a kill test's workers: a worker killed with SIGKILL cannot give its lease
# up, and the next one waits it out; 2 s is over by the time a new worker is up (5 s, the
# default, is 3 s more a kill). Renewed every 0.67 s: a loaded machine's stalls keep it.
KILLED_LEASE = "[lease]\nttl_s = 2\nstandby_poll_s = 0.1\n"


@dataclass
class Backend:
    """How the suite reaches one source database: what differs between PostgreSQL and MariaDB."""

    db: Database
    redis_url: str
    tmp: Path
    restart_source: Callable[[], None]  # a clean restart of the source's server
    config_extra: str = ""  # appended to every configuration (a [source.replica] section)
    source_extra: str = ""  # lines of every configuration's [source] (its watermarks)
    s3: S3Location | None = None  # the landing zone in this bucket, not in tmp/landing

    @property
    def kind(self) -> str:
        return self.db.kind

    @property
    def t1(self) -> str:
        return self.db.table("items")

    @property
    def t2(self) -> str:
        return self.db.table("orders")

    @property
    def next_version(self) -> str:
        """SQL: the next version (one sequence for every write)."""
        return self.db.next_version

    @property
    def statement_digits(self) -> int:
        """The leading hex digits of a position that the rows of one logged change of
        several rows share: PostgreSQL (commit LSN, index), MySQL (file, event, row)."""
        return 16 if self.kind == "postgresql" else 32

    def create(self, table: str, rows: int) -> None:
        self.db.create_test_table(table, rows)

    def execute(self, sql: str, params: Sequence[Any] = ()) -> None:
        self.db.execute(sql, params)

    def connect(self) -> Session:
        return self.db.connect()

    def rows(self, table: str, key: Sequence[str] | None = None) -> dict[str, dict[str, Any]]:
        return self.db.rows(table, key)

    def use(self, flavour: TableFlavour) -> None:
        """Make the test tables (:attr:`t1`, :attr:`t2`) of this flavour."""
        self.db.flavour = flavour

    def log_end(self) -> tuple[int, int]:
        return self.db.log_end()

    def delete_unlogged(self, table: str, where: str) -> int:
        """Delete rows of ``table`` (``where``: a condition) without the log carrying it,
        as a restore, a replica's own write or a cascade would: MariaDB, with the session's
        binary log off; PostgreSQL, with the table out of the worker's publication. The
        number of rows deleted."""
        sql = self.db.sql(table)
        if self.kind != "postgresql":
            with self.connect() as session:  # autocommit: the DELETE commits at once
                session.run("SET SESSION sql_log_bin = 0")
                return session.run(f"DELETE FROM {sql} WHERE {where}")
        publication = self.db.ident(f"dblog_{SOURCE}")
        with self.connect() as session:
            session.run(f"ALTER PUBLICATION {publication} DROP TABLE {sql}")
            count = session.run(f"DELETE FROM {sql} WHERE {where}")
            session.run(f"ALTER PUBLICATION {publication} ADD TABLE {sql}")
        return count

    def workload(self, tables: list[str], seed: int) -> Workload:
        return Workload(self.db, tables, seed)

    def config_path(self, tables: list[str], **kwargs: Any) -> Path:
        kwargs["extra"] = kwargs.get("extra", "") + self.config_extra
        kwargs.setdefault("source_extra", self.source_extra)
        if self.s3 is not None:
            ca = f', ca_bundle = "{self.s3.ca_bundle}"' if self.s3.ca_bundle else ""
            kwargs.setdefault("landing", f'path = "{self.s3.url}"\n'
                              f's3 = {{ endpoint = "{self.s3.endpoint}", path_style = true{ca} }}')
        return write_config(self.tmp, self.db.dsn, self.redis_url, tables, name=SOURCE,
                            kind=self.db.kind, **kwargs)

    @property
    def landing(self) -> Path:
        return self.tmp / "landing"

    @property
    def landing_root(self) -> LandingRoot:
        """Where the worker lands: the bucket, else :attr:`landing`."""
        return self.s3 if self.s3 is not None else self.landing

    def only_postgresql(self, why: str) -> None:
        if self.kind != "postgresql":
            pytest.skip(f"PostgreSQL only: {why}")


def dumps_under_load(backend: Backend, config: Path, worker: WorkerProcess,
                     kind: str) -> list[str]:
    """Dumps of ``backend.t1`` and ``t2`` while the workload writes to both: ``all``
    (chunks of 37), ``tables`` (53), ``parallel`` (29, three ranges a window), ``filtered``
    (47, two ranges a window, with conditions every row meets: the whole table converges),
    ``keys`` (t1's keys and one that never existed, in batches of 41; t2 by table, 64) or
    ``prune`` (a pruning dump of both, 43: no row the source has may be pruned); returns
    the requests' ids once each completed. On MariaDB, ``t2`` becomes a child of ``t1`` by
    foreign keys that cascade, while the worker streams (:meth:`Database.cascade`)."""
    t1, t2 = backend.t1, backend.t2
    cascades = backend.db.cascade(t1, t2)
    workload = backend.workload([t1, t2], seed=sum(map(ord, kind)))
    workload.start()
    try:
        time.sleep(0.3)
        if kind == "all":
            ids = [dump(config, "--all", "--chunk-size", "37")]
        elif kind == "tables":
            ids = [dump(config, "--table", t2, "--table", t1, "--chunk-size", "53")]
        elif kind == "parallel":
            ids = [dump(config, "--table", t1, "--table", t2, "--chunk-size", "29",
                        "--parallelism", "3")]
        elif kind == "prune":
            ids = [dump(config, "--table", t1, "--table", t2, "--chunk-size", "43", "--prune")]
        elif kind == "filtered":
            flavour = backend.db.flavour
            ids = [dump(config, "--table", t1, "--table", t2, "--chunk-size", "47",
                        "--parallelism", "2", "--where", flavour.version, ">", "0",
                        "--where", flavour.payload, "is not null")]
        else:
            keys = sorted(int(json.loads(k)[0]) for k in backend.rows(t1))
            ids = [dump(config, "--table", t1, "--keys", json.dumps([*keys, 999_999]),
                        "--chunk-size", "41"),
                   dump(config, "--table", t2, "--chunk-size", "64")]
        for request_id in ids:
            state = wait_request(backend.redis_url, SOURCE, request_id,
                                 ["completed", "failed"], 120, worker)
            assert state["state"] == "completed", state
        time.sleep(0.5)
        # a dump quicker than the workload's first key change: it writes on until it has
        wait_for(lambda: workload.transactions > 20 and workload.key_changes > 0, 60,
                 "the workload's writes")
    finally:
        workload.stop()
    assert workload.transactions > 20 and workload.key_changes > 0
    if cascades:
        assert_cascaded(backend, t2)
    return ids


def assert_cascaded(backend: Backend, table: str) -> None:
    """The output of ``table`` holds foreign-key action events: cascades were derived."""
    wait_for(lambda: any(e["op"] == "f" for e in events_of(backend, table)), 30,
             f"a foreign-key action event of {table}")


def dump_through_kills(backend: Backend, config: Path, start: Callable[[Path], WorkerProcess],
                       dump_args: Sequence[str], kills: Sequence[int],
                       rnd: random.Random) -> None:
    """A dump of ``backend.t1`` and ``t2`` (``dump_args``) while the workload writes; the
    worker is killed with SIGKILL once the dump has closed each of ``kills`` windows (at
    least one more than at the last kill), at a random moment of a window, and started
    again. The dump completes, the output converges, and no event landed twice. On
    MariaDB, ``t2`` is a child of ``t1`` by foreign keys that cascade."""
    t1, t2 = backend.t1, backend.t2
    worker = start(config)
    cascades = backend.db.cascade(t1, t2)
    workload = backend.workload([t1, t2], seed=rnd.randrange(1000))
    workload.start()
    try:
        request_id = dump(config, *dump_args)
        done = 0
        for at in kills:
            at = max(at, done + 1)
            wait_for(lambda at=at: chunks(backend, request_id) >= at, 60,  # type: ignore[misc]
                     f"{at} windows", worker.log)
            time.sleep(rnd.uniform(0, 0.03))
            killed_in = redis_request(backend.redis_url, SOURCE, request_id)["state"]
            worker.kill()
            assert killed_in == "running", f"the dump was {killed_in} when the worker was killed"
            done = chunks(backend, request_id)
            worker = start(config)
        state = wait_request(backend.redis_url, SOURCE, request_id, ["completed", "failed"],
                             120, worker)
        assert state["state"] == "completed", state
        time.sleep(0.5)
    finally:
        workload.stop()
    assert_converged(backend, t1, t2)
    assert_landed_once(backend, t1, t2)
    if cascades:
        assert_cascaded(backend, t2)


def overlapping_dumps_through_kills(backend: Backend, config: Path,
                                    start: Callable[[Path], WorkerProcess],
                                    requests: Sequence[Sequence[str]], kills: Sequence[int],
                                    rnd: random.Random) -> list[str]:
    """Several dumps at once (``requests``: the arguments of each ``dblog dump``) of
    ``backend.t1`` and ``t2`` while the workload writes to both; the worker is killed with
    SIGKILL once every dump still running has closed each of ``kills`` windows (or has
    ended), at a random moment of a window, with at least two dumps running, and started
    again (the kills left when fewer than two run are not made; the first one must be).
    Each dump resumes from its last durable window (its saved progress never goes
    back), all complete, the output converges and no event landed twice. On MariaDB,
    ``t2`` is a child of ``t1`` by foreign keys that cascade: the derived events fall into
    the windows of every dump. Returns the ids."""
    t1, t2 = backend.t1, backend.t2
    worker = start(config)
    cascades = backend.db.cascade(t1, t2)
    workload = backend.workload([t1, t2], seed=rnd.randrange(1000))
    workload.start()
    try:
        ids = [dump_here(config, *arguments) for arguments in requests]  # within ms
        saved = dict.fromkeys(ids, 0)

        def running() -> list[str]:
            return [i for i in ids
                    if redis_request(backend.redis_url, SOURCE, i)["state"] == "running"]

        def ongoing() -> int:
            """The dumps that have not ended (queued ones included: taken up soon)."""
            return sum(redis_request(backend.redis_url, SOURCE, i)["state"] in
                       ("queued", "running", "paused") for i in ids)

        def reached(at: int) -> bool:
            """Every dump that takes windows (not queued, nor waiting for a slot) has closed
            ``at``, and two are still running (one may wait for a slot)."""
            states = {i: redis_request(backend.redis_url, SOURCE, i)["state"] for i in ids}
            store = StateStore(backend.redis_url, SOURCE)
            try:
                parked = {i for i, d in store.dump_statuses().items()
                          if "a slot" in str(d.get("waiting"))}
            finally:
                store.close()
            live = [i for i in ids if states[i] == "running" and i not in parked]
            return (sum(state == "running" for state in states.values()) >= 2
                    and all(chunks(backend, i) >= at for i in live))

        for killed, at in enumerate(kills):
            wait_for(lambda at=at: reached(at) or ongoing() < 2, 90,  # type: ignore[misc]
                     f"every dump to close {at} windows", worker.log)
            if ongoing() < 2:
                # a background dump earns a sixteenth of the turns of an urgent one: on a
                # loaded machine the others may end before it closes ``at`` windows
                assert killed, "no kill with two dumps in flight"
                break
            time.sleep(rnd.uniform(0, 0.03))
            in_flight = running()
            worker.kill()
            assert len(in_flight) >= 2, f"one dump in flight at the kill: {in_flight}"
            for request_id in ids:  # durable progress: never behind what was saved before
                now = chunks(backend, request_id)
                assert now >= saved[request_id], (request_id, now, saved[request_id])
                saved[request_id] = now
            worker = start(config)
        unpace(backend.redis_url, ids)  # past the kills, the rest need not crawl
        for request_id in ids:
            state = wait_request(backend.redis_url, SOURCE, request_id,
                                 ["completed", "failed"], 180, worker)
            assert state["state"] == "completed", state
            assert chunks(backend, request_id) >= saved[request_id]
        time.sleep(0.5)
    finally:
        workload.stop()
    assert_converged(backend, t1, t2)
    assert_landed_once(backend, t1, t2)
    if cascades:
        assert_cascaded(backend, t2)
    return ids


def unpace(redis_url: str, ids: Sequence[str]) -> None:
    """Delay 0 for each of the requests that has not ended (``dblog set --delay-ms 0``)."""
    store = StateStore(redis_url, SOURCE)
    try:
        for request_id in ids:
            with contextlib.suppress(RequestRejected):  # it ended meanwhile
                store.set_knobs(request_id, delay_ms=0)
    finally:
        store.close()


def assert_landed_once(backend: Backend, *tables: str) -> None:
    """No event landed twice (a replay after a kill skips what is durable), in order."""
    for table in tables:
        positions = [str(e["position"]) for e in events_of(backend, table)]
        assert positions == sorted(positions)
        assert len(positions) == len(set(positions)), "a replayed event landed twice"


def assert_converged(backend: Backend, *tables: str) -> None:
    """Wait until the output equals each table; then check it never went back in time."""
    version = backend.db.flavour.version
    for table in tables:
        expected = backend.rows(table)

        def caught_up(table: str = table, expected: dict[str, Any] = expected) -> bool:
            return replay(backend.landing_root, SOURCE, table, version).rows == expected

        wait_for(caught_up, 30, f"the output of {table} to equal the table",
                 lambda table=table: _difference(backend, table))  # type: ignore[misc]
        result = replay(backend.landing_root, SOURCE, table, version)
        assert result.time_travel == [], result.time_travel[:10]


def _difference(backend: Backend, table: str) -> str:
    expected = backend.rows(table)
    got = replay(backend.landing_root, SOURCE, table, backend.db.flavour.version).rows
    missing = sorted(set(expected) - set(got))[:10]
    extra = sorted(set(got) - set(expected))[:10]
    wrong = [k for k in expected if k in got and got[k] != expected[k]][:10]
    return f"missing {missing}, extra {extra}, different {wrong}"


def dump(config: Path, *args: str) -> str:
    result = cli(config, "dump", *args, "--json")
    request_id: str = json.loads(result.stdout)["id"]
    return request_id


def cli_here(config: Path, *args: str) -> str:
    """``dblog ARGS`` in this process, whatever the command (no interpreter to start); what
    it printed. It must succeed."""
    result = _in_process([*args, "--config", str(config)])
    assert result.returncode == 0, \
        f"dblog {' '.join(args)} exited {result.returncode}\n{result.stdout}{result.stderr}"
    return result.stdout


def dump_here(config: Path, *args: str) -> str:
    """``dblog dump`` in this process: requests queued one after the other within
    milliseconds."""
    request_id: str = json.loads(cli_here(config, "dump", *args, "--json"))["id"]
    return request_id


def checkpoint(redis_url: str) -> str | None:
    store = StateStore(redis_url, SOURCE)
    try:
        return store.checkpoint()
    finally:
        store.close()


def checkpoint_position(backend: Backend, text: str) -> tuple[int, int]:
    """A saved checkpoint as a position comparable with :meth:`Database.log_end`."""
    if backend.kind == "postgresql":
        return parse_lsn(text), 0
    saved = BinlogCheckpoint.decode(text)
    return file_number(saved.file), saved.pos


def chunks(backend: Backend, request_id: str) -> int:
    """The chunks the request has read so far, over all its tables."""
    store = StateStore(backend.redis_url, SOURCE)
    try:
        return sum(p.chunks for p in store.progress(request_id).values())
    finally:
        store.close()


def events_of(backend: Backend, table: str) -> list[dict[str, Any]]:
    return landed_events(open_reader(backend.landing_root, SOURCE), table)


def outage_mid_dump(backend: Backend, worker_process: Callable[..., WorkerProcess],
                    outage: Callable[[], None], logged: str) -> None:
    """A dump of 5000 rows in small chunks; ``outage`` strikes after five chunks (and
    writes to the table meanwhile); the dump still completes and the output converges."""
    t1 = backend.t1
    backend.create(t1, 5000)
    config = backend.config_path([t1])
    worker = worker_process(config)
    request_id = dump(config, "--table", t1, "--chunk-size", "50", "--delay-ms", "5")
    wait_for(lambda: chunks(backend, request_id) >= 5, 30, "five chunks", worker.log)
    outage()
    state = wait_request(backend.redis_url, SOURCE, request_id, ["completed", "failed"], 90,
                         worker)
    assert state["state"] == "completed", state
    assert logged in worker.log()
    assert_converged(backend, t1)


class Workers:
    """Starts ``dblog run`` processes; kills those still running at the end."""

    def __init__(self, log_path: Path) -> None:
        self.log_path = log_path
        self.started: list[WorkerProcess] = []

    def start(self, config: Path, *args: str, streaming: bool = True) -> WorkerProcess:
        """Start ``dblog run``; unless told otherwise, wait until it streams the log."""
        process = WorkerProcess(config, self.log_path, *args).start()
        self.started.append(process)
        if streaming:
            count = process.log().count(" streaming ")
            wait_for(lambda: process.log().count(" streaming ") > count or not process.alive(),
                     30, "the worker to stream", process.log)
        return process

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        for process in self.started:
            process.kill()


def env_with_path() -> dict[str, str]:
    return dict(os.environ)
