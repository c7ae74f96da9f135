"""A dump's failure never stops capture (both sources).

Whatever a dump meets -- a chunk query the database refuses, an error the worker did not
expect -- the request fails with the error, the log keeps streaming in the same session,
the next request runs, and a restarted worker does not meet the failed request again.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from tests.integration.harness import (
    SOURCE,
    Backend,
    WorkerProcess,
    assert_converged,
    dump,
    events_of,
    wait_for,
    wait_request,
)


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
