"""metrics_exposition: a /metrics scrape through prometheus_client against the hand-written
text format it replaced, on the same telemetry state.

No database: one :class:`Telemetry` is brought to the state of a busy worker (50 tables
with log and dump events landed, windows opened and closed on each, a lag histogram with
observations, errors, and a running dump of the 50 tables with progress, ETAs and a
throttle). Each run times ``scrapes`` scrapes of each way, interleaved scrape by scrape:

* ``hand_written``: the telemetry's metrics written by :class:`HandWritten`, the text
  writer the worker had before (``dblog_worker/telemetry/exposition.py`` at ``3fce005``);
* ``prometheus_client``: ``Telemetry.exposition()``, what /metrics serves by default
  (the worker's registry, its collector, ``generate_latest``: the text format 0.0.4);
* ``openmetrics``: the same with ``Accept: application/openmetrics-text``;
* ``collect``: only what prometheus_client's way does under the telemetry's lock, the
  families built by the collector (rendering them happens after the lock is released).

The two text outputs are parsed with prometheus_client's parser and must carry the same
samples. Reported: the median microseconds per scrape of each way (per run, then the
median of the runs), of wall time (``us_per_scrape``) and of the thread's CPU time
(``cpu_us_per_scrape``: what a shared machine's other processes do not inflate), the bytes
of each, and ``ratio``: prometheus_client's CPU time over the hand-written one's (the
median of the runs' ratios).
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future
from typing import Any

import pyarrow as pa
from prometheus_client.parser import text_string_to_metric_families

from bench.common import POSTGRESQL, Options, Result, machine, median, progress, rounded
from dblog_worker.capture.window import WindowClosed
from dblog_worker.dump.active import ActiveDump
from dblog_worker.dump.requests import DumpKind, DumpRequest, RequestState
from dblog_worker.dump.throttle import Signals, ThrottlePolicy
from dblog_worker.errors import SourceUnavailable
from dblog_worker.events import ChangeEvent, Checkpoint, Encoded, Op, Origin, Watermark
from dblog_worker.position import Position
from dblog_worker.telemetry import Telemetry
from dblog_worker.telemetry.exposition import TelemetryCollector

NAME = "metrics_exposition"
# What a run must produce: finite numbers above 0 (tests/bench: each benchmark, tiny).
FIGURES = ("prometheus_client.us_per_scrape", "openmetrics.us_per_scrape", "samples")
SOURCE_KINDS = (POSTGRESQL,)  # no database: once is enough
TABLES = 50
SCRAPES = 1_000
QUICK_SCRAPES = 200
OPENMETRICS = "application/openmetrics-text; version=1.0.0"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(value: float) -> str:
    if isinstance(value, int):
        return str(value)
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(round(value, 6))


class HandWritten:
    """The Prometheus text format 0.0.4 written line by line, as the worker did before
    prometheus_client: a :class:`~dblog_worker.telemetry.exposition.MetricWriter`."""

    def __init__(self, source: str) -> None:
        self._source = _escape(source)
        self._lines: list[str] = []

    def _labels(self, labels: Mapping[str, str]) -> str:
        parts = [f'source="{self._source}"']
        parts += [f'{name}="{_escape(value)}"' for name, value in labels.items()]
        return "{" + ",".join(parts) + "}"

    def _head(self, name: str, kind: str, help_text: str) -> None:
        help_text = help_text.replace("\\", "\\\\").replace("\n", "\\n")
        self._lines.append(f"# HELP {name} {help_text}")
        self._lines.append(f"# TYPE {name} {kind}")

    def metric(self, name: str, kind: str, help_text: str,
               samples: Iterable[tuple[Mapping[str, str], float]], unit: str = "") -> None:
        self._head(name, kind, help_text)
        for labels, value in samples:
            self._lines.append(f"{name}{self._labels(labels)} {_number(value)}")

    def info(self, name: str, help_text: str, labels: Mapping[str, str]) -> None:
        self.metric(name, "gauge", help_text, [(labels, 1)])

    def histogram(self, name: str, help_text: str, bounds: Sequence[float],
                  buckets: Sequence[int], total: float, unit: str = "") -> None:
        self._head(name, "histogram", help_text)
        cumulative = 0
        for bound, n in zip((*bounds, math.inf), buckets, strict=True):
            cumulative += n
            le = "+Inf" if math.isinf(bound) else repr(bound)
            self._lines.append(f"{name}_bucket{self._labels({'le': le})} {cumulative}")
        self._lines.append(f"{name}_sum{self._labels({})} {_number(total)}")
        self._lines.append(f"{name}_count{self._labels({})} {cumulative}")

    def text(self) -> str:
        return "\n".join(self._lines) + "\n"


def hand_written(telemetry: Telemetry) -> bytes:
    out = HandWritten(telemetry.source)
    telemetry.write_metrics(out)
    return out.text().encode()


def busy_worker(tables: int = TABLES, clock: Callable[[], float] = time.time) -> Telemetry:
    """A worker's telemetry in the middle of a dump of ``tables`` tables, with traffic."""
    now = clock()
    telemetry = Telemetry("bench", clock=clock)
    telemetry.role("leader", 7)
    telemetry.session_started("run", "0/10")
    telemetry.session_ended(SourceUnavailable("the log stream broke"))
    telemetry.session_started("run2", "0/10")
    telemetry.error("DumpFailed", "table gone", "d0")
    names = [f"public.table_{i:02d}" for i in range(tables)]
    limits = ThrottlePolicy(max_chunk_ms=20, max_active_sessions=40)
    request = DumpRequest(id="dump-1", kind=DumpKind.TABLES, tables=tuple(names),
                          chunk_size=10_000, delay_ms=0, state=RequestState.RUNNING,
                          created_at=now, updated_at=now, throttle=limits)
    dump = ActiveDump(request, {})
    dump.throttle.decide(limits, Signals(chunk_ms=35.0, active_sessions=12), window=True)
    telemetry.dump_started(dump)
    for i, table in enumerate(names):
        commit_us = int((now - 0.2) * 1e6)
        event = ChangeEvent(table=table, op=Op.UPDATE, position=Position(1, i), key="[1]",
                            after="{}", before=None, origin=Origin.LOG,
                            commit_ts_us=commit_us, schema_version=1)
        telemetry.polled([event, Checkpoint(Position(1, i))], f"0/{i}", lambda: {})
        telemetry.submitted()
        telemetry.durable({table: (1000 + i, 10_000 * i)}, f"0/{i + 100}")
        chunk: Future[Encoded] = Future()
        chunk.set_result((pa.array(["[1]", "[2]"]), pa.array(["{}", "{}"])))
        telemetry.window_opened(table, "dump-1", f"run.{i}.lw", 10_000, chunk)
        high = Watermark(f"run.{i}.hw", Position(2, i), commit_us)
        telemetry.window_closed(WindowClosed(table=table, dump_id="dump-1", high=high,
                                             survivors=tuple(range(9_990)), selected=10_000,
                                             schema_version=1))
        dump.progress[table] = dataclasses.replace(
            dump.progress[table], started=True, upper_bound=["1000000"],
            last_key=[str(10_000 * (i + 1))], chunks=i + 1)
    telemetry.dump_progress(dump)
    for table in names:  # a second progress sample: the ETAs
        progress = dump.progress[table]
        assert progress.last_key is not None
        dump.progress[table] = dataclasses.replace(
            progress, last_key=[str(int(progress.last_key[0]) + 5_000)])
    telemetry.dump_progress(dump)
    telemetry.log_lag(123_456)
    return telemetry


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): float(s.value)
            for family in text_string_to_metric_families(text) for s in family.samples}


def same_samples(old: str, new: str) -> None:
    """The same series with the same values (the hand-written text rounded to 6 places)."""
    before, after = samples(old), samples(new)
    if before.keys() != after.keys():
        raise RuntimeError(f"the expositions differ: {before.keys() ^ after.keys()}")
    for series, value in before.items():
        if not math.isclose(value, after[series], rel_tol=1e-12, abs_tol=1e-6):
            raise RuntimeError(f"{series}: {value} hand-written, {after[series]} now")


def run(options: Options) -> Result:
    now = time.time()
    telemetry = busy_worker(clock=lambda: now)  # a still clock: the same values every scrape
    collector = TelemetryCollector(telemetry.source, telemetry.write_metrics)
    ways: dict[str, Callable[[], bytes]] = {
        "hand_written": lambda: hand_written(telemetry),
        "prometheus_client": lambda: telemetry.exposition("")[0],
        "openmetrics": lambda: telemetry.exposition(OPENMETRICS)[0],
        "collect": lambda: bytes(len(list(collector.collect()))),
    }
    old, new = hand_written(telemetry).decode(), telemetry.exposition("")[0].decode()
    same_samples(old, new)
    scrapes = QUICK_SCRAPES if options.quick else SCRAPES
    wall: dict[str, list[float]] = {name: [] for name in ways}
    cpu: dict[str, list[float]] = {name: [] for name in ways}
    ratios: list[float] = []
    for i in range(options.runs):
        times: dict[str, list[float]] = {name: [] for name in ways}
        cpu_times: dict[str, list[float]] = {name: [] for name in ways}
        for _ in range(scrapes):
            for name, scrape in ways.items():
                started, cpu_started = time.perf_counter(), time.thread_time()
                scrape()
                cpu_times[name].append(time.thread_time() - cpu_started)
                times[name].append(time.perf_counter() - started)
        for name in ways:
            wall[name].append(median(times[name]) * 1e6)
            cpu[name].append(median(cpu_times[name]) * 1e6)
        ratios.append(cpu["prometheus_client"][-1] / cpu["hand_written"][-1])
        progress(f"{NAME} run {i + 1}/{options.runs}: " + ", ".join(
            f"{name} {wall[name][-1]:.0f} µs ({cpu[name][-1]:.0f} µs CPU)" for name in ways))
    report: dict[str, Any] = {"benchmark": NAME, "tables": TABLES, "runs": options.runs,
                              "scrapes_per_run": scrapes,
                              "families": sum(1 for _ in text_string_to_metric_families(new)),
                              "samples": len(samples(new))}
    for name, scrape in ways.items():
        report[name] = {"us_per_scrape": rounded(median(wall[name]), 1),
                        "cpu_us_per_scrape": rounded(median(cpu[name]), 1)}
        if name != "collect":
            report[name]["bytes"] = len(scrape())
    report["ratio"] = rounded(median(ratios))
    report["machine"] = machine(options.source)
    return report
