"""Records in Redis that dblog did not write, against a real Redis (and PostgreSQL).

Each test poisons the control plane with raw Redis commands — a request of an unknown
kind, a chunk size out of range, a state that is garbage, progress and key lists that
are not the JSON dblog writes, a key of the wrong type, a checkpoint that is no position —
and shows that every reader refuses the record by name (CorruptRequest, CorruptState),
that the worker fails such a request and runs the next one while the log streams on,
that a malformed checkpoint stops it with what to do, and that `dblog list`, `dblog show`,
`dblog status` and the HTTP API show the record as malformed and go on with the others.
"""

from __future__ import annotations

import http.client
import json
import re
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, cast

import psycopg
import pytest
import redis

from dblog_worker import cli
from dblog_worker import config as config_module
from dblog_worker.admission import queue_repairs
from dblog_worker.dialect import dialect
from dblog_worker.errors import CorruptRequest, CorruptState, LeaseLost, RequestRejected
from dblog_worker.http.server import ControlServer
from dblog_worker.requests import DumpKind, DumpRequest, MalformedRequest
from dblog_worker.state import StateStore
from dblog_worker.telemetry import Telemetry
from tests.integration.harness import (
    Workers,
    create_test_table,
    redis_request,
    replay,
    source_rows,
    wait_for,
    wait_request,
    write_config,
)
from tests.integration.harness import cli as run_cli

SOURCE = "src"
ITEMS = "public.items"
PREFIX = f"dblog:v1:{SOURCE}:"
NOW = "1700000000.0"


def fields(number: int, **change: str) -> dict[str, str]:
    """The hash of a queued table dump of ITEMS, as dblog writes it, with ``change``."""
    return {"id": f"dump-{number}", "kind": "tables", "tables": json.dumps([ITEMS]),
            "chunk_size": "7", "delay_ms": "0", "state": "queued", "created_at": NOW,
            "updated_at": NOW, "key_count": "0", **change}


def put(client: redis.Redis, number: int, hash_fields: Mapping[str, str | bytes] | None,
        *, progress: Mapping[str, str] | None = None, keys: list[str] | None = None,
        active: bool = True) -> None:
    """A request written with raw commands, in one transaction, queued as dump-<number>."""
    request_id = f"dump-{number}"
    pipe = client.pipeline(transaction=True)
    if hash_fields is not None:
        pipe.hset(PREFIX + f"request:{request_id}", mapping=cast(Any, dict(hash_fields)))
    if progress:
        pipe.hset(PREFIX + f"request:{request_id}:progress", mapping=cast(Any, dict(progress)))
    if keys:
        pipe.rpush(PREFIX + f"request:{request_id}:keys", *keys)
    pipe.zadd(PREFIX + "requests", {request_id: number})
    if active:
        pipe.zadd(PREFIX + "active", {request_id: number})
    pipe.set(PREFIX + "seq", number)
    pipe.hset(PREFIX + "meta", mapping={"layout": "1", "created_at": NOW})
    pipe.execute()


def poison(client: redis.Redis) -> None:
    """dump-1 .. dump-9, each malformed in another way, all queued (dump-1 first)."""
    put(client, 1, fields(1, kind="everything"))
    put(client, 2, fields(2, chunk_size="0"))
    put(client, 3, fields(3, state="zombie", chunk_size="abc"))
    put(client, 4, fields(4), progress={ITEMS: json.dumps({"table": ITEMS, "last_key": 5})})
    put(client, 5, fields(5), progress={ITEMS: json.dumps(
        {"table": ITEMS, "started": True, "upper_bound": ["10", "20"]})})
    put(client, 6, fields(6, kind="keys", key_count="2"), keys=['["10"]', "[20]"])
    put(client, 7, None)  # listed, but no hash
    client.set(PREFIX + "request:dump-8", "not a hash")
    put(client, 8, None)
    put(client, 9, {**fields(9), "delay_ms": b"\xff\xfe"})  # not UTF-8


# Where each poisoned request is wrong: (key, field, part of the reason).
WRONG = {
    "dump-1": ("request:dump-1", "kind", "is 'everything', not one of all, tables, keys"),
    "dump-2": ("request:dump-2", "chunk_size", "chunk size must be an integer from 1 to"),
    "dump-3": ("request:dump-3", "chunk_size", "is 'abc', not an integer"),
    "dump-4": ("request:dump-4:progress", ITEMS, "last_key is 5, not null or a JSON array"),
    "dump-7": ("request:dump-7", "", "is listed as a request, but the key does not exist"),
    "dump-8": ("request:dump-8", "", "is not a hash"),
    "dump-9": ("request:dump-9", "delay_ms", "b'\\xff\\xfe' is not UTF-8 text"),
}


@pytest.fixture
def store(redis_url: str) -> Iterator[StateStore]:
    state = StateStore(redis_url, SOURCE, socket_timeout=2.0)
    yield state
    state.close()


@pytest.fixture
def client(redis_url: str) -> Iterator[redis.Redis]:
    with redis.Redis.from_url(redis_url) as connection:
        yield connection


# -- the state store refuses each record by name -------------------------------------


def test_every_reader_names_the_bad_record(store: StateStore, client: redis.Redis) -> None:
    poison(client)
    good = store.create_request(DumpKind.TABLES, [ITEMS], chunk_size=5, delay_ms=0)
    assert good.id == "dump-10"
    for request_id, (key, field, reason) in WRONG.items():
        if request_id == "dump-7":
            with pytest.raises(RequestRejected, match="no dump request 'dump-7'"):
                store.get_request(request_id)  # a plain lookup: no such request
            continue
        with pytest.raises(CorruptRequest) as caught:
            if key.endswith(":progress"):
                store.progress(request_id)
            else:
                store.get_request(request_id)
        error = caught.value
        assert (error.key, error.field, error.request_id) == (PREFIX + key, field, request_id)
        assert reason in error.reason, error
        assert str(error).startswith(f"malformed record in Redis: {PREFIX}{key}")

    queue = {r.id: r for r in store.queue_head(10)}  # the worker's read: malformed, as such
    head = queue["dump-1"]
    assert isinstance(head, MalformedRequest)
    assert (head.error.request_id, head.error.field) == ("dump-1", "kind")
    with pytest.raises(CorruptRequest):  # the strict listing stops at the first
        store.list_requests()

    records = store.list_records()  # the listing of the front ends goes on
    assert [r.id for r in records] == [f"dump-{n}" for n in range(1, 11)]
    malformed = {r.id: r for r in records if isinstance(r, MalformedRequest)}
    assert set(malformed) == {"dump-1", "dump-2", "dump-3", "dump-7", "dump-8", "dump-9"}
    assert malformed["dump-3"].fields["state"] == "zombie"
    assert malformed["dump-9"].fields["delay_ms"] == "\\xff\\xfe"  # shown, escaped
    assert records[-1] == good

    store.quarantine("dump-3", "its record is malformed")
    after = store.get_record("dump-3")  # failed now, but still malformed: shown as such
    assert isinstance(after, MalformedRequest) and after.error.field == "chunk_size"
    assert (after.fields["state"], after.fields["error"]) == ("failed",
                                                              "its record is malformed")


def test_keys_lists_and_the_checkpoint_are_checked(store: StateStore,
                                                   client: redis.Redis) -> None:
    put(client, 1, fields(1, kind="keys", key_count="3"),
        keys=['["1"]', '["2"]', '{"id": 3}'])
    assert store.request_keys("dump-1", 0, 2) == [("1",), ("2",)]
    with pytest.raises(CorruptRequest) as caught:
        store.request_keys("dump-1", 1, 5)
    assert (caught.value.key, caught.value.field) == (PREFIX + "request:dump-1:keys", "#2")
    assert "is not a JSON array of the key's texts" in caught.value.reason
    client.rpush(PREFIX + "request:dump-1:missing", b"[\xff]")
    with pytest.raises(CorruptRequest, match=r"request:dump-1:missing field '#0': .* is not UTF-8"):
        store.missing_keys("dump-1")
    assert store.key_count("dump-1") == 3
    client.set(PREFIX + "request:dump-1:keys", "x")
    with pytest.raises(CorruptRequest, match="is not a list"):
        store.key_count("dump-1")
    with pytest.raises(CorruptRequest, match="is not a list"):
        store.request_keys("dump-1", 0, 1)
    client.set(PREFIX + "request:dump-1:progress", "x")
    with pytest.raises(CorruptRequest, match="request:dump-1:progress: is not a hash"):
        store.progress("dump-1")

    assert store.checkpoint() is None
    for value, reason in [(b"garbage", "is neither a PostgreSQL LSN"),
                          (b"", "is neither a PostgreSQL LSN"),
                          (b"0/1\xff", "is not UTF-8 text")]:
        client.hset(PREFIX + "checkpoint", "value", value)
        with pytest.raises(CorruptState) as bad:
            store.checkpoint()
        assert (bad.value.key, bad.value.field) == (PREFIX + "checkpoint", "value")
        assert reason in bad.value.reason
    client.delete(PREFIX + "checkpoint")
    client.set(PREFIX + "checkpoint", "0/1")
    with pytest.raises(CorruptState, match="checkpoint: is not a hash"):
        store.checkpoint()


def test_quarantine_takes_any_request_out_of_the_queue(store: StateStore,
                                                       client: redis.Redis) -> None:
    poison(client)
    put(client, 11, fields(11, state="completed"))
    assert store.quarantine("dump-3", "bad") == "failed"  # a garbage state, too
    assert redis_request_raw(client, "dump-3")[b"state"] == b"failed"
    assert redis_request_raw(client, "dump-3")[b"error"] == b"bad"
    assert store.quarantine("dump-11", "bad") == "ended"  # an ended request keeps its state
    assert redis_request_raw(client, "dump-11")[b"state"] == b"completed"
    assert store.quarantine("dump-7", "bad") == "none"  # no hash: nothing is made up
    assert not client.exists(PREFIX + "request:dump-7")
    assert store.quarantine("dump-8", "bad") == "string"  # not a hash: left as it is
    assert client.get(PREFIX + "request:dump-8") == b"not a hash"
    active = set(cast(list[str], store.redis.zrange(PREFIX + "active", 0, -1)))
    assert active.isdisjoint({"dump-3", "dump-7", "dump-8", "dump-11"})

    client.hset(PREFIX + "lease", mapping={"token": "5"})
    store.fence(4)  # a worker that lost the lease: refused, nothing changed
    with pytest.raises(LeaseLost):
        store.quarantine("dump-1", "bad")
    assert redis_request_raw(client, "dump-1")[b"state"] == b"queued"


def redis_request_raw(client: redis.Redis, request_id: str) -> dict[bytes, bytes]:
    return cast(dict[bytes, bytes], client.hgetall(PREFIX + f"request:{request_id}"))


# -- repair dumps: one per batch of keys -------------------------------------------------


def test_repair_dumps_one_per_batch_of_keys(store: StateStore, client: redis.Redis) -> None:
    """Two batches under one checkpoint, and under None, are two dumps with their keys; the
    same batch again (a replay) is one."""
    def repair(checkpoint: str | None, *keys: str) -> None:
        queue_repairs(store, dialect("postgresql"), {ITEMS: {(k,): None for k in keys}},
                      checkpoint)

    repair("0/10", "1", "2")
    repair("0/10", "3")
    repair(None, "4")
    repair(None, "5", "6")
    repair("0/10", "2", "1")  # the first batch replayed: no new dump
    repair(None, "5", "6")
    requests = store.list_requests()
    assert [store.request_keys(r.id, 0, 10) for r in requests] == [
        [("1",), ("2",)], [("3",)], [("4",)], [("5",), ("6",)]]
    assert all(r.kind is DumpKind.KEYS and r.tables == (ITEMS,) for r in requests)

    # the request a token names is malformed: the repair is queued anyway, without it
    client.hset(PREFIX + "request:dump-1", "kind", "nonsense")
    repair("0/10", "1", "2")
    last = store.list_records()[-1]
    assert isinstance(last, DumpRequest)
    assert (last.id, last.client_token, store.request_keys(last.id, 0, 10)) == (
        "dump-5", None, [("1",), ("2",)])


# -- the front ends show a malformed record and go on -------------------------------------


def test_cli_and_http_show_malformed_records(store: StateStore, client: redis.Redis,
                                             redis_url: str, tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    poison(client)
    good = store.create_request(DumpKind.TABLES, [ITEMS], chunk_size=5, delay_ms=0)
    client.hset(PREFIX + "checkpoint", "value", "not a position")
    config_path = write_config(tmp_path, "host=127.0.0.1 port=1 dbname=none", redis_url,
                               [ITEMS])

    def run(*args: str) -> tuple[int, str]:
        code = cli.main([*args, "--config", str(config_path)])
        out, err = capsys.readouterr()
        return code, out + err

    code, listing = run("list")
    assert code == 0, listing
    lines = listing.splitlines()
    assert re.match(r"dump-1 +malformed +- ", lines[1]), listing
    assert re.match(r"dump-10 +queued +normal +tables +0/1 +0 +5 ", lines[10]), listing
    assert f"dump-2: malformed record in Redis: {PREFIX}request:dump-2 field 'chunk_size'" \
        in listing
    assert f"dump-4: malformed record in Redis: {PREFIX}request:dump-4:progress" in listing

    code, text = run("list", "--json")
    documents = json.loads(text)
    assert code == 0 and [d["id"] for d in documents] == [f"dump-{n}" for n in range(1, 11)]
    assert documents[2]["malformed"] == {"key": PREFIX + "request:dump-3",
                                         "field": "chunk_size",
                                         "reason": "is 'abc', not an integer"}
    assert documents[9]["state"] == "queued"

    code, shown = run("show", "dump-3")
    assert code == 1, shown
    assert shown.startswith("dump-3: malformed\nerror: malformed record in Redis: ")
    assert "  state: zombie" in shown
    code, shown = run("show", "dump-4", "--json")
    assert (code, json.loads(shown)["malformed"]["field"]) == (1, ITEMS)
    code, shown = run("show", good.id, "--json")
    assert (code, json.loads(shown)["state"]) == (0, "queued")

    code, status = run("status")
    assert code == 0, status
    assert (f"checkpoint is malformed: malformed record in Redis: {PREFIX}checkpoint field "
            "'value'") in status
    code, status = run("status", "--json")
    assert json.loads(status)["checkpoint_error"].startswith("malformed record in Redis")

    config = config_module.load(config_path)
    server = ControlServer(config, Telemetry(SOURCE, kind="postgresql")).start()
    try:
        status_code, listed = get(server.url, "/api/v1/requests")
        assert status_code == 200
        assert [d["id"] for d in listed] == [f"dump-{n}" for n in range(1, 11)]
        assert listed[0]["malformed"]["field"] == "kind"
        assert listed[9]["state"] == "queued"
        status_code, one = get(server.url, "/api/v1/requests/dump-9")
        assert (status_code, one["malformed"]["field"]) == (200, "delay_ms")
        status_code, one = get(server.url, "/api/v1/requests/dump-7")
        assert (status_code, one["malformed"]["field"]) == (200, "")
        status_code, missing = get(server.url, "/api/v1/requests/dump-99")
        assert status_code == 404, missing
        status_code, refused = get(server.url, "/api/v1/requests/dump-2/cancel", "POST")
        assert status_code == 409 and "field 'chunk_size'" in refused["error"]
        status_code, state = get(server.url, "/api/v1/status")
        assert status_code == 200 and state["redis"]["checkpoint"] is None
        assert "not a position" in state["redis"]["checkpoint_error"]
    finally:
        server.stop()


def get(url: str, path: str, method: str = "GET") -> tuple[int, Any]:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        connection.request(method, path)
        response = connection.getresponse()
        return response.status, json.loads(response.read())
    finally:
        connection.close()


# -- a real worker: the bad requests fail, the next ones run, the log streams on -----------


def test_the_worker_fails_bad_requests_and_goes_on(pg_dsn: str, redis_url: str,
                                                   tmp_path: Path) -> None:
    create_test_table(pg_dsn, ITEMS, rows=30)
    config = write_config(tmp_path, pg_dsn, redis_url, [ITEMS])
    with Workers(tmp_path / "worker.log") as workers, \
            redis.Redis.from_url(redis_url) as client, \
            psycopg.connect(pg_dsn, autocommit=True) as conn:
        worker = workers.start(config)
        found = re.search(r"HTTP API on (http://127\.0\.0\.1:\d+)", worker.log())
        assert found is not None, worker.log()
        poison(client)
        conn.execute(f"INSERT INTO {ITEMS} VALUES (1001, nextval('versions'), 'during')")
        good = json.loads(run_cli(config, "dump", "--table", ITEMS, "--chunk-size", "7",
                                  "--json").stdout)
        assert good["id"] == "dump-10"
        done = wait_request(redis_url, SOURCE, good["id"], ["completed", "failed"], 30, worker)
        assert done["state"] == "completed", done

        for request_id in ("dump-1", "dump-2", "dump-3", "dump-4", "dump-9"):
            key, _, reason = WRONG[request_id]
            record = redis_request_raw(client, request_id)
            assert record[b"state"] == b"failed", (request_id, record)
            error = record[b"error"].decode()
            assert error.startswith(f"malformed record in Redis: {PREFIX}{key}"), error
            assert reason in error, error
        refused = redis_request(redis_url, SOURCE, "dump-5")  # its progress does not fit
        assert refused["state"] == "failed"
        assert "has upper_bound ['10', '20'] that does not fit" in refused["error"]
        keys_dump = redis_request(redis_url, SOURCE, "dump-6")  # a key entry is no array
        assert keys_dump["state"] == "failed"
        assert f"{PREFIX}request:dump-6:keys field '#1': '[20]' is not a JSON array" \
            in keys_dump["error"]
        assert client.zrange(PREFIX + "active", 0, -1) == []  # dump-7, dump-8 left the queue

        # a running dump whose record goes bad fails; the next one runs
        # 30 chunks a second apart: still running when its record goes bad, however slow
        # the machine (it fails at its next chunk)
        slow = json.loads(run_cli(config, "dump", "--table", ITEMS, "--chunk-size", "1",
                                  "--delay-ms", "1000", "--json").stdout)
        wait_for(lambda: redis_request(redis_url, SOURCE, slow["id"])["state"] == "running",
                 20, "the slow dump to run", worker.log)
        time.sleep(0.3)
        client.hset(PREFIX + f"request:{slow['id']}", "chunk_size", "many")
        stopped = wait_request(redis_url, SOURCE, slow["id"], ["completed", "failed"], 20,
                               worker)
        assert stopped["state"] == "failed" and "'many', not an integer" in stopped["error"]
        last = json.loads(run_cli(config, "dump", "--table", ITEMS, "--json").stdout)
        assert wait_request(redis_url, SOURCE, last["id"], ["completed", "failed"], 20,
                            worker)["state"] == "completed"

        conn.execute(f"INSERT INTO {ITEMS} VALUES (1002, nextval('versions'), 'after')")
        wait_for(lambda: replay(tmp_path / "landing", SOURCE, ITEMS).rows
                 == source_rows(pg_dsn, ITEMS), 20, "the output to equal the table",
                 worker.log)
        assert worker.alive()
        log = worker.log()
        assert log.count(" streaming ") == 1, log[-3000:]  # one session: no restart loop
        assert "session ended" not in log and "Traceback" not in log, log[-3000:]

        listing = run_cli(config, "list").stdout
        assert re.search(r"^dump-3 +malformed ", listing, re.M), listing
        assert re.search(rf"^{good['id']} +completed +normal +tables +1/1 ", listing,
                         re.M), listing
        shown = run_cli(config, "show", "dump-3", check=False)
        assert shown.returncode == 1 and "  state: failed" in shown.stdout, shown
        status_code, listed = get(found.group(1), "/api/v1/requests")
        assert status_code == 200 and len(listed) == 12
        assert listed[2]["fields"]["state"] == "failed"
        assert listed[9]["state"] == "completed"


def test_a_malformed_checkpoint_stops_the_worker_with_what_to_do(
        pg_dsn: str, redis_url: str, tmp_path: Path) -> None:
    create_test_table(pg_dsn, ITEMS, rows=1)
    config = write_config(tmp_path, pg_dsn, redis_url, [ITEMS])
    with redis.Redis.from_url(redis_url) as client:
        client.hset(PREFIX + "meta", mapping={"layout": "1", "created_at": NOW})
        client.hset(PREFIX + "checkpoint", mapping={"value": "0/16B3748 garbage",
                                                    "updated_at": NOW})
    with Workers(tmp_path / "worker.log") as workers:
        worker = workers.start(config, streaming=False)
        assert worker.proc is not None
        assert worker.proc.wait(30) == 1
    log = worker.log()
    assert "Traceback" not in log, log
    assert (f"error: malformed record in Redis: {PREFIX}checkpoint field 'value': "
            "'0/16B3748 garbage' is neither a PostgreSQL LSN") in log, log
    assert "`dblog reset --yes`" in log and " streaming " not in log
    with psycopg.connect(pg_dsn) as conn:  # nothing was set up: the worker stopped at once
        assert conn.execute("SELECT count(*) FROM pg_replication_slots "
                            "WHERE database = current_database()").fetchone() == (0,)
