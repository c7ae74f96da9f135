"""Partitioned tables (PostgreSQL): captured under the partitioned table's name, dumped
through it, and a publication that would lose their changes refused with its fix.

The publication the worker creates publishes a partition's changes as changes of the
partitioned table (``publish_via_partition_root``); without it every live change would
arrive under the partitions' names and be dropped.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest

from dblog_worker.landing.parquet import LandingZone
from tests.integration.harness import (
    SOURCE,
    Backend,
    PgDatabase,
    WorkerProcess,
    Workers,
    assert_converged,
    cli,
    dump,
    events_of,
    wait_for,
    wait_request,
)
from tests.services import PostgresServer

PARTITIONED = """
CREATE SEQUENCE IF NOT EXISTS versions;
CREATE TABLE items (id integer, version bigint NOT NULL, payload text, PRIMARY KEY (id))
  PARTITION BY RANGE (id);
CREATE TABLE items_low PARTITION OF items FOR VALUES FROM (MINVALUE) TO (1000);
CREATE TABLE items_high PARTITION OF items FOR VALUES FROM (1000) TO (2000);
CREATE TABLE items_rest PARTITION OF items DEFAULT;
ALTER TABLE items REPLICA IDENTITY FULL;
ALTER TABLE items_low REPLICA IDENTITY FULL;
ALTER TABLE items_high REPLICA IDENTITY FULL;
ALTER TABLE items_rest REPLICA IDENTITY FULL;
"""


@pytest.fixture
def backend(pg_dsn: str, redis_url: str, tmp_path: Path,
            postgres_server: PostgresServer) -> Backend:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(PARTITIONED.encode())
    return Backend(PgDatabase(pg_dsn), redis_url, tmp_path, postgres_server.restart)


@pytest.fixture
def workers(backend: Backend) -> Iterator[Callable[..., WorkerProcess]]:
    with Workers(backend.tmp / "worker.log") as started:
        yield started.start


def test_changes_and_dumps_of_a_partitioned_table(
    backend: Backend, workers: Callable[..., WorkerProcess]
) -> None:
    """Live changes in every partition land under the partitioned table's name; a row
    that moves to another partition is one change, as a key change of an unpartitioned
    table is (a delete of the old key, a create of the new, in one transaction); a TRUNCATE
    of the partitioned table empties it; a dump reads every partition; the output
    converges."""
    t1, v = backend.t1, backend.next_version
    backend.execute(f"INSERT INTO {t1} SELECT g * 10, {v}, 'p' FROM generate_series(1, 250) g")
    config = backend.config_path([t1])
    worker = workers(config)
    backend.execute(f"INSERT INTO {t1} VALUES (5, {v}, 'low'), (1505, {v}, 'high'), "
                    f"(5000, {v}, 'rest')")
    backend.execute(f"UPDATE {t1} SET version = {v}, payload = 'u' WHERE id IN (5, 1505, 5000)")
    backend.execute(f"UPDATE {t1} SET id = 1005, version = {v} WHERE id = 5")  # low → high
    backend.execute(f"DELETE FROM {t1} WHERE id = 5000")

    def landed() -> list[tuple[object, object]]:
        return [(e["op"], e["key"]) for e in events_of(backend, t1) if e["origin"] == "log"]

    expected = [("c", "[5]"), ("c", "[1505]"), ("c", "[5000]"), ("u", "[5]"),
                ("u", "[1505]"), ("u", "[5000]"), ("d", "[5]"), ("c", "[1005]"),
                ("d", "[5000]")]
    wait_for(lambda: landed() == expected, 30, f"the changes {expected}",
             lambda: f"{landed()}\n{worker.log()[-3000:]}")
    assert LandingZone(backend.landing, SOURCE).tables() == [t1]
    events = [e for e in events_of(backend, t1) if e["origin"] == "log"]
    moved_out, moved_in = events[6], events[7]
    assert str(moved_out["position"])[:16] == str(moved_in["position"])[:16]  # one transaction
    assert json.loads(str(moved_out["before"]))["payload"] == "u"
    assert json.loads(str(moved_in["after"]))["id"] == 1005

    request_id = dump(config, "--table", t1, "--chunk-size", "40")
    state = wait_request(backend.redis_url, SOURCE, request_id, ["completed", "failed"], 60,
                         worker)
    assert state["state"] == "completed", state
    assert_converged(backend, t1)
    dumped = {e["key"] for e in events_of(backend, t1) if e["dump_id"] == request_id}
    assert {"[1005]", "[1505]", "[10]", "[2500]"} <= dumped  # every partition was read

    backend.execute(f"TRUNCATE {t1}")
    backend.execute(f"INSERT INTO {t1} VALUES (7, {v}, 'after')")
    wait_for(lambda: landed()[-2:] == [("t", None), ("c", "[7]")], 30, "the truncate",
             worker.log)
    assert_converged(backend, t1)


def _preflight(backend: Backend, tables: list[str]) -> str:
    result = cli(backend.config_path(tables), "preflight", check=False, timeout=30)
    assert result.returncode != 0, result.stdout
    return result.stdout + result.stderr


def test_preflight_refuses_a_partition_whose_identity_lacks_the_key(backend: Backend) -> None:
    backend.execute("ALTER TABLE items_high REPLICA IDENTITY NOTHING")
    backend.execute("ALTER TABLE items_low REPLICA IDENTITY DEFAULT")  # its primary key: fine
    output = _preflight(backend, [backend.t1])
    assert "partitions of public.items have a REPLICA IDENTITY that does not carry the key" \
        in output
    assert 'ALTER TABLE "public"."items_high" REPLICA IDENTITY FULL;' in output
    assert "items_low" not in output


def test_preflight_refuses_a_table_and_its_partition(backend: Backend) -> None:
    output = _preflight(backend, [backend.t1, "public.items_low"])
    assert "public.items_low is a partition of public.items, which is captured too" in output


@pytest.mark.parametrize(
    ("options", "said", "fix"),
    [
        ("WITH (publish = 'insert, update')",
         "does not publish delete, truncate",
         "SET (publish = 'insert, update, delete, truncate');"),
        ("",  # publish_via_partition_root defaults to false
         "under their partitions' names",
         "SET (publish_via_partition_root = true);"),
    ],
    ids=["operations", "via-root"],
)
def test_preflight_refuses_a_publication_that_loses_changes(
    backend: Backend, options: str, said: str, fix: str
) -> None:
    backend.execute("CREATE TABLE IF NOT EXISTS dblog_probe ()")  # nothing; a statement
    backend.execute("CREATE SCHEMA IF NOT EXISTS dblog")
    backend.execute("CREATE TABLE IF NOT EXISTS dblog.watermark (source text PRIMARY KEY, "
                    "value text NOT NULL, written_at timestamptz NOT NULL)")
    backend.execute(f"CREATE PUBLICATION dblog_{SOURCE} FOR TABLE public.items, "
                    f"dblog.watermark {options}")
    output = _preflight(backend, [backend.t1])
    assert said in output
    assert f'ALTER PUBLICATION "dblog_{SOURCE}" {fix}' in output


@pytest.mark.parametrize(
    ("spec", "said"),
    [("public.items WHERE (id > 100)", "filters the rows (WHERE) of public.items"),
     ("public.items (id, version)", "filters the columns of public.items")],
    ids=["row-filter", "column-list"],
)
def test_preflight_refuses_row_filters_and_column_lists(
    backend: Backend, spec: str, said: str
) -> None:
    backend.execute("CREATE SCHEMA IF NOT EXISTS dblog")
    backend.execute("CREATE TABLE IF NOT EXISTS dblog.watermark (source text PRIMARY KEY, "
                    "value text NOT NULL, written_at timestamptz NOT NULL)")
    backend.execute(f"CREATE PUBLICATION dblog_{SOURCE} FOR TABLE {spec}, dblog.watermark "
                    "WITH (publish_via_partition_root = true)")
    output = _preflight(backend, [backend.t1])
    assert said in output
    assert (f'ALTER PUBLICATION "dblog_{SOURCE}" SET TABLE "dblog"."watermark", '
            '"public"."items";') in output


def test_a_publication_for_all_tables_is_used_as_it_is(
    backend: Backend, workers: Callable[..., WorkerProcess]
) -> None:
    """FOR ALL TABLES (with publish_via_partition_root): the worker does not try to set its
    tables, captures through it, and ignores the tables it does not capture."""
    backend.execute("CREATE TABLE other (id int PRIMARY KEY)")
    backend.execute(f"CREATE PUBLICATION dblog_{SOURCE} FOR ALL TABLES "
                    "WITH (publish_via_partition_root = true)")
    t1, v = backend.t1, backend.next_version
    worker = workers(backend.config_path([t1]))
    backend.execute("INSERT INTO other VALUES (1)")
    backend.execute(f"INSERT INTO {t1} VALUES (1500, {v}, 'x')")
    wait_for(lambda: [e["key"] for e in events_of(backend, t1)] == ["[1500]"], 30,
             "the insert", worker.log)
    assert LandingZone(backend.landing, SOURCE).tables() == [t1]
