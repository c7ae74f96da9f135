"""A dump's failure never stops capture (both sources).

Whatever a dump meets -- a chunk query the database refuses, an error the worker did not
expect -- the request fails with the error, the log keeps streaming in the same session,
the next request runs, and a restarted worker does not meet the failed request again.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence

import pytest

from dblog_worker import config as config_module
from dblog_worker.events import DumpRows
from dblog_worker.landing.arrow import Item
from dblog_worker.landing.parquet import LandingZone
from dblog_worker.landing.parquet_files import FileSegment
from tests.integration.harness import (
    SOURCE,
    Backend,
    WorkerProcess,
    assert_converged,
    assert_landed_once,
    dump,
    events_of,
    wait_for,
    wait_request,
)
from tests.integration.test_scenarios import run_in_thread


def _codes_table(backend: Backend) -> str:
    """A table keyed by a text column: keys "1".."30"."""
    table = backend.db.table("codes")
    backend.execute(f"CREATE TABLE {table} (code varchar(20) PRIMARY KEY, version bigint "
                    "NOT NULL, payload text)")
    if backend.kind == "postgresql":
        backend.execute(f"ALTER TABLE {table} REPLICA IDENTITY FULL")
        backend.execute(f"INSERT INTO {table} SELECT g::text, 1, 'p' "
                        "FROM generate_series(1, 30) g")
    else:
        backend.execute(f"INSERT INTO {table} SELECT seq, 1, 'p' FROM seq_1_to_30")
    return table


def test_a_chunk_query_the_database_refuses_fails_the_dump_not_the_worker(
    backend: Backend, worker_process: Callable[..., WorkerProcess]
) -> None:
    """A primary-key dump asks for key "x7" of a text key; before it runs, the key column
    becomes an integer: the key batch's SELECT cannot take "x7" (PostgreSQL refuses the
    cast; the MySQL source cannot bind it). The dump fails with that, the log goes on,
    the next dump completes, and a restart does not run the failed one again."""
    codes, t1, v = _codes_table(backend), backend.t1, backend.next_version
    backend.create(t1, 50)
    config = backend.config_path([codes, t1])
    failing = dump(config, "--table", codes, "--keys", json.dumps(["1", "x7", "3"]))
    if backend.kind == "postgresql":
        backend.execute(f"ALTER TABLE {codes} ALTER COLUMN code TYPE integer USING code::int")
    else:
        backend.execute(f"ALTER TABLE {codes} MODIFY COLUMN code int")
    worker = worker_process(config)
    state = wait_request(backend.redis_url, SOURCE, failing, ["completed", "failed"], 30,
                         worker)
    assert state["state"] == "failed", state
    assert "x7" in state["error"], state["error"]
    backend.execute(f"INSERT INTO {t1} VALUES (7, {v}, 'live')")
    wait_for(lambda: any(e["key"] == "[7]" for e in events_of(backend, t1)), 30,
             "the log to go on", worker.log)
    after = dump(config, "--table", t1, "--chunk-size", "20")
    state = wait_request(backend.redis_url, SOURCE, after, ["completed", "failed"], 30, worker)
    assert state["state"] == "completed", state
    assert worker.alive() and worker.log().count(" streaming ") == 1
    assert worker.stop() == 0
    logged = len(worker.log())
    again = worker_process(config)
    backend.execute(f"INSERT INTO {t1} VALUES (8, {v}, 'live')")
    wait_for(lambda: any(e["key"] == "[8]" for e in events_of(backend, t1)), 30,
             "the log after a restart", again.log)
    assert again.alive() and "Traceback" not in again.log()[logged:]
    assert f"dump {failing}" not in again.log()[logged:]  # not run again
    assert_converged(backend, t1)


def test_an_unexpected_error_writing_the_landing_zone_ends_the_session_not_the_worker(
    backend: Backend, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The landing zone's write of a window's rows fails once on an error nothing
    expects (a ValueError, as a segment whose positions go backwards raises): the session
    ends, the worker goes on with a new one from the checkpoint, the dump completes, and
    nothing lands twice."""
    t1 = backend.t1
    backend.create(t1, 300)
    config = config_module.load(backend.config_path([t1]))
    commit = LandingZone.commit_segment
    failed: list[str] = []

    def fail_once(self: LandingZone, table: str, events: Sequence[Item]) -> FileSegment:
        if not failed and any(isinstance(e, DumpRows) for e in events):
            failed.append(table)
            raise ValueError(f"positions of the events of {table!r} go backwards in a segment")
        return commit(self, table, events)

    monkeypatch.setattr(LandingZone, "commit_segment", fail_once)
    worker, thread = run_in_thread(config, {})
    try:
        request_id = dump(backend.config_path([t1]), "--table", t1, "--chunk-size", "40")
        state = wait_request(backend.redis_url, SOURCE, request_id, ["completed", "failed"],
                             60)
        assert state["state"] == "completed", state
        assert failed == [t1] and thread.is_alive() and worker.sessions >= 2
        assert "the landing zone write failed: unexpected ValueError" in caplog.text
        assert_converged(backend, t1)
        assert_landed_once(backend, t1)
    finally:
        worker.stopping = True
        thread.join(30)
    assert not thread.is_alive()
