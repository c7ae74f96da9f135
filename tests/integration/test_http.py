"""The worker's HTTP API against a real worker process, PostgreSQL and Redis.

Each test starts ``dblog run`` (HTTP on a free loopback port, read from its log) and
talks to it with http.client: health, status, dumps made and steered over HTTP and
seen by the CLI and in Redis, the token, and bad input of every kind, answered 4xx
with ``{"error": ...}`` while Redis stays exactly as it was.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import re
import select
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
import redis
from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as openmetrics_families,
)
from prometheus_client.parser import text_string_to_metric_families

from dblog_worker.http.api import CONTENT_TYPES, NOT_READY, STATIC
from tests.integration.harness import (
    WorkerProcess,
    Workers,
    cli,
    create_test_table,
    redis_request,
    wait_for,
    write_config,
)
from tests.services import PostgresServer, RedisServer, SeaweedServer, free_port

SOURCE = "src"
OBSERVABILITY = Path(__file__).resolve().parents[2] / "docs" / "observability.md"
# What Prometheus 3 sends when it scrapes (scrape_protocols' default order).
PROMETHEUS_3_ACCEPT = ("application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.6,"
                       "application/openmetrics-text;version=0.0.1;q=0.5,text/plain;"
                       "version=1.0.0;escaping=allow-utf-8;q=0.4,text/plain;version=0.0.4;"
                       "q=0.3,*/*;q=0.2")
ITEMS, SLOW, PAIRS = "public.items", "public.slow", "public.pairs"
TOKEN = "t0ken-for-the-http-test-7f3a"
TOKEN_ENV = "DBLOG_TEST_HTTP_TOKEN"
ITS_TOKEN = object()

SETUP_SQL = f"""
CREATE TABLE {SLOW} (k text PRIMARY KEY, v integer NOT NULL);
ALTER TABLE {SLOW} REPLICA IDENTITY FULL;
INSERT INTO {SLOW} SELECT 'k' || g, g FROM generate_series(1, 5) g;
CREATE TABLE {PAIRS} (region text, id integer, PRIMARY KEY (region, id));
ALTER TABLE {PAIRS} REPLICA IDENTITY FULL;
INSERT INTO {PAIRS} VALUES ('eu', 1), ('us', 1);
"""


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        assert self.headers.get("content-type") == "application/json", self
        return json.loads(self.body)

    @property
    def error(self) -> str:
        document = self.json()
        assert set(document) == {"error"}, document
        error: str = document["error"]
        return error


@dataclass
class Api:
    """The HTTP API of a running worker, and what to check it against."""

    url: str
    config: Path
    redis_url: str
    worker: WorkerProcess
    token: str | None = None

    def call(self, method: str, path: str, body: object = None, *, raw: bytes | None = None,
             headers: dict[str, str] | None = None, token: object = ITS_TOKEN) -> Reply:
        """One request on a new connection; ``body`` is sent as JSON, ``raw`` as is;
        ``token``: the bearer token to send (None: none; by default the API's)."""
        host, port = self.url.removeprefix("http://").rsplit(":", 1)
        sent = dict(headers or {})
        if body is not None:
            raw = json.dumps(body).encode()
            sent.setdefault("Content-Type", "application/json")
        token = self.token if token is ITS_TOKEN else token
        if token is not None:
            sent.setdefault("Authorization", f"Bearer {token}")
        connection = http.client.HTTPConnection(host, int(port), timeout=30)
        try:
            connection.request(method, path, body=raw, headers=sent)
            response = connection.getresponse()
            return Reply(response.status, {k.lower(): v for k, v in response.getheaders()},
                         response.read())
        finally:
            connection.close()

    def get(self, path: str, **kwargs: Any) -> Reply:
        return self.call("GET", path, **kwargs)

    def create(self, body: dict[str, Any]) -> dict[str, Any]:
        reply = self.call("POST", "/api/v1/requests", body)
        assert reply.status == 201, (reply, self.worker.log()[-3000:])
        document: dict[str, Any] = reply.json()
        assert reply.headers["location"] == f"/api/v1/requests/{document['id']}"
        return document

    def request(self, request_id: str) -> dict[str, Any]:
        reply = self.get(f"/api/v1/requests/{request_id}")
        assert reply.status == 200, reply
        document: dict[str, Any] = reply.json()
        return document

    def wait_state(self, request_id: str, states: tuple[str, ...]) -> dict[str, Any]:
        wait_for(lambda: self.request(request_id)["state"] in states, 30,
                 f"{request_id} to become {'/'.join(states)}",
                 lambda: self.worker.log()[-4000:])
        return self.request(request_id)

    def redis_state(self) -> dict[str, object]:
        """Every key of the source in Redis with its value, but what the worker writes
        while it runs: its status report, its entry in the members list, the checkpoint."""
        with redis.Redis.from_url(self.redis_url, decode_responses=True) as client:
            state: dict[str, object] = {}
            for key in sorted(client.scan_iter(f"dblog:v1:{SOURCE}:*")):
                kind = client.type(key)
                if key.endswith((":worker", ":checkpoint", ":members")) or ":member:" in key:
                    continue
                if kind == "hash":
                    state[key] = client.hgetall(key)
                elif kind == "list":
                    state[key] = client.lrange(key, 0, -1)
                elif kind == "zset":
                    state[key] = client.zrange(key, 0, -1, withscores=True)
                else:
                    state[key] = client.get(key)
            return state


def start_api(tmp_path: Path, dsn: str, redis_url: str, workers: Workers, *,
              http: str = 'listen = "127.0.0.1:0"', token: str | None = None) -> Api:
    config = write_config(tmp_path, dsn, redis_url, [ITEMS, SLOW, PAIRS], http=http)
    worker = workers.start(config)
    assert worker.alive(), worker.log()
    found = re.search(r"HTTP API on (http://127\.0\.0\.1:\d+)", worker.log())
    assert found is not None, worker.log()
    api = Api(found.group(1), config, redis_url, worker, token)
    wait_for(lambda: api.get("/readyz").status == 200, 20, "readyz", worker.log)
    return api


@pytest.fixture
def tables(pg_dsn: str) -> str:
    create_test_table(pg_dsn, ITEMS, rows=20)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(SETUP_SQL.encode())
    return pg_dsn


@pytest.fixture
def api(tmp_path: Path, tables: str, redis_url: str) -> Iterator[Api]:
    with Workers(tmp_path / "worker.log") as workers:
        yield start_api(tmp_path, tables, redis_url, workers)


# -- health, status, dumps --------------------------------------------------------------


def test_health_status_and_dumps_over_http(api: Api) -> None:
    health = api.get("/healthz", headers={"X-Request-Id": "probe-1"})
    assert (health.status, health.json()) == (200, {"status": "ok"})
    assert health.headers["x-request-id"] == "probe-1"
    assert len(api.get("/healthz").headers["x-request-id"]) == 32  # made when not given
    assert api.get("/readyz").json() == {"ready": True}

    status = api.get("/api/v1/status").json()
    assert (status["source"], status["connected"], status["http"]) == (SOURCE, True, api.url)
    assert status["readers"] == {"chunk_cells": "c"}  # the C reader is built (scripts/install)
    assert status["redis"]["error"] is None
    wait_for(lambda: api.get("/api/v1/status").json()["redis"]["worker"] is not None, 10,
             "the worker's first report")
    report = api.get("/api/v1/status").json()["redis"]["worker"]
    assert report["http"] == api.url  # the address in Redis, for `dblog status`
    assert report["readers"] == "chunk_cells=c"
    assert f"  http: {api.url}" in cli(api.config, "status").stdout.splitlines()

    created = api.create({"kind": "tables", "tables": [ITEMS], "chunk_size": 7,
                          "client_token": "tok-1"})
    assert (created["kind"], created["tables"], created["chunk_size"]) == ("tables", [ITEMS], 7)
    done = api.wait_state(created["id"], ("completed", "failed"))
    assert done["state"] == "completed", done
    assert done["progress"][ITEMS]["rows"] == 20
    shown = json.loads(cli(api.config, "show", created["id"], "--json").stdout)
    assert shown == done  # the same request, the same JSON as `dblog show --json`
    again = api.call("POST", "/api/v1/requests", {"kind": "tables", "tables": [ITEMS],
                                                  "client_token": "tok-1"})
    assert (again.status, again.json()["id"]) == (200, created["id"])  # idempotent

    keys = api.create({"kind": "keys", "tables": [PAIRS], "keys": [["eu", 1], ["eu", 9]]})
    keys_done = api.wait_state(keys["id"], ("completed", "failed"))
    assert (keys_done["state"], keys_done["key_count"]) == ("completed", 2), keys_done
    assert keys_done["missing_keys"] == [["eu", "9"]]
    assert json.loads(cli(api.config, "show", keys["id"], "--json").stdout) == keys_done

    everything = api.create({"kind": "all", "chunk_size": 50})
    assert everything["tables"] == [ITEMS, SLOW, PAIRS]
    assert api.wait_state(everything["id"], ("completed", "failed"))["state"] == "completed"

    listed = api.get("/api/v1/requests").json()
    assert [r["id"] for r in listed] == [created["id"], keys["id"], everything["id"]]
    assert listed == json.loads(cli(api.config, "list", "--json").stdout)
    assert api.get("/api/v1/requests?active=true").json() == []

    assert 'request_id=probe-1' in api.worker.log()  # the access log, at DEBUG

    filtered = api.create({"kind": "tables", "tables": [ITEMS], "from_key": 30,
                           "where": [{"column": "id", "op": "in", "values": [10, 30, 50, 90]},
                                     {"column": "payload", "op": "is not null"}]})
    assert filtered["filter"] == {
        "where": [{"column": "id", "op": "in", "values": ["10", "30", "50", "90"]},
                  {"column": "payload", "op": "is not null"}],
        "from_key": ["30"], "to_key": None}
    filtered_done = api.wait_state(filtered["id"], ("completed", "failed"))
    assert filtered_done["progress"][ITEMS]["rows"] == 3, filtered_done  # 30, 50, 90
    assert json.loads(cli(api.config, "show", filtered["id"], "--json").stdout) == filtered_done


def test_pause_resume_cancel_and_knobs(api: Api) -> None:
    # five rows one per chunk, an hour apart: running until cancelled
    slow = api.create({"kind": "tables", "tables": [SLOW], "chunk_size": 1,
                       "delay_ms": 3_600_000})["id"]
    api.wait_state(slow, ("running",))
    wait_for(lambda: api.request(slow)["progress"].get(SLOW, {}).get("chunks", 0) >= 1,
             20, "the first chunk", api.worker.log)

    knobs = api.call("PATCH", f"/api/v1/requests/{slow}", {"chunk_size": 2,
                                                           "delay_ms": 3_500_000,
                                                           "parallelism": 2})
    assert knobs.status == 200, knobs
    assert (knobs.json()["chunk_size"], knobs.json()["delay_ms"],
            knobs.json()["parallelism"]) == (2, 3_500_000, 2)
    fields = redis_request(api.redis_url, SOURCE, slow)
    assert (fields["chunk_size"], fields["delay_ms"], fields["parallelism"]) == (
        "2", "3500000", "2")
    only_delay = api.call("PATCH", f"/api/v1/requests/{slow}", {"delay_ms": 3_600_000})
    assert (only_delay.json()["chunk_size"], only_delay.json()["delay_ms"]) == (2, 3_600_000)

    paused = api.call("POST", f"/api/v1/requests/{slow}/pause")
    assert paused.status == 200, paused
    assert (paused.json()["state"], paused.json()["previous_state"]) == ("paused", "running")
    assert redis_request(api.redis_url, SOURCE, slow)["state"] == "paused"
    resumed = api.call("POST", f"/api/v1/requests/{slow}/resume", {})
    assert (resumed.status, resumed.json()["state"]) == (200, "running")
    assert redis_request(api.redis_url, SOURCE, slow)["state"] == "running"

    # three more that run an hour apart: with slow, the worker's four slots are taken
    stalled = [api.create({"kind": "tables", "tables": [SLOW], "chunk_size": 1,
                           "delay_ms": 3_600_000})["id"] for _ in range(3)]
    for request_id in stalled:
        api.wait_state(request_id, ("running",))
    queued = api.create({"kind": "tables", "tables": [ITEMS],
                         "priority": "background"})["id"]  # waits for a slot
    time.sleep(0.3)
    assert api.request(queued)["state"] == "queued"
    urgent = api.call("PATCH", f"/api/v1/requests/{queued}", {"priority": "urgent"})
    assert (urgent.status, urgent.json()["priority"]) == (200, "urgent"), urgent
    assert api.wait_state(queued, ("running", "completed"))["priority"] == "urgent"
    queued = api.create({"kind": "tables", "tables": [ITEMS]})["id"]  # no slot for it
    time.sleep(0.3)
    before = api.redis_state()
    refusals = [
        (api.call("POST", f"/api/v1/requests/{queued}/resume"), 409,
         f"dump request {queued} is queued; it cannot become running (allowed from: paused)"),
        (api.call("POST", f"/api/v1/requests/{queued}/pause"), 409,
         f"dump request {queued} is queued; it cannot become paused (allowed from: running)"),
        (api.call("POST", f"/api/v1/requests/{slow}/resume"), 409,
         f"dump request {slow} is running; it cannot become running"),
        (api.call("POST", "/api/v1/requests/dump-999/cancel"), 404,
         "no dump request 'dump-999' for source 'src'"),
        (api.call("PATCH", "/api/v1/requests/dump-999", {"chunk_size": 3}), 404,
         "no dump request 'dump-999'"),
        (api.get("/api/v1/requests/dump-999"), 404, "no dump request 'dump-999'"),
        (api.get("/api/v1/requests/dump-1:progress"), 404, "ids look like dump-12"),
    ]
    for reply, status, message in refusals:
        assert (reply.status, message in reply.error) == (status, True), (reply, message)
    assert api.redis_state() == before

    for request_id in stalled:
        assert api.call("POST", f"/api/v1/requests/{request_id}/cancel").status == 200
    cancelled = api.call("POST", f"/api/v1/requests/{slow}/cancel")
    assert (cancelled.status, cancelled.json()["state"]) == (200, "cancelled")
    assert redis_request(api.redis_url, SOURCE, slow)["state"] == "cancelled"
    assert api.wait_state(queued, ("completed", "failed"))["state"] == "completed"
    final = api.call("PATCH", f"/api/v1/requests/{slow}", {"chunk_size": 3})
    assert final.status == 409
    assert final.error == f"dump request {slow} is cancelled; knobs are final"
    assert redis_request(api.redis_url, SOURCE, slow)["chunk_size"] == "2"


# -- bad input ------------------------------------------------------------------------------

JSON_HEADERS = {"Content-Type": "application/json"}


def test_bad_input_is_refused_and_changes_nothing(api: Api) -> None:
    running = api.create({"kind": "tables", "tables": [SLOW], "chunk_size": 1,
                          "delay_ms": 3_600_000})["id"]
    api.wait_state(running, ("running",))
    wait_for(lambda: api.request(running)["progress"].get(SLOW, {}).get("chunks", 0) >= 1,
             20, "the first chunk", api.worker.log)
    before = api.redis_state()
    post = "/api/v1/requests"
    cases: list[tuple[str, str, dict[str, Any], int, str]] = [
        # malformed, wrong types, unknown fields
        ("POST", post, {"raw": b"{", "headers": JSON_HEADERS}, 400,
         "the body is not valid JSON: Expecting property name"),
        ("POST", post, {"raw": b"\xff\xfe", "headers": JSON_HEADERS}, 400,
         "the body is not valid JSON"),
        ("POST", post, {"raw": b'{"kind": NaN}', "headers": JSON_HEADERS}, 400,
         "NaN is not a JSON number"),
        ("POST", post, {"body": [1]}, 400, "the body must be a JSON object, got list"),
        ("POST", post, {}, 400, "this request needs a JSON object body"),
        ("POST", post, {"body": {"kind": "tables", "tables": [ITEMS], "chunk": 5}}, 400,
         "unknown field(s) chunk; allowed: kind, tables, keys, chunk_size"),
        ("POST", post, {"body": {"kind": "everything"}}, 400,
         'kind must be one of all, tables, keys, got "everything"'),
        ("POST", post, {"body": {"tables": [ITEMS]}}, 400, "kind must be"),
        ("POST", post, {"body": {"kind": "tables", "tables": ITEMS}}, 400,
         "tables must be a non-empty list"),
        ("POST", post, {"body": {"kind": "tables", "tables": []}}, 400,
         "tables must be a non-empty list"),
        ("POST", post, {"body": {"kind": "tables", "tables": [1]}}, 400,
         "tables must be a non-empty list"),
        ("POST", post, {"body": {"kind": "all", "tables": [ITEMS]}}, 400,
         "kind all dumps every captured table"),
        ("POST", post, {"body": {"kind": "tables", "tables": [ITEMS], "keys": [1]}}, 400,
         "keys were given with kind tables: use kind keys"),
        ("POST", post, {"body": {"kind": "keys", "tables": [ITEMS, SLOW], "keys": [1]}}, 400,
         "a primary-key dump (kind keys) names exactly one table, got 2"),
        ("POST", post, {"body": {"kind": "tables", "tables": [ITEMS], "chunk_size": "5"}}, 400,
         'chunk_size must be an integer, got "5"'),
        ("POST", post, {"body": {"kind": "tables", "tables": [ITEMS], "chunk_size": True}},
         400, "chunk_size must be an integer, got true"),
        ("POST", post, {"body": {"kind": "tables", "tables": [ITEMS], "delay_ms": 1.5}}, 400,
         "delay_ms must be an integer, got 1.5"),
        ("POST", post, {"body": {"kind": "tables", "tables": [ITEMS], "chunk_size": 0}}, 400,
         "chunk size must be an integer from 1 to 100000, got 0"),
        ("POST", post, {"body": {"kind": "tables", "tables": [ITEMS], "delay_ms": -1}}, 400,
         "delay must be an integer number of milliseconds from 0 to 3600000, got -1"),
        ("POST", post, {"body": {"kind": "tables", "tables": [ITEMS], "parallelism": 9}}, 400,
         "parallelism must be an integer from 1 to 8"),
        ("POST", post, {"body": {"kind": "all", "client_token": ""}}, 400,
         "client_token must be a string of 1 to 200 characters"),
        # checked against the source
        ("POST", post, {"body": {"kind": "tables", "tables": ["public.nope"]}}, 400,
         "table public.nope is not captured by source src"),
        ("POST", post, {"body": {"kind": "tables",
                                 "tables": ['public.items"; DROP TABLE public.items; --']}},
         400, "is not captured"),
        ("POST", post, {"body": {"kind": "keys", "tables": [ITEMS], "keys": ["abc"]}}, 400,
         "a key value does not fit column id (integer)"),
        ("POST", post, {"body": {"kind": "keys", "tables": [ITEMS], "keys": [[1, 2]]}}, 400,
         "key #1 [1, 2] has 2 value(s); the primary key has 1 column(s)"),
        ("POST", post, {"body": {"kind": "keys", "tables": [ITEMS], "keys": []}}, 400,
         "keys must be a non-empty JSON array"),
        ("POST", post, {"body": {"kind": "keys", "tables": [ITEMS], "keys": [None]}}, 400,
         "primary-key values are never null"),
        ("POST", post, {"body": {"kind": "tables", "tables": [ITEMS], "where": "id = 1"}}, 400,
         "where must be a list of conditions"),
        ("POST", post, {"body": {"kind": "tables", "tables": [ITEMS],
                                 "where": [{"column": "id", "op": "==", "value": 1}]}}, 400,
         'op must be one of =, !=, <, <=, >, >=, in, not in, is null, is not null, got "=="'),
        ("POST", post, {"body": {"kind": "tables", "tables": [ITEMS],
                                 "where": [{"column": "nope", "op": "=", "value": 1}]}}, 400,
         f"{ITEMS} has no column 'nope'"),
        ("POST", post, {"body": {"kind": "tables", "tables": [ITEMS],
                                 "where": [{"column": "id", "op": ">", "value": "x"}]}}, 400,
         "a value does not fit column id (integer)"),
        ("POST", post, {"body": {"kind": "tables", "tables": [ITEMS, SLOW], "from_key": 1}},
         400, "a key range (from_key, to_key) is of one table's key"),
        ("POST", post, {"body": {"kind": "keys", "tables": [ITEMS], "keys": [1],
                                 "to_key": 5}}, 400, "a primary-key dump reads the keys it"),
        ("POST", post, {"body": {"kind": "keys", "tables": [ITEMS], "keys": None}}, 400,
         "keys must be a non-empty JSON array"),
        ("POST", post, {"body": {"kind": "keys", "tables": [ITEMS]}}, 400,
         "kind keys needs keys"),
        # content type, size, framing
        ("POST", post, {"raw": b'{"kind": "all"}', "headers": {"Content-Type": "text/plain"}},
         415, "the body must be JSON, sent with Content-Type: application/json"),
        ("POST", post, {"raw": b'{"kind": "all"}'}, 415, "the body must be JSON"),
        ("POST", post, {"raw": b'{"kind": "all"}', "headers": {
            "Content-Type": "application/json; charset=latin-1"}}, 415, "must be JSON"),
        ("GET", "/api/v1/requests", {"raw": b"{}", "headers": JSON_HEADERS}, 400,
         "GET /api/v1/requests takes no body"),
        # knobs and commands
        ("PATCH", f"/api/v1/requests/{running}", {"body": {}}, 400,
         "give chunk_size, delay_ms, parallelism, throttle and/or priority"),
        ("PATCH", f"/api/v1/requests/{running}", {"body": {"chunk_size": 0}}, 400,
         "chunk size must be an integer from 1 to 100000, got 0"),
        ("PATCH", f"/api/v1/requests/{running}", {"body": {"delay": 5}}, 400,
         "unknown field(s) delay; allowed: chunk_size, delay_ms, parallelism"),
        ("PATCH", f"/api/v1/requests/{running}", {"body": {"parallelism": 0}}, 400,
         "parallelism must be an integer from 1 to 8"),
        ("PATCH", f"/api/v1/requests/{running}", {"body": {"chunk_size": None}}, 400,
         "chunk_size must be an integer, got null"),
        ("PATCH", f"/api/v1/requests/{running}", {"body": {"priority": "asap"}}, 400,
         'priority must be one of urgent, normal, background, got "asap"'),
        ("PATCH", f"/api/v1/requests/{running}", {"body": {"priority": None}}, 400,
         "priority must be one of urgent, normal, background, got null"),
        ("POST", post, {"body": {"kind": "all", "priority": 1}}, 400,
         "priority must be one of urgent, normal, background, got 1"),
        ("POST", f"/api/v1/requests/{running}/pause", {"body": {"force": True}}, 400,
         "unknown field(s) force; allowed: none"),
        ("POST", f"/api/v1/requests/{running}/cancel", {"raw": b"null",
                                                        "headers": JSON_HEADERS}, 400,
         "the body must be a JSON object, got null"),
        ("POST", post, {"body": {"kind": "all", "client_token": None}}, 400,
         "client_token must be a string"),
        ("POST", post, {"body": {"kind": "all", "tables": None}}, 400,
         "tables must be a non-empty list"),
        ("POST", f"/api/v1/requests/{running}/stop", {}, 404, "no route"),
        # query, methods, paths
        ("GET", "/api/v1/requests?active=yes", {}, 400, "active must be true or false"),
        ("GET", "/api/v1/requests?limit=5", {}, 400, "unknown query parameter 'limit'"),
        ("GET", "/api/v1/requests?active=true&active=false", {}, 400, "given twice"),
        ("GET", "/api/v1/feed?after=-1", {}, 400, "after must be an integer from 0"),
        ("GET", "/api/v1/feed?limit=501", {}, 400, "limit must be an integer from 1 to 500"),
        ("DELETE", f"/api/v1/requests/{running}", {}, 405, "DELETE is not allowed"),
        ("PUT", "/api/v1/requests", {"body": {"kind": "all"}}, 405, "PUT is not allowed"),
        ("GET", "/api/v1/nothing", {}, 404, "no route '/api/v1/nothing'"),
        ("GET", "/live/..%2Fapi.py", {}, 404, "no file '../api.py' in the live view"),
        ("GET", "/live/.hidden", {}, 404, "no file '.hidden'"),
        # browsers: another site's page, DNS rebinding
        ("POST", f"/api/v1/requests/{running}/cancel",
         {"headers": {"Origin": "http://evil.example"}}, 403, "cross-origin requests"),
        ("POST", f"/api/v1/requests/{running}/cancel",
         {"headers": {"Sec-Fetch-Site": "cross-site"}}, 403, "cross-origin requests"),
        ("GET", "/api/v1/status", {"headers": {"Host": "evil.example:8750"}}, 403,
         "Host 'evil.example:8750' is not a loopback name"),
    ]
    failures = []
    for method, path, kwargs, status, message in cases:
        reply = api.call(method, path, **kwargs)
        try:
            ok = reply.status == status and message in reply.error
        except (AssertionError, ValueError):
            ok = False
        if not ok:
            failures.append(f"{method} {path} {kwargs.get('body', '')}: got {reply.status} "
                            f"{reply.body[:300]!r}; wanted {status} {message!r}")
    assert not failures, "\n".join(failures)
    assert api.get("/api/v1/requests/x").headers["content-type"] == "application/json"
    assert api.call("DELETE", f"/api/v1/requests/{running}").headers["allow"] == "GET, HEAD, PATCH"
    assert api.call("POST", "/healthz").headers["allow"] == "GET, HEAD"
    assert api.redis_state() == before  # nothing queued, nothing changed
    assert api.request(running)["state"] == "running"
    assert api.worker.alive()
    # the worker still takes good requests
    assert api.call("POST", f"/api/v1/requests/{running}/cancel").status == 200
    good = api.create({"kind": "keys", "tables": [ITEMS], "keys": [10, "20"]})
    assert api.wait_state(good["id"], ("completed", "failed"))["state"] == "completed"


def test_http_layer(api: Api) -> None:
    """Errors of the HTTP layer itself (before any route) are JSON too; a connection
    serves several requests."""
    host, port = api.url.removeprefix("http://").rsplit(":", 1)
    for request, status in [
        (b"BREW /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n", 405),
        (b"BREW /teapot HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n", 404),
        (b"nonsense\r\n\r\n", 400),
        (b"GET /healthz HTTP/9.9\r\n\r\n", 505),
        (b"POST /api/v1/requests HTTP/1.1\r\nHost: localhost\r\n"
         b"Transfer-Encoding: chunked\r\nContent-Type: application/json\r\n\r\n0\r\n\r\n", 411),
        # too large: refused before the body is sent, with or without Expect: 100-continue
        (b"POST /api/v1/requests HTTP/1.1\r\nHost: localhost\r\n"
         b"Content-Type: application/json\r\nContent-Length: 4194305\r\n\r\n", 413),
        (b"POST /api/v1/requests HTTP/1.1\r\nHost: localhost\r\nExpect: 100-continue\r\n"
         b"Content-Type: application/json\r\nContent-Length: 4194305\r\n\r\n", 413),
    ]:
        with socket.create_connection((host, int(port)), timeout=10) as conn:
            conn.sendall(request)
            data = b""
            while chunk := conn.recv(65536):
                data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        assert head.split(b" ")[1] == str(status).encode(), data
        assert b"Content-Type: application/json" in head, data
        assert set(json.loads(body)) == {"error"}, data

    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    first = None
    try:  # one connection, several requests, refusals among them
        for method, path, sent, status in [
            ("GET", "/healthz", None, 200), ("GET", "/nowhere", None, 404),
            ("POST", "/api/v1/requests", b'{"kind": 1}', 400),
            ("POST", "/healthz", b"{}", 405), ("GET", "/api/v1/requests", None, 200),
            ("POST", "/api/v1/requests?x=1", b'{"kind": "all"}', 400),
            ("GET", "/api/v1/requests", b"{}", 400), ("GET", "/api/v1/feed?after=0", None, 200),
        ]:
            connection.request(method, path, body=sent, headers=JSON_HEADERS)
            first = first or connection.sock
            response = connection.getresponse()
            response.read()
            assert response.status == status, (method, path, response.status)
            assert connection.sock is first  # still the same connection
    finally:
        connection.close()


def read_to_end(conn: socket.socket) -> bytes:
    data = b""
    while chunk := conn.recv(65536):
        data += chunk
    return data


def probe(host: str, port: int, path: str) -> tuple[int, dict[str, Any], float]:
    """GET path on a new connection: (status, JSON body, seconds it took)."""
    started = time.monotonic()
    with socket.create_connection((host, port), timeout=10) as conn:
        conn.sendall(f"GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
                     .encode())
        data = b""
        while chunk := conn.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split(b" ")[1]), json.loads(body), time.monotonic() - started


def test_slow_clients_do_not_lock_out_probes(api: Api) -> None:
    """64 sockets that send a request a byte now and then (slowloris, all from 127.0.0.1
    as the probes): /healthz and /readyz still answer at once; the server keeps at most 16
    of them (the per-address limit, the longest waiting closed first) and answers those
    408 at the request deadline, 10 s after their first byte. A keep-alive connection gets
    a fresh deadline per request."""
    host, port_text = api.url.removeprefix("http://").rsplit(":", 1)
    port = int(port_text)
    slow = []
    for _ in range(64):
        conn = socket.create_connection((host, port), timeout=10)
        conn.sendall(b"GET /api/v1/status HTTP/1.1\r\nHost: localhost\r\n")
        slow.append(conn)
    first_byte = time.monotonic()
    # From another loopback address: under load the server may admit the slow sockets
    # late, and one admitted after the keep-alive connection went idle would close it
    # (the longest waiting from that address), as it should.
    keep_alive = http.client.HTTPConnection(host, port, timeout=10,
                                            source_address=("127.0.0.2", 0))
    try:
        for path, answer in (("/healthz", {"status": "ok"}), ("/readyz", {"ready": True})):
            status, body, took = probe(host, port, path)
            assert (status, body) == (200, answer)
            assert took < 3, took

        def closed(conn: socket.socket) -> bool:
            readable, _, _ = select.select([conn], [], [], 0)
            if not readable:
                return False
            conn.setblocking(False)
            try:
                return conn.recv(65536, socket.MSG_PEEK) == b""
            except ConnectionResetError:
                return True
            finally:
                conn.setblocking(True)

        keep_alive.request("GET", "/healthz")
        assert keep_alive.getresponse().read() == b'{"status": "ok"}'
        keep_alive_socket = keep_alive.sock
        wait_for(lambda: sum(map(closed, slow)) >= 48, 10, "the server to close 48 of them")
        held = [conn for conn in slow if not closed(conn)]
        assert 1 <= len(held) <= 16, len(held)

        answers: dict[socket.socket, bytes] = {}
        deadline = time.monotonic() + 25
        last_request = 0.0
        while len(answers) < len(held) and time.monotonic() < deadline:
            for conn in held:  # one byte of a header that never ends, every second
                if conn not in answers:
                    with contextlib.suppress(OSError):
                        conn.sendall(b"X")
            if time.monotonic() - last_request >= 1:  # a request a second on one connection
                # (not one per answer read: requests that follow each other within the
                # server's answer count as pipelined, and 16 of them close the connection)
                last_request = time.monotonic()
                keep_alive.request("GET", "/healthz")
                response = keep_alive.getresponse()
                assert (response.status, response.read()) == (200, b'{"status": "ok"}')
                assert keep_alive.sock is keep_alive_socket
            readable, _, _ = select.select([c for c in held if c not in answers], [], [], 1)
            for conn in readable:
                answers[conn] = read_to_end(conn)
        waited = time.monotonic() - first_byte
        assert len(answers) == len(held), f"{len(answers)} of {len(held)} after {waited:.1f}s"
        assert 9 < waited < 25, waited  # the deadline: 10 s from their first byte
        for data in answers.values():
            head, _, rest = data.partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 408 "), data
            assert b"Connection: close" in head, data
            assert json.loads(rest) == {
                "error": "the request was not sent in time; send it at once"}
    finally:
        keep_alive.close()
        for conn in slow:
            conn.close()
    assert probe(host, port, "/healthz")[0] == 200
    assert api.worker.alive()
    assert "Traceback" not in api.worker.log()


def documented_metrics() -> dict[str, tuple[str, set[str]]]:
    """The metrics table of docs/observability.md: name -> (type, label names)."""
    found = {}
    for line in OBSERVABILITY.read_text().splitlines():
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        if line.startswith("| `dblog_") and len(cells) >= 4:
            found[cells[0].strip("`")] = (cells[1], set(re.findall(r"`(\w+)`", cells[2])))
    assert len(found) >= 28, found
    return found


def test_metrics_parse_with_prometheus_client_as_documented(api: Api) -> None:
    """/metrics of a worker that ran a dump and runs another, read by prometheus_client's
    own parsers: every documented family with its type and labels, nothing else; and
    OpenMetrics when the scraper asks for it, as Prometheus 3 does."""
    done = api.create({"kind": "tables", "tables": [ITEMS], "chunk_size": 7})
    assert api.wait_state(done["id"], ("completed", "failed"))["state"] == "completed"
    running = api.create({"kind": "tables", "tables": [SLOW], "chunk_size": 1,
                          "delay_ms": 3_600_000})
    wait_for(lambda: api.request(running["id"])["progress"].get(SLOW, {}).get("chunks", 0) > 0,
             30, "the slow dump's first chunk", lambda: api.worker.log()[-3000:])

    reply = api.get("/metrics")
    assert (reply.status, reply.headers["content-type"]) == (
        200, "text/plain; version=0.0.4; charset=utf-8")
    families = {f.name: f for f in text_string_to_metric_families(reply.body.decode())}
    documented = documented_metrics()
    names = {name.removesuffix("_total") if kind == "counter" else name
             for name, (kind, _) in documented.items()}
    assert set(families) == names
    for name, (kind, labels) in documented.items():
        family = families[name.removesuffix("_total") if kind == "counter" else name]
        assert (family.type, bool(family.documentation)) == (kind, True), name
        for sample in family.samples:
            assert sample.labels["source"] == SOURCE, sample
            assert set(sample.labels) - {"source"} <= labels, (name, sample)
            assert sample.name == name or kind == "histogram", (name, sample)

    def value(family: str, **labels: str) -> float:
        found = [s.value for s in families[family].samples
                 if s.labels == {"source": SOURCE, **labels}]
        assert len(found) == 1, (family, labels, families[family].samples)
        return float(found[0])

    assert value("dblog_events", table=ITEMS, origin="dump") == 20
    assert value("dblog_dump_state", request=running["id"], state="running",
                 priority="normal") == 1
    assert value("dblog_connected") == 1 and value("dblog_leader") == 1
    assert value("dblog_chunk_rows_selected", table=SLOW) >= 1
    assert {s.labels["version"] for s in families["dblog_build_info"].samples} == {
        api.get("/api/v1/status").json()["version"]}
    assert value("dblog_reader_info", chunk_cells="c") == 1

    for accept in ("application/openmetrics-text; version=1.0.0", PROMETHEUS_3_ACCEPT):
        reply = api.get("/metrics", headers={"Accept": accept})
        assert reply.status == 200
        assert reply.headers["content-type"].startswith(
            "application/openmetrics-text; version=1.0.0; charset=utf-8"), reply.headers
        text = reply.body.decode()
        assert text.endswith("# EOF\n")
        strict = {f.name: f for f in openmetrics_families(text)}
        assert set(strict) == names - {"dblog_build_info", "dblog_reader_info"} | {
            "dblog_build", "dblog_reader"}
        assert strict["dblog_build"].type == "info"
        assert strict["dblog_events"].type == "counter"
        assert {s.name for s in strict["dblog_events"].samples} == {"dblog_events_total"}
        assert (strict["dblog_end_to_end_lag_seconds"].type,
                strict["dblog_end_to_end_lag_seconds"].unit) == ("histogram", "seconds")
        assert strict["dblog_log_lag_bytes"].unit == "bytes"
        assert strict["dblog_dump_progress_ratio"].unit == "ratio"
    plain = api.get("/metrics", headers={"Accept": "text/plain;version=0.0.4;q=0.3,*/*;q=0.2"})
    assert plain.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    assert "# EOF" not in plain.body.decode()


# -- the token ----------------------------------------------------------------------------


def test_token_guards_everything_but_health_and_the_page(
    tmp_path: Path, tables: str, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(TOKEN_ENV, TOKEN)  # the worker and the CLI inherit it
    with Workers(tmp_path / "worker.log") as workers:
        api = start_api(tmp_path, tables, redis_url, workers, token=TOKEN,
                        http=f'listen = "127.0.0.1:0"\ntoken_env = "{TOKEN_ENV}"')
        guarded = ["/api/v1/status", "/api/v1/requests", "/api/v1/requests/dump-1",
                   "/api/v1/feed?after=0", "/metrics", "/api/v1/openapi.json", "/nowhere"]
        for path in guarded:
            for token in (None, "wrong", TOKEN + "x", TOKEN[:-1]):
                reply = api.get(path, token=token)
                assert reply.status == 401, (path, token, reply)
                assert "missing or wrong token" in reply.error
                assert reply.headers["www-authenticate"] == 'Bearer realm="dblog"'
        basic = api.get("/api/v1/status", token=None,
                        headers={"Authorization": f"Basic {TOKEN}"})
        assert basic.status == 401
        before = api.redis_state()
        refused = api.call("POST", "/api/v1/requests", {"kind": "all"}, token="wrong")
        assert refused.status == 401
        assert api.redis_state() == before

        assert api.get("/healthz", token=None).status == 200
        assert api.get("/readyz", token=None).status == 200
        assert api.get("/api/v1/status").json()["connected"] is True
        # with a token, other Host names are fine (a proxy in front)
        assert api.get("/api/v1/status", headers={"Host": "dblog.example:443"}).status == 200
        metrics = api.get("/metrics")
        assert metrics.status == 200
        assert metrics.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
        feed = api.get("/api/v1/feed?after=0&limit=5")
        assert feed.status == 200 and set(feed.json()) >= {"next", "events"}
        document = api.get("/api/v1/openapi.json").json()
        assert document["openapi"] == "3.1.0"
        assert document["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"
        page = api.get("/", token=None)  # the live view needs no token
        assert (page.status, page.headers["content-type"]) == (200, "text/html; charset=utf-8")
        assert page.body == (STATIC / "index.html").read_bytes()
        for file in sorted(STATIC.iterdir()):
            served = api.get(f"/live/{file.name}", token=None)
            assert served.status == 200, (file, served)
            assert served.headers["content-type"] == CONTENT_TYPES[file.suffix], file
            assert served.body == file.read_bytes()

        created = api.create({"kind": "tables", "tables": [ITEMS]})
        assert api.wait_state(created["id"], ("completed", "failed"))["state"] == "completed"
        assert cli(api.config, "show", created["id"]).returncode == 0
        assert TOKEN not in api.worker.log()


def test_readyz_says_why_only_with_the_token(
    tmp_path: Path, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Workers whose source is unreachable: /readyz is 503 for everyone, but only a caller
    with the token learns why (the reason names the source's port and user); without a
    token configured, nobody does there (GET /api/v1/status has it)."""
    monkeypatch.setenv(TOKEN_ENV, TOKEN)
    check_unready(tmp_path, redis_url, "guarded", TOKEN)
    check_unready(tmp_path, redis_url, "open", None)


def check_unready(tmp_path: Path, redis_url: str, name: str, token: str | None) -> None:
    port = free_port()
    unreachable = f"host=127.0.0.1 port={port} dbname=shop user=dblog_probe_user"
    http = 'listen = "127.0.0.1:0"'
    if token is not None:
        http += f'\ntoken_env = "{TOKEN_ENV}"'
    config = write_config(tmp_path, unreachable, redis_url, [ITEMS], name=name, http=http)
    with Workers(tmp_path / f"{name}.log") as workers:
        worker = workers.start(config, streaming=False)
        wait_for(lambda: "HTTP API on" in worker.log(), 30, "the HTTP API", worker.log)
        found = re.search(r"HTTP API on (http://127\.0\.0\.1:\d+)", worker.log())
        assert found is not None, worker.log()
        api = Api(found.group(1), config, redis_url, worker, token)
        wait_for(lambda: str(port) in str(api.get("/api/v1/status").json().get("last_error")),
                 30, "the source's failure", worker.log)
        if token is not None:
            detailed = api.get("/readyz")
            assert (detailed.status, detailed.json()["ready"]) == (503, False), detailed
            assert detailed.json()["error"].startswith(
                f"the worker is not streaming the log of source {name}: "), detailed
            assert str(port) in detailed.json()["error"]
        for sent in (None, "wrong") if token is not None else (None, TOKEN):
            public = api.get("/readyz", token=sent)
            assert (public.status, public.headers["retry-after"]) == (503, "1"), public
            assert public.json() == {"ready": False, "error": NOT_READY}, public
            assert str(port) not in public.body.decode()
            assert "dblog_probe_user" not in public.body.decode()
        assert worker.alive()


# -- starting, stopping ---------------------------------------------------------------------


def test_port_in_use_refuses_to_start_and_http_can_be_off(
    tmp_path: Path, tables: str, redis_url: str
) -> None:
    with socket.socket() as busy, Workers(tmp_path / "worker.log") as workers:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        config = write_config(tmp_path, tables, redis_url, [ITEMS],
                              http=f'listen = "127.0.0.1:{port}"')
        refused = workers.start(config, streaming=False)
        assert refused.proc is not None
        assert refused.proc.wait(30) == 1
        assert (f"error: http.listen '127.0.0.1:{port}': port {port} is in use"
                in refused.log()), refused.log()
        assert " streaming " not in refused.log()  # it stopped before it connected

        off = write_config(tmp_path, tables, redis_url, [ITEMS],
                           http=f'listen = "127.0.0.1:{port}"\nenabled = false')
        worker = workers.start(off)
        assert worker.alive(), worker.log()
        assert "HTTP API on" not in worker.log()
        wait_for(lambda: "  http: -" in cli(off, "status").stdout, 10, "a status report")
        assert worker.stop() == 0


def test_redis_down_answers_503(api: Api, redis_server: RedisServer) -> None:
    redis_server.kill()  # the redis_url fixture of the next test restarts it
    try:
        for method, path, body in [("GET", "/api/v1/requests", None),
                                   ("GET", "/api/v1/requests/dump-1", None),
                                   ("POST", "/api/v1/requests/dump-1/pause", None),
                                   ("PATCH", "/api/v1/requests/dump-1", {"delay_ms": 1}),
                                   ("POST", "/api/v1/requests", {"kind": "all"})]:
            reply = api.call(method, path, body)
            assert reply.status == 503, (method, path, reply)
            assert reply.error.startswith("Redis is unreachable: "), reply
            assert reply.error.endswith("; try again")
            assert reply.headers["retry-after"] == "1"
        status = api.get("/api/v1/status")
        assert status.status == 200  # what the worker knows, and that Redis is gone
        assert status.json()["redis"]["error"].startswith("Redis is unreachable")
        assert api.get("/healthz").status == 200
        assert api.worker.alive()
    finally:
        redis_server.restart()


# -- conformance to the OpenAPI document -------------------------------------------------


def test_answers_conform_to_the_openapi_document(
    tmp_path: Path, tables: str, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """schemathesis, driven by /api/v1/openapi.json, against a worker with a token: no
    5xx, every answer (status, content type, headers, body) as documented, input the
    document forbids refused, and a request without the token refused."""
    pytest.importorskip("schemathesis")
    monkeypatch.setenv(TOKEN_ENV, TOKEN)
    with Workers(tmp_path / "worker.log") as workers:
        api = start_api(tmp_path, tables, redis_url, workers, token=TOKEN,
                        http=f'listen = "127.0.0.1:0"\ntoken_env = "{TOKEN_ENV}"')
        api.create({"kind": "tables", "tables": [SLOW], "chunk_size": 1,
                    "delay_ms": 3_600_000})
        checks = ("not_a_server_error,status_code_conformance,content_type_conformance,"
                  "response_headers_conformance,response_schema_conformance,"
                  "negative_data_rejection,unsupported_method,allow_header_conformance,"
                  "ignored_auth")
        result = subprocess.run(
            [sys.executable, "-m", "schemathesis.cli", "run",
             f"{api.url}/api/v1/openapi.json", "--header", f"Authorization: Bearer {TOKEN}",
             "--checks", checks, "--max-examples", "5", "--seed", "7", "--workers", "2",
             "--phases", "coverage", "--no-shrink", "--warnings", "off",
             "--report-dir", str(tmp_path / "schemathesis")],
            capture_output=True, text=True, timeout=120, cwd=tmp_path,
        )
        assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
        assert "18 selected / 18 total" in result.stdout, result.stdout
        assert api.worker.alive()


# -- the landing zone's files -------------------------------------------------------------


def test_landing_routes_on_s3(
    tmp_path: Path, tables: str, redis_url: str, monkeypatch: pytest.MonkeyPatch,
    postgres_server: PostgresServer, seaweed_server: SeaweedServer, s3_bucket: str,
) -> None:
    """GET /api/v1/landing and POST /api/v1/landing/compact|retain on a worker that lands
    in a bucket, with a token and a target: the figures per table (and in /metrics), a dry
    run that changes nothing, a compaction, retention that keeps what the target has not
    merged; bad input refused with 400 and nothing changed; the store down: 503, the
    worker alive; without a [target], retention is refused and says why."""
    monkeypatch.setenv(TOKEN_ENV, TOKEN)
    target = postgres_server.create_database(f"target_{int(time.time() * 1000) % 10**9}")
    landing = (f'path = "s3://{s3_bucket}/landing"\n'
               f's3 = {{ endpoint = "{seaweed_server.endpoint}", path_style = true }}\n'
               "compaction = { min_age_s = 0, grace_s = 0 }\nretention = { keep_h = 0 }")
    config = write_config(tmp_path, tables, redis_url, [ITEMS, SLOW, PAIRS], landing=landing,
                          http=f'listen = "127.0.0.1:0"\ntoken_env = "{TOKEN_ENV}"',
                          extra=f'[target]\nkind = "postgresql"\ndsn = "{target}"\n',
                          flush_interval_s=0.02)
    with Workers(tmp_path / "worker.log") as workers:
        worker = workers.start(config)
        found = re.search(r"HTTP API on (http://127\.0\.0\.1:\d+)", worker.log())
        assert found is not None, worker.log()
        api = Api(found.group(1), config, redis_url, worker, TOKEN)
        wait_for(lambda: api.get("/readyz").status == 200, 20, "readyz", worker.log)
        done = api.create({"kind": "tables", "tables": [ITEMS], "chunk_size": 4,
                           "delay_ms": 150})  # a segment a window
        assert api.wait_state(done["id"], ("completed", "failed"))["state"] == "completed"

        def items() -> dict[str, Any]:
            reply = api.get("/api/v1/landing?table=public.items")
            assert reply.status == 200, reply
            document = reply.json()
            assert document["source"] == SOURCE
            assert document["where"] == f"s3://{s3_bucket}/landing"
            [row] = document["tables"]
            assert row["table"] == ITEMS and row["error"] == "", row
            row.pop("oldest_unmerged_age_s")
            return dict(row)

        for path in ("/api/v1/landing", "/api/v1/landing?table=public.items"):
            assert api.get(path, token=None).status == 401
        landed = items()
        # windows 150 ms apart land a segment each on a quiet machine; on a loaded one the
        # sink's flush may take several windows at once: two segments are enough to compact
        assert landed["files"] == landed["active_files"] >= 2
        assert (landed["first_segment"], landed["merged_segment"]) == (1, 0)
        assert landed["oldest_unmerged"] and landed["bytes"] > 0
        everything = api.get("/api/v1/landing").json()["tables"]
        assert {row["table"]: row["files"] for row in everything} == {
            PAIRS: 0, ITEMS: landed["files"], SLOW: 0}  # schema files only: no segment
        metrics = api.get("/metrics").body.decode()
        assert f'dblog_landing_files{{source="{SOURCE}",table="{ITEMS}"}} {landed["files"]}' \
            in metrics, metrics[-3000:]

        bad: list[tuple[str, Any, bytes | None, int, str]] = [
            ("/api/v1/landing/compact", None, b"not json", 400, "JSON"),
            ("/api/v1/landing/compact", None, b"{}", 415, "Content-Type"),
            ("/api/v1/landing/compact", {"tables": ITEMS}, None, 400, "tables must be a list"),
            ("/api/v1/landing/compact", {"dry_run": "yes"}, None, 400, "dry_run must be"),
            ("/api/v1/landing/retain", {"force": True}, None, 400, "unknown field(s) force"),
            ("/api/v1/landing/compact", {"tables": ["items"]}, None, 400, "schema.table"),
            ("/api/v1/landing/compact", [ITEMS], None, 400, "JSON object"),
        ]
        for path, body, raw, status, message in bad:
            typed = {"Content-Type": "application/json"} if raw and status != 415 else {}
            reply = api.call("POST", path, body, raw=raw, headers=typed)
            assert reply.status == status and message in reply.error, (path, body, reply)
        assert api.get("/api/v1/landing?table=bad").status == 400
        assert api.call("POST", "/api/v1/landing/compact", {}, token=None).status == 401
        assert api.get("/api/v1/landing/compact").status == 405
        assert items() == landed

        dry = api.call("POST", "/api/v1/landing/compact", {"dry_run": True, "tables": [ITEMS]})
        assert dry.status == 200, dry
        plan = dry.json()
        assert plan["dry_run"] and plan["ok"] and plan["cleaned_files"] == 0
        assert plan["tables"][0]["compact"][0]["files"] == landed["files"], plan
        assert items() == landed
        kept = api.call("POST", "/api/v1/landing/retain", {"dry_run": True}).json()
        assert kept["tables"][0]["merged_segment"] == 0
        assert kept["tables"][0]["remove_merged"] == []  # the target merged nothing

        done_compact = api.call("POST", "/api/v1/landing/compact", {})
        assert done_compact.status == 200, done_compact
        assert done_compact.json()["tables"][0]["compacted_files"] == landed["files"]
        compacted = items()
        assert compacted["active_files"] == 1 and compacted["files"] == landed["files"] + 1
        assert compacted["last_segment"] == landed["last_segment"]
        removed = api.call("POST", "/api/v1/landing/compact", {}).json()
        assert len(removed["tables"][0]["remove_replaced"]) == landed["files"], removed
        assert items()["files"] == 1

        seaweed_server.kill()
        try:
            for reply in (api.get("/api/v1/landing"),
                          api.call("POST", "/api/v1/landing/compact", {})):
                assert reply.status == 503 and "unreachable" in reply.error, reply
            assert worker.alive()
        finally:
            seaweed_server.restart()
        assert items()["files"] == 1
        assert TOKEN not in worker.log() and seaweed_server.secret_key not in worker.log()

    no_target = tmp_path / "no-target"
    no_target.mkdir()
    alone = write_config(no_target, tables, redis_url, [ITEMS], landing=landing)
    refused = cli(alone, "landing", "retain", check=False)
    assert refused.returncode != 0 and "needs the [target] section" in refused.stderr, refused
