"""Records read back from Redis are checked: each bad one is refused with a message that
names the key, the field and what is wrong (CorruptRequest, CorruptState), never another
exception. Table-driven: many bad records, each with the message it must get."""

from __future__ import annotations

import json

import pytest

from dblog_worker.control.store import check_checkpoint
from dblog_worker.dump.requests import (
    REQUEST_REQUIRED,
    DumpKind,
    DumpRequest,
    RequestState,
    TableProgress,
    key_record,
    repair_token,
)
from dblog_worker.errors import CorruptRequest, CorruptState, DumpFailed, TerminalError

KEY = "dblog:v1:src:request:dump-7"
GOOD = {
    "id": "dump-7", "kind": "tables", "tables": '["public.a"]', "chunk_size": "500",
    "delay_ms": "0", "state": "queued", "created_at": "1700000000.5",
    "updated_at": "1700000001.25", "key_count": "0",
}
KEYS_DUMP = {**GOOD, "kind": "keys", "key_count": "3"}
DEEP = "[" * 100_000 + "]" * 100_000  # too deep for the JSON decoder: RecursionError


def test_good_fields_parse() -> None:
    request = DumpRequest.from_fields(GOOD, key=KEY, request_id="dump-7")
    assert (request.id, request.kind, request.tables, request.chunk_size, request.delay_ms,
            request.state) == ("dump-7", DumpKind.TABLES, ("public.a",), 500, 0,
                               RequestState.QUEUED)
    assert (request.created_at, request.updated_at) == (1700000000.5, 1700000001.25)
    assert DumpRequest.from_fields(request.to_fields(), key=KEY) == request


def _refused_request(fields: dict[str, str]) -> CorruptRequest:
    with pytest.raises(CorruptRequest) as caught:
        DumpRequest.from_fields(fields, key=KEY, request_id="dump-7")
    return caught.value


@pytest.mark.parametrize(
    ("change", "field", "reason"),
    [
        ({"kind": "everything"}, "kind", "is 'everything', not one of all, tables, keys"),
        ({"kind": ""}, "kind", "is '', not one of all, tables, keys"),
        ({"chunk_size": "0"}, "chunk_size",
         "chunk size must be an integer from 1 to 100000, got 0"),
        ({"chunk_size": "-5"}, "chunk_size",
         "chunk size must be an integer from 1 to 100000, got -5"),
        ({"chunk_size": str(10**9)}, "chunk_size",
         "chunk size must be an integer from 1 to 100000, got 1000000000"),
        ({"chunk_size": "abc"}, "chunk_size", "is 'abc', not an integer"),
        ({"chunk_size": ""}, "chunk_size", "is '', not an integer"),
        ({"chunk_size": "1e3"}, "chunk_size", "is '1e3', not an integer"),
        ({"chunk_size": " 5"}, "chunk_size", "is ' 5', not an integer"),
        ({"chunk_size": "9" * 40}, "chunk_size", "not an integer"),
        ({"delay_ms": "-1"}, "delay_ms",
         "delay must be an integer number of milliseconds from 0 to 3600000, got -1"),
        ({"delay_ms": "3600001"}, "delay_ms", "from 0 to 3600000, got 3600001"),
        ({"delay_ms": "0.5"}, "delay_ms", "is '0.5', not an integer"),
        ({"state": "zombie"}, "state",
         "is 'zombie', not one of queued, running, paused, completed, failed, cancelled"),
        ({"state": "RUNNING"}, "state", "is 'RUNNING', not one of"),
        ({"tables": "public.a"}, "tables", "'public.a' is not JSON"),
        ({"tables": '{"a": 1}'}, "tables", """is '{"a": 1}', not a JSON array of table names"""),
        ({"tables": "[]"}, "tables", "is '[]', not a JSON array of table names"),
        ({"tables": "[1]"}, "tables", "is '[1]', not a JSON array of table names"),
        ({"tables": '[""]'}, "tables", "not a JSON array of table names"),
        ({"tables": "null"}, "tables", "not a JSON array of table names"),
        ({"tables": DEEP}, "tables", "is not JSON"),
        ({"created_at": "yesterday"}, "created_at", "is 'yesterday', not a Unix time"),
        ({"created_at": "nan"}, "created_at", "is 'nan', not a Unix time"),
        ({"updated_at": "inf"}, "updated_at", "is 'inf', not a Unix time"),
        ({"updated_at": "-5"}, "updated_at", "is '-5', not a Unix time"),
        ({"key_count": "-1"}, "key_count", "is '-1', not an integer from 0 to 1000000"),
        ({"key_count": "many"}, "key_count", "is 'many', not an integer from 0 to 1000000"),
        ({"key_count": str(10**7)}, "key_count", "not an integer from 0 to 1000000"),
        ({"id": "dump-8"}, "id", "is 'dump-8', not 'dump-7' (the id of the key)"),
        ({"kind": "keys", "key_count": "0"}, "key_count",
         "is 0, but a primary-key dump has keys"),
        ({"kind": "keys", "key_count": "2", "tables": '["public.a", "public.b"]'}, "tables",
         "names 2 tables; a primary-key dump names one"),
    ],
)
def test_bad_request_fields_are_refused(change: dict[str, str], field: str,
                                        reason: str) -> None:
    error = _refused_request({**GOOD, **change})
    assert (error.key, error.field, error.request_id) == (KEY, field, "dump-7")
    assert reason in error.reason
    message = str(error)
    assert message.startswith(f"malformed record in Redis: {KEY} field {field!r}: "), message
    assert "the worker fails request dump-7 and runs the next one" in message
    assert isinstance(error, DumpFailed) and isinstance(error, CorruptState)  # the dump fails
    assert isinstance(error, TerminalError)


@pytest.mark.parametrize("missing", REQUEST_REQUIRED)
def test_each_missing_field_is_named(missing: str) -> None:
    fields = {name: value for name, value in GOOD.items() if name != missing}
    error = _refused_request(fields)
    assert (error.field, error.reason) == (missing, "is missing")


def test_an_id_that_is_no_request_id() -> None:
    with pytest.raises(CorruptRequest) as caught:
        DumpRequest.from_fields({**GOOD, "id": "a:b"}, key=KEY)
    assert (caught.value.field, caught.value.request_id) == ("id", "a:b")
    assert "is not a request id like dump-12" in caught.value.reason


def test_a_long_bad_value_is_clipped() -> None:
    error = _refused_request({**GOOD, "kind": "x" * 10_000})
    assert len(str(error)) < 600
    assert "...'" in error.reason


# -- progress ---------------------------------------------------------------------

PROGRESS_KEY = KEY + ":progress"


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("{", "'{' is not JSON"),
        ("[]", "'[]' is not a JSON object"),
        ('"public.a"', "is not a JSON object"),
        ('{"done": false}', "its table is None, not 'public.a'"),
        ('{"table": "public.b"}', "its table is 'public.b', not 'public.a'"),
        ('{"table": 7}', "its table is 7, not 'public.a'"),
        ('{"table": "public.a", "last_key": 5}',
         "last_key is 5, not null or a JSON array of the key's texts"),
        ('{"table": "public.a", "last_key": [5]}', "last_key is [5], not null or a JSON array"),
        ('{"table": "public.a", "last_key": []}', "last_key is [], not null or a JSON array"),
        ('{"table": "public.a", "last_key": "10"}', "last_key is '10', not null"),
        ('{"table": "public.a", "upper_bound": {"id": "1"}}', "upper_bound is {'id': '1'}"),
        ('{"table": "public.a", "upper_bound": ["1", null]}', "upper_bound is ['1', None]"),
        ('{"table": "public.a", "done": "yes"}', "done is 'yes', not true or false"),
        ('{"table": "public.a", "started": 1}', "started is 1, not true or false"),
        ('{"table": "public.a", "chunks": -1}', "chunks is -1, not a count"),
        ('{"table": "public.a", "rows": 1.5}', "rows is 1.5, not a count"),
        ('{"table": "public.a", "selected": true}', "selected is True, not a count"),
        ('{"table": "public.a", "next_key_index": "3"}', "next_key_index is '3', not a count"),
        ('{"table": "public.a", "missing": 1e30}', "missing is 1e+30, not a count"),
        ('{"table": "public.a", "dropped": 99999999999999999999}', "dropped is 9999"),
        ('{"table": "public.a", "last_key": ["1"], "upper_bound": ["1", "2"]}',
         "last_key has 1 value(s) but upper_bound 2: they are keys of one table"),
        (DEEP, "is not JSON"),
    ],
)
def test_bad_progress_is_refused(text: str, reason: str) -> None:
    with pytest.raises(CorruptRequest) as caught:
        TableProgress.from_json(text, key=PROGRESS_KEY, request_id="dump-7", table="public.a")
    error = caught.value
    assert (error.key, error.field, error.request_id) == (PROGRESS_KEY, "public.a", "dump-7")
    assert reason in error.reason, error.reason
    assert str(error).startswith(f"malformed record in Redis: {PROGRESS_KEY} field "
                                 "'public.a': ")


def test_progress_as_dblog_writes_it_parses() -> None:
    progress = TableProgress("public.a", started=True, last_key=["5"], upper_bound=["9"],
                             chunks=2, selected=10, rows=9, dropped=1)
    parsed = TableProgress.from_json(progress.to_json(), key=PROGRESS_KEY, table="public.a")
    assert parsed == progress
    parsed.check(DumpRequest.from_fields(GOOD), key=PROGRESS_KEY)


@pytest.mark.parametrize(
    ("fields", "progress", "reason"),
    [
        (GOOD, TableProgress("public.b"),
         "is not a table of the request (public.a)"),
        (GOOD, TableProgress("public.a", started=True),
         "the table's dump started, but upper_bound is null"),
        (KEYS_DUMP, TableProgress("public.a", next_key_index=4),
         "next_key_index is 4, past the request's 3 keys"),
    ],
)
def test_progress_that_cannot_be_of_the_request(fields: dict[str, str],
                                                progress: TableProgress, reason: str) -> None:
    request = DumpRequest.from_fields(fields)
    with pytest.raises(CorruptRequest) as caught:
        progress.check(request, key=PROGRESS_KEY)
    assert (caught.value.key, caught.value.field) == (PROGRESS_KEY, progress.table)
    assert caught.value.reason == reason


# -- lists of keys --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("10", "'10' is not a JSON array of the key's texts"),
        ('"10"', "is not a JSON array of the key's texts"),
        ("[10]", "'[10]' is not a JSON array of the key's texts"),
        ("[]", "'[]' is not a JSON array"),
        ('["a", null]', "is not a JSON array"),
        ('{"id": "1"}', "is not a JSON array"),
        ("[1, ", "'[1, ' is not JSON"),
        ("", "'' is not JSON"),
    ],
)
def test_bad_key_entries_are_refused(text: str, reason: str) -> None:
    with pytest.raises(CorruptRequest) as caught:
        key_record(text, request_id="dump-7", key=KEY + ":keys", index=41)
    assert (caught.value.key, caught.value.field) == (KEY + ":keys", "#41")
    assert reason in caught.value.reason


def test_key_entries_as_dblog_writes_them() -> None:
    assert key_record('["eu", "1"]', request_id="dump-7", key=KEY, index=0) == ("eu", "1")


# -- the checkpoint -----------------------------------------------------------------

CHECKPOINT_KEY = "dblog:v1:src:checkpoint"


@pytest.mark.parametrize("text", [
    "0/16B3748", "FFFFFFFF/FFFFFFFF", "a/b",
    '{"file":"mariadb-bin.000042","pos":4,"gtid":"0-1-2"}',
    '{"file": "binlog.000001", "pos": 0}',
])
def test_checkpoints_as_dblog_saves_them(text: str) -> None:
    assert check_checkpoint(text, CHECKPOINT_KEY) == text


@pytest.mark.parametrize("text", [
    "", " ", "0/", "/1", "0/16B3748 ", "1/2/3", "123456789/0", "0x1/2", "garbage",
    '{"file": "binlog", "pos": 4}', '{"file": "binlog.000001", "pos": -1}',
    '{"file": "binlog.000001", "pos": "4"}', '{"file": "binlog.000001", "pos": true}',
    '{"file": "binlog.000001", "pos": 4.0}',
    '{"file": "binlog.000001", "pos": 18446744073709551616}',
    '{"file": "binlog.000001", "pos": 4, "gtid": 5}', '{"pos": 4}', "[]", "null", "x" * 300,
])
def test_malformed_checkpoints_are_refused(text: str) -> None:
    with pytest.raises(CorruptState) as caught:
        check_checkpoint(text, CHECKPOINT_KEY)
    error = caught.value
    assert (error.key, error.field) == (CHECKPOINT_KEY, "value")
    assert "is neither a PostgreSQL LSN (like 0/16B3748) nor a binlog checkpoint" in error.reason
    message = str(error)
    assert message.startswith(f"malformed record in Redis: {CHECKPOINT_KEY} field 'value': ")
    assert f"redis-cli HSET {CHECKPOINT_KEY} value <position>" in message
    assert "`dblog reset --yes`" in message
    assert len(message) < 900  # a long value is clipped
    assert not isinstance(error, DumpFailed)  # the worker stops: it cannot stream without one


# -- repair dumps' client tokens ------------------------------------------------------


def test_repair_tokens_one_per_batch_the_same_for_a_replay() -> None:
    first = repair_token("public.a", "0/10", [("1",), ("2",)])
    assert first.startswith("incomplete:public.a:0/10:")
    assert repair_token("public.a", "0/10", [("2",), ("1",)]) == first  # the same batch
    assert repair_token("public.a", "0/10", [("3",)]) != first  # another batch
    assert repair_token("public.b", "0/10", [("1",), ("2",)]) != first
    assert repair_token("public.a", None, [("1",)]) != repair_token("public.a", None, [("2",)])
    assert repair_token("public.a", None, [("1",)]).startswith("incomplete:public.a:None:")
    # keys are compared as texts: ("1", "2") is not ("12",)
    assert repair_token("public.a", None, [("1", "2")]) != repair_token("public.a", None,
                                                                        [("12",)])
    assert json.dumps(sorted([("b",), ("a",)])) == '[["a"], ["b"]]'
