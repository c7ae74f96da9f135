"""``dblog_repair`` in a real Airflow, as an operator runs it: api-server with the UI,
scheduler, DAG processor and triggerer (tests/airflow/live_airflow.py), started once for the
module, a real ``dblog run`` over a throwaway PostgreSQL source and Redis, and a PostgreSQL
target that was a copy of the source until each test damages it.

- From the UI: headless Chromium (tests/browser.py) opens the DAG, clicks *Trigger*, fills
  the *Table* field of the form, triggers; the test follows the run through the REST API
  until it ends, and checks that every task succeeded and that the target equals the
  source again.
- By hand, through the REST API the UI's buttons call: the deferred *wait* task marked
  failed cancels the dump; *Clear* of the failed run queues a new request, which repairs.
- During a backfill: ``dblog_backfill``'s scheduled run dumps the table slowly, in the
  background; a repair triggered from the UI meanwhile (urgent) finishes first, the
  backfill's dump still running; once the backfill's dump ends, its run ends too (the
  *pace* task does not hold it for its next poke).

The screenshot of the filled form is docs/airflow-repair-form.png: with
``DBLOG_UPDATE_SCREENSHOTS=1`` the test writes it there, otherwise under its tmp_path.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import time
import urllib.error
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from urllib.parse import urlsplit

import psycopg
import pytest
import redis

from dblog_worker import config as config_module
from dblog_worker.control.store import StateStore
from dblog_worker.dump.requests import DumpRequest, Priority, RequestState
from dblog_worker.verify.command import verify
from tests.airflow.conftest import ROOT, target_sections
from tests.airflow.live_airflow import LiveAirflow
from tests.browser import CHROMIUM, Browser, BrowserError
from tests.integration.harness import WorkerProcess, wait_for, write_config
from tests.services import PostgresServer, RedisServer

SOURCE = "src"
TABLE = "public.items"
ROWS = 300
SCREENSHOT = ROOT / "docs" / "airflow-repair-form.png"
DDL = ("CREATE TABLE public.items (id bigint PRIMARY KEY, name text NOT NULL, qty integer,"
       " version integer NOT NULL DEFAULT 1)")
FILL = ("INSERT INTO public.items (id, name, qty)"
        " SELECT i, 'item ' || i, i % 7 FROM generate_series(1, 300) AS i")


@dataclass
class Rig:
    """Airflow with a dblog connection to a streaming worker over a source and a target."""

    live: LiveAirflow
    config: Path
    source: str
    target: str
    redis_url: str

    def equal(self) -> bool:
        return verify(config_module.load(self.config), [TABLE]).equal


@pytest.fixture(scope="module")
def rig(postgres_server: PostgresServer, redis_server: RedisServer,
        tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    """One Airflow for the module's tests (it takes a minute to start): each test damages
    the target its own way and repairs it, whatever ran before."""
    if not postgres_server.running:  # a previous test stopped it
        postgres_server.restart()
    if not redis_server.running:
        redis_server.restart()
    with redis.Redis.from_url(redis_server.url) as client:
        client.flushall()
    tmp_path = tmp_path_factory.mktemp("airflow_ui")
    names = [f"t_{uuid.uuid4().hex[:16]}" for _ in range(2)]
    pg_dsn, pg_target = (postgres_server.create_database(name) for name in names)
    for dsn in (pg_dsn, pg_target):  # the target starts as a copy of the source
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(DDL)
            conn.execute(FILL)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("ALTER TABLE public.items REPLICA IDENTITY FULL")
    redis_url = redis_server.url
    config = write_config(tmp_path, pg_dsn, redis_url, [TABLE], name=SOURCE,
                          extra=target_sections(pg_target))
    redis_address = urlsplit(redis_url)
    connection = {"conn_type": "dblog", "host": redis_address.hostname,
                  "port": redis_address.port, "schema": redis_address.path.strip("/") or "0",
                  "extra": {"source": SOURCE, "config": str(config)}}
    home = tmp_path / "airflow"
    home.mkdir()
    worker = WorkerProcess(config, tmp_path / "worker.log").start()
    try:
        wait_for(lambda: " streaming " in worker.log(), 30, "the worker to stream",
                 lambda: worker.log()[-3000:])
        with LiveAirflow(home, {
            "AIRFLOW_CONN_DBLOG_DEFAULT": json.dumps(connection),
            "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark",
                                                      "host": "local[2]"}),
            "AIRFLOW__DBLOG__CONFIG": str(config),
            "AIRFLOW__DBLOG__POLL_INTERVAL_S": "1",
            # dblog_backfill (paused until a test unpauses it): ten rows a window, ten
            # seconds apart: some five minutes for the table
            "AIRFLOW__DBLOG__BACKFILL_CHUNK_SIZE": "10",
            "AIRFLOW__DBLOG__BACKFILL_DELAY_MS": "10000",
            "AIRFLOW__DBLOG__BACKFILL_VERIFY": "false",
        }) as live:
            yield Rig(live, config, pg_dsn, pg_target, redis_url)
    finally:
        worker.stop()
        for name in names:
            postgres_server.drop_database(name)


def target_rows(dsn: str) -> dict[int, tuple[str, int | None]]:
    with psycopg.connect(dsn) as conn:
        return {int(r[0]): (str(r[1]), r[2]) for r in conn.execute(
            "SELECT id, name, qty FROM public.items").fetchall()}


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR", f"{path}: not a PNG"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def open_section(browser: Browser, name: str) -> None:
    """Open a section (an accordion item) of the trigger form; a click while the dialog
    still opens may miss, so it clicks until the section is open."""
    trigger = f"document.querySelector(\"button[id$=':trigger:{name}']\")"
    for _ in range(10):
        browser.click(trigger, f"the trigger form's {name} section")
        try:
            browser.wait_for(f"{trigger}.getAttribute('aria-expanded') === 'true'",
                             f"the {name} section to open", timeout=3)
            return
        except BrowserError:
            continue
    raise BrowserError(f"the {name} section of the trigger form does not open:\n"
                       f"{browser.text()[-3000:]}")


def trigger_repair_from_the_form(live: LiveAirflow, tmp_path: Path,
                                 screenshot: Path | None = None) -> str:
    """What an operator does: the DAG's page, *Trigger*, the form's *Table*, *Trigger*;
    the new run's id."""
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: ./scripts/install installs it "
                    "(apt-get install chromium)")
    before = live.run_ids("dblog_repair")
    with Browser(1280, 900) as browser:
        try:
            browser.goto(f"{live.url}/dags/dblog_repair")
            browser.click("[...document.querySelectorAll('button')]"
                          ".find(b => b.innerText.trim() === 'Trigger')",
                          "the DAG's page and its Trigger button")
            open_section(browser, "What")
            browser.wait_for("document.querySelector('#element_table')?.checkVisibility()",
                             "the Table field")
            browser.type_into("#element_table", TABLE)
            browser.wait_for(f"document.querySelector('#element_table').value === '{TABLE}'"
                             " && !document.querySelector("
                             "'[data-testid=trigger-dag-submit]').disabled",
                             "the Table field to take the table and Trigger to be enabled")
            browser.evaluate("document.activeElement.blur()")
            time.sleep(0.5)  # the datalist's popup and the field's focus ring fade out
            if screenshot is not None:
                browser.screenshot(screenshot)
            browser.click("document.querySelector('[data-testid=trigger-dag-submit]')",
                          "the form's Trigger button")
            browser.wait_for("!document.querySelector('[data-testid=trigger-dag-submit]')",
                             "the form to close (Airflow took the run)")
        except AssertionError:
            browser.screenshot(tmp_path / "failure.png")
            print(f"the page when the test failed: {tmp_path / 'failure.png'}")
            raise
    [run_id] = live.run_ids("dblog_repair") - before
    return run_id


@pytest.mark.timeout(420)
def test_repair_from_the_trigger_form(rig: Rig, tmp_path: Path) -> None:
    live = rig.live
    with psycopg.connect(rig.target, autocommit=True) as target:
        target.execute("UPDATE public.items SET name = 'damaged' WHERE id IN (5, 200)")
        target.execute("DELETE FROM public.items WHERE id = 7")
        target.execute("INSERT INTO public.items (id, name, qty) VALUES (90000, 'extra', 1)")
    assert not rig.equal()

    screenshot = SCREENSHOT if os.environ.get("DBLOG_UPDATE_SCREENSHOTS") == "1" \
        else tmp_path / SCREENSHOT.name
    run_id = trigger_repair_from_the_form(live, tmp_path, screenshot)
    assert png_size(screenshot) == (1280, 900)
    run = live.wait_run("dblog_repair", run_id)
    assert run["conf"]["table"] == TABLE, run
    assert live.task_states("dblog_repair", run_id) == dict.fromkeys(
        ["compare", "submit", "wait", "merge", "remove_extra", "verify"], "success"), \
        live.task_logs("dblog_repair", run_id)[-12000:]
    assert run["state"] == "success"
    rows = target_rows(rig.target)
    assert (len(rows), rows[5], rows[7], rows[200]) == (
        ROWS, ("item 5", 5), ("item 7", 0), ("item 200", 4))
    assert rig.equal()


def request_of(rig: Rig, client_token: str) -> DumpRequest | None:
    store = StateStore(rig.redis_url, SOURCE)
    try:
        request_id = store.token_request(client_token)
        return None if request_id is None else store.get_request(request_id)
    finally:
        store.redis.close()


def wait_request(rig: Rig, client_token: str, states: set[RequestState], what: str,
                 run_id: str) -> DumpRequest:
    found: list[DumpRequest] = []

    def reached() -> bool:
        request = request_of(rig, client_token)
        found[:] = [request] if request else []
        return request is not None and request.state in states

    wait_for(reached, 120, what, lambda: f"{found}\n"
             + rig.live.task_logs("dblog_repair", run_id)[-6000:] + rig.live.logs())
    return found[0]


@pytest.mark.timeout(420)
def test_a_repair_stopped_by_hand_then_cleared_dumps_anew(rig: Rig) -> None:
    """What an operator does from the grid view, through the REST API the UI calls: mark the
    deferred *wait* task failed (the dump is cancelled, not left running), then *Clear* the
    failed run (the re-run queues a new request instead of re-attaching to the cancelled
    one) and watch it repair the table."""
    live = rig.live
    with psycopg.connect(rig.target, autocommit=True) as target:
        target.execute("UPDATE public.items SET name = 'stale' WHERE id IN (10, 11, 12, 13)")
    assert not rig.equal()
    run_id = f"stopped_by_hand_{uuid.uuid4().hex[:8]}"
    token = f"airflow:dblog_repair:{run_id}:submit:-1"
    # one key per window and an hour between windows: the dump is still running when the
    # task is stopped
    live.trigger("dblog_repair", run_id, {"table": TABLE, "chunk_size": 1,
                                          "delay_ms": 3_600_000})
    first = wait_request(rig, token, {RequestState.RUNNING}, "the repair's dump to run", run_id)
    # the triggerer runs the trigger (its first line logged): a task marked failed before
    # that cannot cancel (docs/airflow.md, "Stopping a dump task by hand")
    wait_for(lambda: f"following {first.id} " in live.trigger_log("dblog_repair", run_id, "wait"),
             60, "the triggerer to follow the dump",
             lambda: f"{live.task_states('dblog_repair', run_id)}\n{live.log('triggerer')}")
    assert live.task_states("dblog_repair", run_id)["wait"] == "deferred"

    live.api("PATCH", f"/api/v2/dags/dblog_repair/dagRuns/{run_id}/taskInstances/wait",
             {"new_state": "failed"})
    cancelled = wait_request(rig, token, {RequestState.CANCELLED, RequestState.COMPLETED},
                             "the dump to be cancelled", run_id)
    assert cancelled.state is RequestState.CANCELLED, cancelled
    assert live.wait_run("dblog_repair", run_id)["state"] == "failed"
    assert f"the task was stopped by hand: {first.id} cancelled (it was running)" in \
        live.trigger_log("dblog_repair", run_id, "wait")
    assert not rig.equal()

    live.api("POST", f"/api/v2/dags/dblog_repair/dagRuns/{run_id}/clear", {"dry_run": False})
    again = wait_request(rig, f"{token}:clear1", {RequestState.RUNNING, RequestState.COMPLETED},
                         "the cleared run's new dump", run_id)
    assert again.id != first.id
    assert request_of(rig, token) == cancelled, "the cancelled request stays as it was"
    subprocess.run([sys.executable, "-m", "dblog_worker", "set", "--config", str(rig.config),
                    again.id, "--delay-ms", "0"], check=True, capture_output=True, timeout=60)
    run = live.wait_run("dblog_repair", run_id)
    assert (run["state"], live.task_states("dblog_repair", run_id)) == ("success", dict.fromkeys(
        ["compare", "submit", "wait", "merge", "remove_extra", "verify"], "success")), \
        live.task_logs("dblog_repair", run_id)[-12000:]
    assert rig.equal()


@pytest.mark.timeout(900)
def test_a_repair_during_a_backfill_finishes_first(rig: Rig, tmp_path: Path) -> None:
    """The platform's promise: an operator who repairs a table during a backfill does not
    wait for the backfill. ``dblog_backfill``'s scheduled run dumps the table in the
    background, ten rows every ten seconds; the repair triggered from the UI meanwhile is
    urgent: its dump runs at once, next to the backfill's, and the whole run (compare,
    dump, merge, verify) succeeds while the backfill's dump still runs. Then the backfill's
    dump is sped up; once it completes, its run ends with it (merge, and the *pace* task
    woken by the dump's end rather than at its next poke, five minutes on)."""
    live = rig.live

    def unpaused() -> bool:  # its scheduled run starts; the file may not be parsed yet
        try:
            live.api("PATCH", "/api/v2/dags/dblog_backfill", {"is_paused": False})
            return True
        except urllib.error.HTTPError as exc:
            with exc:  # its response's socket, else left to the garbage collector
                if exc.code != 404:
                    raise
            return False

    wait_for(unpaused, 120, "Airflow to list dblog_backfill",
             lambda: str(live.api("GET", "/api/v2/importErrors")))
    backfill: dict[str, DumpRequest] = {}

    def backfill_runs() -> bool:
        runs = live.run_ids("dblog_backfill")
        for run_id in runs:
            found = request_of(rig, f"airflow:dblog_backfill:{run_id}:submit:-1")
            if found is not None and found.state is RequestState.RUNNING:
                backfill[run_id] = found
        return bool(backfill)

    wait_for(backfill_runs, 240, "the scheduled backfill's dump to run",
             lambda: live.logs())
    [(backfill_run, dump)] = backfill.items()
    assert (dump.priority, dump.delay_ms, dump.chunk_size) == (Priority.BACKGROUND, 10000, 10)

    with psycopg.connect(rig.target, autocommit=True) as target:
        target.execute("UPDATE public.items SET qty = -1 WHERE id IN (150, 250)")
    repair_run = trigger_repair_from_the_form(live, tmp_path)
    run = live.wait_run("dblog_repair", repair_run, timeout=420)
    assert live.task_states("dblog_repair", repair_run) == dict.fromkeys(
        ["compare", "submit", "wait", "merge", "remove_extra", "verify"], "success"), \
        live.task_logs("dblog_repair", repair_run)[-12000:]
    assert run["state"] == "success"
    repair = request_of(rig, f"airflow:dblog_repair:{repair_run}:submit:-1")
    assert repair is not None and (repair.state, repair.priority) == (
        RequestState.COMPLETED, Priority.URGENT)
    still = request_of(rig, f"airflow:dblog_backfill:{backfill_run}:submit:-1")
    assert still is not None and still.state is RequestState.RUNNING, \
        "the backfill's dump ended before the repair's run: it did not run side by side"
    assert live.run("dblog_backfill", backfill_run)["state"] == "running"
    assert live.task_states("dblog_backfill", backfill_run)["pace"] == "deferred"

    subprocess.run([sys.executable, "-m", "dblog_worker", "set", "--config", str(rig.config),
                    dump.id, "--delay-ms", "0"], check=True, capture_output=True, timeout=60)
    wait_for(lambda: (request_of(rig, f"airflow:dblog_backfill:{backfill_run}:submit:-1")
                      or dump).state is RequestState.COMPLETED, 120,
             "the backfill's dump to complete", lambda: live.logs())
    ended = live.wait_run("dblog_backfill", backfill_run, timeout=240)
    states = live.task_states("dblog_backfill", backfill_run)
    assert (ended["state"], states["wait"], states["pace"], states["merge"]) == (
        "success", "success", "success", "success"), \
        live.task_logs("dblog_backfill", backfill_run)[-12000:]
    done = request_of(rig, f"airflow:dblog_backfill:{backfill_run}:submit:-1")
    assert done is not None
    pace = live.api("GET", f"/api/v2/dags/dblog_backfill/dagRuns/{backfill_run}"
                           "/taskInstances/pace")
    pace_ended = datetime.fromisoformat(pace["end_date"]).timestamp()
    assert pace_ended - done.updated_at < 60, (pace["end_date"], done.updated_at)
    live.api("PATCH", "/api/v2/dags/dblog_backfill", {"is_paused": True})
    assert rig.equal()
