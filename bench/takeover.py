"""takeover: how long a standby takes to replace a killed leader, and what a consumer of
the landing zone sees meanwhile.

Two ``dblog run`` processes for one source, same configuration: a leader and a standby
(issue 7). A thread inserts single-row transactions into ``trickle`` at 50 rows/s (the
``Trickle`` of ``live_latency``); a watcher thread lists the table's landing directory
every 10 ms and notes, per row, when it first appeared there. After a warm-up of 2 s and
a steady phase (``STEADY_S``, no kill: the steady-state latency, measured in the same
run; its rows all land before the first kill), the benchmark repeats ``kills`` times:

1. the leader is the process whose pid is in the lease (Redis hash
   ``dblog:v1:<source>:lease``) and whose token the status hash (``...:worker``) shows,
   i.e. it streams; it gets SIGKILL;
2. **takeover** = from the kill until the status hash shows a greater token (the new
   leader publishes it when its session starts streaming), polled every 10 ms. Split into
   ``lease_wait`` (kill -> the lease's ``acquired_at``: the TTL running out, plus the
   standby's poll) and ``session_start`` (``acquired_at`` -> streaming);
3. the benchmark waits until the first row sent after the takeover has landed (the
   stream has caught up), then starts a fresh standby in place of the killed process
   and waits until it stands by (its member hash says ``role = standby``, or its log
   ``standing by``), then 0.5-1.5 s (random: the kill's phase against the lease renewals
   and the flushes varies).

Per kill, from the watcher's arrival times: the **gap** = the longest interval between
consecutive arrivals from the last arrival before the kill to the stream's catching up;
**first landing** = from the kill to the first arrival after it (the new leader's first
segment); the **takeover latency** = the worst commit -> landed latency of the rows that
had not landed at the kill and were committed before the new leader streamed. At the end the
trickle stops and every committed row must be in the landing zone (``lost_rows``,
from the segments' keys); ``duplicated_rows`` counts rows landed more than once; the
segments' ``dblog.writer`` tokens must never decrease in sequence order.

Each run does that for the default lease settings and for a short TTL, each on a source
of its own (fresh slot, landing directory, Redis keys). Per run: p50/p99/max over its
kills; the reported figures are medians over runs, plus the worst kill of all runs.

Target (the issue's bound): every takeover within ``ttl_s + standby_poll_s`` + 4.5 s of
session start (10 s with the default settings), no lost row, writer tokens in order.

MariaDB: the binary log's commit times are whole seconds, so a row's commit time is the
client's send time, as in ``live_latency`` (latencies are upper bounds).
"""

from __future__ import annotations

import functools
import itertools
import json
import random
import time
from bisect import bisect_right
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import pyarrow.parquet as pq
import redis

from bench.common import (
    FLUSH_INTERVAL_S,
    MARIADB,
    Environment,
    Options,
    Result,
    WorkerRun,
    machine,
    median,
    percentile,
    progress,
    rounded,
    wait_until,
)
from bench.live_latency import RATE_PER_S, Trickle, Watcher, create_trickle_table
from dblog_worker.landing.parquet import LandingZone

NAME = "takeover"
# What a run must produce: finite numbers above 0 (tests/bench: each benchmark, tiny).
FIGURES = ("takeover_max_s", "short_ttl.takeover_max_s")
TRICKLE_NAME = "trickle"
WARMUP_S = 2.0
STEADY_S = 10.0
QUICK_STEADY_S = 5.0
TINY_WARMUP_S, TINY_STEADY_S = 1.0, 2.0  # --tiny: enough trickle rows for the steady figures
SETTLE_S = 0.5  # after a fresh standby stands by: SETTLE_S + uniform(0, SETTLE_JITTER_S)
SETTLE_JITTER_S = 1.0
SESSION_START_BUDGET_S = 4.5  # the target: ttl_s + standby_poll_s + this
TAKEOVER_TIMEOUT_S = 60.0
CATCH_UP_TIMEOUT_S = 30.0
STANDBY_TIMEOUT_S = 60.0
POLL_S = 0.01


@dataclass(frozen=True)
class Lease:
    """One ``[lease]`` configuration, measured on a source of its own."""

    label: str
    tag: str  # in the source name
    ttl_s: float
    renew_interval_s: float
    standby_poll_s: float

    def toml(self) -> str:
        return (f"\n[lease]\nttl_s = {self.ttl_s}\nrenew_interval_s = {self.renew_interval_s}\n"
                f"standby_poll_s = {self.standby_poll_s}\n")

    @property
    def target_s(self) -> float:
        return self.ttl_s + self.standby_poll_s + SESSION_START_BUDGET_S

    def settings(self) -> Result:
        return {"ttl_s": self.ttl_s, "renew_interval_s": self.renew_interval_s,
                "standby_poll_s": self.standby_poll_s}


DEFAULT_LEASE = Lease("default", "d", ttl_s=5.0, renew_interval_s=1.0, standby_poll_s=0.5)
SHORT_LEASE = Lease("short_ttl", "s", ttl_s=2.0, renew_interval_s=0.5, standby_poll_s=0.5)
LEASES = (DEFAULT_LEASE, SHORT_LEASE)


@dataclass
class Kill:
    killed_at: float
    streaming_at: float
    acquired_at: float
    old_token: int
    new_token: int
    marker_id: int  # the first trickle row sent once the new leader streamed
    standby_ready_s: float = float("nan")  # the fresh standby: start -> standing by

    @property
    def takeover_s(self) -> float:
        return self.streaming_at - self.killed_at


@dataclass
class Landed:
    """The landing zone at the end of a run, from the segments themselves."""

    rows: int
    lost: int
    duplicated: int
    segments: int
    writers: int
    writers_ordered: bool
    seq_conflict: bool


@dataclass
class RunFigures:
    takeover_s: list[float] = field(default_factory=list)
    lease_wait_s: list[float] = field(default_factory=list)
    session_start_s: list[float] = field(default_factory=list)
    gap_s: list[float] = field(default_factory=list)
    first_landing_s: list[float] = field(default_factory=list)
    takeover_latency_s: list[float] = field(default_factory=list)
    standby_ready_s: list[float] = field(default_factory=list)
    steady_s: list[float] = field(default_factory=list)
    committed: int = 0
    landed: Landed | None = None
    log_problems: list[str] = field(default_factory=list)  # WARNING / ERROR / Traceback


def _hash(client: redis.Redis, key: str) -> dict[str, str]:
    return cast(dict[str, str], client.hgetall(key))


class Group:
    """The processes of one source: a leader and a standby, the killed ones replaced."""

    def __init__(self, env: Environment, source: str, tables: Sequence[str],
                 lease: Lease) -> None:
        self.env = env
        self.source = source
        self.tables = list(tables)
        self.lease = lease
        self.runs: list[WorkerRun] = []
        self.client = env.redis_client()

    def key(self, *parts: str) -> str:
        return f"dblog:v1:{self.source}:" + ":".join(parts)

    def spawn(self, *, leader: bool) -> WorkerRun:
        run = self.env.worker(self.source, self.tables, flush_interval_s=FLUSH_INTERVAL_S,
                              instance=str(len(self.runs)), extra_config=self.lease.toml())
        self.runs.append(run)
        return run.start(wait_status=leader)

    def start(self) -> None:
        """A leader that streams, then a standby that stands by."""
        leader = self.spawn(leader=True)
        lease = _hash(self.client, self.key("lease"))
        if lease.get("pid") != str(leader.pid):
            raise RuntimeError(f"{leader.name} streams, but the lease is {lease}")
        self.add_standby()

    def add_standby(self) -> float:
        """Start a standby and wait until it stands by; the seconds that took."""
        started = time.monotonic()
        run = self.spawn(leader=False)
        wait_until(lambda: self.standing_by(run), STANDBY_TIMEOUT_S,
                   f"{run.name} to stand by", run.check_alive, 0.02)
        return time.monotonic() - started

    def standing_by(self, run: WorkerRun) -> bool:
        members = cast(list[str], self.client.zrange(self.key("members"), 0, -1))
        for holder in members:
            member = _hash(self.client, self.key("member", holder))
            if member.get("pid") == str(run.pid) and member.get("role") == "standby":
                return True
        try:
            return "standing by" in run.log_path.read_text(errors="replace")
        except OSError:
            return False

    def alive(self) -> list[WorkerRun]:
        return [run for run in self.runs if run.alive]

    def leader(self) -> tuple[WorkerRun, int]:
        """The streaming leader and its token; raises unless it is one of ours."""
        lease = _hash(self.client, self.key("lease"))
        status = _hash(self.client, self.key("worker"))
        if not lease or lease.get("token") != status.get("token"):
            raise RuntimeError(f"no streaming leader: lease {lease}, status {status}")
        for run in self.alive():
            if str(run.pid) == lease.get("pid"):
                return run, int(lease["token"])
        raise RuntimeError(f"the lease {lease} is held by none of {self.source}'s processes")

    def kill_leader(self, trickle: Trickle) -> Kill:
        leader, token = self.leader()
        standbys = [run for run in self.alive() if run is not leader]
        if not standbys:
            raise RuntimeError(f"{self.source} has no standby")

        def streaming() -> bool:
            return int(self.client.hget(self.key("worker"), "token") or 0) > token

        def check() -> None:
            for run in standbys:
                run.check_alive()

        killed_at = time.time()
        leader.kill()
        wait_until(streaming, TAKEOVER_TIMEOUT_S, f"a standby of {self.source} to stream",
                   check, POLL_S)
        streaming_at = time.time()
        marker = trickle.next_id
        status = _hash(self.client, self.key("worker"))
        lease = _hash(self.client, self.key("lease"))
        if status.get("pid") not in {str(run.pid) for run in standbys}:
            raise RuntimeError(f"the new leader is none of the standbys: {status}")
        new_token = int(status["token"])
        acquired_at = (float(lease["acquired_at"]) if lease.get("token") == str(new_token)
                       else float("nan"))
        return Kill(killed_at=killed_at, streaming_at=streaming_at, acquired_at=acquired_at,
                    old_token=token, new_token=new_token, marker_id=marker)

    def log_problems(self) -> list[str]:
        """The WARNING, ERROR and traceback lines of every process's log."""
        found = []
        for run in self.runs:
            try:
                lines = run.log_path.read_text(errors="replace").splitlines()
            except OSError:
                continue
            found += [f"{run.name}: {line}" for line in lines
                      if " WARNING " in line or " ERROR " in line or "Traceback" in line]
        return found

    def close(self) -> None:
        """Stop the standbys, then the leader (SIGTERM); drop the slot and the output."""
        lease = _hash(self.client, self.key("lease"))
        alive = self.alive()
        for run in sorted(alive, key=lambda r: str(r.pid) == lease.get("pid")):
            run.stop()
        self.client.close()
        if self.runs:
            self.runs[0].cleanup()


def check_landing(zone: LandingZone, table: str, committed: Sequence[int]) -> Landed:
    """Every committed row landed? Rows landed twice, writer tokens in sequence order."""
    seq_conflict = False
    try:
        paths = [segment.path for segment in zone.segments(table)]
    except ValueError:  # two segments with one sequence number
        seq_conflict = True
        paths = sorted(zone.table_dir(table).glob("segment-*.parquet"))
    counts: Counter[int] = Counter()
    writers: list[int] = []
    for path in paths:
        keys = pq.read_table(path, columns=["key"]).column("key").to_pylist()
        counts.update(int(json.loads(key)[0]) for key in keys)
        metadata = pq.read_schema(path).metadata or {}
        writer = metadata.get(b"dblog.writer")
        writers.append(int(writer) if writer else -1)
    ordered = all(w >= 0 for w in writers) and all(
        a <= b for a, b in itertools.pairwise(writers))
    return Landed(rows=len(counts), lost=sum(1 for i in committed if i not in counts),
                  duplicated=sum(1 for c in counts.values() if c > 1), segments=len(paths),
                  writers=len(set(writers)), writers_ordered=ordered,
                  seq_conflict=seq_conflict)


def analyse(kills: Sequence[Kill], rows: dict[int, tuple[float, float]],
            steady: tuple[float, float], figures: RunFigures) -> None:
    """Per kill: the takeover's parts, the arrival gap and the worst latency."""
    arrivals = sorted({arrival for _, arrival in rows.values()})
    by_id = sorted(rows.items())
    ids = [i for i, _ in by_id]
    figures.steady_s = [a - c for c, a in rows.values() if steady[0] <= c < steady[1]]
    for kill in kills:
        figures.takeover_s.append(kill.takeover_s)
        if kill.acquired_at == kill.acquired_at:  # not NaN
            figures.lease_wait_s.append(kill.acquired_at - kill.killed_at)
            figures.session_start_s.append(kill.streaming_at - kill.acquired_at)
        if kill.standby_ready_s == kill.standby_ready_s:
            figures.standby_ready_s.append(kill.standby_ready_s)
        later = [arrival for _, (_, arrival) in by_id[bisect_right(ids, kill.marker_id - 1):]]
        caught_up = min(later) if later else kill.streaming_at
        first = bisect_right(arrivals, kill.killed_at)
        if first < len(arrivals):
            figures.first_landing_s.append(arrivals[first] - kill.killed_at)
        window = [arrivals[first - 1] if first else kill.killed_at,
                  *(a for a in arrivals[first:] if a <= caught_up)]
        figures.gap_s.append(max((b - a for a, b in itertools.pairwise(window)),
                                 default=caught_up - window[0]))
        hit = [a - c for c, a in rows.values()
               if a > kill.killed_at and c <= kill.streaming_at]
        if hit:
            figures.takeover_latency_s.append(max(hit))


def caught_up(watcher: Watcher, trickle: Trickle, marker: int) -> bool:
    """Has a row sent at or after ``marker`` landed?"""
    return any(i in watcher.rows for i in range(marker, trickle.next_id))


def steady_seconds(options: Options) -> float:
    if options.tiny:
        return TINY_STEADY_S
    return QUICK_STEADY_S if options.quick else STEADY_S


def one_run(env: Environment, options: Options, index: int, lease_index: int) -> RunFigures:
    lease = LEASES[lease_index]
    table = env.table(TRICKLE_NAME)
    source = f"to{index}{lease.tag}"
    group = Group(env, source, [table], lease)
    zone = LandingZone(env.landing, source)
    watcher = Watcher(zone.table_dir(table))
    trickle = Trickle(env, table,
                      first_id=(index * len(LEASES) + lease_index) * 10_000_000 + 1)
    rng = random.Random(index * 100 + lease_index)
    steady_s = steady_seconds(options)
    kills: list[Kill] = []
    figures = RunFigures()
    try:
        group.start()
        watcher.start()
        trickle.start()
        time.sleep(TINY_WARMUP_S if options.tiny else WARMUP_S)
        steady_from = time.time()
        time.sleep(steady_s)
        steady_to, last_steady = time.time(), trickle.next_id
        # the steady rows must all land before the first kill, or it delays the last ones
        wait_until(lambda: all(i in watcher.rows for i in range(trickle.committed[0],
                                                                  last_steady)),
                   CATCH_UP_TIMEOUT_S, "the steady phase's rows to land", None, POLL_S)
        for k in range(options.kills):
            kill = group.kill_leader(trickle)
            kills.append(kill)
            try:
                wait_until(functools.partial(caught_up, watcher, trickle, kill.marker_id),
                           CATCH_UP_TIMEOUT_S, "the stream to catch up", None, POLL_S)
            except TimeoutError as exc:
                progress(f"{NAME} {source}: {exc} after kill {k + 1} (rows lost?)")
            kill.standby_ready_s = group.add_standby()
            parts = (f" (lease {kill.acquired_at - kill.killed_at:.2f} + session "
                     f"{kill.streaming_at - kill.acquired_at:.2f} s)"
                     if kill.acquired_at == kill.acquired_at else "")
            progress(f"{NAME} run {index + 1}/{options.runs} {lease.label} kill {k + 1}/"
                     f"{options.kills}: token {kill.old_token} -> {kill.new_token} in "
                     f"{kill.takeover_s:.2f} s{parts}; new standby ready in "
                     f"{kill.standby_ready_s:.2f} s")
            if not (options.tiny and k == options.kills - 1):  # --tiny: none after the last
                time.sleep(SETTLE_S + rng.uniform(0, SETTLE_JITTER_S))
        trickle.stop()
        try:
            wait_until(lambda: all(i in watcher.rows for i in trickle.committed),
                       CATCH_UP_TIMEOUT_S + lease.ttl_s, "every trickle row to land")
        except TimeoutError as exc:
            progress(f"{NAME} {source}: {exc}")
        time.sleep(2 * FLUSH_INTERVAL_S)  # late duplicates, if any
        watcher.stop()
        figures.committed = len(trickle.committed)
        figures.landed = check_landing(zone, table, trickle.committed)
    finally:
        trickle.stopping.set()
        watcher.stopping.set()
        group.close()
    figures.log_problems = group.log_problems()
    for line in figures.log_problems[:10]:
        progress(f"{NAME} {source} worker log: {line[:300]}")
    rows = watcher.rows
    if env.is_mariadb:  # the binlog's commit time is whole seconds: the client's send time
        rows = {i: (trickle.sent_at[i], a) for i, (_, a) in rows.items() if i in trickle.sent_at}
    analyse(kills, rows, (steady_from, steady_to), figures)
    landed = figures.landed
    progress(f"{NAME} run {index + 1}/{options.runs} {lease.label}: takeover p50 "
             f"{percentile(figures.takeover_s, 50):.2f} s max {max(figures.takeover_s):.2f} s; "
             f"gap p50 {percentile(figures.gap_s, 50):.2f} s max {max(figures.gap_s):.2f} s; "
             f"steady p99 {percentile(figures.steady_s, 99):.2f} s; {figures.committed} rows, "
             f"lost {landed.lost}, duplicated {landed.duplicated}, "
             f"{landed.writers} writers ordered={landed.writers_ordered}")
    return figures


def summarize(lease: Lease, runs: Sequence[RunFigures]) -> Result:
    def spread(name: str) -> Result:
        """p50/p99/max per run, medians over runs; the worst of all runs."""
        per_run = [getattr(r, f"{name}_s") for r in runs]
        per_run = [values for values in per_run if values]
        if not per_run:
            return {}
        return {
            f"{name}_p50_s": rounded(median([percentile(v, 50) for v in per_run])),
            f"{name}_p99_s": rounded(median([percentile(v, 99) for v in per_run])),
            f"{name}_max_s": rounded(median([max(v) for v in per_run])),
            f"{name}_worst_s": rounded(max(max(v) for v in per_run)),
        }

    landed = [r.landed for r in runs if r.landed is not None]
    takeover = spread("takeover")
    lost = sum(x.lost for x in landed)
    ordered = all(x.writers_ordered and not x.seq_conflict for x in landed)
    target_met = (len(landed) == len(runs) and lost == 0 and ordered
                  and takeover.get("takeover_worst_s", float("inf")) <= lease.target_s)
    steady = spread("steady")
    return {
        **lease.settings(),
        "kills": sum(len(r.takeover_s) for r in runs),
        **takeover,
        **spread("lease_wait"),
        **spread("session_start"),
        **spread("first_landing"),
        **spread("gap"),
        **spread("takeover_latency"),
        "steady_p50_s": steady.get("steady_p50_s"),
        "steady_p99_s": steady.get("steady_p99_s"),
        "steady_max_s": steady.get("steady_max_s"),
        "steady_events": sum(len(r.steady_s) for r in runs),
        "standby_ready_p50_s": rounded(median(
            [v for r in runs for v in r.standby_ready_s] or [float("nan")])),
        "rows_committed": sum(r.committed for r in runs),
        "lost_rows": lost,
        "duplicated_rows": sum(x.duplicated for x in landed),
        "segments": sum(x.segments for x in landed),
        "writer_tokens_ordered": ordered,
        "worker_log_problems": sum(len(r.log_problems) for r in runs),
        "target_takeover_max_s": rounded(lease.target_s),
        "target_met": target_met,
        "run_takeover_max_s": [rounded(max(r.takeover_s)) for r in runs if r.takeover_s],
        "run_gap_max_s": [rounded(max(r.gap_s)) for r in runs if r.gap_s],
    }


def run(options: Options) -> Result:
    results: list[list[RunFigures]] = [[] for _ in LEASES]
    with Environment(NAME, options) as env:
        create_trickle_table(env, env.table(TRICKLE_NAME))
        for index in range(options.runs):
            for lease_index in range(len(LEASES)):
                results[lease_index].append(one_run(env, options, index, lease_index))
    default, short = (summarize(lease, runs) for lease, runs in zip(LEASES, results,
                                                                      strict=True))
    mariadb: Result = {"commit_time": "client send time (binlog commit timestamps are whole "
                                      "seconds)"} if options.source == MARIADB else {}
    extra: dict[str, Any] = {"short_ttl": short}
    return {
        "benchmark": NAME,
        "runs": options.runs,
        "kills_per_run": options.kills,
        "rate_per_s": RATE_PER_S,
        "flush_interval_s": FLUSH_INTERVAL_S,
        "steady_s": steady_seconds(options),
        **default,
        "target_met": bool(default["target_met"] and short["target_met"]),
        **extra,
        **mariadb,
        "machine": machine(options.source),
    }
