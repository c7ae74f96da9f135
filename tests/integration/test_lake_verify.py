"""A real capture merged into lake tables, then ``dblog verify`` of them and the repair's
removal of extra rows, on PostgreSQL, Iceberg (JDBC catalog) and Delta.

The worker dumps the convergence harness's tables under a concurrent workload, and a
table of every family of values; the landing zone is merged into the lake (one Spark 3.5
session for the module); the lake tables are compared with the source by this test's own
reads, then by ``dblog verify``, which must find them equal. Planted differences (a row
deleted, a row changed, an extra row, through Spark SQL on the lake table) are named by
verify, key by key; ``remove_extra`` deletes the extra row, guarded by its position.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any, cast

import psycopg
import pytest

from dblog_worker import config as config_module
from dblog_worker.lake.read import read_table
from dblog_worker.verify import command as verify
from tests.integration.harness import (
    PLAIN,
    SOURCE,
    Backend,
    PgDatabase,
    WorkerProcess,
    assert_converged,
    dump,
    dumps_under_load,
    wait_request,
)
from tests.lake import LakeSession, lake_sections
from tests.services import PostgresServer

pytestmark = [pytest.mark.spark]

TYPED = "public.typed"
TYPED_DDL = """
CREATE TABLE public.typed (
  id int8 PRIMARY KEY, flag bool, small int2, amount numeric(12, 4), loose numeric,
  ratio float8, tiny float4, label text, code varchar(10), raw bytea, born date,
  seen timestamp(6), at timestamptz, clock time, uid uuid, doc jsonb)
"""
TYPED_ROWS = [
    (1, True, -3, "12.5000", "0.000", 0.1, 1.5, "plain", "a", b"\x00\xff", "2024-02-29",
     "2024-01-02 03:04:05.123456", "2024-01-02 03:04:05.5+02", "12:34:56.789",
     "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", '{"a": [1, 2]}'),
    (2, False, 32767, "-0.0100", "123456789.123456789", -1e20, -0.0, "", "é",
     b"", "1970-01-01", "1999-12-31 23:59:59", "1970-01-01 00:00:00+00", "00:00:00",
     None, "null"),
    (3, None, None, None, None, 2.0 ** 60, float("nan"), None, None, None, None, None, None,
     None, None, None),
    (4, True, 0, "0", "1e-10", 1.2345e-05, 3.4e38, "x, y\n'z'", "N", b"N",
     "0001-01-01", "2000-02-29 12:00:00.000001", "2038-01-19 03:14:08+00", "23:59:59.999999",
     "00000000-0000-0000-0000-000000000000", '"text"'),
]


@pytest.fixture
def backend(postgres_server: PostgresServer, pg_dsn: str, redis_url: str,
            tmp_path: Path) -> Backend:
    return Backend(PgDatabase(pg_dsn), redis_url, tmp_path, postgres_server.restart)


def lake_rows(config: Path, table: str) -> dict[int, dict[str, Any]]:
    """The lake table as this test reads it, by id, without the merge's position."""
    lake = config_module.load(config).require_target().lake
    assert lake is not None
    found = read_table(lake, table)
    assert found is not None, table
    return {r["id"]: {k: v for k, v in r.items() if k != "_dblog_position"}
            for r in found.to_pylist()}


def source_rows(backend: Backend, table: str) -> dict[int, dict[str, Any]]:
    return {row["id"]: row for row in backend.rows(table).values()}


@pytest.mark.slow  # a worker's dumps under load, and the merges of a Spark 3.5 session
@pytest.mark.timeout(900)
@pytest.mark.parametrize("kind", ["iceberg", "delta"])
def test_a_capture_merged_into_a_lake_verifies_equal(
        kind: str, backend: Backend, pg_dsn: str, lake: LakeSession, tmp_path: Path,
        worker_process: Callable[..., WorkerProcess]) -> None:
    backend.use(PLAIN)
    t1, t2 = backend.t1, backend.t2
    backend.create(t1, 200)
    backend.create(t2, 100)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(TYPED_DDL)
        conn.execute("ALTER TABLE public.typed REPLICA IDENTITY FULL")
        with conn.cursor() as cur:
            cur.executemany(f"INSERT INTO {TYPED} VALUES ({', '.join(['%s'] * 16)})",
                            TYPED_ROWS)
    config = backend.config_path([t1, t2, TYPED],
                                 extra=lake_sections(tmp_path, kind, pg_dsn))
    worker = worker_process(config)
    dumps_under_load(backend, config, worker, "tables")
    typed_dump = dump(config, "--table", TYPED)
    assert wait_request(backend.redis_url, SOURCE, typed_dump, ["completed", "failed"], 120,
                        worker)["state"] == "completed"
    assert_converged(backend, t1, t2)

    # merged into the lake: each table equals its source, by this test's reads
    report = lake.merge(config)
    assert report["ok"], [(t["table"], t["error"])
                          for t in cast(list[dict[str, str]], report["tables"])]
    for table in (t1, t2):
        assert lake_rows(config, table) == source_rows(backend, table), table
    typed = lake_rows(config, TYPED)
    assert typed[1]["amount"] == Decimal("12.5") and typed[1]["raw"] == b"\x00\xff"
    assert typed[1]["clock"] == "12:34:56.789"

    # verify: equal, every table, every family of values
    result = verify.verify(config_module.load(config), [t1, t2, TYPED],
                           verify.VerifyOptions(range_rows=100))
    assert result.equal, [(t.table, t.error, t.missing[:3], t.extra[:3], t.changed[:3])
                          for t in result.tables]
    assert [t.source_rows for t in result.tables] == [t.target_rows for t in result.tables]

    # planted differences are named key by key
    keys = sorted(int(json.loads(k)[0]) for k in backend.rows(t1))
    gone, changed = keys[3], keys[len(keys) // 2]
    lake.sql(config, t1, f"DELETE FROM {{t}} WHERE id = {gone}")
    # MERGE, not UPDATE: this session has both formats' extensions, and Iceberg 1.12's
    # rewrite of an UPDATE for row lineage fails on a Delta table (each job loads one)
    lake.sql(config, t1, f"MERGE INTO {{t}} AS t USING (SELECT {changed} AS id) AS s"
                         " ON t.id = s.id WHEN MATCHED THEN UPDATE SET payload = 'damaged'")
    lake.sql(config, t1, "INSERT INTO {t} (id, version, payload, _dblog_position)"
                         " VALUES (-5, 1, 'extra', NULL)")
    lake.sql(config, TYPED, "MERGE INTO {t} AS t USING (SELECT 1 AS id) AS s ON t.id = s.id"
                            " WHEN MATCHED THEN UPDATE SET clock = '12:34:56.788'")
    lake.sql(config, TYPED, "MERGE INTO {t} AS t USING (SELECT 4 AS id) AS s ON t.id = s.id"
                            " WHEN MATCHED THEN UPDATE SET ratio = 0.30000000000000004")
    result = verify.verify(config_module.load(config), [t1, TYPED],
                           verify.VerifyOptions(range_rows=100))
    first, second = result.tables
    assert (first.missing, first.extra, first.changed) == (((gone,),), ((-5,),), ((changed,),))
    assert (second.missing, second.extra, second.changed) == ((), (), ((1,), (4,)))

    # the repair's removal of extra rows: the one the source lacks, guarded by position
    from dblog_dags.extras import remove_extra

    done = remove_extra(config_module.load(config), t1, [-5, keys[0]])
    assert done.removed == [[-5]]
    assert [k for k, _ in done.kept] == [[keys[0]]]
    assert -5 not in lake_rows(config, t1)
    assert len(lake_rows(config, t1)) == len(keys) - 1
