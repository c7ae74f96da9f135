"""The one request model: every rule that needs no source, checked when a spec is built."""

from __future__ import annotations

import dataclasses
import json

import pytest

from dblog_worker.dump.requests import DEFAULT_CHUNK_SIZE, MAX_KEYS, DumpKind, Priority
from dblog_worker.dump.spec import MAX_CLIENT_TOKEN, DumpSpec, Knobs
from dblog_worker.errors import RequestRejected


def test_accepted_specs() -> None:
    every = DumpSpec.of("all")
    assert (every.kind, every.tables, every.keys) == (DumpKind.ALL, (), None)
    assert every.table_names(["public.a", "public.b"]) == ("public.a", "public.b")
    assert (every.chunk_size, every.delay_ms, every.client_token) == (DEFAULT_CHUNK_SIZE, 0,
                                                                       None)
    some = DumpSpec.of(" tables ", ["public.b", "public.a", "public.b"], chunk_size=7,
                       delay_ms=3, client_token="t")
    assert some.tables == ("public.b", "public.a")  # order kept, duplicates dropped
    assert some.table_names(["public.x"]) == ("public.b", "public.a")
    keys = DumpSpec.of(DumpKind.KEYS, ["public.a"], [[1, "x"], [2, "y"], [1, "x"]])
    assert keys.key_texts(2) == [("1", "x"), ("2", "y")]
    assert keys.guessed_arity() == 2
    assert DumpSpec.of("keys", ["public.a"], [5, 6]).guessed_arity() == 1
    assert DumpSpec.of("tables", ["public.a"]).key_texts(1) == []


@pytest.mark.parametrize(("arguments", "options", "message"), [
    (("everything",), {}, 'kind must be one of all, tables, keys, got "everything"'),
    ((None,), {}, "kind must be one of all, tables, keys, got null"),
    (("all", ["public.a"]), {}, "kind all dumps every captured table: leave the tables out, "
                                "or use kind tables to dump only public.a"),
    (("all", None, [1]), {}, "keys were given with kind all"),
    (("tables",), {}, "kind tables needs at least one table"),
    (("tables", "public.a"), {}, 'tables must be a non-empty list of "schema.table" names'),
    (("tables", ["public.a", ""]), {}, "tables must be a non-empty list"),
    (("tables", ["public.a", 1]), {}, "tables must be a non-empty list"),
    (("tables", ["public.a"], [1]), {}, "keys were given with kind tables: use kind keys"),
    (("keys", ["public.a"]), {}, "kind keys needs keys"),
    (("keys", ["public.a"], []), {}, "kind keys needs keys"),
    (("keys", ["public.a"], "[1]"), {}, "keys must be a non-empty JSON array"),
    (("keys", ["public.a", "public.b"], [1]), {},
     "a primary-key dump (kind keys) names exactly one table, got 2"),
    (("tables", ["public.a"]), {"chunk_size": 0}, "chunk size must be an integer from 1"),
    (("tables", ["public.a"]), {"chunk_size": True}, "chunk size must be an integer"),
    (("tables", ["public.a"]), {"delay_ms": -1}, "delay must be an integer number"),
    (("tables", ["public.a"]), {"client_token": ""}, "client_token must be a string of 1"),
    (("tables", ["public.a"]), {"client_token": "x" * (MAX_CLIENT_TOKEN + 1)},
     f"client_token must be a string of 1 to {MAX_CLIENT_TOKEN} characters"),
    (("keys", ["public.a"], [1]), {"prune": True}, "a pruning dump reads whole tables: use"),
    (("tables", ["public.a"]), {"prune": True, "where": [["a", "=", "1"]]},
     "a pruning dump reads whole tables: give it no where"),
    (("tables", ["public.a"]), {"prune": "yes"}, "prune must be true or false, got 'yes'"),
])
def test_refused_specs(arguments: tuple[object, ...], options: dict[str, object],
                       message: str) -> None:
    with pytest.raises(RequestRejected) as refused:
        DumpSpec.of(*arguments, **options)  # type: ignore[arg-type]
    assert message in str(refused.value)


def test_a_pruning_dump_is_of_whole_tables() -> None:
    assert DumpSpec.of("all", prune=True).prune
    assert DumpSpec.of("tables", ["public.a"], prune=True).prune
    assert not DumpSpec.of("tables", ["public.a"]).prune


def test_too_many_keys() -> None:
    with pytest.raises(RequestRejected, match=f"at most {MAX_KEYS} keys per request"):
        DumpSpec.of("keys", ["public.a"], list(range(MAX_KEYS + 1)))


def test_a_spec_cannot_be_built_or_changed_invalid() -> None:
    with pytest.raises(RequestRejected, match="kind keys needs keys"):
        DumpSpec(DumpKind.KEYS, ("public.a",))
    spec = DumpSpec(DumpKind.TABLES, ("public.a",))
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.chunk_size = 0  # type: ignore[misc]
    with pytest.raises(RequestRejected, match="chunk size"):
        dataclasses.replace(spec, chunk_size=0)


def test_keys_are_checked_against_the_key_arity() -> None:
    spec = DumpSpec.of("keys", ["public.a"], [[1, 2], [3]])
    with pytest.raises(RequestRejected, match=r"key #2 \[3\] has 1 value\(s\)"):
        spec.key_texts(2)
    with pytest.raises(RequestRejected, match="never null"):
        DumpSpec.of("keys", ["public.a"], [1, None]).key_texts(1)


SPECS = [
    DumpSpec.of("all"),
    DumpSpec.of("tables", ["public.b"], chunk_size=7, delay_ms=3,
                client_token="airflow:dag:run:submit:-1", parallelism=4,
                where=[{"column": "region", "op": "in", "values": ["EU", 3]}],
                from_key=10, to_key=[20], throttle={"max_chunk_ms": 50},
                priority="background"),
    DumpSpec.of("keys", ["public.a"], [[1, "x"], [2, "y"]], priority=" urgent "),
    DumpSpec.of("tables", ["public.b", "public.c"], prune=True),
]


@pytest.mark.parametrize("spec", SPECS, ids=["all", "tables", "keys", "prune"])
def test_a_spec_travels_as_its_json(spec: DumpSpec) -> None:
    """What the DAGs' check task returns is what the operator queues: one spec, its JSON
    read back (or the object, rendered natively) to an equal spec."""
    text = spec.to_json()
    assert DumpSpec.from_json(text) == spec
    assert DumpSpec.from_json(json.loads(text)) == spec


def test_a_spec_json_without_its_keys_takes_them_back() -> None:
    spec = SPECS[2]
    bare = spec.to_json(keys=False)
    assert json.loads(bare)["keys"] is None
    with pytest.raises(RequestRejected, match="kind keys needs keys"):
        DumpSpec.from_json(bare)
    again = DumpSpec.from_json(bare, keys=[[1, "x"], [2, "y"]], client_token="t")
    assert again == dataclasses.replace(spec, client_token="t")


def test_the_priority_of_a_spec() -> None:
    assert DumpSpec.of("all").priority is None
    assert DumpSpec.of("all").queue_priority is Priority.NORMAL
    assert DumpSpec.of("keys", ["public.a"], [1]).queue_priority is Priority.URGENT
    assert DumpSpec.of("keys", ["public.a"], [1], priority="").queue_priority is \
        Priority.URGENT
    # a pruning dump repairs what a cascade two tables away changed: urgent unless told
    assert DumpSpec.of("tables", ["public.a"], prune=True).queue_priority is Priority.URGENT
    assert DumpSpec.of("tables", ["public.a"], prune=True,
                       priority="background").queue_priority is Priority.BACKGROUND
    assert DumpSpec.of("all", priority="background").queue_priority is Priority.BACKGROUND
    with pytest.raises(RequestRejected, match='urgent, normal, background, got "now"'):
        DumpSpec.of("all", priority="now")


@pytest.mark.parametrize(("given", "message"), [
    ("{", "the dump spec is not JSON"),
    ("[1]", "the dump spec must be a JSON object"),
    ('{"kind": "all", "scope": "all"}', "unknown field(s) of a dump spec: scope"),
    ('{"kind": "tables", "tables": "public.a"}', "tables must be a JSON array"),
    ('{"kind": "all", "chunk_size": "7"}', 'chunk_size must be an integer, got "7"'),
    ('{"kind": "all", "client_token": 7}', "client_token must be a string"),
    ('{"kind": "all", "throttle": {"max_chunk_ms": -1}}', "throttle max_chunk_ms"),
    ('{"kind": "all", "throttle": [1]}', "throttle must be an object of limits"),
])
def test_a_bad_spec_json_is_refused(given: str, message: str) -> None:
    with pytest.raises(RequestRejected) as refused:
        DumpSpec.from_json(given)
    assert message in str(refused.value)


def test_knobs_are_checked_when_built() -> None:
    knobs = Knobs.of(delay_ms=0, priority="urgent", throttle={"max_chunk_ms": 0})
    assert (knobs.chunk_size, knobs.delay_ms, knobs.priority, knobs.throttle) == (
        None, 0, Priority.URGENT, {"max_chunk_ms": 0})
    for options, message in [
        ({}, "give at least one of chunk_size, delay_ms, parallelism, throttle, priority"),
        ({"priority": ""}, "give at least one of"),
        ({"chunk_size": 0}, "chunk size must be an integer from 1"),
        ({"parallelism": 9}, "parallelism must be an integer from 1 to 8"),
        ({"priority": "later"}, "priority must be one of urgent, normal, background"),
        ({"throttle": {"max_lag": 1}}, "unknown throttle limit 'max_lag'"),
    ]:
        with pytest.raises(RequestRejected) as refused:
            Knobs.of(**options)  # type: ignore[arg-type]
        assert message in str(refused.value)
