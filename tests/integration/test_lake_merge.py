"""The merge into lake tables, Iceberg (a JDBC catalog on PostgreSQL) and Delta, with the
real formats' jars on Spark 3.5 (``.tools/spark35``: Iceberg has no Spark 4.2 runtime).

The merges run in one Spark 3.5 session for the module (``tests/lake_session.py``: the
job's own ``merge_in``, without a JVM start per merge); the kill -9 test runs ``dblog
merge`` itself, a spark-submit, and kills it. The tables are read back without a JVM
(pyiceberg, deltalake), as ``dblog verify`` reads them. Older events reach a target that
has seen newer ones through a second source mapped onto the same target table: its merge
log entry is empty, so it applies its segments.
"""

from __future__ import annotations

import json
import os
import random
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg
import pyarrow.parquet as pq
import pytest

from dblog_worker import config as config_module
from dblog_worker.config_lake import LakeConfig
from dblog_worker.errors import TargetError
from dblog_worker.events import ChangeEvent, Op, Origin
from dblog_worker.lake.read import (
    delete_rows,
    delta_storage_options,
    delta_uri,
    merge_log_of,
    partition_columns,
    read_table,
)
from dblog_worker.landing.parquet import LandingZone
from dblog_worker.landing.s3 import S3LandingZone
from dblog_worker.landing.s3_objects import Bucket, S3Location
from dblog_worker.position import Position
from dblog_worker.verify import command as verify
from tests.integration.harness import wait_for
from tests.lake import S3A_SPARK35_JARS, LakeSession, MergeProcess, lake_config, merge
from tests.services import SeaweedServer
from tests.spark_jvm import CODEGEN

pytestmark = [pytest.mark.spark]

TABLE = "public.items"
V1: dict[str, Any] = {"columns": [{"name": "id", "type": "int4", "type_oid": 23},
                                  {"name": "name", "type": "text", "type_oid": 25},
                                  {"name": "amount", "type": "numeric", "type_oid": 1700},
                                  {"name": "at", "type": "timestamptz", "type_oid": 1184}],
                      "key": ["id"]}
V2: dict[str, Any] = {**V1, "columns": [*V1["columns"],
                                        {"name": "added", "type": "int8", "type_oid": 20}]}


def ev(op: str, major: int, id_: int | None, version: int = 1, **values: object) -> ChangeEvent:
    after = None
    if op in ("c", "u", "r"):
        row: dict[str, object] = {"id": id_, "name": f"n{id_}", "amount": "1.50",
                                  "at": "2024-01-02 03:04:05.5+00"}
        row.update(values)
        after = json.dumps(row, separators=(",", ":"))
    return ChangeEvent(TABLE, Op(op), Position(major, 0, 0),
                       None if id_ is None else f"[{id_}]", after, None,
                       Origin.DUMP if op == "r" else Origin.LOG, 1_700_000_000_000_000, version)


def segment_events(path: Path) -> list[ChangeEvent]:
    """The events of a landed segment, as they were committed."""
    found = []
    for r in pq.read_table(path).to_pylist():
        found.append(ChangeEvent(TABLE, Op(r["op"]), Position.decode(r["position"]), r["key"],
                                 r["after"], r["before"], Origin(r["origin"]),
                                 1_700_000_000_000_000, r["schema_version"]))
    return found


def lake_of(config: Path) -> LakeConfig:
    lake = config_module.load(config).require_target().lake
    assert lake is not None
    return lake


def rows(config: Path, table: str = TABLE) -> dict[int, dict[str, Any]]:
    found = read_table(lake_of(config), table)
    return {} if found is None else {r["id"]: r for r in found.to_pylist()}


def report_of(report: dict[str, Any], table: str = TABLE) -> dict[str, Any]:
    (found,) = [t for t in report["tables"] if t["table"] == table]
    assert report["ok"], found["error"]
    return dict(found)


def counts(report: dict[str, Any]) -> tuple[int, int, int]:
    return report["batches"], report["upserted"], report["deleted"]


@pytest.mark.parametrize("kind", ["iceberg", "delta"])
@pytest.mark.timeout(900)
def test_merge_into_a_lake_table(kind: str, tmp_path: Path, pg_dsn: str,
                                 lake: LakeSession) -> None:
    landing, old_landing = tmp_path / "landing", tmp_path / "old"
    zone, old = LandingZone(landing, "src"), LandingZone(old_landing, "old")
    for z in (zone, old):
        z.write_schema(TABLE, 1, V1)
    partition = {TABLE: ["bucket:4:id"] if kind == "iceberg" else ["name"]}
    config = lake_config(tmp_path, kind, landing, "src", [TABLE], pg_dsn,
                         partition_by=partition)
    other = lake_config(tmp_path, kind, old_landing, "old", [TABLE], pg_dsn)

    # 1. the latest event per key; a delete leaves no row; the user's partitioning
    zone.commit_segment(TABLE, [ev("r", 10, 1), ev("c", 11, 2), ev("c", 12, 3)])
    zone.commit_segment(TABLE, [ev("u", 20, 1, name="new", amount="2.25"), ev("d", 21, 2),
                                ev("u", 22, 3, name="x'\\y", amount=None)])
    first = report_of(lake.merge(config))
    assert (first["batches"], first["events"]) == (1, 6), first
    assert counts(first) == (1, 2, 0)  # key 2 was never in the table: nothing deleted
    got = rows(config)
    assert sorted(got) == [1, 3]
    assert got[1]["name"] == "new" and got[1]["amount"] == Decimal("2.25")
    assert got[3]["name"] == "x'\\y" and got[3]["amount"] is None
    assert got[1]["_dblog_position"] == Position(20, 0, 0).encode()
    assert got[1]["at"].isoformat().startswith("2024-01-02T03:04:05.5")
    wanted = ["bucket[4]:id"] if kind == "iceberg" else ["name"]
    assert partition_columns(lake_of(config), TABLE) == wanted

    # 2. nothing new: nothing applied
    assert report_of(lake.merge(config))["batches"] == 0

    # 3. an older batch after a newer one, from another source: an older upsert of a newer
    # row and an upsert older than a key's delete change nothing (the guard, the
    # tombstone); a new key lands, and the counts say only that
    old.commit_segment(TABLE, [ev("c", 5, 1, name="older"), ev("c", 6, 2, name="back"),
                               ev("c", 7, 9, name="nine")])
    zone.commit_segment(TABLE, [ev("d", 23, 3)])
    assert counts(report_of(lake.merge(config))) == (1, 0, 1)
    assert counts(report_of(lake.merge(other))) == (1, 1, 0)
    got = rows(config)
    assert sorted(got) == [1, 9]
    assert got[1]["name"] == "new"

    # 4. a truncate clears what came before it, in the batch and before
    zone.commit_segment(TABLE, [ev("c", 30, 4), ev("t", 31, None), ev("c", 32, 5)])
    truncated = report_of(lake.merge(config))
    assert truncated["truncated"], truncated
    assert counts(truncated) == (1, 1, 2)  # 5 in; 1 and 9 out (4 never landed)
    assert sorted(rows(config)) == [5]

    # 5. a column added at the source is added to the target
    zone.write_schema(TABLE, 2, V2)
    zone.commit_segment(TABLE, [ev("c", 40, 6, version=2, added=7), ev("u", 41, 5, version=2)])
    assert counts(report_of(lake.merge(config))) == (1, 2, 0)
    got = rows(config)
    assert sorted(got) == [5, 6]
    assert got[6]["added"] == 7 and got[5]["added"] is None

    # 6. the same events landed again under another source name (a merge log that knows
    # nothing of them): every batch is replayed, nothing changes, and the counts say so
    before = rows(config)
    replay = LandingZone(tmp_path / "replay", "again")
    replay.write_schema(TABLE, 1, V1)
    replay.write_schema(TABLE, 2, V2)
    for segment in zone.segments(TABLE):
        replay.commit_segment(TABLE, segment_events(segment.path))
    replayed = lake_config(tmp_path, kind, tmp_path / "replay", "again", [TABLE], pg_dsn)
    again = report_of(lake.merge(replayed))
    assert counts(again) == (1, 0, 0), again
    assert rows(config) == before
    log = merge_log_of(lake_of(config), TABLE)
    assert (log.get("src", TABLE).last_segment, log.get("src", TABLE).batches) == (5, 4)
    assert log.get("old", TABLE).batches == 1


def test_an_iceberg_table_in_a_hadoop_catalog(tmp_path: Path, pg_dsn: str,
                                              lake: LakeSession) -> None:
    """The warehouse alone as the catalog (``catalog = "hadoop"``): the merge, its log and
    the reads without a JVM (the table's newest metadata file); the repair's delete of
    extra rows, which pyiceberg cannot commit there, is refused with what to do."""
    landing = tmp_path / "landing"
    zone = LandingZone(landing, "src")
    zone.write_schema(TABLE, 1, V1)
    zone.commit_segment(TABLE, [ev("c", 10, 1), ev("c", 11, 2), ev("u", 12, 1, name="one")])
    config = lake_config(tmp_path, "iceberg", landing, "src", [TABLE], pg_dsn,
                         catalog="hadoop")
    assert counts(report_of(lake.merge(config))) == (1, 2, 0)
    zone.commit_segment(TABLE, [ev("d", 20, 2), ev("c", 21, 3)])
    assert counts(report_of(lake.merge(config))) == (1, 1, 1)
    got = rows(config)
    assert sorted(got) == [1, 3] and got[1]["name"] == "one"
    metadata = tmp_path / "warehouse" / "public" / "items" / "metadata"
    assert (metadata / "version-hint.text").is_file()
    log = merge_log_of(lake_of(config), TABLE).get("src", TABLE)
    assert (log.batches, log.events, log.last_segment) == (2, 5, 2)
    with pytest.raises(TargetError, match="Hadoop catalog"):
        delete_rows(lake_of(config), TABLE, ["id"], {(3,): got[3]["_dblog_position"]})
    assert sorted(rows(config)) == [1, 3]


@pytest.fixture(scope="module")
def other_store() -> Iterator[SeaweedServer]:
    """A second object store (another SeaweedFS, the same credentials), for a warehouse
    that is not in the landing zone's store."""
    with SeaweedServer().start() as server:
        yield server


def test_an_s3_landing_zone_merged_into_iceberg_in_another_store(
        tmp_path: Path, pg_dsn: str, seaweed_server: SeaweedServer, s3_bucket: str,
        other_store: SeaweedServer) -> None:
    """Segments landed on the object store (SeaweedFS), merged by ``dblog merge`` on Spark
    3.5, which reads them through S3A of its own Hadoop (hadoop-aws 3.3.4, AWS SDK v1
    modules; the credentials from the environment), into Iceberg tables whose warehouse is
    in a second store (``[target.s3]``), named ``s3://`` (S3A serves that scheme too): S3A
    reaches it by the per-bucket options, and pyiceberg reads it at that store's endpoint.
    The warehouse's bucket exists only there: the landing zone's endpoint would not find
    it."""
    assert all(jar.is_file() for jar in S3A_SPARK35_JARS), "scripts/install fetches them"
    location = S3Location.parse(f"s3://{s3_bucket}/landing", endpoint=seaweed_server.endpoint,
                                path_style=True)
    zone = S3LandingZone(location, "src")
    zone.write_schema(TABLE, 1, V1)
    zone.commit(TABLE, [ev("c", 10, 1), ev("c", 11, 2), ev("u", 12, 1, name="one")])
    zone.commit(TABLE, [ev("d", 20, 2), ev("c", 21, 3, name="three")])
    lake_bucket = other_store.create_bucket(f"lake-{s3_bucket}")
    config = lake_config(tmp_path, "iceberg", f"s3://{s3_bucket}/landing", "src", [TABLE],
                         pg_dsn, s3_endpoint=seaweed_server.endpoint,
                         warehouse=f"s3://{lake_bucket}/warehouse",
                         target_s3={"endpoint": other_store.endpoint, "path_style": True},
                         spark_conf=CODEGEN)  # as users' merges (tests/spark_jvm.py)
    report = merge(config)
    assert counts(report_of(report)) == (1, 2, 0), report
    got = rows(config)
    assert {k: r["name"] for k, r in got.items()} == {1: "one", 3: "three"}
    log = merge_log_of(lake_of(config), TABLE).get("src", TABLE)
    assert (log.batches, log.events, log.last_segment) == (1, 5, 2)
    files, _ = Bucket(S3Location(lake_bucket, endpoint=other_store.endpoint, path_style=True)
                      ).list("warehouse/")
    assert any(f.key.endswith(".parquet") for f in files), [f.key for f in files]


@pytest.mark.timeout(900)  # 160-185 s in full runs on two cores
def test_a_local_landing_zone_merged_into_delta_on_s3_then_verified(
        tmp_path: Path, pg_dsn: str, seaweed_server: SeaweedServer, s3_bucket: str) -> None:
    """A POSIX landing zone, a Delta warehouse in the object store (``[target.s3]``):
    ``dblog merge`` on Spark 3.5 adds the S3A jars and options for the warehouse alone;
    ``dblog verify`` reads the table with delta-rs at the store's endpoint (``s3a://`` as
    ``s3://``), finds it equal to the source, then names the key of a damaged row; the
    repair's delete of an extra row commits there too."""
    from deltalake import DeltaTable

    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE public.items (id int4 PRIMARY KEY, name text,"
                     " amount numeric, at timestamptz)")
        conn.execute("INSERT INTO public.items VALUES (1, 'one', 2.25, %s), (2, 'n2', 1.50, %s)",
                     ["2024-01-02 03:04:05.5+00"] * 2)
    landing = tmp_path / "landing"
    zone = LandingZone(landing, "src")
    zone.write_schema(TABLE, 1, V1)
    zone.commit_segment(TABLE, [ev("c", 10, 1), ev("c", 11, 2), ev("c", 12, 3)])
    zone.commit_segment(TABLE, [ev("u", 20, 1, name="one", amount="2.25"), ev("d", 21, 3)])
    config = lake_config(tmp_path, "delta", landing, "src", [TABLE], pg_dsn,
                         source_dsn=pg_dsn, warehouse=f"s3a://{s3_bucket}/warehouse",
                         target_s3={"endpoint": seaweed_server.endpoint, "path_style": True},
                         spark_conf=CODEGEN)  # as users' merges (tests/spark_jvm.py)
    for name in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):  # only [target.s3] says where
        assert name not in os.environ
    report = merge(config)
    assert counts(report_of(report)) == (1, 2, 0), report
    assert Bucket(S3Location(s3_bucket, endpoint=seaweed_server.endpoint, path_style=True)
                  ).list("warehouse/public.items/_delta_log/")[0], "the table is in the store"

    options = verify.VerifyOptions(range_rows=100)
    result = verify.verify(config_module.load(config), [TABLE], options)
    assert result.equal, [(t.table, t.error, t.missing, t.extra, t.changed)
                          for t in result.tables]
    assert (result.tables[0].source_rows, result.tables[0].target_rows) == (2, 2)
    # a damaged lake row, written by delta-rs with verify's own options (no lock setting:
    # delta-rs commits with conditional puts)
    lake = lake_of(config)
    DeltaTable(delta_uri(lake, TABLE), storage_options=delta_storage_options(lake.s3)
               ).update(predicate="id = 2", updates={"name": "'damaged'"})
    (table,) = verify.verify(config_module.load(config), [TABLE], options).tables
    assert (table.missing, table.extra, table.changed) == ((), (), ((2,),))
    # the repair's removal of an extra row (one the source lost), guarded by its position
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("DELETE FROM public.items WHERE id = 1")
    assert delete_rows(lake, TABLE, ["id"], {(1,): Position(20, 0, 0).encode()}) == [(1,)]
    assert sorted(rows(config)) == [2]


# -- killed mid-batch ----------------------------------------------------------------------

KV = "public.kv"
KV_SCHEMA = {"columns": [{"name": "id", "type": "int8", "type_oid": 20},
                         {"name": "v", "type": "int8", "type_oid": 20}], "key": ["id"]}
SEGMENT_EVENTS, SEGMENTS = 200, 6


def land_kv(landing: Path, seed: int) -> dict[int, int]:
    """Seeded creates, updates and deletes of ``public.kv``, a segment a batch; the
    latest value per key."""
    rnd = random.Random(seed)
    zone = LandingZone(landing, "kill")
    zone.write_schema(KV, 1, KV_SCHEMA)
    present: dict[int, int] = {}
    for segment in range(SEGMENTS):
        events = []
        for i in range(SEGMENT_EVENTS):
            index = segment * SEGMENT_EVENTS + i
            key, position = rnd.randrange(300), Position(0x1000 + index, 0, 0)
            if key in present and rnd.random() < 0.2:
                del present[key]
                events.append(ChangeEvent(KV, Op.DELETE, position, f"[{key}]", None, None,
                                          Origin.LOG, 0, 1))
                continue
            op = Op.UPDATE if key in present else Op.CREATE
            present[key] = index
            events.append(ChangeEvent(KV, op, position, f"[{key}]",
                                      json.dumps({"id": key, "v": index}), None,
                                      Origin.LOG, 0, 1))
        zone.commit_segment(KV, events)
    return present


@pytest.mark.slow  # two spark-submits with the Iceberg jar
@pytest.mark.timeout(600)
def test_merge_killed_mid_batch_applies_it_once(tmp_path: Path, pg_dsn: str,
                                                 lake: LakeSession) -> None:
    """``dblog merge`` into Iceberg SIGKILLed after it applied a batch, at a random instant
    of the next ones; the run after it applies every batch once: the merge log counts each
    landed event once and the table is the latest event per key."""
    landing = tmp_path / "landing"
    expected = land_kv(landing, seed=30)
    config = lake_config(tmp_path, "iceberg", landing, "kill", [KV], pg_dsn,
                         batch_max_events=SEGMENT_EVENTS)
    lake_config_ = lake_of(config)

    def batches() -> int:
        return merge_log_of(lake_config_, KV).get("kill", KV).batches

    job = MergeProcess(config, tmp_path / "merge.log")
    try:
        wait_for(lambda: batches() >= 1 or job.proc.poll() is not None, 300,
                 "the merge to apply a batch", lambda: job.log()[-5000:])
        assert job.proc.poll() is None, job.log()[-5000:]
        time.sleep(random.Random(31).uniform(0, 2))
        assert job.proc.poll() is None, "the merge ended before it was killed"
    finally:
        job.kill()
    applied = batches()
    assert 1 <= applied < SEGMENTS, applied
    rest = report_of(lake.merge(config), KV)
    log = merge_log_of(lake_config_, KV).get("kill", KV)
    assert (log.batches, log.events, log.last_segment) == (
        SEGMENTS, SEGMENTS * SEGMENT_EVENTS, SEGMENTS), (applied, rest)
    assert rest["batches"] == SEGMENTS - applied
    assert {k: r["v"] for k, r in rows(config, KV).items()} == expected


def test_an_unreachable_catalog_is_target_unavailable(tmp_path: Path, pg_dsn: str,
                                                      lake: LakeSession) -> None:
    """The Iceberg catalog's PostgreSQL down: the job's exit status 3 and one line; ``dblog
    merge`` says so before it starts Spark."""
    landing = tmp_path / "landing"
    zone = LandingZone(landing, "src")
    zone.write_schema(TABLE, 1, V1)
    zone.commit_segment(TABLE, [ev("c", 10, 1)])
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = lake_config(tmp_path, "iceberg", landing, "src", [TABLE], pg_dsn)
    text = config.read_text()
    config.write_text(re.sub(r"jdbc:postgresql://[^/]+/", f"jdbc:postgresql://127.0.0.1:{port}/",
                             text))
    answer = lake.run(config)
    assert answer["status"] == 3, answer
    error = str(answer["error"])
    assert "\n" not in error and "is unreachable" in error and f"127.0.0.1:{port}" in error, error
    assert "Py4J" not in error and "Traceback" not in error
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "dblog_worker", "merge", "--config",
                           str(config)], capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 3, done.stdout + done.stderr
    assert done.stderr.splitlines() == [done.stderr.strip()], done.stderr  # one line
    assert "unreachable" in done.stderr and f"127.0.0.1:{port}" in done.stderr, done.stderr
    assert "spark" not in done.stderr.lower() and time.monotonic() - started < 30
