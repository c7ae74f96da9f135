"""Dump requests: what a user asks for, and the lifecycle it goes through.

::

    queued ──► running ◄──► paused
      │          │  │          │
      │          │  └──► completed
      ▼          ▼             ▼
    cancelled, failed  ◄───────┘   (from queued, running or paused)

The worker runs one request at a time, oldest first. A paused request keeps its
place: nothing else is dumped until it is resumed or cancelled (pausing is the
brake an operator pulls when the source is under load).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from dblog_worker.errors import RequestRejected

MAX_CHUNK_SIZE = 100_000
DEFAULT_CHUNK_SIZE = 5_000
MAX_DELAY_MS = 3_600_000
MAX_KEYS = 1_000_000


class DumpKind(StrEnum):
    ALL = "all"  # every captured table
    TABLES = "tables"  # some captured tables
    KEYS = "keys"  # a list of primary keys of one table


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
        }
        if self.error is not None:
            fields["error"] = self.error
        if self.client_token is not None:
            fields["client_token"] = self.client_token
        fields.update(self.extra)
        return fields

    @classmethod
    def from_fields(cls, fields: Mapping[str, str]) -> DumpRequest:
        known = {"id", "kind", "tables", "chunk_size", "delay_ms", "state", "created_at",
                 "updated_at", "key_count", "error", "client_token"}
        return cls(
            id=fields["id"],
            kind=DumpKind(fields["kind"]),
            tables=tuple(json.loads(fields["tables"])),
            chunk_size=int(fields["chunk_size"]),
            delay_ms=int(fields["delay_ms"]),
            state=RequestState(fields["state"]),
            created_at=float(fields["created_at"]),
            updated_at=float(fields["updated_at"]),
            key_count=int(fields.get("key_count", "0")),
            error=fields.get("error"),
            client_token=fields.get("client_token"),
            extra={k: v for k, v in fields.items() if k not in known},
        )


@dataclass(slots=True)
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

    def to_json(self) -> str:
        return json.dumps({name: getattr(self, name) for name in self.__slots__})

    @classmethod
    def from_json(cls, text: str) -> TableProgress:
        data = json.loads(text)
        return cls(**{name: data[name] for name in cls.__slots__ if name in data})


def describe_keys(keys: Sequence[KeyTexts]) -> str:
    return ", ".join(json.dumps(list(key)) for key in keys[:5]) + (
        f", ... ({len(keys)} keys)" if len(keys) > 5 else ""
    )
