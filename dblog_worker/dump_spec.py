"""What a user asks to dump, and to change in a dump, checked once: the one request model
of every front end.

The CLI, the HTTP API, the Airflow hook and the DAG forms turn what they were given
(arguments, a JSON body, a form) into a :class:`DumpSpec`; building it checks every rule
that does not need the source (the kind and its tables and keys, the knobs, the priority,
the client token) and raises :class:`~dblog_worker.errors.RequestRejected` with what to do.
:func:`dblog_worker.control.create_dump` then checks it against the source and queues it.
A spec travels as its JSON (:meth:`DumpSpec.to_json`, :meth:`DumpSpec.from_json`): the
DAGs' *check* task builds it once and the operator that queues it reads it back, checked
the same way, without a second model.

A change of a running dump's knobs is a :class:`Knobs`, checked the same way, which
:func:`dblog_worker.control.set_knobs` applies.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import cast

from dblog_worker.errors import RequestRejected
from dblog_worker.requests import (
    DEFAULT_CHUNK_SIZE,
    MAX_KEYS,
    DumpKind,
    KeyTexts,
    Priority,
    check_chunk_size,
    check_delay_ms,
    check_parallelism,
    check_priority,
    parse_keys,
)
from dblog_worker.row_filter import RowFilter
from dblog_worker.throttle import LIMITS, NO_THROTTLE, ThrottlePolicy, check_limit

MAX_CLIENT_TOKEN = 200
KEYS_EXAMPLE = '[1, 2] or [[1, "a"], [2, "b"]]'


@dataclass(frozen=True, slots=True)
class DumpSpec:
    """A dump request before it is queued. ``tables`` is empty only for kind ``all`` (every
    captured table); ``keys`` (JSON-like, as given) only for kind ``keys``."""

    kind: DumpKind
    tables: tuple[str, ...] = ()
    keys: tuple[object, ...] | None = None
    chunk_size: int = DEFAULT_CHUNK_SIZE
    delay_ms: int = 0
    client_token: str | None = None
    parallelism: int = 1
    row_filter: RowFilter | None = None
    throttle: ThrottlePolicy = NO_THROTTLE
    prune: bool = False  # also remove the rows the source does not have (whole tables)
    priority: Priority | None = None  # None: the kind's (Priority.default_for)

    def __post_init__(self) -> None:
        if self.priority is not None:
            check_priority(self.priority)
        check_chunk_size(self.chunk_size)
        check_delay_ms(self.delay_ms)
        check_parallelism(self.parallelism)
        _check_tables(self.kind, self.tables)
        _check_keys(self.kind, self.keys)
        _check_filter(self.kind, self.tables, self.row_filter)
        _check_prune(self.kind, self.row_filter, self.prune)
        if self.client_token is not None and not (
                isinstance(self.client_token, str)
                and 1 <= len(self.client_token) <= MAX_CLIENT_TOKEN):
            raise RequestRejected(
                f"client_token must be a string of 1 to {MAX_CLIENT_TOKEN} characters")

    @classmethod
    def of(cls, kind: object, tables: Sequence[str] | None = None,
           keys: Sequence[object] | None = None, *, chunk_size: int = DEFAULT_CHUNK_SIZE,
           delay_ms: int = 0, client_token: str | None = None,
           parallelism: int = 1, where: object = None, from_key: object = None,
           to_key: object = None,
           throttle: Mapping[str, object] | None = None, prune: object = False,
           priority: object = None) -> DumpSpec:
        """A spec from a front end's values: ``kind`` as text (``all``, ``tables``,
        ``keys``), tables in the order given (duplicates dropped), a filter's conditions
        and key range as :meth:`RowFilter.of` takes them, ``priority`` by its name (None
        or empty: the kind's)."""
        try:
            dump_kind = DumpKind(kind.strip() if isinstance(kind, str) else str(kind))
        except ValueError:
            raise RequestRejected(
                f"kind must be one of {', '.join(k.value for k in DumpKind)}, got "
                f"{json.dumps(kind) if isinstance(kind, str | None) else repr(kind)}"
            ) from None
        if tables is not None and (isinstance(tables, str) or not all(
                isinstance(t, str) and t for t in tables)):
            raise RequestRejected('tables must be a non-empty list of "schema.table" names')
        if keys is not None and (isinstance(keys, str) or not isinstance(keys, Sequence)):
            raise RequestRejected(f"keys must be a non-empty JSON array such as {KEYS_EXAMPLE}")
        if not isinstance(prune, bool):
            raise RequestRejected(f"prune must be true or false, got {prune!r}")
        return cls(dump_kind, tuple(dict.fromkeys(tables or ())),
                   None if keys is None else tuple(keys), chunk_size, delay_ms, client_token,
                   parallelism, RowFilter.of(where, from_key, to_key),
                   ThrottlePolicy.of(throttle), prune,
                   None if priority in (None, "") else check_priority(priority))

    @property
    def queue_priority(self) -> Priority:
        """The priority the request is queued with."""
        return self.priority or Priority.default_for(self.kind, self.prune)

    def to_json(self, *, keys: bool = True) -> str:
        """The spec as JSON (:data:`SPEC_FIELDS`), which :meth:`from_json` reads back to an
        equal spec; without the keys (``keys=False``) when they travel apart (a file)."""
        document: dict[str, object] = {
            "kind": self.kind.value, "tables": list(self.tables),
            "keys": list(self.keys) if keys and self.keys is not None else None,
            "chunk_size": self.chunk_size, "delay_ms": self.delay_ms,
            "parallelism": self.parallelism, "client_token": self.client_token,
            "throttle": self.throttle.limits() if self.throttle.on else None,
            "prune": self.prune,
            "priority": None if self.priority is None else self.priority.value,
            **(self.row_filter.to_json() if self.row_filter is not None
               else {"where": None, "from_key": None, "to_key": None}),
        }
        return json.dumps(document, ensure_ascii=False)

    @classmethod
    def from_json(cls, given: str | Mapping[str, object], **overrides: object) -> DumpSpec:
        """A spec from its JSON text, or the object itself (a template rendered natively),
        checked like any other; ``overrides`` replace fields (the keys read from a file,
        the client token of a task)."""
        if isinstance(given, str):
            try:
                given = json.loads(given)
            except (ValueError, RecursionError) as exc:
                raise RequestRejected(f"the dump spec is not JSON ({exc}): pass "
                                      "DumpSpec.to_json()'s text") from None
        if not isinstance(given, Mapping):
            raise RequestRejected(f"the dump spec must be a JSON object of "
                                  f"{', '.join(SPEC_FIELDS)}, got {type(given).__name__}")
        document = {**given, **overrides}
        unknown = sorted(set(document) - set(SPEC_FIELDS))
        if unknown:
            raise RequestRejected(f"unknown field(s) of a dump spec: {', '.join(unknown)}; "
                                  f"the fields are {', '.join(SPEC_FIELDS)}")
        keys = document.get("keys")
        tables = document.get("tables")
        return cls.of(document.get("kind"),
                      cast("list[str] | None", _sequence(tables, "tables")),
                      _sequence(keys, "keys"),
                      chunk_size=_int_field(document, "chunk_size", DEFAULT_CHUNK_SIZE),
                      delay_ms=_int_field(document, "delay_ms", 0),
                      client_token=_optional_text(document, "client_token"),
                      parallelism=_int_field(document, "parallelism", 1),
                      where=document.get("where"), from_key=document.get("from_key"),
                      to_key=document.get("to_key"),
                      throttle=_throttle_field(document.get("throttle")),
                      prune=False if document.get("prune") is None else document["prune"],
                      priority=document.get("priority"))

    def table_names(self, captured: Sequence[str]) -> tuple[str, ...]:
        """The tables to dump: for kind ``all``, the ``captured`` tables."""
        return tuple(captured) if self.kind is DumpKind.ALL else self.tables

    def key_texts(self, arity: int) -> list[KeyTexts]:
        """The keys as the text of each key column, checked against a key of ``arity``
        columns; none unless kind ``keys``."""
        return [] if self.keys is None else parse_keys(list(self.keys), arity)

    def guessed_arity(self) -> int:
        """The key's column count as the first key says (without the source at hand)."""
        first = self.keys[0] if self.keys else None
        return len(first) if isinstance(first, list | tuple) else 1


SPEC_FIELDS = ("kind", "tables", "keys", "chunk_size", "delay_ms", "parallelism",
               "client_token", "where", "from_key", "to_key", "throttle", "prune", "priority")
"""The fields of a dump spec's JSON (and of the HTTP API's request body)."""


@dataclass(frozen=True, slots=True)
class Knobs:
    """What may change while a dump runs, only the fields given (None: unchanged), each
    checked when built; the throttle's limits by name (0: off)."""

    chunk_size: int | None = None
    delay_ms: int | None = None
    parallelism: int | None = None
    throttle: Mapping[str, int] | None = None
    priority: Priority | None = None

    def __post_init__(self) -> None:
        if self.chunk_size is not None:
            check_chunk_size(self.chunk_size)
        if self.delay_ms is not None:
            check_delay_ms(self.delay_ms)
        if self.parallelism is not None:
            check_parallelism(self.parallelism)
        if self.priority is not None:
            check_priority(self.priority)
        for name, value in (self.throttle or {}).items():
            check_limit(name, value)
        if self.empty:
            raise RequestRejected(f"give at least one of {', '.join(KNOB_FIELDS)} (the "
                                  f"throttle's limits: {', '.join(LIMITS)}; 0 turns one off)")

    @property
    def empty(self) -> bool:
        return (self.chunk_size is None and self.delay_ms is None and self.parallelism is None
                and not self.throttle and self.priority is None)

    @classmethod
    def of(cls, *, chunk_size: object = None, delay_ms: object = None,
           parallelism: object = None, throttle: Mapping[str, object] | None = None,
           priority: object = None) -> Knobs:
        """Knobs from a front end's values: integers, limits by name, a priority by name;
        None (or an empty priority) leaves a knob as it is."""
        return cls(_knob(chunk_size, check_chunk_size), _knob(delay_ms, check_delay_ms),
                   _knob(parallelism, check_parallelism),
                   None if throttle is None else dict(_throttle_field(throttle) or {}),
                   None if priority in (None, "") else check_priority(priority))


KNOB_FIELDS = ("chunk_size", "delay_ms", "parallelism", "throttle", "priority")


def _knob(value: object, check: Callable[[int], int]) -> int | None:
    if value is None:
        return None
    return check(value)  # type: ignore[arg-type]  # checks the type too


def _sequence(value: object, name: str) -> list[object] | None:
    if value is None:
        return None
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise RequestRejected(f"{name} must be a JSON array in a dump spec, got "
                              f"{type(value).__name__}")
    return list(value)


def _int_field(document: Mapping[str, object], name: str, default: int) -> int:
    value = document.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise RequestRejected(f"{name} must be an integer, got {json.dumps(value, default=str)}")
    return value


def _optional_text(document: Mapping[str, object], name: str) -> str | None:
    value = document.get(name)
    if value is not None and not isinstance(value, str):
        raise RequestRejected(f"{name} must be a string, got {json.dumps(value, default=str)}")
    return value


def _throttle_field(value: object) -> dict[str, int] | None:
    """Throttle limits by name, each checked (integers), or None."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise RequestRejected(f"throttle must be an object of limits ({', '.join(LIMITS)}), "
                              f"got {json.dumps(value, default=str)}")
    return {str(name): check_limit(str(name), limit) for name, limit in value.items()}


def _check_tables(kind: DumpKind, tables: tuple[str, ...]) -> None:
    if kind is DumpKind.ALL:
        if tables:
            raise RequestRejected(
                f"kind all dumps every captured table: leave the tables out, or use kind "
                f"tables to dump only {', '.join(tables)}")
    elif not tables:
        raise RequestRejected(f"kind {kind.value} needs at least one table: tables must be a "
                              'non-empty list of "schema.table" names')
    elif kind is DumpKind.KEYS and len(tables) != 1:
        raise RequestRejected(f"a primary-key dump (kind keys) names exactly one table, got "
                              f"{len(tables)}")


def _check_filter(kind: DumpKind, tables: tuple[str, ...],
                  row_filter: RowFilter | None) -> None:
    if row_filter is None:
        return
    if kind is DumpKind.KEYS:
        raise RequestRejected("a primary-key dump reads the keys it names: give it no where, "
                              "from_key or to_key (or dump the table with them)")
    if row_filter.key_range and (kind is DumpKind.ALL or len(tables) != 1):
        given = "kind all" if kind is DumpKind.ALL else f"{len(tables)} tables"
        raise RequestRejected("a key range (from_key, to_key) is of one table's key: use kind "
                              f"tables with one table, got {given}")


def _check_prune(kind: DumpKind, row_filter: RowFilter | None, prune: bool) -> None:
    if not prune:
        return
    if kind is DumpKind.KEYS:
        raise RequestRejected("a pruning dump reads whole tables: use kind tables (or all), "
                              "not keys")
    if row_filter is not None:
        raise RequestRejected("a pruning dump reads whole tables: give it no where, from_key "
                              "or to_key")


def _check_keys(kind: DumpKind, keys: tuple[object, ...] | None) -> None:
    if kind is not DumpKind.KEYS:
        if keys is not None:
            raise RequestRejected(f"keys were given with kind {kind.value}: use kind keys and "
                                  "one table to dump primary keys")
        return
    if not keys:
        raise RequestRejected(f"kind keys needs keys: keys must be a non-empty JSON array such as "
                              f"{KEYS_EXAMPLE}")
    if len(keys) > MAX_KEYS:
        raise RequestRejected(f"at most {MAX_KEYS} keys per request, got {len(keys)}")
