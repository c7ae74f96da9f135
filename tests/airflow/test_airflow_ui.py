"""``dblog_repair`` from Airflow's UI, as an operator runs it: a real Airflow (api-server with
the UI, scheduler, DAG processor, triggerer; tests/airflow/live_airflow.py), a real ``dblog
run`` over a throwaway PostgreSQL source and Redis, and a PostgreSQL target that was a copy
of the source until the test damaged it (rows changed, one deleted, one extra). Headless
Chromium (tests/browser.py) opens the DAG, clicks *Trigger*, fills the *Table* field of the
form, triggers; the test follows the run through the REST API until it ends, and checks
that every task succeeded and that the target equals the source again.

The screenshot of the filled form is docs/airflow-repair-form.png: with
``DBLOG_UPDATE_SCREENSHOTS=1`` the test writes it there, otherwise under its tmp_path.
"""

from __future__ import annotations

import json
import os
import struct
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import psycopg
import pytest

from dblog_worker import config as config_module
from dblog_worker.verify import verify
from tests.airflow.conftest import ROOT
from tests.airflow.live_airflow import LiveAirflow
from tests.airflow.test_dags_e2e import FAST_JVM
from tests.browser import CHROMIUM, Browser, BrowserError
from tests.integration.harness import WorkerProcess, wait_for, write_config
from tests.spark_local import jdbc_jars

SOURCE = "src"
TABLE = "public.items"
ROWS = 300
SCREENSHOT = ROOT / "docs" / "airflow-repair-form.png"
DDL = ("CREATE TABLE public.items (id bigint PRIMARY KEY, name text NOT NULL, qty integer,"
       " version integer NOT NULL DEFAULT 1)")
FILL = ("INSERT INTO public.items (id, name, qty)"
        " SELECT i, 'item ' || i, i % 7 FROM generate_series(1, 300) AS i")


@pytest.fixture
def airflow(pg_dsn: str, pg_target: str, redis_url: str, tmp_path: Path
            ) -> Iterator[tuple[LiveAirflow, Path]]:
    """Airflow with a dblog connection to a streaming worker; the configuration's path."""
    for dsn in (pg_dsn, pg_target):  # the target starts as a copy of the source
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(DDL)
            conn.execute(FILL)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("ALTER TABLE public.items REPLICA IDENTITY FULL")
    config = write_config(tmp_path, pg_dsn, redis_url, [TABLE], name=SOURCE, extra=f"""
[target]
kind = "postgresql"
dsn = {json.dumps(pg_target)}

[merge]
jars = {json.dumps([str(j) for j in jdbc_jars()])}

[merge.spark_conf]
"spark.ui.enabled" = "false"
"spark.sql.shuffle.partitions" = "4"
"spark.driver.extraJavaOptions" = "{FAST_JVM}"
""")
    redis = urlsplit(redis_url)
    connection = {"conn_type": "dblog", "host": redis.hostname, "port": redis.port,
                  "schema": redis.path.strip("/") or "0",
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
            "DBLOG_CONFIG": str(config),
            "DBLOG_POLL_INTERVAL_S": "1",
        }) as live:
            yield live, config
    finally:
        worker.stop()


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


@pytest.mark.timeout(420)
def test_repair_from_the_trigger_form(airflow: tuple[LiveAirflow, Path], pg_target: str,
                                      tmp_path: Path) -> None:
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: ./scripts/install installs it "
                    "(apt-get install chromium)")
    live, config = airflow
    with psycopg.connect(pg_target, autocommit=True) as target:
        target.execute("UPDATE public.items SET name = 'damaged' WHERE id IN (5, 200)")
        target.execute("DELETE FROM public.items WHERE id = 7")
        target.execute("INSERT INTO public.items (id, name, qty) VALUES (90000, 'extra', 1)")
    assert not verify(config_module.load(config), [TABLE]).equal

    screenshot = SCREENSHOT if os.environ.get("DBLOG_UPDATE_SCREENSHOTS") == "1" \
        else tmp_path / SCREENSHOT.name
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
            browser.screenshot(screenshot)
            browser.click("document.querySelector('[data-testid=trigger-dag-submit]')",
                          "the form's Trigger button")
            browser.wait_for("!document.querySelector('[data-testid=trigger-dag-submit]')",
                             "the form to close (Airflow took the run)")
        except AssertionError:
            browser.screenshot(tmp_path / "failure.png")
            print(f"the page when the test failed: {tmp_path / 'failure.png'}")
            raise
    assert png_size(screenshot) == (1280, 900)

    run = live.wait_run("dblog_repair")
    run_id = str(run["dag_run_id"])
    assert run["conf"]["table"] == TABLE, run
    tasks = live.api("GET", f"/api/v2/dags/dblog_repair/dagRuns/{run_id}/taskInstances")
    states = {ti["task_id"]: ti["state"] for ti in tasks["task_instances"]}
    assert states == dict.fromkeys(
        ["compare", "submit", "wait", "merge", "remove_extra", "verify"], "success"), \
        live.task_logs("dblog_repair", run_id)[-12000:]
    assert run["state"] == "success"
    rows = target_rows(pg_target)
    assert (len(rows), rows[5], rows[7], rows[200]) == (
        ROWS, ("item 5", 5), ("item 7", 0), ("item 200", 4))
    assert verify(config_module.load(config), [TABLE]).equal
