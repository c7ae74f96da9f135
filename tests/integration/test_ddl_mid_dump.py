"""DDL while a table is dumped, on both sources: a chunk is never read with a column list
older than its low watermark.

The worker reads a table's columns from the catalog at most once a second, so a DDL
statement can come between that read and a window. The hook below runs the DDL (and an
update of a row of the next chunk, so that the log holds the newer, more complete image)
right before a low watermark is written: the chunk SELECT that follows sees the new
columns. The worker finds its chunk stale (PostgreSQL: the SELECT's own description;
MySQL/MariaDB: the table's description after the SELECT), reads the catalog again and
the chunk again in a later window -- in the same session, without failing the dump.
"""

from __future__ import annotations

import functools
import json
import time
from typing import Any

import pytest

from dblog_worker import config as config_module
from tests.integration.harness import (
    SOURCE,
    Backend,
    assert_converged,
    chunks,
    dump,
    events_of,
    replay,
    wait_for,
    wait_request,
)
from tests.integration.test_scenarios import run_in_thread

# (PostgreSQL, MariaDB) statements; {t} is the table.
DDL = {
    "add column": ("ALTER TABLE {t} ADD COLUMN extra varchar(10) DEFAULT 'x'",
                   "ALTER TABLE {t} ADD COLUMN extra varchar(10) DEFAULT 'x'"),
    "drop column": ("ALTER TABLE {t} DROP COLUMN payload", "ALTER TABLE {t} DROP COLUMN payload"),
    "rename column": ("ALTER TABLE {t} RENAME COLUMN payload TO body",
                      "ALTER TABLE {t} RENAME COLUMN payload TO body"),
    "change type": ("ALTER TABLE {t} ALTER COLUMN payload TYPE varchar(300)",
                    "ALTER TABLE {t} MODIFY COLUMN payload varchar(300)"),
}
CHUNK = 20
# The tests count the worker's sessions (a DDL must not restart one): a lease that outlasts
# a loop starved for seconds on a loaded machine, or a lease lost would restart it.
STEADY_LEASE = "[lease]\nttl_s = 60\n"


def dump_with_ddl(backend: Backend, ddl: str, parallelism: int = 1, window: int = 3,
                  rows: int = 150, keys: bool = False) -> tuple[str, int]:
    """A table dump in chunks of 20 (``parallelism`` of them per window); before the
    ``window``-th window's low watermark, the DDL and an update of a row of that chunk.
    ``keys``: a primary-key dump of every row instead of a table dump. Returns the request
    id and the sessions run."""
    t1, v = backend.t1, backend.next_version
    backend.create(t1, rows)
    updated = (window - 1) * CHUNK * parallelism * 10 + 50  # a key of that window's chunk
    statement = (DDL[ddl][0 if backend.kind == "postgresql" else 1].format(t=t1)
                 if ddl in DDL else ddl.format(t=t1))
    path = backend.config_path([t1], extra=STEADY_LEASE)
    config = config_module.load(path)
    windows: list[str] = []
    writer = backend.connect()

    def before_low(token: str) -> None:
        windows.append(token)
        if len(windows) == window:  # window 3 reads ids 410..600 (parallelism 1)
            writer.execute(statement)
            writer.execute(f"UPDATE {t1} SET version = {v} WHERE id = {updated}")

    worker, thread = run_in_thread(config, {"before_low": before_low})
    try:
        scope = ["--keys", json.dumps([10 * k for k in range(1, rows + 1)])] if keys else []
        request_id = dump(path, "--table", t1, *scope,
                          "--chunk-size", str(CHUNK), "--parallelism", str(parallelism))
        state = wait_request(backend.redis_url, SOURCE, request_id, ["completed", "failed"], 60)
        assert state["state"] == "completed", state
    finally:
        worker.stopping = True
        thread.join(30)
        writer.close()
    assert not thread.is_alive()
    return request_id, worker.sessions


def dump_columns(backend: Backend, request_id: str) -> list[set[str]]:
    """The columns of each dump row of the request, in output order."""
    return [set(json.loads(str(e["after"]))) for e in events_of(backend, backend.t1)
            if e["dump_id"] == request_id]


def _converged_on_current_columns(backend: Backend) -> None:
    """The output equals the table on the columns the table has now (a dropped or renamed
    column stays in rows dumped before the change: not a column of the table any more)."""
    expected = backend.rows(backend.t1)
    result = replay(backend.landing, SOURCE, backend.t1)
    assert result.time_travel == []
    got: dict[str, dict[str, Any]] = {
        key: {c: row.get(c) for c in expected[key]} for key, row in result.rows.items()
        if key in expected}
    assert set(result.rows) == set(expected) and got == expected


@pytest.mark.parametrize("ddl", list(DDL))
def test_ddl_right_before_a_window(backend: Backend, ddl: str) -> None:
    request_id, sessions = dump_with_ddl(backend, ddl)
    assert sessions == 1  # a stale chunk is read again, the session goes on
    columns = dump_columns(backend, request_id)
    rows = backend.rows(backend.t1)
    now = set(next(iter(rows.values())))
    assert columns[40:] == [now] * len(columns[40:])  # chunk 3 on: the table's columns
    if ddl == "add column":  # the case: the log's update carries the new column,
        # the chunk row of the same key (read again after LW, not dropped) carries it too
        dumped = [e for e in events_of(backend, backend.t1)
                  if e["key"] == "[450]" and e["dump_id"] == request_id]
        assert dumped and all(json.loads(str(e["after"]))["extra"] == "x" for e in dumped)
    if ddl == "change type":
        assert_converged(backend, backend.t1)
        return
    # The rows dumped before the DDL keep the old column list (no log event tells of a
    # column added, dropped or renamed) until they change or are dumped again.
    assert_converged_after_a_second_dump(backend)


@pytest.mark.parametrize("ddl", ["add column", "drop column"])
def test_ddl_right_before_a_parallel_window(backend: Backend, ddl: str) -> None:
    """Three chunk SELECTs per window, on three connections: each connection finds the
    columns changed, the window is read again, the session goes on."""
    request_id, sessions = dump_with_ddl(backend, ddl, parallelism=3)
    assert sessions == 1
    columns = dump_columns(backend, request_id)
    now = set(next(iter(backend.rows(backend.t1).values())))
    assert len(columns) >= 150 and columns[120:] == [now] * len(columns[120:])
    assert_converged_after_a_second_dump(backend)


@pytest.mark.parametrize("ddl", list(DDL))
@pytest.mark.parametrize("dump_kind", ["table", "keys", "parallel"])
def test_ddl_after_the_chunk_select_is_prepared(backend: Backend, ddl: str,
                                                dump_kind: str) -> None:
    """The DDL before the twelfth window, once the driver has prepared the chunk SELECT
    (psycopg does after 5 executions; PostgreSQL then refuses the prepared plan whose
    result changed: ``cached plan must not change result type``): the window is read again
    with the new columns, in the same session, and many chunks follow."""
    parallelism = 3 if dump_kind == "parallel" else 1
    rows = 30 * CHUNK * parallelism
    request_id, sessions = dump_with_ddl(backend, ddl, parallelism, window=12, rows=rows,
                                         keys=dump_kind == "keys")
    assert sessions == 1
    columns = dump_columns(backend, request_id)
    now = set(next(iter(backend.rows(backend.t1).values())))
    after = 12 * CHUNK * parallelism  # every row from the twelfth window on
    assert len(columns) >= rows and columns[after:] == [now] * len(columns[after:])
    if ddl == "change type":
        assert_converged(backend, backend.t1)
    else:
        assert columns[0] != now  # the first windows had the old columns
        assert_converged_after_a_second_dump(backend)


def assert_converged_after_a_second_dump(backend: Backend) -> None:
    request_id = dump(backend.config_path([backend.t1]), "--table", backend.t1,
                      "--chunk-size", "100")
    again, thread = run_in_thread(config_module.load(backend.config_path([backend.t1])), {})
    try:
        state = wait_request(backend.redis_url, SOURCE, request_id, ["completed", "failed"], 60)
        assert state["state"] == "completed", state
    finally:
        again.stopping = True
        thread.join(30)
    _converged_on_current_columns(backend)


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
def test_replica_identity_changed_mid_dump(backend: Backend) -> None:
    """REPLICA IDENTITY away from FULL during a dump (PostgreSQL): the dump goes on in the
    same session and the output converges (an update that keeps a large value would be
    read again by a primary-key dump: operations.md)."""
    _, sessions = dump_with_ddl(backend, "ALTER TABLE {t} REPLICA IDENTITY DEFAULT")
    assert sessions == 1
    assert_converged(backend, backend.t1)


def _landed(backend: Backend, table: str, key: str) -> bool:
    return any(e["key"] == key for e in events_of(backend, table))


def test_a_table_locked_mid_dump_does_not_stall_the_log(backend: Backend) -> None:
    """A session holds an exclusive lock on the dumped table for seconds (a long ALTER
    TABLE does): the chunk SELECT gives up after a short lock wait and is read later, so
    changes of another table keep landing at once; the dump completes after the lock."""
    t1, t2, v = backend.t1, backend.t2, backend.next_version
    backend.create(t1, 400)
    backend.create(t2, 0)
    config = backend.config_path([t1, t2], extra=STEADY_LEASE)
    worker, thread = run_in_thread(config_module.load(config), {})
    locker = backend.connect()
    try:
        # 40 chunks 200 ms apart: the lock is taken long before the dump could end
        request_id = dump(config, "--table", t1, "--chunk-size", "10", "--delay-ms", "200")
        wait_for(lambda: chunks(backend, request_id) >= 3, 30, "three chunks")
        if backend.kind == "postgresql":
            locker.execute("BEGIN")
            locker.execute(f"LOCK TABLE {t1} IN ACCESS EXCLUSIVE MODE")
        else:
            locker.execute(f"LOCK TABLES {t1} WRITE")
        at_lock = chunks(backend, request_id)
        latencies: list[float] = []
        with backend.connect() as writer:
            for key in range(1, 9):
                writer.execute(f"INSERT INTO {t2} VALUES ({key}, {v}, 'live')")
                written = time.monotonic()
                wait_for(functools.partial(_landed, backend, t2, f"[{key}]"), 30,
                         f"insert {key} to land")
                latencies.append(time.monotonic() - written)
                time.sleep(0.3)
        # the table was locked all along: at most the windows read as the lock came ended
        assert at_lock < 40 and chunks(backend, request_id) <= at_lock + 2
        locker.execute("COMMIT" if backend.kind == "postgresql" else "UNLOCK TABLES")
        state = wait_request(backend.redis_url, SOURCE, request_id, ["completed", "failed"], 60)
        assert state["state"] == "completed", state
    finally:
        locker.close()
        worker.stopping = True
        thread.join(30)
    assert max(latencies) < 2.0, latencies
    assert worker.sessions == 1
    assert_converged(backend, t1, t2)
