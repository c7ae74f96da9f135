"""The fields of the DAGs' trigger forms, as JSON-schema Params, and the check of a dump form.

Airflow validates every field against its schema when a run is triggered (the form, the
REST API and ``airflow dags trigger`` alike) and refuses the run with the field's name,
what was wrong and the field's schema, whose ``title`` says what is expected::

    Invalid input for param chunk_size: 0 is less than the minimum of 1
    Failed validating 'minimum' in schema: {'type': 'integer', 'minimum': 1, ...
        'title': 'Chunk size: rows per chunk SELECT, 1 to 100,000'}

Rules that join two fields (scope ``keys`` needs one table and keys; a key range needs one
table) cannot be said in one field's schema: :func:`check_dump` checks them in the run's
first task, ``check``, which fails at once with a plain sentence, and builds the request's
:class:`~dblog_worker.dump_spec.DumpSpec` once: the task's XCom is its JSON, which the
*submit* task's operator reads back (``DblogDumpOperator(spec=...)``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import jinja2
from airflow.sdk import Param

from dblog_dags.settings import TABLE_PATTERN
from dblog_worker.dump_spec import DumpSpec
from dblog_worker.errors import RequestRejected
from dblog_worker.requests import (
    DEFAULT_CHUNK_SIZE,
    MAX_CHUNK_SIZE,
    MAX_DELAY_MS,
    MAX_PARALLELISM,
    Priority,
)
from dblog_worker.row_filter import MAX_CONDITIONS, Op, RowFilter, key_argument
from dblog_worker.throttle import LIMITS

__all__ = [
    "SCOPES",
    "TABLE_PATTERN",
    "DumpForm",
    "check_dump",
    "chunk_size_param",
    "conn_id_param",
    "delay_ms_param",
    "key_param",
    "keys_param",
    "priority_param",
    "render_templates",
    "scope_param",
    "table_param",
    "tables_param",
    "throttle_params",
    "where_param",
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


_VALUE = {"type": ["string", "number"]}
WHERE_ITEM: dict[str, Any] = {
    "type": "object",
    "properties": {
        "column": {"type": "string", "minLength": 1},
        "op": {"type": "string", "enum": [op.value for op in Op]},
        "value": _VALUE,
        "values": {"type": "array", "items": _VALUE, "minItems": 1},
    },
    "required": ["column", "op"],
    "additionalProperties": False,
}
"""One condition of a filtered dump, as the form takes it (RowFilter checks the rest)."""


def where_param(default: Sequence[Mapping[str, Any]] = ()) -> Param:
    return Param(
        [dict(c) for c in default], type="array", items=WHERE_ITEM, maxItems=MAX_CONDITIONS,
        title='Where: conditions every dumped row meets, a JSON array, e.g. '
              '[{"column": "region", "op": "in", "values": ["EU", "US"]}]',
        description='Empty ([]): every row. Each condition is {"column": ..., "op": ..., '
                    '"value": ...} with op one of =, !=, <, <=, >, >=; "values": [...] for in '
                    "and not in; no value for is null and is not null. Values are numbers or "
                    "strings, read as the column's type, e.g. "
                    '{"column": "created_at", "op": ">=", "value": "2026-01-01"}. A dumped '
                    "row meets every condition. With scope all, every captured table must "
                    "have the columns; not for scope keys.",
        section="Rows",
    )


def key_param(end: str, default: str | None = None) -> Param:
    """``end``: ``from`` (the first key dumped) or ``to`` (the last)."""
    first = end == "from"
    return Param(
        default, type=["string", "null"],
        title=f"{'From' if first else 'To'} key: the {'first' if first else 'last'} primary "
              'key to dump (included), e.g. 1000 or [7, "EU"]',
        description="A key range, for scope tables with one table: a number, a string, or a "
                    'JSON array of one value per key column ([7, "EU"]); text that is not '
                    "JSON is the value itself (abc). Empty: "
                    + ("from the first row." if first else "up to the last row."),
        section="Rows",
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


def priority_param(default: str | None = None) -> Param:
    """The request's priority; None (the form's "default"): urgent for scope keys, else
    normal."""
    weights = ", ".join(f"{p.value} ({p.weight})" for p in Priority)
    return Param(
        default, type=["string", "null"], enum=[*(p.value for p in Priority), None],
        values_display={"urgent": "Urgent: repairs, key dumps (weight 16)",
                        "normal": "Normal (weight 4)",
                        "background": "Background: backfills (weight 1)"},
        title="Priority: urgent, normal or background",
        description="The dump's share of the worker's windows while other dumps run "
                    f"(weights {weights}), and its place in the queue. Empty: urgent for "
                    "scope keys, else normal. It can be changed while the dump runs "
                    "(dblog set --priority).",
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


@dataclass(frozen=True)
class DumpForm:
    """A dump form that passed :func:`check_dump`: the request's spec, which the submit task
    queues (the check task's XCom is ``spec.to_json()``), and the form's keys as given."""

    spec: DumpSpec
    keys: str | None  # the JSON text of the keys (scope keys only)

    @property
    def scope(self) -> str:
        return self.spec.kind.value

    @property
    def tables(self) -> list[str]:
        return list(self.spec.tables)

    @property
    def row_filter(self) -> RowFilter | None:
        return self.spec.row_filter


def check_dump(scope: str, tables: Sequence[str] | None, keys: str | None,
               where: Sequence[Any] | None = None, from_key: str | None = None,
               to_key: str | None = None, *, pace: Mapping[str, Any] | None = None,
               **overrides: Any) -> DumpForm:
    """The rules that join fields of a dump form (those of every dump request:
    :class:`~dblog_worker.dump_spec.DumpSpec`); ValueError with a plain sentence. ``pace``:
    the form's other fields (chunk size, delay, parallelism, throttle limits, priority),
    each as its Param gives it; ``overrides`` replace them (the delay of the hour)."""
    text = (keys or "").strip()
    parsed = None
    if text:
        try:
            parsed = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"Keys are not valid JSON ({exc.msg} at line {exc.lineno}, "
                             f"column {exc.colno}).") from None
    first, last = ((key_argument(k.strip()) if k and k.strip() else None)
                   for k in (from_key, to_key))
    knobs = {**_pace_of(pace or {}), **overrides}
    try:
        spec = DumpSpec.of(scope, list(tables or ()), parsed, where=where or None,
                           from_key=first, to_key=last, **knobs)
    except RequestRejected as exc:
        raise ValueError(f"The dump form is refused: {exc} (scope is the kind).") from None
    return DumpForm(spec, text or None)


def _pace_of(form: Mapping[str, Any]) -> dict[str, Any]:
    """The knobs a form gives (those of its fields it has)."""
    knobs: dict[str, Any] = {name: form[name] for name in ("chunk_size", "delay_ms",
                                                           "parallelism", "priority")
                             if form.get(name) is not None}
    limits = {name: form[f"throttle_{name}"] for name in LIMITS if f"throttle_{name}" in form}
    if any(limits.values()):
        knobs["throttle"] = limits
    return knobs


TEMPLATE_VARIABLES = ("data_interval_start", "data_interval_end", "logical_date", "ds",
                      "ds_nodash", "ts", "ts_nodash", "run_id", "prev_start_date_success",
                      "prev_data_interval_start_success", "prev_data_interval_end_success",
                      "macros")
"""What a filter's templated values may use: the run's dates, never connections or
variables (a value is the form's text, which whoever triggers a run chooses)."""


def render_templates(value: Any, context: Mapping[str, Any]) -> Any:
    """``value`` (a filter's conditions or key) with each string that holds ``{{`` or
    ``{%`` rendered by the DAG's (sandboxed) Jinja environment, with only
    :data:`TEMPLATE_VARIABLES`; ValueError with a plain sentence when one cannot be
    rendered or an expression gives nothing (a run triggered by hand has no data
    interval)."""
    if isinstance(value, str):
        if "{{" not in value and "{%" not in value:
            return value
        env = context["dag"].get_template_env(force_sandboxed=True).overlay(
            finalize=_not_none)
        variables = {name: context[name] for name in TEMPLATE_VARIABLES if name in context}
        try:
            return env.from_string(value).render(**variables)
        except (jinja2.TemplateError, ValueError) as exc:
            raise ValueError(f"The template {value} in the filter cannot be rendered: {exc} "
                             f"(values may use {', '.join(TEMPLATE_VARIABLES)}).") from None
    if isinstance(value, Mapping):
        return {k: render_templates(v, context) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [render_templates(v, context) for v in value]
    return value


def _not_none(value: Any) -> Any:
    if isinstance(value, type(None)):  # a lazy proxy of None too
        raise ValueError("an expression gives None (this run has no such value)")
    return value
