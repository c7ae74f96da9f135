"""What the chaos scenarios share: the plan (CI or long), several workers of one source,
what Redis says about them, and the faults (killed connections, a full disk)."""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import http.client
import json
import os
import random
import signal
import subprocess
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast
from urllib.parse import urlsplit

import psycopg
import pymysql
import pytest
import redis

from tests.chaos.ledger import LedgerWorkload, finish
from tests.integration.harness import (
    SOURCE,
    Backend,
    MariaDatabase,
    WorkerProcess,
    chunks,
    dump,
    wait_for,
    wait_request,
)

# -- the plan -------------------------------------------------------------------------

LONG = os.environ.get("DBLOG_CHAOS_LONG", "") not in ("", "0")


@dataclass(frozen=True)
class Plan:
    """How much chaos: the CI version (a few seconds of load per scenario) or the long one
    (``DBLOG_CHAOS_LONG=1``)."""

    name: str
    seeds: tuple[int, ...]  # DBLOG_CHAOS_SEEDS=4,5 runs others
    kills: int  # kill -9 of the leader, per run of scenario 1
    stops: int  # SIGSTOP of the leader, per run of scenario 2
    restarts: int  # Redis or source restarts, per run
    connection_kills: int  # source connections killed from the server, per run
    load_s: float  # seconds of workload, at least, per run
    timeout_s: int  # pytest-timeout of each test


def _plan() -> Plan:
    plan = (Plan("long", seeds=(1, 2, 3), kills=20, stops=5, restarts=5, connection_kills=10,
                 load_s=60, timeout_s=3600)
            if LONG else
            Plan("ci", seeds=(1,), kills=2, stops=1, restarts=1, connection_kills=2, load_s=3,
                 timeout_s=300))
    seeds = os.environ.get("DBLOG_CHAOS_SEEDS", "").strip()
    if seeds:
        plan = dataclasses.replace(plan, seeds=tuple(int(s) for s in seeds.split(",")))
    return plan


PLAN = _plan()

# The lease of the chaos workers: short, so that a takeover takes seconds.
TTL_S = 3.0
STANDBY_POLL_S = 0.25
RENEW_INTERVAL_S = 0.5


def lease_section(ttl_s: float = TTL_S, renew_interval_s: float = RENEW_INTERVAL_S,
                  standby_poll_s: float = STANDBY_POLL_S) -> str:
    """The ``[lease]`` section of a worker configuration (``Backend.config_path(extra=)``)."""
    return (f"\n[lease]\nttl_s = {ttl_s}\nrenew_interval_s = {renew_interval_s}\n"
            f"standby_poll_s = {standby_poll_s}\n")


def filled_tables(backend: Backend, rows: tuple[int, ...], *, ttl_s: float = TTL_S,
                  **config: Any) -> tuple[list[str], Path]:
    """The backend's first tables (one or two) with ``rows`` rows each, and a worker
    configuration that captures them with the chaos lease (``config``: more
    ``Backend.config_path`` options)."""
    tables = [backend.t1, backend.t2][:len(rows)]
    for table, count in zip(tables, rows, strict=True):
        backend.create(table, count)
    return tables, backend.config_path(tables, extra=lease_section(ttl_s=ttl_s), **config)


class Report:
    """What one scenario reports: attached to the test (``record_property``, so JUnit XML
    carries it), printed, and listed at the end of the run."""

    def __init__(self, node: pytest.Item) -> None:
        self.node = node
        self.fields: dict[str, object] = {"plan": PLAN.name}

    def add(self, name: str, value: object) -> None:
        self.fields[name] = value
        self.node.user_properties.append((name, value))

    def line(self) -> str:
        return f"{self.node.nodeid}: {json.dumps(self.fields, default=str)}"


# -- Redis: what the workers publish ------------------------------------------------------


def key(*parts: str) -> str:
    return ":".join(("dblog", "v1", SOURCE, *parts))


def read_hash(redis_url: str, *parts: str) -> dict[str, str]:
    with redis.Redis.from_url(redis_url, decode_responses=True, socket_timeout=5) as client:
        return cast(dict[str, str], client.hgetall(key(*parts)))


def token_of(fields: dict[str, str]) -> int:
    """The ``token`` field of a hash, 0 when it has none."""
    text = fields.get("token", "")
    return int(text) if text else 0


@dataclass
class Sample:
    at: float  # time.monotonic()
    lease: int  # the lease's token (0: nobody holds it)
    worker: int  # the token in the leader's status hash
    checkpoint: int  # the token of the leader that saved the checkpoint


class RedisSampler(threading.Thread):
    """Reads the lease, status and checkpoint tokens every few milliseconds, so that a
    test can check they never went back; Redis errors (a restart) are skipped."""

    def __init__(self, redis_url: str, interval_s: float = 0.02) -> None:
        super().__init__(daemon=True, name="redis-sampler")
        self.client = redis.Redis.from_url(redis_url, decode_responses=True, socket_timeout=2)
        self.interval_s = interval_s
        self.samples: list[Sample] = []
        self.stop_event = threading.Event()

    def run(self) -> None:
        while not self.stop_event.wait(self.interval_s):
            try:
                pipe = self.client.pipeline(transaction=False)
                for name in ("lease", "worker", "checkpoint"):
                    pipe.hget(key(name), "token")
                lease, worker, saved = cast(list[str | None], pipe.execute())
            except redis.RedisError:
                continue
            self.samples.append(Sample(time.monotonic(), int(lease or 0), int(worker or 0),
                                       int(saved or 0)))

    def stop(self) -> None:
        self.stop_event.set()
        self.join(10)
        self.client.close()

    def __enter__(self) -> RedisSampler:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def assert_never_back(self) -> None:
        """Once the status or the checkpoint carried a token, no smaller one came back:
        a worker fenced out wrote neither (its lease lost, the new leader's saved)."""
        assert self.samples, "the sampler read nothing from Redis"
        for name in ("worker", "checkpoint"):
            highest, at = 0, 0.0
            for sample in self.samples:
                value = cast(int, getattr(sample, name))
                if value == 0:
                    continue
                assert value >= highest, (
                    f"the {name} hash went back from token {highest} to {value} "
                    f"({sample.at - at:.2f} s later)")
                highest, at = value, sample.at


# -- several workers of one source -----------------------------------------------------------


@dataclass
class Takeover:
    seconds: float  # from the fault to the new leader's streaming and published status
    token: int
    leader: WorkerProcess


@dataclass
class Cluster:
    """``dblog run`` processes of one configuration, each with its own log; killed (and
    continued, if stopped) at the end."""

    backend: Backend
    config: Path
    workers: list[WorkerProcess] = field(default_factory=list)

    def spawn(self) -> WorkerProcess:
        """Start a worker; do not wait for anything."""
        log_path = self.backend.tmp / f"worker-{len(self.workers) + 1}.log"
        process = WorkerProcess(self.config, log_path)
        self.workers.append(process)
        return process.start()

    def start_leader(self) -> WorkerProcess:
        """Start a worker that must become the leader; wait until it streams."""
        process = self.spawn()
        wait_for(lambda: (" streaming " in process.log() and "lease acquired" in process.log())
                 or not process.alive(), 60, "the worker to lead and stream", self.logs)
        assert process.alive(), process.log()
        return process

    def start_standby(self) -> WorkerProcess:
        """Start a worker while another leads; wait until it stands by."""
        process = self.spawn()
        wait_for(lambda: "standing by" in process.log() or not process.alive(), 60,
                 "the worker to stand by", self.logs)
        assert process.alive(), process.log()
        return process

    def running(self) -> list[WorkerProcess]:
        return [w for w in self.workers if w.alive()]

    def by_pid(self, pid: int) -> WorkerProcess | None:
        return next((w for w in self.workers if w.proc is not None and w.proc.pid == pid), None)

    def lease(self) -> dict[str, str]:
        return read_hash(self.backend.redis_url, "lease")

    def status(self) -> dict[str, str]:
        return read_hash(self.backend.redis_url, "worker")

    def leader(self) -> WorkerProcess:
        """The worker holding the lease (waits while nobody does)."""
        found: list[WorkerProcess] = []

        def held() -> bool:
            process = self.by_pid(int(self.lease().get("pid") or 0))
            found[:] = [process] if process is not None and process.alive() else []
            return bool(found)

        wait_for(held, 30, "a worker of the test to hold the lease",
                 lambda: f"{self.lease()}\n{self.logs()}")
        return found[0]

    def streaming_counts(self) -> dict[int, int]:
        return {id(w): w.log().count(" streaming ") for w in self.workers}

    def wait_takeover(self, old_token: int, since: float, timeout: float,
                      counts: dict[int, int]) -> Takeover:
        """Wait until the status hash carries a token above ``old_token``, published by a
        worker of the test that has streamed since (``counts``: streaming_counts() before
        the fault); the time from ``since`` (time.monotonic()) until then."""
        found: list[Takeover] = []

        def taken() -> bool:
            status = self.status()
            token = token_of(status)
            if token <= old_token:
                return False
            process = self.by_pid(int(status.get("pid") or 0))
            if process is None or process.log().count(" streaming ") <= counts.get(id(process),
                                                                                      0):
                return False
            found.append(Takeover(time.monotonic() - since, token, process))
            return True

        wait_for(taken, timeout, f"a new leader (token above {old_token}) to stream",
                 lambda: f"status {self.status()}, lease {self.lease()}\n{self.logs()}")
        return found[0]

    def wait_logged(self, process: WorkerProcess, text: str, more_than: int,
                    timeout: float = 30) -> None:
        """Wait until ``text`` is in the log of ``process`` more than ``more_than`` times."""
        wait_for(lambda: process.log().count(text) > more_than, timeout,
                 f"{text!r} in {process.log_path.name}", self.logs)

    def logs(self, tail: int = 4000) -> str:
        return "\n".join(f"--- {w.log_path.name} (pid {w.proc.pid if w.proc else '-'}, "
                         f"{'alive' if w.alive() else 'exited'})\n{w.log()[-tail:]}"
                         for w in self.workers)

    def close(self) -> None:
        for process in self.workers:
            if process.alive() and process.proc is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(process.proc.pid, signal.SIGCONT)
            process.kill()

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        if exc_type is not None:
            print(f"worker logs at the failure:\n{self.logs()}")
        self.close()


# -- faults ------------------------------------------------------------------------------


def kill_source_connections(backend: Backend, spared: set[int]) -> list[str]:
    """End the worker's connections to the source from the server side (not those in
    ``spared``, the workload's): PostgreSQL's pg_terminate_backend of the backends of the
    test database named ``dblog-*`` and of its walsenders; MariaDB's KILL of the root
    connections of the test database, of information_schema and of binlog dumps.
    Returns what it ended ("pid kind")."""
    ended = []
    if backend.kind == "postgresql":
        with psycopg.connect(backend.db.dsn, autocommit=True) as conn:
            rows = conn.execute(
                "SELECT pid, backend_type, application_name FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()").fetchall()
            for pid, backend_type, application in rows:
                if pid in spared or not (backend_type == "walsender"
                                         or str(application).startswith("dblog")):
                    continue
                conn.execute("SELECT pg_terminate_backend(%s)", (pid,))
                ended.append(f"{pid} {backend_type}")
        return ended
    assert isinstance(backend.db, MariaDatabase)
    database = backend.db.name
    connection = pymysql.connect(**backend.db.server.connect_args())
    with connection, connection.cursor() as cur:
        cur.execute("SELECT id, user, db, command FROM information_schema.processlist "
                    "WHERE id <> CONNECTION_ID()")
        for session_id, user, db, command in cur.fetchall():
            if session_id in spared or user != "root":
                continue
            if not (db in (database, "information_schema")
                    or str(command).startswith("Binlog Dump")):
                continue
            with contextlib.suppress(pymysql.MySQLError):  # it may have just ended
                cur.execute("KILL %s", (session_id,))
                ended.append(f"{session_id} {command}")
    return ended


def mount_tmpfs(path: Path, size: str) -> None:
    """Mount a tmpfs of ``size`` on ``path``; fails the test with what to do if it cannot."""
    path.mkdir(parents=True, exist_ok=True)
    try:
        result = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs",
                                 str(path)], capture_output=True, text=True, timeout=30)
    except FileNotFoundError as exc:
        raise AssertionError(f"cannot mount a tmpfs on {path}: {exc}") from exc
    if result.returncode != 0:
        raise AssertionError(
            f"cannot mount a tmpfs on {path} (mount exited {result.returncode}: "
            f"{result.stderr.strip()}). The landing-disk-full chaos test needs to mount a "
            "small filesystem: run it as root, or in a container with CAP_SYS_ADMIN "
            "(docker run --cap-add SYS_ADMIN)")


def unmount(path: Path) -> None:
    """Unmount ``path``; lazily if something still holds it."""
    result = subprocess.run(["umount", str(path)], capture_output=True, text=True, timeout=30)
    if result.returncode != 0:
        subprocess.run(["umount", "-l", str(path)], capture_output=True, text=True, timeout=30)


def fill(path: Path) -> int:
    """Append to ``path`` until its filesystem is full (again); the bytes it holds."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        for size in (1 << 20, 1 << 12, 1):
            block = b"\0" * size
            while True:
                try:
                    os.write(fd, block)
                except OSError as exc:
                    if exc.errno != errno.ENOSPC:
                        raise
                    break
    finally:
        os.close(fd)
    return path.stat().st_size


def http_get(base_url: str, path: str) -> tuple[int, str]:
    """GET ``path`` of a worker's HTTP API (``base_url`` as the worker publishes it)."""
    parts = urlsplit(base_url)
    assert parts.hostname is not None and parts.port is not None, base_url
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
    try:
        conn.request("GET", path)
        reply = conn.getresponse()
        return reply.status, reply.read().decode(errors="replace")
    finally:
        conn.close()


def seconds(value: float) -> float:
    return round(value, 2)


def describe(values: list[float]) -> dict[str, Any]:
    """Count, min, median and max of durations (for the report)."""
    if not values:
        return {"count": 0}
    ordered = sorted(values)
    return {"count": len(ordered), "min": seconds(ordered[0]),
            "median": seconds(ordered[len(ordered) // 2]), "max": seconds(ordered[-1])}


# -- the timeline of a scenario ---------------------------------------------------------------


def seed_id(seed: object) -> str:
    return f"seed{seed}"


def gap(rnd: random.Random, count: int, busy_s: float = 3.0) -> float:
    """A random pause before the next of ``count`` faults: short in CI, spread over the
    load in the long run (``busy_s``: about what each fault itself takes)."""
    return rnd.uniform(0.3, max(1.5, PLAN.load_s / max(count, 1) - busy_s))


def load_until(started: float) -> None:
    """Let the workload run until it has run PLAN.load_s seconds since ``started``."""
    time.sleep(max(0.0, started + PLAN.load_s - time.monotonic()))


class Dumps:
    """Dumps of every table, requested one after the other so that faults strike dumps; and
    next to each, a repair of the first table (a key dump of every fifth key, urgent, paced),
    so that every fault strikes two requests in flight, their windows interleaved."""

    def __init__(self, backend: Backend, config: Path, *args: str) -> None:
        self.backend = backend
        self.config = config
        self.args = args
        self.ids: list[str] = []
        self.repairs: list[str] = []

    def _running(self, ids: list[str]) -> bool:
        return bool(ids) and read_request(self.backend, ids[-1]).get("state") in (
            "queued", "running")

    def keep_one_running(self) -> None:
        """Request a dump (background) unless the last one is still queued or running, and a
        repair next to it unless the last one is."""
        if not self._running(self.ids):
            self.ids.append(dump(self.config, "--all", "--priority", "background", *self.args))
        if not self._running(self.repairs):
            table = self.backend.t1
            keys = sorted(int(json.loads(k)[0]) for k in self.backend.rows(table))[::5]
            if keys:
                self.repairs.append(dump(self.config, "--table", table, "--keys",
                                         json.dumps(keys), "--chunk-size", "20",
                                         "--delay-ms", "20"))

    def wait_chunks(self, count: int, cluster: Cluster) -> None:
        """Wait until the newest dump has read ``count`` chunks (or ended)."""
        request_id = self.ids[-1]

        def read() -> bool:
            state = read_request(self.backend, request_id).get("state")
            return state not in ("queued", "running") or chunks(self.backend,
                                                                request_id) >= count

        wait_for(read, 60, f"{count} chunks of {request_id}", cluster.logs)

    def wait_completed(self, cluster: Cluster, timeout: float = 180) -> None:
        for request_id in [*self.ids, *self.repairs]:
            state = wait_request(self.backend.redis_url, SOURCE, request_id,
                                 ["completed", "failed", "cancelled"], timeout)
            assert state["state"] == "completed", (state, cluster.logs())


def read_request(backend: Backend, request_id: str) -> dict[str, str]:
    return read_hash(backend.redis_url, "request", request_id)


# -- a scenario's frame ----------------------------------------------------------------------


@dataclass
class Scenario:
    """What a scenario body works with: the workers, the dumps, the ledger workload."""

    cluster: Cluster
    dumps: Dumps
    workload: LedgerWorkload
    leader: WorkerProcess
    sampler: RedisSampler

    def strikes(self, count: int, rnd: random.Random, *, busy_s: float = 3.0,
                chunks_read: int = 0) -> Iterator[int]:
        """``count`` times: a dump running (with ``chunks_read`` chunks read), a random
        pause (:func:`gap`), then the body's fault."""
        for number in range(count):
            self.dumps.keep_one_running()
            if chunks_read:
                self.dumps.wait_chunks(chunks_read, self.cluster)
            time.sleep(gap(rnd, count, busy_s))
            yield number


@contextlib.contextmanager
def scenario(backend: Backend, config: Path, tables: Sequence[str], seed: int,
             report: Report, *dump_args: str) -> Iterator[Scenario]:
    """A leader and a standby of ``config``, the ledger workload and dumps (``dump_args``)
    for the body to strike; after it: the load for ``PLAN.load_s`` at least, the dumps
    completed, the ledger's checks, and no token going back in Redis."""
    with Cluster(backend, config) as cluster, RedisSampler(backend.redis_url) as sampler:
        leader = cluster.start_leader()
        cluster.start_standby()
        workload = LedgerWorkload(backend.db, tables, seed)
        workload.start()
        started = time.monotonic()
        frame = Scenario(cluster, Dumps(backend, config, *dump_args), workload, leader,
                         sampler)
        try:
            yield frame
        except BaseException:
            workload.stop_event.set()
            raise
        load_until(started)
        frame.dumps.wait_completed(cluster)
        sampler.stop()
        finish(backend, workload, tables, report)
        sampler.assert_never_back()
