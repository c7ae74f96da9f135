"""Dump requests: what a user asks for, and the lifecycle it goes through.

::

    queued ──► running ◄──► paused
      │          │  │          │
      │          │  └──► completed
      ▼          ▼             ▼
    cancelled, failed  ◄───────┘   (from queued, running or paused)

The worker runs several requests at once, up to ``[worker] max_active_dumps``, chosen by
:class:`Priority` and then age; their windows interleave, each request's share of them
following its priority's weight (:mod:`dblog_worker.schedule`). A paused request keeps its
progress and gives its turn to the others (pausing is the brake an operator pulls on one
dump when the source is under load).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TypeVar

from dblog_worker.errors import CorruptRequest, RequestRejected
from dblog_worker.row_filter import RowFilter
from dblog_worker.throttle import NO_THROTTLE, ThrottlePolicy

MAX_CHUNK_SIZE = 100_000
DEFAULT_CHUNK_SIZE = 5_000
MAX_DELAY_MS = 3_600_000
MAX_PARALLELISM = 8  # chunk SELECTs of one window, each on a source connection of its own
MAX_KEYS = 1_000_000


class DumpKind(StrEnum):
    ALL = "all"  # every captured table
    TABLES = "tables"  # some captured tables
    KEYS = "keys"  # a list of primary keys of one table


class Priority(StrEnum):
    """How much of the worker's windows a request gets while others run: its weight."""

    URGENT = "urgent"  # repairs and key dumps: an operator waits for them
    NORMAL = "normal"
    BACKGROUND = "background"  # backfills: whatever the others leave

    @property
    def weight(self) -> int:
        """The request's share of windows among the requests ready for one."""
        return PRIORITY_WEIGHTS[self]

    @property
    def rank(self) -> int:
        """Its place in the queue: a lower rank starts first (then the older request)."""
        return _RANKS[self]

    @classmethod
    def default_for(cls, kind: DumpKind, prune: bool = False) -> Priority:
        """The priority of a request that names none: urgent for a primary-key dump (a
        repair: few rows, someone waits) and for a pruning dump (a repair: a cascade the
        log did not carry), normal otherwise."""
        return cls.URGENT if kind is DumpKind.KEYS or prune else cls.NORMAL


PRIORITY_WEIGHTS: Mapping[Priority, int] = {
    Priority.URGENT: 16, Priority.NORMAL: 4, Priority.BACKGROUND: 1,
}
_RANKS: Mapping[Priority, int] = {p: rank for rank, p in enumerate(Priority)}
QUEUE_NUMBERS = 2**40  # request numbers below this; a queue score is rank * this + number


def queue_score(priority: Priority, number: int) -> int:
    """A request's score in the ``active`` sorted set: by priority, then by number (age)."""
    return priority.rank * QUEUE_NUMBERS + number


def check_priority(value: object) -> Priority:
    """A priority by its name; :class:`RequestRejected` with the names otherwise."""
    try:
        return Priority(value.strip() if isinstance(value, str) else str(value))
    except ValueError:
        raise RequestRejected(
            f"priority must be one of {', '.join(p.value for p in Priority)}, got "
            f"{json.dumps(value) if isinstance(value, str | None) else repr(value)}"
        ) from None


class RequestState(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    PAUSED = "paused"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        return self in (RequestState.COMPLETED, RequestState.FAILED, RequestState.CANCELLED)


Q, R, P = RequestState.QUEUED, RequestState.RUNNING, RequestState.PAUSED
TRANSITIONS: Mapping[RequestState, frozenset[RequestState]] = {
    RequestState.QUEUED: frozenset({R, RequestState.CANCELLED, RequestState.FAILED}),
    RequestState.RUNNING: frozenset(
        {P, RequestState.COMPLETED, RequestState.FAILED, RequestState.CANCELLED}
    ),
    RequestState.PAUSED: frozenset({R, RequestState.CANCELLED, RequestState.FAILED}),
    RequestState.COMPLETED: frozenset(),
    RequestState.FAILED: frozenset(),
    RequestState.CANCELLED: frozenset(),
}


# What an operator may do, and from which states: a queued request is not paused or
# resumed (it has not started; cancel it), so only the worker starts requests.
COMMANDS: Mapping[str, tuple[RequestState, frozenset[RequestState]]] = {
    "pause": (RequestState.PAUSED, frozenset({R})),
    "resume": (RequestState.RUNNING, frozenset({P})),
    "cancel": (RequestState.CANCELLED, frozenset({Q, R, P})),
}


def sources_of(target: RequestState) -> frozenset[RequestState]:
    """The states from which ``target`` may be reached."""
    return frozenset(state for state, nexts in TRANSITIONS.items() if target in nexts)


def check_chunk_size(value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_CHUNK_SIZE:
        raise RequestRejected(
            f"chunk size must be an integer from 1 to {MAX_CHUNK_SIZE}, got {value!r}"
        )
    return value


def check_parallelism(value: int) -> int:
    if (isinstance(value, bool) or not isinstance(value, int)
            or not 1 <= value <= MAX_PARALLELISM):
        raise RequestRejected(
            f"parallelism must be an integer from 1 to {MAX_PARALLELISM} (chunk SELECTs in "
            f"one window, each on a connection of its own), got {value!r}"
        )
    return value


def check_delay_ms(value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_DELAY_MS:
        raise RequestRejected(
            f"delay must be an integer number of milliseconds from 0 to {MAX_DELAY_MS}, "
            f"got {value!r}"
        )
    return value


KeyTexts = tuple[str, ...]


def parse_keys(raw: object, arity: int) -> list[KeyTexts]:
    """User-given primary keys (JSON-like) to the text of each key column.

    A one-column key may be given as ``[1, 2]`` or ``[[1], [2]]``; a composite key as
    ``[[1, "a"], [2, "b"]]``. Numbers and strings are accepted; whether the text fits
    the column's type is checked by the database (see the source's ``check_keys``).
    """
    if not isinstance(raw, list) or not raw:
        raise RequestRejected("keys must be a non-empty JSON array, e.g. [1, 2] or [[1, \"a\"]]")
    if len(raw) > MAX_KEYS:
        raise RequestRejected(f"at most {MAX_KEYS} keys per request, got {len(raw)}")
    keys: list[KeyTexts] = []
    seen: set[KeyTexts] = set()
    for index, item in enumerate(raw):
        parts = item if isinstance(item, list) else [item]
        if len(parts) != arity:
            raise RequestRejected(
                f"key #{index + 1} {json.dumps(item)} has {len(parts)} value(s); "
                f"the primary key has {arity} column(s)"
            )
        texts = tuple(_key_text(part, index) for part in parts)
        if texts not in seen:
            seen.add(texts)
            keys.append(texts)
    return keys


def _key_text(value: object, index: int) -> str:
    if isinstance(value, bool) or value is None or not isinstance(value, (int, float, str)):
        raise RequestRejected(
            f"key #{index + 1}: {json.dumps(value)} is not a number or a string; "
            "primary-key values are never null"
        )
    return value if isinstance(value, str) else json.dumps(value)


@dataclass(frozen=True, slots=True)
class DumpRequest:
    id: str
    kind: DumpKind
    tables: tuple[str, ...]
    chunk_size: int
    delay_ms: int
    state: RequestState
    created_at: float
    updated_at: float
    key_count: int = 0
    error: str | None = None
    client_token: str | None = None
    extra: Mapping[str, str] = field(default_factory=dict)
    parallelism: int = 1
    row_filter: RowFilter | None = None  # a filtered dump's conditions and key range
    throttle: ThrottlePolicy = NO_THROTTLE
    prune: bool = False  # a table dump that also removes the rows the source does not have
    priority: Priority = Priority.NORMAL

    @property
    def number(self) -> int:
        """The request's number (``dump-12``: 12), its age in the queue; 0 if its id has
        none (a record written by hand)."""
        digits = self.id.rpartition("-")[2]
        return int(digits) if digits.isdigit() and int(digits) < QUEUE_NUMBERS else 0

    def to_fields(self) -> dict[str, str]:
        fields = {
            "id": self.id,
            "kind": self.kind.value,
            "tables": json.dumps(list(self.tables)),
            "chunk_size": str(self.chunk_size),
            "delay_ms": str(self.delay_ms),
            "state": self.state.value,
            "created_at": repr(self.created_at),
            "updated_at": repr(self.updated_at),
            "key_count": str(self.key_count),
            "parallelism": str(self.parallelism),
            "priority": self.priority.value,
            **self.throttle.to_fields(),
        }
        if self.error is not None:
            fields["error"] = self.error
        if self.client_token is not None:
            fields["client_token"] = self.client_token
        if self.row_filter is not None:
            fields["filter"] = json.dumps(self.row_filter.to_json())
        if self.prune:
            fields["prune"] = "1"
        fields.update(self.extra)
        return fields

    @classmethod
    def from_fields(cls, fields: Mapping[str, str], *, key: str = "request",
                    request_id: str | None = None) -> DumpRequest:
        """The request a hash holds, every field checked: :class:`CorruptRequest` names
        ``key`` (the hash's Redis key), the field and what is wrong with it. With
        ``request_id`` (the id the key is of), the ``id`` field must be that."""
        bad = _Bad(request_id or fields.get("id") or "?", key)
        for name in REQUEST_REQUIRED:
            if name not in fields:
                raise bad(name, "is missing")
        if request_id is not None and fields["id"] != request_id:
            raise bad("id", f"is {_clip(fields['id'])}, not {request_id!r} (the id of the key)")
        if not REQUEST_ID.fullmatch(fields["id"]):
            raise bad("id", f"{_clip(fields['id'])} is not a request id like dump-12")
        kind = _member(DumpKind, fields["kind"], bad, "kind")
        key_count = _number(fields.get("key_count", "0"), 0, MAX_KEYS, bad, "key_count")
        if kind is DumpKind.KEYS and key_count == 0:
            raise bad("key_count", "is 0, but a primary-key dump has keys")
        known = {*REQUEST_REQUIRED, "key_count", "error", "client_token", "parallelism",
                 "filter", "prune", "priority", *ThrottlePolicy.record_fields()}
        prune = fields.get("prune", "0")
        if prune not in ("0", "1"):
            raise bad("prune", f"is {_clip(prune)}, not 0 or 1")
        if prune == "1" and (kind is DumpKind.KEYS or "filter" in fields):
            raise bad("prune", "is set, but only a whole-table dump (kind all or tables, no "
                      "filter) can prune")
        return cls(
            id=fields["id"],
            kind=kind,
            tables=_tables(fields["tables"], kind, bad),
            chunk_size=_knob(fields["chunk_size"], check_chunk_size, bad, "chunk_size"),
            delay_ms=_knob(fields["delay_ms"], check_delay_ms, bad, "delay_ms"),
            state=_member(RequestState, fields["state"], bad, "state"),
            created_at=_time(fields["created_at"], bad, "created_at"),
            updated_at=_time(fields["updated_at"], bad, "updated_at"),
            key_count=key_count,
            error=fields.get("error"),
            client_token=fields.get("client_token"),
            extra={k: v for k, v in fields.items() if k not in known},
            # requests written before the knob existed read one chunk SELECT per window
            parallelism=_knob(fields.get("parallelism", "1"), check_parallelism, bad,
                              "parallelism"),
            row_filter=_row_filter(fields.get("filter"), kind, bad),
            throttle=ThrottlePolicy.from_fields(fields, bad),  # absent limits: off
            prune=prune == "1",
            # requests written before priorities (layout 1) take their kind's default
            priority=_member(Priority, fields["priority"], bad, "priority")
            if "priority" in fields else Priority.default_for(kind, prune == "1"),
        )


REQUEST_REQUIRED = ("id", "kind", "tables", "chunk_size", "delay_ms", "state", "created_at",
                    "updated_at")
REQUEST_ID = re.compile(r"[A-Za-z0-9_.-]{1,100}")  # never ':', which would reach other keys
_INTEGER = re.compile(r"-?[0-9]{1,19}")
_POSITION = re.compile(r"[0-9a-f]{48}")
_MAX_COUNT = 2**63 - 1


@dataclass(frozen=True, slots=True)
class _Bad:
    """Makes the error of one record: its request and Redis key are known, the field not."""

    request_id: str
    key: str

    def __call__(self, field: str, reason: str) -> CorruptRequest:
        return CorruptRequest(self.request_id, self.key, field, reason)


def _clip(value: object) -> str:
    """A bad value as a message shows it: its repr, cut at 80 characters."""
    text = repr(value)
    return text if len(text) <= 80 else text[:76] + "...'"


E = TypeVar("E", DumpKind, "RequestState", Priority)


def _member(enum: type[E], text: str, bad: _Bad, name: str) -> E:
    try:
        return enum(text)
    except ValueError:
        raise bad(name, f"is {_clip(text)}, not one of {', '.join(m.value for m in enum)}"
                  ) from None


def _number(text: str, low: int, high: int, bad: _Bad, name: str) -> int:
    if not _INTEGER.fullmatch(text) or not low <= int(text) <= high:
        raise bad(name, f"is {_clip(text)}, not an integer from {low} to {high}")
    return int(text)


def _knob(text: str, check: Callable[[int], int], bad: _Bad, name: str) -> int:
    """A chunk size, delay or parallelism, checked with the limits of a new request's."""
    if not _INTEGER.fullmatch(text):
        raise bad(name, f"is {_clip(text)}, not an integer")
    try:
        return check(int(text))
    except RequestRejected as exc:
        raise bad(name, str(exc)) from None


def _time(text: str, bad: _Bad, name: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise bad(name, f"is {_clip(text)}, not a Unix time in seconds")
    return value


def _json(text: str, bad: Callable[[str], CorruptRequest]) -> object:
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        raise bad(f"{_clip(text)} is not JSON") from None


def _tables(text: str, kind: DumpKind, bad: _Bad) -> tuple[str, ...]:
    tables = _json(text, lambda reason: bad("tables", reason))
    if (not isinstance(tables, list) or not tables
            or not all(isinstance(t, str) and t for t in tables)):
        raise bad("tables", f"is {_clip(text)}, not a JSON array of table names")
    if kind is DumpKind.KEYS and len(tables) != 1:
        raise bad("tables", f"names {len(tables)} tables; a primary-key dump names one")
    return tuple(tables)


def _row_filter(text: str | None, kind: DumpKind, bad: _Bad) -> RowFilter | None:
    if text is None:
        return None
    try:
        row_filter = RowFilter.from_json(text)
    except ValueError as exc:
        raise bad("filter", f"{_clip(text)} {exc}") from None
    if kind is DumpKind.KEYS:
        raise bad("filter", "is set, but a primary-key dump reads the keys it names")
    return row_filter


def key_record(text: str, *, request_id: str, key: str, index: int) -> KeyTexts:
    """A key as a list of keys in Redis holds it (a JSON array of the key's column texts);
    :class:`CorruptRequest` names the list's ``key`` and the entry's index."""
    value = _json(text, lambda reason: CorruptRequest(request_id, key, f"#{index}", reason))
    if (not isinstance(value, list) or not value
            or not all(isinstance(part, str) for part in value)):
        raise CorruptRequest(request_id, key, f"#{index}",
                             f"{_clip(text)} is not a JSON array of the key's texts")
    return tuple(value)


def repair_token(table: str, checkpoint: str | None, keys: Sequence[KeyTexts]) -> str:
    """The client token of the worker's dump of rows the log cut short: one per batch of
    keys (a digest of the sorted keys), the same when the same batch is replayed."""
    digest = hashlib.sha256(json.dumps(sorted(keys)).encode()).hexdigest()[:16]
    return f"incomplete:{table}:{checkpoint}:{digest}"


@dataclass(frozen=True, slots=True)
class TableProgress:
    """Progress of one table of a dump; JSON in Redis, one hash field per table."""

    table: str
    done: bool = False
    last_key: list[str] | None = None  # texts of the last completed key (keyset dumps)
    upper_bound: list[str] | None = None  # captured once, when the table's dump starts
    started: bool = False
    next_key_index: int = 0  # primary-key dumps: keys already done
    chunks: int = 0
    selected: int = 0
    rows: int = 0  # emitted to the output
    dropped: int = 0  # removed by in-window log events
    missing: int = 0  # primary-key dumps: keys not found
    # pruning dumps: the low watermark of the window that read the upper bound (48 hex
    # digits); every row no event wrote since is gone once the table is read
    prune_from: str | None = None

    def to_json(self) -> str:
        return json.dumps({name: getattr(self, name) for name in self.__slots__})

    @classmethod
    def from_json(cls, text: str, *, key: str = "progress", request_id: str = "?",
                  table: str | None = None) -> TableProgress:
        """The progress a hash field holds, every value checked: :class:`CorruptRequest`
        names ``key``, the field (``table``, the field's name, which the JSON must repeat)
        and what is wrong. Values left out take their defaults."""

        def bad(reason: str) -> CorruptRequest:
            return CorruptRequest(request_id, key, table or "?", reason)

        data = _json(text, bad)
        if not isinstance(data, dict):
            raise bad(f"{_clip(text)} is not a JSON object")
        if not isinstance(data.get("table"), str) or (table is not None
                                                      and data["table"] != table):
            raise bad(f"its table is {_clip(data.get('table'))}, not {table!r}")
        for name, check, expected in _PROGRESS_FIELDS:
            if name in data and not check(data[name]):
                raise bad(f"{name} is {_clip(data[name])}, not {expected}")
        last_key, upper_bound = data.get("last_key"), data.get("upper_bound")
        if last_key is not None and upper_bound is not None and len(last_key) != len(
                upper_bound):
            raise bad(f"last_key has {len(last_key)} value(s) but upper_bound "
                      f"{len(upper_bound)}: they are keys of one table")
        return cls(**{name: data[name] for name in cls.__slots__ if name in data})

    def check(self, request: DumpRequest, *, key: str) -> None:
        """What the progress of a table of ``request`` must be, beyond each value's type."""
        bad = _Bad(request.id, key)
        if self.table not in request.tables:
            raise bad(self.table, f"is not a table of the request ({', '.join(request.tables)})")
        if request.kind is DumpKind.KEYS:
            if self.next_key_index > request.key_count:
                raise bad(self.table, f"next_key_index is {self.next_key_index}, past the "
                                      f"request's {request.key_count} keys")
        elif self.started and not self.done and self.upper_bound is None:
            raise bad(self.table, "the table's dump started, but upper_bound is null")


def _is_count(value: object) -> bool:
    return type(value) is int and 0 <= value <= _MAX_COUNT


def _is_key(value: object) -> bool:
    """Null, or the texts of a key's columns (a non-empty JSON array of strings)."""
    return value is None or (isinstance(value, list) and bool(value)
                             and all(isinstance(part, str) for part in value))


_PROGRESS_FIELDS: tuple[tuple[str, Callable[[object], bool], str], ...] = (
    ("done", lambda v: type(v) is bool, "true or false"),
    ("started", lambda v: type(v) is bool, "true or false"),
    ("last_key", _is_key, "null or a JSON array of the key's texts"),
    ("upper_bound", _is_key, "null or a JSON array of the key's texts"),
    ("prune_from", lambda v: v is None or (isinstance(v, str) and bool(_POSITION.fullmatch(v))),
     "null or a position of 48 hex digits"),
    *((name, _is_count, "a count (an integer, 0 or more)")
      for name in ("next_key_index", "chunks", "selected", "rows", "dropped", "missing")),
)


@dataclass(frozen=True, slots=True)
class MalformedRequest:
    """A request whose record in Redis does not parse: the front ends show it as such (with
    ``error``: the key, the field, what is wrong, what to do); the worker fails it."""

    id: str
    error: CorruptRequest = field(compare=False)  # exceptions compare by identity
    fields: Mapping[str, str] = field(default_factory=dict)  # what its hash holds, as text


def describe_keys(keys: Sequence[KeyTexts]) -> str:
    return ", ".join(json.dumps(list(key)) for key in keys[:5]) + (
        f", ... ({len(keys)} keys)" if len(keys) > 5 else ""
    )
