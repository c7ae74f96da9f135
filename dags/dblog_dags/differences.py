"""What a verify found, for the DAGs' tasks: the keys to dump, and a failure that lists them.

The verify document is :func:`dblog_airflow.verify.run_verify`'s: ``{"equal": bool,
"tables": {table: {"equal", "error", "missing", "extra", "changed", ...}}}``, each key as a
primary-key dump takes it (a value for a one-column key, a list for a composite one).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from airflow.sdk.exceptions import AirflowFailException

__all__ = ["KINDS", "describe", "keys_json", "require_equal"]

KINDS = ("missing", "changed", "extra")
SHOWN = 20  # keys listed per kind in a message; the task's XCom has them all


def keys_json(table: Mapping[str, Any]) -> str:
    """Every differing key of one table's entry, as the JSON a key dump takes."""
    return json.dumps([k for kind in KINDS for k in table.get(kind) or []], ensure_ascii=False)


def _listed(keys: Sequence[object]) -> str:
    shown = ", ".join(json.dumps(k, ensure_ascii=False) for k in keys[:SHOWN])
    return shown + (f" and {len(keys) - SHOWN:,} more" if len(keys) > SHOWN else "")


def describe(result: Mapping[str, Any]) -> list[str]:
    """One line per table that differs or could not be compared."""
    lines = []
    for name, table in result["tables"].items():
        if table.get("error"):
            lines.append(f"{name}: could not be compared: {table['error']}")
        elif not table.get("equal", False):
            counts = ", ".join(f"{len(table.get(k) or []):,} {k}" for k in KINDS)
            parts = [f"{k} {_listed(table[k])}" for k in KINDS if table.get(k)]
            lines.append(f"{name}: {counts}: " + "; ".join(parts))
    return lines


def require_equal(result: Mapping[str, Any], note: str = "") -> None:
    """Fail the task (no retries) when a table differs from its target; ``note`` ends the
    message."""
    if not result["equal"]:
        raise AirflowFailException("the target differs from the source: "
                                   + " | ".join(describe(result)) + note)
