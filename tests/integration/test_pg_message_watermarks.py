"""Watermarks without a table (``watermarks = "message"``), on a real PostgreSQL.

LW and HW are transactional logical decoding messages (``pg_logical_emit_message``), read
from the slot with pgoutput's ``messages`` option: the worker writes no table and needs no
schema of its own. Dumps of every kind converge under a concurrent workload; a role that
may only read the tables and replicate runs them; kill -9 mid-dump resumes; an idle source's
checkpoint moves on with the heartbeat messages.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from dblog_worker.tables import WATERMARK_SCHEMA
from tests.integration.harness import (
    HOSTILE,
    KILLED_LEASE,
    PARTITIONED,
    PLAIN,
    SOURCE,
    Backend,
    PgDatabase,
    TableFlavour,
    WorkerProcess,
    assert_converged,
    checkpoint,
    chunks,
    cli,
    dump,
    dump_through_kills,
    dumps_under_load,
    wait_for,
    wait_request,
)
from tests.services import PostgresServer


@pytest.fixture
def backend(postgres_server: PostgresServer, pg_dsn: str, redis_url: str,
            tmp_path: Path) -> Backend:
    return Backend(PgDatabase(pg_dsn), redis_url, tmp_path, postgres_server.restart)


def message_config(backend: Backend, tables: list[str], dsn: str | None = None,
                   **kwargs: object) -> Path:
    path = backend.config_path(tables, **kwargs)
    text = path.read_text()
    if dsn is not None:
        text = text.replace(f"dsn = {json.dumps(backend.db.dsn)}", f"dsn = {json.dumps(dsn)}")
    path.write_text(text.replace("\ntables = ", '\nwatermarks = "message"\ntables = ', 1))
    return path


def no_watermark_table(dsn: str, publication: str = f"dblog_{SOURCE}") -> None:
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT to_regnamespace(%s)", (WATERMARK_SCHEMA,)).fetchone() == \
            (None,)
        published = conn.execute("SELECT schemaname FROM pg_publication_tables "
                                 "WHERE pubname = %s", (publication,)).fetchall()
        assert published and WATERMARK_SCHEMA not in {str(r[0]) for r in published}


@pytest.mark.parametrize(("kind", "flavour"), [
    ("tables", PLAIN), ("keys", PLAIN), ("parallel", PLAIN), ("parallel", HOSTILE),
    ("all", PARTITIONED), ("filtered", HOSTILE),
], ids=["tables", "keys", "parallel", "parallel-hostile-names", "partitioned-all",
        "filtered-hostile-names"])
def test_dumps_converge_under_load_with_message_watermarks(
        backend: Backend, kind: str, flavour: TableFlavour,
        worker_process: Callable[..., WorkerProcess]) -> None:
    backend.use(flavour)
    t1, t2 = backend.t1, backend.t2
    backend.create(t1, 1200)
    backend.create(t2, 700)
    config = message_config(backend, [t1, t2])
    ids = dumps_under_load(backend, config, worker_process(config), kind)
    assert_converged(backend, t1, t2)
    assert chunks(backend, ids[-1]) > 5
    no_watermark_table(backend.db.dsn)


def test_a_role_that_may_only_read_and_replicate_runs_dumps(
        backend: Backend, worker_process: Callable[..., WorkerProcess]) -> None:
    t1, t2 = backend.t1, backend.t2
    backend.create(t1, 500)
    backend.create(t2, 0)
    role = f"reader_{SOURCE}_{int(time.time() * 1000) % 10**9}"
    with psycopg.connect(backend.db.dsn, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {role} LOGIN REPLICATION")
        conn.execute(f"GRANT SELECT ON {t1}, {t2} TO {role}")
        conn.execute(f"CREATE PUBLICATION dblog_{SOURCE} FOR TABLE {t1}, {t2} "
                     "WITH (publish_via_partition_root = true)")
        may_write = conn.execute(
            "SELECT has_database_privilege(%s, current_database(), 'CREATE') "
            "OR has_table_privilege(%s, %s, 'INSERT')", (role, role, t1)).fetchone()
    try:
        assert may_write == (False,)
        config = message_config(backend, [t1, t2], make_conninfo(backend.db.dsn, user=role))
        result = cli(config, "preflight", check=False)
        assert result.returncode == 0, result.stdout + result.stderr
        assert 'watermarks = "message" (configured): available' in result.stdout
        assert 'watermarks = "table": upserts' in result.stdout
        worker = worker_process(config)
        request_id = dump(config, "--all", "--chunk-size", "50")
        backend.execute(f"INSERT INTO {t2} VALUES (1, {backend.next_version}, 'live')")
        state = wait_request(backend.redis_url, SOURCE, request_id, ["completed", "failed"],
                             60, worker)
        assert state["state"] == "completed", state
        assert_converged(backend, t1, t2)
        no_watermark_table(backend.db.dsn)
    finally:
        with psycopg.connect(backend.db.dsn, autocommit=True) as conn:
            conn.execute(f"DROP OWNED BY {role}")


def test_kill_9_during_a_dump_with_message_watermarks_resumes(
        backend: Backend, worker_process: Callable[..., WorkerProcess]) -> None:
    t1, t2 = backend.t1, backend.t2
    backend.create(t1, 3000)
    backend.create(t2, 1000)
    dump_through_kills(backend, message_config(backend, [t1, t2], flush_interval_s=0.1,
                                                  extra=KILLED_LEASE),
                       worker_process, ["--all", "--chunk-size", "100", "--delay-ms", "50"],
                       [8, 20], random.Random(7))


def test_an_idle_source_checkpoint_moves_with_heartbeat_messages(
        backend: Backend, worker_process: Callable[..., WorkerProcess]) -> None:
    t1 = backend.t1
    backend.create(t1, 1)
    worker = worker_process(message_config(backend, [t1]))
    wait_for(lambda: checkpoint(backend.redis_url) is not None, 30, "a first checkpoint",
             worker.log)
    first = checkpoint(backend.redis_url)
    wait_for(lambda: checkpoint(backend.redis_url) != first, 30,
             "the checkpoint to move on an idle source", worker.log)
