"""The metrics as prometheus_client metric families, and the collector that exposes them.

The telemetry's parts write their metrics through :class:`MetricWriter`;
:class:`Families` builds prometheus_client families from what they write, and
:class:`TelemetryCollector` hands those to a :class:`~prometheus_client.CollectorRegistry`
at every scrape, which prometheus_client renders in the Prometheus text format 0.0.4 or,
when the scraper asks for it, in OpenMetrics 1.0 (:func:`render`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Protocol

from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    InfoMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector, CollectorRegistry

Samples = list[tuple[dict[str, str], float]]


def by_table(counts: Mapping[str, int]) -> Samples:
    """One sample per table, labelled with it, in table order."""
    return [({"table": table}, n) for table, n in sorted(counts.items())]


class MetricWriter(Protocol):
    """What the telemetry's parts write their metrics to; every sample gets ``source``."""

    def metric(self, name: str, kind: str, help_text: str,
               samples: Iterable[tuple[Mapping[str, str], float]], unit: str = "") -> None:
        """A ``counter`` or ``gauge``; every sample of a family has the same label names."""

    def info(self, name: str, help_text: str, labels: Mapping[str, str]) -> None:
        """An info metric: ``name`` ends with ``_info``, its one sample is 1."""

    def histogram(self, name: str, help_text: str, bounds: Sequence[float],
                  buckets: Sequence[int], total: float, unit: str = "") -> None:
        """``buckets``: the observations per bound (not cumulative), then those above."""


class Families:
    """A :class:`MetricWriter` that builds prometheus_client metric families."""

    def __init__(self, source: str) -> None:
        self._source = source
        self.families: list[Metric] = []

    def metric(self, name: str, kind: str, help_text: str,
               samples: Iterable[tuple[Mapping[str, str], float]], unit: str = "") -> None:
        samples = list(samples)
        names = list(samples[0][0]) if samples else []
        family: CounterMetricFamily | GaugeMetricFamily
        if kind == "counter":
            family = CounterMetricFamily(name, help_text, labels=["source", *names], unit=unit)
        elif kind == "gauge":
            family = GaugeMetricFamily(name, help_text, labels=["source", *names], unit=unit)
        else:
            raise ValueError(f"{name}: a metric is a counter or a gauge, not {kind!r}")
        for labels, value in samples:
            if list(labels) != names:
                raise ValueError(f"{name}: labels {list(labels)} where the family has {names}")
            family.add_metric([self._source, *labels.values()], value)
        self.families.append(family)

    def info(self, name: str, help_text: str, labels: Mapping[str, str]) -> None:
        family = InfoMetricFamily(name.removesuffix("_info"), help_text, labels=["source"])
        family.add_metric([self._source], dict(labels))
        self.families.append(family)

    def histogram(self, name: str, help_text: str, bounds: Sequence[float],
                  buckets: Sequence[int], total: float, unit: str = "") -> None:
        family = HistogramMetricFamily(name, help_text, labels=["source"], unit=unit)
        cumulative, points = 0, []
        for bound, n in zip((*bounds, math.inf), buckets, strict=True):
            cumulative += n
            points.append(("+Inf" if math.isinf(bound) else repr(bound), float(cumulative)))
        family.add_metric([self._source], points, total)
        self.families.append(family)


class TelemetryCollector(Collector):
    """Builds the families afresh at every scrape: ``write`` writes the current values."""

    def __init__(self, source: str, write: Callable[[MetricWriter], None]) -> None:
        self._source = source
        self._write = write

    def collect(self) -> Iterator[Metric]:
        out = Families(self._source)
        self._write(out)
        return iter(out.families)


def render(registry: CollectorRegistry, accept: str) -> tuple[bytes, str]:
    """The registry's metrics in the format ``accept`` (an HTTP Accept header) asks for,
    as prometheus_client negotiates it, and its content type."""
    encoder, content_type = choose_encoder(accept)
    return encoder(registry), content_type
