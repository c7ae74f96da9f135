"""The Prometheus text format 0.0.4, written line by line."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

Samples = list[tuple[dict[str, str], float]]


def escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def by_table(counts: Mapping[str, int]) -> Samples:
    """One sample per table, labelled with it, in table order."""
    return [({"table": table}, n) for table, n in sorted(counts.items())]


def _number(value: float) -> str:
    if isinstance(value, int):
        return str(value)
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(round(value, 6))


class Exposition:
    """Writes metrics in the Prometheus text format 0.0.4; every sample carries ``source``."""

    def __init__(self, source: str) -> None:
        self._source = escape_label(source)
        self._lines: list[str] = []

    def _labels(self, labels: Mapping[str, str]) -> str:
        parts = [f'source="{self._source}"']
        parts += [f'{name}="{escape_label(value)}"' for name, value in labels.items()]
        return "{" + ",".join(parts) + "}"

    def _head(self, name: str, kind: str, help_text: str) -> None:
        help_text = help_text.replace("\\", "\\\\").replace("\n", "\\n")
        self._lines.append(f"# HELP {name} {help_text}")
        self._lines.append(f"# TYPE {name} {kind}")

    def metric(self, name: str, kind: str, help_text: str,
               samples: Iterable[tuple[Mapping[str, str], float]]) -> None:
        self._head(name, kind, help_text)
        for labels, value in samples:
            self._lines.append(f"{name}{self._labels(labels)} {_number(value)}")

    def histogram(self, name: str, help_text: str, bounds: Sequence[float],
                  buckets: Sequence[int], total: float, count: int) -> None:
        """``buckets``: the observations per bound (not cumulative), then those above."""
        self._head(name, "histogram", help_text)
        cumulative = 0
        for bound, n in zip((*bounds, math.inf), buckets, strict=True):
            cumulative += n
            le = "+Inf" if math.isinf(bound) else repr(bound)
            self._lines.append(f"{name}_bucket{self._labels({'le': le})} {cumulative}")
        self._lines.append(f"{name}_sum{self._labels({})} {_number(total)}")
        self._lines.append(f"{name}_count{self._labels({})} {count}")

    def text(self) -> str:
        return "\n".join(self._lines) + "\n"
