"""Chaos: the leader fails. Killed (``kill -9``) with a standby waiting, frozen
(``SIGSTOP``) past its lease and woken up, or two workers started at the same instant.

Each run writes through the ledger workload (tests/chaos/ledger.py) during a dump and
ends with the checks of :func:`~tests.chaos.ledger.finish`; see tests/chaos/__init__.py.
"""

from __future__ import annotations

import os
import random
import signal
import time
from dataclasses import dataclass

import pytest

from tests.chaos.cluster import (
    PLAN,
    STANDBY_POLL_S,
    TTL_S,
    Cluster,
    Dumps,
    RedisSampler,
    Report,
    describe,
    filled_tables,
    load_until,
    scenario,
    seconds,
    seed_id,
    token_of,
)
from tests.chaos.ledger import LedgerWorkload, finish, time_resolution, writer_tokens
from tests.integration.harness import Backend, wait_for

pytestmark = pytest.mark.timeout(PLAN.timeout_s)
# The leader's failures concern the landing zone's fencing too: also in a bucket.
WITH_S3 = pytest.mark.parametrize("backend", ["postgresql", "mariadb", "postgresql-s3"],
                                  indirect=True)

# What a takeover may take after kill -9 of the leader: the lease expires, a standby
# sees it, and its session starts (connects, starts the stream, publishes its status).
TAKEOVER_LIMIT_S = TTL_S + STANDBY_POLL_S + 5


@WITH_S3
@pytest.mark.parametrize("seed", PLAN.seeds, ids=seed_id)
def test_kill_9_of_the_leader(backend: Backend, seed: int, report: Report) -> None:
    """kill -9 of the leader at random instants during dumps and writes; a standby takes
    over within ttl_s + standby_poll_s + 5 s, and a new standby is started each time."""
    rnd = random.Random(seed)
    tables, config = filled_tables(backend, (4000, 2000), flush_interval_s=0.1)
    takeovers: list[float] = []
    with scenario(backend, config, tables, seed, report, "--chunk-size", "100",
                  "--delay-ms", "10") as run:
        cluster = run.cluster
        for _ in run.strikes(PLAN.kills, rnd, busy_s=6):
            leader = cluster.leader()
            old = max(token_of(cluster.lease()), token_of(cluster.status()))
            counts = cluster.streaming_counts()
            killed_at = time.monotonic()
            leader.kill()
            takeover = cluster.wait_takeover(old, killed_at, TAKEOVER_LIMIT_S + 30, counts)
            assert takeover.leader is not leader
            takeovers.append(takeover.seconds)
            cluster.start_standby()
        report.add("kills", len(takeovers))
        report.add("takeover_s", describe(takeovers))
        report.add("dumps", len(run.dumps.ids))
    assert max(takeovers) < TAKEOVER_LIMIT_S, (
        f"takeovers took {[seconds(t) for t in takeovers]} s; limit {TAKEOVER_LIMIT_S} s")


@dataclass
class Freeze:
    """One SIGSTOP of a leader, until SIGCONT."""

    old_token: int
    new_token: int
    stopped_at: float  # time.time(), just before SIGSTOP
    continued_at: float  # time.time(), just before SIGCONT
    takeover_s: float


@WITH_S3
@pytest.mark.parametrize("seed", PLAN.seeds, ids=seed_id)
def test_sigstop_of_the_leader_past_its_lease(backend: Backend, seed: int,
                                              report: Report) -> None:
    """The leader frozen longer than its lease: a standby takes over; woken up, the old
    leader writes nothing more (no segment, no checkpoint, no status) and steps down."""
    rnd = random.Random(seed)
    ttl_s = 2.0
    # a flush interval long enough that the frozen leader holds output when it wakes up
    tables, config = filled_tables(backend, (3000, 1000), ttl_s=ttl_s, flush_interval_s=0.5)
    freezes: list[Freeze] = []
    silent: list[str] = []  # the old leaders that stepped down without saying `lease lost`
    with scenario(backend, config, tables, seed, report, "--chunk-size", "50",
                  "--delay-ms", "20") as run:
        cluster = run.cluster
        for _ in run.strikes(PLAN.stops, rnd, busy_s=8):
            leader = cluster.leader()
            assert leader.proc is not None
            old = max(token_of(cluster.lease()), token_of(cluster.status()))
            counts = cluster.streaming_counts()
            lost = leader.log().count("lease lost")
            standing = leader.log().count("standing by")
            stopped_at = time.time()
            stopped = time.monotonic()
            os.kill(leader.proc.pid, signal.SIGSTOP)
            try:
                takeover = cluster.wait_takeover(old, stopped, ttl_s + 30, counts)
                time.sleep(rnd.uniform(0.5, 2.0))  # the new leader writes meanwhile
            finally:
                continued_at = time.time()
                os.kill(leader.proc.pid, signal.SIGCONT)
            freezes.append(Freeze(old, takeover.token, stopped_at, continued_at,
                                  takeover.seconds))
            cluster.wait_logged(leader, "standing by", standing)
            assert leader.alive(), leader.log()[-3000:]
            if leader.log().count("lease lost") == lost:
                silent.append(f"{leader.log_path.name} (token {old}):\n"
                              + "\n".join(leader.log().splitlines()[-3:]))
        report.add("freezes", len(freezes))
        report.add("takeover_s", describe([f.takeover_s for f in freezes]))
    coarse = time_resolution(backend)  # a bucket's times are whole seconds, rounded down
    for table in tables:
        segments = writer_tokens(backend, table)
        for freeze in freezes:
            late = [(seq, ctime - freeze.stopped_at) for seq, token, ctime in segments
                    if token == freeze.old_token and ctime > freeze.stopped_at + 0.2 + coarse]
            assert not late, (
                f"{table}: the leader of token {freeze.old_token}, frozen, then woken "
                f"{freeze.continued_at - freeze.stopped_at:.1f} s later, committed segments "
                f"(seq, seconds after the freeze) {late}")
            newer = [ctime for _, token, ctime in segments if token >= freeze.new_token]
            older = [ctime for _, token, ctime in segments if token == freeze.old_token]
            if newer and older:  # (and in sequence order: finish() checks that)
                assert max(older) < min(newer) + coarse, (
                    f"{table}: token {freeze.old_token} wrote after token "
                    f"{freeze.new_token}'s first segment")
    assert not silent, "woken old leaders stood by without logging `lease lost`:\n" + (
        "\n".join(silent))


@WITH_S3
@pytest.mark.parametrize("seed", PLAN.seeds, ids=seed_id)
def test_two_workers_started_at_once(backend: Backend, seed: int, report: Report) -> None:
    """Two workers of one configuration started back to back: one leads, the other stands
    by, and only the leader's token writes the output."""
    tables, config = filled_tables(backend, (2000, 500))
    with Cluster(backend, config) as cluster, RedisSampler(backend.redis_url) as sampler:
        pair = [cluster.spawn(), cluster.spawn()]  # Popen back to back

        def settled() -> bool:
            logs = [w.log() for w in pair]
            return any(" streaming " in log for log in logs) and all(
                "lease acquired" in log or "standing by" in log for log in logs)

        wait_for(settled, 60, "one worker to lead and the other to stand by", cluster.logs)
        workload = LedgerWorkload(backend.db, tables, seed)
        workload.start()
        started = time.monotonic()
        dumps = Dumps(backend, config, "--chunk-size", "100")
        dumps.keep_one_running()
        load_until(started)
        dumps.wait_completed(cluster)
        sampler.stop()
        logs = [w.log() for w in pair]
        acquired = [log.count("lease acquired") for log in logs]
        report.add("lease_acquired", acquired)
        assert sorted(acquired) == [0, 1], cluster.logs()
        follower = logs[acquired.index(0)]
        assert "standing by" in follower and " streaming " not in follower, cluster.logs()
        assert all(w.alive() for w in pair), cluster.logs()
        finish(backend, workload, tables, report)
        sampler.assert_never_back()
    tokens = {token for table in tables for _, token, _ in writer_tokens(backend, table)}
    assert len(tokens) == 1, f"segments of several writers: {sorted(tokens)}"
