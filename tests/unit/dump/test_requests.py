"""Dump requests: the lifecycle table, knob checks, key parsing and the Redis encodings."""

from __future__ import annotations

import dataclasses
import itertools
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dblog_worker.dump import requests as requests_module
from dblog_worker.dump.requests import (
    MAX_CHUNK_SIZE,
    MAX_DELAY_MS,
    MAX_KEYS,
    QUEUE_NUMBERS,
    TRANSITIONS,
    DumpKind,
    DumpRequest,
    KeyTexts,
    Priority,
    RequestState,
    TableProgress,
    check_chunk_size,
    check_delay_ms,
    check_priority,
    describe_keys,
    parse_keys,
    queue_score,
    sources_of,
)
from dblog_worker.errors import CorruptRequest, RequestRejected

Q = RequestState.QUEUED
R = RequestState.RUNNING
P = RequestState.PAUSED
DONE = RequestState.COMPLETED
F = RequestState.FAILED
C = RequestState.CANCELLED

ALLOWED = {
    (Q, R), (Q, C), (Q, F),
    (R, P), (R, DONE), (R, F), (R, C),
    (P, R), (P, C), (P, F),
}


# -- transitions -------------------------------------------------------------


def test_constants() -> None:
    assert (MAX_CHUNK_SIZE, MAX_DELAY_MS, MAX_KEYS) == (100_000, 3_600_000, 1_000_000)
    assert requests_module.DEFAULT_CHUNK_SIZE == 5_000


def test_transitions_cover_every_state() -> None:
    assert set(TRANSITIONS) == set(RequestState)


@pytest.mark.parametrize(
    ("source", "target"), list(itertools.product(RequestState, RequestState)),
    ids=lambda s: s.value,
)
def test_every_pair(source: RequestState, target: RequestState) -> None:
    assert (target in TRANSITIONS[source]) == ((source, target) in ALLOWED)


@pytest.mark.parametrize(
    ("state", "terminal"),
    [(Q, False), (R, False), (P, False), (DONE, True), (F, True), (C, True)],
)
def test_terminal_states_have_no_exits(state: RequestState, terminal: bool) -> None:
    assert state.terminal is terminal
    assert (TRANSITIONS[state] == frozenset()) is terminal


@pytest.mark.parametrize(
    ("target", "sources"),
    [
        (Q, frozenset()),
        (R, frozenset({Q, P})),
        (P, frozenset({R})),
        (DONE, frozenset({R})),
        (F, frozenset({Q, R, P})),
        (C, frozenset({Q, R, P})),
    ],
)
def test_sources_of(target: RequestState, sources: frozenset[RequestState]) -> None:
    assert sources_of(target) == sources


@pytest.mark.parametrize(
    ("state", "value"),
    [(Q, "queued"), (R, "running"), (P, "paused"), (DONE, "completed"), (F, "failed"),
     (C, "cancelled")],
)
def test_state_values(state: RequestState, value: str) -> None:
    assert state.value == value
    assert RequestState(value) is state


# -- knobs -------------------------------------------------------------------


@pytest.mark.parametrize("value", [1, 2, 5_000, MAX_CHUNK_SIZE])
def test_chunk_size_accepted(value: int) -> None:
    assert check_chunk_size(value) == value


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (0, "0"), (-1, "-1"), (MAX_CHUNK_SIZE + 1, "100001"), (True, "True"), (False, "False"),
        (1.0, "1.0"), (5.5, "5.5"), ("5", "'5'"), (None, "None"),
    ],
)
def test_chunk_size_refused(value: object, shown: str) -> None:
    with pytest.raises(RequestRejected) as info:
        check_chunk_size(value)  # type: ignore[arg-type]
    assert str(info.value) == f"chunk size must be an integer from 1 to 100000, got {shown}"


@pytest.mark.parametrize("value", [0, 1, 250, MAX_DELAY_MS])
def test_delay_accepted(value: int) -> None:
    assert check_delay_ms(value) == value


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (-1, "-1"), (MAX_DELAY_MS + 1, "3600001"), (True, "True"), (False, "False"),
        (0.0, "0.0"), (1.5, "1.5"), ("0", "'0'"), (None, "None"),
    ],
)
def test_delay_refused(value: object, shown: str) -> None:
    with pytest.raises(RequestRejected) as info:
        check_delay_ms(value)  # type: ignore[arg-type]
    assert str(info.value) == (
        f"delay must be an integer number of milliseconds from 0 to 3600000, got {shown}"
    )


# -- keys --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "arity", "expected"),
    [
        ([1, 2], 1, [("1",), ("2",)]),
        ([[1], [2]], 1, [("1",), ("2",)]),
        ([1, [2]], 1, [("1",), ("2",)]),
        (["a", "b c"], 1, [("a",), ("b c",)]),
        ([-3, 0], 1, [("-3",), ("0",)]),
        ([1.5], 1, [("1.5",)]),
        ([1.0], 1, [("1.0",)]),
        ([12345678901234567890], 1, [("12345678901234567890",)]),
        ([""], 1, [("",)]),
        (["é✓"], 1, [("é✓",)]),
        ([[1, "a"], [2, "b"]], 2, [("1", "a"), ("2", "b")]),
        ([["eu", 1, 2.5]], 3, [("eu", "1", "2.5")]),
        # duplicates removed, first occurrence kept, order kept
        ([2, 1, 2, [1], 3], 1, [("2",), ("1",), ("3",)]),
        ([1, "1"], 1, [("1",)]),  # the same text: the same key
        ([[1, "a"], [1, "b"], [1, "a"]], 2, [("1", "a"), ("1", "b")]),
    ],
)
def test_parse_keys(raw: object, arity: int, expected: list[KeyTexts]) -> None:
    assert parse_keys(raw, arity) == expected


@pytest.mark.parametrize(
    ("raw", "arity", "message"),
    [
        ([[1, 2]], 1, "key #1 [1, 2] has 2 value(s); the primary key has 1 column(s)"),
        ([[1, "a"], 3], 2, "key #2 3 has 1 value(s); the primary key has 2 column(s)"),
        ([[1, "a"], [2, "b"], [3]], 2,
         "key #3 [3] has 1 value(s); the primary key has 2 column(s)"),
        ([[]], 1, "key #1 [] has 0 value(s); the primary key has 1 column(s)"),
        ([None], 1, "key #1: null is not a number or a string; primary-key values are never null"),
        ([1, True], 1,
         "key #2: true is not a number or a string; primary-key values are never null"),
        ([False], 1,
         "key #1: false is not a number or a string; primary-key values are never null"),
        ([{"id": 1}], 1,
         'key #1: {"id": 1} is not a number or a string; primary-key values are never null'),
        ([[1, None]], 2,
         "key #1: null is not a number or a string; primary-key values are never null"),
        ([[[1], 2]], 2,
         "key #1: [1] is not a number or a string; primary-key values are never null"),
    ],
)
def test_parse_keys_refused(raw: object, arity: int, message: str) -> None:
    with pytest.raises(RequestRejected) as info:
        parse_keys(raw, arity)
    assert str(info.value) == message


@pytest.mark.parametrize("raw", [[], None, 1, "1,2", "[1]", {"keys": [1]}, (1, 2), {1, 2}])
def test_parse_keys_needs_a_non_empty_list(raw: object) -> None:
    with pytest.raises(RequestRejected) as info:
        parse_keys(raw, 1)
    assert str(info.value) == 'keys must be a non-empty JSON array, e.g. [1, 2] or [[1, "a"]]'


def test_parse_keys_more_than_max_refused() -> None:
    with pytest.raises(RequestRejected) as info:
        parse_keys([1] * (MAX_KEYS + 1), 1)
    assert str(info.value) == "at most 1000000 keys per request, got 1000001"


def test_parse_keys_max_accepted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(requests_module, "MAX_KEYS", 3)
    assert parse_keys([1, 2, 3], 1) == [("1",), ("2",), ("3",)]
    with pytest.raises(RequestRejected, match="at most 3 keys per request, got 4"):
        parse_keys([1, 2, 3, 4], 1)


@given(st.lists(st.integers(), min_size=1, max_size=50))
def test_parse_keys_integers(values: list[int]) -> None:
    assert parse_keys(values, 1) == [(str(v),) for v in dict.fromkeys(values)]


@given(st.lists(st.tuples(st.text(max_size=5), st.integers()), min_size=1, max_size=30))
def test_parse_keys_composite(values: list[tuple[str, int]]) -> None:
    raw: list[object] = [[text, number] for text, number in values]
    assert parse_keys(raw, 2) == [(t, str(n)) for t, n in dict.fromkeys(values)]


@pytest.mark.parametrize(
    ("keys", "text"),
    [
        ([("1",)], '["1"]'),
        ([("1", "a"), ("2", "b")], '["1", "a"], ["2", "b"]'),
        ([(str(i),) for i in range(5)], '["0"], ["1"], ["2"], ["3"], ["4"]'),
        ([(str(i),) for i in range(7)], '["0"], ["1"], ["2"], ["3"], ["4"], ... (7 keys)'),
    ],
)
def test_describe_keys(keys: list[KeyTexts], text: str) -> None:
    assert describe_keys(keys) == text


# -- DumpRequest -------------------------------------------------------------

BASE = DumpRequest(
    id="dump-7",
    kind=DumpKind.TABLES,
    tables=("public.orders", "public.customers"),
    chunk_size=500,
    delay_ms=25,
    state=RequestState.PAUSED,
    created_at=1700000000.125,
    updated_at=1700000001.5,
)
BASE_FIELDS = {
    "id": "dump-7",
    "kind": "tables",
    "tables": '["public.orders", "public.customers"]',
    "chunk_size": "500",
    "delay_ms": "25",
    "state": "paused",
    "created_at": "1700000000.125",
    "updated_at": "1700000001.5",
    "key_count": "0",
    "parallelism": "1",
    "priority": "normal",
}


def test_to_fields_exact() -> None:
    assert BASE.to_fields() == BASE_FIELDS


def test_a_record_without_a_priority_has_its_kinds() -> None:
    """Records written before priorities (layout 1): urgent for a primary-key dump and a
    pruning dump (a foreign-key cascade's), normal otherwise."""
    fields = {k: v for k, v in BASE_FIELDS.items() if k != "priority"}
    assert DumpRequest.from_fields(fields).priority is Priority.NORMAL
    assert DumpRequest.from_fields({**fields, "prune": "1"}).priority is Priority.URGENT
    keys = {**fields, "kind": "keys", "key_count": "2", "tables": '["public.orders"]'}
    assert DumpRequest.from_fields(keys).priority is Priority.URGENT
    assert DumpRequest.from_fields({**keys, "priority": "background"}).priority is \
        Priority.BACKGROUND
    with pytest.raises(CorruptRequest, match="'soon', not one of urgent, normal, background"):
        DumpRequest.from_fields({**keys, "priority": "soon"})


def test_priorities() -> None:
    assert [(p.value, p.weight, p.rank) for p in Priority] == [
        ("urgent", 16, 0), ("normal", 4, 1), ("background", 1, 2)]
    assert check_priority(" background ") is Priority.BACKGROUND
    for bad, shown in (("soon", '"soon"'), (None, "null"), (3, "3")):
        with pytest.raises(RequestRejected, match=f"urgent, normal, background, got {shown}"):
            check_priority(bad)
    # the queue: by priority, then by number, whatever the number
    assert queue_score(Priority.URGENT, QUEUE_NUMBERS - 1) < queue_score(Priority.NORMAL, 1)
    assert queue_score(Priority.NORMAL, 7) == QUEUE_NUMBERS + 7
    assert BASE.number == 7 and dataclasses.replace(BASE, id="hand-made").number == 0


def test_a_record_without_parallelism_reads_one_chunk_per_window() -> None:
    """Records written before the knob existed have no field: 1."""
    fields = {k: v for k, v in BASE_FIELDS.items() if k != "parallelism"}
    assert DumpRequest.from_fields(fields).parallelism == 1


@pytest.mark.parametrize("value", ["0", "9", "x", "-1"])
def test_a_bad_parallelism_is_a_corrupt_record(value: str) -> None:
    with pytest.raises(CorruptRequest, match="parallelism"):
        DumpRequest.from_fields({**BASE_FIELDS, "parallelism": value})


def test_to_fields_with_optional_fields() -> None:
    request = DumpRequest(
        id="dump-8", kind=DumpKind.KEYS, tables=("public.orders",), chunk_size=1, delay_ms=0,
        state=RequestState.FAILED, created_at=1.0, updated_at=2.0, key_count=3,
        error="table public.orders was dropped", client_token="tok-1",
        extra={"requested_by": "alice"}, parallelism=3,
    )
    assert request.to_fields() == {
        "id": "dump-8", "kind": "keys", "tables": '["public.orders"]', "chunk_size": "1",
        "delay_ms": "0", "state": "failed", "created_at": "1.0", "updated_at": "2.0",
        "key_count": "3", "error": "table public.orders was dropped", "client_token": "tok-1",
        "requested_by": "alice", "parallelism": "3", "priority": "normal",
    }
    assert DumpRequest.from_fields(request.to_fields()) == request


def test_from_fields_defaults() -> None:
    fields = {k: v for k, v in BASE_FIELDS.items() if k != "key_count"}
    request = DumpRequest.from_fields(fields)
    assert request == BASE
    assert (request.key_count, request.error, request.client_token) == (0, None, None)
    assert request.extra == {}


def test_from_fields_keeps_unknown_fields_as_extra() -> None:
    request = DumpRequest.from_fields({**BASE_FIELDS, "future": "x", "note": ""})
    assert request.extra == {"future": "x", "note": ""}
    assert request.to_fields() == {**BASE_FIELDS, "future": "x", "note": ""}


def _as_written(request: DumpRequest) -> DumpRequest:
    """A request as dblog writes it: a primary-key dump has one table and some keys."""
    if request.kind is not DumpKind.KEYS:
        return request
    return dataclasses.replace(request, tables=request.tables[:1],
                               key_count=max(1, request.key_count), prune=False)


_finite = st.floats(min_value=0, max_value=4e9, allow_nan=False, allow_infinity=False)
_text = st.text(max_size=20)


@given(
    st.builds(
        DumpRequest,
        id=st.from_regex(r"dump-[0-9]{1,6}", fullmatch=True),
        kind=st.sampled_from(DumpKind),
        tables=st.lists(st.text(min_size=1, max_size=10), min_size=1, max_size=4).map(tuple),
        chunk_size=st.integers(1, MAX_CHUNK_SIZE),
        delay_ms=st.integers(0, MAX_DELAY_MS),
        state=st.sampled_from(RequestState),
        created_at=_finite,
        updated_at=_finite,
        key_count=st.integers(0, MAX_KEYS),
        error=st.none() | _text,
        client_token=st.none() | _text,
        extra=st.dictionaries(st.from_regex(r"x_[a-z]{1,8}", fullmatch=True), _text,
                              max_size=3),
        prune=st.booleans(),
    ).map(_as_written)
)
def test_fields_round_trip(request: DumpRequest) -> None:
    fields = request.to_fields()
    assert all(isinstance(v, str) for v in fields.values())
    assert DumpRequest.from_fields(fields) == request


# -- TableProgress -----------------------------------------------------------


def test_table_progress_json_exact() -> None:
    assert TableProgress("public.t").to_json() == (
        '{"table": "public.t", "done": false, "last_key": null, "upper_bound": null, '
        '"started": false, "next_key_index": 0, "chunks": 0, "selected": 0, "rows": 0, '
        '"dropped": 0, "missing": 0, "prune_from": null}'
    )


FULL_PROGRESS = TableProgress(
    table="public.t", done=True, last_key=["eu", "7"], upper_bound=["us", "9"], started=True,
    next_key_index=4, chunks=3, selected=12, rows=10, dropped=2, missing=1,
    prune_from="0" * 32 + "00000000000000a1",
)


def test_table_progress_round_trip() -> None:
    text = FULL_PROGRESS.to_json()
    assert json.loads(text) == {
        "table": "public.t", "done": True, "last_key": ["eu", "7"], "upper_bound": ["us", "9"],
        "started": True, "next_key_index": 4, "chunks": 3, "selected": 12, "rows": 10,
        "dropped": 2, "missing": 1, "prune_from": "0" * 32 + "00000000000000a1",
    }
    assert TableProgress.from_json(text) == FULL_PROGRESS


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"table": "public.t"}', TableProgress("public.t")),
        ('{"table": "public.t", "chunks": 2, "from_the_future": [1]}',
         TableProgress("public.t", chunks=2)),
        ('{"table": "public.t", "done": true, "last_key": ["5"], "new": {"a": 1}}',
         TableProgress("public.t", done=True, last_key=["5"])),
    ],
)
def test_table_progress_tolerates_unknown_and_missing(text: str, expected: TableProgress) -> None:
    assert TableProgress.from_json(text) == expected


def _one_arity(progress: TableProgress) -> TableProgress:
    """As dblog writes it: the last key and the upper bound are keys of one table."""
    if progress.last_key is not None and progress.upper_bound is not None:
        arity = min(len(progress.last_key), len(progress.upper_bound))
        return dataclasses.replace(progress, last_key=progress.last_key[:arity],
                                   upper_bound=progress.upper_bound[:arity])
    return progress


@given(
    st.builds(
        TableProgress,
        table=st.text(min_size=1, max_size=10),
        done=st.booleans(),
        last_key=st.none() | st.lists(_text, min_size=1, max_size=3),
        upper_bound=st.none() | st.lists(_text, min_size=1, max_size=3),
        started=st.booleans(),
        next_key_index=st.integers(0, MAX_KEYS),
        chunks=st.integers(0, 10**9),
        selected=st.integers(0, 10**12),
        rows=st.integers(0, 10**12),
        dropped=st.integers(0, 10**12),
        missing=st.integers(0, MAX_KEYS),
    ).map(_one_arity)
)
def test_table_progress_round_trip_any(progress: TableProgress) -> None:
    assert TableProgress.from_json(progress.to_json()) == progress


@pytest.mark.parametrize(("fields", "message"), [
    ({"prune": "yes"}, "'prune': is 'yes', not 0 or 1"),
    ({"prune": "1", "kind": "keys", "key_count": "2"}, "only a whole-table dump"),
    ({"prune": "1", "filter": '{"where": [{"column": "a", "op": "=", "value": 1}]}'},
     "only a whole-table dump"),
])
def test_a_malformed_prune_field_is_named(fields: dict[str, str], message: str) -> None:
    with pytest.raises(CorruptRequest, match=message):
        DumpRequest.from_fields({**BASE_FIELDS, **fields})
    assert DumpRequest.from_fields({**BASE_FIELDS, "prune": "1"}).prune


def test_a_malformed_prune_position_is_named() -> None:
    with pytest.raises(CorruptRequest, match="prune_from is 'abc', not null or a position"):
        TableProgress.from_json('{"table": "public.t", "prune_from": "abc"}', table="public.t")
