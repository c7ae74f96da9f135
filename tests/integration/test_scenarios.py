"""The scenario suite: the invariants of DESIGN.md against a real source and Redis.

Every scenario ends with the same two checks on the landing output, replayed in
position order: it equals the source table (convergence), and no key's version
ever goes back (no time travel; writers take versions from one sequence).

The suite talks to the source through a :class:`Backend`, and runs against each of
PostgreSQL and MariaDB (the ``backend`` fixture; test ids name it). Scenarios that are
about a PostgreSQL mechanism (the publication, REPLICA IDENTITY, the slot) skip MariaDB.
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from typing import Any

import psycopg
import pyarrow.parquet as pq
import pytest
import redis

from dblog_worker import config as config_module
from dblog_worker.capture.worker import Worker
from dblog_worker.config import Config
from dblog_worker.control.store import StateStore
from dblog_worker.dialect import open_source
from dblog_worker.dump.requests import KeyTexts
from dblog_worker.dump.row_filter import RowFilter
from dblog_worker.events import ChangeEvent, Op, Origin
from dblog_worker.landing.parquet import LandingZone
from dblog_worker.mysql.checkpoint import BinlogCheckpoint
from dblog_worker.position import Position
from dblog_worker.source import (
    Chunk,
    ChunkReader,
    DumpReader,
    KeysChunk,
    Problem,
    SchemaVersion,
    Source,
    WatermarkWriter,
)
from dblog_worker.table_patterns import Rescan, Selection
from tests.integration.harness import (
    HOSTILE,
    KILLED_LEASE,
    PARTITIONED,
    PLAIN,
    SOURCE,
    Backend,
    TableFlavour,
    WorkerProcess,
    assert_converged,
    checkpoint,
    checkpoint_position,
    chunks,
    cli,
    cli_here,
    dump,
    dump_here,
    dump_through_kills,
    dumps_under_load,
    events_of,
    outage_mid_dump,
    overlapping_dumps_through_kills,
    redis_request,
    replay,
    wait_for,
    wait_request,
)
from tests.services import RedisServer

# -- the live log ---------------------------------------------------------------


def test_live_log_in_commit_order(backend: Backend, worker_process: Callable[..., WorkerProcess]
                                  ) -> None:
    """Inserts, an update, a key change (delete + create), a delete and a TRUNCATE reach
    the output in commit order, each with its images."""
    t1, v = backend.t1, backend.next_version
    backend.create(t1, 0)
    config = backend.config_path([t1])
    worker = worker_process(config)
    with backend.connect() as session:
        session.execute(f"INSERT INTO {t1} VALUES (1, {v}, 'a')")
        with session.transaction():
            session.execute(f"INSERT INTO {t1} VALUES (2, {v}, 'b')")
            session.execute(f"UPDATE {t1} SET payload = 'c', version = {v} WHERE id = 1")
        session.execute(f"UPDATE {t1} SET id = 3, version = {v} WHERE id = 2")
        session.execute(f"DELETE FROM {t1} WHERE id = 1")
        session.execute(f"TRUNCATE {t1}")
        session.execute(f"INSERT INTO {t1} VALUES (4, {v}, 'd')")

    def events() -> list[tuple[object, ...]]:
        return [(e["op"], e["key"], e["origin"]) for e in events_of(backend, t1)]

    expected = [("c", "[1]", "log"), ("c", "[2]", "log"), ("u", "[1]", "log"),
                ("d", "[2]", "log"), ("c", "[3]", "log"), ("d", "[1]", "log"),
                ("t", None, "log"), ("c", "[4]", "log")]
    wait_for(lambda: len(events()) >= len(expected), 30, "8 events", worker.log)
    assert events() == expected
    landed = events_of(backend, t1)
    update = landed[2]
    assert json.loads(str(update["after"]))["payload"] == "c"
    assert json.loads(str(update["before"]))["payload"] == "a"
    positions = [str(e["position"]) for e in landed]
    assert positions == sorted(positions) and len(set(positions)) == len(positions)
    # the key change: delete of the old key and create of the new one, one change
    digits = backend.statement_digits
    assert positions[3][:digits] == positions[4][:digits]
    assert_converged(backend, t1)


def confirmed(backend: Backend) -> tuple[int, int]:
    """How far the source may forget its log: PostgreSQL, the slot's confirmed LSN;
    MySQL (no slot), the (file, position) of the checkpoint in Redis."""
    if backend.kind == "postgresql":
        with psycopg.connect(backend.db.dsn) as conn:
            row = conn.execute(
                "SELECT confirmed_flush_lsn - '0/0'::pg_lsn FROM pg_replication_slots "
                "WHERE slot_name = %s", (f"dblog_{SOURCE}",)).fetchone()
            return (0, -1 if row is None or row[0] is None else int(row[0]))
    saved = checkpoint(backend.redis_url)
    if saved is None:
        return (-1, -1)
    position = BinlogCheckpoint.decode(saved).position
    return (position.major, position.minor)


def test_idle_log_position_advances(backend: Backend,
                                    worker_process: Callable[..., WorkerProcess]) -> None:
    """Writes to tables that are not captured move the checkpoint, not the output."""
    backend.create(backend.t1, 0)
    config = backend.config_path([backend.t1])
    worker_process(config)
    wait_for(lambda: confirmed(backend) >= (0, 0), 30, "the slot or checkpoint")
    first = confirmed(backend)
    backend.execute(f"CREATE TABLE {backend.db.table('other')} (id int)")
    backend.execute(f"INSERT INTO {backend.db.table('other')} SELECT g FROM "
                    f"{backend.db.series(1, 1000)}")
    wait_for(lambda: confirmed(backend) > first, 30, "the idle position to advance")
    assert events_of(backend, backend.t1) == []


def wait_events(backend: Backend, table: str, wanted: Sequence[tuple[str, str]],
                worker: WorkerProcess) -> list[dict[str, Any]]:
    """The table's events, once those of each (op, key) in ``wanted`` have landed."""
    found: list[dict[str, Any]] = []

    def landed() -> bool:
        nonlocal found
        found = events_of(backend, table)
        return set(wanted) <= {(str(e["op"]), str(e["key"])) for e in found}

    wait_for(landed, 30, f"events {wanted} of {table}", worker.log)
    return found


def test_key_changes_are_delete_and_create(
    backend: Backend, worker_process: Callable[..., WorkerProcess]
) -> None:
    """An UPDATE that changes the keys of several rows becomes, per row, a delete of the
    old key (with the old row) and a create of the new key, in the statement's order."""
    t1, v = backend.t1, backend.next_version
    backend.create(t1, 0)
    worker = worker_process(backend.config_path([t1]))
    backend.execute(f"INSERT INTO {t1} SELECT g, {v}, 'p' FROM {backend.db.series(1, 3)}")
    backend.execute(f"UPDATE {t1} SET id = id + 1000, version = {v} WHERE id <= 3")
    moved = [("d", "[1]"), ("c", "[1001]"), ("d", "[2]"), ("c", "[1002]"),
             ("d", "[3]"), ("c", "[1003]")]
    events = wait_events(backend, t1, moved, worker)[3:]
    assert [(e["op"], e["key"]) for e in events] == moved
    for deleted, created in zip(events[::2], events[1::2], strict=True):
        before, after = json.loads(str(deleted["before"])), json.loads(str(created["after"]))
        assert deleted["after"] is None and created["before"] is None
        assert after["id"] == before["id"] + 1000 and after["version"] > before["version"]
    positions = [str(e["position"]) for e in events]
    assert positions == sorted(positions) and len(set(positions)) == len(positions)
    digits = backend.statement_digits
    assert len({p[:digits] for p in positions}) == 1  # one logged change
    assert_converged(backend, t1)


def test_truncate_mid_dump_converges(
    backend: Backend, worker_process: Callable[..., WorkerProcess]
) -> None:
    """TRUNCATE while the table is dumped: one truncate event, no row of before it dumped
    after it, and the output equals the table."""
    t1, v = backend.t1, backend.next_version
    backend.create(t1, 3000)
    config = backend.config_path([t1])
    worker = worker_process(config)
    request_id = dump(config, "--table", t1, "--chunk-size", "20", "--delay-ms", "20")
    wait_for(lambda: chunks(backend, request_id) >= 5, 30, "five chunks", worker.log)
    backend.execute(f"TRUNCATE {t1}")
    backend.execute(f"INSERT INTO {t1} SELECT g * 10 + 5, {v}, 'after' "
                    f"FROM {backend.db.series(1, 3000)}")
    state = wait_request(backend.redis_url, SOURCE, request_id, ["completed", "failed"], 60,
                         worker)
    assert state["state"] == "completed", state
    assert_converged(backend, t1)
    events = events_of(backend, t1)
    truncates = [i for i, e in enumerate(events) if e["op"] == "t"]
    assert len(truncates) == 1 and events[truncates[0]]["origin"] == "log"
    # rows dumped before the TRUNCATE are gone; none of them is dumped after it (the
    # dump may find the table empty and end, or read on among the new rows)
    assert any(e["origin"] == "dump" for e in events[:truncates[0]])
    after = [json.loads(str(e["after"])) for e in events[truncates[0]:]
             if e["origin"] == "dump"]
    assert all(row["payload"] == "after" for row in after)


def test_add_column_mid_stream(backend: Backend,
                               worker_process: Callable[..., WorkerProcess]) -> None:
    """A column added while the worker streams: capture goes on, the later events carry
    the column under a new schema version (a new schema file in the landing zone), and a
    dump afterwards brings the rows the log did not touch in line."""
    t1, v = backend.t1, backend.next_version
    backend.create(t1, 30)
    config = backend.config_path([t1])
    worker = worker_process(config)
    backend.execute(f"UPDATE {t1} SET version = {v} WHERE id = 10")
    wait_events(backend, t1, [("u", "[10]")], worker)
    backend.execute(f"ALTER TABLE {t1} ADD COLUMN extra varchar(10) DEFAULT 'x'")
    backend.execute(f"INSERT INTO {t1} (id, version, payload, extra) VALUES (5, {v}, 'n', 'y')")
    backend.execute(f"UPDATE {t1} SET version = {v} WHERE id = 20")
    events = wait_events(backend, t1, [("c", "[5]"), ("u", "[20]")], worker)
    old, new, updated = (next(e for e in events if (e["op"], e["key"]) == wanted)
                         for wanted in (("u", "[10]"), ("c", "[5]"), ("u", "[20]")))
    assert "extra" not in json.loads(str(old["after"]))
    assert json.loads(str(new["after"]))["extra"] == "y"
    assert json.loads(str(updated["after"]))["extra"] == "x"
    assert json.loads(str(updated["before"]))["extra"] == "x"
    schemas = LandingZone(backend.landing, SOURCE).schemas(t1)
    latest = max(schemas)
    assert len(schemas) == 2, schemas
    columns: Any = schemas[latest]["columns"]
    assert [c["name"] for c in columns] == ["id", "version", "payload", "extra"]
    assert old["schema_version"] < new["schema_version"] == updated["schema_version"] == latest
    request_id = dump(config, "--table", t1, "--chunk-size", "7")
    state = wait_request(backend.redis_url, SOURCE, request_id, ["completed", "failed"], 60,
                         worker)
    assert state["state"] == "completed", state
    assert_converged(backend, t1)
    dumped = [e for e in events_of(backend, t1) if e["dump_id"] == request_id]
    assert len(dumped) == 31 and {e["schema_version"] for e in dumped} == {latest}


# -- dumps under load ------------------------------------------------------------


@pytest.mark.parametrize(("kind", "flavour"), [
    ("all", PLAIN), ("tables", PLAIN), ("keys", PLAIN),
    # tables and columns whose names need quoting everywhere (a dot, quotes, %, a space)
    ("tables", HOSTILE),
    # tables partitioned by their key: key changes move rows between partitions
    ("all", PARTITIONED),
    # three chunk SELECTs per window, on three connections; with names that need quoting
    # in the range ends' key-only SELECTs too, and on partitioned tables
    ("parallel", PLAIN), ("parallel", HOSTILE), ("parallel", PARTITIONED),
    # a pruning dump under writes: no row the source has may be pruned downstream
    ("prune", PLAIN),
], ids=["all", "tables", "keys", "hostile-names-tables", "partitioned-all", "parallel-tables",
        "parallel-hostile-names", "parallel-partitioned", "prune"])
def test_dumps_converge_under_load(backend: Backend, kind: str, flavour: TableFlavour,
                                   worker_process: Callable[..., WorkerProcess]) -> None:
    backend.use(flavour)
    t1, t2 = backend.t1, backend.t2
    backend.create(t1, 1500)
    backend.create(t2, 800)
    config = backend.config_path([t1, t2])
    ids = dumps_under_load(backend, config, worker_process(config), kind)
    assert_converged(backend, t1, t2)
    store = StateStore(backend.redis_url, SOURCE)
    try:
        progress = store.progress(ids[0])
        if kind == "keys":
            # the key that never existed, and any the workload deleted before its batch
            missing = store.missing_keys(ids[0])
            assert ("999999",) in missing
            assert progress[t1].missing == len(missing)
        assert sum(p.chunks for p in progress.values()) > 10
        assert all(p.done for p in progress.values())
        if kind == "parallel":  # windows of several ranges of 29 keys (fewer where one was cut)
            assert (sum(p.selected for p in progress.values())
                    > 2 * 29 * sum(p.chunks for p in progress.values())), progress
    finally:
        store.close()


def test_a_pruning_dump_removes_rows_the_log_never_deleted(
        backend: Backend, worker_process: Callable[..., WorkerProcess]) -> None:
    """Rows deleted where the log does not say so stay in the output of a table dump; a
    pruning dump (``--prune``) reads the table and lands one prune event after its rows,
    and the output equals the table, under writes. A dump of an empty table prunes all."""
    t1, t2, v = backend.t1, backend.t2, backend.next_version
    backend.create(t1, 400)
    backend.create(t2, 50)
    config = backend.config_path([t1, t2])
    worker = worker_process(config)
    first = dump(config, "--all", "--chunk-size", "90")
    wait_request(backend.redis_url, SOURCE, first, ["completed"], 60, worker)
    assert_converged(backend, t1, t2)
    assert backend.delete_unlogged(t1, "MOD(id, 7) = 0") > 40
    assert backend.delete_unlogged(t2, "id > 0") == 50
    backend.execute(f"UPDATE {t1} SET version = {v} WHERE id = 10")
    wait_events(backend, t1, [("u", "[10]")], worker)
    extra = set(replay(backend.landing, SOURCE, t1).rows) - set(backend.rows(t1))
    assert len(extra) > 40  # the output keeps rows the source no longer has
    workload = backend.workload([t1], seed=7)
    workload.start()
    try:
        pruned = dump(config, "--table", t1, "--table", t2, "--chunk-size", "37", "--prune")
        state = wait_request(backend.redis_url, SOURCE, pruned, ["completed", "failed"], 90,
                             worker)
        assert state["state"] == "completed", state
    finally:
        workload.stop()
    assert_converged(backend, t1, t2)
    for table in (t1, t2):
        prunes = [e for e in events_of(backend, table) if e["op"] == "p"]
        assert [e["dump_id"] for e in prunes] == [pruned], prunes
        assert events_of(backend, table)[-1]["op"] in ("p", "c", "u", "d")


# -- writes between the watermarks and the chunk SELECT ---------------------------


class HookedWatermarks:
    """A watermark writer that runs a hook before and after the low watermark."""

    def __init__(self, inner: WatermarkWriter, hooks: dict[str, Callable[[str], None]]
                 ) -> None:
        self.inner = inner
        self.hooks = hooks

    def write_watermark(self, token: str) -> None:
        if token.endswith(".lw") and "before_low" in self.hooks:
            self.hooks["before_low"](token)
        self.inner.write_watermark(token)
        if token.endswith(".lw") and "after_low" in self.hooks:
            self.hooks["after_low"](token)

    def await_low_watermark(self) -> None:
        self.inner.await_low_watermark()

    def heartbeat(self) -> None:
        self.inner.heartbeat()


class HookedChunks:
    """A chunk reader that runs a hook after the chunk SELECT."""

    def __init__(self, inner: DumpReader, hooks: dict[str, Callable[[str], None]]) -> None:
        self.inner = inner
        self.hooks = hooks

    def read_chunk(self, table: str, after: KeyTexts | None, upper: KeyTexts,
                   limit: int, row_filter: RowFilter | None = None) -> Chunk:
        chunk = self.inner.read_chunk(table, after, upper, limit, row_filter)
        if "after_select" in self.hooks:
            self.hooks["after_select"](table)
        return chunk

    def read_keys(self, table: str, keys: Sequence[KeyTexts]) -> KeysChunk:
        chunk = self.inner.read_keys(table, keys)
        if "after_select" in self.hooks:
            self.hooks["after_select"](table)
        return chunk

    def upper_bound(self, table: str, row_filter: RowFilter | None = None) -> KeyTexts | None:
        return self.inner.upper_bound(table, row_filter)

    def key_after(self, table: str, after: KeyTexts | None, upper: KeyTexts,
                  offset: int, row_filter: RowFilter | None = None) -> KeyTexts | None:
        return self.inner.key_after(table, after, upper, offset, row_filter)

    def lane(self, index: int) -> ChunkReader:
        return self if index == 0 else self.inner.lane(index)


class HookedSource:
    """A source that runs a hook before and after the low watermark, and after the chunk
    SELECT: its watermarks and chunks parts hooked, the others its own."""

    def __init__(self, inner: Source, hooks: dict[str, Callable[[str], None]]) -> None:
        self.inner = inner
        self.hooks = hooks
        self.name = inner.name
        self.log = inner.log
        self.watermarks = HookedWatermarks(inner.watermarks, hooks)
        self.chunks = HookedChunks(inner.chunks, hooks)
        self.tables = inner.tables
        self.pressure = inner.pressure

    # the rest, as the source does it

    def connect(self) -> None:
        self.inner.connect()

    def preflight(self) -> list[Problem]:
        return self.inner.preflight()

    def modes(self) -> list[str]:
        return self.inner.modes()

    def readers(self) -> dict[str, str]:
        return self.inner.readers()

    def cascades(self) -> list[str]:
        return self.inner.cascades()

    def capture_exists(self) -> bool:
        return self.inner.capture_exists()

    def selection(self) -> Selection:
        return self.inner.selection()

    def rescan(self) -> Rescan:
        return self.inner.rescan()

    def prepare(self) -> str | None:
        return self.inner.prepare()

    def close(self) -> None:
        self.inner.close()


def run_in_thread(
    config: Config, hooks: dict[str, Callable[[str], None]]
) -> tuple[Worker, threading.Thread]:
    def factory(cfg: Config, schema_version: SchemaVersion) -> Source:
        return HookedSource(open_source(cfg.source, schema_version), hooks)

    worker = Worker(config, source=factory)
    thread = threading.Thread(target=worker.run_forever, kwargs={"handle_signals": False},
                              daemon=True)
    thread.start()
    return worker, thread


def hook_write(backend: Backend, write: str, table: str, a: int, b: int) -> str:
    """A write that touches keys ``a`` and ``b`` (inside the chunk being read)."""
    v = backend.next_version
    if write == "update":
        return f"UPDATE {table} SET version = {v}, payload = 'hook' WHERE id IN ({a}, {b})"
    if write == "delete":
        return f"DELETE FROM {table} WHERE id IN ({a}, {b})"
    if write == "insert":
        return backend.db.insert_ignore(table, f"({a + 5}, {v}, 'new'), ({b + 5}, {v}, 'new')")
    assert write == "key change"
    return f"UPDATE {table} SET id = id + 3, version = {v} WHERE id IN ({a}, {b})"


@pytest.mark.parametrize("moment", ["after_low", "after_select"])
@pytest.mark.parametrize("write", ["delete", "insert", "key change", "update"])
@pytest.mark.parametrize("kind", ["table", "keys", "filtered"])
def test_writes_between_watermarks(backend: Backend, moment: str, write: str, kind: str) -> None:
    """Writes to rows of the chunk being read, after LW or after its SELECT: the window's
    events win (kind ``filtered``: a dump of a key range of rows whose payload is not
    'hook', which the update makes them leave)."""
    t1 = backend.t1
    backend.create(t1, 200)
    config = config_module.load(backend.config_path([t1]))
    chunk_size = 20
    windows: list[int] = []
    writer = backend.connect()

    def hook(_: str) -> None:
        number = len(windows)
        windows.append(number)
        # keys 10..2000; window n reads ids 200n+10 .. 200n+200: touch two of them
        low = 200 * number + 10
        writer.execute(hook_write(backend, write, t1, low + 50, low + 120))

    worker, thread = run_in_thread(config, {moment: hook})
    try:
        path = backend.config_path([t1])
        if kind == "table":
            request_id = dump(path, "--table", t1, "--chunk-size", str(chunk_size))
        elif kind == "filtered":
            request_id = dump(path, "--table", t1, "--where", "payload", "!=", "hook",
                              "--from-key", "10", "--to-key", "2000",
                              "--chunk-size", str(chunk_size))
        else:
            keys = list(range(10, 2001, 10))
            request_id = dump(path, "--table", t1, "--keys", json.dumps(keys),
                              "--chunk-size", str(chunk_size))
        state = wait_request(backend.redis_url, SOURCE, request_id, ["completed", "failed"], 60)
        assert state["state"] == "completed", state
        assert_converged(backend, t1)
        store = StateStore(backend.redis_url, SOURCE)
        try:
            progress = store.progress(request_id)[t1]
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


# Three kills a run; the chaos suite kills the leader of a dump too. More seeds with the
# chaos suite's long version (DBLOG_CHAOS_LONG=1).
KILL_SEEDS = [1, 2, 3] if os.environ.get("DBLOG_CHAOS_LONG", "") not in ("", "0") else [1]


@pytest.mark.parametrize("parallelism", [1, 3], ids=["sequential", "parallel-3"])
@pytest.mark.parametrize("seed", KILL_SEEDS)
def test_kill_9_during_dump_resumes(backend: Backend, seed: int, parallelism: int,
                                    worker_process: Callable[..., WorkerProcess]) -> None:
    """SIGKILL three times while a dump runs (``parallelism`` ranges a window), each time
    at a random point of it (between 10 % and 60 % of its windows, at a random moment of a
    window): each new worker resumes the dump where the last completed window left it, and
    the output converges with no event landed twice."""
    t1, t2 = backend.t1, backend.t2
    rnd = random.Random(seed)
    backend.create(t1, 6000)
    backend.create(t2, 3000)
    windows = 9000 // (100 * parallelism)  # about: the workload inserts and deletes
    # slow enough that each kill lands before the last window (20 ms a range)
    dump_through_kills(
        backend, backend.config_path([t1, t2], flush_interval_s=0.1, extra=KILLED_LEASE),
        worker_process, ["--all", "--chunk-size", "100", "--delay-ms", str(20 * parallelism),
                         "--parallelism", str(parallelism)],
        [int(f * windows) for f in sorted(rnd.uniform(0.1, 0.6) for _ in range(3))], rnd)


# -- several dumps at once, by priority -------------------------------------------------


def overlapping(backend: Backend, mix: str) -> list[list[str]]:
    """Two to four dumps of every kind that run at once (see
    :func:`~tests.integration.harness.overlapping_dumps_through_kills`), each paced so
    that it needs some 30 windows and all stay in flight across the kills."""
    t1, t2 = backend.t1, backend.t2
    f = backend.db.flavour
    keys_of = {t: sorted(int(json.loads(k)[0]) for k in backend.rows(t)) for t in (t1, t2)}
    pace = ["--delay-ms", "60"]
    if mix == "two":  # a parallel table dump in the background; a repair of every key
        return [["--table", t1, "--chunk-size", "25", "--parallelism", "2", *pace,
                 "--priority", "background"],
                ["--table", t2, "--keys", json.dumps([*keys_of[t2], 999_999]),
                 "--chunk-size", "25", *pace]]
    if mix == "three":  # one slot for two of them: the repairs take the backfill's slot
        # a pruning dump (urgent unless told): its prune start kept through the kills
        return [["--table", t1, "--chunk-size", "50", *pace, "--priority", "background"],
                ["--table", t2, "--chunk-size", "25", *pace, "--prune"],
                ["--table", t1, "--keys", json.dumps(keys_of[t1][::3]), "--chunk-size", "15",
                 *pace]]
    assert mix == "four"  # everything, a filtered dump, a key range, keys
    return [["--all", "--chunk-size", "60", *pace, "--priority", "background"],
            ["--table", t1, "--chunk-size", "45", "--where", f.version, ">", "0",
             "--where", f.payload, "is not null", *pace],
            ["--table", t2, "--chunk-size", "10", "--parallelism", "2", "--from-key", "100",
             "--to-key", "6000", *pace, "--priority", "normal"],
            ["--table", t1, "--keys", json.dumps(keys_of[t1][:300]), "--chunk-size", "10",
             *pace]]


@pytest.mark.parametrize(("mix", "flavour", "worker_extra"), [
    ("two", PLAIN, ""),
    ("three", HOSTILE, "max_active_dumps = 2"),
    ("four", PARTITIONED, ""),
], ids=["two", "three-in-two-slots-hostile-names", "four-partitioned"])
@pytest.mark.parametrize("seed", KILL_SEEDS)
def test_overlapping_dumps_converge_through_kills(
        backend: Backend, seed: int, mix: str, flavour: TableFlavour, worker_extra: str,
        worker_process: Callable[..., WorkerProcess]) -> None:
    """Two to four dumps of all kinds in flight at once (a table dump, one in parallel
    ranges, a filtered one, a key range, primary keys, a pruning dump; background, normal
    and urgent),
    while the workload writes, and SIGKILL twice or three times with several of them
    running: each resumes from its own last durable window, all complete, the output
    converges, no event lands twice."""
    backend.use(flavour)
    rnd = random.Random(seed * 31 + len(mix))
    backend.create(backend.t1, 1500)
    backend.create(backend.t2, 800)
    config = backend.config_path([backend.t1, backend.t2], flush_interval_s=0.1,
                                 worker_extra=worker_extra, extra=KILLED_LEASE)
    requests = overlapping(backend, mix)
    kills = sorted(rnd.sample(range(3, 12), 2 if mix == "two" else 3))
    ids = overlapping_dumps_through_kills(backend, config, worker_process, requests, kills, rnd)
    store = StateStore(backend.redis_url, SOURCE)
    try:
        priorities = [store.get_request(i).priority.value for i in ids]
    finally:
        store.close()
    assert priorities[0] == "background" and priorities[-1] == "urgent"
    if mix == "three":  # the pruning dump: urgent by default, and its prune event landed
        assert priorities[1] == "urgent"
        ops = [str(e["op"]) for e in replay(backend.landing, SOURCE, backend.t2).events]
        assert "p" in ops


def test_a_repair_runs_at_once_next_to_a_paced_backfill(
        backend: Backend, worker_process: Callable[..., WorkerProcess]) -> None:
    """A repair (a key dump: urgent) queued while a full dump runs paced and throttled in
    the background completes while the backfill still runs; pausing the backfill lets a
    third dump run; priorities and knobs change while they run."""
    t1, t2 = backend.t1, backend.t2
    backend.create(t1, 3000)
    backend.create(t2, 300)
    config = backend.config_path([t1, t2])
    worker = worker_process(config)
    backfill = dump_here(config, "--all", "--chunk-size", "50", "--delay-ms", "200",
                    "--priority", "background", "--max-chunk-ms", "1")
    wait_for(lambda: chunks(backend, backfill) >= 2, 30, "the backfill's windows", worker.log)
    repair = dump_here(config, "--table", t2, "--keys", "[10, 20, 30]")
    done = wait_request(backend.redis_url, SOURCE, repair, ["completed", "failed"], 30, worker)
    assert (done["state"], done["priority"]) == ("completed", "urgent"), done
    assert redis_request(backend.redis_url, SOURCE, backfill)["state"] == "running"
    assert chunks(backend, backfill) < 30  # of 66: it goes on in the background
    listing = cli_here(config, "list")
    assert re.search(rf"^{backfill} +running +background +all ", listing, re.M), listing
    assert re.search(rf"^{repair} +completed +urgent +keys ", listing, re.M), listing

    cli_here(config, "pause", backfill)  # a paused dump gives its turns to the others
    other = dump_here(config, "--table", t2, "--chunk-size", "20")
    done = wait_request(backend.redis_url, SOURCE, other, ["completed", "failed"], 30, worker)
    assert (done["state"], done["priority"]) == ("completed", "normal"), done
    assert redis_request(backend.redis_url, SOURCE, backfill)["state"] == "paused"

    shown = cli_here(config, "set", backfill, "--priority", "urgent", "--delay-ms", "0",
                     "--no-throttle")
    assert shown.startswith(f"{backfill}: priority urgent, chunk size 50, delay 0 ms"), shown
    cli_here(config, "resume", backfill)
    done = wait_request(backend.redis_url, SOURCE, backfill, ["completed", "failed"], 60,
                        worker)
    assert (done["state"], done["priority"]) == ("completed", "urgent"), done
    assert_converged(backend, t1, t2)


def test_an_urgent_dump_takes_the_slot_of_a_background_one(
        backend: Backend, worker_process: Callable[..., WorkerProcess]) -> None:
    """One slot (``max_active_dumps = 1``): a repair queued while a backfill runs takes the
    slot; the backfill, still running, waits for it (``dblog status`` says so), then goes
    on from where it was."""
    t1 = backend.t1
    backend.create(t1, 2000)
    config = backend.config_path([t1], worker_extra="max_active_dumps = 1")
    worker = worker_process(config)
    backfill = dump_here(config, "--table", t1, "--chunk-size", "20", "--delay-ms", "100",
                    "--priority", "background")
    wait_for(lambda: chunks(backend, backfill) >= 3, 30, "the backfill's windows", worker.log)
    repair = dump_here(config, "--table", t1, "--keys", json.dumps(list(range(10, 2001, 10))),
                  "--chunk-size", "5", "--delay-ms", "500")
    store = StateStore(backend.redis_url, SOURCE)
    try:
        wait_for(lambda: "a slot" in store.dump_status(backfill).get("waiting", ""), 30,
                 "the backfill to wait for a slot", worker.log)
    finally:
        store.close()
    status = cli_here(config, "status")
    assert f"dump {backfill}: running, priority background, waiting: a slot" in status, status
    assert f"dump {repair}: running, priority urgent" in status, status
    parked_at = chunks(backend, backfill)
    wait_for(lambda: chunks(backend, repair) >= 5, 30, "the repair's windows", worker.log)
    assert chunks(backend, backfill) <= parked_at + 1  # a window open at the switch closes
    cli_here(config, "set", repair, "--delay-ms", "0")
    done = wait_request(backend.redis_url, SOURCE, repair, ["completed", "failed"], 60, worker)
    assert done["state"] == "completed", done
    done = wait_request(backend.redis_url, SOURCE, backfill, ["completed", "failed"], 60,
                        worker)
    assert done["state"] == "completed", done
    assert_converged(backend, t1)


# -- steering a dump -----------------------------------------------------------------


def test_pause_resume_and_knobs(backend: Backend,
                                worker_process: Callable[..., WorkerProcess]) -> None:
    t1 = backend.t1
    backend.create(t1, 3000)
    config = backend.config_path([t1])
    worker = worker_process(config)
    request_id = dump(config, "--table", t1, "--chunk-size", "10", "--delay-ms", "50")
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
    assert_converged(backend, t1)


def test_parallelism_changes_while_the_dump_runs(
        backend: Backend, worker_process: Callable[..., WorkerProcess]) -> None:
    t1 = backend.t1
    backend.create(t1, 2000)
    config = backend.config_path([t1])
    worker = worker_process(config)
    request_id = dump(config, "--table", t1, "--chunk-size", "20", "--delay-ms", "100")
    wait_for(lambda: chunks(backend, request_id) >= 2, 30, "two chunks", worker.log)
    cli_here(config, "set", request_id, "--parallelism", "4", "--delay-ms", "0")
    before = chunks(backend, request_id)
    state = wait_request(backend.redis_url, SOURCE, request_id, ["completed"], 60, worker)
    assert state["parallelism"] == "4"
    # 100 chunks of 20: one per window, the rest would take 100 - before windows; four
    # per window, a quarter of that (and the window open at the change)
    assert chunks(backend, request_id) - before < (100 - before) / 2 + 2, before
    assert_converged(backend, t1)


def test_cancel_stops_the_dump_and_the_next_one_runs(
    backend: Backend, worker_process: Callable[..., WorkerProcess]
) -> None:
    """With one request at a time (``max_active_dumps = 1``), the second waits in the queue
    until the first is cancelled, then runs."""
    t1, t2 = backend.t1, backend.t2
    backend.create(t1, 3000)
    backend.create(t2, 100)
    config = backend.config_path([t1, t2], worker_extra="max_active_dumps = 1")
    worker = worker_process(config)
    first = dump(config, "--table", t1, "--chunk-size", "10", "--delay-ms", "100")
    second = dump(config, "--table", t2, "--chunk-size", "10")
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
    assert_converged(backend, t2)


# -- the source and Redis go away ------------------------------------------------------


def test_source_restart_mid_dump(backend: Backend,
                                 worker_process: Callable[..., WorkerProcess]) -> None:
    def restart() -> None:
        backend.restart_source()
        backend.execute(f"UPDATE {backend.t1} SET version = {backend.next_version} "
                        "WHERE mod(id, 70) = 0")

    outage_mid_dump(backend, worker_process, restart, "session ended")


def test_redis_unavailable_mid_dump(backend: Backend, redis_server: RedisServer,
                                    worker_process: Callable[..., WorkerProcess]) -> None:
    def hang() -> None:
        os.kill(redis_server.pid, signal.SIGSTOP)
        try:
            backend.execute(f"UPDATE {backend.t1} SET version = {backend.next_version} "
                            "WHERE mod(id, 30) = 0")
            time.sleep(7)  # longer than the worker's Redis timeout
        finally:
            os.kill(redis_server.pid, signal.SIGCONT)

    outage_mid_dump(backend, worker_process, hang, "Redis is unreachable")


def test_redis_data_lost_is_refused(backend: Backend, redis_url: str,
                                    worker_process: Callable[..., WorkerProcess]) -> None:
    """PostgreSQL: the slot says capture ran before; MySQL: the landing zone's marker."""
    t1 = backend.t1
    backend.create(t1, 10)
    config = backend.config_path([t1])
    worker = worker_process(config)
    wait_for(lambda: checkpoint(redis_url) is not None, 30, "a checkpoint")
    worker.stop()
    with redis.Redis.from_url(redis_url) as client:
        client.flushall()
    again = worker_process(config, streaming=False)
    wait_for(lambda: not again.alive(), 30, "the worker to refuse", again.log)
    assert "--adopt-slot" in again.log()
    adopted = worker_process(config, "--adopt-slot")
    backend.execute(f"INSERT INTO {t1} VALUES (99999, {backend.next_version}, 'after')")
    wait_for(lambda: any(e["key"] == "[99999]" for e in events_of(backend, t1)),
             30, "the insert after adopting the slot", adopted.log)


def test_reset_starts_capture_anew(backend: Backend, redis_url: str,
                                   worker_process: Callable[..., WorkerProcess]) -> None:
    """A checkpoint forgotten by `dblog reset` is not mistaken for lost Redis data."""
    t1, v = backend.t1, backend.next_version
    backend.create(t1, 0)
    config = backend.config_path([t1])
    worker = worker_process(config)
    backend.execute(f"INSERT INTO {t1} VALUES (1, {v}, 'before')")
    wait_for(lambda: len(events_of(backend, t1)) == 1, 30, "the first insert", worker.log)
    refused = cli(config, "reset", "--yes", check=False)
    assert refused.returncode == 2 and "holds the lease" in refused.stderr
    assert worker.stop() == 0
    # a worker that stopped cleanly said so: no --force needed a moment later
    assert "last leader (stopped) pid" in cli(config, "status").stdout
    cli(config, "reset", "--yes")
    assert checkpoint(redis_url) is None
    if backend.kind == "postgresql":
        backend.execute(f"SELECT pg_drop_replication_slot('dblog_{SOURCE}')")
    again = worker_process(config)
    backend.execute(f"INSERT INTO {t1} VALUES (2, {v}, 'after')")
    wait_for(lambda: len(events_of(backend, t1)) == 2, 30, "the insert after the reset",
             again.log)


def test_sigterm_flushes_and_exits(backend: Backend,
                                   worker_process: Callable[..., WorkerProcess]) -> None:
    t1 = backend.t1
    backend.create(t1, 0)
    config = backend.config_path([t1], flush_interval_s=30)
    worker = worker_process(config)
    backend.execute(f"INSERT INTO {t1} VALUES (1, {backend.next_version}, 'x')")
    time.sleep(1)
    assert worker.stop() == 0
    assert [e["key"] for e in events_of(backend, t1)] == ["[1]"]


def test_a_dump_ends_without_waiting_for_the_flush_interval(
    backend: Backend, worker_process: Callable[..., WorkerProcess]
) -> None:
    """The write that holds a dump's last window is made as soon as that window closes."""
    t1 = backend.t1
    backend.create(t1, 500)
    config = backend.config_path([t1], flush_interval_s=60)
    worker = worker_process(config)
    request_id = dump(config, "--table", t1, "--chunk-size", "64")
    state = wait_request(backend.redis_url, SOURCE, request_id, ["completed", "failed"], 30,
                         worker)
    assert state["state"] == "completed", state
    dumped = [e for e in events_of(backend, t1) if e["dump_id"] == request_id]
    assert len(dumped) == 500


def test_watermark_table_removed_from_publication_is_restored(
    backend: Backend, worker_process: Callable[..., WorkerProcess]
) -> None:
    backend.only_postgresql("MySQL has no publication: the binlog holds every table")
    t1 = backend.t1
    backend.create(t1, 500)
    config = backend.config_path([t1])
    worker = worker_process(config)
    backend.execute(f"ALTER PUBLICATION dblog_{SOURCE} DROP TABLE dblog.watermark")
    request_id = dump(config, "--table", t1, "--chunk-size", "50")
    state = wait_request(backend.redis_url, SOURCE, request_id, ["completed", "failed"], 60,
                         worker)
    assert state["state"] == "completed", state
    assert "went past the high watermark" in worker.log()
    assert_converged(backend, t1)


# Distinct under each database's collation (MariaDB's utf8mb4_general_ci folds case and
# accents, and takes every emoji for one character); the 7th is the one whose keys move.
TENANTS = {
    "postgresql": ["a", "B", "é", "Z", "a b", "a-b", "ä", "", "'; DROP TABLE x; --", "😀", "A"],
    "mariadb": ["a", "B", "é", "Z", "a b", "a-b", "ß", "", "'; DROP TABLE x; --", "😀", "c"],
}
TENANTS_DDL = {
    "postgresql": 'CREATE TABLE {table} (tenant text COLLATE "C", id int, '
                  "version bigint NOT NULL, note text, PRIMARY KEY (tenant, id))",
    "mariadb": "CREATE TABLE {table} (tenant varchar(40), id int, version bigint NOT NULL, "
               "note text, PRIMARY KEY (tenant, id))",
}


def test_composite_text_keys_in_collation_order(
    backend: Backend, worker_process: Callable[..., WorkerProcess]
) -> None:
    """Keyset pagination over (text, int) keys compares in the database's collation."""
    table, v = backend.db.table("tenants"), backend.next_version
    backend.create(backend.t1, 0)  # the version sequence
    backend.execute(TENANTS_DDL[backend.kind].format(table=table))
    if backend.kind == "postgresql":
        backend.execute(f"ALTER TABLE {table} REPLICA IDENTITY FULL")
    names = TENANTS[backend.kind]
    moved = names[6]
    with backend.connect() as session:
        values = ", ".join(["(%s, %s, " + v + ", 'n')"] * 60)
        for name in names:
            session.execute(f"INSERT INTO {table} VALUES {values}",
                            [p for i in range(60) for p in (name, i)])
    config = backend.config_path([table])
    worker = worker_process(config)
    request_id = dump(config, "--table", table, "--chunk-size", "7")
    keys_id = dump(config, "--table", table, "--keys",
                   json.dumps([["é", 3], ["😀", 59], ["nobody", 1]]), "--chunk-size", "2")
    with backend.connect() as session:
        for i in range(0, 60, 3):
            session.execute(f"UPDATE {table} SET version = {v}, id = id + 1000 "
                            "WHERE tenant = %s AND id = %s", (moved, i))
            session.execute(f"DELETE FROM {table} WHERE tenant = 'a' AND id = %s", (i,))
    for rid in (request_id, keys_id):
        state = wait_request(backend.redis_url, SOURCE, rid, ["completed", "failed"], 60, worker)
        assert state["state"] == "completed", state
    expected = backend.rows(table, ("tenant", "id"))
    assert len(expected) == 660 - 20

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
    # the dump reads what the writes left of the 660 rows when it passes them: 620 to 660
    assert progress.selected >= 660 - 40 and progress.chunks >= (660 - 40) // 7


def test_rows_the_log_cut_short_are_dumped_again(
    backend: Backend, worker_process: Callable[..., WorkerProcess]
) -> None:
    """REPLICA IDENTITY changed away from FULL while running: an update that keeps a large
    value arrives without it; the worker keeps going and queues a dump of those keys."""
    backend.only_postgresql("REPLICA IDENTITY and TOAST; MySQL needs binlog_row_image=FULL, "
                            "which preflight checks")
    t1 = backend.t1
    backend.create(t1, 0)
    config = backend.config_path([t1])
    worker = worker_process(config)
    big = "(SELECT string_agg(md5(random()::text), '') FROM generate_series(1, 4000))"
    backend.execute(f"INSERT INTO {t1} SELECT g, nextval('versions'), {big} "
                    "FROM generate_series(1, 3) g")
    backend.execute(f"ALTER TABLE {t1} REPLICA IDENTITY DEFAULT")
    backend.execute(f"UPDATE {t1} SET version = nextval('versions') WHERE id = 1")
    backend.execute(f"UPDATE {t1} SET version = nextval('versions'), id = 30 WHERE id = 2")
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
    assert_converged(backend, t1)


def test_landing_zone_of_another_server_is_refused(
    backend: Backend, worker_process: Callable[..., WorkerProcess]
) -> None:
    """Segments at positions after the end of this source's log were read from another
    server's log: the worker stops with what to do instead of dropping new events as replays."""
    t1 = backend.t1
    backend.create(t1, 0)
    config = backend.config_path([t1])
    ahead = Position(1 << 60, 7)
    LandingZone(backend.landing, SOURCE).commit_segment(t1, [ChangeEvent(
        t1, Op.CREATE, ahead, "[1]", '{"id": 1}', None, Origin.LOG, 0, 0)])
    worker = worker_process(config)
    wait_for(lambda: not worker.alive(), 60, "the worker to stop", worker.log)
    log = worker.log()
    assert f"holds events of {t1} at positions after the end of this source's log" in log
    assert "Move that folder away" in log
    assert "Traceback" not in log


def test_landing_zone_unwritable_then_fixed(
    backend: Backend, worker_process: Callable[..., WorkerProcess]
) -> None:
    """A write that fails stops the checkpoint where it was; once fixed, nothing is lost."""
    t1, v = backend.t1, backend.next_version
    backend.create(t1, 0)
    config = backend.config_path([t1])
    worker = worker_process(config)
    backend.execute(f"INSERT INTO {t1} VALUES (1, {v}, 'first')")
    table_dir = backend.landing / SOURCE / t1
    wait_for(lambda: any(table_dir.glob("segment-*")), 30, "the first segment", worker.log)
    aside = table_dir.with_name("aside")
    table_dir.rename(aside)
    table_dir.write_text("not a directory")  # the table's directory cannot be written
    backend.execute(f"INSERT INTO {t1} SELECT g, {v}, 'x' FROM {backend.db.series(2, 100)}")
    failed_insert_end = backend.log_end()
    wait_for(lambda: "cannot write the landing zone" in worker.log(), 30, "the failure",
             worker.log)
    # Sessions keep failing meanwhile. The checkpoint may still advance over log that
    # held nothing to write (a keepalive's position), never over the insert that failed.
    deadline = time.monotonic() + 2.5
    while time.monotonic() < deadline:
        saved = checkpoint(backend.redis_url)
        assert saved is not None
        assert checkpoint_position(backend, saved) < failed_insert_end
        time.sleep(0.1)
    assert worker.alive()
    table_dir.unlink()
    aside.rename(table_dir)
    assert_converged(backend, t1)


# -- a leader and a standby ----------------------------------------------------------


def test_sigterm_hands_the_lease_to_the_standby_at_once(
    backend: Backend, worker_process: Callable[..., WorkerProcess]
) -> None:
    """A clean stop releases the lease: the standby leads long before the lease (30 s)
    would have expired, and continues the dump where the leader left it."""
    t1, v = backend.t1, backend.next_version
    backend.create(t1, 3000)
    config = backend.config_path([t1], extra="[lease]\nttl_s = 30\nstandby_poll_s = 0.1\n")
    leader = worker_process(config)
    standby = worker_process(config, streaming=False)
    wait_for(lambda: "standing by: lease held by" in standby.log(), 30, "the standby",
             standby.log)
    request_id = dump(config, "--table", t1, "--chunk-size", "100", "--delay-ms", "20")
    wait_for(lambda: chunks(backend, request_id) >= 5, 30, "five chunks", leader.log)
    # each reports its role: status, readiness, metrics
    members = json.loads(cli(config, "status", "--json").stdout)["members"]
    assert sorted(m["role"] for m in members) == ["leader", "standby"]
    for member in members:
        ready = _get(member["http"] + "/readyz")
        metrics = _get(member["http"] + "/metrics")[1]
        if member["role"] == "leader":
            assert ready[0] == 200 and f'dblog_leader{{source="{SOURCE}"}} 1.0' in metrics
            assert f'dblog_lease_token{{source="{SOURCE}"}} 1.0' in metrics
        else:
            assert ready[0] == 503 and json.loads(ready[1])["ready"] is False, ready
            assert "stands by" not in ready[1]  # why: only with a token, or in the status
            status = json.loads(_get(member["http"] + "/api/v1/status")[1])
            assert status["role"] == "standby" and status["leader"]["holder"], status
            assert f'dblog_leader{{source="{SOURCE}"}} 0.0' in metrics
    backend.execute(f"INSERT INTO {t1} VALUES (5001, {v}, 'before the stop')")
    stopped_at = time.monotonic()
    assert leader.stop() == 0
    wait_for(lambda: "lease acquired: token 2" in standby.log(), 10, "the takeover",
             standby.log)
    assert time.monotonic() - stopped_at < 10
    assert "lease released" in leader.log()
    status = cli(config, "status", "--json")
    assert json.loads(status.stdout)["lease"]["token"] == "2"
    backend.execute(f"INSERT INTO {t1} VALUES (5002, {v}, 'after the stop')")
    state = wait_request(backend.redis_url, SOURCE, request_id, ["completed"], 60, standby)
    assert state["state"] == "completed"
    assert_converged(backend, t1)
    writers = [pq.read_schema(s.path).metadata[b"dblog.writer"]
               for s in LandingZone(backend.landing, SOURCE).segments(t1)]
    assert writers == sorted(writers, key=int) and set(writers) == {b"1", b"2"}


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:  # noqa: S310 (loopback)
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
