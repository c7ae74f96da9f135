"""lake_merge: the same landed events merged into PostgreSQL (JDBC), Iceberg and Delta, side
by side, by the same Spark 3.5 session.

The landing zone is :mod:`bench.merge_throughput`'s stream (``--rows`` events, default 1M,
over ``rows / 10`` keys of ``public.orders``, creates, updates, deletes and a dump pass, in
segments of 50 000 events). The merges run in one Spark 3.5 session
(``tests/lake_session.py``: ``.tools/spark35``, the Iceberg 1.12 and Delta 3.3 jars, the
PostgreSQL JDBC driver; ``local[2]``; Iceberg publishes no runtime for the main
environment's Spark 4.2), each with the default ``[merge]`` settings:

- **postgresql**: a fresh database, the JDBC target (staging table and MERGE);
- **iceberg**: a fresh warehouse and a JDBC catalog in a fresh PostgreSQL database
  (merge-on-read MERGE, position deletes);
- **delta**: a fresh warehouse (MERGE, deletion of rewritten files).

A round merges into each once, in that order; the first round runs in a fresh JVM (class
loading, JIT) and is reported on its own (``cold_s``); ``--runs`` rounds follow, whose
medians and spread (min, max) are the figures. ``--quick`` (the tests' tiny run) has no
cold round (``cold_s`` is the first run's) and the tests' lean session settings. The time
is the wall time of the job's ``merge_in`` seen from this process (JVM start excluded).
Checked after every merge (a failure stops the benchmark): the target table has exactly the
keys whose latest event is not a delete, with the latest ``sum(amount)``.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg

from bench.common import Options, Result, machine, median, progress, rounded
from bench.merge_throughput import (
    EVENTS_PER_KEY,
    SEGMENT_EVENTS,
    SOURCE_NAME,
    TABLE,
    Stream,
    StreamWriter,
)
from dblog_worker import config as config_module
from dblog_worker.landing.parquet import LandingZone
from tests.lake import LakeSession, lake_sections
from tests.services import PostgresServer

NAME = "lake_merge"
# What a run must produce: finite numbers above 0 (tests/bench: each benchmark, tiny).
FIGURES = ("*.events_per_s", "*.merge_s", "events")
SOURCE_KINDS = ("postgresql",)
TARGETS = ("postgresql", "iceberg", "delta")
# A job's settings for a million events on local[2] (the tests' session has one shuffle
# partition and no adaptive execution, for a few rows): those of bench.merge_throughput.
SESSION_CONF = {"spark.sql.shuffle.partitions": "4", "spark.sql.adaptive.enabled": "true",
                "spark.default.parallelism": "2"}


def write_config(workdir: Path, kind: str, landing: Path, dsn: str, label: str) -> Path:
    """The configuration of a merge of the landing zone into a fresh ``kind`` target."""
    if kind == "postgresql":
        target = f'\n[target]\nkind = "postgresql"\ndsn = "{dsn}"\n'
    else:
        target = lake_sections(workdir, kind, dsn, warehouse=workdir / f"warehouse-{label}")
    path = workdir / f"{label}.toml"
    path.write_text(f"""
[source]
name = "{SOURCE_NAME}"
dsn = "host=127.0.0.1 dbname=unused"
tables = ["{TABLE}"]

[redis]
url = "redis://127.0.0.1:1"

[landing]
path = "{landing}"
{target}""")
    return path


def check(kind: str, config: Path, dsn: str, stream: Stream) -> int:
    """Raise unless the target holds exactly the latest live rows; its row count."""
    if kind == "postgresql":
        with psycopg.connect(dsn) as conn:
            found = conn.execute("SELECT count(*), coalesce(sum(id), 0),"
                                 " coalesce(sum(amount), 0) FROM public.orders").fetchone()
        assert found is not None
        rows, ids, amounts = int(found[0]), int(found[1]), Decimal(found[2])
    else:
        import pyarrow.compute as pc

        from dblog_worker.lake.read import read_table

        lake = config_module.load(config).require_target().lake
        assert lake is not None
        table = read_table(lake, TABLE)
        assert table is not None
        rows = table.num_rows
        ids = int(pc.sum(table["id"]).as_py() or 0)
        amounts = Decimal(pc.sum(table["amount"]).as_py() or 0)
    expected = (stream.expected_rows, stream.expected_id_sum, stream.expected_amount_sum)
    if (rows, ids, amounts) != expected:
        raise RuntimeError(f"the merge into {kind} is wrong: {rows} rows, sum(id) {ids},"
                           f" sum(amount) {amounts}; the latest events give {expected}")
    return rows


def merge_once(session: LakeSession, server: PostgresServer, workdir: Path, kind: str,
               stream: Stream, label: str) -> dict[str, Any]:
    dsn = server.create_database(label)
    try:
        config = write_config(workdir, kind, workdir / "landing", dsn, label)
        started = time.perf_counter()
        report = session.merge(config)
        seconds = time.perf_counter() - started
        if not report["ok"]:
            raise RuntimeError(f"the merge into {kind} failed: {report}")
        table = report["tables"][0]  # type: ignore[index]
        if table["events"] != stream.events:
            raise RuntimeError(f"the merge took {table['events']} events, {stream.events}"
                               " landed")
        rows = check(kind, config, dsn, stream)
    finally:
        server.drop_database(label)
        shutil.rmtree(workdir / f"warehouse-{label}", ignore_errors=True)
    return {"seconds": seconds, "rows": rows, "batches": table["batches"],
            "upserted": table["upserted"], "deleted": table["deleted"]}


def run(options: Options) -> Result:
    events = options.rows
    keys = max(1, events // EVENTS_PER_KEY)
    workdir = Path(tempfile.mkdtemp(prefix="dblog-bench-lake-"))
    server = PostgresServer()
    runs: dict[str, list[dict[str, Any]]] = {kind: [] for kind in TARGETS}
    cold: dict[str, dict[str, Any]] = {}
    try:
        zone = LandingZone(workdir / "landing", SOURCE_NAME)
        stream = StreamWriter(zone, events, keys).write()
        progress(f"{NAME}: landed {stream.events} events over {keys} keys in"
                 f" {stream.segments} segments")
        server.start()
        started = time.perf_counter()
        session = LakeSession(workdir / "spark.log",
                              conf=None if options.quick else SESSION_CONF)
        startup_s = time.perf_counter() - started
        progress(f"{NAME}: the Spark 3.5 session started in {startup_s:.1f} s")
        # --quick (tests/bench's tiny run): no round of its own for the cold JVM, whose
        # figure is then the first run's
        first = 1 if options.quick else 0
        try:
            for round_ in range(first, options.runs + 1):
                for kind in TARGETS:
                    merged = merge_once(session, server, workdir, kind, stream,
                                        f"{kind}{round_}")
                    if round_ == first:
                        cold[kind] = merged
                    if round_ > 0:
                        runs[kind].append(merged)
                    progress(f"{NAME} {'cold' if round_ == 0 else f'run {round_}'}: {kind}"
                             f" {merged['seconds']:.1f} s,"
                             f" {stream.events / merged['seconds']:,.0f} events/s")
        finally:
            session.close()
    finally:
        server.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    result: Result = {"benchmark": NAME, "events": stream.events, "keys": keys,
                      "segments": stream.segments, "segment_events": SEGMENT_EVENTS,
                      "ops": stream.ops, "runs": options.runs, "spark": "3.5.9 local[2]",
                      "spark_conf": {} if options.quick else SESSION_CONF,
                      "session_startup_s": rounded(startup_s), "machine": machine()}
    for kind in TARGETS:
        seconds = [r["seconds"] for r in runs[kind]]
        result[kind] = {
            "events_per_s": rounded(stream.events / median(seconds)),
            "merge_s": rounded(median(seconds)),
            "spread_s": [rounded(min(seconds)), rounded(max(seconds))],
            "cold_s": rounded(cold[kind]["seconds"]), "rows": runs[kind][-1]["rows"],
            "batches": runs[kind][-1]["batches"]}
    return result
