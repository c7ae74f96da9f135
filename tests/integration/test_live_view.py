"""Telemetry of a real worker (``dblog run``, PostgreSQL, Redis) during a dump under writes:
/metrics moves with what lands, the feed shows every window, the log is JSON without
secrets; and the live view, loaded by headless Chromium, draws it."""

from __future__ import annotations

import json
import os
import random
import re
import struct
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import psycopg
import pytest

from dblog_worker.landing.parquet import LandingZone, read_events
from dblog_worker.pg.pgoutput import parse_lsn
from dblog_worker.state import StateStore
from tests.integration.harness import (
    PgDatabase,
    WorkerProcess,
    wait_for,
    wait_request,
    write_config,
)

SOURCE = "src"
TABLE = "public.t"
ROWS = 20_000  # ids 10, 20, ..., 200000
CHROMIUM = "/usr/bin/chromium"
SECRET = "h2-secret-pw"
TOKEN = "live-view-token-5f2a"


class Writes(threading.Thread):
    """Updates of random rows (20 a transaction) and a few inserts until stopped."""

    def __init__(self, dsn: str) -> None:
        super().__init__(daemon=True)
        self.dsn = dsn
        self.stopping = threading.Event()
        self.transactions = 0

    def run(self) -> None:
        rng = random.Random(6)
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            while not self.stopping.is_set():
                ids = [rng.randint(1, ROWS) * 10 for _ in range(20)]
                with conn.transaction():
                    conn.execute(f"UPDATE {TABLE} SET version = nextval('versions') "
                                 "WHERE id = ANY(%s)".encode(), (ids,))
                    if rng.random() < 0.2:
                        conn.execute(f"INSERT INTO {TABLE} VALUES (%s, nextval('versions'), "
                                     "'new') ON CONFLICT DO NOTHING".encode(),
                                     (rng.randint(1, ROWS) * 10 + 5,))
                self.transactions += 1
                time.sleep(0.003)


@dataclass
class Run:
    """A worker with its HTTP address, a write load, and the database."""

    dsn: str
    redis_url: str
    config: Path
    worker: WorkerProcess
    url: str
    writes: Writes
    token: str | None = None
    landing: Path = field(default_factory=Path)

    def request(self, method: str, path: str, body: object = None,
                token: str | None = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": "application/json"} if data else {}
        if token or self.token:
            headers["Authorization"] = f"Bearer {token or self.token}"
        request = urllib.request.Request(  # noqa: S310 (the worker's http:// address)
            self.url + path, data, headers, method=method)
        with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310
            text = response.read().decode()
            return text if path == "/metrics" else json.loads(text)

    def metrics(self) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
        return parse_metrics(self.request("GET", "/metrics"))

    def dump(self, chunk_size: int, delay_ms: int) -> str:
        created = self.request("POST", "/api/v1/requests", {
            "kind": "tables", "tables": [TABLE], "chunk_size": chunk_size,
            "delay_ms": delay_ms})
        return str(created["id"])

    def progress(self, request_id: str) -> dict[str, Any]:
        document = self.request("GET", f"/api/v1/requests/{request_id}")
        table: dict[str, Any] = document["progress"].get(TABLE) or {"chunks": 0}
        return table


SAMPLE = re.compile(r'^([a-z_:][a-z0-9_:]*)(?:\{(.*)\})? (\S+)$')
LABEL = re.compile(r'([a-z_]+)="((?:[^"\\]|\\.)*)"')


def parse_metrics(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    samples = {}
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        match = SAMPLE.match(line)
        assert match is not None, line
        labels = frozenset(LABEL.findall(match[2] or ""))
        samples[(match[1], labels)] = float(match[3])
    return samples


def metric(samples: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str,
           **labels: str) -> float:
    """One sample's value, 0 when the series does not exist (yet)."""
    return samples.get((name, frozenset({"source": SOURCE, **labels}.items())), 0.0)


@pytest.fixture
def start_run(pg_dsn: str, redis_url: str, tmp_path: Path,
              monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    runs: list[Run] = []

    def start(token: str | None = None) -> Run:
        database = PgDatabase(pg_dsn)
        database.create_test_table(TABLE, ROWS)
        http = 'listen = "127.0.0.1:0"'
        if token is not None:
            monkeypatch.setenv("H2_LIVE_TOKEN", token)
            http += '\ntoken_env = "H2_LIVE_TOKEN"'
        config = write_config(tmp_path, f"{pg_dsn} password={SECRET}", redis_url, [TABLE],
                              name=SOURCE, http=http,
                              extra='[logging]\nformat = "json"\nlevel = "info"')
        worker = WorkerProcess(config, tmp_path / "worker.log").start()
        state = StateStore(redis_url, SOURCE)
        try:
            wait_for(lambda: bool(state.status().get("http")), 30,
                     "the worker to publish its HTTP address", lambda: worker.log()[-3000:])
            url = state.status()["http"]
        finally:
            state.close()
        run = Run(pg_dsn, redis_url, config, worker, url, Writes(pg_dsn), token,
                  tmp_path / "landing")
        runs.append(run)
        wait_for(lambda: metric(run.metrics(), "dblog_connected") == 1, 30,
                 "the worker to stream", lambda: worker.log()[-3000:])
        run.writes.start()
        return run

    yield start
    for run in runs:
        run.writes.stopping.set()
        run.writes.join(10)
        run.worker.kill()


def landed(landing: Path) -> Counter[str]:
    """Landed events of the table by origin."""
    return Counter(str(e["origin"]) for e in read_events(LandingZone(landing, SOURCE), TABLE))


def feed(run: Run) -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = []
    after = 0
    while True:
        page = run.request("GET", f"/api/v1/feed?after={after}")
        entries += page["events"]
        if not page["events"]:
            return entries
        after = page["next"]


def test_metrics_feed_and_json_logs_follow_a_dump_under_writes(start_run: Any) -> None:
    run: Run = start_run()
    request_id = run.dump(chunk_size=1000, delay_ms=20)
    ratios, events = [], []
    while run.request("GET", f"/api/v1/requests/{request_id}")["state"] in ("queued",
                                                                          "running"):
        samples = run.metrics()
        ratios.append(metric(samples, "dblog_dump_progress_ratio", request=request_id,
                             table=TABLE))
        events.append(metric(samples, "dblog_events_total", table=TABLE, origin="log"))
        time.sleep(0.1)
    wait_request(run.redis_url, SOURCE, request_id, ["completed"], worker=run.worker)
    run.writes.stopping.set()
    run.writes.join(10)
    assert run.writes.transactions > 50
    end = PgDatabase(run.dsn).log_end()[0]

    def caught_up() -> bool:
        checkpoint = run.request("GET", "/api/v1/status")["checkpoint"]
        return checkpoint is not None and parse_lsn(checkpoint) >= end

    wait_for(caught_up, 30, "the checkpoint to pass the last write", run.worker.log)
    progress = run.progress(request_id)
    counts = landed(run.landing)
    samples = run.metrics()
    # counters move with what landed, and only up
    assert metric(samples, "dblog_events_total", table=TABLE, origin="log") == counts["log"]
    assert metric(samples, "dblog_events_total", table=TABLE, origin="dump") == counts["dump"]
    assert counts["log"] >= run.writes.transactions * 20 * 0.5
    assert events == sorted(events)
    assert [r for r in ratios if r] == sorted(r for r in ratios if r)
    assert all(0 <= r <= 1 for r in ratios) and max(ratios) > 0
    # windows: every one closed; chunk rows add up, and agree with the dump's progress
    chunks = progress["chunks"]
    assert chunks >= ROWS // 1000
    assert metric(samples, "dblog_windows_opened_total", table=TABLE) == chunks
    assert metric(samples, "dblog_windows_closed_total", table=TABLE) == chunks
    assert metric(samples, "dblog_windows_open") == 0
    selected = metric(samples, "dblog_chunk_rows_selected_total", table=TABLE)
    dropped = metric(samples, "dblog_chunk_rows_dropped_total", table=TABLE)
    emitted = metric(samples, "dblog_chunk_rows_emitted_total", table=TABLE)
    assert (selected, dropped, emitted) == (progress["selected"], progress["dropped"],
                                            progress["rows"])
    assert selected == dropped + emitted and emitted == counts["dump"]
    assert dropped > 0, "the writes hit no chunk row inside a window"
    # lag, checkpoint, connection; the finished dump's gauges are gone
    assert metric(samples, "dblog_end_to_end_lag_seconds_count") > 0
    assert 0 <= metric(samples, "dblog_last_batch_lag_seconds") < 10
    assert metric(samples, "dblog_end_to_end_lag_seconds_bucket", le="+Inf") == \
        metric(samples, "dblog_end_to_end_lag_seconds_count")
    assert 0 <= metric(samples, "dblog_checkpoint_age_seconds") < 30
    assert metric(samples, "dblog_connected") == 1
    assert metric(samples, "dblog_log_lag_bytes") >= 0
    assert not [k for k in samples if k[0].startswith("dblog_dump_progress")]

    # the feed: each window opened and closed, in order, with its counts
    entries = feed(run)
    assert [e["seq"] for e in entries] == sorted({e["seq"] for e in entries})
    opened = [e for e in entries if e["type"] == "window_opened"]
    closed = [e for e in entries if e["type"] == "window_closed"]
    assert len(opened) == len(closed) == chunks
    assert [e["window"] for e in opened] == [e["window"] for e in closed]
    assert all(e["dump_id"] == request_id and e["table"] == TABLE for e in opened + closed)
    assert all(e["selected"] == e["dropped"] + e["emitted"] for e in closed)
    assert sum(e["dropped"] for e in closed) == dropped
    assert sum(e["emitted"] for e in closed) == emitted
    assert all(o["seq"] < c["seq"] for o, c in zip(opened, closed, strict=True))
    dumps = [(e["state"], e["request_id"]) for e in entries if e["type"] == "dump"]
    assert dumps[0] == ("started", request_id) and dumps[-1] == ("completed", request_id)
    logs = [e for e in entries if e["type"] == "log"]
    assert logs and sum(e["tables"].get(TABLE, 0) for e in logs) <= counts["log"]
    assert all(s["table"] == TABLE for e in logs for s in e["samples"])
    assert sum(e["events"] for e in entries if e["type"] == "durable") == sum(counts.values())
    # the worker took the lease, then its session connected
    assert (entries[0]["type"], entries[0]["role"], entries[0]["token"]) == ("lease", "leader", 1)
    assert entries[1]["type"] == "session" and entries[1]["state"] == "connected"

    # the log: JSON lines, the dump's lines name it, no secret anywhere
    run.worker.stop()
    text = run.worker.log()
    assert SECRET not in text
    lines = [json.loads(line) for line in text.splitlines() if line.strip()]
    assert all({"ts", "level", "logger", "message", "source"} <= set(line) for line in lines)
    assert all(line["source"] == SOURCE for line in lines)
    started = [line for line in lines if line["message"].startswith(f"dump {request_id} started")]
    assert len(started) == 1 and started[0]["request_id"] == request_id
    completed = [line for line in lines if line["message"] == f"dump {request_id} completed"]
    assert len(completed) == 1 and completed[0]["request_id"] == request_id


# -- the live view in a browser -----------------------------------------------------------


@dataclass
class Element:
    tag: str
    attrs: dict[str, str]
    text: str = ""

    @property
    def classes(self) -> set[str]:
        return set(self.attrs.get("class", "").split())


class Dom(HTMLParser):
    """Every element of a page with its attributes and the text inside it."""

    VOID = frozenset({"meta", "link", "input", "br", "img", "hr", "source", "wbr"})

    def __init__(self, html: str) -> None:
        super().__init__()
        self.elements: list[Element] = []
        self._open: list[Element] = []
        self.feed(html)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        element = Element(tag, {k: v or "" for k, v in attrs})
        self.elements.append(element)
        if tag not in self.VOID:
            self._open.append(element)

    def handle_endtag(self, tag: str) -> None:
        for i in range(len(self._open) - 1, -1, -1):
            if self._open[i].tag == tag:
                del self._open[i:]
                return

    def handle_data(self, data: str) -> None:
        for element in self._open:
            element.text += data

    def having(self, cls: str) -> list[Element]:
        return [e for e in self.elements if cls in e.classes]

    def by_id(self, ident: str) -> Element:
        (element,) = [e for e in self.elements if e.attrs.get("id") == ident]
        return element


def chromium(url: str, *args: str) -> str:
    with tempfile.TemporaryDirectory(prefix="dblog-chromium-") as profile:
        result = subprocess.run(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
             "--hide-scrollbars", "--no-first-run", f"--user-data-dir={profile}",
             "--virtual-time-budget=3000", *args, url],
            capture_output=True, text=True, timeout=60, check=False,
        )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR", "not a PNG"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def test_live_view_in_chromium_during_a_dump(start_run: Any, tmp_path: Path) -> None:
    assert os.access(CHROMIUM, os.X_OK), (
        f"{CHROMIUM} is missing: the live view's test needs headless Chromium; "
        "./scripts/install installs it (apt-get install chromium)")
    run: Run = start_run(token=TOKEN)
    with pytest.raises(urllib.error.HTTPError) as refused:
        run.request("GET", "/api/v1/status", token="wrong")
    refused.value.close()  # its response's socket, else left to the garbage collector
    assert refused.value.code == 401
    request_id = run.dump(chunk_size=500, delay_ms=150)
    wait_for(lambda: run.progress(request_id)["chunks"] >= 4, 30, "four windows to close",
             run.worker.log)
    # a repair next to it: a key dump (urgent), one key a second
    repair = str(run.request("POST", "/api/v1/requests", {
        "kind": "keys", "tables": [TABLE], "keys": list(range(1, 60)), "chunk_size": 1,
        "delay_ms": 1000})["id"])
    wait_for(lambda: run.progress(repair)["chunks"] >= 1, 30, "the repair's first window",
             run.worker.log)

    dom = Dom(chromium(f"{run.url}/#token={TOKEN}", "--dump-dom"))
    assert run.request("GET", f"/api/v1/requests/{request_id}")["state"] == "running", \
        "the dump ended before the page was loaded: make it slower"
    assert dom.by_id("connection").attrs["data-state"] == "streaming"
    assert dom.by_id("source").text == SOURCE
    dumps = {e.attrs["data-request"]: e for e in dom.having("dump")
             if "data-request" in e.attrs}
    assert dumps.keys() == {request_id, repair}
    assert (dumps[repair].attrs["data-priority"], dumps[request_id].attrs["data-priority"]) == (
        "urgent", "normal")
    assert f"{repair} · running · urgent · keys" in dumps[repair].text
    assert dom.by_id("dump-head").text == "2 dumps, by priority"
    tables = [e for e in dom.having("dump-table") if e.attrs.get("data-table") == TABLE]
    assert len(tables) == 2
    assert all(TABLE in t.text and ("ETA" in t.text or "done" in t.text) for t in tables)
    bars = dom.having("bar")
    assert len(bars) == 2 and all(0 <= float(b.attrs["data-ratio"] or 0) <= 1 for b in bars)
    assert re.search(r"width: \d+(\.\d+)?%", dom.having("fill")[0].attrs["style"])
    run.request("POST", f"/api/v1/requests/{repair}/cancel", {})
    windows_closed = dom.having("window-closed")
    assert len(windows_closed) >= 4
    pattern = re.compile(r"HW window #(\d+) public\.t\s+selected ([\d,]+)\s+dropped ([\d,]+)"
                         r"\s+emitted ([\d,]+)")
    shown = [pattern.search(e.text) for e in windows_closed]
    assert all(shown), [e.text for e in windows_closed]
    by_window = {e["window"].rsplit(".", 1)[1]: e for e in feed(run)
                 if e["type"] == "window_closed"}
    for match in shown:
        assert match is not None
        entry = by_window[match[1]]
        assert [int(match[i].replace(",", "")) for i in (2, 3, 4)] == [
            entry["selected"], entry["dropped"], entry["emitted"]]
    assert dom.having("window-opened")
    log_lines = dom.having("log")
    assert log_lines and any(re.search(r"LOG\s+public\.t \+\d+", e.text) for e in log_lines)
    rows = [e for e in dom.elements if e.tag == "tr" and "data-window" in e.attrs]
    assert rows
    assert dom.by_id("lag-chart").attrs.get("data-points", "0") != "0"

    screenshot = tmp_path / "live-view.png"
    chromium(f"{run.url}/#token={TOKEN}", f"--screenshot={screenshot}", "--window-size=1280,900")
    assert png_size(screenshot) == (1280, 900)
    assert screenshot.stat().st_size > 20_000  # drawn, not blank

    without = Dom(chromium(f"{run.url}/", "--dump-dom"))
    assert without.by_id("connection").attrs["data-state"] == "needs token"
    assert "#token=" in without.by_id("notice").text
