"""The fields of the DAGs' trigger forms, as JSON-schema Params, and the check of a dump form.

Airflow validates every field against its schema when a run is triggered (the form, the
REST API and ``airflow dags trigger`` alike) and refuses the run with the field's name,
what was wrong and the field's schema, whose ``title`` says what is expected::

    Invalid input for param chunk_size: 0 is less than the minimum of 1
    Failed validating 'minimum' in schema: {'type': 'integer', 'minimum': 1, ...
        'title': 'Chunk size: rows per chunk SELECT, 1 to 100,000'}

Rules that join two fields (scope ``keys`` needs one table and keys) cannot be said in one
field's schema: :func:`check_dump` checks them in the run's first task, ``check``, which
fails at once with a plain sentence.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from airflow.sdk import Param

from dblog_dags.settings import TABLE_PATTERN
from dblog_worker.dump_spec import DumpSpec
from dblog_worker.errors import RequestRejected
from dblog_worker.requests import (
    DEFAULT_CHUNK_SIZE,
    MAX_CHUNK_SIZE,
    MAX_DELAY_MS,
    MAX_PARALLELISM,
)
from dblog_worker.throttle import LIMITS

__all__ = [
    "SCOPES",
    "TABLE_PATTERN",
    "DumpForm",
    "check_dump",
    "chunk_size_param",
    "conn_id_param",
    "delay_ms_param",
    "keys_param",
    "scope_param",
    "table_param",
    "tables_param",
    "throttle_params",
    "throttle_templates",
]


SCOPES = {
    "all": "All tables: every table the worker captures",
    "tables": "Tables: the tables chosen below, whole",
    "keys": "Keys: some primary keys of one table",
}

_TABLE_ITEM = {
    "type": "string",
    "pattern": TABLE_PATTERN,
    "description": "a table: schema.table, e.g. public.orders",
}


def conn_id_param(default: str) -> Param:
    return Param(
        default, type="string", minLength=1, maxLength=250, pattern=r"^[A-Za-z0-9_.\-]+$",
        title="Source: the id of its dblog connection, e.g. dblog_default",
        description="The connection (type dblog) to the source's worker: its Redis, the "
                    "source's name and the worker's configuration file.",
        section="Where",
    )


def scope_param(choices: Sequence[str] = tuple(SCOPES), default: str = "tables") -> Param:
    return Param(
        default, type="string", enum=list(choices),
        values_display={c: SCOPES[c] for c in choices},
        title="What to dump: one of " + ", ".join(choices),
        description="All captured tables, the tables chosen below, or some primary keys of "
                    "one table.",
        section="What",
    )


def tables_param(options: Sequence[str], default: Sequence[str] = ()) -> Param:
    """A multi-select of ``options`` (the captured tables); other names may be typed."""
    extra: dict[str, Any] = {"examples": list(options)} if options else {}
    return Param(
        list(default), type="array", items=_TABLE_ITEM, uniqueItems=True,
        title="Tables: each as schema.table, each once",
        description="The tables to dump, in this order (scope tables), or the one table "
                    "whose keys are dumped (scope keys). Leave empty for scope all.",
        section="What", **extra,
    )


def table_param(options: Sequence[str]) -> Param:
    """One table, picked from ``options`` or typed; required (no default)."""
    extra: dict[str, Any] = {"examples": list(options)} if options else {}
    return Param(
        type="string", pattern=TABLE_PATTERN,
        title="Table: schema.table (database.table for MySQL), e.g. public.orders",
        description="The source table to compare with its target and repair.",
        section="What", **extra,
    )


def keys_param() -> Param:
    return Param(
        None, type=["string", "null"], format="multiline",
        pattern=r"^\s*(\[[\s\S]*\])?\s*$",
        title="Keys: a JSON array of primary keys, e.g. [1, 2] or [[7, \"EU\"]]",
        description='For scope keys: [1, 2, 3] for a one-column key, [[7, "EU"], [8, "US"]] '
                    "for a composite one (numbers or strings). Keys that do not exist are "
                    "reported missing. Leave empty for the other scopes.",
        section="What",
    )


def chunk_size_param(default: int = DEFAULT_CHUNK_SIZE) -> Param:
    return Param(
        default, type="integer", minimum=1, maximum=MAX_CHUNK_SIZE,
        title=f"Chunk size: rows per chunk SELECT, 1 to {MAX_CHUNK_SIZE:,}",
        description="Rows read per watermark window (keys per batch for a key dump). "
                    "Smaller chunks are shorter SELECTs on the source.",
        section="Pace",
    )


def delay_ms_param(default: int = 0, title: str = "Delay") -> Param:
    return Param(
        default, type="integer", minimum=0, maximum=MAX_DELAY_MS,
        title=f"{title}: milliseconds between chunks, 0 to {MAX_DELAY_MS:,}",
        description="The brake on the source's load: the worker waits this long after each "
                    "chunk. It can be changed while the dump runs (dblog set).",
        section="Pace",
    )


def parallelism_param(default: int = 1) -> Param:
    return Param(
        default, type="integer", minimum=1, maximum=MAX_PARALLELISM,
        title=f"Parallelism: chunk SELECTs per window, 1 to {MAX_PARALLELISM}",
        description="A table dump reads this many consecutive chunks at once, each on a "
                    "source connection of its own, all between the same watermarks: faster, "
                    "and that many concurrent SELECTs on the source. It can be changed while "
                    "the dump runs (dblog set). A key dump reads one batch at a time.",
        section="Pace",
    )


_THROTTLE_TITLES = {
    "max_chunk_ms": "Throttle: the longest a chunk SELECT may take, ms (0: off)",
    "max_active_sessions": "Throttle: the most sessions running on the source (0: off)",
    "max_replica_lag_ms": "Throttle: the read replica's longest replay lag, ms (0: off)",
    "max_log_lag_mb": "Throttle: the worker's longest lag reading the log, MiB (0: off)",
}


def throttle_params() -> dict[str, Param]:
    """The limits of automatic throttling, one field each (``throttle_max_chunk_ms``
    ...): over a limit, the next chunk waits longer, up to 30 s beyond the delay."""
    return {
        f"throttle_{name}": Param(
            0, type="integer", minimum=0, maximum=high,
            title=_THROTTLE_TITLES[name] + f", up to {high:,}",
            description=f"Automatic throttling on {what}: over this limit the next chunk "
                        "waits longer (doubling, up to 30 s beyond the delay), well under it "
                        "the wait eases back. It can be changed while the dump runs "
                        "(dblog set).",
            section="Pace")
        for name, (high, _unit, what) in LIMITS.items()
    }


def throttle_templates() -> dict[str, str]:
    """The operator's ``throttle``, rendered from the form's :func:`throttle_params`."""
    return {name: f"{{{{ params.throttle_{name} }}}}" for name in LIMITS}


@dataclass(frozen=True)
class DumpForm:
    """A dump form that passed :func:`check_dump`: what the submit task sends."""

    scope: str
    tables: list[str]
    keys: str | None  # the JSON text of the keys (scope keys only)

    def as_xcom(self) -> dict[str, Any]:
        return {"scope": self.scope, "tables": self.tables, "keys": self.keys}


def check_dump(scope: str, tables: Sequence[str] | None, keys: str | None) -> DumpForm:
    """The rules that join fields of a dump form (those of every dump request:
    :class:`~dblog_worker.dump_spec.DumpSpec`); ValueError with a plain sentence."""
    text = (keys or "").strip()
    parsed = None
    if text:
        try:
            parsed = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"Keys are not valid JSON ({exc.msg} at line {exc.lineno}, "
                             f"column {exc.colno}).") from None
    try:
        spec = DumpSpec.of(scope, list(tables or ()), parsed)
    except RequestRejected as exc:
        raise ValueError(f"The dump form is refused: {exc} (scope is the kind).") from None
    return DumpForm(spec.kind.value, list(spec.tables), text or None)
