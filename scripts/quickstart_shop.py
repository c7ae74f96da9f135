"""The quickstart's shop: source databases under a live write load, and the checks of the output.

Used by ``scripts/quickstart.py``. Per source kind, one class knows everything that differs
between PostgreSQL and MariaDB (:class:`PostgresShop`, :class:`MariaDBShop`): the throwaway
server (``tests/services.py``), the schema and its rows, the SQL of the write load, the
source rows in the worker's canonical encoding, the log position, the target database of the
merge, and how a user reaches the server. Around them: the write load (:class:`ShopLoad`),
the replay of the landing zone in position order (:func:`check_table`), and the child
processes of the quickstart (:class:`Child`: own process group, log file, stopped with every
process it started).
"""

from __future__ import annotations

import abc
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
import threading
import time
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol

import psutil

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # tests/services.py starts the throwaway servers

import psycopg  # noqa: E402
import pymysql  # noqa: E402

from dblog_worker.landing.parquet import read_events  # noqa: E402
from dblog_worker.landing.sink import LandingRoot, open_reader  # noqa: E402
from dblog_worker.mysql.catalog import KEY_COLUMNS_SQL  # noqa: E402
from dblog_worker.mysql.checkpoint import BinlogCheckpoint, file_number  # noqa: E402
from dblog_worker.mysql.column_model import (  # noqa: E402
    COLUMNS_SQL,
    column_from_information_schema,
    select_list,
)
from dblog_worker.mysql.connection import dump_connection_options  # noqa: E402
from dblog_worker.mysql.options import default_server_id  # noqa: E402
from dblog_worker.mysql.options import url_args as mysql_url_args  # noqa: E402
from dblog_worker.mysql.values import MyRowCodec  # noqa: E402
from dblog_worker.pg import catalog  # noqa: E402
from dblog_worker.pg.pgoutput import parse_lsn  # noqa: E402
from dblog_worker.pg.values import RowCodec, libpq_options  # noqa: E402
from tests.services import MariaDBServer, PostgresServer  # noqa: E402

DATABASE = "shop"
REPLICA = "shop_replica"  # the merge's target database, on the source's server
RUN_MARKER = "DBLOG_QUICKSTART_RUN"  # in the environment of every process the quickstart starts


# -- output ---------------------------------------------------------------------------


def heading(text: str) -> None:
    print(f"\n== {text}", flush=True)


def say(text: str = "") -> None:
    print(text, flush=True)


def indent(text: str, prefix: str = "   ") -> str:
    return "\n".join(prefix + line for line in text.rstrip("\n").splitlines())


def number(value: int) -> str:
    return f"{value:,}"


def seconds(value: float) -> str:
    """``42.0 s``, ``3 min 05 s``."""
    if value < 100:
        return f"{value:.1f} s"
    minutes, rest = divmod(round(value), 60)
    return f"{minutes} min {rest:02d} s"


def tail(path: Path, lines: int = 30) -> str:
    """The last lines of a log file, indented, under its path."""
    try:
        text = path.read_text(errors="replace")
    except OSError as exc:
        return f"\n   {path}: {exc.strerror}"
    last = text.splitlines()[-lines:]
    return f"\n   last lines of {path}:\n" + indent("\n".join(last) or "(empty)", "     ")


class Failed(Exception):
    """Something on the way did not work; the message says what, and where to look."""


# -- child processes ----------------------------------------------------------------------


def _die_with_parent() -> None:
    """In a child process: get SIGTERM when the quickstart dies (Linux; else nothing)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG


class Child:
    """A long-running process of the quickstart: a worker, an Airflow component.

    It runs in its own session (a Ctrl-C in the terminal reaches the quickstart only, which
    stops it in order), gets SIGTERM if the quickstart dies, and writes its output to
    ``log``. :meth:`stop` ends it and every process below it: Airflow's task runners and
    the ``spark-submit`` they start make process groups of their own, so the whole tree is
    looked up first.
    """

    def __init__(self, name: str, argv: Sequence[str], log: Path, env: Mapping[str, str],
                 cwd: Path = ROOT) -> None:
        self.name = name
        self.log = log
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("ab") as out:
            self.proc = subprocess.Popen(
                list(argv), env=dict(env), cwd=cwd, stdin=subprocess.DEVNULL, stdout=out,
                stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=_die_with_parent)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def check(self) -> None:
        """Fail when the process has exited."""
        if not self.alive():
            raise Failed(f"{self.name} exited with {self.proc.returncode}" + tail(self.log))

    def wait(self, timeout: float) -> int:
        """Wait for the process to exit; fail with its log after ``timeout`` seconds."""
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise Failed(f"{self.name} did not finish within {timeout:.0f} s"
                         + tail(self.log)) from None

    def stop(self, timeout: float = 30.0) -> int | None:
        """SIGTERM to the process and everything below it; SIGKILL what is left after
        ``timeout`` seconds. Returns the exit status (None if it had to be killed)."""
        if not self.alive():
            stop_tree(psutil_children(self.proc.pid), timeout=5.0)
            return self.proc.returncode
        tree = [*psutil_children(self.proc.pid)]
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            code: int | None = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            code = None
        stop_tree(tree + psutil_children(self.proc.pid), timeout=5.0)
        return code


def psutil_children(pid: int) -> list[psutil.Process]:
    with contextlib.suppress(psutil.Error):
        return list(psutil.Process(pid).children(recursive=True))
    return []


def stop_tree(processes: Sequence[psutil.Process], timeout: float) -> int:
    """SIGTERM the processes that still run, SIGKILL those left after ``timeout``."""
    running = []
    for process in processes:
        with contextlib.suppress(psutil.Error):
            if process.is_running():
                process.terminate()
                running.append(process)
    _, left = psutil.wait_procs(running, timeout=timeout)
    for process in left:
        with contextlib.suppress(psutil.Error):
            process.kill()
    psutil.wait_procs(left, timeout=5.0)
    return len(running)


def leftover_processes(run_id: str) -> list[psutil.Process]:
    """Processes whose environment carries this run's marker (any the quickstart started,
    however deep), but not this one."""
    found = []
    for process in psutil.process_iter():
        if process.pid == os.getpid():
            continue
        with contextlib.suppress(psutil.Error):
            if process.environ().get(RUN_MARKER) == run_id:
                found.append(process)
    return found


# -- the worker's configuration ------------------------------------------------------------


def write_config(path: Path, shop: Shop, redis_url: str, landing: Path, *,
                 lake: tuple[str, str, str] | None = None) -> None:
    """The worker's configuration; ``lake``: the ``[landing]`` options, ``[target]`` and
    ``[merge]`` sections of the quickstart on the object store (scripts/quickstart_lake.py)."""
    if lake is not None:
        landing_options, target, merge = lake
    else:
        landing_options = f"path = {json.dumps(str(landing))}\nflush_interval_s = 1.0\n"
        target = shop.target_section()
        merge = """# No Spark UI (it would take port 4040); a few shuffle partitions for small
# batches; a JVM that compiles less (C1 only) and collects serially: each merge is short.
[merge.spark_conf]
"spark.ui.enabled" = "false"
"spark.sql.shuffle.partitions" = "4"
"spark.driver.extraJavaOptions" = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
"""
    path.write_text(f"""\
# Written by scripts/quickstart.py. Every option: docs/configuration.md.
[source]
name = "{shop.source}"
kind = "{shop.kind}"
dsn = {json.dumps(shop.dsn)}
tables = {json.dumps(list(shop.tables))}

[redis]
url = {json.dumps(redis_url)}

[landing]
{landing_options}
[worker]
heartbeat_interval_s = 1.0
status_interval_s = 0.5
control_interval_s = 0.1
reconnect_max_s = 2.0

# The worker's HTTP API, on a free port of the loopback (the status in Redis says which).
[http]
listen = "127.0.0.1:0"

# The tables dblog merge writes to and dblog verify compares with (docs/merge.md).
{target}
{merge}""")


# -- the source databases: what differs per kind --------------------------------------------


class LoadSession(Protocol):
    """One connection of the write load, in autocommit between transactions."""

    def transaction(self) -> contextlib.AbstractContextManager[object]: ...

    def execute(self, sql: str, params: Sequence[object]) -> None: ...


class Shop(abc.ABC):
    """A started throwaway server of one kind with the shop database on it.

    Everything the story needs of the source database goes through here: the server and its
    shop, the SQL of the write load, the source rows in the worker's canonical encoding, the
    log position, the merge's target database, and how a user reaches them. The story itself
    is written once.
    """

    kind: ClassVar[str]  # the --source choice and the configuration's source.kind
    source: ClassVar[str]  # the configuration's source.name: Redis prefix, landing folder
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
    def target_section(self) -> str:
        """The ``[target]`` section: the database ``shop_replica`` on the same server."""

    def target_label(self, target_table: str) -> str:
        """A target table as the user finds it: ``shop_replica.customers``."""
        return target_table

    @property
    def tables(self) -> tuple[str, str]:
        return (self.customers, self.orders)

    @property
    @abc.abstractmethod
    def server_log(self) -> Path:
        """The server's log file (removed with the server)."""

    @abc.abstractmethod
    def describe(self) -> str:
        """``PostgreSQL 15 on port 5432``."""

    @abc.abstractmethod
    def create_shop(self, customers: int, orders: int) -> None:
        """Create the tables and the version sequence, fill the tables; create the target
        database."""

    @abc.abstractmethod
    def first_keys(self, table: str, count: int) -> list[int]:
        """The ``count`` smallest ids of a source table."""

    @abc.abstractmethod
    def corrupt_target(self, table: str, changed: int, deleted: int, copied: int,
                       extra: int) -> None:
        """Damage the target table: change a column of ``changed``, delete ``deleted``,
        insert ``extra`` as a copy of the row ``copied``."""

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
    def client(self, sql: str | None = None, database: str = DATABASE) -> str:
        """The shell command of the database's client on the shop (running ``sql``)."""


class PostgresShop(Shop):
    kind = "postgresql"
    label = "PostgreSQL"
    server_note = "wal_level=logical"
    shop_note = "REPLICA IDENTITY FULL"
    log_name = "WAL position"
    source = "shop_pg"
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

    @property
    def server_log(self) -> Path:
        path: Path = self.server.log_path
        return path

    def describe(self) -> str:
        return f"PostgreSQL {self.server.bindir.parent.name} on port {self.server.port}"

    def target_label(self, target_table: str) -> str:
        return f"{REPLICA}.{target_table}"  # the database, then schema.table

    def target_section(self) -> str:
        dsn = self.server.dsn(dbname=REPLICA)
        return f'[target]\nkind = "postgresql"\ndsn = {json.dumps(dsn)}\n'

    def create_shop(self, customers: int, orders: int) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(self.SCHEMA_SQL.encode())
            conn.execute(self.FILL_CUSTOMERS.encode(), (customers,))
            conn.execute(self.FILL_ORDERS.encode(), (customers, orders))
            conn.execute(b"ANALYZE customers, orders")
        self.server.create_database(REPLICA)

    def first_keys(self, table: str, count: int) -> list[int]:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            rows = conn.execute(f"SELECT id FROM {table} ORDER BY id LIMIT %s".encode(),
                                (count,)).fetchall()
        return [int(r[0]) for r in rows]

    def corrupt_target(self, table: str, changed: int, deleted: int, copied: int,
                       extra: int) -> None:
        with psycopg.connect(self.server.dsn(dbname=REPLICA)) as conn:
            counts = [
                conn.execute(f"UPDATE {table} SET name = 'corrupted' WHERE id = %s".encode(),
                             (changed,)).rowcount,
                conn.execute(f"DELETE FROM {table} WHERE id = %s".encode(), (deleted,)).rowcount,
            ]
            conn.execute(f"CREATE TEMPORARY TABLE extra AS SELECT * FROM {table} "
                         "WHERE id = %s".encode(), (copied,))
            conn.execute(b"UPDATE extra SET id = %s", (extra,))
            counts.append(conn.execute(f"INSERT INTO {table} SELECT * FROM extra".encode())
                          .rowcount)
        if counts != [1, 1, 1]:
            raise Failed(f"corrupting {REPLICA} {table} changed {counts} rows, not one each")

    @contextlib.contextmanager
    def load_session(self) -> Iterator[LoadSession]:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            yield _PgSession(conn)

    def source_rows(self, table: str) -> dict[str, str]:
        with psycopg.connect(self.dsn, options=libpq_options()) as conn:
            info = catalog.load_table(conn, table)
            if info is None:
                raise Failed(f"table {table} is gone")
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
        return f"streaming from slot dblog_{self.source}"

    def client(self, sql: str | None = None, database: str = DATABASE) -> str:
        psql = shutil.which("psql") or str(self.server.bindir / "psql")
        command = f"{psql} {shlex.quote(self.server.dsn(dbname=database))}"
        return command if sql is None else f'{command} -c "{sql}"'


class PostgresLakeShop(PostgresShop):
    """The PostgreSQL shop of ``--lake``: ``customers.tags`` is ``jsonb``, not ``text[]``
    (lake targets refuse array columns: docs/merge.md#lake-targets-iceberg-and-delta)."""

    SCHEMA_SQL = PostgresShop.SCHEMA_SQL.replace("tags        text[],", "tags        jsonb,")
    FILL_CUSTOMERS = PostgresShop.FILL_CUSTOMERS.replace(
        "ARRAY['vip', 'café']", "'[\"vip\", \"café\"]'::jsonb")

    def tags(self, tags: list[str] | None) -> object:
        return None if tags is None else json.dumps(tags, ensure_ascii=False)


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
    source = "shop_mariadb"
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

    def target_section(self) -> str:
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

    @property
    def server_log(self) -> Path:
        path: Path = self.server.log_path
        return path

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
        self.server.create_database(REPLICA)

    def first_keys(self, table: str, count: int) -> list[int]:
        database, name = table.split(".", 1)
        with self._connect() as conn, conn.cursor() as cursor:
            cursor.execute(f"SELECT id FROM `{database}`.`{name}` ORDER BY id LIMIT %s",
                           (count,))
            return [int(r[0]) for r in cursor.fetchall()]

    def corrupt_target(self, table: str, changed: int, deleted: int, copied: int,
                       extra: int) -> None:
        target = f"`{REPLICA}`.`{table.split('.', 1)[1]}`"
        with self._connect() as conn, conn.cursor() as cursor:
            counts = [
                cursor.execute(f"UPDATE {target} SET name = 'corrupted' WHERE id = %s",
                               (changed,)),
                cursor.execute(f"DELETE FROM {target} WHERE id = %s", (deleted,)),
            ]
            cursor.execute(f"CREATE TEMPORARY TABLE extra AS SELECT * FROM {target} "
                           "WHERE id = %s", (copied,))
            cursor.execute("UPDATE extra SET id = %s", (extra,))
            counts.append(cursor.execute(f"INSERT INTO {target} SELECT * FROM extra"))
        if counts != [1, 1, 1]:
            raise Failed(f"corrupting {REPLICA} {table} changed {counts} rows, not one each")

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
                raise Failed(f"table {table} is gone")
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
                f"{default_server_id(self.source)}")

    def client(self, sql: str | None = None, database: str = DATABASE) -> str:
        mariadb = shutil.which("mariadb") or "mariadb"
        command = f"{mariadb} -h 127.0.0.1 -P {self.server.port} -u root {database}"
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
            raise Failed(f"the write load failed: {self.error!r}")


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


def replay(landing: LandingRoot, source: str, table: str) -> Replayed:
    """Apply the table's landed events in position order; watch every key's version."""
    zone = open_reader(landing, source)
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


def check_table(shop: Shop, landing: LandingRoot, table: str) -> TableCheck:
    expected = shop.source_rows(table)
    replayed = replay(landing, shop.source, table)
    got = replayed.rows
    different = sum(1 for k, row in expected.items() if k in got and got[k] != row)
    return TableCheck(
        table=table, source=len(expected), output=len(got),
        missing=sum(1 for k in expected if k not in got),
        extra=sum(1 for k in got if k not in expected),
        different=different, replayed=replayed,
    )
