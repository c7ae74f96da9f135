"""The scenario suite: the invariants of DESIGN.md against a real source and Redis.

Every scenario ends with the same two checks on the landing output, replayed in
position order: it equals the source table (convergence), and no key's version
ever goes back (no time travel; writers take versions from one sequence).

The suite talks to the source through a :class:`Backend`, so that another source
(MySQL) runs it unchanged by adding a backend to the ``backend`` fixture.
"""

from __future__ import annotations

import json
import os
import random
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import psycopg
import pytest
import redis

from dblog_worker import config as config_module
from dblog_worker.config import Config
from dblog_worker.landing import LandingZone, read_events
from dblog_worker.pg.source import PgSource
from dblog_worker.requests import KeyTexts
from dblog_worker.source import Chunk, KeysChunk, SchemaVersion
from dblog_worker.state import StateStore
from dblog_worker.worker import Worker
from tests.integration.harness import (
    WorkerProcess,
    Workload,
    cli,
    create_test_table,
    redis_request,
    replay,
    source_rows,
    wait_for,
    wait_request,
    write_config,
)
from tests.services import PostgresServer, RedisServer

SOURCE = "src"
T1, T2 = "public.items", "public.orders"


@dataclass
class Backend:
    """How the suite reaches one source database."""

    dsn: str
    redis_url: str
    tmp: Path

    def create(self, table: str, rows: int) -> None:
        create_test_table(self.dsn, table, rows)

    def execute(self, sql: str, params: tuple[Any, ...] = ()) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(sql.encode(), params)

    def rows(self, table: str) -> dict[str, dict[str, Any]]:
        return source_rows(self.dsn, table)

    def workload(self, tables: list[str], seed: int) -> Workload:
        return Workload(self.dsn, tables, seed)

    def config_path(self, tables: list[str], **kwargs: Any) -> Path:
        return write_config(self.tmp, self.dsn, self.redis_url, tables, name=SOURCE, **kwargs)

    @property
    def landing(self) -> Path:
        return self.tmp / "landing"


@pytest.fixture
def backend(pg_dsn: str, redis_url: str, tmp_path: Path) -> Backend:
    return Backend(pg_dsn, redis_url, tmp_path)


def assert_converged(backend: Backend, *tables: str) -> None:
    """Wait until the output equals each table; then check it never went back in time."""
    for table in tables:
        expected = backend.rows(table)

        def caught_up(table: str = table, expected: dict[str, Any] = expected) -> bool:
            return replay(backend.landing, SOURCE, table).rows == expected

        wait_for(caught_up, 30, f"the output of {table} to equal the table",
                 lambda table=table: _difference(backend, table))  # type: ignore[misc]
        result = replay(backend.landing, SOURCE, table)
        assert result.time_travel == [], result.time_travel[:10]


def _difference(backend: Backend, table: str) -> str:
    expected = backend.rows(table)
    got = replay(backend.landing, SOURCE, table).rows
    missing = sorted(set(expected) - set(got))[:10]
    extra = sorted(set(got) - set(expected))[:10]
    wrong = [k for k in expected if k in got and got[k] != expected[k]][:10]
    return f"missing {missing}, extra {extra}, different {wrong}"


def dump(config: Path, *args: str) -> str:
    result = cli(config, "dump", *args, "--json")
    request_id: str = json.loads(result.stdout)["id"]
    return request_id


@pytest.fixture
def worker_process(backend: Backend) -> Iterator[Callable[..., WorkerProcess]]:
    started: list[WorkerProcess] = []

    def start(config: Path, *args: str, streaming: bool = True) -> WorkerProcess:
        """Start ``dblog run``; unless told otherwise, wait until it streams the log."""
        process = WorkerProcess(config, backend.tmp / "worker.log", *args).start()
        started.append(process)
        if streaming:
            count = process.log().count(" streaming ")
            wait_for(lambda: process.log().count(" streaming ") > count or not process.alive(),
                     30, "the worker to stream", process.log)
        return process

    yield start
    for process in started:
        process.kill()


# -- the live log ---------------------------------------------------------------


def test_live_log_in_commit_order(backend: Backend, worker_process: Callable[..., WorkerProcess]
                                  ) -> None:
    backend.create(T1, 0)
    config = backend.config_path([T1])
    worker = worker_process(config)
    with psycopg.connect(backend.dsn, autocommit=True) as conn:
        conn.execute(f"INSERT INTO {T1} VALUES (1, nextval('versions'), 'a')")
        with conn.transaction():
            conn.execute(f"INSERT INTO {T1} VALUES (2, nextval('versions'), 'b')")
            conn.execute(f"UPDATE {T1} SET payload = 'c', version = nextval('versions') "
                         "WHERE id = 1")
        conn.execute(f"UPDATE {T1} SET id = 3, version = nextval('versions') WHERE id = 2")
        conn.execute(f"DELETE FROM {T1} WHERE id = 1")
        conn.execute(f"TRUNCATE {T1}")
        conn.execute(f"INSERT INTO {T1} VALUES (4, nextval('versions'), 'd')")

    def events() -> list[tuple[object, ...]]:
        return [(e["op"], e["key"], e["origin"])
                for e in read_events(LandingZone(backend.landing, SOURCE), T1)]

    expected = [("c", "[1]", "log"), ("c", "[2]", "log"), ("u", "[1]", "log"),
                ("d", "[2]", "log"), ("c", "[3]", "log"), ("d", "[1]", "log"),
                ("t", None, "log"), ("c", "[4]", "log")]
    wait_for(lambda: len(events()) >= len(expected), 30, "8 events", worker.log)
    assert events() == expected
    landed = read_events(LandingZone(backend.landing, SOURCE), T1)
    update = landed[2]
    assert json.loads(str(update["after"]))["payload"] == "c"
    assert json.loads(str(update["before"]))["payload"] == "a"
    positions = [str(e["position"]) for e in landed]
    assert positions == sorted(positions) and len(set(positions)) == len(positions)
    # the key change: delete of the old key and create of the new one, one transaction
    assert positions[3][:16] == positions[4][:16]
    assert_converged(backend, T1)


def test_idle_slot_advances(backend: Backend, worker_process: Callable[..., WorkerProcess]
                            ) -> None:
    backend.create(T1, 0)
    config = backend.config_path([T1])
    worker_process(config)

    def confirmed() -> int:
        with psycopg.connect(backend.dsn) as conn:
            row = conn.execute(
                "SELECT confirmed_flush_lsn - '0/0'::pg_lsn FROM pg_replication_slots "
                "WHERE slot_name = %s", (f"dblog_{SOURCE}",)).fetchone()
            return -1 if row is None or row[0] is None else int(row[0])

    wait_for(lambda: confirmed() >= 0, 30, "the slot")
    first = confirmed()
    # writes to a table that is not captured move the WAL, not the output
    backend.execute("CREATE TABLE other (id int)")
    backend.execute("INSERT INTO other SELECT generate_series(1, 1000)")
    wait_for(lambda: confirmed() > first, 30, "the idle slot to advance")


# -- dumps under load ------------------------------------------------------------


@pytest.mark.parametrize("kind", ["all", "tables", "keys"])
def test_dumps_converge_under_load(backend: Backend, kind: str,
                                   worker_process: Callable[..., WorkerProcess]) -> None:
    backend.create(T1, 1500)
    backend.create(T2, 800)
    config = backend.config_path([T1, T2])
    worker = worker_process(config)
    workload = backend.workload([T1, T2], seed=hash(kind) % 1000)
    workload.start()
    try:
        time.sleep(0.3)
        if kind == "all":
            ids = [dump(config, "--all", "--chunk-size", "37")]
        elif kind == "tables":
            ids = [dump(config, "--table", T2, "--table", T1, "--chunk-size", "53")]
        else:
            keys = sorted(int(json.loads(k)[0]) for k in backend.rows(T1))
            ids = [dump(config, "--table", T1, "--keys", json.dumps([*keys, 999_999]),
                        "--chunk-size", "41"),
                   dump(config, "--table", T2, "--chunk-size", "64")]
        for request_id in ids:
            state = wait_request(backend.redis_url, SOURCE, request_id,
                                 ["completed", "failed"], 120, worker)
            assert state["state"] == "completed", state
        time.sleep(0.5)
    finally:
        workload.stop()
    assert workload.transactions > 20
    assert_converged(backend, T1, T2)
    store = StateStore(backend.redis_url, SOURCE)
    try:
        progress = store.progress(ids[0])
        if kind == "keys":
            # the key that never existed, and any the workload deleted before its batch
            missing = store.missing_keys(ids[0])
            assert ("999999",) in missing
            assert progress[T1].missing == len(missing)
        assert sum(p.chunks for p in progress.values()) > 10
        assert all(p.done for p in progress.values())
    finally:
        store.close()


# -- writes between the watermarks and the chunk SELECT ---------------------------


class HookedSource(PgSource):
    """A source that runs a hook after the low watermark and after the chunk SELECT."""

    hooks: ClassVar[dict[str, Callable[[str], None]]] = {}

    def write_watermark(self, token: str) -> None:
        super().write_watermark(token)
        if token.endswith(".lw") and "after_low" in self.hooks:
            self.hooks["after_low"](token)

    def read_chunk(self, table: str, after: KeyTexts | None, upper: KeyTexts,
                   limit: int) -> Chunk:
        chunk = super().read_chunk(table, after, upper, limit)
        if "after_select" in self.hooks:
            self.hooks["after_select"](table)
        return chunk

    def read_keys(self, table: str, keys: list[KeyTexts]) -> KeysChunk:  # type: ignore[override]
        chunk = super().read_keys(table, keys)
        if "after_select" in self.hooks:
            self.hooks["after_select"](table)
        return chunk


def run_in_thread(
    config: Config, hooks: dict[str, Callable[[str], None]]
) -> tuple[Worker, threading.Thread]:
    class Source(HookedSource):
        """HookedSource with this test's hooks (a class per test: hooks are a class value)."""

    Source.hooks = hooks

    def factory(cfg: Config, schema_version: SchemaVersion) -> PgSource:
        return Source(cfg.source, schema_version)

    worker = Worker(config, source=factory)
    thread = threading.Thread(target=worker.run_forever, kwargs={"handle_signals": False},
                              daemon=True)
    thread.start()
    return worker, thread


WRITES = {
    # each write touches keys inside the chunk being read (ids are multiples of 10)
    "update": "UPDATE {t} SET version = nextval('versions'), payload = 'hook' "
              "WHERE id IN ({a}, {b})",
    "delete": "DELETE FROM {t} WHERE id IN ({a}, {b})",
    "insert": "INSERT INTO {t} VALUES ({a} + 5, nextval('versions'), 'new'), "
              "({b} + 5, nextval('versions'), 'new') ON CONFLICT (id) DO NOTHING",
    "key change": "UPDATE {t} SET id = id + 3, version = nextval('versions') "
                  "WHERE id IN ({a}, {b})",
}


@pytest.mark.parametrize("moment", ["after_low", "after_select"])
@pytest.mark.parametrize("write", sorted(WRITES))
@pytest.mark.parametrize("kind", ["table", "keys"])
def test_writes_between_watermarks(backend: Backend, moment: str, write: str, kind: str) -> None:
    backend.create(T1, 200)
    config = config_module.load(backend.config_path([T1]))
    chunk_size = 20
    windows: list[int] = []
    writer = psycopg.connect(backend.dsn, autocommit=True)

    def hook(_: str) -> None:
        number = len(windows)
        windows.append(number)
        # keys 10..2000; window n reads ids 200n+10 .. 200n+200: touch two of them
        low = 200 * number + 10
        writer.execute(WRITES[write].format(t=T1, a=low + 50, b=low + 120).encode())

    worker, thread = run_in_thread(config, {moment: hook})
    try:
        path = backend.config_path([T1])
        if kind == "table":
            request_id = dump(path, "--table", T1, "--chunk-size", str(chunk_size))
        else:
            keys = list(range(10, 2001, 10))
            request_id = dump(path, "--table", T1, "--keys", json.dumps(keys),
                              "--chunk-size", str(chunk_size))
        state = wait_request(backend.redis_url, SOURCE, request_id, ["completed", "failed"], 60)
        assert state["state"] == "completed", state
        assert_converged(backend, T1)
        store = StateStore(backend.redis_url, SOURCE)
        try:
            progress = store.progress(request_id)[T1]
        finally:
            store.close()
        assert len(windows) >= 8
        if moment == "after_select" and write != "insert":
            # the SELECT saw the old rows; the in-window events must have removed them
            assert progress.dropped >= 2 * (len(windows) - 2), progress
    finally:
        worker.stopping = True
        thread.join(30)
        writer.close()
    assert not thread.is_alive()


# -- crash and resume ------------------------------------------------------------------


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_kill_9_during_dump_resumes(backend: Backend, seed: int,
                                    worker_process: Callable[..., WorkerProcess]) -> None:
    rnd = random.Random(seed)
    backend.create(T1, 6000)
    backend.create(T2, 3000)
    config = backend.config_path([T1, T2], flush_interval_s=0.1)
    worker = worker_process(config)
    workload = backend.workload([T1, T2], seed=seed)
    workload.start()
    try:
        request_id = dump(config, "--all", "--chunk-size", "100", "--delay-ms", "5")
        for _ in range(3):
            time.sleep(rnd.uniform(0.3, 1.5))
            worker.kill()
            worker = worker_process(config)
        state = wait_request(backend.redis_url, SOURCE, request_id, ["completed", "failed"],
                             120, worker)
        assert state["state"] == "completed", state
        time.sleep(0.5)
    finally:
        workload.stop()
    assert_converged(backend, T1, T2)
    for table in (T1, T2):
        positions = [str(e["position"])
                     for e in read_events(LandingZone(backend.landing, SOURCE), table)]
        assert positions == sorted(positions)
        assert len(positions) == len(set(positions)), "a replayed event landed twice"


# -- steering a dump -----------------------------------------------------------------


def checkpoint(redis_url: str) -> str | None:
    store = StateStore(redis_url, SOURCE)
    try:
        return store.checkpoint()
    finally:
        store.close()


def chunks(backend: Backend, request_id: str) -> int:
    store = StateStore(backend.redis_url, SOURCE)
    try:
        return sum(p.chunks for p in store.progress(request_id).values())
    finally:
        store.close()


def test_pause_resume_and_knobs(backend: Backend,
                                worker_process: Callable[..., WorkerProcess]) -> None:
    backend.create(T1, 3000)
    config = backend.config_path([T1])
    worker = worker_process(config)
    request_id = dump(config, "--table", T1, "--chunk-size", "10", "--delay-ms", "50")
    wait_for(lambda: chunks(backend, request_id) >= 3, 30, "three chunks", worker.log)
    cli(config, "pause", request_id)
    wait_request(backend.redis_url, SOURCE, request_id, ["paused"])
    time.sleep(0.5)  # a window open at the pause still closes
    paused_at = chunks(backend, request_id)
    time.sleep(1.0)
    assert chunks(backend, request_id) == paused_at
    # knobs change while it runs: bigger chunks, no delay
    cli(config, "set", request_id, "--chunk-size", "1000", "--delay-ms", "0")
    refused = cli(config, "resume", "no-such-request", check=False)
    assert refused.returncode == 2 and "no dump request" in refused.stderr
    cli(config, "resume", request_id)
    state = wait_request(backend.redis_url, SOURCE, request_id, ["completed"], 60, worker)
    assert state["chunk_size"] == "1000"
    total = chunks(backend, request_id)
    remaining_rows = 3000 - paused_at * 10
    assert total <= paused_at + remaining_rows // 1000 + 2, (paused_at, total)
    assert_converged(backend, T1)


def test_cancel_stops_the_dump_and_the_next_one_runs(
    backend: Backend, worker_process: Callable[..., WorkerProcess]
) -> None:
    backend.create(T1, 3000)
    backend.create(T2, 100)
    config = backend.config_path([T1, T2])
    worker = worker_process(config)
    first = dump(config, "--table", T1, "--chunk-size", "10", "--delay-ms", "100")
    second = dump(config, "--table", T2, "--chunk-size", "10")
    wait_for(lambda: chunks(backend, first) >= 2, 30, "two chunks", worker.log)
    assert redis_request(backend.redis_url, SOURCE, second)["state"] == "queued"
    cli(config, "cancel", first)
    wait_request(backend.redis_url, SOURCE, first, ["cancelled"])
    state = wait_request(backend.redis_url, SOURCE, second, ["completed"], 60, worker)
    assert state["state"] == "completed"
    stopped_at = chunks(backend, first)
    time.sleep(0.5)
    assert chunks(backend, first) == stopped_at < 300
    refused = cli(config, "resume", first, check=False)
    assert refused.returncode == 2 and "cancelled" in refused.stderr
    assert_converged(backend, T2)


# -- the source and Redis go away ------------------------------------------------------


def outage_mid_dump(backend: Backend, worker_process: Callable[..., WorkerProcess],
                    outage: Callable[[], None], logged: str) -> None:
    """A dump of 5000 rows in small chunks; ``outage`` strikes after five chunks (and
    writes to the table meanwhile); the dump still completes and the output converges."""
    backend.create(T1, 5000)
    config = backend.config_path([T1])
    worker = worker_process(config)
    request_id = dump(config, "--table", T1, "--chunk-size", "50", "--delay-ms", "5")
    wait_for(lambda: chunks(backend, request_id) >= 5, 30, "five chunks", worker.log)
    outage()
    state = wait_request(backend.redis_url, SOURCE, request_id, ["completed", "failed"], 90,
                         worker)
    assert state["state"] == "completed", state
    assert logged in worker.log()
    assert_converged(backend, T1)


def test_source_restart_mid_dump(backend: Backend, postgres_server: PostgresServer,
                                 worker_process: Callable[..., WorkerProcess]) -> None:
    def restart() -> None:
        postgres_server.restart()
        backend.execute(f"UPDATE {T1} SET version = nextval('versions') WHERE mod(id, 70) = 0")

    outage_mid_dump(backend, worker_process, restart, "session ended")


def test_redis_unavailable_mid_dump(backend: Backend, redis_server: RedisServer,
                                    worker_process: Callable[..., WorkerProcess]) -> None:
    def hang() -> None:
        os.kill(redis_server.pid, signal.SIGSTOP)
        try:
            backend.execute(
                f"UPDATE {T1} SET version = nextval('versions') WHERE mod(id, 30) = 0"
            )
            time.sleep(7)  # longer than the worker's Redis timeout
        finally:
            os.kill(redis_server.pid, signal.SIGCONT)

    outage_mid_dump(backend, worker_process, hang, "Redis is unreachable")


def test_redis_data_lost_is_refused(backend: Backend, redis_url: str,
                                    worker_process: Callable[..., WorkerProcess]) -> None:
    backend.create(T1, 10)
    config = backend.config_path([T1])
    worker = worker_process(config)
    wait_for(lambda: checkpoint(redis_url) is not None, 30, "a checkpoint")
    worker.stop()
    with redis.Redis.from_url(redis_url) as client:
        client.flushall()
    again = worker_process(config, streaming=False)
    wait_for(lambda: not again.alive(), 30, "the worker to refuse", again.log)
    assert "--adopt-slot" in again.log()
    adopted = worker_process(config, "--adopt-slot")
    backend.execute(f"INSERT INTO {T1} VALUES (99999, nextval('versions'), 'after')")
    wait_for(lambda: any(e["key"] == "[99999]" for e in
                         read_events(LandingZone(backend.landing, SOURCE), T1)),
             30, "the insert after adopting the slot", adopted.log)


def test_sigterm_flushes_and_exits(backend: Backend,
                                   worker_process: Callable[..., WorkerProcess]) -> None:
    backend.create(T1, 0)
    config = backend.config_path([T1], flush_interval_s=30)
    worker = worker_process(config)
    backend.execute(f"INSERT INTO {T1} VALUES (1, nextval('versions'), 'x')")
    time.sleep(1)
    assert worker.stop() == 0
    assert [e["key"] for e in read_events(LandingZone(backend.landing, SOURCE), T1)] == ["[1]"]


def test_a_dump_ends_without_waiting_for_the_flush_interval(
    backend: Backend, worker_process: Callable[..., WorkerProcess]
) -> None:
    """The write that holds a dump's last window is made as soon as that window closes."""
    backend.create(T1, 500)
    config = backend.config_path([T1], flush_interval_s=60)
    worker = worker_process(config)
    request_id = dump(config, "--table", T1, "--chunk-size", "64")
    state = wait_request(backend.redis_url, SOURCE, request_id, ["completed", "failed"], 30,
                         worker)
    assert state["state"] == "completed", state
    dumped = [e for e in read_events(LandingZone(backend.landing, SOURCE), T1)
              if e["dump_id"] == request_id]
    assert len(dumped) == 500


def test_watermark_table_removed_from_publication_is_restored(
    backend: Backend, worker_process: Callable[..., WorkerProcess]
) -> None:
    backend.create(T1, 500)
    config = backend.config_path([T1])
    worker = worker_process(config)
    backend.execute(f"ALTER PUBLICATION dblog_{SOURCE} DROP TABLE dblog.watermark")
    request_id = dump(config, "--table", T1, "--chunk-size", "50")
    state = wait_request(backend.redis_url, SOURCE, request_id, ["completed", "failed"], 60,
                         worker)
    assert state["state"] == "completed", state
    assert "went past the high watermark" in worker.log()
    assert_converged(backend, T1)


def test_composite_text_keys_in_collation_order(
    backend: Backend, worker_process: Callable[..., WorkerProcess]
) -> None:
    """Keyset pagination over (text, int) keys compares in the database's collation."""
    table = "public.tenants"
    backend.execute(
        f'CREATE TABLE {table} (tenant text COLLATE "C", id int, version bigint NOT NULL, '
        "note text, PRIMARY KEY (tenant, id)); "
        f"ALTER TABLE {table} REPLICA IDENTITY FULL; CREATE SEQUENCE IF NOT EXISTS versions"
    )
    names = ["a", "B", "é", "Z", "a b", "a-b", "ä", "", "'; DROP TABLE x; --", "😀", "A"]
    with psycopg.connect(backend.dsn, autocommit=True) as conn, conn.cursor() as cur:
        cur.executemany(
            f"INSERT INTO {table} VALUES (%s, %s, nextval('versions'), 'n')",
            [(name, i) for name in names for i in range(60)],
        )
    config = backend.config_path([table])
    worker = worker_process(config)
    request_id = dump(config, "--table", table, "--chunk-size", "7")
    keys_id = dump(config, "--table", table, "--keys",
                   json.dumps([["é", 3], ["😀", 59], ["nobody", 1]]), "--chunk-size", "2")
    with psycopg.connect(backend.dsn, autocommit=True) as conn:
        for i in range(0, 60, 3):
            conn.execute(f"UPDATE {table} SET version = nextval('versions'), id = id + 1000 "
                         "WHERE tenant = 'ä' AND id = %s", (i,))
            conn.execute(f"DELETE FROM {table} WHERE tenant = 'a' AND id = %s", (i,))
    for rid in (request_id, keys_id):
        state = wait_request(backend.redis_url, SOURCE, rid, ["completed", "failed"], 60, worker)
        assert state["state"] == "completed", state
    expected = source_rows(backend.dsn, table, ("tenant", "id"))

    def converged() -> bool:
        return replay(backend.landing, SOURCE, table).rows == expected

    wait_for(converged, 30, "convergence of the composite-key table")
    assert replay(backend.landing, SOURCE, table).time_travel == []
    store = StateStore(backend.redis_url, SOURCE)
    try:
        assert store.missing_keys(keys_id) == [("nobody", "1")]
        progress = store.progress(request_id)[table]
    finally:
        store.close()
    assert progress.selected >= 660 - 40 and progress.chunks >= 660 // 7


def test_rows_the_log_cut_short_are_dumped_again(
    backend: Backend, worker_process: Callable[..., WorkerProcess]
) -> None:
    """REPLICA IDENTITY changed away from FULL while running: an update that keeps a large
    value arrives without it; the worker keeps going and queues a dump of those keys."""
    backend.create(T1, 0)
    config = backend.config_path([T1])
    worker = worker_process(config)
    big = "(SELECT string_agg(md5(random()::text), '') FROM generate_series(1, 4000))"
    backend.execute(f"INSERT INTO {T1} SELECT g, nextval('versions'), {big} "
                    "FROM generate_series(1, 3) g")
    backend.execute(f"ALTER TABLE {T1} REPLICA IDENTITY DEFAULT")
    backend.execute(f"UPDATE {T1} SET version = nextval('versions') WHERE id = 1")
    backend.execute(f"UPDATE {T1} SET version = nextval('versions'), id = 30 WHERE id = 2")
    wait_for(lambda: "came without their whole row" in worker.log(), 30, "the repair", worker.log)
    store = StateStore(backend.redis_url, SOURCE)
    try:
        wait_for(lambda: any(r.kind.value == "keys" and r.state.value == "completed"
                             for r in store.list_requests()), 30, "the repair dump", worker.log)
        repairs = [r for r in store.list_requests() if r.kind.value == "keys"]
        assert [r.key_count for r in repairs] == [2]
    finally:
        store.close()
    assert worker.alive()
    assert_converged(backend, T1)


def test_landing_zone_unwritable_then_fixed(
    backend: Backend, worker_process: Callable[..., WorkerProcess]
) -> None:
    """A write that fails stops the checkpoint where it was; once fixed, nothing is lost."""
    backend.create(T1, 0)
    config = backend.config_path([T1])
    worker = worker_process(config)
    backend.execute(f"INSERT INTO {T1} VALUES (1, nextval('versions'), 'first')")
    table_dir = backend.landing / SOURCE / "public.items"
    wait_for(lambda: any(table_dir.glob("segment-*")), 30, "the first segment", worker.log)
    aside = table_dir.with_name("aside")
    table_dir.rename(aside)
    table_dir.write_text("not a directory")  # the table's directory cannot be written
    backend.execute(f"INSERT INTO {T1} SELECT g, nextval('versions'), 'x' "
                    "FROM generate_series(2, 100) g")
    wait_for(lambda: "cannot write the landing zone" in worker.log(), 30, "the failure",
             worker.log)
    saved = checkpoint(backend.redis_url)
    time.sleep(1.5)  # sessions keep failing meanwhile: the checkpoint must not move
    assert checkpoint(backend.redis_url) == saved
    assert worker.alive()
    table_dir.unlink()
    aside.rename(table_dir)
    assert_converged(backend, T1)
