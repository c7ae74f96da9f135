"""The one request model: every rule that needs no source, checked when a spec is built."""

from __future__ import annotations

import dataclasses

import pytest

from dblog_worker.dump_spec import MAX_CLIENT_TOKEN, DumpSpec
from dblog_worker.errors import RequestRejected
from dblog_worker.requests import DEFAULT_CHUNK_SIZE, MAX_KEYS, DumpKind


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
