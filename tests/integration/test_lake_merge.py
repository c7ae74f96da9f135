"""The merge into lake tables, Iceberg (a JDBC catalog on PostgreSQL) and Delta, with the
real formats' jars on Spark 3.5 (``.tools/spark35``: Iceberg has no Spark 4.2 runtime).

Each merge is ``dblog merge`` of that installation, a spark-submit of its own; the tables
are read back without a JVM (pyiceberg, deltalake), as ``dblog verify`` reads them.
Older events reach a target that has seen newer ones through a second source mapped onto
the same target table: its merge log entry is empty, so it applies its segments.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from dblog_worker import config as config_module
from dblog_worker.events import ChangeEvent, Op, Origin
from dblog_worker.lake.read import read_table
from dblog_worker.landing.parquet import LandingZone
from dblog_worker.position import Position
from tests.lake import lake_config, merge

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


def rows(config: Path, table: str = TABLE) -> dict[int, dict[str, Any]]:
    lake = config_module.load(config).require_target().lake
    assert lake is not None
    found = read_table(lake, table)
    if found is None:
        return {}
    return {r["id"]: r for r in found.to_pylist()}


def report_of(report: dict[str, Any], table: str = TABLE) -> dict[str, Any]:
    assert report["ok"], report
    (found,) = [t for t in report["tables"] if t["table"] == table]
    return dict(found)


@pytest.mark.slow  # seven spark-submits with a lake format's jars: about three minutes
@pytest.mark.timeout(900)
@pytest.mark.parametrize("kind", ["iceberg", "delta"])
def test_merge_into_a_lake_table(kind: str, tmp_path: Path, pg_dsn: str) -> None:
    landing, old_landing = tmp_path / "landing", tmp_path / "old"
    zone, old = LandingZone(landing, "src"), LandingZone(old_landing, "old")
    for z in (zone, old):
        z.write_schema(TABLE, 1, V1)
    partition = {TABLE: ["bucket:4:id"] if kind == "iceberg" else ["name"]}
    config = lake_config(tmp_path, kind, landing, "src", [TABLE], pg_dsn,
                         partition_by=partition)
    other = lake_config(tmp_path, kind, old_landing, "old", [TABLE], pg_dsn)

    # 1. the latest event per key; a delete leaves no row
    zone.commit_segment(TABLE, [ev("r", 10, 1), ev("c", 11, 2), ev("c", 12, 3)])
    zone.commit_segment(TABLE, [ev("u", 20, 1, name="new", amount="2.25"), ev("d", 21, 2),
                                ev("u", 22, 3, name="x'\\y", amount=None)])
    first = report_of(merge(config))
    assert (first["batches"], first["events"]) == (1, 6), first
    got = rows(config)
    assert sorted(got) == [1, 3]
    assert got[1]["name"] == "new" and str(got[1]["amount"]).startswith("2.25")
    assert got[3]["name"] == "x'\\y" and got[3]["amount"] is None
    assert got[1]["_dblog_position"] == Position(20, 0, 0).encode()
    assert got[1]["at"].isoformat().startswith("2024-01-02T03:04:05.5")

    # 2. nothing new: nothing applied
    again = report_of(merge(config))
    assert again["batches"] == 0, again

    # 3. older events from another source: an older upsert of a newer row and an upsert
    # older than a key's delete change nothing (the guard, the tombstone); a new key lands
    old.commit_segment(TABLE, [ev("c", 5, 1, name="older"), ev("c", 6, 2, name="back"),
                               ev("c", 7, 9, name="nine")])
    report_of(merge(other))
    got = rows(config)
    assert sorted(got) == [1, 3, 9]
    assert got[1]["name"] == "new"

    # 4. a truncate clears what came before it, in the batch and before
    zone.commit_segment(TABLE, [ev("c", 30, 4), ev("t", 31, None), ev("c", 32, 5)])
    truncated = report_of(merge(config))
    assert truncated["truncated"], truncated
    assert sorted(rows(config)) == [5]

    # 5. a column added at the source is added to the target
    zone.write_schema(TABLE, 2, V2)
    zone.commit_segment(TABLE, [ev("c", 40, 6, version=2, added=7), ev("u", 41, 5, version=2)])
    report_of(merge(config))
    got = rows(config)
    assert sorted(got) == [5, 6]
    assert got[6]["added"] == 7 and got[5]["added"] is None

    # 6. the whole landing zone replayed under another source name (a merge log that knows
    # nothing of it) leaves the table as it is
    before = rows(config)
    shutil.copytree(landing / "src", tmp_path / "replay" / "again")
    replayed = lake_config(tmp_path, kind, tmp_path / "replay", "again", [TABLE], pg_dsn)
    report_of(merge(replayed))
    assert rows(config) == before
