"""Telemetry: the exposition format parses, counters move, the feed is bounded and ordered,
progress ratios and ETAs; and the output buffer's per-table counts it reads."""

from __future__ import annotations

import dataclasses
import json
import math
import re
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from dblog_worker.capture.output import OutputBuffer
from dblog_worker.capture.window import WindowClosed
from dblog_worker.dump.active import ActiveDump
from dblog_worker.dump.requests import DumpKind, DumpRequest, Priority, RequestState
from dblog_worker.errors import SourceUnavailable
from dblog_worker.events import ChangeEvent, Checkpoint, Encoded, Op, Origin, PendingRows, Watermark
from dblog_worker.landing.parquet import LandingZone
from dblog_worker.position import Position
from dblog_worker.telemetry import Telemetry
from dblog_worker.telemetry.key_ratio import key_ratio
from dblog_worker.telemetry.log_lines import LOG_FEED_INTERVAL_S
from dblog_worker.telemetry.positions import describe_position

T = "public.orders"
NOW = 1_800_000_000.0


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> float:
        return self.now


def telemetry(clock: Clock | None = None, **kwargs: int) -> Telemetry:
    return Telemetry("shop", clock=clock or Clock(), **kwargs)  # type: ignore[arg-type]


def event(table: str = T, key: int = 1, commit_s: float = NOW) -> ChangeEvent:
    return ChangeEvent(table=table, op=Op.UPDATE, position=Position(0x1_0000_0010, 2),
                       key=f"[{key}]", after="{}", before=None, origin=Origin.LOG,
                       commit_ts_us=int(commit_s * 1e6), schema_version=1)


def closed(table: str = T, selected: int = 5, survivors: tuple[int, ...] = (0, 2, 4),
           dump_id: str = "d1", number: int = 1) -> WindowClosed:
    return WindowClosed(
        table=table, dump_id=dump_id,
        high=Watermark(f"run.{number}.hw", Position(0x2_0000_0000, 0), int(NOW * 1e6)),
        survivors=survivors, selected=selected, schema_version=1,
    )


# -- a strict reader of the Prometheus text format 0.0.4 ------------------------------------

NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
LABEL_VALUE = r'"(?:[^"\\\n]|\\\\|\\"|\\n)*"'
SAMPLE = re.compile(
    rf"^(?P<name>{NAME})(?:\{{(?P<labels>(?:[a-zA-Z_][a-zA-Z0-9_]*={LABEL_VALUE})"
    rf"(?:,[a-zA-Z_][a-zA-Z0-9_]*={LABEL_VALUE})*)\}})? (?P<value>\S+)$"
)
LABEL = re.compile(rf'([a-zA-Z_][a-zA-Z0-9_]*)=({LABEL_VALUE})')
TYPES = {"counter", "gauge", "histogram", "summary", "untyped"}


@dataclass
class Family:
    kind: str
    help: str
    samples: dict[tuple[str, tuple[tuple[str, str], ...]], float] = field(default_factory=dict)


def unescape(value: str) -> str:
    return re.sub(r'\\(.)', lambda m: {"n": "\n"}.get(m.group(1), m.group(1)), value[1:-1])


def parse(text: str) -> dict[str, Family]:
    """Every line a HELP, a TYPE or a sample of the family declared just before it."""
    assert text.endswith("\n")
    families: dict[str, Family] = {}
    current: str | None = None
    helps: dict[str, str] = {}
    for line in text[:-1].split("\n"):
        if line.startswith("# HELP "):
            name, _, help_text = line[7:].partition(" ")
            assert re.fullmatch(NAME, name) and name not in helps, line
            helps[name] = help_text
        elif line.startswith("# TYPE "):
            name, _, kind = line[7:].partition(" ")
            assert kind in TYPES and name in helps and name not in families, line
            families[name] = Family(kind, helps[name])
            current = name
        else:
            match = SAMPLE.match(line)
            assert match is not None, f"not a sample line: {line!r}"
            assert current is not None
            name = match["name"]
            suffixes = ("_bucket", "_sum", "_count") if families[current].kind == "histogram" \
                else ("",)
            assert any(name == current + s for s in suffixes), f"{name} outside its family"
            labels = tuple((k, unescape(v)) for k, v in LABEL.findall(match["labels"] or ""))
            assert len({k for k, _ in labels}) == len(labels), line
            value = float(match["value"])  # +Inf, NaN and floats parse
            series = (name, labels)
            assert series not in families[current].samples, f"duplicate series {line}"
            families[current].samples[series] = value
    return families


def value(families: dict[str, Family], name: str, **labels: str) -> float:
    family = families[re.sub(r"_(bucket|sum|count)$", "", name)] \
        if name not in families else families[name]
    wanted = {"source": "shop", **labels}
    found = [v for (n, ls), v in family.samples.items() if n == name and dict(ls) == wanted]
    assert len(found) == 1, f"{name}{labels}: {family.samples}"
    return found[0]


def test_every_metric_parses_with_help_type_prefix_and_units() -> None:
    t = telemetry()
    t.session_started("run", "0/10")
    t.window_opened(T, "d1", "run.1.lw", 5)
    t.window_closed(closed())
    t.durable({T: (3, 3)}, "0/20")
    t.log_lag(42)
    families = parse(t.prometheus())
    assert len(families) >= 20
    for name, family in families.items():
        assert name.startswith("dblog_"), name
        assert family.help, name
        if family.kind == "counter":
            assert name.endswith("_total"), name
        assert not name.endswith("_total") or family.kind == "counter", name
    for unit in ("dblog_end_to_end_lag_seconds", "dblog_log_lag_bytes",
                 "dblog_checkpoint_age_seconds", "dblog_dump_progress_ratio"):
        assert unit in families
    assert families["dblog_end_to_end_lag_seconds"].kind == "histogram"
    assert value(families, "dblog_log_lag_bytes") == 42


def test_label_values_are_escaped() -> None:
    odd = 'we"ird\\table\nname'
    t = Telemetry('sh"op')
    t.durable({odd: (1, 0)}, None)
    text = t.prometheus()
    assert '\\"' in text and "\\\\" in text and "\\n" in text
    families = parse(text)
    samples = families["dblog_events_total"].samples
    assert [dict(labels) for (_, labels) in samples] == [
        {"source": 'sh"op', "table": odd, "origin": "log"}]


def test_counters_move_by_table_and_origin() -> None:
    t = telemetry()
    t.durable({T: (5, 2), "public.b": (1, 0)}, "0/1")
    t.durable({T: (4, 0)}, "0/2")
    families = parse(t.prometheus())
    assert value(families, "dblog_events_total", table=T, origin="log") == 9
    assert value(families, "dblog_events_total", table=T, origin="dump") == 2
    assert value(families, "dblog_events_total", table="public.b", origin="log") == 1
    assert len(families["dblog_events_total"].samples) == 3  # no zero dump series for b


def test_windows_and_chunk_rows() -> None:
    t = telemetry()
    t.window_opened(T, "d1", "run.1.lw", 5)
    t.window_opened(T, "d1", "run.2.lw", 5)
    families = parse(t.prometheus())
    assert value(families, "dblog_windows_opened_total", table=T) == 2
    assert value(families, "dblog_windows_open") == 2
    assert families["dblog_windows_closed_total"].samples == {}
    t.window_closed(closed(survivors=(0, 2, 4)))
    t.window_closed(closed(survivors=(), number=2))
    families = parse(t.prometheus())
    assert value(families, "dblog_windows_closed_total", table=T) == 2
    assert value(families, "dblog_windows_open") == 0
    assert value(families, "dblog_chunk_rows_selected_total", table=T) == 10
    assert value(families, "dblog_chunk_rows_dropped_total", table=T) == 7
    assert value(families, "dblog_chunk_rows_emitted_total", table=T) == 3
    entries = t.feed(0)["events"]
    assert [e["type"] for e in entries] == ["window_opened"] * 2 + ["window_closed"] * 2
    assert entries[0] | {"ts": 0} == {"seq": 1, "ts": 0, "type": "window_opened", "table": T,
                                      "dump_id": "d1", "low": "run.1.lw", "selected": 5,
                                      "window": "run.1"}
    assert (entries[2]["selected"], entries[2]["dropped"], entries[2]["emitted"]) == (5, 2, 3)
    assert entries[2]["high"] == "run.1.hw" and entries[2]["position"] == "2/0"


def test_lag_gauge_histogram_and_history() -> None:
    clock = Clock()
    t = telemetry(clock)
    t.polled([event(commit_s=NOW - 0.3), Checkpoint(Position(5, 0))], "0/5", lambda: {T: 1})
    t.submitted()
    clock.now += 0.5  # durable 0.8 s after the commit
    t.durable({T: (1, 0)}, "0/5")
    families = parse(t.prometheus())
    assert value(families, "dblog_last_batch_lag_seconds") == pytest.approx(0.8)
    assert value(families, "dblog_end_to_end_lag_seconds_count") == 1
    assert value(families, "dblog_end_to_end_lag_seconds_sum") == pytest.approx(0.8)
    assert value(families, "dblog_end_to_end_lag_seconds_bucket", le="0.5") == 0
    assert value(families, "dblog_end_to_end_lag_seconds_bucket", le="1.0") == 1
    assert value(families, "dblog_end_to_end_lag_seconds_bucket", le="+Inf") == 1
    buckets = [v for (n, _), v in
               families["dblog_end_to_end_lag_seconds"].samples.items() if n.endswith("_bucket")]
    assert buckets == sorted(buckets)  # cumulative
    snapshot = t.snapshot()
    assert snapshot["lag_s"] == pytest.approx(0.8)
    assert snapshot["lag_history"] == [(pytest.approx(NOW + 0.5), pytest.approx(0.8))]
    t.durable({}, "0/6")  # nothing landed: no observation
    assert value(parse(t.prometheus()), "dblog_end_to_end_lag_seconds_count") == 1


def test_checkpoint_age() -> None:
    clock = Clock()
    t = telemetry(clock)
    assert t.snapshot()["checkpoint_age_s"] is None
    assert parse(t.prometheus())["dblog_checkpoint_age_seconds"].samples == {}
    t.durable({}, "0/A")
    clock.now += 7
    t.durable({}, None)  # no new checkpoint: the age grows
    assert t.snapshot()["checkpoint"] == "0/A"
    assert t.snapshot()["checkpoint_age_s"] == pytest.approx(7)
    assert value(parse(t.prometheus()), "dblog_checkpoint_age_seconds") == pytest.approx(7)
    t.durable({}, "0/B")
    assert t.snapshot()["checkpoint_age_s"] == 0


def test_sessions_reconnects_and_errors() -> None:
    t = telemetry()
    assert t.snapshot()["connected"] is False
    t.session_started("r1", "0/1")
    assert t.snapshot()["connected"] is True
    t.session_ended(SourceUnavailable("the log stream broke"))
    snapshot = t.snapshot()
    assert snapshot["connected"] is False
    assert snapshot["last_error"] == "SourceUnavailable: the log stream broke"
    t.session_started("r2", "0/1")
    assert t.snapshot()["last_error_at"] == NOW
    t.error("DumpFailed", "table gone", "d1")
    families = parse(t.prometheus())
    assert value(families, "dblog_connected") == 1
    assert value(families, "dblog_sessions_total") == 2
    assert value(families, "dblog_reconnects_total") == 1
    assert value(families, "dblog_errors_total", kind="SourceUnavailable") == 1
    assert value(families, "dblog_errors_total", kind="DumpFailed") == 1
    states = [(e["type"], e.get("state")) for e in t.feed(0)["events"]]
    assert states == [("session", "connected"), ("session", "lost"), ("session", "connected"),
                      ("error", None)]


def test_feed_is_bounded_and_ordered() -> None:
    t = telemetry(feed_size=10)
    for i in range(25):
        t.error("E", str(i))
    page = t.feed(0)
    assert [e["seq"] for e in page["events"]] == list(range(16, 26))
    assert [e["message"] for e in page["events"]] == [str(i) for i in range(15, 25)]
    assert page["next"] == 25
    assert [e["seq"] for e in t.feed(20)["events"]] == [21, 22, 23, 24, 25]
    limited = t.feed(16, limit=3)
    assert [e["seq"] for e in limited["events"]] == [17, 18, 19] and limited["next"] == 19
    assert t.feed(25) == {"next": 25, "events": []}
    assert t.feed(1000) == {"next": 25, "events": []}  # a reader of an earlier worker
    assert t.feed(-5)["events"][0]["seq"] == 16
    json.dumps(page)


def test_log_lines_aggregate_polls_and_carry_samples() -> None:
    clock = Clock()
    t = telemetry(clock)
    read = {T: 0, "public.b": 0}
    t.polled([Checkpoint(Position(1, 0))], "0/1", lambda: dict(read))
    assert t.feed(0)["events"] == []  # no events read: no line
    read[T] += 3
    t.polled([event(key=1), event(key=2), event(key=3), Checkpoint(Position(2, 0))], "0/2",
             lambda: dict(read))
    read[T] += 1
    read["public.b"] += 2
    clock.now += LOG_FEED_INTERVAL_S / 2  # too soon: counted into the next line
    t.polled([event(key=4), event("public.b", 5), event("public.b", 6)], "0/3",
             lambda: dict(read))
    clock.now += LOG_FEED_INTERVAL_S
    read[T] += 1
    t.polled([event(key=7)], "0/4", lambda: dict(read))
    lines = t.feed(0)["events"]
    assert [line["type"] for line in lines] == ["log", "log"]
    assert lines[0]["tables"] == {T: 3} and lines[0]["events"] == 3
    assert [s["key"] for s in lines[0]["samples"]] == ["[1]", "[2]", "[3]"]
    assert lines[0]["samples"][0] == {"table": T, "op": "u", "key": "[1]",
                                      "position": "1/10#2"}
    assert lines[1]["tables"] == {T: 2, "public.b": 2} and lines[1]["events"] == 4
    assert lines[1]["position"] == "0/4"
    assert t.snapshot()["position"] == "0/4"
    t.session_started("r2", None)  # a new session's output buffer counts from 0
    clock.now += LOG_FEED_INTERVAL_S
    t.polled([event(key=8)], "0/5", lambda: {T: 1})
    assert t.feed(0)["events"][-1]["tables"] == {T: 1}


def test_events_per_second() -> None:
    clock = Clock()
    t = telemetry(clock)
    t.durable({T: (100, 0)}, None)
    clock.now += 2
    t.durable({T: (300, 100)}, None)
    assert t.snapshot()["events_per_s"] == pytest.approx(200)
    clock.now += 60  # idle since
    assert t.snapshot()["events_per_s"] == 0


def request(kind: DumpKind = DumpKind.TABLES, key_count: int = 0,
            state: RequestState = RequestState.RUNNING) -> DumpRequest:
    return DumpRequest(id="d1", kind=kind, tables=(T, "public.b"), chunk_size=10, delay_ms=0,
                       state=state, created_at=NOW, updated_at=NOW, key_count=key_count)


def test_dump_progress_ratio_and_eta() -> None:
    clock = Clock()
    t = telemetry(clock)
    dump = ActiveDump(request(), {})
    t.dump_started(dump)
    def progress(**changes: Any) -> None:
        dump.progress[T] = dataclasses.replace(dump.progress[T], **changes)

    progress(started=True, upper_bound=["1000"])
    chunk: Future[Encoded] = Future()
    chunk.set_result((pa.array(["[101]", "[102]"]), pa.array(["{}", "{}"])))
    t.window_opened(T, "d1", "run.1.lw", 2, chunk)
    t.window_closed(closed(dump_id="d1"))  # the first key, 101, starts the range
    progress(last_key=["190"])  # 10 % of 101..1000
    t.dump_progress(dump)
    clock.now += 10
    progress(last_key=["280"])  # 20 %: 10 % in 10 s, 80 s to go
    t.dump_progress(dump)
    view = t.snapshot()["dump"]
    assert view["request_id"] == "d1" and view["state"] == "running"
    table = view["tables"][0]
    assert table["ratio"] == pytest.approx(0.2, abs=1e-3)
    assert table["eta_s"] == pytest.approx(80, abs=1)
    assert view["tables"][1]["ratio"] is None and view["eta_s"] is None  # b not started
    families = parse(t.prometheus())
    assert value(families, "dblog_dump_progress_ratio", request="d1", table=T) == \
        pytest.approx(0.2, abs=1e-3)
    assert value(families, "dblog_dump_eta_seconds", request="d1", table=T) == \
        pytest.approx(80, abs=1)
    assert value(families, "dblog_dump_state", request="d1", state="running",
                 priority="normal") == 1
    assert value(families, "dblog_dump_waiting", request="d1") == 0
    assert view["waiting"] is None
    dump.waiting = "the read replica has not replayed the low watermark within 1000 ms"
    t.dump_progress(dump)
    assert t.snapshot()["dump"]["waiting"] == dump.waiting
    assert value(parse(t.prometheus()), "dblog_dump_waiting", request="d1") == 1
    assert t.feed(0)["events"][-1]["waiting"] == dump.waiting
    dump.waiting = None
    t.dump_progress(dump)
    progress(done=True)
    dump.progress["public.b"] = dataclasses.replace(dump.progress["public.b"], done=True)
    t.dump_ended("d1", "completed")
    assert t.snapshot()["dump"] is None
    assert parse(t.prometheus())["dblog_dump_progress_ratio"].samples == {}
    kinds = [(e["type"], e.get("state")) for e in t.feed(0)["events"] if e["type"] == "dump"]
    assert kinds == [("dump", "started"), *[("dump", "progress")] * 4,  # 2 for the waiting
                     ("dump", "completed")]
    assert t.feed(0)["events"][-1]["progress"][0]["ratio"] == 1.0


def test_primary_key_dump_ratio_is_exact() -> None:
    t = telemetry()
    dump = ActiveDump(request(DumpKind.KEYS, key_count=8), {})
    dump.progress[T] = dataclasses.replace(dump.progress[T], next_key_index=2)
    t.dump_started(dump)
    assert t.snapshot()["dump"]["tables"][0]["ratio"] == 0.25


def test_a_resumed_dump_says_so() -> None:
    t = telemetry()
    t.dump_started(ActiveDump(request(), {}))
    t.session_ended(SourceUnavailable("gone"))
    t.dump_started(ActiveDump(request(), {}))
    assert [e["state"] for e in t.feed(0)["events"] if e["type"] == "dump"] == [
        "started", "resumed"]


def test_several_dumps_are_shown_each_with_its_priority() -> None:
    t = telemetry()
    backfill = ActiveDump(dataclasses.replace(request(), id="d1",
                                              priority=Priority.BACKGROUND), {})
    repair = ActiveDump(dataclasses.replace(request(DumpKind.KEYS, key_count=3), id="d2",
                                            tables=(T,), priority=Priority.URGENT), {})
    t.dump_started(backfill)
    t.dump_started(repair)
    repair.parked = "a slot: 1 request(s) of higher priority or older run"
    t.dump_progress(repair)
    t.window_opened(T, "d1", "run.1.lw", 5, priority="background")
    for number in (2, 3):
        t.window_opened(T, "d2", f"run.{number}.lw", 1, priority="urgent")
    snapshot = t.snapshot()
    assert snapshot["active_requests"] == ["d1", "d2"] and snapshot["active_request"] == "d1"
    assert [(v["request_id"], v["priority"], v["waiting"]) for v in snapshot["dumps"]] == [
        ("d1", "background", None), ("d2", "urgent", repair.parked)]
    assert snapshot["dump"] == snapshot["dumps"][0]
    families = parse(t.prometheus())
    assert value(families, "dblog_dump_state", request="d2", state="running",
                 priority="urgent") == 1
    assert value(families, "dblog_dump_waiting", request="d2") == 1
    assert value(families, "dblog_dump_windows_total", priority="urgent") == 2
    assert value(families, "dblog_dump_windows_total", priority="background") == 1
    t.dump_ended("d1", "completed")
    assert [v["request_id"] for v in t.snapshot()["dumps"]] == ["d2"]
    t.session_ended(SourceUnavailable("gone"))
    assert t.snapshot()["dumps"] == []
    t.dump_started(repair)
    assert [e["state"] for e in t.feed(0)["events"] if e["type"] == "dump"][-1] == "resumed"


@pytest.mark.parametrize(("low", "last", "upper", "expected"), [
    (1.0, "50", "101", 0.49),
    (None, "25", "100", 0.25),  # no first key: numbers count from 0
    (1000.0, "1000", "2000", 0.0),
    (1.0, "5000", "100", 1.0),  # clipped
    ("a", "m", "z", (ord("m") - ord("a")) / (ord("z") - ord("a"))),
    ("00000000-aaaa", "80000000-0000", "ffffffff-ffff", 0.5),
    (5.0, "5", "5", None),  # a one-key range
])
def test_key_ratio(low: float | str | None, last: str, upper: str,
                   expected: float | None) -> None:
    ratio = key_ratio(low, last, upper)
    if expected is None:
        assert ratio is None
    else:
        assert ratio is not None and math.isclose(ratio, expected, abs_tol=0.01)


def test_positions_read_as_the_source_writes_them() -> None:
    assert describe_position("postgresql")(Position(0x16B3748, 0)) == "0/16B3748"
    assert describe_position("postgresql")(Position(0x1_0000_0001, 3)) == "1/1#3"
    assert describe_position("mysql")(Position(3, 1234, 2)) == "000003:1234#2"


def test_snapshot_has_the_contract_fields_and_is_json() -> None:
    t = telemetry()
    t.window_opened(T, "d1", "run.1.lw", 5)
    snapshot = t.snapshot()
    for name in ("source", "connected", "last_error", "position", "checkpoint",
                 "checkpoint_age_s", "lag_bytes", "lag_s", "window", "active_requests",
                 "active_request", "events_per_s", "uptime_s", "reconnects", "dumps", "dump"):
        assert name in snapshot, name
    assert snapshot["window"] == {"table": T, "dump_id": "d1", "opened_at": NOW,
                                  "low": "run.1.lw"}
    json.dumps(snapshot)


# -- what the output buffer counts for it ------------------------------------------------


def test_output_buffer_counts_log_events_and_landed_rows(tmp_path: Path) -> None:
    landing = LandingZone(tmp_path, "shop")
    output = OutputBuffer(landing, landing.recover())
    chunk: Future[Encoded] = Future()
    chunk.set_result((pa.array(["[1]", "[2]", "[3]"]), pa.array(["{}", "{}", "{}"])))
    output.add(event(key=1))
    output.add(event(key=2))
    output.add_rows(PendingRows(T, chunk, [0, 2], 2, Position(0x1_0000_0020, 0), 1, 1, "d1"))
    output.add(event("public.b", 3))
    assert output.log_events_by_table() == {T: 2, "public.b": 1}
    output.submit()
    output.add(event(key=4))
    assert output.log_events_by_table() == {T: 3, "public.b": 1}
    assert output.wait() == 5
    assert output.landed == {T: (2, 2), "public.b": (1, 0)}
    assert output.emitted == 5
    assert output.wait() == 0 and output.landed == {}
    output.close()
