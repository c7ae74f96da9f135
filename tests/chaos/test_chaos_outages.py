"""Chaos: what the workers depend on fails. Redis restarted (with its data) mid-dump or
emptied while the worker is stopped; the source database restarted mid-window, or its
connections to the worker killed from the server; the landing zone's disk full.

Each run writes through the ledger workload (tests/chaos/ledger.py) and ends with the
checks of :func:`~tests.chaos.ledger.finish`; see tests/chaos/__init__.py.
"""

from __future__ import annotations

import os
import random
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from tests.chaos.cluster import (
    PLAN,
    Cluster,
    Report,
    fill,
    filled_tables,
    http_get,
    kill_source_connections,
    load_until,
    mount_tmpfs,
    read_hash,
    scenario,
    seed_id,
    unmount,
)
from tests.chaos.ledger import LedgerWorkload, finish
from tests.integration.harness import (
    Backend,
    checkpoint,
    checkpoint_position,
    events_of,
    wait_for,
)
from tests.services import RedisServer

pytestmark = pytest.mark.timeout(PLAN.timeout_s)


# -- Redis ------------------------------------------------------------------------------


def redis_outage(server: RedisServer, rnd: random.Random) -> str:
    """Stop Redis (SIGTERM, or SIGKILL: it fsyncs every write), keep it down for up to
    4 s (longer than the lease, at times), start it again on its data."""
    crash = rnd.random() < 0.5
    down_s = rnd.uniform(0.2, 4.0)
    if crash:
        server.kill()
    else:
        os.kill(server.pid, signal.SIGTERM)
        wait_for(lambda: not server.running, 30, "Redis to stop")
    time.sleep(down_s)
    server.restart()
    return f"{'SIGKILL' if crash else 'SIGTERM'} {down_s:.1f}s"


@pytest.mark.parametrize("seed", PLAN.seeds, ids=seed_id)
def test_redis_restart_mid_dump(backend: Backend, chaos_redis: RedisServer, seed: int,
                                report: Report) -> None:
    """Redis stops and starts again with its data, down for up to 4 s, while a dump runs
    and a leader and a standby depend on it: the dump completes and nothing is lost."""
    rnd = random.Random(seed)
    tables, config = filled_tables(backend, (4000, 1000))
    outages: list[str] = []
    with scenario(backend, config, tables, seed, report, "--chunk-size", "50",
                  "--delay-ms", "10") as run:
        for _ in run.strikes(PLAN.restarts, rnd, chunks_read=3):
            outages.append(redis_outage(chaos_redis, rnd))
        report.add("redis_outages", outages)
        wait_for(lambda: len(run.cluster.running()) == 2, 10, "both workers up",
                 run.cluster.logs)


@pytest.mark.parametrize("backend", ["mariadb"], indirect=True)
def test_redis_data_lost_is_refused_on_mariadb(backend: Backend, report: Report) -> None:
    """Redis emptied (FLUSHALL) while the worker is stopped, the landing zone holding
    segments: the worker does not start over from the binlog's end (that would lose what
    was written meanwhile); it exits non-zero and says what to do. (PostgreSQL's case,
    the slot to adopt, is in tests/integration/test_scenarios.py.)"""
    [t1], config = filled_tables(backend, (10,))
    with Cluster(backend, config) as cluster:
        worker = cluster.start_leader()
        backend.execute(f"UPDATE {t1} SET version = {backend.next_version} WHERE id <= 50")
        wait_for(lambda: len(events_of(backend, t1)) >= 5, 30, "the updates to land",
                 cluster.logs)
        wait_for(lambda: checkpoint(backend.redis_url) is not None, 30, "a checkpoint")
        assert worker.stop() == 0
        with redis.Redis.from_url(backend.redis_url) as client:
            client.flushall()
        backend.execute(f"UPDATE {t1} SET version = {backend.next_version} WHERE id = 10")
        again = cluster.spawn()
        wait_for(lambda: not again.alive(), 60, "the worker to refuse", cluster.logs)
        assert again.proc is not None
        code = again.proc.returncode
        log = again.log()
        report.add("exit_code", code)
        refusal = [line for line in log.splitlines() if "Redis" in line]
        report.add("message", refusal[-1] if refusal else "")
        assert code != 0, log
        assert " streaming " not in log, log
        assert "Traceback" not in log, log
        assert refusal, log
        assert "dump" in refusal[-1] and "landing zone" in refusal[-1], refusal[-1]


# -- the source database ---------------------------------------------------------------


@pytest.mark.parametrize("seed", PLAN.seeds, ids=seed_id)
def test_source_restart_mid_window(backend: Backend, seed: int, report: Report) -> None:
    """The source database restarts (cleanly) while a dump with a delay runs; a standby
    waits: capture goes on, the dump completes, nothing is lost."""
    rnd = random.Random(seed)
    tables, config = filled_tables(backend, (3000, 1000))
    restarts: list[float] = []
    with scenario(backend, config, tables, seed, report, "--chunk-size", "50",
                  "--delay-ms", "30") as run:
        for _ in run.strikes(PLAN.restarts, rnd, busy_s=5, chunks_read=3):
            began = time.monotonic()
            backend.restart_source()
            restarts.append(round(time.monotonic() - began, 2))
        report.add("source_restart_s", restarts)
        cluster = run.cluster
        assert "session ended" in cluster.logs(tail=10**9), cluster.logs()
        assert run.leader.alive() and len(cluster.running()) == 2, cluster.logs()


@pytest.mark.parametrize("seed", PLAN.seeds, ids=seed_id)
def test_source_connections_killed(backend: Backend, seed: int, report: Report) -> None:
    """The worker's connections to the source killed from the server side (PostgreSQL:
    pg_terminate_backend, the walsender too; MariaDB: KILL, the binlog dump too) at random
    instants of a dump: capture goes on, the dump completes, nothing is lost."""
    rnd = random.Random(seed)
    tables, config = filled_tables(backend, (3000, 1000))
    ended: list[str] = []
    with scenario(backend, config, tables, seed, report, "--chunk-size", "50",
                  "--delay-ms", "30") as run:
        for _ in run.strikes(PLAN.connection_kills, rnd, busy_s=2, chunks_read=2):
            ended += kill_source_connections(backend, run.workload.spared())
        report.add("connections_killed", len(ended))
    streams = [e for e in ended if "walsender" in e or "Binlog Dump" in e]
    assert streams, f"no log stream connection was killed: {ended}"


# -- the landing zone ------------------------------------------------------------------


@pytest.fixture
def small_landing(backend: Backend) -> Iterator[Path]:
    """The landing path on a 16 MiB tmpfs (unmounted at the end)."""
    mount_tmpfs(backend.landing, "16m")
    try:
        yield backend.landing
    finally:
        unmount(backend.landing)


@pytest.mark.parametrize("seed", PLAN.seeds, ids=seed_id)
def test_landing_disk_full(backend: Backend, small_landing: Path, seed: int,
                           report: Report) -> None:
    """The landing zone's filesystem fills up: the worker stops advancing (the checkpoint
    stays before the writes it could not land), says so, stays alive; space freed, it
    goes on and nothing is lost."""
    [t1], config = filled_tables(backend, (0,))
    with Cluster(backend, config) as cluster:
        worker = cluster.start_leader()
        backend.execute(f"INSERT INTO {t1} VALUES (1, {backend.next_version}, 'first')")
        wait_for(lambda: len(events_of(backend, t1)) == 1, 30, "the first segment",
                 cluster.logs)
        filler = small_landing / "filler"
        report.add("filler_bytes", fill(filler))
        backend.execute(f"INSERT INTO {t1} VALUES (2, {backend.next_version}, 'blocked')")
        blocked_end = backend.log_end()  # the checkpoint stays before this
        workload = LedgerWorkload(backend.db, [t1], seed)
        workload.start()
        started = time.monotonic()
        wait_for(lambda: "cannot write the landing zone" in worker.log(), 30,
                 "the worker to report the full disk", cluster.logs)
        url = (read_hash(backend.redis_url, "worker").get("http")
               or read_hash(backend.redis_url, "lease").get("http", ""))
        metrics = ""

        def counted() -> bool:
            nonlocal metrics
            status, metrics = http_get(url, "/metrics")
            return status == 200 and any(
                line.startswith("dblog_errors_total{") and 'kind="OutputUnavailable"' in line
                for line in metrics.splitlines())

        wait_for(counted, 30, "the failure in /metrics", lambda: metrics[-3000:])
        deadline = time.monotonic() + max(2.5, PLAN.load_s / 2)
        while time.monotonic() < deadline:
            fill(filler)  # a failed write frees what it had taken: take it again
            saved = checkpoint(backend.redis_url)
            assert saved is not None
            assert checkpoint_position(backend, saved) < blocked_end, (saved, blocked_end)
            assert worker.alive(), cluster.logs()
            time.sleep(0.1)
        events = events_of(backend, t1)
        assert [e["key"] for e in events] == ["[1]"], "written while the disk was full"
        filler.unlink()
        load_until(started)
        finish(backend, workload, [t1], report)
        assert worker.alive(), cluster.logs()
