"""What the scenario tests share: a worker process, the CLI, the output replayed, a workload."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import redis

from dblog_worker.landing import LandingZone, read_events

ROOT = Path(__file__).resolve().parents[2]


def write_config(
    directory: Path,
    dsn: str,
    redis_url: str,
    tables: Sequence[str],
    *,
    name: str = "src",
    flush_interval_s: float = 0.2,
    heartbeat_interval_s: float = 1.0,
    extra: str = "",
) -> Path:
    path = directory / f"{name}.toml"
    path.write_text(
        f"""
[source]
name = "{name}"
dsn = {json.dumps(dsn)}
tables = {json.dumps(list(tables))}

[redis]
url = "{redis_url}"

[landing]
path = "{directory / 'landing'}"
flush_interval_s = {flush_interval_s}

[worker]
heartbeat_interval_s = {heartbeat_interval_s}
control_interval_s = 0.05
reconnect_max_s = 1.0
{extra}
"""
    )
    return path


def cli(config: Path, *args: str, check: bool = True, timeout: float = 60
        ) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [sys.executable, "-m", "dblog_worker", *args, "--config", str(config)],
        capture_output=True, text=True, timeout=timeout, cwd=ROOT,
    )
    if check and result.returncode != 0:
        raise AssertionError(
            f"dblog {' '.join(args)} exited {result.returncode}\n{result.stdout}\n{result.stderr}"
        )
    return result


class WorkerProcess:
    """``dblog run`` as a child process, killed at the end of the test."""

    def __init__(self, config: Path, log_path: Path, *args: str) -> None:
        self.config = config
        self.log_path = log_path
        self.args = args
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> WorkerProcess:
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "dblog_worker", "run", "--config", str(self.config),
                 "--log-level", "DEBUG", *self.args],
                stdout=log, stderr=subprocess.STDOUT, cwd=ROOT,
            )
        return self

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self, timeout: float = 20) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


def redis_request(redis_url: str, source: str, request_id: str) -> dict[str, str]:
    with redis.Redis.from_url(redis_url, decode_responses=True) as client:
        fields: dict[str, str] = client.hgetall(f"dblog:v1:{source}:request:{request_id}")
        return fields


def wait_for(predicate: Callable[[], bool], timeout: float, what: str,
             on_timeout: Callable[[], str] = lambda: "") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}\n{on_timeout()}")


def wait_request(redis_url: str, source: str, request_id: str, states: Sequence[str],
                 timeout: float = 60, worker: WorkerProcess | None = None) -> dict[str, str]:
    wait_for(lambda: redis_request(redis_url, source, request_id).get("state") in states,
             timeout, f"{request_id} to become {'/'.join(states)}",
             lambda: (worker.log()[-5000:] if worker else "")
             + str(redis_request(redis_url, source, request_id)))
    return redis_request(redis_url, source, request_id)


# -- the output, replayed -----------------------------------------------------------


@dataclass
class Replay:
    """The output of one table applied in position order, and what was seen on the way."""

    rows: dict[str, dict[str, Any]] = field(default_factory=dict)
    events: list[dict[str, Any]] = field(default_factory=list)
    time_travel: list[str] = field(default_factory=list)


def replay(landing: Path, source: str, table: str, version_column: str = "version") -> Replay:
    """Apply the landed events in order; check that no key's version ever goes back."""
    result = Replay()
    zone = LandingZone(landing, source)
    events = read_events(zone, table)
    last_position = ""
    seen: dict[str, tuple[int, bool]] = {}  # key -> (version, deleted)
    for event in events:
        position = str(event["position"])
        assert position > last_position or position == last_position, "output out of order"
        last_position = position
        result.events.append(event)
        op, key = event["op"], event["key"]
        if op == "t":
            result.rows.clear()
            seen.clear()
            continue
        assert isinstance(key, str)
        if op == "d":
            result.rows.pop(key, None)
            before = json.loads(str(event["before"])) if event["before"] else None
            if before is not None and version_column in before:
                seen[key] = (int(before[version_column]), True)
            continue
        after = json.loads(str(event["after"]))
        version = after.get(version_column)
        if version is not None and key in seen:
            previous, deleted = seen[key]
            if version < previous or (deleted and version == previous):
                result.time_travel.append(
                    f"{key}: {op} version {version} at {position} after "
                    f"{'delete of ' if deleted else ''}version {previous}"
                )
        if version is not None:
            seen[key] = (int(version), False)
        result.rows[key] = after
    return result


def source_rows(dsn: str, table: str, key: Sequence[str] = ("id",)) -> dict[str, dict[str, Any]]:
    """The table as it is, keyed like the output (key columns of integers and text)."""
    with psycopg.connect(dsn) as conn, conn.cursor(row_factory=psycopg.rows.dict_row) as cur:
        schema, name = table.split(".", 1)
        cur.execute(f'SELECT * FROM "{schema}"."{name}"'.encode())
        return {
            json.dumps([row[k] for k in key], ensure_ascii=False, separators=(",", ":")):
            dict(row) for row in cur.fetchall()
        }


# -- a workload -------------------------------------------------------------------


TEST_TABLE_DDL = """
CREATE TABLE IF NOT EXISTS {table} (
    id integer PRIMARY KEY,
    version bigint NOT NULL,
    payload text
);
ALTER TABLE {table} REPLICA IDENTITY FULL;
CREATE SEQUENCE IF NOT EXISTS versions;
"""


def create_test_table(dsn: str, table: str, rows: int = 0) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(TEST_TABLE_DDL.format(table=table).encode())
        if rows:
            conn.execute(
                f"INSERT INTO {table} (id, version, payload) "
                "SELECT g * 10, nextval('versions'), md5(g::text) FROM generate_series(1, %s) g",
                (rows,),
            )


class Workload(threading.Thread):
    """Seeded random writes: inserts, updates, deletes, key changes, multi-row transactions.

    Every write sets ``version`` from one sequence, so a key's versions only grow.
    """

    def __init__(self, dsn: str, tables: Sequence[str], seed: int, *, key_space: int = 2000,
                 pause_s: float = 0.002) -> None:
        super().__init__(daemon=True)
        self.dsn = dsn
        self.tables = list(tables)
        self.random = random.Random(seed)
        self.key_space = key_space
        self.pause_s = pause_s
        self.stop_event = threading.Event()
        self.transactions = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with psycopg.connect(self.dsn, autocommit=True) as conn:
                while not self.stop_event.is_set():
                    self._transaction(conn)
                    self.transactions += 1
                    time.sleep(self.pause_s)
        except BaseException as exc:  # reported by stop()
            self.error = exc

    def _transaction(self, conn: psycopg.Connection[Any]) -> None:
        rnd = self.random
        with conn.transaction():
            for _ in range(rnd.choice([1, 1, 1, 2, 5])):
                table = rnd.choice(self.tables)
                key = rnd.randrange(1, self.key_space)
                action = rnd.random()
                if action < 0.3:
                    conn.execute(
                        f"INSERT INTO {table} (id, version, payload) VALUES "
                        "(%s, nextval('versions'), md5(random()::text)) ON CONFLICT (id) DO "
                        "UPDATE SET version = nextval('versions'), payload = excluded.payload",
                        (key,),
                    )
                elif action < 0.7:
                    conn.execute(
                        f"UPDATE {table} SET version = nextval('versions'), "
                        "payload = md5(random()::text) WHERE id = %s", (key,),
                    )
                elif action < 0.85:
                    conn.execute(f"DELETE FROM {table} WHERE id = %s", (key,))
                else:
                    conn.execute(
                        f"UPDATE {table} SET id = %s, version = nextval('versions') WHERE id = %s "
                        f"AND NOT EXISTS (SELECT 1 FROM {table} WHERE id = %s)",
                        (rnd.randrange(1, self.key_space), key, key + 0),
                    )

    def stop(self) -> None:
        self.stop_event.set()
        self.join(30)
        if self.error is not None:
            raise AssertionError(f"workload failed: {self.error!r}")


def env_with_path() -> dict[str, str]:
    return dict(os.environ)
