"""landing_stores: the landing zone on a folder vs. in an S3 bucket, and what compaction
does for the merge when a table has many small segments.

The store: a local folder (fsynced, as in production) and a bucket of SeaweedFS
(``tests.services.SeaweedServer``: master, volume, filer and S3 gateway on 127.0.0.1, the
test suite's object store), side by side in one run, each run alternating which goes
first.

**Landing** (PostgreSQL source, the worker as a child process, a fresh source name per
phase): the log path, ``rows`` new rows in 100 transactions into a captured table, timed
from the first commit until the worker's checkpoint (saved once the output is durable)
passes the last one, as ``log_capture`` times it (``log_events_per_s``); the dump path,
``dblog dump`` of a table of ``rows`` rows in chunks of 10 000, from the request to its
completion (``dump_rows_per_s``). The rows landed are counted after each phase.

**Compaction** (one landing zone per store, written directly as the worker would): the
events of ``merge_throughput``'s stream (creates, updates, deletes, a dump pass), ``rows /
10`` of them (at least 2 000), committed in segments of 100 events -- a table that takes
a few hundred changes a second, flushed every second. Timed: the commits themselves
(``small_commits_per_s``); the merge planner reading every segment's footer
(``pending_segments``, what ``dblog merge`` does before its first batch: ``plan_s``); a
whole merge into a fresh PostgreSQL target with a local Spark (``local[2]``, reading the
bucket through S3A with the jars scripts/install fetches: ``merge_s``), checked row by
row against the stream; then compaction (``compact_s``: every segment into one run) and
the same planner and merge again. The first merge in the JVM warms it up and is left out.

Every figure is the median of ``--runs`` runs, with its spread (the lowest and highest).
PostgreSQL source only: ``--source mariadb`` skips it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import psycopg

from bench.common import (
    POSTGRES_NOTE,
    Environment,
    Options,
    Result,
    WorkerRun,
    create_table,
    dump_timeout,
    insert_rows,
    machine,
    median,
    progress,
    rounded,
    wait_until,
)
from bench.merge_throughput import TABLE as STREAM_TABLE
from bench.merge_throughput import Stream, StreamWriter, check_target
from dblog_worker.config import Config, parse
from dblog_worker.config_sections import default_s3a_jars
from dblog_worker.events import ChangeEvent
from dblog_worker.landing.maintenance import plan_table, run_plan
from dblog_worker.landing.parquet import LandingZone
from dblog_worker.landing.policy import CompactionPolicy
from dblog_worker.landing.s3 import S3LandingZone
from dblog_worker.landing.s3_objects import S3Location
from dblog_worker.landing.sink import LandingRoot, Maintained, open_reader
from dblog_worker.merge.loop import merge_source
from dblog_worker.merge.plan import MergeLogEntry, pending_segments
from dblog_worker.merge.submit import s3a_conf
from dblog_worker.pg.pgoutput import parse_lsn
from tests.services import HOST, PostgresServer, SeaweedServer

NAME = "landing_stores"
# What a run must produce: finite numbers above 0 (tests/bench: each benchmark, tiny).
FIGURES = (
    "stores.*.log_events_per_s", "stores.*.dump_rows_per_s", "stores.*.small_commits_per_s",
    "stores.*.compaction.plan_s_before", "stores.*.compaction.plan_s_after",
    "stores.*.compaction.merge_s_before", "stores.*.compaction.merge_s_after",
    "stores.*.compaction.compact_s",
)
SOURCE_KINDS = ("postgresql",)
STORES = ("posix", "s3")
LOG_TABLE, DUMP_TABLE = "public.ls_log", "public.ls_dump"
TRANSACTIONS = 100
SMALL_SEGMENT = 100  # events per segment in the compaction part
TINY_STREAM_EVENTS = 1_000  # --tiny: 10 small segments, compacted into one
BUCKET = "dblog-bench"
STREAM_SOURCE = "stream"


# -- landing: the worker's log path and dump path -------------------------------------


@contextlib.contextmanager
def phase_worker(env: Environment, root: LandingRoot, prefix: str,
                 tables: Sequence[str]) -> Iterator[WorkerRun]:
    """A fresh worker (source name) for ``tables``, landing under ``root``; cleaned up."""
    worker = env.worker(f"{prefix}_{uuid.uuid4().hex[:8]}", tables, landing=root).start()
    try:
        yield worker
    finally:
        worker.cleanup()


def log_phase(env: Environment, worker: WorkerRun, first_id: int, rows: int) -> float:
    """``rows`` new rows in 100 transactions; seconds from the first commit until the
    worker's checkpoint passes the last."""
    per = max(1, rows // TRANSACTIONS)
    with env.connect() as conn, env.redis_client() as client:
        started = 0.0
        last_lsn = 0
        for t in range(TRANSACTIONS):
            first = first_id + t * per
            last = first_id + rows - 1 if t == TRANSACTIONS - 1 else first + per - 1
            if first > last:
                continue
            with conn.transaction():
                insert_rows(conn, LOG_TABLE, first, last)
                row = conn.execute("SELECT pg_current_wal_insert_lsn()::text").fetchone()
                assert row is not None
                last_lsn = parse_lsn(str(row[0]))
            if not started:
                started = time.time()
        wait_until(lambda: worker.checkpoint_lsn(client) >= last_lsn, 120 + rows / 2_000,
                   "the worker's checkpoint to pass the last commit", worker.check_alive,
                   0.01)
        seconds = time.time() - started
    landed = worker.landed_rows(LOG_TABLE)
    if landed != rows:
        raise RuntimeError(f"{landed} rows landed, expected {rows}")
    return seconds


def dump_phase(worker: WorkerRun, rows: int) -> float:
    """Seconds from the dump request of ``DUMP_TABLE`` to its completion."""
    created, completed = worker.wait_dump(worker.request_dump(DUMP_TABLE), dump_timeout(rows))
    landed = worker.landed_rows(DUMP_TABLE)
    if landed != rows:
        raise RuntimeError(f"{landed} rows landed, expected {rows}")
    return completed - created


def landing_phases(env: Environment, root: LandingRoot, first_id: int, rows: int,
                   tiny: bool) -> tuple[float, float]:
    """(log phase seconds, dump phase seconds), each by a fresh worker; ``tiny``: by one
    worker of both tables (the same paths, one worker start fewer)."""
    if tiny:
        with phase_worker(env, root, "both", [LOG_TABLE, DUMP_TABLE]) as worker:
            return log_phase(env, worker, first_id, rows), dump_phase(worker, rows)
    with phase_worker(env, root, "log", [LOG_TABLE]) as worker:
        log_s = log_phase(env, worker, first_id, rows)
    with phase_worker(env, root, "dump", [DUMP_TABLE]) as worker:
        return log_s, dump_phase(worker, rows)


# -- compaction: many small segments, the planner and the merge -------------------------


class SmallSegments:
    """What StreamWriter commits (50 000 events at a time), as segments of ``size``."""

    def __init__(self, zone: LandingZone | S3LandingZone, size: int) -> None:
        self.zone, self.size = zone, size
        self.commits = 0
        self.seconds = 0.0

    def write_schema(self, table: str, version: int, schema: dict[str, object]) -> None:
        self.zone.write_schema(table, version, schema)

    def commit_segment(self, table: str, events: Sequence[ChangeEvent]) -> None:
        for start in range(0, len(events), self.size):
            began = time.perf_counter()
            self.zone.commit(table, events[start:start + self.size])
            self.seconds += time.perf_counter() - began
            self.commits += 1


def merge_config(root: LandingRoot, target_dsn: str) -> Config:
    landing: dict[str, Any] = {"path": str(root)}
    if isinstance(root, S3Location):
        landing = {"path": root.url, "s3": {"endpoint": root.endpoint, "path_style": True}}
    return parse({
        "source": {"name": STREAM_SOURCE, "kind": "postgresql",
                   "dsn": "host=127.0.0.1 dbname=unused", "tables": [STREAM_TABLE]},
        "redis": {"url": "redis://127.0.0.1:1/0"},
        "landing": landing,
        "target": {"kind": "postgresql", "dsn": target_dsn},
    }, {})


def plan_seconds(root: LandingRoot) -> float:
    """The merge planner's first step for a target that merged nothing: every segment's
    footer read and checked."""
    started = time.perf_counter()
    pending = pending_segments(open_reader(root, STREAM_SOURCE), STREAM_TABLE, MergeLogEntry())
    seconds = time.perf_counter() - started
    if not pending:
        raise RuntimeError(f"no segment of {STREAM_TABLE} in {root}")
    return seconds


def merge_seconds(server: PostgresServer, root: LandingRoot, stager: Any,
                  stream: Stream) -> float:
    """One merge of everything into a fresh database; checked against the stream."""
    database = f"t_{uuid.uuid4().hex[:12]}"
    dsn = server.create_database(database)
    try:
        started = time.perf_counter()
        report = merge_source(merge_config(root, dsn), stager)
        seconds = time.perf_counter() - started
        if not report.ok:
            raise RuntimeError(f"the merge failed: {report.as_dict()}")
        with psycopg.connect(dsn, autocommit=True) as conn:
            check_target(conn, stream)
    finally:
        server.drop_database(database)
    return seconds


def compact_seconds(zone: Maintained) -> tuple[float, int]:
    """Every segment of the table compacted (one run: the target size is far above);
    seconds, and the files readers use afterwards."""
    policy = CompactionPolicy(target_bytes=2**40, min_age_s=0, grace_s=3600)
    started = time.perf_counter()
    run_plan(zone, plan_table(zone, STREAM_TABLE, time.time() + 1, compaction=policy))
    return time.perf_counter() - started, len(zone.segments(STREAM_TABLE))


@contextlib.contextmanager
def spark_session(location: S3Location, tiny: bool = False) -> Iterator[Any]:
    """A ``local[2]`` SparkSession with the JDBC drivers and S3A (its jars and options for
    ``location``; credentials from this process's environment); ``tiny``: the smoke run's
    (``tests.spark_local.TINY_CONF``, ``local[1]``, one shuffle partition)."""
    from pyspark.sql import SparkSession

    from tests.spark_local import TINY_CONF, jdbc_jars

    jars = [str(j) for j in jdbc_jars()] + list(default_s3a_jars())
    missing = [j for j in jars if not Path(j).is_file()]
    if missing:
        raise RuntimeError(f"missing jars {missing}: run scripts/install")
    os.environ["SPARK_LOCAL_IP"] = HOST
    os.environ.setdefault("PYSPARK_SUBMIT_ARGS",
                          "--conf spark.ui.showConsoleProgress=false pyspark-shell")
    builder = (SparkSession.builder.master("local[1]" if tiny else "local[2]")
               .appName("dblog-bench-landing")
               .config("spark.jars", ",".join(jars))
               .config("spark.driver.host", HOST).config("spark.driver.bindAddress", HOST)
               .config("spark.ui.enabled", "false")
               .config("spark.sql.shuffle.partitions", "1" if tiny else "4")
               .config("spark.sql.session.timeZone", "UTC"))
    for key, value in {**s3a_conf(location), **(TINY_CONF if tiny else {})}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    try:
        yield spark
    finally:
        spark.stop()


# -- the benchmark -----------------------------------------------------------------


def spread(values: Sequence[float]) -> list[float]:
    return [rounded(min(values)), rounded(max(values))]


def rates(count: int, seconds: Sequence[float]) -> dict[str, Any]:
    per_s = [count / s for s in seconds]
    return {"median": round(median(per_s)), "spread": [round(min(per_s)), round(max(per_s))],
            "runs": [round(r) for r in per_s]}


def run(options: Options) -> Result:
    from spark.merge import spark_stager

    rows = options.rows
    stream_events = TINY_STREAM_EVENTS if options.tiny else max(2_000, rows // 10)
    workdir = Path(tempfile.mkdtemp(prefix="dblog-bench-landing-"))
    store = SeaweedServer()
    target = PostgresServer()
    log_s: dict[str, list[float]] = {s: [] for s in STORES}
    dump_s: dict[str, list[float]] = {s: [] for s in STORES}
    compaction: dict[str, dict[str, Any]] = {}
    try:
        store.start()
        os.environ.update(store.env())  # the worker, the planner and S3A read them
        store.create_bucket(BUCKET)
        roots: dict[str, Callable[[str], LandingRoot]] = {
            "posix": lambda name: workdir / name,
            "s3": lambda name: S3Location.parse(f"s3://{BUCKET}/{name}",
                                                endpoint=store.endpoint, path_style=True),
        }
        with Environment(NAME, options) as env:
            create_table(env, LOG_TABLE, 0)
            create_table(env, DUMP_TABLE, rows)
            next_id = 1
            for i in range(options.runs):
                order = STORES if i % 2 == 0 else STORES[::-1]
                for kind in order:
                    log_seconds, dump_seconds = landing_phases(
                        env, roots[kind]("landing"), next_id, rows, options.tiny)
                    log_s[kind].append(log_seconds)
                    dump_s[kind].append(dump_seconds)
                    next_id += rows
                    progress(f"{NAME} run {i + 1}/{options.runs} {kind}: log "
                             f"{rows / log_s[kind][-1]:,.0f} events/s, dump "
                             f"{rows / dump_s[kind][-1]:,.0f} rows/s")
        target.start()
        location = roots["s3"]("stream")
        assert isinstance(location, S3Location)
        with spark_session(location, options.tiny) as spark:
            stager = spark_stager(spark)
            for kind in STORES:
                compaction[kind] = compaction_part(kind, roots[kind]("stream"), target, stager,
                                                   stream_events, options.runs,
                                                   warm_up=not options.tiny)
    finally:
        target.stop()
        store.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    stores = {}
    for kind in STORES:
        log = rates(rows, log_s[kind])
        dump = rates(rows, dump_s[kind])
        stores[kind] = {
            "log_events_per_s": log["median"], "log_events_per_s_spread": log["spread"],
            "log_events_per_s_runs": log["runs"],
            "dump_rows_per_s": dump["median"], "dump_rows_per_s_spread": dump["spread"],
            "dump_rows_per_s_runs": dump["runs"],
            "small_commits_per_s": compaction[kind].pop("small_commits_per_s"),
            "compaction": compaction[kind],
        }
    return {
        "benchmark": NAME,
        "rows": rows,
        "runs": options.runs,
        "stores": stores,
        "s3_vs_posix": {
            "log": rounded(stores["s3"]["log_events_per_s"]
                           / stores["posix"]["log_events_per_s"], 2),
            "dump": rounded(stores["s3"]["dump_rows_per_s"]
                            / stores["posix"]["dump_rows_per_s"], 2),
        },
        "store": f"SeaweedFS ({store.version()}) on 127.0.0.1: weed server with its S3 "
                 "gateway, one volume server, data on local disk",
        "postgres": POSTGRES_NOTE,
        "machine": machine(),
    }


def compaction_part(kind: str, root: LandingRoot, target: PostgresServer, stager: Any,
                    events: int, runs: int, *, warm_up: bool = True) -> dict[str, Any]:
    zone: LandingZone | S3LandingZone = (
        S3LandingZone(root, STREAM_SOURCE) if isinstance(root, S3Location)
        else LandingZone(root, STREAM_SOURCE))
    zone.fence(1)
    zone.recover()
    writer = SmallSegments(zone, SMALL_SEGMENT)
    stream = StreamWriter(writer, events, max(1, events // 10)).write()  # type: ignore[arg-type]
    progress(f"{NAME} {kind}: {stream.events} events in {writer.commits} segments, "
             f"{writer.commits / writer.seconds:,.0f} commits/s")
    if warm_up:  # the JVM warms up: left out (not in the smoke run: the same path)
        merge_seconds(target, root, stager, stream)
    plan_before = [plan_seconds(root) for _ in range(runs)]
    merge_before = [merge_seconds(target, root, stager, stream) for _ in range(runs)]
    compact_s, files_after = compact_seconds(open_reader(root, STREAM_SOURCE))
    plan_after = [plan_seconds(root) for _ in range(runs)]
    merge_after = [merge_seconds(target, root, stager, stream) for _ in range(runs)]
    progress(f"{NAME} {kind}: plan {median(plan_before):.2f} -> {median(plan_after):.2f} s, "
             f"merge {median(merge_before):.1f} -> {median(merge_after):.1f} s, compaction "
             f"{compact_s:.1f} s")
    return {
        "small_commits_per_s": round(writer.commits / writer.seconds),
        "events": stream.events,
        "segments_before": writer.commits,
        "files_after": files_after,
        "plan_s_before": rounded(median(plan_before)),
        "plan_s_before_spread": spread(plan_before),
        "plan_s_after": rounded(median(plan_after)),
        "plan_s_after_spread": spread(plan_after),
        "merge_s_before": rounded(median(merge_before)),
        "merge_s_before_spread": spread(merge_before),
        "merge_s_after": rounded(median(merge_after)),
        "merge_s_after_spread": spread(merge_after),
        "compact_s": rounded(compact_s),
    }
