"""What the benchmarks share: options, throwaway servers, the worker as a child process.

Every benchmark runs in an :class:`Environment` for one source kind
(``Options.source``: ``postgresql`` or ``mariadb``): its own database server -- a
PostgreSQL cluster or a MariaDB server -- and Redis server (from ``tests.services``: free
ports, private temporary directories, removed at the end) and a work directory for
worker configurations, logs and the landing zone. PostgreSQL runs with ``fsync=off``
and ``full_page_writes=off`` as the test suite does, MariaDB with
``innodb_flush_log_at_trx_commit=2``, ``sync_binlog=0`` and no doublewrite (the test
suite's settings, the same trade); the worker's landing zone is written with fsync as
in production.

The worker runs as ``python -m dblog_worker run`` (:class:`WorkerRun`), one process per
source name (or several, leader and standbys, with ``instance``); a fresh source name gives
a fresh landing directory (and, on PostgreSQL, a fresh slot and publication; on MariaDB a
fresh replica id).
"""

from __future__ import annotations

import contextlib
import ctypes
import io
import json
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import psutil
import psycopg
import pyarrow.parquet as pq
import pymysql
import redis

from dblog_worker.cli import main as dblog_main
from dblog_worker.landing.parquet import LandingZone
from dblog_worker.landing.s3_objects import S3Location
from dblog_worker.landing.sink import LandingRoot, open_reader
from dblog_worker.mysql.checkpoint import BinlogCheckpoint, file_number
from dblog_worker.mysql.options import url_args as mysql_url_args
from dblog_worker.pg import cells
from dblog_worker.pg.pgoutput import parse_lsn
from tests.services import MariaDBServer, PostgresServer, RedisServer, find_pg_bindir

ROOT = Path(__file__).resolve().parents[1]
CHUNK_SIZE = 10_000
FLUSH_INTERVAL_S = 1.0
POSTGRES_NOTE = (
    "throwaway PostgreSQL from tests/services.py: fsync=off, full_page_writes=off, "
    "synchronous_commit=on, shared_buffers=128MB; the landing zone is fsynced"
)
MARIADB_NOTE = (
    "throwaway MariaDB from tests/services.py: binlog_format=ROW, binlog_row_image=FULL, "
    "binlog_row_metadata=FULL, innodb_flush_log_at_trx_commit=2, sync_binlog=0, "
    "innodb_doublewrite=0, innodb_buffer_pool_size=128M; the landing zone is fsynced"
)
POSTGRESQL = "postgresql"
MARIADB = "mariadb"
SOURCES = (POSTGRESQL, MARIADB)
MARIADB_DATABASE = "bench"

Result = dict[str, Any]


@dataclass(frozen=True)
class Options:
    rows: int = 1_000_000
    runs: int = 3
    quick: bool = False
    memory_rows: tuple[int, int] = (1_000_000, 5_000_000)
    idle_s: float = 30.0
    profile_dir: Path | None = None
    profile_gil: bool = False
    source: str = POSTGRESQL
    kills: int = 10
    masks: bool = False  # the workers mask columns of the benchmark tables (MASKS)
    # The test suite's smoke run (tests/bench): every path of each benchmark at the least
    # cost (smaller sizes and waits, no warm-ups, one Spark core); its figures mean nothing.
    tiny: bool = False


# ``--masks``: what the workers do to the 5-column benchmark tables' columns: the two most
# common masks (a hashed integer and text) and the two cheap ones. The HMAC key is set in
# the benchmark's environment, which the workers inherit.
MASK_KEY_ENV = "DBLOG_BENCH_COLUMN_KEY"
MASKS = f"""
[source.columns]
key_env = "{MASK_KEY_ENV}"

[source.columns."*.*"]
a = "hash"
b = "hash"
c = {{ mask = "masked" }}
d = "exclude"
"""


def die_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn``: the child gets SIGTERM when the benchmark process dies (Linux)."""
    if not sys.platform.startswith("linux"):
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl

    def preexec() -> None:
        prctl(1, int(signal.SIGTERM), 0, 0, 0)  # PR_SET_PDEATHSIG

    return preexec


def progress(message: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {message}", file=sys.stderr, flush=True)


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values))


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100), linear between the closest ranks."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def rounded(value: float, digits: int = 3) -> float:
    return round(value, digits)


# -- the machine -------------------------------------------------------------------


def _command_version(command: Sequence[str]) -> str:
    try:
        out = subprocess.run(command, capture_output=True, text=True, check=False, timeout=10)
    except OSError as exc:
        return f"unknown ({exc})"
    return out.stdout.strip() or out.stderr.strip()


@cache
def _static_machine(source: str) -> dict[str, Any]:
    model = "unknown"
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    redis_binary = shutil.which("redis-server") or "/usr/bin/redis-server"
    redis_version = re.search(r"v=(\S+)", _command_version([redis_binary, "--version"]))
    common = {
        "cpu_count": os.cpu_count(),
        "cpu_affinity": len(os.sched_getaffinity(0)),
        "cpu_model": model,
        "memory_mb": psutil.virtual_memory().total // 2**20,
        "kernel": platform.release(),
        "python": platform.python_version(),
    }
    redis_and_arrow = {
        "redis": redis_version[1] if redis_version else "unknown",
        "pyarrow": _package_version("pyarrow"),
    }
    if source == MARIADB:
        mariadbd = MariaDBServer().mariadbd
        return {
            **common,
            "mariadb": _command_version([mariadbd, "--version"]),
            **redis_and_arrow,
            "pymysql": _package_version("PyMySQL"),
            "mysql_replication": _package_version("mysql-replication"),
            "mariadb_settings": MARIADB_NOTE,
        }
    return {
        **common,
        "postgresql": _command_version([str(find_pg_bindir() / "postgres"), "--version"]),
        **redis_and_arrow,
        "psycopg": _package_version("psycopg"),
        "pg_cell_reader": cells.READER,  # the worker's reader of chunk cells (pg/cells.py)
        "postgres_settings": POSTGRES_NOTE,
    }


def _package_version(name: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return "unknown"


def machine(source: str = POSTGRESQL) -> dict[str, Any]:
    """Static facts plus the load average now (the machine is shared)."""
    return {**_static_machine(source), "loadavg_1m": rounded(os.getloadavg()[0], 2)}


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU time a server process has used so far: the process and its
    children, exited ones included (PostgreSQL's backends and walsenders are the
    postmaster's children, reaped by it; MariaDB is one process)."""
    server = psutil.Process(pid)
    times = server.cpu_times()
    seconds = float(times.user + times.system + times.children_user + times.children_system)
    for child in server.children(recursive=True):
        with contextlib.suppress(psutil.NoSuchProcess):
            child_times = child.cpu_times()
            seconds += float(child_times.user + child_times.system)
    return seconds


def emit(result: Result, out: Path | None) -> None:
    line = json.dumps(result)
    print(line, flush=True)
    if out is not None:
        with out.open("a") as f:
            f.write(line + "\n")


# -- servers -----------------------------------------------------------------------


class Environment:
    """A database server of ``options.source``'s kind, Redis and a work directory for one
    benchmark; all removed at exit.

    PostgreSQL: database ``bench``, tables in ``public``, ``dsn`` a libpq string.
    MariaDB: database ``bench`` (tables ``bench.<name>``), ``dsn`` the worker's
    ``mysql://root@127.0.0.1:PORT`` URL.
    """

    def __init__(self, name: str, options: Options) -> None:
        if options.source not in SOURCES:
            raise ValueError(f"unknown source kind {options.source!r}")
        self.name = name
        self.options = options
        self.kind = options.source
        self.postgres = PostgresServer()
        self.mariadb = MariaDBServer()
        self.redis = RedisServer()
        self.workdir = Path(tempfile.mkdtemp(prefix=f"dblog-bench-{name}-"))
        self.landing = self.workdir / "landing"
        self.workers: list[WorkerRun] = []
        self.dsn = ""

    @property
    def is_mariadb(self) -> bool:
        return self.kind == MARIADB

    def __enter__(self) -> Self:
        try:
            if self.is_mariadb:
                self.mariadb.start()
                self.mariadb.create_database(MARIADB_DATABASE)
                self.dsn = self.mariadb.url()
                port = self.mariadb.port
            else:
                self.postgres.start()
                self.dsn = self.postgres.create_database("bench")
                port = self.postgres.port
            self.redis.start()
        except BaseException:
            self.close()
            raise
        progress(f"{self.name}: {self.kind} on port {port}, redis on "
                 f"{self.redis.port}, work dir {self.workdir}")
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if exc is not None:
            for worker in self.workers:
                with contextlib.suppress(Exception):
                    progress(f"worker {worker.name} log tail:\n{worker.log_tail()}")
        self.close()

    def server_cpu_seconds(self) -> float:
        """User + system CPU time the database server has used so far (see
        :func:`process_cpu_seconds`)."""
        return process_cpu_seconds(self.mariadb.pid if self.is_mariadb else self.postgres.pid)

    def close(self) -> None:
        for worker in self.workers:
            worker.stop()
        self.postgres.stop()
        self.mariadb.stop()
        self.redis.stop()
        shutil.rmtree(self.workdir, ignore_errors=True)

    def table(self, name: str) -> str:
        """A benchmark table's qualified name: ``public.name`` or ``bench.name``."""
        return f"{MARIADB_DATABASE if self.is_mariadb else 'public'}.{name}"

    def connect(self) -> psycopg.Connection[tuple[Any, ...]]:
        """PostgreSQL: an autocommit connection to the database."""
        return psycopg.connect(self.dsn, autocommit=True)

    def mysql_args(self) -> dict[str, Any]:
        """MariaDB: ``pymysql.connect`` arguments (root, no database), as the worker's."""
        return mysql_url_args(self.dsn)

    def mysql_connect(self, **options: Any) -> Any:
        """MariaDB: an autocommit PyMySQL connection, current database ``bench``, UTC."""
        return pymysql.connect(**{
            **self.mysql_args(), "database": MARIADB_DATABASE, "autocommit": True,
            "init_command": "SET time_zone = '+00:00'", **options,
        })

    def redis_client(self) -> redis.Redis:
        return redis.Redis.from_url(self.redis.url, decode_responses=True)

    def worker(self, source: str, tables: Sequence[str], *,
               flush_interval_s: float = FLUSH_INTERVAL_S, instance: str = "",
               extra_config: str = "", source_config: str = "",
               landing: LandingRoot | None = None) -> WorkerRun:
        if self.options.masks:
            os.environ.setdefault(MASK_KEY_ENV, "the benchmarks' HMAC key: 32 bytes")
            source_config += MASKS
        run = WorkerRun(self, source, tables, flush_interval_s=flush_interval_s,
                        instance=instance, extra_config=extra_config,
                        source_config=source_config, landing=landing)
        self.workers.append(run)
        return run

    def log_position(self) -> tuple[int, int]:
        """The end of the source's log now: PostgreSQL (0, insert LSN), MariaDB (binlog
        file number, position), comparable with :meth:`WorkerRun.checkpoint_position`."""
        if self.is_mariadb:
            with self.mysql_connect() as conn, conn.cursor() as cursor:
                return mysql_log_position(cursor)
        with self.connect() as pg:
            row = pg.execute("SELECT pg_current_wal_insert_lsn()::text").fetchone()
            assert row is not None
            return 0, parse_lsn(str(row[0]))


def mysql_log_position(cursor: Any) -> tuple[int, int]:
    """(binlog file number, position) of ``SHOW MASTER STATUS``."""
    file, pos = mysql_master_status(cursor)
    return file_number(file), pos


def mysql_master_status(cursor: Any) -> tuple[str, int]:
    """(binlog file name, position) of ``SHOW MASTER STATUS``."""
    cursor.execute("SHOW MASTER STATUS")
    file, pos = cursor.fetchone()[:2]
    return str(file), int(pos)


# -- tables ------------------------------------------------------------------------

TABLE_COLUMNS = "id bigint, a integer, b text, c numeric(12,2), d timestamptz"
ROW_SELECT = (
    "SELECT g, ((g * 7919) %% 1000003)::int, substr(md5(g::text), 1, 20), "
    "round((g %% 100000) * 1.37, 2), timestamptz '2024-01-01 00:00:00+00' + g * interval '1 s' "
    "FROM generate_series(%s::bigint, %s::bigint) AS g"
)
MARIADB_TABLE_COLUMNS = (
    "id bigint PRIMARY KEY, a int, b varchar(20), c decimal(12,2), d timestamp(6) NULL"
)


def mariadb_row_select(first: int, last: int) -> str:
    """The MariaDB twin of :data:`ROW_SELECT`: rows ``first..last`` from the SEQUENCE
    engine's ``seq_<first>_to_<last>`` (the session's time zone must be UTC)."""
    return (
        "SELECT seq, (seq * 7919) % 1000003, substr(md5(seq), 1, 20), "
        "round((seq % 100000) * 1.37, 2), "
        "timestamp '2024-01-01 00:00:00' + interval seq second "
        f"FROM seq_{int(first)}_to_{int(last)}"
    )


def create_table(env: Environment, table: str, rows: int) -> None:
    """The 5-column benchmark table with ``rows`` rows (one INSERT ... SELECT).

    PostgreSQL: primary key and REPLICA IDENTITY FULL added after the load, vacuumed.
    MariaDB: InnoDB with the primary key, loaded with ``sql_log_bin = 0`` (the load is
    not in the binary log: no worker reads it, as workers start at the log's end)."""
    if env.is_mariadb:
        create_mariadb_table(env, table, rows)
        return
    started = time.monotonic()
    with env.connect() as conn:
        conn.execute(f"CREATE TABLE {table} ({TABLE_COLUMNS}) "
                     "WITH (autovacuum_enabled = off)".encode())
        if rows:
            conn.execute(f"INSERT INTO {table} {ROW_SELECT}".encode(), (1, rows))
        conn.execute(f"ALTER TABLE {table} ADD PRIMARY KEY (id)".encode())
        conn.execute(f"ALTER TABLE {table} REPLICA IDENTITY FULL".encode())
        conn.execute(f"VACUUM (ANALYZE, FREEZE) {table}".encode())
        size = conn.execute("SELECT pg_size_pretty(pg_total_relation_size(%s))",
                            (table,)).fetchone()
    progress(f"created {table}: {rows} rows, {size[0] if size else '?'}, "
             f"{time.monotonic() - started:.1f} s")


def create_mariadb_table(env: Environment, table: str, rows: int) -> None:
    started = time.monotonic()
    database, name = table.split(".", 1)
    step = 1_000_000  # one transaction per million rows: the undo log stays small
    with env.mysql_connect() as conn, conn.cursor() as cursor:
        cursor.execute(f"CREATE TABLE {table} ({MARIADB_TABLE_COLUMNS}) ENGINE=InnoDB")
        cursor.execute("SET SESSION sql_log_bin = 0")
        for first in range(1, rows + 1, step):
            cursor.execute(f"INSERT INTO {table} "
                           f"{mariadb_row_select(first, min(rows, first + step - 1))}")
        cursor.execute(f"ANALYZE TABLE {table}")
        cursor.fetchall()
        cursor.execute("SELECT data_length + index_length FROM information_schema.TABLES "
                       "WHERE table_schema = %s AND table_name = %s", (database, name))
        size = cursor.fetchone()
    progress(f"created {table}: {rows} rows, {int(size[0]) // 2**20 if size else '?'} MB, "
             f"{time.monotonic() - started:.1f} s")


def insert_rows(conn: psycopg.Connection[tuple[Any, ...]], table: str, first: int,
                last: int) -> None:
    conn.execute(f"INSERT INTO {table} {ROW_SELECT}".encode(), (first, last))


# -- the worker --------------------------------------------------------------------


class WorkerRun:
    """``dblog run`` for one source name, as a child process.

    Several processes of one source (a leader and its standbys) are several runs with the
    same source, tables and ``extra_config`` and distinct ``instance`` names: they share
    the configuration file and each has a log of its own. ``extra_config`` is appended to
    the configuration (TOML tables such as ``[lease]``).
    """

    def __init__(self, env: Environment, source: str, tables: Sequence[str], *,
                 flush_interval_s: float, instance: str = "", extra_config: str = "",
                 source_config: str = "", landing: LandingRoot | None = None) -> None:
        self.env = env
        self.source = source
        self.instance = instance
        self.name = f"{source}-{instance}" if instance else source
        self.tables = list(tables)
        self.config = env.workdir / f"{source}.toml"
        self.landing_root: LandingRoot = env.landing if landing is None else landing
        self.log_path = env.workdir / f"{self.name}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.profiler: subprocess.Popen[bytes] | None = None
        self.config.write_text(
            f"""
[source]
name = "{source}"
kind = "{env.kind}"
dsn = {json.dumps(env.dsn)}
tables = {json.dumps(self.tables)}
{source_config}

[redis]
url = "{env.redis.url}"

[landing]
{landing_lines(self.landing_root)}
flush_interval_s = {flush_interval_s}
flush_max_events = 50000

[worker]
control_interval_s = 0.2
heartbeat_interval_s = 10.0
status_interval_s = 1.0

[http]
listen = "127.0.0.1:0"
{extra_config}"""
        )

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    @property
    def landing(self) -> LandingZone:
        if isinstance(self.landing_root, S3Location):
            raise TypeError(f"worker {self.name} lands in a bucket: use landed_rows")
        return LandingZone(self.landing_root, self.source)

    def cpu_seconds(self) -> float:
        """User + system CPU time the worker process has used so far."""
        times = psutil.Process(self.pid).cpu_times()
        return float(times.user + times.system)

    def key(self, *parts: str) -> str:
        return f"dblog:v1:{self.source}:" + ":".join(parts)

    def start(self, timeout: float = 60, *, wait_status: bool = True) -> Self:
        """Start the process; wait for the source's status hash in Redis (a streaming
        leader), unless ``wait_status`` is false (a standby: the hash is the leader's)."""
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "dblog_worker", "run", "--config", str(self.config),
                 "--log-level", "INFO"],
                stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, preexec_fn=die_with_parent(),
            )
        if wait_status:
            with self.env.redis_client() as client:
                wait_until(lambda: bool(client.exists(self.key("worker"))), timeout,
                           f"worker {self.name} to start", self.check_alive)
        if self.env.options.profile_dir is not None:
            self._start_profiler(self.env.options.profile_dir)
        return self

    def profile_phase(self, phase: str) -> None:
        """With ``--profile``: end the worker's profile so far and start another, named
        after ``phase``, so that each phase of a benchmark has a profile of its own."""
        if self.env.options.profile_dir is None:
            return
        self._stop_profiler()
        self._start_profiler(self.env.options.profile_dir, f"-{phase}")

    def _start_profiler(self, directory: Path, suffix: str = "") -> None:
        """py-spy (if installed next to this Python) samples the worker, waits included."""
        py_spy = Path(sys.executable).parent / "py-spy"
        if not py_spy.exists():
            progress("--profile: py-spy is not installed in this environment; not profiling")
            return
        directory.mkdir(parents=True, exist_ok=True)
        gil = self.env.options.profile_gil
        out = directory / f"{self.env.name}-{self.name}{suffix}{'-gil' if gil else ''}.txt"
        # --gil: only the samples of the thread holding the GIL (where the CPU time in
        # Python goes); otherwise every thread, waits included.
        self.profiler = subprocess.Popen(
            [str(py_spy), "record", "--pid", str(self.pid), "--rate", "200", "--format", "raw",
             "--nonblocking", *(["--gil"] if gil else ["--idle"]), "--output", str(out)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=die_with_parent(),
        )
        progress(f"profiling worker {self.name} into {out}")

    def check_alive(self) -> None:
        if self.proc is not None and self.proc.poll() is not None:
            raise RuntimeError(f"worker {self.name} exited with {self.proc.returncode}:\n"
                               f"{self.log_tail()}")

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self) -> None:
        self._stop_profiler()
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def kill(self) -> None:
        """SIGKILL: the process dies at once, as in a crash; reaped."""
        self._stop_profiler()
        if self.proc is None:
            return
        self.proc.kill()
        self.proc.wait()
        self.proc = None

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def _stop_profiler(self) -> None:
        if self.profiler is not None:
            if self.profiler.poll() is None:
                self.profiler.send_signal(signal.SIGINT)
            try:
                self.profiler.wait(60)
            except subprocess.TimeoutExpired:
                self.profiler.kill()
                self.profiler.wait()
            self.profiler = None

    def cleanup(self) -> None:
        """Stop, then (PostgreSQL) drop the slot and publication, and delete the landing
        output. A MariaDB server keeps no state for its binlog readers."""
        self.stop()
        if not self.env.is_mariadb:
            drop_slot(self.env, f"dblog_{self.source}")
            with self.env.connect() as conn:
                conn.execute(f"DROP PUBLICATION IF EXISTS dblog_{self.source}".encode())
        if not isinstance(self.landing_root, S3Location):
            shutil.rmtree(self.landing_root / self.source, ignore_errors=True)

    # -- dumps ----------------------------------------------------------------------

    def request_dump(self, table: str, chunk_size: int = CHUNK_SIZE,
                     parallelism: int = 1, extra: Sequence[str] = ()) -> str:
        """``dblog dump --table ... --chunk-size ... --parallelism ... [extra]``; the
        request id. The CLI's ``main`` runs in this process: a fresh interpreter would
        add seconds of imports before the request (not timed: it starts at its
        ``created_at``)."""
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = dblog_main(["dump", "--config", str(self.config), "--table", table,
                               "--chunk-size", str(chunk_size), "--parallelism",
                               str(parallelism), *extra, "--json"])
        if code != 0:
            raise RuntimeError(f"dblog dump failed ({code}): {out.getvalue()}{err.getvalue()}")
        request_id: str = json.loads(out.getvalue())["id"]
        return request_id

    def wait_dump(self, request_id: str, timeout: float) -> tuple[float, float]:
        """Wait for the request to end; (created_at, completed_at) as Unix times from Redis."""
        key = self.key("request", request_id)
        with self.env.redis_client() as client:
            def ended() -> bool:
                return client.hget(key, "state") in ("completed", "failed", "cancelled")

            wait_until(ended, timeout, f"dump {request_id} to end", self.check_alive, 0.02)
            fields: dict[str, str] = client.hgetall(key)
        if fields["state"] != "completed":
            raise RuntimeError(f"dump {request_id} ended {fields['state']}: "
                               f"{fields.get('error')}\n{self.log_tail()}")
        return float(fields["created_at"]), float(fields["updated_at"])

    def checkpoint_lsn(self, client: redis.Redis) -> int:
        value = client.hget(self.key("checkpoint"), "value")
        return parse_lsn(str(value)) if value else 0

    def checkpoint_position(self, client: redis.Redis) -> tuple[int, int]:
        """The saved checkpoint as :meth:`Environment.log_position` spells positions."""
        if not self.env.is_mariadb:
            return 0, self.checkpoint_lsn(client)
        value = client.hget(self.key("checkpoint"), "value")
        if not value:
            return 0, 0
        checkpoint = BinlogCheckpoint.decode(str(value))
        return file_number(checkpoint.file), checkpoint.pos

    def landed_rows(self, table: str) -> int:
        """Rows in the committed segments of ``table``, from the Parquet footers."""
        if isinstance(self.landing_root, S3Location):
            reader = open_reader(self.landing_root, self.source)
            return sum(reader.summary(s).rows for s in reader.segments(table))
        return sum(pq.read_metadata(s.path).num_rows for s in self.landing.segments(table))


def landing_lines(root: LandingRoot) -> str:
    """The ``[landing]`` lines that name ``root``: a folder, or a bucket with its options."""
    if not isinstance(root, S3Location):
        return f"path = {json.dumps(str(root))}"
    return (f"path = {json.dumps(root.url)}\n"
            f"s3 = {{ endpoint = {json.dumps(root.endpoint)}, "
            f"path_style = {'true' if root.path_style else 'false'} }}")


def drop_slot(env: Environment, slot: str) -> None:
    """Drop a replication slot once its walsender has let go of it."""
    with env.connect() as conn:
        wait_until(lambda: conn.execute(
            "SELECT count(*) FROM pg_replication_slots WHERE slot_name = %s AND active",
            (slot,)).fetchone() == (0,), 30, f"slot {slot} to be released")
        conn.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                     "WHERE slot_name = %s", (slot,))


def wait_until(predicate: Callable[[], bool], timeout: float, what: str,
               check: Callable[[], None] | None = None, interval: float = 0.05) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if check is not None:
            check()
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


def dump_timeout(rows: int) -> float:
    return 120 + rows / 2_000


def cpu_bound(rows: int, *cpu_seconds: float) -> int:
    """The rate (rows/s) this machine's cores allow a phase that needs ``cpu_seconds`` of
    CPU in all (the database server's, the worker's) for ``rows``: every core busy, all
    the work overlapped perfectly. No run can beat it; how close a figure comes to it says
    what more parallelism could still give."""
    return round(rows * len(os.sched_getaffinity(0)) / sum(cpu_seconds))
