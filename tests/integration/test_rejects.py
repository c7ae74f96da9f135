"""Bad input is refused with a clear message; nothing is queued; the running worker goes on.

Every refusal is checked for: exit status 2, the message, ``dblog list --json`` unchanged,
the worker process still alive; afterwards a normal dump completes and the live stream
still flows. Values that look like SQL are values, identifiers that look like SQL are
unknown tables. And primary-key dumps report exactly the keys that are missing.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest

from dblog_worker.landing.parquet import LandingZone, read_events
from dblog_worker.state import StateStore
from tests.integration.harness import (
    WorkerProcess,
    cli,
    create_test_table,
    redis_request,
    wait_for,
    wait_request,
    write_config,
)

SOURCE = "src"
TABLES = ["public.items", "public.t2", "public.pairs", "public.gone"]
INJECTED_KEY = "x'); DROP TABLE public.t2; --"
T2_KEYS = ["a", "it's", 'say "hi"', "back\\slash", "Grüße"]

SETUP_SQL = """
CREATE TABLE public.t2 (k text PRIMARY KEY, v integer NOT NULL);
ALTER TABLE public.t2 REPLICA IDENTITY FULL;
CREATE TABLE public.pairs (region text, id integer, v integer, PRIMARY KEY (region, id));
ALTER TABLE public.pairs REPLICA IDENTITY FULL;
INSERT INTO public.pairs VALUES ('eu', 1, 1), ('eu', 2, 2), ('us', 1, 3);
CREATE TABLE public.gone (id integer PRIMARY KEY);
ALTER TABLE public.gone REPLICA IDENTITY FULL;
"""


@dataclass
class Setup:
    tmp_path: Path
    dsn: str
    redis_url: str
    config: Path
    worker: WorkerProcess

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return cli(self.config, *args, check=False, timeout=30)

    def requests(self) -> list[dict[str, Any]]:
        result = cli(self.config, "list", "--json")
        requests: list[dict[str, Any]] = json.loads(result.stdout)
        return requests

    def dump(self, *args: str) -> str:
        result = cli(self.config, "dump", *args, "--json")
        return str(json.loads(result.stdout)["id"])

    def wait(self, request_id: str, states: list[str]) -> dict[str, str]:
        return wait_request(self.redis_url, SOURCE, request_id, states, timeout=30,
                            worker=self.worker)

    def events(self, table: str) -> list[dict[str, Any]]:
        return read_events(LandingZone(self.tmp_path / "landing", SOURCE), table)

    def show(self, request_id: str) -> dict[str, Any]:
        document: dict[str, Any] = json.loads(cli(self.config, "show", request_id,
                                                  "--json").stdout)
        return document

    def chunks(self, request_id: str, table: str) -> int:
        state = StateStore(self.redis_url, SOURCE)
        try:
            progress = state.progress(request_id).get(table)
        finally:
            state.close()
        return 0 if progress is None else progress.chunks

    def table_exists(self, table: str) -> bool:
        with psycopg.connect(self.dsn) as conn:
            row = conn.execute("SELECT to_regclass(%s) IS NOT NULL", (table,)).fetchone()
        return row == (True,)


@pytest.fixture
def setup(tmp_path: Path, pg_dsn: str, redis_url: str) -> Iterator[Setup]:
    """A running worker over items (ids 10..200), t2 (text key), pairs (composite key), and
    gone, a captured table dropped once the worker runs."""
    create_test_table(pg_dsn, "public.items", rows=20)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(SETUP_SQL.encode())
        for i, key in enumerate(T2_KEYS):
            conn.execute("INSERT INTO public.t2 (k, v) VALUES (%s, %s)", (key, i))
    config = write_config(tmp_path, pg_dsn, redis_url, TABLES)
    worker = WorkerProcess(config, tmp_path / "worker.log").start()
    try:
        wait_for(lambda: _slot_exists(pg_dsn) or not worker.alive(), 20, "the worker's slot",
                 lambda: worker.log()[-4000:])
        assert worker.alive(), worker.log()[-4000:]
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute("DROP TABLE public.gone")
        yield Setup(tmp_path, pg_dsn, redis_url, config, worker)
    finally:
        worker.stop()


def _slot_exists(dsn: str) -> bool:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT count(*) FROM pg_replication_slots "
                           "WHERE database = current_database()").fetchone()
    return row is not None and int(str(row[0])) > 0


def assert_refusals(setup: Setup, cases: list[tuple[list[str], str]]) -> None:
    """Each command exits 2 with its message; nothing is queued or changed; the worker lives."""
    before = setup.requests()
    failures = []
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda case: setup.cli(*case[0]), cases))
    for (args, message), result in zip(cases, results, strict=True):
        if result.returncode != 2 or message not in result.stderr or "Traceback" in (
            result.stderr
        ):
            failures.append(f"dblog {' '.join(args)}: exit {result.returncode}, "
                            f"stdout {result.stdout!r}, stderr {result.stderr!r}; "
                            f"wanted exit 2 and {message!r}")
        elif not result.stderr.startswith("refused: "):
            failures.append(f"dblog {' '.join(args)}: {result.stderr!r}")
    assert not failures, "\n".join(failures)
    assert setup.requests() == before
    assert setup.worker.alive(), setup.worker.log()[-4000:]


def assert_worker_unaffected(setup: Setup, marker: int) -> None:
    """A normal dump still completes and a new row still reaches the output through the log."""
    request_id = setup.dump("--table", "public.items", "--chunk-size", "7")
    assert setup.wait(request_id, ["completed", "failed"])["state"] == "completed"
    with psycopg.connect(setup.dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO public.items (id, version, payload) VALUES (%s, 1, 'live')",
                     (marker,))

    def landed() -> tuple[set[str], bool]:
        events = setup.events("public.items")
        dumped = {str(e["key"]) for e in events if e["dump_id"] == request_id}
        live = any(e["key"] == f"[{marker}]" and e["op"] == "c" and e["origin"] == "log"
                   for e in events)
        return dumped, live

    seen: tuple[set[str], bool] = (set(), False)

    def done() -> bool:
        nonlocal seen
        seen = landed()
        return seen[1] and len(seen[0]) >= 20

    wait_for(done, 20, "the dump's rows and the live insert",
             lambda: setup.worker.log()[-4000:])
    assert seen[0] == {f"[{i * 10}]" for i in range(1, 21)}
    assert setup.worker.alive()


# -- dump requests --------------------------------------------------------------


def test_bad_dump_requests_are_refused(setup: Setup) -> None:
    items = ["dump", "--table", "public.items"]
    assert_refusals(setup, [
        (["dump", "--table", "public.nope"],
         "table public.nope is not captured by source src"),
        ([*items, "--keys", "[[1,2]]"],
         "key #1 [1, 2] has 2 value(s); the primary key has 1 column(s)"),
        ([*items, "--keys", '["abc"]'], "a key value does not fit column id (integer)"),
        ([*items, "--keys", "[1.5]"], "does not fit column id (integer)"),
        ([*items, "--keys", "[1, 2"], "keys are not valid JSON"),
        ([*items, "--keys", "null"], "keys must be a non-empty JSON array"),
        ([*items, "--keys", "[]"], "keys must be a non-empty JSON array"),
        ([*items, "--keys", "[null]"], "primary-key values are never null"),
        ([*items, "--keys", "[10, null]"], "key #2: null is not a number or a string"),
        (["dump", "--table", "public.pairs", "--keys", '["eu"]'],
         'key #1 "eu" has 1 value(s); the primary key has 2 column(s)'),
        (["dump", "--table", "public.pairs", "--keys", '[["eu", "one"]]'],
         "does not fit column id (integer)"),
        ([*items, "--table", "public.t2", "--keys", "[10]"],
         "a primary-key dump (kind keys) names exactly one table, got 2"),
        ([*items, "--keys-file", str(setup.tmp_path / "no-such-file.json")],
         "cannot read the keys file"),
        ([*items, "--chunk-size", "0"], "chunk size must be an integer from 1 to 100000, got 0"),
        ([*items, "--chunk-size", "-1"], "chunk size must be an integer from 1 to 100000"),
        ([*items, "--chunk-size", "100001"],
         "chunk size must be an integer from 1 to 100000, got 100001"),
        ([*items, "--delay-ms", "-1"], "delay must be an integer number of milliseconds"),
        # SQL as an identifier: an unknown table, nothing is run.
        (["dump", "--table", 'public.items"; DROP TABLE public.items; --'],
         'table public.items"; DROP TABLE public.items; -- is not captured'),
    ])
    assert setup.table_exists("public.items")
    assert setup.requests() == []
    assert_worker_unaffected(setup, marker=1001)


def test_dump_of_a_captured_table_that_was_dropped_is_refused(setup: Setup) -> None:
    """Captured in the configuration, gone from the database: refused, like an unknown table."""
    assert_refusals(setup, [
        (["dump", "--table", "public.gone"], "table public.gone does not exist"),
        (["dump", "--table", "public.gone", "--keys", "[1]"], "table public.gone does not exist"),
        (["dump", "--table", "public.items", "--table", "public.gone"],
         "table public.gone does not exist"),
        (["dump", "--all"], "table public.gone does not exist"),
    ])
    assert setup.requests() == []
    assert_worker_unaffected(setup, marker=1002)


def test_sql_in_key_values_is_data(setup: Setup) -> None:
    keys = [INJECTED_KEY, "it's", 'say "hi"', "back\\slash", "Grüße", "missing"]
    request_id = setup.dump("--table", "public.t2", "--keys", json.dumps(keys),
                            "--chunk-size", "2")
    assert setup.wait(request_id, ["completed", "failed"])["state"] == "completed"
    assert setup.table_exists("public.t2")
    with psycopg.connect(setup.dsn) as conn:
        assert conn.execute("SELECT count(*) FROM public.t2").fetchone() == (len(T2_KEYS),)
    shown = setup.show(request_id)
    assert shown["state"] == "completed"
    assert shown["kind"] == "keys"
    assert shown["key_count"] == len(keys)
    assert shown["missing_keys"] == [[INJECTED_KEY], ["missing"]]
    wait_for(lambda: len(_dump_rows(setup, "public.t2", request_id)) == 4, 20,
             "the dump's rows", lambda: setup.worker.log()[-4000:])
    rows = _dump_rows(setup, "public.t2", request_id)
    assert set(rows) == {json.dumps([k], ensure_ascii=False)
                         for k in ["it's", 'say "hi"', "back\\slash", "Grüße"]}
    assert json.loads(rows['["it\'s"]']) == {"k": "it's", "v": 1}
    assert setup.worker.alive()


def test_client_token_makes_one_request(setup: Setup) -> None:
    first = setup.dump("--table", "public.items", "--client-token", "tok-1")
    again = setup.dump("--table", "public.items", "--client-token", "tok-1")
    other_args = setup.dump("--table", "public.t2", "--chunk-size", "3",
                            "--client-token", "tok-1")
    assert first == again == other_args
    requests = setup.requests()
    assert [r["id"] for r in requests] == [first]
    assert setup.wait(first, ["completed", "failed"])["state"] == "completed"
    # Still the same request once it has finished.
    assert setup.dump("--table", "public.items", "--client-token", "tok-1") == first
    assert [r["id"] for r in setup.requests()] == [first]
    different = setup.dump("--table", "public.items", "--client-token", "tok-2")
    assert different != first
    assert [r["id"] for r in setup.requests()] == [first, different]


# -- controlling requests ---------------------------------------------------------


def test_control_commands_refuse_unknown_and_wrong_states(setup: Setup) -> None:
    done = setup.dump("--table", "public.items", "--chunk-size", "50")
    assert setup.wait(done, ["completed", "failed"])["state"] == "completed"
    # t2's five rows one per chunk, an hour apart: running until cancelled.
    running = setup.dump("--table", "public.t2", "--chunk-size", "1", "--delay-ms", "3600000")
    setup.wait(running, ["running"])
    wait_for(lambda: setup.chunks(running, "public.t2") >= 1, 20, "the first chunk",
             lambda: setup.worker.log()[-4000:])

    unknown = "no dump request 'dump-999' for source 'src'"
    assert_refusals(setup, [
        (["pause", "dump-999"], unknown),
        (["resume", "dump-999"], unknown),
        (["cancel", "dump-999"], unknown),
        (["set", "dump-999", "--chunk-size", "10"], "no dump request 'dump-999'"),
        (["show", "dump-999"], unknown),
        (["set", done, "--chunk-size", "10"], f"dump request {done} is completed; knobs are final"),
        (["pause", done], f"dump request {done} is completed; it cannot become paused"),
        (["resume", done], f"dump request {done} is completed; it cannot become running"),
        (["resume", running],
         f"dump request {running} is running; it cannot become running (allowed from: paused"),
        (["set", running, "--chunk-size", "0"], "chunk size must be an integer"),
    ])

    # The refusals changed nothing: the request still runs with its knobs.
    state = redis_request(setup.redis_url, SOURCE, running)
    assert (state["state"], state["chunk_size"], state["delay_ms"]) == ("running", "1", "3600000")
    assert setup.cli("cancel", running).returncode == 0
    setup.wait(running, ["cancelled"])
    assert_refusals(setup, [(["resume", running], "is cancelled; it cannot become running")])
    assert_worker_unaffected(setup, marker=1003)


# -- primary-key dumps: exactly the missing keys ----------------------------------


def test_keys_dump_reports_exactly_the_missing_keys(setup: Setup) -> None:
    keys: list[object] = [10, 15, 20, 999, 200, "30", 10, -5]
    request_id = setup.dump("--table", "public.items", "--keys", json.dumps(keys),
                            "--chunk-size", "3")
    assert setup.wait(request_id, ["completed", "failed"])["state"] == "completed"
    shown = setup.show(request_id)
    assert shown["key_count"] == 7  # the repeated 10 counts once
    assert sorted(shown["missing_keys"]) == sorted([["15"], ["999"], ["-5"]])
    progress = shown["progress"]["public.items"]
    assert (progress["done"], progress["missing"], progress["rows"]) == (True, 3, 4)
    wait_for(lambda: len(_dump_rows(setup, "public.items", request_id)) == 4, 20,
             "the dump's rows", lambda: setup.worker.log()[-4000:])
    rows = _dump_rows(setup, "public.items", request_id)
    assert set(rows) == {"[10]", "[20]", "[30]", "[200]"}
    assert json.loads(rows["[30]"])["id"] == 30

    pairs = setup.dump("--table", "public.pairs", "--keys",
                       '[["eu", 1], ["us", 1], ["eu", 99], ["EU", 1], ["us", "2"]]')
    assert setup.wait(pairs, ["completed", "failed"])["state"] == "completed"
    assert sorted(setup.show(pairs)["missing_keys"]) == [["EU", "1"], ["eu", "99"], ["us", "2"]]
    wait_for(lambda: len(_dump_rows(setup, "public.pairs", pairs)) == 2, 20,
             "the pairs dump's rows", lambda: setup.worker.log()[-4000:])
    assert set(_dump_rows(setup, "public.pairs", pairs)) == {'["eu",1]', '["us",1]'}
    assert setup.worker.alive()


def _dump_rows(setup: Setup, table: str, request_id: str) -> dict[str, str]:
    rows: dict[str, str] = {}
    for event in setup.events(table):
        if event["dump_id"] == request_id:
            assert (event["op"], event["origin"]) == ("r", "dump"), event
            assert str(event["key"]) not in rows, f"{event['key']} dumped twice"
            rows[str(event["key"])] = str(event["after"])
    return rows


def test_resume_refuses_a_queued_request(setup: Setup) -> None:
    """Resume undoes a pause; a queued request waits its turn (the worker starts it once
    one of the [worker] max_active_dumps slots, 4 by default, frees)."""
    running = [setup.dump("--table", "public.t2", "--chunk-size", "1", "--delay-ms",
                          "3600000") for _ in range(4)]
    for request_id in running:
        setup.wait(request_id, ["running"])
    wait_for(lambda: setup.chunks(running[0], "public.t2") >= 1, 20, "the first chunk",
             lambda: setup.worker.log()[-4000:])
    queued = setup.dump("--table", "public.items")
    time.sleep(0.5)  # a few control intervals: it stays queued
    assert redis_request(setup.redis_url, SOURCE, queued)["state"] == "queued"
    assert_refusals(setup, [
        (["resume", queued],
         f"dump request {queued} is queued; it cannot become running (allowed from: paused)"),
    ])
    assert [r["state"] for r in setup.requests()] == ["running"] * 4 + ["queued"]
    assert setup.cli("cancel", running[0]).returncode == 0
    assert setup.wait(queued, ["completed", "failed"])["state"] == "completed"
    for request_id in running[1:]:
        assert setup.cli("cancel", request_id).returncode == 0
