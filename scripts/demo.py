#!/usr/bin/env python3
"""The dblog demo: capture a small shop database under live writes, dump it, check the result.

Run it through ``./scripts/demo`` (which prepares the machine and the venv), or directly with
the venv's interpreter: ``.venv/bin/python scripts/demo.py [--source mariadb] [--keep]``.
What it does:

1. starts a throwaway source database and Redis on free ports (``tests/services.py``; nothing
   touches the machine's own servers): PostgreSQL (``wal_level=logical``) by default, MariaDB
   (row-based binary log) with ``--source mariadb``;
2. creates ``customers`` and ``orders`` (PostgreSQL: ``public.*``, REPLICA IDENTITY FULL;
   MariaDB: ``shop.*``), fills them, writes a worker configuration and starts ``dblog run``;
3. runs a live write load (inserts, updates, deletes, primary-key changes) in a thread;
4. requests ``dblog dump --all --chunk-size 2000`` and follows it with ``dblog wait``, then
   a primary-key dump of a few customers, some of which do not exist;
5. stops the load, waits until the worker's checkpoint passes the source's last write, replays
   the landing zone in position order and compares it with the source tables, byte for byte
   in the canonical encoding of ``dblog_worker.values`` (MariaDB: ``dblog_worker.mysql.values``);
6. adds a ``[target]`` section (a database ``shop_replica`` on the same server), runs
   ``dblog merge`` (the Spark job, ``local[*]``) and ``dblog verify``, which must find the
   merged target tables equal to the source tables;
7. prints a summary and stops everything (``--keep``: leaves it running until Ctrl-C).

What differs between the two databases (server, schema, SQL of the load, reading the source
rows, the log position) is in one class per kind, :class:`PostgresShop` and
:class:`MariaDBShop`; the rest of the story is shared.

Exit status: 0 when every table converged and verified equal, 1 otherwise (or when something
failed on the way).
"""

from __future__ import annotations

import abc
import argparse
import contextlib
import ctypes
import itertools
import json
import os
import random
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests/services.py starts the throwaway servers

import psycopg  # noqa: E402
import pymysql  # noqa: E402

from dblog_worker.config import default_server_id, mysql_url_args  # noqa: E402
from dblog_worker.landing import LandingZone, read_events  # noqa: E402
from dblog_worker.mysql.binlog import BinlogCheckpoint, file_number  # noqa: E402
from dblog_worker.mysql.catalog import KEY_COLUMNS_SQL  # noqa: E402
from dblog_worker.mysql.values import (  # noqa: E402
    COLUMNS_SQL,
    MyRowCodec,
    column_from_information_schema,
    dump_connection_options,
    select_list,
)
from dblog_worker.pg import catalog  # noqa: E402
from dblog_worker.pg.pgoutput import parse_lsn  # noqa: E402
from dblog_worker.requests import RequestState, TableProgress  # noqa: E402
from dblog_worker.state import StateStore  # noqa: E402
from dblog_worker.values import RowCodec, libpq_options  # noqa: E402
from tests.services import MariaDBServer, PostgresServer, RedisServer  # noqa: E402

SOURCE = "shop"
DATABASE = "shop"
REPLICA = "shop_replica"  # the merge's target database
MISSING_BASE = 90_000_000  # primary keys from here on never exist

# -- output ---------------------------------------------------------------------------


def heading(text: str) -> None:
    print(f"\n== {text}", flush=True)


def say(text: str = "") -> None:
    print(text, flush=True)


def indent(text: str, prefix: str = "   ") -> str:
    return "\n".join(prefix + line for line in text.rstrip("\n").splitlines())


def number(value: int) -> str:
    return f"{value:,}"


# -- the parts ------------------------------------------------------------------------


@dataclass
class Options:
    keep: bool
    workdir: Path | None
    customers: int
    orders: int
    chunk_size: int
    warmup_s: float
    seed: int
    source: str = "postgresql"


def parse_args(argv: Sequence[str] | None) -> Options:
    parser = argparse.ArgumentParser(
        description="Run the dblog demo: a live PostgreSQL or MariaDB source, dumps under load, "
        "and a check that the landing zone converges to the source.")
    parser.add_argument("--source", choices=list(SHOPS), default="postgresql",
                        help="the source database to capture from (default: %(default)s)")
    parser.add_argument("--keep", action="store_true",
                        help="leave the database, Redis and the worker running until Ctrl-C")
    parser.add_argument("--workdir", type=Path,
                        help="where the configuration, worker log and landing zone go "
                        "(default: a new directory under the temp dir)")
    parser.add_argument("--customers", type=int, default=20_000, help="rows of customers")
    parser.add_argument("--orders", type=int, default=100_000, help="rows of orders")
    parser.add_argument("--chunk-size", type=int, default=2_000, help="rows per dump chunk")
    parser.add_argument("--warmup-s", type=float, default=3.0,
                        help="seconds of live writes before the dump is requested")
    parser.add_argument("--seed", type=int, default=7, help="seed of the write load")
    args = parser.parse_args(argv)
    if args.customers < 10 or args.orders < 10:
        parser.error("--customers and --orders need at least 10 rows")
    return Options(args.keep, args.workdir, args.customers, args.orders, args.chunk_size,
                   args.warmup_s, args.seed, args.source)


class DemoFailed(Exception):
    """Something on the way did not work; the message says what."""


class Dblog:
    """The ``dblog`` CLI of this checkout, run as a child process with the demo's config."""

    def __init__(self, config: Path, workdir: Path) -> None:
        self.config = config
        self.log_path = workdir / "worker.log"
        self.worker: subprocess.Popen[bytes] | None = None
        self.bin = Path(sys.executable).parent
        launcher = self.bin / "dblog"
        self.shown = "dblog" if launcher.exists() else f"{sys.executable} -m dblog_worker"
        self.env = dict(os.environ, DBLOG_CONFIG=str(config), PYTHONUNBUFFERED="1")

    def argv(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "dblog_worker", *args]

    def run(self, *args: str, show: bool = True, check: bool = True,
            stream: bool = False, timeout: float = 120) -> str:
        """Run one command; print it and its output (``stream``: straight to the terminal)."""
        if show:
            say(f"$ dblog {shlex.join(args)}")
        output = ""
        if stream:
            code = self._follow(self.argv(*args), timeout)
        else:
            done = subprocess.run(self.argv(*args), env=self.env, cwd=ROOT, timeout=timeout,
                                  capture_output=True, text=True, check=False)
            code, output = done.returncode, done.stdout
            if show and (done.stdout or done.stderr):
                say(indent(done.stdout + done.stderr))
        if check and code != 0:
            raise DemoFailed(f"`dblog {shlex.join(args)}` exited with {code}"
                             + self.worker_log_tail())
        return output

    def _follow(self, argv: list[str], timeout: float) -> int:
        """Run a command whose output goes straight to the terminal; stop it if the worker dies."""
        proc = subprocess.Popen(argv, env=self.env, cwd=ROOT)
        deadline = time.monotonic() + timeout
        try:
            while True:
                try:
                    return proc.wait(0.5)
                except subprocess.TimeoutExpired:
                    self.check_worker()
                    if time.monotonic() > deadline:
                        command = shlex.join(argv[3:])
                        raise DemoFailed(f"`dblog {command}` took over {timeout:.0f} s"
                                         + self.worker_log_tail()) from None
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()

    def start_worker(self) -> None:
        with self.log_path.open("wb") as log:
            self.worker = subprocess.Popen(
                self.argv("run", "--log-level", "INFO"), env=self.env, cwd=ROOT,
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True,  # Ctrl-C reaches the demo, which stops the worker
                preexec_fn=_die_with_parent,  # ... and a killed demo takes the worker along
            )

    def check_worker(self) -> None:
        if self.worker is not None and self.worker.poll() is not None:
            raise DemoFailed(f"the worker exited with {self.worker.returncode}"
                             + self.worker_log_tail())

    def stop_worker(self) -> int | None:
        worker, self.worker = self.worker, None
        if worker is None:
            return None
        if worker.poll() is None:
            worker.send_signal(signal.SIGTERM)
            try:
                return worker.wait(30)
            except subprocess.TimeoutExpired:
                worker.kill()
                return worker.wait()
        return worker.returncode

    def worker_log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return f"\nlast lines of {self.log_path}:\n" + indent(
            "\n".join(text.splitlines()[-lines:]))


def _die_with_parent() -> None:
    """In the worker's child process: get SIGTERM when the demo dies (Linux; else nothing)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG


def write_config(path: Path, shop: Shop, redis_url: str, landing: Path) -> None:
    path.write_text(f"""\
# Written by scripts/demo.py. Every option: docs/configuration.md.
[source]
name = "{SOURCE}"
kind = "{shop.kind}"
dsn = {json.dumps(shop.dsn)}
tables = {json.dumps(list(shop.tables))}

[redis]
url = {json.dumps(redis_url)}

[landing]
path = {json.dumps(str(landing))}
flush_interval_s = 0.5

[worker]
heartbeat_interval_s = 1.0
status_interval_s = 0.5
control_interval_s = 0.1
reconnect_max_s = 2.0
""")


# -- the source databases: what differs per kind --------------------------------------------


class LoadSession(Protocol):
    """One connection of the write load, in autocommit between transactions."""

    def transaction(self) -> contextlib.AbstractContextManager[object]: ...

    def execute(self, sql: str, params: Sequence[object]) -> None: ...


class Shop(abc.ABC):
    """A started throwaway server of one kind with the shop database on it.

    Everything the story needs of the source database goes through here: the server and its
    shop, the SQL of the write load, the source rows in the worker's canonical encoding, the
    log position, and how a user reaches the server. The story itself is written once.
    """

    kind: ClassVar[str]  # the --source choice and the configuration's source.kind
    label: ClassVar[str]  # "PostgreSQL"
    server_note: ClassVar[str]  # how the server is set up for capture
    shop_note: ClassVar[str]  # how the tables are set up for capture
    log_name: ClassVar[str]  # what a log position is called
    customers: ClassVar[str]  # table names as the configuration has them
    orders: ClassVar[str]
    # The SQL of each statement of the write load (ShopLoad), with the same %s parameters in
    # every kind: insert order (id, customer, amount, items), update order (status, id),
    # delete order (id), change order key (new id, id), update customer (tags, id), insert
    # customer (id, name), delete customer (id).
    statements: ClassVar[Mapping[str, str]]

    dsn: str  # source.dsn of the configuration

    @classmethod
    @abc.abstractmethod
    def started(cls) -> contextlib.AbstractContextManager[Shop]:
        """Start a server, create the shop database on it; stop the server on exit."""

    @abc.abstractmethod
    def replica_target(self) -> str:
        """The ``[target]`` section of a replica database on the same server (the merge's)."""

    @property
    def tables(self) -> tuple[str, str]:
        return (self.customers, self.orders)

    @abc.abstractmethod
    def describe(self) -> str:
        """``PostgreSQL 15 on port 5432``."""

    @abc.abstractmethod
    def create_shop(self, customers: int, orders: int) -> None:
        """Create the tables and the version sequence, fill the tables."""

    @abc.abstractmethod
    def load_session(self) -> contextlib.AbstractContextManager[LoadSession]:
        """A connection of the write load."""

    def tags(self, tags: list[str] | None) -> object:
        """The parameter of a customer's ``tags``."""
        return tags

    @abc.abstractmethod
    def source_rows(self, table: str) -> dict[str, str]:
        """The table now, key -> row, in the canonical encoding the worker writes."""

    @abc.abstractmethod
    def log_end(self) -> tuple[str, tuple[int, ...]]:
        """The end of the source's log now: its text, and what checkpoints compare with."""

    @abc.abstractmethod
    def checkpoint_position(self, checkpoint: str) -> tuple[int, ...]:
        """A checkpoint of the worker, comparable with :meth:`log_end`."""

    @abc.abstractmethod
    def streaming(self, checkpoint: str) -> str:
        """Where the worker reads the log from, in a few words."""

    @abc.abstractmethod
    def client(self, sql: str | None = None) -> str:
        """The shell command of the database's client on the shop (running ``sql``)."""


class PostgresShop(Shop):
    kind = "postgresql"
    label = "PostgreSQL"
    server_note = "wal_level=logical"
    shop_note = "REPLICA IDENTITY FULL"
    log_name = "WAL position"
    customers = "public.customers"
    orders = "public.orders"

    SCHEMA_SQL = """
CREATE SEQUENCE versions;
CREATE TABLE customers (
    id          bigint PRIMARY KEY,
    name        text NOT NULL,
    email       text,
    country     char(2) NOT NULL,
    balance     numeric(12, 2) NOT NULL,
    tags        text[],
    created_at  timestamptz NOT NULL,
    version     bigint NOT NULL
);
CREATE TABLE orders (
    id           bigint PRIMARY KEY,
    customer_id  bigint NOT NULL,
    status       text NOT NULL,
    amount       numeric(10, 2) NOT NULL,
    items        jsonb NOT NULL,
    note         text,
    created_at   timestamptz NOT NULL,
    updated_at   timestamptz NOT NULL,
    version      bigint NOT NULL
);
ALTER TABLE customers REPLICA IDENTITY FULL;
ALTER TABLE orders REPLICA IDENTITY FULL;
"""

    FILL_CUSTOMERS = """
INSERT INTO customers
SELECT g, 'customer ' || g,
       CASE WHEN g %% 7 = 0 THEN NULL ELSE 'c' || g || '@example.com' END,
       (ARRAY['DE', 'FR', 'US', 'JP', 'BR'])[1 + g %% 5],
       round((g %% 1000) * 1.37, 2),
       CASE WHEN g %% 3 = 0 THEN ARRAY['vip', 'café'] END,
       timestamptz '2024-01-01 00:00:00+00' + g * interval '1 minute',
       nextval('versions')
FROM generate_series(1, %s) AS g
"""

    FILL_ORDERS = """
INSERT INTO orders
SELECT g, 1 + g %% %s,
       (ARRAY['new', 'paid', 'shipped', 'delivered'])[1 + g %% 4],
       round((g %% 500) + 0.99, 2),
       jsonb_build_object('sku', 'SKU-' || g %% 97, 'qty', 1 + g %% 5),
       CASE WHEN g %% 11 = 0 THEN 'gift 🎁' END,
       timestamptz '2024-06-01 00:00:00+00' + g * interval '10 seconds',
       timestamptz '2024-06-01 00:00:00+00' + g * interval '10 seconds',
       nextval('versions')
FROM generate_series(1, %s) AS g
"""

    statements: ClassVar[Mapping[str, str]] = {
        "insert order": "INSERT INTO orders VALUES (%s, %s, 'new', %s, %s, NULL, now(), now(), "
                        "nextval('versions'))",
        "update order": "UPDATE orders SET status = %s, amount = amount + 1.25, "
                        "updated_at = now(), version = nextval('versions') WHERE id = %s",
        "delete order": "DELETE FROM orders WHERE id = %s",
        "change order key": "UPDATE orders SET id = %s, version = nextval('versions') "
                            "WHERE id = %s",
        "update customer": "UPDATE customers SET balance = balance - 0.50, tags = %s, "
                           "version = nextval('versions') WHERE id = %s",
        "insert customer": "INSERT INTO customers VALUES (%s, %s, NULL, 'NL', 0, NULL, now(), "
                           "nextval('versions'))",
        "delete customer": "DELETE FROM customers WHERE id = %s",
    }

    def __init__(self, server: PostgresServer) -> None:
        self.server = server
        self.dsn = server.create_database(DATABASE)

    @classmethod
    @contextlib.contextmanager
    def started(cls) -> Iterator[PostgresShop]:
        with PostgresServer().start() as server:
            yield cls(server)

    def describe(self) -> str:
        return f"PostgreSQL {self.server.bindir.parent.name} on port {self.server.port}"

    def replica_target(self) -> str:
        dsn = self.server.create_database(REPLICA)
        return f'[target]\nkind = "postgresql"\ndsn = {json.dumps(dsn)}\n'

    def create_shop(self, customers: int, orders: int) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(self.SCHEMA_SQL.encode())
            conn.execute(self.FILL_CUSTOMERS.encode(), (customers,))
            conn.execute(self.FILL_ORDERS.encode(), (customers, orders))
            conn.execute(b"ANALYZE customers, orders")

    @contextlib.contextmanager
    def load_session(self) -> Iterator[LoadSession]:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            yield _PgSession(conn)

    def source_rows(self, table: str) -> dict[str, str]:
        with psycopg.connect(self.dsn, options=libpq_options()) as conn:
            info = catalog.load_table(conn, table)
            if info is None:
                raise DemoFailed(f"table {table} is gone")
            types = catalog.load_types(conn, info.type_oids, catalog.builtin_types())
            codec = RowCodec(info.columns, info.type_oids, info.key_columns, types)
            columns = ", ".join(f'"{c}"' for c in info.columns)
            result = conn.execute(f"SELECT {columns} FROM {table}".encode()).pgresult
            assert result is not None
            rows: dict[str, str] = {}
            for r in range(result.ntuples):
                values = tuple(None if (v := result.get_value(r, c)) is None else v.decode()
                               for c in range(result.nfields))
                rows[codec.key(values)] = codec.row(values)
            return rows

    def log_end(self) -> tuple[str, tuple[int, ...]]:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            row = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()
        assert row is not None
        return str(row[0]), (parse_lsn(str(row[0])),)

    def checkpoint_position(self, checkpoint: str) -> tuple[int, ...]:
        return (parse_lsn(checkpoint),)

    def streaming(self, checkpoint: str) -> str:
        return f"streaming from slot dblog_{SOURCE}"

    def client(self, sql: str | None = None) -> str:
        psql = shutil.which("psql") or str(self.server.bindir / "psql")
        command = f"{psql} {shlex.quote(self.server.dsn(dbname=DATABASE))}"
        return command if sql is None else f'{command} -c "{sql}"'


class _PgSession:
    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self.conn = conn

    def transaction(self) -> contextlib.AbstractContextManager[object]:
        return self.conn.transaction()

    def execute(self, sql: str, params: Sequence[object]) -> None:
        self.conn.execute(sql.encode(), params)


class MariaDBShop(Shop):
    kind = "mariadb"
    label = "MariaDB"
    server_note = "binlog_format=ROW"
    shop_note = "InnoDB, binlog_row_image=FULL"
    log_name = "binlog position"
    customers = f"{DATABASE}.customers"
    orders = f"{DATABASE}.orders"

    # A MariaDB JSON column is a LONGTEXT (its text as written), an ENUM is its member, a
    # TIMESTAMP is read in UTC: the codec's dump and binlog paths must agree on each.
    SCHEMA_SQL = (
        "CREATE SEQUENCE versions",
        """CREATE TABLE customers (
    id          bigint PRIMARY KEY,
    name        varchar(100) NOT NULL,
    email       varchar(200),
    country     char(2) NOT NULL,
    balance     decimal(12, 2) NOT NULL,
    tags        json,
    created_at  datetime(6) NOT NULL,
    version     bigint NOT NULL
)""",
        """CREATE TABLE orders (
    id           bigint PRIMARY KEY,
    customer_id  bigint NOT NULL,
    status       enum('new', 'paid', 'shipped', 'delivered', 'returned', 'lost') NOT NULL,
    amount       decimal(10, 2) NOT NULL,
    items        json NOT NULL,
    note         varchar(200),
    created_at   timestamp(6) NOT NULL,
    updated_at   timestamp(6) NOT NULL,
    version      bigint NOT NULL
)""",
    )

    # seq_1_to_<n> is MariaDB's Sequence engine; the counts are formatted in (integers).
    FILL_CUSTOMERS = """
INSERT INTO customers
SELECT seq, CONCAT('customer ', seq),
       IF(seq % 7 = 0, NULL, CONCAT('c', seq, '@example.com')),
       ELT(1 + seq % 5, 'DE', 'FR', 'US', 'JP', 'BR'),
       ROUND((seq % 1000) * 1.37, 2),
       IF(seq % 3 = 0, JSON_ARRAY('vip', 'café'), NULL),
       TIMESTAMP '2024-01-01 00:00:00' + INTERVAL seq MINUTE,
       NEXT VALUE FOR versions
FROM seq_1_to_{customers}
"""

    FILL_ORDERS = """
INSERT INTO orders
SELECT seq, 1 + seq % {customers},
       ELT(1 + seq % 4, 'new', 'paid', 'shipped', 'delivered'),
       ROUND((seq % 500) + 0.99, 2),
       JSON_OBJECT('sku', CONCAT('SKU-', seq % 97), 'qty', 1 + seq % 5),
       IF(seq % 11 = 0, 'gift 🎁', NULL),
       TIMESTAMP '2024-06-01 00:00:00' + INTERVAL seq * 10 SECOND,
       TIMESTAMP '2024-06-01 00:00:00' + INTERVAL seq * 10 SECOND,
       NEXT VALUE FOR versions
FROM seq_1_to_{orders}
"""

    statements: ClassVar[Mapping[str, str]] = {
        "insert order": "INSERT INTO orders VALUES (%s, %s, 'new', %s, %s, NULL, "
                        "CURRENT_TIMESTAMP(6), CURRENT_TIMESTAMP(6), NEXT VALUE FOR versions)",
        "update order": "UPDATE orders SET status = %s, amount = amount + 1.25, "
                        "updated_at = CURRENT_TIMESTAMP(6), version = NEXT VALUE FOR versions "
                        "WHERE id = %s",
        "delete order": "DELETE FROM orders WHERE id = %s",
        "change order key": "UPDATE orders SET id = %s, version = NEXT VALUE FOR versions "
                            "WHERE id = %s",
        "update customer": "UPDATE customers SET balance = balance - 0.50, tags = %s, "
                           "version = NEXT VALUE FOR versions WHERE id = %s",
        "insert customer": "INSERT INTO customers VALUES (%s, %s, NULL, 'NL', 0, NULL, "
                           "UTC_TIMESTAMP(6), NEXT VALUE FOR versions)",
        "delete customer": "DELETE FROM customers WHERE id = %s",
    }

    def __init__(self, server: MariaDBServer) -> None:
        self.server = server
        server.create_database(DATABASE)
        self.dsn = server.url()

    def replica_target(self) -> str:
        renames = ", ".join(f'"{t}" = "{REPLICA}.{t.split(".")[1]}"' for t in self.tables)
        return (f'[target]\nkind = "mariadb"\ndsn = {json.dumps(self.dsn)}\n'
                f'tables = {{ {renames} }}\n')

    @classmethod
    @contextlib.contextmanager
    def started(cls) -> Iterator[MariaDBShop]:
        with MariaDBServer().start() as server:
            yield cls(server)

    def _connect(self) -> Any:
        return pymysql.connect(**self.server.connect_args(DATABASE))

    def describe(self) -> str:
        with self._connect() as conn, conn.cursor() as cursor:
            cursor.execute("SELECT VERSION()")
            version = str(cursor.fetchone()[0]).split("-")[0]
        return f"MariaDB {version} on port {self.server.port}"

    def create_shop(self, customers: int, orders: int) -> None:
        with self._connect() as conn, conn.cursor() as cursor:
            for statement in self.SCHEMA_SQL:
                cursor.execute(statement)
            cursor.execute(self.FILL_CUSTOMERS.format(customers=int(customers)))
            cursor.execute(self.FILL_ORDERS.format(customers=int(customers),
                                                   orders=int(orders)))
            cursor.execute("ANALYZE TABLE customers, orders")
            cursor.fetchall()

    @contextlib.contextmanager
    def load_session(self) -> Iterator[LoadSession]:
        with self._connect() as conn:
            yield _MySession(conn)

    def tags(self, tags: list[str] | None) -> object:
        return None if tags is None else json.dumps(tags, ensure_ascii=False)

    def source_rows(self, table: str) -> dict[str, str]:
        # The worker's dump path: its connection options, select list and codec.
        database, name = table.split(".", 1)
        args = mysql_url_args(self.dsn)
        with pymysql.connect(**args, **dump_connection_options()) as conn, \
                conn.cursor() as cursor:
            cursor.execute(COLUMNS_SQL, (database, name))
            columns = [column_from_information_schema(r) for r in cursor.fetchall()]
            cursor.execute(KEY_COLUMNS_SQL, (database, name))
            key = [str(r[0]) for r in cursor.fetchall()]
            if not columns or not key:
                raise DemoFailed(f"table {table} is gone")
            codec = MyRowCodec(columns, key)
            cursor.execute(f"SELECT {select_list(columns)} FROM `{database}`.`{name}`")
            return dict(codec.key_row_from_dump(cells) for cells in cursor.fetchall())

    def log_end(self) -> tuple[str, tuple[int, ...]]:
        with self._connect() as conn, conn.cursor() as cursor:
            cursor.execute("SHOW MASTER STATUS")
            file, pos = cursor.fetchone()[:2]
        return f"{file}:{pos}", (file_number(str(file)), int(pos))

    def checkpoint_position(self, checkpoint: str) -> tuple[int, ...]:
        position = BinlogCheckpoint.decode(checkpoint).position
        return (position.major, position.minor)

    def streaming(self, checkpoint: str) -> str:
        start = BinlogCheckpoint.decode(checkpoint)
        return (f"reading the binary log from {start.file}:{start.pos} as replica server_id "
                f"{default_server_id(SOURCE)}")

    def client(self, sql: str | None = None) -> str:
        mariadb = shutil.which("mariadb") or "mariadb"
        command = f"{mariadb} -h 127.0.0.1 -P {self.server.port} -u root {DATABASE}"
        return command if sql is None else f'{command} -e "{sql}"'


class _MySession:
    def __init__(self, conn: Any) -> None:
        self.conn = conn

    @contextlib.contextmanager
    def transaction(self) -> Iterator[object]:
        self.conn.begin()
        try:
            yield self.conn
        except BaseException:
            self.conn.rollback()
            raise
        self.conn.commit()

    def execute(self, sql: str, params: Sequence[object]) -> None:
        with self.conn.cursor() as cursor:
            cursor.execute(sql, tuple(params))


SHOPS: dict[str, type[Shop]] = {PostgresShop.kind: PostgresShop, MariaDBShop.kind: MariaDBShop}


# -- the write load ---------------------------------------------------------------------


@dataclass
class LoadStats:
    transactions: int = 0
    statements: Counter[str] = field(default_factory=Counter)


class ShopLoad(threading.Thread):
    """Random writes to both tables, in transactions of one to four statements.

    Every write sets ``version`` from one sequence, so along the source's history the
    versions of a key only grow: the replay checks that they do along the output too.
    """

    def __init__(self, shop: Shop, customers: int, orders: int, seed: int) -> None:
        super().__init__(name="shop-load", daemon=True)
        self.shop = shop
        self.random = random.Random(seed)
        self.customers = customers
        self.orders = orders
        self.next_customer = customers + 1
        self.next_order = orders + 1
        self.stats = LoadStats()
        self.stop_event = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with self.shop.load_session() as session:
                while not self.stop_event.is_set():
                    with session.transaction():
                        for _ in range(self.random.choice((1, 1, 2, 4))):
                            self._statement(session)
                    self.stats.transactions += 1
                    time.sleep(0.001)
        except BaseException as exc:  # reported by stop()
            self.error = exc

    def _statement(self, session: LoadSession) -> None:
        rnd = self.random
        order = rnd.randint(1, self.next_order - 1)
        customer = rnd.randint(1, self.next_customer - 1)
        action = rnd.random()
        params: tuple[object, ...]
        if action < 0.15:
            kind = "insert order"
            params = (self.next_order, customer, rnd.randint(100, 99_999) / 100,
                      json.dumps({"sku": f"SKU-{rnd.randint(1, 97)}", "qty": rnd.randint(1, 5)}))
            self.next_order += 1
        elif action < 0.60:
            kind = "update order"
            params = (rnd.choice(("paid", "shipped", "delivered", "returned")), order)
        elif action < 0.70:
            kind = "delete order"
            params = (order,)
        elif action < 0.75:
            kind = "change order key"
            params = (self.next_order, order)
            self.next_order += 1
        elif action < 0.95:
            kind = "update customer"
            params = (self.shop.tags(rnd.choice((None, ["vip"], ["new", "ünïcode ✓"]))),
                      customer)
        elif action < 0.98:
            kind = "insert customer"
            params = (self.next_customer, f"customer {self.next_customer}")
            self.next_customer += 1
        else:
            kind = "delete customer"
            params = (customer,)
        session.execute(self.shop.statements[kind], params)
        self.stats.statements[kind] += 1

    def stop(self) -> None:
        self.stop_event.set()
        self.join(30)
        if self.error is not None:
            raise DemoFailed(f"the write load failed: {self.error!r}")


# -- checking the output ------------------------------------------------------------------


@dataclass
class Replayed:
    rows: dict[str, str] = field(default_factory=dict)
    events: int = 0
    log_events: int = 0
    dump_rows: Counter[str] = field(default_factory=Counter)
    ops: Counter[str] = field(default_factory=Counter)
    segments: int = 0
    out_of_order: int = 0
    time_travel: list[str] = field(default_factory=list)


def replay(landing: Path, table: str) -> Replayed:
    """Apply the table's landed events in position order; watch every key's version."""
    zone = LandingZone(landing, SOURCE)
    result = Replayed(segments=len(zone.segments(table)))
    events = read_events(zone, table)
    positions = [str(e["position"]) for e in events]
    result.out_of_order = sum(1 for a, b in itertools.pairwise(positions) if b < a)
    events.sort(key=lambda e: str(e["position"]))
    seen: dict[str, tuple[int, bool]] = {}  # key -> (last version, deleted)
    for event in events:
        op, key = str(event["op"]), event["key"]
        result.events += 1
        result.ops[op] += 1
        if event["origin"] == "dump":
            result.dump_rows[str(event["dump_id"])] += 1
        else:
            result.log_events += 1
        if op == "t":
            result.rows.clear()
            seen.clear()
            continue
        assert isinstance(key, str)
        if op == "d":
            result.rows.pop(key, None)
            if event["before"]:
                seen[key] = (int(json.loads(str(event["before"]))["version"]), True)
            continue
        after = str(event["after"])
        version = int(json.loads(after)["version"])
        if key in seen:
            previous, deleted = seen[key]
            if version < previous or (deleted and version == previous):
                result.time_travel.append(
                    f"{key}: {op} of version {version} at {event['position']} after "
                    f"{'the delete of ' if deleted else ''}version {previous}")
        seen[key] = (version, False)
        result.rows[key] = after
    return result


@dataclass
class TableCheck:
    table: str
    source: int
    output: int
    missing: int
    extra: int
    different: int
    replayed: Replayed

    @property
    def converged(self) -> bool:
        return (not (self.missing or self.extra or self.different)
                and not self.replayed.time_travel and not self.replayed.out_of_order)


def check_table(shop: Shop, landing: Path, table: str) -> TableCheck:
    expected = shop.source_rows(table)
    replayed = replay(landing, table)
    got = replayed.rows
    different = sum(1 for k, row in expected.items() if k in got and got[k] != row)
    return TableCheck(
        table=table, source=len(expected), output=len(got),
        missing=sum(1 for k in expected if k not in got),
        extra=sum(1 for k in got if k not in expected),
        different=different, replayed=replayed,
    )


def wait_drained(state: StateStore, shop: Shop, dblog: Dblog, timeout: float = 60) -> str:
    """Wait until the saved checkpoint passes the source's log position of now."""
    target, end = shop.log_end()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        dblog.check_worker()
        saved = state.checkpoint()
        if saved is not None and shop.checkpoint_position(saved) >= end:
            return target
        time.sleep(0.1)
    raise DemoFailed(f"the checkpoint did not reach {target} within {timeout:.0f} s"
                     + dblog.worker_log_tail())


def wait_worker_ready(state: StateStore, dblog: Dblog, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        dblog.check_worker()
        if state.status() and state.checkpoint() is not None:
            return
        time.sleep(0.1)
    raise DemoFailed(f"the worker did not report within {timeout:.0f} s"
                     + dblog.worker_log_tail())


# -- the demo ---------------------------------------------------------------------------


def run(options: Options) -> int:
    started = time.monotonic()
    workdir = options.workdir or Path(tempfile.mkdtemp(prefix="dblog-demo-"))
    workdir.mkdir(parents=True, exist_ok=True)
    landing = workdir / "landing"
    if landing.exists():
        shutil.rmtree(landing)
    config = workdir / "worker.toml"

    kind = SHOPS[options.source]
    heading(f"starting a throwaway {kind.label} ({kind.server_note}) and Redis")
    with kind.started() as shop, RedisServer().start() as redis_server:
        say(f"   {shop.describe()}, Redis on port {redis_server.port}")

        heading(f"creating the shop: {number(options.customers)} customers, "
                f"{number(options.orders)} orders ({shop.shop_note})")
        shop.create_shop(options.customers, options.orders)
        write_config(config, shop, redis_server.url, landing)
        say(f"   worker configuration: {config}")

        dblog = Dblog(config, workdir)
        state = StateStore(redis_server.url, SOURCE)
        load = ShopLoad(shop, options.customers, options.orders, options.seed)
        try:
            return demo(options, started, shop, redis_server, dblog, state, load, landing,
                        workdir)
        finally:
            if load.is_alive():
                load.stop_event.set()
                load.join(30)
            failing = sys.exc_info()[0] is not None
            code = dblog.stop_worker()
            if code not in (None, 0) and not failing:
                say(f"   the worker exited with {code}" + dblog.worker_log_tail())
            state.close()
            heading(f"stopping {shop.label} and Redis")


def demo(options: Options, started: float, shop: Shop, redis_server: RedisServer,
         dblog: Dblog, state: StateStore, load: ShopLoad, landing: Path, workdir: Path) -> int:
    heading("checking the source")
    dblog.run("preflight")

    heading("starting the worker: dblog run")
    dblog.start_worker()
    wait_worker_ready(state, dblog)
    say(f"   {shop.streaming(state.checkpoint() or '')}; log: {dblog.log_path}")

    heading(f"starting the live write load ({options.warmup_s:.0f} s before the dump)")
    load.start()
    time.sleep(options.warmup_s)
    say(f"   {number(load.stats.transactions)} transactions so far")

    heading("dumping every table under the load, in watermark windows")
    output = dblog.run("dump", "--all", "--chunk-size", str(options.chunk_size))
    full_dump = output.split()[0]
    dblog.run("wait", full_dump, "--timeout", "180", stream=True, timeout=200)

    heading("dumping some customers by primary key (two of them never existed)")
    keys = sorted(random.Random(options.seed).sample(range(1, options.customers + 1), 5))
    keys += [MISSING_BASE + 1, MISSING_BASE + 2]
    output = dblog.run("dump", "--table", shop.customers, "--keys", json.dumps(keys))
    key_dump = output.split()[0]
    dblog.run("wait", key_dump, "--timeout", "120", stream=True, timeout=140)
    dblog.run("show", key_dump)
    missing_keys = json.loads(dblog.run("show", key_dump, "--json", show=False))["missing_keys"]

    time.sleep(1.0)  # a little more load after the dumps
    heading("stopping the load; waiting for the worker to drain the log")
    load.stop()
    target = wait_drained(state, shop, dblog)
    say(f"   {number(load.stats.transactions)} transactions, "
        f"{number(sum(load.stats.statements.values()))} row writes: "
        + ", ".join(f"{n} {kind}" for kind, n in sorted(load.stats.statements.items())))
    say(f"   the worker's checkpoint {state.checkpoint()} has reached the source's "
        f"{shop.log_name} {target}")

    heading("replaying the landing zone in position order and comparing with the source")
    checks = [check_table(shop, landing, table) for table in shop.tables]
    progress = {r.id: state.progress(r.id) for r in state.list_requests()}
    requests = {r.id: r for r in state.list_requests()}
    status = state.status()

    heading("merging the landing zone into target tables with Spark: dblog merge")
    with dblog.config.open("a") as config_file:
        config_file.write("\n# Added by the demo before the merge (docs/merge.md).\n"
                          + shop.replica_target())
    say(f"   the targets: database {REPLICA} on the same server")
    merge_started = time.monotonic()
    dblog.run("merge", stream=True, timeout=600)
    merge_seconds = time.monotonic() - merge_started

    heading("verifying the target tables against the source: dblog verify")
    verify = json.loads(dblog.run("verify", "--json", show=False, check=False, timeout=300))
    for table in verify["tables"]:
        say(f"   {table['table']} -> {table['target_table']}: {number(table['source_rows'])} "
            f"rows, {table['ranges']} ranges, {len(table['missing']) + len(table['extra'])}"
            f" missing or extra, {len(table['changed'])} changed: "
            + ("EQUAL" if table["equal"] else "DIFFERENT"))
    verified = bool(verify["equal"])
    say(f"   merged and verified {REPLICA}: " + ", ".join(
        f"{t['target_table']} {number(t['target_rows'])} rows" for t in verify["tables"])
        + f" (merge {merge_seconds:.1f} s, Spark start-up included)")

    summary(options, started, checks, progress, requests, status, full_dump, key_dump,
            missing_keys, landing, dblog)
    converged = all(c.converged for c in checks)
    dumps_ok = all(r.state is RequestState.COMPLETED for r in requests.values())
    if converged and dumps_ok and verified:
        say("\nRESULT: converged: replaying the landing zone in position order gives exactly "
            "the source tables, and `dblog verify` finds the merged target tables equal to them")
    else:
        say("\nRESULT: NOT converged" + ("" if dumps_ok else " (a dump did not complete)")
            + ("" if verified else " (dblog verify found differences)"))
    if options.keep:
        keep_running(shop, redis_server, dblog, workdir)
    return 0 if converged and dumps_ok and verified else 1


def summary(options: Options, started: float, checks: Sequence[TableCheck],
            progress: dict[str, dict[str, TableProgress]], requests: dict[str, Any],
            status: dict[str, str], full_dump: str, key_dump: str,
            missing_keys: list[list[str]], landing: Path, dblog: Dblog) -> None:
    heading("summary")
    total = sum(c.replayed.events for c in checks)
    logged = sum(c.replayed.log_events for c in checks)
    dumped = sum(sum(c.replayed.dump_rows.values()) for c in checks)
    segments = sum(c.replayed.segments for c in checks)
    windows = sum(p.chunks for tables in progress.values() for p in tables.values())
    selected = sum(p.selected for tables in progress.values() for p in tables.values())
    dropped = sum(p.dropped for tables in progress.values() for p in tables.values())
    say(f"   events captured     {number(total)} in {segments} Parquet segments: "
        f"{number(logged)} from the log, {number(dumped)} dump rows")
    say(f"   dump windows        {windows} (LW write, one chunk SELECT, HW write each); "
        f"{number(selected)} rows selected")
    say(f"   dropped in windows  {number(dropped)} chunk rows whose key the log changed "
        "between LW and HW (the log event stands instead)")
    say(f"   worker              {status.get('windows', '?')} windows this session, "
        f"{number(int(status.get('events_emitted', '0') or 0))} events made durable, "
        f"lag {status.get('lag_bytes', '?')} bytes")
    found = requests[key_dump].key_count - len(missing_keys)
    say(f"   primary-key dump    {key_dump}: {found} keys found and emitted, "
        f"{len(missing_keys)} reported missing: "
        + ", ".join(", ".join(k) if len(k) == 1 else json.dumps(k) for k in missing_keys))
    say("")
    header = ("TABLE", "SOURCE ROWS", "OUTPUT ROWS", "LOG EVENTS", "DUMP ROWS", "WINDOWS",
              "DROPPED", "RESULT")
    rows = [header]
    for check in checks:
        table_windows = sum(t[check.table].chunks for t in progress.values() if check.table in t)
        table_dropped = sum(t[check.table].dropped for t in progress.values()
                            if check.table in t)
        rows.append((
            check.table, number(check.source), number(check.output),
            number(check.replayed.log_events), number(sum(check.replayed.dump_rows.values())),
            str(table_windows), number(table_dropped),
            "converged" if check.converged else "DIFFERENT",
        ))
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    for r in rows:
        say("   " + "  ".join(cell.ljust(w) if i == 0 else cell.rjust(w)
                              for i, (cell, w) in enumerate(zip(r, widths, strict=True))))
    for check in checks:
        if not check.converged:
            say(f"   {check.table}: {check.missing} rows missing from the output, "
                f"{check.extra} extra, {check.different} with other values, "
                f"{check.replayed.out_of_order} events out of position order")
            for line in check.replayed.time_travel[:5]:
                say(f"   time travel: {line}")
    if all(not c.replayed.time_travel for c in checks):
        say("   no time travel: along the output, every key's version only grows")
    say("")
    say(f"   landing zone        {landing / SOURCE}  "
        f"(docs/landing-format.md; dblog_worker.landing.read_events reads it)")
    say(f"   runtime             {time.monotonic() - started:.1f} s")
    say("")
    dblog.run("list")


def keep_running(shop: Shop, redis_server: RedisServer, dblog: Dblog, workdir: Path) -> None:
    heading("still running (--keep); Ctrl-C stops everything")
    cli = dblog.shown
    say(f"   {shop.label:<12} {shop.client()}")
    say(f"   Redis        redis-cli -p {redis_server.port} --scan --pattern 'dblog:v1:{SOURCE}:*'")
    say(f"   config       {dblog.config}")
    say(f"   worker log   {dblog.log_path}")
    say(f"   landing      {workdir / 'landing' / SOURCE}")
    say("")
    say("   Try, in another terminal:")
    say(f"     export DBLOG_CONFIG={shlex.quote(str(dblog.config))} "
        f"PATH={shlex.quote(str(dblog.bin))}:$PATH")
    say(f"     {cli} status")
    say(f"     {cli} list")
    say("     " + shop.client("UPDATE orders SET status = 'lost' WHERE id = 1"))
    say(f"     {cli} dump --table {shop.orders} --chunk-size 500 --delay-ms 200")
    say(f"     {cli} show dump-3; {cli} pause dump-3; {cli} resume dump-3")
    say(f"     {cli} wait dump-3")
    say(f"     {cli} dump --table {shop.customers} --keys '[1, 2, 3]' --wait")
    say("")
    with contextlib.suppress(KeyboardInterrupt):
        while True:
            dblog.check_worker()
            time.sleep(1.0)
    say("")


def main(argv: Sequence[str] | None = None) -> int:
    options = parse_args(argv)
    # SIGINT (also when started in the background) and SIGTERM are a Ctrl-C: the cleanup
    # in run() stops the worker and the servers.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        return run(options)
    except DemoFailed as exc:
        say(f"\nRESULT: FAILED: {exc}")
        return 1
    except KeyboardInterrupt:
        say("\ninterrupted")
        return 130


if __name__ == "__main__":
    sys.exit(main())
