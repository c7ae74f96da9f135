"""PostgreSQL logs a commit before it makes the transaction visible: the window still holds.

A cluster with a synchronous standby that acknowledges flush but never apply
(``pg_receivewal --synchronous``): a transaction T with ``synchronous_commit =
remote_apply`` is in the WAL, decoded and emitted by the worker, yet invisible to every
snapshot until the standby list is emptied. A table dump runs meanwhile; its chunk
SELECTs read T's rows as they were before T. The window counts T as inside it (T's
xid is in the low watermark write's snapshot), so the stale rows never land after T's
change: no time travel, and the output converges once T is visible.

Also here: ``synchronous_commit = off`` on the worker's role (a commit returns before its
WAL is written) does not make the worker mistake its own high watermark for a lost one.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest

from tests.integration.harness import (
    SOURCE,
    Backend,
    PgDatabase,
    WorkerProcess,
    Workers,
    assert_converged,
    dump,
    events_of,
    wait_for,
    wait_request,
)
from tests.services import PostgresServer, SynchronousStandby

STANDBY = "dblog_standby"


@pytest.fixture(scope="module")
def standby_server() -> Iterator[PostgresServer]:
    """A cluster whose commits wait for a standby that never applies (remote_apply hangs)."""
    with PostgresServer(settings={"synchronous_standby_names": STANDBY}).start() as server:
        yield server


@pytest.fixture
def backend(standby_server: PostgresServer, redis_url: str, tmp_path: Path
            ) -> Iterator[Backend]:
    with SynchronousStandby(standby_server, STANDBY).start():
        name = f"t_{time.monotonic_ns()}"
        dsn = standby_server.create_database(name)
        yield Backend(PgDatabase(dsn), redis_url, tmp_path, standby_server.restart)
        standby_server.drop_database(name)


class HungCommit(threading.Thread):
    """T: updates one row with ``synchronous_commit = remote_apply`` and waits in COMMIT."""

    def __init__(self, dsn: str, table: str, key: int) -> None:
        super().__init__(daemon=True)
        self.conn = psycopg.connect(dsn)
        self.conn.execute("SET synchronous_commit = remote_apply")
        row = self.conn.execute("SELECT pg_backend_pid()").fetchone()
        assert row is not None
        self.pid = int(row[0])
        self.conn.execute(f"UPDATE {table} SET version = nextval('versions'), payload = 'T' "
                          f"WHERE id = {key}".encode())
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.conn.commit()
        except BaseException as exc:  # reported by the test
            self.error = exc
        finally:
            self.conn.close()


def _committed_but_invisible(backend: Backend, hung: HungCommit, table: str, key: int) -> None:
    """T waits for the standby: past its local commit (in the WAL), still invisible."""
    with psycopg.connect(backend.db.dsn, autocommit=True) as conn:
        def committed() -> bool:
            row = conn.execute("SELECT wait_event FROM pg_stat_activity WHERE pid = %s",
                               (hung.pid,)).fetchone()
            return row is not None and row[0] == "SyncRep"

        wait_for(committed, 10, "T to be committed in the WAL")
        row = conn.execute(f"SELECT payload FROM {table} WHERE id = {key}".encode()).fetchone()
        assert row is not None and row[0] != "T", "T is visible: the standby applied it?"


def _release(standby_server: PostgresServer, hung: HungCommit) -> None:
    """End T's wait for the standby (a cancel: T is committed, and now visible)."""
    with psycopg.connect(standby_server.dsn(), autocommit=True) as conn:
        conn.execute("SELECT pg_cancel_backend(%s)", (hung.pid,))
    hung.join(10)
    assert not hung.is_alive() and hung.error is None, hung.error


@pytest.fixture
def workers(backend: Backend) -> Iterator[Callable[..., WorkerProcess]]:
    with Workers(backend.tmp / "worker.log") as started:
        yield started.start


def _landed(backend: Backend, table: str, key: str, payload: str) -> bool:
    return any(e["key"] == key and e["origin"] == "log"
               and json.loads(str(e["after"] or "{}")).get("payload") == payload
               for e in events_of(backend, table))


def _dump_while_a_commit_hides(backend: Backend, standby_server: PostgresServer,
                               workers: Callable[..., WorkerProcess], *, restart: bool,
                               watermarks: str) -> None:
    """T updates row 500 and hangs, invisible, after the worker wrote its change (and,
    with ``restart``, after the worker restarted); a dump of the table then completes
    while T still hides, and row 500 lands only as T's change: the chunk that read it as
    before T dropped it. Once T is visible the output converges."""
    t1 = backend.t1
    backend.create(t1, 200)
    config = backend.config_path([t1])
    config.write_text(config.read_text().replace(
        "\ntables = ", f'\nwatermarks = "{watermarks}"\ntables = ', 1))
    worker = workers(config)
    hung = HungCommit(backend.db.dsn, t1, 500)
    hung.start()
    try:
        _committed_but_invisible(backend, hung, t1, 500)
        wait_for(lambda: _landed(backend, t1, "[500]", "T"), 30, "T's change to land",
                 worker.log)
        if restart:
            time.sleep(1.5)  # snapshots were taken, checkpoints saved: none passed T
            assert worker.stop() == 0
            worker = workers(config)
        request_id = dump(config, "--table", t1, "--chunk-size", "20")
        state = wait_request(backend.redis_url, SOURCE, request_id, ["completed", "failed"],
                             60, worker)
        assert state["state"] == "completed", state
        _committed_but_invisible(backend, hung, t1, 500)
        rows_500 = [e for e in events_of(backend, t1) if e["key"] == "[500]"]
        assert [(e["origin"], e["op"]) for e in rows_500] == [("log", "u")], rows_500
    finally:
        _release(standby_server, hung)
    assert_converged(backend, t1)


# Watermarks as upserts of dblog.watermark, or as logical decoding messages: both are
# written with the snapshot that tells which commits are not visible yet.
WATERMARKS = pytest.mark.parametrize("watermarks", ["table", "message"])


@WATERMARKS
def test_a_commit_logged_before_lw_but_not_visible_counts_as_inside_the_window(
    backend: Backend, standby_server: PostgresServer,
    workers: Callable[..., WorkerProcess], watermarks: str,
) -> None:
    _dump_while_a_commit_hides(backend, standby_server, workers, restart=False,
                               watermarks=watermarks)


@WATERMARKS
def test_a_new_session_reads_an_invisible_commit_again(
    backend: Backend, standby_server: PostgresServer,
    workers: Callable[..., WorkerProcess], watermarks: str,
) -> None:
    """The worker restarts after it read T and wrote its change: the checkpoint stayed
    before T (no snapshot had seen it), so the new session reads T again and knows its
    change."""
    _dump_while_a_commit_hides(backend, standby_server, workers, restart=True,
                               watermarks=watermarks)


def test_asynchronous_commit_of_the_worker_keeps_its_windows(
    backend: Backend, workers: Callable[..., WorkerProcess],
) -> None:
    """``synchronous_commit = off`` for the worker: its high watermark's commit returns
    before the WAL is written; the end of the log it notes after HW must still be past it
    (the insert position), or the worker would think HW lost and restart its session."""
    t1 = backend.t1
    backend.create(t1, 2000)
    with psycopg.connect(backend.db.dsn, autocommit=True) as conn:
        database = conn.info.dbname
        conn.execute(f'ALTER DATABASE "{database}" SET synchronous_commit = off'.encode())
    config = backend.config_path([t1])
    worker = workers(config)
    request_id = dump(config, "--table", t1, "--chunk-size", "50")
    state = wait_request(backend.redis_url, SOURCE, request_id, ["completed", "failed"], 60,
                         worker)
    assert state["state"] == "completed", state
    assert "went past the high watermark" not in worker.log()
    assert worker.log().count(" streaming ") == 1  # one session throughout
    assert_converged(backend, t1)
