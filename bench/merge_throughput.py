"""merge_throughput: ``merge_source`` on a local[2] Spark, landed events into PostgreSQL.

The landing zone is built directly with :class:`~dblog_worker.landing.LandingZone`, as
the worker would have written it for a PostgreSQL source table ``public.orders``
(``id int8`` key, ``name text``, ``amount numeric``, ``updated_at timestamptz``,
``active bool``, ``payload bytea``), ``schema-000001.json`` as ``schema_document`` writes
it: ``--rows`` events (default 1M) over ``rows / 10`` keys, in segments of 50 000
events (the worker's ``flush_max_events``). The stream: log transactions of 1-4 events
on random keys (a key that does not exist is created, ``c``; an existing one is
updated, ``u``, or, one time in ten, deleted, ``d``, with the before image as under
``REPLICA IDENTITY FULL``), and every 9 chunk sizes of log events a dump chunk of
``keys / 100`` consecutive keys (``r`` rows of the live ones): one dump pass over the
table during the stream, about 10 % of the events.

Spark: ``tests.spark_local.local_spark()`` (``local[2]``, the Debian JDBC jars); its
start-up -- JVM and SparkSession -- is timed once, on its own, and excluded from the
rates. The first merge in the fresh JVM (class loading, JIT, the JDBC driver: what a
``spark-submit`` of ``spark/merge.py`` pays on every job) is run and reported on its own,
``cold_merge_s``; the runs that follow are the warm ones the figures are medians of.
Per merge: a fresh target database on one throwaway PostgreSQL, then
``merge_source(config, spark_stager(spark))`` with the default ``[merge]`` settings;
its wall time gives events/s. The stager is wrapped to time it: ``plan_s`` is
everything before the first staging (connection, state tables, the batch plan that
reads every segment's footer and small columns, the target table's DDL, the staging
table), ``stage_s`` the Spark job (read the segments, latest event per key, JDBC
insert into the staging table), ``apply_s`` the rest (the apply transaction; with
more than one batch also the later batches' planning). The target server runs with
``pg_stat_statements``: the statements that took the most time in the last run are
reported, the apply's and the JDBC inserts'.

Checked after every run, and a failure stops the benchmark: the target table has
exactly the keys whose latest event is not a delete, and ``sum(id)`` and ``sum(amount)``
equal those of the latest row images.

Target: 100 000 events/s, the median of the warm runs (JVM start-up and the first
merge excluded; both reported). PostgreSQL source only: ``--source mariadb`` skips it.
"""

from __future__ import annotations

import base64
import contextlib
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from random import Random
from typing import Any

import psycopg

from bench.common import (
    POSTGRES_NOTE,
    Options,
    Result,
    machine,
    median,
    progress,
    rounded,
)
from dblog_worker.config import Config, parse
from dblog_worker.events import ChangeEvent, Op, Origin
from dblog_worker.landing.parquet import LandingZone
from dblog_worker.landing.sink import LandedReader
from dblog_worker.merge.loop import MergeReport, Stager, merge_source
from dblog_worker.merge.plan import Batch
from dblog_worker.merge.target import Target
from dblog_worker.position import Position
from tests.services import PostgresServer

NAME = "merge_throughput"
# What a run must produce: finite numbers above 0 (tests/bench: each benchmark, tiny).
FIGURES = ("events_per_s", "merge_s", "target_rows")
SOURCE_KINDS = ("postgresql",)
TABLE = "public.orders"
SOURCE_NAME = "bench"
TARGET_EVENTS_PER_S = 100_000
EVENTS_PER_KEY = 10
SEGMENT_EVENTS = 50_000
DELETE_SHARE = 0.1
SEED = 20261124
COLUMNS = (
    ("id", "int8", 20),
    ("name", "text", 25),
    ("amount", "numeric", 1700),
    ("updated_at", "timestamptz", 1184),
    ("active", "bool", 16),
    ("payload", "bytea", 17),
)
SCHEMA_DOCUMENT: dict[str, object] = {
    "columns": [{"name": n, "type": t, "type_oid": oid} for n, t, oid in COLUMNS],
    "key": ["id"],
}
START_US = 1_763_942_400_000_000  # 2025-11-24 00:00:00 UTC
SETTINGS = {"shared_preload_libraries": "pg_stat_statements",
            "pg_stat_statements.track": "top"}
TOP_STATEMENTS = 8


# -- the landing zone --------------------------------------------------------------


@dataclass
class Stream:
    """What the generated stream left: the latest image per key, the op mix."""

    events: int = 0
    segments: int = 0
    ops: dict[str, int] = field(default_factory=lambda: {op.value: 0 for op in Op})
    live: dict[int, int] = field(default_factory=dict)  # key -> amount in cents
    deleted: set[int] = field(default_factory=set)

    @property
    def expected_rows(self) -> int:
        return len(self.live)

    @property
    def expected_id_sum(self) -> int:
        return sum(self.live)

    @property
    def expected_amount_sum(self) -> Decimal:
        return Decimal(sum(self.live.values())) / 100


class StreamWriter:
    """Generates the stream and commits it in segments, as the worker's flushes would."""

    def __init__(self, zone: LandingZone, events: int, keys: int, seed: int = SEED) -> None:
        self.zone = zone
        self.total = events
        self.keys = keys
        self.rng = Random(seed)
        self.stream = Stream()
        self.images: dict[int, str] = {}  # live key -> its current after image
        self.buffer: list[ChangeEvent] = []
        self.lsn = 0x1_0000_0000
        self.ts_us = START_US
        self.version = 0
        self.dump_cursor = 1
        self.chunk = max(1, keys // 100)

    def write(self) -> Stream:
        self.zone.write_schema(TABLE, 1, SCHEMA_DOCUMENT)
        since_chunk = 0
        while self.stream.events + len(self.buffer) < self.total:
            if since_chunk >= 9 * self.chunk:
                self._dump_chunk()
                since_chunk = 0
            else:
                since_chunk += self._transaction()
            if len(self.buffer) >= SEGMENT_EVENTS:
                self._flush()
        self._flush()
        return self.stream

    def _next_lsn(self) -> int:
        self.lsn += self.rng.randint(120, 2_000)
        self.ts_us += self.rng.randint(1, 400)
        return self.lsn

    def _image(self, key: int) -> str:
        self.version += 1
        cents = (key * 7_919 + self.version * 104_729) % 10_000_000
        self.stream.live[key] = cents
        moment = datetime.fromtimestamp(self.ts_us // 1_000_000, UTC)
        micros = self.ts_us % 1_000_000
        fraction = f".{micros:06d}".rstrip("0") if micros else ""
        payload = base64.b64encode(self.rng.randbytes(self.rng.randint(8, 40))).decode()
        active = "true" if self.version % 3 else "false"
        return (
            f'{{"id":{key},"name":"customer {key} rev {self.version}",'
            f'"amount":"{cents // 100}.{cents % 100:02d}",'
            f'"updated_at":"{moment:%Y-%m-%d %H:%M:%S}{fraction}+00",'
            f'"active":{active},"payload":"{payload}"}}'
        )

    def _event(self, op: Op, position: Position, key: int, after: str | None,
               before: str | None, origin: Origin = Origin.LOG,
               dump_id: str | None = None) -> None:
        self.buffer.append(ChangeEvent(TABLE, op, position, f"[{key}]", after, before, origin,
                                       self.ts_us, 1, dump_id))
        self.stream.ops[op.value] += 1

    def _transaction(self) -> int:
        lsn = self._next_lsn()
        size = self.rng.randint(1, 4)
        for index in range(size):
            key = self.rng.randint(1, self.keys)
            before = self.images.get(key)
            position = Position(lsn, index, 0)
            if before is None:
                after = self._image(key)
                self.images[key] = after
                self.stream.deleted.discard(key)
                self._event(Op.CREATE, position, key, after, None)
            elif self.rng.random() < DELETE_SHARE:
                del self.images[key]
                del self.stream.live[key]
                self.stream.deleted.add(key)
                self._event(Op.DELETE, position, key, None, before)
            else:
                after = self._image(key)
                self.images[key] = after
                self._event(Op.UPDATE, position, key, after, before)
        return size

    def _dump_chunk(self) -> None:
        """The live rows of the next ``chunk`` keys, at the high watermark's position."""
        high = self._next_lsn()
        first = self.dump_cursor
        last = min(self.keys, first + self.chunk - 1)
        index = 0
        for key in range(first, last + 1):
            image = self.images.get(key)
            if image is not None:
                index += 1
                self._event(Op.READ, Position(high, 0, index), key, image, None, Origin.DUMP,
                            "bench-dump")
        self.dump_cursor = 1 if last >= self.keys else last + 1

    def _flush(self) -> None:
        if self.buffer:
            self.zone.commit_segment(TABLE, self.buffer)
            self.stream.events += len(self.buffer)
            self.stream.segments += 1
            self.buffer = []


# -- one merge ---------------------------------------------------------------------


@dataclass(frozen=True)
class MergeRun:
    seconds: float
    plan_s: float
    stage_s: float
    apply_s: float
    batches: int
    upserted: int
    deleted: int
    rows: int
    tombstones: int
    statements: list[dict[str, Any]]


def merge_config(landing: Path, target_dsn: str) -> Config:
    """A worker configuration whose [target] is ``target_dsn``; [merge] as defaulted."""
    return parse({
        "source": {"name": SOURCE_NAME, "kind": "postgresql",
                   "dsn": "host=127.0.0.1 dbname=unused", "tables": [TABLE]},
        "redis": {"url": "redis://127.0.0.1:1/0"},
        "landing": {"path": str(landing)},
        "target": {"kind": "postgresql", "dsn": target_dsn},
    }, {})


def timed_stager(stager: Stager, spans: list[tuple[float, float]]) -> Stager:
    """``stager``, recording (start, end) of every call."""
    def stage(batch: Batch, target: Target, reader: LandedReader) -> None:
        started = time.perf_counter()
        stager(batch, target, reader)
        spans.append((started, time.perf_counter()))

    return stage


def check_target(conn: psycopg.Connection[tuple[Any, ...]], stream: Stream) -> tuple[int, int]:
    """Raise unless the target holds exactly the latest live rows; (rows, tombstones)."""
    row = conn.execute("SELECT count(*), coalesce(sum(id), 0), coalesce(sum(amount), 0) "
                       "FROM public.orders").fetchone()
    assert row is not None
    rows, id_sum, amount_sum = int(row[0]), int(row[1]), Decimal(row[2])
    expected = (stream.expected_rows, stream.expected_id_sum, stream.expected_amount_sum)
    if (rows, id_sum, amount_sum) != expected:
        raise RuntimeError(
            f"the merge is wrong: target has {rows} rows, sum(id) {id_sum}, sum(amount) "
            f"{amount_sum}; the latest events give {expected[0]} rows, sum(id) {expected[1]},"
            f" sum(amount) {expected[2]}")
    found = conn.execute("SELECT count(*) FROM dblog.tombstones").fetchone()
    return rows, int(found[0]) if found else 0


def top_statements(conn: psycopg.Connection[tuple[Any, ...]],
                   database: str) -> list[dict[str, Any]]:
    """The statements of ``database`` that took the most time, grouped by their start."""
    totals: dict[str, list[float]] = {}
    for query, calls, ms in conn.execute(
        "SELECT s.query, s.calls, s.total_exec_time FROM pg_stat_statements s "
        "JOIN pg_database d ON d.oid = s.dbid WHERE d.datname = %s", (database,)
    ).fetchall():
        label = re.sub(r"\s+", " ", str(query))[:90]
        label = re.sub(r"stage_[0-9a-f]{16}", "stage_…", label)
        if label.startswith("INSERT") and "stage_…" in label[:40]:
            label = "JDBC: INSERT INTO the staging table (batched)"
        entry = totals.setdefault(label, [0.0, 0.0])
        entry[0] += int(calls)
        entry[1] += float(ms) / 1000
    ranked = sorted(totals.items(), key=lambda item: -item[1][1])[:TOP_STATEMENTS]
    return [{"sql": label, "calls": int(calls), "s": rounded(seconds)}
            for label, (calls, seconds) in ranked]


def merge_once(server: PostgresServer, admin: psycopg.Connection[tuple[Any, ...]],
               landing: Path, stager: Stager, stream: Stream, database: str) -> MergeRun:
    """One merge of the whole landing zone into a fresh database ``database``."""
    dsn = server.create_database(database)
    try:
        config = merge_config(landing, dsn)
        spans: list[tuple[float, float]] = []
        admin.execute("SELECT pg_stat_statements_reset()")
        started = time.perf_counter()
        report: MergeReport = merge_source(config, timed_stager(stager, spans))
        seconds = time.perf_counter() - started
        if not report.ok:
            raise RuntimeError(f"the merge failed: {report.as_dict()}")
        table = report.tables[0]
        if table.events != stream.events:
            raise RuntimeError(f"the merge took {table.events} events, {stream.events} landed")
        statements = top_statements(admin, database)
        with psycopg.connect(dsn, autocommit=True) as conn:
            rows, tombstones = check_target(conn, stream)
    finally:
        server.drop_database(database)
    plan_s = spans[0][0] - started if spans else seconds
    stage_s = sum(end - start for start, end in spans)
    return MergeRun(seconds, plan_s, stage_s, seconds - plan_s - stage_s, table.batches,
                    table.upserted, table.deleted, rows, tombstones, statements)


# -- the benchmark -----------------------------------------------------------------


@contextlib.contextmanager
def spark_session(tiny: bool = False) -> Iterator[tuple[Any, float]]:
    """(SparkSession, seconds it took to start: JVM and session)."""
    from tests.spark_local import local_spark

    # No console progress bars in the benchmark's stderr (read when the JVM starts).
    os.environ.setdefault("PYSPARK_SUBMIT_ARGS",
                          "--conf spark.ui.showConsoleProgress=false pyspark-shell")
    started = time.perf_counter()
    with local_spark("dblog-bench-merge", tiny=tiny) as spark:
        startup_s = time.perf_counter() - started
        spark.sparkContext.setLogLevel("WARN")
        yield spark, startup_s


def _java_version() -> str:
    try:
        out = subprocess.run(["java", "-version"], capture_output=True, text=True, check=False,
                             timeout=30)
    except OSError as exc:
        return f"unknown ({exc})"
    lines = (out.stderr or out.stdout).strip().splitlines()
    return lines[0] if lines else "unknown"


def run(options: Options) -> Result:
    from pyspark import __version__ as pyspark_version

    from spark.merge import spark_stager

    events = options.rows
    keys = max(1, events // EVENTS_PER_KEY)
    workdir = Path(tempfile.mkdtemp(prefix="dblog-bench-merge-"))
    server = PostgresServer(settings=SETTINGS)
    try:
        started = time.perf_counter()
        zone = LandingZone(workdir / "landing", SOURCE_NAME)
        stream = StreamWriter(zone, events, keys).write()
        progress(f"{NAME}: landed {stream.events} events over {keys} keys in "
                 f"{stream.segments} segments ({stream.ops}), "
                 f"{time.perf_counter() - started:.1f} s")
        server.start()
        with psycopg.connect(server.dsn(), autocommit=True) as admin:
            admin.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
            with spark_session(options.tiny) as (spark, startup_s):
                progress(f"{NAME}: JVM and SparkSession started in {startup_s:.1f} s")
                stager = spark_stager(spark)
                cold = merge_once(server, admin, workdir / "landing", stager, stream, "cold")
                progress(f"{NAME}: the first merge in the JVM: {cold.seconds:.1f} s, "
                         f"{stream.events / cold.seconds:,.0f} events/s (plan "
                         f"{cold.plan_s:.1f} s, stage {cold.stage_s:.1f} s, apply "
                         f"{cold.apply_s:.1f} s)")
                # --tiny: the cold merge stands for the warm runs (the same path).
                merges: list[MergeRun] = [cold] if options.tiny else []
                for i in range(0 if options.tiny else options.runs):
                    merge = merge_once(server, admin, workdir / "landing", stager, stream,
                                       f"target{i}")
                    merges.append(merge)
                    progress(f"{NAME} run {i + 1}/{options.runs}: {merge.seconds:.1f} s, "
                             f"{stream.events / merge.seconds:,.0f} events/s (plan "
                             f"{merge.plan_s:.1f} s, stage {merge.stage_s:.1f} s, apply "
                             f"{merge.apply_s:.1f} s); {merge.rows} rows")
    finally:
        server.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    return result(options, stream, keys, startup_s, cold, merges, pyspark_version)


def result(options: Options, stream: Stream, keys: int, startup_s: float, cold: MergeRun,
           merges: list[MergeRun], pyspark_version: str) -> Result:
    def med(pick: Callable[[MergeRun], float]) -> float:
        return median([pick(m) for m in merges])

    seconds = med(lambda m: m.seconds)
    rate = stream.events / seconds
    config = merge_config(Path("/nonexistent"), "host=127.0.0.1")
    last = merges[-1]
    return {
        "benchmark": NAME,
        "events": stream.events,
        "keys": keys,
        "segments": stream.segments,
        "segment_events": SEGMENT_EVENTS,
        "ops": stream.ops,
        "batch_max_events": config.merge.batch_max_events,
        "batches": last.batches,
        "runs": options.runs,
        "startup_s": rounded(startup_s),
        "cold_merge_s": rounded(cold.seconds),
        "cold_events_per_s": round(stream.events / cold.seconds),
        "cold_stage_s": rounded(cold.stage_s),
        "merge_s": rounded(seconds),
        "events_per_s": round(rate),
        "plan_s": rounded(med(lambda m: m.plan_s)),
        "stage_s": rounded(med(lambda m: m.stage_s)),
        "apply_s": rounded(med(lambda m: m.apply_s)),
        "target_rows": last.rows,
        "expected_rows": stream.expected_rows,
        "upserted": last.upserted,
        "deleted": last.deleted,
        "tombstones": last.tombstones,
        "target_events_per_s": TARGET_EVENTS_PER_S,
        "target_met": rate >= TARGET_EVENTS_PER_S,
        "run_merge_s": [rounded(m.seconds) for m in merges],
        "run_events_per_s": [round(stream.events / m.seconds) for m in merges],
        "run_plan_s": [rounded(m.plan_s) for m in merges],
        "run_stage_s": [rounded(m.stage_s) for m in merges],
        "run_apply_s": [rounded(m.apply_s) for m in merges],
        "top_statements_last_run": last.statements,
        "spark": {"master": "local[1]" if options.tiny else "local[2]",
                  "pyspark": pyspark_version, "java": _java_version(),
                  "shuffle_partitions": 1 if options.tiny else 4},
        "machine": {**machine("postgresql"),
                    "postgres_settings": POSTGRES_NOTE + "; target with pg_stat_statements"},
    }
