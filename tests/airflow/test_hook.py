"""DblogHook against a real Redis (and, for the source checks, a real PostgreSQL): the
connection read into a Redis URL, dumps of every scope, client-token idempotency, control
commands, and no password in any log line or message."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest
import redis
from airflow.sdk import Connection
from dblog_airflow.hooks.dblog import (
    DblogHook,
    DblogSettings,
    as_int,
    as_key,
    as_keys,
    as_tables,
    as_where,
    redis_url,
)

from dblog_worker.errors import ConfigError, CorruptRequest, RequestRejected, StateUnavailable
from dblog_worker.requests import (
    DEFAULT_CHUNK_SIZE,
    DumpKind,
    MalformedRequest,
    Priority,
    RequestState,
)
from dblog_worker.state import StateStore
from tests.airflow.conftest import DblogConnection
from tests.integration.harness import write_config
from tests.services import free_port

SOURCE = "shop"
SECRET = "s3cr3t/P@ss word"  # characters a URL must quote


def unreachable_dsn() -> str:
    return f"host=127.0.0.1 port={free_port()} dbname=shop user=dblog"


def settings(**fields: Any) -> DblogSettings:
    extra = fields.pop("extra", {"source": SOURCE})
    conn = Connection(conn_id="c", conn_type="dblog", **fields)
    return DblogSettings.from_connection(conn, extra)


# -- the connection ------------------------------------------------------------------


def test_redis_url_from_connection_fields() -> None:
    plain = settings(host="redis.example", port=6380, schema="3")
    assert (plain.redis_url, plain.safe_redis_url) == ("redis://redis.example:6380/3",) * 2
    assert settings(host="h").redis_url == "redis://h:6379/0"
    secret = settings(host="h", password=SECRET, login="dblog", schema="2",
                      extra={"source": SOURCE, "ssl": True, "config": "/etc/dblog/shop.toml"})
    assert secret.redis_url == "rediss://dblog:s3cr3t%2FP%40ss%20word@h:6379/2"
    assert secret.safe_redis_url == "rediss://dblog:***@h:6379/2"
    assert secret.config_path == "/etc/dblog/shop.toml"
    assert SECRET not in repr(secret) and "s3cr3t" not in repr(secret)
    assert settings(host="h", password="pw").redis_url == "redis://:pw@h:6379/0"
    assert settings(host="::1").redis_url == "redis://[::1]:6379/0"
    # the fields a connection form stores, prefixed
    form = settings(host="h", extra={"extra__dblog__source": "shop", "extra__dblog__ssl": "true"})
    assert (form.source, form.redis_url) == ("shop", "rediss://h:6379/0")


@pytest.mark.parametrize(("fields", "message"), [
    ({"schema": "0"}, "has no host"),
    ({"host": "h", "schema": "db1"}, "not a Redis database number"),
    ({"host": "h", "extra": {}}, 'has no "source" in its extra'),
    ({"host": "h", "extra": {"source": "Shop-1"}}, "not a dblog source name"),
    ({"host": "h", "extra": {"source": "shop", "config": 3}}, "must be the path"),
])
def test_connection_problems_are_explained(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        settings(**fields)


def test_url_built_as_redis_parses_it() -> None:
    url = redis_url(host="h", port=1, login="u:x", password=SECRET, database=4, ssl=False)
    with redis.Redis.from_url(url) as client:
        kwargs = client.connection_pool.connection_kwargs
    assert (kwargs["username"], kwargs["password"], kwargs["db"]) == ("u:x", SECRET, 4)


def test_password_is_never_logged_nor_in_messages(
    redis_url: str, dblog_connection: DblogConnection, log_text: Callable[[], str],
) -> None:
    with redis.Redis.from_url(redis_url) as admin:
        admin.config_set("requirepass", SECRET)
    try:
        dblog_connection(redis_url, SOURCE, password=SECRET)
        hook = DblogHook()
        request = hook.submit_dump("tables", ["public.a"])
        assert hook.get_request(request.id).state is RequestState.QUEUED
        ok, message = hook.test_connection()
        assert ok, message
        assert ":***@" in message

        dblog_connection(redis_url, SOURCE, password="wr0ng-" + SECRET, conn_id="wrong")
        wrong = DblogHook("wrong")
        with pytest.raises(StateUnavailable) as refused:
            wrong.submit_dump("tables", ["public.a"])
        ok, message = wrong.test_connection()
        assert not ok
        logged = log_text()
        texts = [logged, message, str(refused.value), repr(refused.value),
                 repr(hook.settings), repr(wrong.settings)]
        assert "dblog source shop at redis://:***@127.0.0.1:" in logged
        assert "dump-1 queued: tables dump of public.a" in logged
        for text in texts:
            assert "s3cr3t" not in text and "s3cr3t%2F" not in text
    finally:
        with redis.Redis.from_url(redis_url, password=SECRET) as admin:
            admin.config_set("requirepass", "")


def test_test_connection_reports_an_unreachable_redis(
        dblog_connection: DblogConnection) -> None:
    dblog_connection(f"redis://127.0.0.1:{free_port()}/0", SOURCE)
    ok, message = DblogHook().test_connection()
    assert not ok
    assert "does not answer" in message


# -- templated values ----------------------------------------------------------------


def test_templated_values_are_read_back() -> None:
    assert as_tables("public.a") == ["public.a"]
    assert as_tables("['public.a', 'public.b', 'public.a']") == ["public.a", "public.b"]
    assert as_tables('["public.a"]') == as_tables(("public.a",)) == ["public.a"]
    assert as_tables("") == as_tables(None) == []
    # names exactly as given (a PostgreSQL name may end with a space), and as a template
    # renders a list of them (Python's repr)
    odd = ["public.t ", 'public.a\'b"c', "public.dot.ted %s", "s.naïve ☃"]
    assert as_tables(repr(odd)) == as_tables(json.dumps(odd)) == as_tables(odd) == odd
    assert as_tables("public.t ") == ["public.t "]
    assert as_keys("[1, 2]") == [1, 2]
    assert as_keys("[['1', 'a']]") == as_keys([("1", "a")]) == [["1", "a"]]
    assert as_keys("") is None and as_keys(None) is None
    assert as_int("5000", "chunk size") == 5000 and as_int(7, "delay") == 7
    condition = {"column": "region", "op": "in", "values": ["EU", "US"]}
    assert as_where(json.dumps([condition])) == as_where(repr([condition])) == [condition]
    assert as_where(condition) == [condition]  # one condition
    assert as_where("") is None and as_where(None) is None
    assert as_key("10", "from_key") == 10 and as_key(' abc ', "from_key") == "abc"
    assert as_key('[7, "EU"]', "to_key") == as_key("[7, 'EU']", "to_key") == [7, "EU"]
    assert as_key("", "to_key") is None and as_key([1], "to_key") == [1]
    for bad, call in [("[1, 2", as_keys), ('{"a": 1}', as_keys), ("[1, 2]", as_tables),
                      ("5k", lambda v: as_int(v, "chunk size")),
                      (True, lambda v: as_int(v, "delay"))]:
        with pytest.raises(RequestRejected):
            call(bad)


# -- dumps -----------------------------------------------------------------------------


@pytest.fixture
def hook(redis_url: str, dblog_connection: DblogConnection) -> DblogHook:
    dblog_connection(redis_url, SOURCE)
    return DblogHook()


@pytest.fixture
def store(redis_url: str) -> StateStore:
    return StateStore(redis_url, SOURCE)


def test_submit_tables_and_keys(hook: DblogHook, store: StateStore) -> None:
    tables = hook.submit_dump("tables", '["public.a", "public.b"]', chunk_size="200",
                              delay_ms=5)
    saved = store.get_request(tables.id)
    assert (saved.kind, saved.tables, saved.chunk_size, saved.delay_ms) == (
        DumpKind.TABLES, ("public.a", "public.b"), 200, 5)
    keys = hook.submit_dump("keys", ["public.a"], keys='[[1, "x"], [2, "y"], [1, "x"]]')
    saved = store.get_request(keys.id)
    assert (saved.kind, saved.key_count, saved.chunk_size) == (DumpKind.KEYS, 2,
                                                               DEFAULT_CHUNK_SIZE)
    assert store.request_keys(keys.id, 0, 10) == [("1", "x"), ("2", "y")]
    # "all" with tables named is refused: "all" is every captured table
    with pytest.raises(RequestRejected, match="kind all dumps every captured table"):
        hook.submit_dump("all", ["public.a"])
    # priorities: the kind's by default (keys: urgent), or as given, changed while it runs
    assert (tables.priority, keys.priority) == (Priority.NORMAL, Priority.URGENT)
    backfill = hook.submit_dump("tables", ["public.b"], priority="background")
    assert store.get_request(backfill.id).priority is Priority.BACKGROUND
    assert [r.id for r in store.queue_head(9)] == [keys.id, tables.id, backfill.id]
    assert hook.set_knobs(backfill.id, priority="urgent").priority is Priority.URGENT
    assert [r.id for r in store.queue_head(9)] == [keys.id, backfill.id, tables.id]
    with pytest.raises(RequestRejected, match="priority must be one of"):
        hook.submit_dump("tables", ["public.a"], priority="asap")


@pytest.mark.parametrize(("scope", "tables", "keys", "message"), [
    ("everything", ["public.a"], None, "kind must be one of all, tables, keys"),
    ("tables", [], None, "kind tables needs at least one table"),
    ("all", [], None, 'scope "all" needs the captured tables'),
    ("keys", ["public.a"], None, "kind keys needs keys"),
    ("tables", ["public.a"], [1], "use kind keys"),
    ("keys", ["public.a", "public.b"], [1], "exactly one table"),
    ("keys", ["public.a"], [[1, 2], [3]], "has 1 value"),
    ("keys", ["public.a"], "[1, null]", "never null"),
])
def test_refused_requests_queue_nothing(hook: DblogHook, store: StateStore, scope: str,
                                        tables: list[str], keys: object, message: str) -> None:
    with pytest.raises(RequestRejected, match=message):
        hook.submit_dump(scope, tables, keys)
    assert store.list_requests() == []


def test_submit_a_filtered_dump(hook: DblogHook, store: StateStore,
                                log_text: Callable[[], str]) -> None:
    request = hook.submit_dump(
        "tables", ["public.a"], where='[{"column": "region", "op": "in", "values": ["EU", "US"]},'
                                      ' {"column": "deleted_at", "op": "is null"}]',
        from_key="100", to_key="[200]")
    row_filter = store.get_request(request.id).row_filter
    assert row_filter is not None
    assert row_filter.describe() == ('region in ("EU", "US") AND deleted_at is null AND '
                                     'key >= ["100"] AND key <= ["200"]')
    assert (f'{request.id} queued: tables dump of public.a where region in ("EU", "US") AND '
            "deleted_at is null") in log_text()
    every = hook.submit_dump("tables", ["public.a", "public.b"],
                             where={"column": "qty", "op": ">", "value": 3})
    assert store.get_request(every.id).row_filter.describe() == 'qty > "3"'  # type: ignore[union-attr]


@pytest.mark.parametrize(("scope", "tables", "keys", "rows", "message"), [
    ("tables", ["public.a", "public.b"], None, {"from_key": 1},
     r"a key range \(from_key, to_key\) is of one table's key: use kind tables with one "
     "table, got 2 tables"),
    ("keys", ["public.a"], [1], {"where": '[["region", "=", "EU"]]'},
     "a primary-key dump reads the keys it names"),
    ("tables", ["public.a"], None, {"where": '[{"column": "a", "op": "like", "value": "x"}]'},
     "op must be one of"),
    ("tables", ["public.a"], None, {"where": "region = EU"}, "where conditions are not valid"),
    ("tables", ["public.a"], None, {"from_key": "[1, 2]", "to_key": 3},
     "from_key has 2 value"),
])
def test_refused_filters_queue_nothing(hook: DblogHook, store: StateStore, scope: str,
                                       tables: list[str], keys: object, rows: dict[str, Any],
                                       message: str) -> None:
    with pytest.raises(RequestRejected, match=message):
        hook.submit_dump(scope, tables, keys, **rows)
    assert store.list_requests() == []


def test_knobs_are_checked(hook: DblogHook) -> None:
    with pytest.raises(RequestRejected, match="chunk size must be an integer from 1"):
        hook.submit_dump("tables", ["public.a"], chunk_size=0)
    with pytest.raises(RequestRejected, match="delay must be"):
        hook.submit_dump("tables", ["public.a"], delay_ms=-1)


def test_client_token_gives_one_request(hook: DblogHook, store: StateStore,
                                        log_text: Callable[[], str]) -> None:
    first = hook.submit_dump("tables", ["public.a"], client_token="t-1")
    again = hook.submit_dump("tables", ["public.a"], client_token="t-1")
    other = hook.submit_dump("tables", ["public.a"], client_token="t-2")
    assert first.id == again.id != other.id
    assert [r.id for r in store.list_requests()] == [first.id, other.id]
    assert "client token t-1 was used before" in log_text()


def test_all_takes_the_tables_of_the_configuration(
    tmp_path: Path, redis_url: str, dblog_connection: DblogConnection, store: StateStore,
    log_text: Callable[[], str],
) -> None:
    config = write_config(tmp_path, unreachable_dsn(), redis_url, ["public.a", "public.b"],
                          name=SOURCE)
    dblog_connection(redis_url, SOURCE, config)
    hook = DblogHook()
    request = hook.submit_dump("all")
    assert store.get_request(request.id).tables == ("public.a", "public.b")
    logged = log_text()
    assert "source shop (" in logged and "is unreachable, so the tables and keys" in logged
    with pytest.raises(RequestRejected, match=r"table public\.c is not captured by source"):
        hook.submit_dump("tables", ["public.c"])


def test_configuration_of_another_source_is_refused(
        tmp_path: Path, redis_url: str, dblog_connection: DblogConnection) -> None:
    config = write_config(tmp_path, unreachable_dsn(), redis_url, ["public.a"], name="other")
    dblog_connection(redis_url, SOURCE, config)
    with pytest.raises(ConfigError, match=r"its configuration .* is of source 'other'"):
        DblogHook().submit_dump("all")
    dblog_connection(redis_url, SOURCE, tmp_path / "missing.toml")
    with pytest.raises(ConfigError, match="does not exist"):
        DblogHook().submit_dump("all")


def test_source_checks_tables_and_keys(
    tmp_path: Path, pg_dsn: str, redis_url: str, dblog_connection: DblogConnection,
    store: StateStore,
) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE items (id bigint, kind text, PRIMARY KEY (id, kind))")
        conn.execute("CREATE TABLE notes (body text)")
    config = write_config(tmp_path, pg_dsn, redis_url, ["public.items", "public.notes"],
                          name=SOURCE)
    dblog_connection(redis_url, SOURCE, config)
    hook = DblogHook()
    with pytest.raises(RequestRejected, match="has 1 value"):
        hook.submit_dump("keys", ["public.items"], [1, 2])
    with pytest.raises(RequestRejected, match="does not fit column id"):
        hook.submit_dump("keys", ["public.items"], [["x", "a"]])
    with pytest.raises(RequestRejected, match="notes"):
        hook.submit_dump("tables", ["public.notes"])
    request = hook.submit_dump("keys", ["public.items"], [[1, "a"], [2, "b"]])
    assert store.request_keys(request.id, 0, 10) == [("1", "a"), ("2", "b")]
    # a filter is checked against the table's columns and key
    with pytest.raises(RequestRejected, match=r"public\.items has no column 'region'"):
        hook.submit_dump("tables", ["public.items"], where=[["region", "=", "EU"]])
    with pytest.raises(RequestRejected, match="from_key has 1 value"):
        hook.submit_dump("tables", ["public.items"], from_key=1)
    filtered = hook.submit_dump("tables", ["public.items"], where=[["kind", "=", "a"]],
                                from_key='[1, "a"]')
    assert store.get_request(filtered.id).row_filter.describe() == (  # type: ignore[union-attr]
        'kind = "a" AND key >= ["1", "a"]')


# -- control ---------------------------------------------------------------------------


def test_control_commands_change_the_request(hook: DblogHook, store: StateStore) -> None:
    request = hook.submit_dump("tables", ["public.a"])
    with pytest.raises(RequestRejected, match="is queued; it cannot become paused"):
        hook.pause(request.id)
    store.transition(request.id, RequestState.RUNNING)
    assert hook.pause(request.id) is RequestState.RUNNING
    assert store.get_request(request.id).state is RequestState.PAUSED
    assert hook.resume(request.id) is RequestState.PAUSED
    changed = hook.set_knobs(request.id, chunk_size="100", delay_ms=20)
    assert (changed.chunk_size, changed.delay_ms) == (100, 20)
    assert hook.cancel(request.id) is RequestState.RUNNING
    assert store.get_request(request.id).state is RequestState.CANCELLED
    with pytest.raises(RequestRejected, match="knobs are final"):
        hook.set_knobs(request.id, chunk_size=10)
    with pytest.raises(RequestRejected, match="no dump request 'dump-99'"):
        hook.get_request("dump-99")


def test_malformed_requests_are_shown_as_such(hook: DblogHook, store: StateStore) -> None:
    first = hook.submit_dump("tables", "public.a")
    second = hook.submit_dump("tables", "public.b")
    store.redis.hset(store.key("request", first.id), "state", "zombie")
    with pytest.raises(CorruptRequest, match="field 'state': is 'zombie'"):
        hook.get_request(first.id)
    record = hook.get_record(first.id)
    assert isinstance(record, MalformedRequest)
    assert (record.error.key, record.error.field) == (store.key("request", first.id), "state")
    assert record.fields["state"] == "zombie"
    assert hook.list_requests() == [record, store.get_request(second.id)]
    assert hook.get_record(second.id) == second
    store.redis.hset(store.key("request", second.id, "progress"), "public.b", "{")
    with pytest.raises(CorruptRequest, match=r":progress field 'public.b': '\{' is not JSON"):
        hook.progress(second.id)
