"""The binary log positions MariaDB reports for consistent snapshots, on a real server
that rotates its binary log every few transactions (``max_binlog_size = 4096``), with
group commit, with and without semi-synchronous replication (``AFTER_SYNC``, a replica
acknowledging): the server facts behind ``watermarks = "position"``
(:mod:`dblog_worker.mysql.visibility`), measured in seconds.

Writers each increment a counter row of their own (one transaction, one update), so the
log says exactly which state every position stands for. Meanwhile:

* raw snapshots (``START TRANSACTION WITH CONSISTENT SNAPSHOT`` and its reported position,
  no check) are compared with the state the log has up to that position: the server
  reports positions past groups the snapshot does not see (around rotations, binlog
  checkpoints, semi-sync waits), and the worker's reader receives groups before a
  snapshot sees them;
* windows of the worker's own source (its binlog reader, its window snapshots, one lane)
  read the counters: every window whose snapshot was used read exactly the state at its
  watermark, which is at or after everything the loop had taken when the window opened.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pymysql
import pytest

from dblog_worker import config as config_module
from dblog_worker.errors import ChunkStale
from dblog_worker.events import ChangeEvent, LogItem, Watermark
from dblog_worker.mysql.snapshot import select_in_snapshot
from dblog_worker.mysql.source import MySqlSource
from dblog_worker.position import Position
from tests.integration.harness import write_config
from tests.services import MariaDBReplica, MariaDBServer

WRITERS = 6
SECONDS = 5.0
ROTATING = {"max-binlog-size": "4096", "binlog-commit-wait-count": "3",
            "binlog-commit-wait-usec": "5000", "transaction-isolation": "READ-COMMITTED"}


@dataclass
class Log:
    """What the worker's loop took: each counter's values by position, and the windows'
    watermarks."""

    values: dict[int, list[tuple[Position, int]]] = field(default_factory=dict)
    marks: dict[str, Position] = field(default_factory=dict)

    def state(self, at: Position) -> dict[int, int]:
        """Each counter's value at ``at`` (the end of a transaction)."""
        return {w: max((v for p, v in changes if (p.major, p.minor) <= (at.major, at.minor)),
                       default=0) for w, changes in self.values.items()}


@pytest.fixture(params=["group-commit", "semi-sync"])
def server(request: pytest.FixtureRequest) -> Iterator[MariaDBServer]:
    with MariaDBServer(settings=ROTATING).start() as primary:
        if request.param == "group-commit":
            yield primary
            return
        with primary._admin() as conn, conn.cursor() as cur:
            cur.execute("SET GLOBAL rpl_semi_sync_master_enabled = ON")
            cur.execute("SET GLOBAL rpl_semi_sync_master_wait_point = 'AFTER_SYNC'")
            cur.execute("SET GLOBAL rpl_semi_sync_master_timeout = 10000")
        with MariaDBReplica(primary, {"rpl-semi-sync-slave-enabled": "ON"}).start():
            yield primary


def test_snapshot_positions_under_rotation(server: MariaDBServer, redis_url: str,
                                           tmp_path: Path) -> None:
    name = server.create_database(f"t_{uuid.uuid4().hex[:12]}")
    table = f"{name}.counters"
    with server._admin() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE TABLE {table} (id int PRIMARY KEY, v bigint NOT NULL)")
        cur.execute(f"INSERT INTO {table} VALUES "
                    + ", ".join(f"({w}, 0)" for w in range(1, WRITERS + 1)))
    path = write_config(tmp_path, server.url(), redis_url, [table], kind="mariadb",
                        source_extra='watermarks = "position"')
    source = MySqlSource(config_module.load(path).source, lambda table, schema: 1)
    source.connect()
    source.start(source.prepare())
    log, stop = Log(), threading.Event()

    def loop() -> None:  # the worker's loop: takes what the reader has read
        while not stop.is_set():
            items: list[LogItem] = []
            source.poll(0.05, items)
            for item in items:
                if isinstance(item, ChangeEvent) and item.after is not None:
                    row = json.loads(item.after)
                    log.values.setdefault(int(row["id"]), []).append((item.position,
                                                                      int(row["v"])))
                elif isinstance(item, Watermark):
                    log.marks[item.token] = item.position

    def writer(w: int) -> None:
        with pymysql.connect(**server.connect_args(name)) as conn, conn.cursor() as cur:
            while not stop.is_set():
                cur.execute(f"UPDATE {table} SET v = v + 1 WHERE id = %s", (w,))

    threads = [threading.Thread(target=loop)] + [
        threading.Thread(target=writer, args=(w,)) for w in range(1, WRITERS + 1)]
    for thread in threads:
        thread.start()
    raw: list[tuple[Position, dict[int, int], Position]] = []
    windows: list[tuple[str, dict[int, int], Position]] = []
    stale = retaken = 0
    try:
        with pymysql.connect(**server.connect_args(name)) as conn, conn.cursor() as cur:
            deadline = time.monotonic() + SECONDS
            number = 0
            while time.monotonic() < deadline:
                number += 1
                assert source._reader is not None and source._snapshots is not None
                taken = source._reader.taken()
                rows, snapshot = select_in_snapshot(cur, f"SELECT id, v FROM {table}")
                raw.append((snapshot.position, {int(i): int(v) for i, v in rows}, taken))
                low, high = f"r.{number}.lw", f"r.{number}.hw"
                source.write_watermark(low)
                taken = source._reader.taken()
                try:
                    rows, snapshot = select_in_snapshot(
                        cur, f"SELECT id, v FROM {table}", (), source._snapshots)
                    source._snapshots.taken(snapshot, len(rows))
                    retaken += snapshot.retaken
                    windows.append((low, {int(i): int(v) for i, v in rows}, taken))
                except ChunkStale:
                    stale += 1
                source.write_watermark(high)
        time.sleep(1.0)  # the loop takes the last windows' watermarks
    finally:
        stop.set()
        for thread in threads:
            thread.join(30)
        source.close()

    wrong = [(p, state) for p, state, _ in raw if state != log.state(p)]
    ahead = [p for p, _, taken in raw if (p.major, p.minor) < (taken.major, taken.minor)]
    files = max(p.major for p, _, _ in raw) - min(p.major for p, _, _ in raw)
    print(f"raw snapshots {len(raw)}: {len(wrong)} past a group they do not see, {len(ahead)} "
          f"behind what the loop had taken; windows {len(windows) + stale}: {stale} stale, "
          f"{retaken} snapshots taken again; {files} binary log files")
    assert files > 20 and len(raw) > 40
    assert wrong, "the server reported no position past an invisible group"
    assert ahead, "the reader never received a group before a snapshot saw it"
    assert len(windows) >= 0.8 * len(raw)  # the rest waited: their chunks read later
    for low, state, taken in windows:
        mark = log.marks[low]
        assert (mark.major, mark.minor) >= (taken.major, taken.minor), (low, mark, taken)
        assert state == log.state(mark), (low, mark, state, log.state(mark))
