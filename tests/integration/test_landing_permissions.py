"""The landing zone holds the source's rows: a real worker, started with umask 022 (which
would make files world-readable), creates every file ``0600`` and every directory
``0700``; ``dblog merge`` (spark-submit) and ``dblog verify``, run as the same user, still
read it and find the target equal to the source."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from dblog_worker.landing.parquet import LandingZone, read_events
from tests.integration.harness import Workers, cli, wait_for, write_config
from tests.services import PostgresServer
from tests.spark_local import jdbc_jars

TABLE = "public.items"
ROWS = 120


@pytest.fixture
def pg_target(postgres_server: PostgresServer) -> Iterator[str]:
    name = f"t_{uuid.uuid4().hex[:16]}"
    yield postgres_server.create_database(name)
    postgres_server.drop_database(name)


def modes(root: Path) -> tuple[dict[str, int], dict[str, int]]:
    """The permission bits of every directory (``root`` included) and file under ``root``."""
    dirs = {str(root): root.stat().st_mode & 0o7777}
    files = {}
    for parent, dirnames, filenames in os.walk(root):
        for name in dirnames:
            dirs[os.path.join(parent, name)] = os.stat(os.path.join(parent, name)).st_mode & 0o7777
        for name in filenames:
            files[os.path.join(parent, name)] = os.stat(os.path.join(parent, name)).st_mode & 0o7777
    return dirs, files


def test_a_worker_lands_owner_only_files_that_merge_and_verify_read(
        pg_dsn: str, pg_target: str, redis_url: str, tmp_path: Path) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE public.items (id int PRIMARY KEY, note text)")
        conn.execute("ALTER TABLE public.items REPLICA IDENTITY FULL")
        conn.execute("INSERT INTO public.items SELECT n, 'row ' || n FROM generate_series(1, %s) n",
                     (ROWS,))
    extra = f"""
[target]
kind = "postgresql"
dsn = {json.dumps(pg_target)}

[merge]
master = "local[2]"
jars = {json.dumps([str(j) for j in jdbc_jars()])}

[merge.spark_conf]
"spark.ui.enabled" = "false"
"spark.sql.shuffle.partitions" = "2"
"""
    config = write_config(tmp_path, pg_dsn, redis_url, [TABLE], extra=extra)
    landing = tmp_path / "landing"
    old = os.umask(0o022)  # the worker inherits it
    try:
        with Workers(tmp_path / "worker.log") as workers:
            worker = workers.start(config)
            assert worker.alive(), worker.log()[-5000:]
            result = cli(config, "dump", "--all", "--wait", "--chunk-size", "50", timeout=90)
            assert "completed" in result.stdout, result.stdout
            with psycopg.connect(pg_dsn, autocommit=True) as conn:
                conn.execute("UPDATE public.items SET note = 'changed' WHERE id <= 10")
                conn.execute("DELETE FROM public.items WHERE id > 110")
            zone = LandingZone(landing, "src")

            def landed() -> bool:
                return sum(e["op"] == "d" for e in read_events(zone, TABLE)) == 10

            wait_for(landed, 60, "the deletes to land", lambda: worker.log()[-5000:])
            assert worker.stop() == 0, worker.log()[-5000:]
    finally:
        os.umask(old)

    dirs, files = modes(landing)
    assert {p for p in files if p.endswith(".parquet")}, files
    assert {p for p in files if p.endswith(".json")}, files
    assert {p: 0o700 for p in dirs} == dirs
    assert {p: 0o600 for p in files} == files

    merged = cli(config, "merge", "--json", timeout=300)
    report = json.loads(merged.stdout[merged.stdout.index("{"):])
    assert report["ok"] and report["tables"][0]["upserted"] > 0, report
    verified = cli(config, "verify", "--json", timeout=120)
    (table,) = json.loads(verified.stdout)["tables"]
    assert table["equal"] and table["source_rows"] == table["target_rows"] == 110, table
