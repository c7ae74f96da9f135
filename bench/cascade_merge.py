"""cascade_merge: what foreign-key action events cost the merge, set-based, per target.

A child table ``shop.c`` (``id int8`` key, ``pid``, ``r1``, ``r2`` int8, ``payload
text``) is landed as a dump of ``--rows`` rows (default 1M; ten rows per parent: ``pid =
r1 = r2 = id // 10``) and merged into a fresh target: the load, timed on its own. Then
three batches of ``rows / 100`` foreign-key action events each (10 000 for 1M rows: a
parent bulk delete), each batch landed and merged after the one before:

* ``delete``: ``ON DELETE CASCADE`` of parents 0, 2, 4, ... on ``pid``: one action an
  event, each matching 10 child rows (rows / 10 deleted, each leaving a tombstone);
* ``set_null``: ``ON DELETE SET NULL`` of parents 1, 3, 5, ... on ``r1``;
* ``two_keys``: both ``r1`` and ``r2`` set null in one event per parent (two foreign keys
  of the child to one parent), parents 5, 7, 9, ...: the runs of several slots, which keep
  the rows' earlier positions aside.

Each batch is one run of the merge's plan (``dblog_worker/merge/derived.py``): a few
set-based statements, whatever the number of events. The target is checked after every
batch (rows left, rows whose ``r1``/``r2`` are null, tombstones), and a wrong count stops
the benchmark. Reported per target kind (``--source postgresql``: a PostgreSQL target;
``--source mariadb``: a MariaDB one), medians of ``--runs`` (each on a fresh target and
landing zone) and their spread.

Spark: ``tests.spark_local.local_spark()`` (``local[2]``) as in ``merge_throughput``; the
first merge of the process (JVM warm-up) is a tiny one, not timed (none under 10 000
rows: the suite's tiny run measures nothing).
"""

from __future__ import annotations

import shutil
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pymysql

from bench.common import (
    MARIADB,
    MARIADB_NOTE,
    POSTGRES_NOTE,
    POSTGRESQL,
    Options,
    Result,
    machine,
    median,
    progress,
    rounded,
)
from dblog_worker.config import Config, parse
from dblog_worker.events import ChangeEvent, Op, Origin
from dblog_worker.foreign_keys import Action, action_images
from dblog_worker.landing.parquet import LandingZone
from dblog_worker.landing.sink import LandedReader
from dblog_worker.merge.loop import Stager, merge_source
from dblog_worker.merge.plan import Batch
from dblog_worker.merge.target import Target
from dblog_worker.position import Position
from tests.services import MariaDBServer, PostgresServer

NAME = "cascade_merge"
FIGURES = ("load_merge_s", "phases.*.apply_s", "phases.*.events_per_s_applied")
TABLE = "shop.c"
SOURCE_NAME = "bench"
CHILDREN_PER_PARENT = 10
SEGMENT_EVENTS = 50_000
COLUMNS = (("id", "int8", 20), ("pid", "int8", 20), ("r1", "int8", 20), ("r2", "int8", 20),
           ("payload", "text", 25))
SCHEMA_DOCUMENT: dict[str, object] = {
    "columns": [{"name": n, "type": t, "type_oid": oid} for n, t, oid in COLUMNS],
    "key": ["id"],
}
START_US = 1_763_942_400_000_000
PHASES = ("delete", "set_null", "two_keys")
WARM_UP_ROWS = 1_000


@dataclass(frozen=True)
class Phase:
    seconds: float  # the whole merge of the batch
    stage_s: float  # of which Spark's staging (read the segment, JDBC into the stage)
    events: int
    deleted: int
    derived: int

    @property
    def apply_s(self) -> float:
        """The rest: the plan, the apply transaction (the derived statements)."""
        return self.seconds - self.stage_s


@dataclass(frozen=True)
class Run:
    load_s: float
    phases: dict[str, Phase]


def _image(key: int) -> str:
    parent = key // CHILDREN_PER_PARENT
    return (f'{{"id":{key},"pid":{parent},"r1":{parent},"r2":{parent},'
            f'"payload":"child {key} of parent {parent}"}}')


def land_load(zone: LandingZone, rows: int) -> None:
    """The child's rows, as a dump would have landed them, in segments."""
    zone.write_schema(TABLE, 1, SCHEMA_DOCUMENT)
    for first in range(0, rows, SEGMENT_EVENTS):
        zone.commit_segment(TABLE, [
            ChangeEvent(TABLE, Op.READ, Position(1, 1, 1 + key), f"[{key}]", _image(key), None,
                        Origin.DUMP, START_US, 1, "bench-dump")
            for key in range(first, min(rows, first + SEGMENT_EVENTS))])


def land_phase(zone: LandingZone, phase: str, parents: list[int], major: int) -> None:
    """One parent bulk delete: an action event per parent, in one segment."""
    events = []
    for index, parent in enumerate(parents):
        value = str(parent)
        if phase == "delete":
            actions = [Action((("pid", value),), None)]
        elif phase == "set_null":
            actions = [Action((("r1", value),), (("r1", "null"),))]
        else:
            actions = [Action((("r1", value),), (("r1", "null"),)),
                       Action((("r2", value),), (("r2", "null"),))]
        before, after = action_images(actions)
        events.append(ChangeEvent(TABLE, Op.FOREIGN_KEY, Position(major, 4 + index * 40, 0),
                                  None, after, before, Origin.LOG, START_US, 1))
    zone.commit_segment(TABLE, events)


def phase_parents(phase: str, count: int) -> list[int]:
    start = {"delete": 0, "set_null": 1, "two_keys": 5}[phase]
    return list(range(start, start + 2 * count, 2))


def merge_config(landing: Path, kind: str, dsn: str, state: str) -> Config:
    target: dict[str, object] = {"kind": kind, "dsn": dsn}
    if kind == MARIADB:
        target["state_schema"] = state
    return parse({
        "source": {"name": SOURCE_NAME, "kind": "postgresql",
                   "dsn": "host=127.0.0.1 dbname=unused", "tables": [TABLE]},
        "redis": {"url": "redis://127.0.0.1:1/0"},
        "landing": {"path": str(landing)},
        "target": target,
        "merge": {"batch_max_events": 1_000_000},
    }, {})


class TargetServer:
    """A throwaway target server of one kind: fresh databases, counts of the child table."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.server: PostgresServer | MariaDBServer = (
            PostgresServer() if kind == POSTGRESQL else MariaDBServer())

    @contextmanager
    def database(self, state: str) -> Iterator[tuple[str, Callable[[str], int]]]:
        """A fresh target (and ``state``, a MariaDB target's state schema, dropped after):
        (DSN, a function that counts the child's rows meeting a WHERE condition)."""
        name = f"t_{uuid.uuid4().hex[:12]}"
        if isinstance(self.server, PostgresServer):
            dsn = self.server.create_database(name)

            def count(where: str) -> int:
                with psycopg.connect(dsn) as conn:
                    row = conn.execute(f"SELECT count(*) FROM shop.c WHERE {where}".encode()
                                       ).fetchone()
                    return int(row[0]) if row else -1
            try:
                yield dsn, count
            finally:
                self.server.drop_database(name)
            return
        server = self.server
        server.create_database("shop")

        def my_count(where: str) -> int:
            with pymysql.connect(**server.connect_args("shop")) as conn, conn.cursor() as cur:
                cur.execute(f"SELECT count(*) FROM shop.c WHERE {where}")
                found = cur.fetchone()
                return int(found[0]) if found else -1
        try:
            yield server.url(), my_count
        finally:
            server.drop_database("shop")
            server.drop_database(state)


def merge_once(config: Config, stager: Stager) -> tuple[float, float, Any]:
    """(seconds, of which staging, the table's report)."""
    staging: list[float] = []

    def timed(batch: Batch, target: Target, reader: LandedReader) -> None:
        started = time.perf_counter()
        stager(batch, target, reader)
        staging.append(time.perf_counter() - started)

    started = time.perf_counter()
    report = merge_source(config, timed)
    seconds = time.perf_counter() - started
    if not report.ok:
        raise RuntimeError(f"the merge failed: {report.as_dict()}")
    return seconds, sum(staging), report.tables[0]


def run_once(target: TargetServer, stager: Stager, rows: int, events: int) -> Run:
    workdir = Path(tempfile.mkdtemp(prefix="dblog-bench-cascade-"))
    try:
        zone = LandingZone(workdir / "landing", SOURCE_NAME)
        land_load(zone, rows)
        state = f"dblog_{uuid.uuid4().hex[:8]}"
        with target.database(state) as (dsn, count):
            config = merge_config(workdir / "landing", target.kind, dsn, state)
            load_s, _, _ = merge_once(config, stager)
            if count("1 = 1") != rows:
                raise RuntimeError("the load did not merge whole")
            phases: dict[str, Phase] = {}
            alive = rows
            for major, phase in enumerate(PHASES, start=2):
                parents = phase_parents(phase, events)
                land_phase(zone, phase, parents, major)
                seconds, stage_s, table = merge_once(config, stager)
                phases[phase] = Phase(seconds, stage_s, events, table.deleted, table.derived)
                _check(phase, count, rows, events, alive)
                if phase == "delete":
                    alive -= events * CHILDREN_PER_PARENT
        return Run(load_s, phases)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _check(phase: str, count: Callable[[str], int], rows: int, events: int, alive: int) -> None:
    matched = events * CHILDREN_PER_PARENT
    if phase == "delete":
        found, expected = count("1 = 1"), alive - matched
    elif phase == "set_null":
        found, expected = count("r1 IS NULL"), matched
    else:
        found, expected = count("r2 IS NULL"), matched
    if found != expected:
        raise RuntimeError(f"{phase}: the target has {found} rows where {expected} were due")


def run(options: Options) -> Result:
    from spark.merge import spark_stager
    from tests.spark_local import local_spark

    rows = options.rows
    events = max(1, rows // 100)
    target = TargetServer(options.source)
    runs: list[Run] = []
    target.server.start()
    try:
        with local_spark("dblog-bench-cascade", tiny=options.tiny) as spark:
            spark.sparkContext.setLogLevel("WARN")
            stager = spark_stager(spark)
            if rows >= 10 * WARM_UP_ROWS:  # the JVM's first merges: not timed
                run_once(target, stager, WARM_UP_ROWS, WARM_UP_ROWS // 100)
            for i in range(options.runs):
                done = run_once(target, stager, rows, events)
                runs.append(done)
                progress(f"{NAME} {options.source} run {i + 1}/{options.runs}: load "
                         f"{done.load_s:.1f} s; " + ", ".join(
                             f"{name} {p.seconds:.2f} s (apply {p.apply_s:.2f} s)"
                             for name, p in done.phases.items()))
    finally:
        target.server.stop()
    return result(options, rows, events, runs)


def result(options: Options, rows: int, events: int, runs: list[Run]) -> Result:
    phases: dict[str, Any] = {}
    for name in PHASES:
        seconds = [r.phases[name].seconds for r in runs]
        applies = [r.phases[name].apply_s for r in runs]
        last = runs[-1].phases[name]
        phases[name] = {
            "events": events,
            "child_rows_matched": events * CHILDREN_PER_PARENT,
            "merge_s": rounded(median(seconds)),
            "merge_s_min_max": [rounded(min(seconds)), rounded(max(seconds))],
            "stage_s": rounded(median([r.phases[name].stage_s for r in runs])),
            "apply_s": rounded(median(applies)),
            "apply_s_min_max": [rounded(min(applies)), rounded(max(applies))],
            "events_per_s_applied": round(events / max(median(applies), 1e-9)),
            "deleted": last.deleted,
            "derived": last.derived,
        }
    loads = [r.load_s for r in runs]
    return {
        "benchmark": NAME,
        "target": options.source,
        "child_rows": rows,
        "parents_per_batch": events,
        "children_per_parent": CHILDREN_PER_PARENT,
        "runs": options.runs,
        "load_merge_s": rounded(median(loads)),
        "load_merge_s_min_max": [rounded(min(loads)), rounded(max(loads))],
        "phases": phases,
        "spark": {"master": "local[1]" if options.tiny else "local[2]"},
        "machine": {**machine(options.source),
                    "target_settings": POSTGRES_NOTE if options.source == POSTGRESQL
                    else MARIADB_NOTE},
    }
