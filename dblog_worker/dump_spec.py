"""What a user asks to dump, checked once: the one request model of every front end.

The CLI, the HTTP API, the Airflow hook and the DAG forms turn what they were given
(arguments, a JSON body, a form) into a :class:`DumpSpec`; building it checks every rule
that does not need the source (the kind and its tables and keys, the knobs, the client
token) and raises :class:`~dblog_worker.errors.RequestRejected` with what to do.
:func:`dblog_worker.control.create_dump` then checks it against the source and queues it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from dblog_worker.errors import RequestRejected
from dblog_worker.requests import (
    DEFAULT_CHUNK_SIZE,
    MAX_KEYS,
    DumpKind,
    KeyTexts,
    check_chunk_size,
    check_delay_ms,
    check_parallelism,
    parse_keys,
)
from dblog_worker.row_filter import RowFilter
from dblog_worker.throttle import NO_THROTTLE, ThrottlePolicy

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

    def __post_init__(self) -> None:
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
           throttle: Mapping[str, object] | None = None, prune: object = False) -> DumpSpec:
        """A spec from a front end's values: ``kind`` as text (``all``, ``tables``,
        ``keys``), tables in the order given (duplicates dropped), a filter's conditions
        and key range as :meth:`RowFilter.of` takes them."""
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
                   ThrottlePolicy.of(throttle), prune)

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
