"""The configuration read again while the worker runs: SIGHUP and ``POST /api/v1/reload``.

On both kinds of source: a pattern added by SIGHUP captures (and, with
``dump_new_tables``, dumps) a table that existed before; reloads that change what needs a
restart, or that the source refuses, are refused with one line and change nothing; a
reload over HTTP that drops a table from the list and masks a column is taken: the
dropped table's changes stop landing, the masked column lands hashed, and the same worker
process (the same lease) goes on.
"""

from __future__ import annotations

import hashlib
import hmac
import http.client
import json
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from dblog_worker.landing.parquet import LandingZone, read_events
from dblog_worker.table_patterns import escape
from tests.integration.harness import (
    SOURCE,
    Backend,
    WorkerProcess,
    assert_converged,
    cli,
    wait_for,
    wait_request,
)

KEY = "the reload test's key, 32 bytes."


def _status(config: Path) -> dict[str, Any]:
    document: dict[str, Any] = json.loads(cli(config, "status", "--json").stdout)
    return document


def _reload(url: str) -> tuple[int, dict[str, Any]]:
    address = urlsplit(url)
    connection = http.client.HTTPConnection(address.hostname or "", address.port, timeout=60)
    try:
        connection.request("POST", "/api/v1/reload", body=b"",
                           headers={"Content-Type": "application/json"})
        response = connection.getresponse()
        return response.status, json.loads(response.read())
    finally:
        connection.close()


def _write(config: Path, backend: Backend, tables: list[str], extra: str = "") -> None:
    """Rewrite the configuration file with other tables (and [source] lines)."""
    written = backend.config_path(tables, source_extra=backend.source_extra + "\n" + extra)
    assert written == config


def _events(backend: Backend, table: str) -> list[dict[str, Any]]:
    zone = LandingZone(backend.landing, SOURCE)
    return read_events(zone, table) if table in zone.tables() else []


def test_sighup_and_http_reloads(backend: Backend, monkeypatch: pytest.MonkeyPatch,
                                 worker_process: Callable[..., WorkerProcess]) -> None:
    monkeypatch.setenv("DBLOG_COLUMN_KEY", KEY)
    db = backend.db
    schema = escape(backend.t1.split(".", 1)[0])
    items, old = backend.t1, db.table("auto_old")
    backend.create(items, 5)
    backend.create(old, 40)  # exists before the pattern that will capture it
    config = backend.config_path([escape(items)])
    worker = worker_process(config)
    token = _status(config)["worker"]["token"]
    url = _status(config)["worker"]["http"]
    assert list(_status(config)["tables"]["captured"]) == [items]

    # SIGHUP: a pattern, and dumps of the tables that join
    _write(config, backend, [escape(items), f"{schema}.auto_*"],
           "dump_new_tables = true\nrescan_interval_s = 0.3")
    assert worker.proc is not None
    worker.proc.send_signal(signal.SIGHUP)
    wait_for(lambda: old in _status(config)["tables"]["captured"], 30, f"{old} to join",
             worker.log)
    assert "configuration reloaded: source.tables, source.dump_new_tables, " \
           "source.rescan_interval_s changed" in worker.log()
    dump_id = _status(config)["tables"]["captured"][old]["dump"]
    wait_request(backend.redis_url, SOURCE, dump_id, ["completed"], 60, worker)
    with backend.connect() as session:
        session.run(db.update(old), (10,))
    assert_converged(backend, old)

    # refused: something that needs a restart, and something the source refuses
    good = config.read_text()
    config.write_text(good.replace("heartbeat_interval_s = 1.0", "heartbeat_interval_s = 2")
                      .replace('[redis]\nurl = "', '[redis]\nurl = "redis://127.0.0.1:1/0#'))
    status, body = _reload(url)
    assert status == 409, body
    assert body["error"].startswith("reload refused: [redis] url changed, which needs a "
                                    "restart of the worker") and "\n" not in body["error"]
    assert body["error"].endswith("nothing changed")
    _write(config, backend, [escape(items), f"{schema}.auto_*", f"{schema}.nowhere"])
    status, body = _reload(url)
    assert status == 409 and "nowhere does not exist" in body["error"], body
    assert "\n" not in body["error"]

    # taken over HTTP: items leaves, auto_old's payload is hashed
    _write(config, backend, [f"{schema}.auto_*"], f"""
[source.columns]
key_env = "DBLOG_COLUMN_KEY"
[source.columns."{schema}.auto_*"]
{db.flavour.payload} = "hash"
""")
    sessions = worker.log().count(" streaming ")
    status, body = _reload(url)
    assert status == 200, body
    assert body["changed"] == ["source.tables", "source.dump_new_tables",
                               "source.rescan_interval_s", "[source.columns]"], body
    assert "dump those tables again" in body["notes"][0]
    wait_for(lambda: worker.log().count(" streaming ") > sessions, 30, "a new session",
             worker.log)
    assert list(_status(config)["tables"]["captured"]) == [old]
    landed_items = len(_events(backend, items))
    with backend.connect() as session:
        session.run(db.update(items), (10,))
        session.run(db.update(old), (20,))
    wait_for(lambda: any(json.loads(e["key"]) == [20] and e["origin"] == "log"
                         and e["op"] == "u"
                         and len(json.loads(e["after"])[db.flavour.payload]) == 64
                         for e in _events(backend, old)), 30, "the hashed update", worker.log)
    payload = backend.rows(old)["[20]"][db.flavour.payload]
    update = [e for e in _events(backend, old) if json.loads(e["key"]) == [20]][-1]
    expected = hmac.new(KEY.encode(), json.dumps(payload).encode(), hashlib.sha256).hexdigest()
    assert json.loads(update["after"])[db.flavour.payload] == expected
    assert len(_events(backend, items)) == landed_items  # not captured any more
    assert worker.alive() and _status(config)["worker"]["token"] == token
    assert KEY not in worker.log()
