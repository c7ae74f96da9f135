#!/usr/bin/env python3
"""A screenshot of the live view during a real dump: ``docs/live-view.png``.

Run it through ``./scripts/screenshot-live-view [OUT.png]``, or with the venv's interpreter.
It starts a throwaway PostgreSQL and Redis (``tests/services.py``), two tables with rows,
``dblog run`` (HTTP on a free loopback port), a write load, and a dump of both tables;
once the dump is well under way it points headless Chromium (``/usr/bin/chromium``) at the
worker's live view and saves a 1280x900 screenshot. Everything stops at the end.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests/services.py starts the throwaway servers

import psycopg  # noqa: E402

from dblog_worker.control.store import StateStore  # noqa: E402
from tests.services import PostgresServer, RedisServer  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
SOURCE = "shop"
TABLES = {"public.customers": 40_000, "public.orders": 120_000}


def chromium(url: str, *args: str, budget_ms: int = 4000, timeout: float = 60) -> bytes:
    """Headless Chromium on ``url``: what it prints (``--dump-dom``) or writes."""
    with tempfile.TemporaryDirectory(prefix="dblog-chromium-") as profile:
        result = subprocess.run(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
             "--hide-scrollbars", "--no-first-run", "--mute-audio", f"--user-data-dir={profile}",
             f"--virtual-time-budget={budget_ms}", *args, url],
            capture_output=True, timeout=timeout, check=False,
        )
    if result.returncode != 0:
        raise RuntimeError(f"chromium exited {result.returncode}: {result.stderr.decode()[-2000:]}")
    return result.stdout


def screenshot(url: str, out: Path, budget_ms: int = 4000) -> None:
    chromium(url, f"--screenshot={out}", "--window-size=1280,900", budget_ms=budget_ms)


def load(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        for table, rows in TABLES.items():
            conn.execute(f"""
                CREATE TABLE {table} (id bigint PRIMARY KEY, version bigint NOT NULL,
                                      name text, amount numeric(12, 2), updated timestamptz);
                ALTER TABLE {table} REPLICA IDENTITY FULL;
                INSERT INTO {table} SELECT g, 1, md5(g::text), g % 1000, now()
                FROM generate_series(1, {rows}) g""".encode())


class Writes(threading.Thread):
    """Updates and inserts on both tables until stopped: the log the dump runs into."""

    def __init__(self, dsn: str) -> None:
        super().__init__(daemon=True)
        self.dsn = dsn
        self.stopping = threading.Event()

    def run(self) -> None:
        rng = random.Random(7)
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            while not self.stopping.is_set():
                table = rng.choice(list(TABLES))
                ids = [rng.randint(1, TABLES[table]) for _ in range(20)]
                with conn.transaction():
                    conn.execute(f"UPDATE {table} SET version = version + 1, updated = now() "
                                 "WHERE id = ANY(%s)".encode(), (ids,))
                    if rng.random() < 0.3:
                        conn.execute(f"INSERT INTO {table} SELECT coalesce(max(id), 0) + 1, 1, "
                                     f"'new', 1, now() FROM {table}".encode())
                time.sleep(0.01)


def worker_url(redis_url: str, timeout: float = 60) -> str:
    state = StateStore(redis_url, SOURCE)
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            url = state.status().get("http")
            if url:
                return url
            time.sleep(0.1)
    finally:
        state.close()
    raise RuntimeError("the worker published no HTTP address")


def post(url: str, body: object) -> dict[str, object]:
    request = urllib.request.Request(  # noqa: S310 (the worker's http:// address)
        url, json.dumps(body).encode(), method="POST",
        headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310
        document: dict[str, object] = json.loads(response.read())
        return document


def get(url: str) -> dict[str, object]:
    with urllib.request.urlopen(url, timeout=10) as response:  # noqa: S310
        document: dict[str, object] = json.loads(response.read())
        return document


def wait_for_ratio(url: str, ratio: float, timeout: float = 120) -> None:
    """Until the dump's last table is ``ratio`` done (or the dump ended)."""
    deadline = time.monotonic() + timeout
    seen = False
    while time.monotonic() < deadline:
        dump = get(f"{url}/api/v1/status")["dump"]
        if isinstance(dump, dict):
            seen = True
            last = dump["tables"][-1]
            if last["done"] or (last["ratio"] or 0) >= ratio:
                return
        elif seen:
            return
        time.sleep(0.2)
    raise RuntimeError(f"the dump did not reach {ratio:.0%} in {timeout:.0f} s")


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("out", nargs="?", type=Path, default=ROOT / "docs" / "live-view.png")
    parser.add_argument("--at-ratio", type=float, default=0.5,
                        help="take it when the last table's dump is this far (0-1)")
    args = parser.parse_args()
    if not Path(CHROMIUM).exists():
        print(f"{CHROMIUM} is missing: apt-get install chromium", file=sys.stderr)
        return 1
    with (PostgresServer().start() as pg, RedisServer().start() as redis_server,
          tempfile.TemporaryDirectory(prefix="dblog-live-view-") as work):
        dsn = pg.create_database("shop")
        load(dsn)
        config = Path(work) / "worker.toml"
        config.write_text(f"""
[source]
name = "{SOURCE}"
dsn = {json.dumps(dsn)}
tables = {json.dumps(list(TABLES))}

[redis]
url = "{redis_server.url}"

[landing]
path = "{Path(work) / 'landing'}"
flush_interval_s = 0.5

[worker]
heartbeat_interval_s = 1.0

[http]
listen = "127.0.0.1:0"
""")
        log = (Path(work) / "worker.log").open("wb")
        worker = subprocess.Popen([sys.executable, "-m", "dblog_worker", "run", "--config",
                                   str(config)], stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
        writes = Writes(dsn)
        try:
            url = worker_url(redis_server.url)
            print(f"worker at {url}", file=sys.stderr)
            writes.start()
            time.sleep(3)  # a few seconds of log only: the chart's beginning
            request = post(f"{url}/api/v1/requests",
                           {"kind": "all", "chunk_size": 2000, "delay_ms": 200})
            print(f"dump {request['id']} requested", file=sys.stderr)
            wait_for_ratio(url, args.at_ratio)
            state = get(f"{url}/api/v1/requests/{request['id']}")
            print(f"dump {state['state']}: taking the screenshot", file=sys.stderr)
            screenshot(f"{url}/", args.out)
        finally:
            writes.stopping.set()
            worker.terminate()
            worker.wait(30)
            log.close()
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
