"""The collaborators of the telemetry facade, each alone: no lock, no clock of their own."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from prometheus_client import CollectorRegistry

from dblog_worker.capture.window import WindowClosed
from dblog_worker.events import ChangeEvent, Checkpoint, Op, Origin, Watermark
from dblog_worker.position import Position
from dblog_worker.telemetry.checkpoint import QUIET_CHECKPOINT_S, CheckpointStatus
from dblog_worker.telemetry.exposition import (
    Families,
    MetricWriter,
    TelemetryCollector,
    render,
)
from dblog_worker.telemetry.feed import Feed
from dblog_worker.telemetry.lag import Lag
from dblog_worker.telemetry.landed import Landed
from dblog_worker.telemetry.lifecycle import Lifecycle
from dblog_worker.telemetry.log_lines import LOG_FEED_INTERVAL_S, LogLines
from dblog_worker.telemetry.windows import OpenWindow, Windows

T = "public.orders"
NOW = 1_800_000_000.0


def event(key: int, commit_s: float = NOW) -> ChangeEvent:
    return ChangeEvent(table=T, op=Op.CREATE, position=Position(7, 1), key=f"[{key}]",
                       after="{}", before=None, origin=Origin.LOG,
                       commit_ts_us=int(commit_s * 1e6), schema_version=1)


def test_feed_numbers_entries_and_pages_by_sequence() -> None:
    feed = Feed(lambda: NOW + 0.0004, size=3)
    assert feed.after(0, 10) == {"next": 0, "events": []}
    for i in range(5):
        feed.add("error", message=str(i))
    assert feed.after(0, 10)["events"][0] == {"seq": 3, "ts": NOW, "type": "error",
                                              "message": "2"}
    assert feed.after(3, 1) == {"next": 4, "events": [
        {"seq": 4, "ts": NOW, "type": "error", "message": "3"}]}
    assert feed.after(5, 10) == {"next": 5, "events": []}


def exposition(write: Callable[[MetricWriter], None], source: str = "s",
               accept: str = "") -> str:
    """What a registry with only ``write``'s metrics serves to a scraper sending ``accept``."""
    registry = CollectorRegistry()
    registry.register(TelemetryCollector(source, write))
    body, _ = render(registry, accept)
    return body.decode()


def test_exposition_writes_help_type_samples_and_a_cumulative_histogram() -> None:
    def write(out: MetricWriter) -> None:
        out.info("dblog_v_info", "V.", {"version": "1"})
        out.metric("dblog_a_total", "counter", "A\nb.", [({"table": "t\\1"}, 2),
                                                         ({"table": "u"}, 0.5)])
        out.metric("dblog_g_bytes", "gauge", "G.", [], unit="bytes")
        out.histogram("dblog_h_seconds", "H.", (0.5, 1.0), [1, 0, 2], 3.25, unit="seconds")

    assert exposition(write, 's"x') == "\n".join([
        "# HELP dblog_v_info V.",
        "# TYPE dblog_v_info gauge",
        'dblog_v_info{source="s\\"x",version="1"} 1.0',
        "# HELP dblog_a_total A\\nb.",
        "# TYPE dblog_a_total counter",
        'dblog_a_total{source="s\\"x",table="t\\\\1"} 2.0',
        'dblog_a_total{source="s\\"x",table="u"} 0.5',
        "# HELP dblog_g_bytes G.",
        "# TYPE dblog_g_bytes gauge",
        "# HELP dblog_h_seconds H.",
        "# TYPE dblog_h_seconds histogram",
        'dblog_h_seconds_bucket{le="0.5",source="s\\"x"} 1.0',
        'dblog_h_seconds_bucket{le="1.0",source="s\\"x"} 1.0',
        'dblog_h_seconds_bucket{le="+Inf",source="s\\"x"} 3.0',
        'dblog_h_seconds_count{source="s\\"x"} 3.0',
        'dblog_h_seconds_sum{source="s\\"x"} 3.25',
    ]) + "\n"
    openmetrics = exposition(write, accept="application/openmetrics-text; version=1.0.0")
    for line in ("# TYPE dblog_v info", "# TYPE dblog_a counter", "# UNIT dblog_g_bytes bytes",
                 "# UNIT dblog_h_seconds seconds", 'dblog_a_total{source="s",table="u"} 0.5'):
        assert line + "\n" in openmetrics, line
    assert openmetrics.endswith("# EOF\n")


def test_a_family_keeps_one_label_set_and_one_of_two_kinds() -> None:
    out = Families("s")
    with pytest.raises(ValueError, match=r"dblog_x_total: labels \['kind'\] where the family "
                                         r"has \['table'\]"):
        out.metric("dblog_x_total", "counter", "X.", [({"table": "t"}, 1), ({"kind": "k"}, 1)])
    with pytest.raises(ValueError, match="a counter or a gauge, not 'summary'"):
        out.metric("dblog_y", "summary", "Y.", [])


def test_lifecycle_counts_taking_and_losing_the_lease() -> None:
    life = Lifecycle()
    assert life.change_role("standby", None, {"owner": "w2"})
    assert not life.change_role("standby", None, None) and life.leader == {}
    assert life.change_role("leader", 4, None)
    assert life.change_role("stopped", None, None)
    text = exposition(life.metrics)
    assert 'dblog_lease_acquired_total{source="s"} 1.0' in text
    assert 'dblog_lease_lost_total{source="s"} 1.0' in text
    life.session_started("r1", {})
    assert "dblog_reader_info" not in exposition(life.metrics)  # MySQL: nothing to choose
    life.session_started("r2", {"chunk_cells": "python"})
    assert (life.sessions, life.reconnects, life.run_id) == (2, 1, "r2")
    assert 'dblog_reader_info{chunk_cells="python",source="s"} 1.0' in exposition(life.metrics)
    assert life.failed("E", "boom", NOW) == "E: boom" and life.errors == {"E": 1}


def test_checkpoint_moves_and_an_idle_one_is_told_now_and_then() -> None:
    checkpoint = CheckpointStatus()
    assert not checkpoint.save(None, NOW)
    assert checkpoint.save("0/1", NOW) and checkpoint.saved_at == NOW
    assert not checkpoint.save("0/1", NOW + 1)
    assert checkpoint.worth_a_line(NOW, 0)  # the first quiet move
    assert not checkpoint.worth_a_line(NOW + 1, 0)
    assert checkpoint.worth_a_line(NOW + 1, 5)  # events landed: always
    assert checkpoint.worth_a_line(NOW + 1 + QUIET_CHECKPOINT_S, 0)


def test_lag_is_that_of_the_submitted_write() -> None:
    lag = Lag(points=2)
    assert lag.durable(NOW, 3) is None  # nothing submitted yet
    lag.read([event(1, NOW - 2), Checkpoint(Position(8, 0))])
    lag.submitted()
    lag.read([Watermark("run.1.lw", Position(9, 0), int((NOW - 1) * 1e6))])  # after it
    assert lag.durable(NOW, 0) is None  # nothing landed: no observation
    assert lag.durable(NOW, 3) == 2.0 and lag.last_s == 2.0
    lag.restart()
    assert lag.durable(NOW + 1, 3) is None and list(lag.history) == [(NOW, 2.0)]


def test_landed_counts_by_origin_and_rates() -> None:
    landed = Landed(points=5)
    assert landed.add(NOW, {T: (3, 2), "b": (0, 0)}) == 5
    assert landed.add(NOW + 2, {T: (4, 0)}) == 4
    assert landed.total == 9 and landed.per_s(NOW + 2) == 2.0
    assert landed.per_s(NOW + 60) == 0.0
    assert [line for line in exposition(landed.metrics).splitlines()
            if not line.startswith("#")] == [
        'dblog_events_total{origin="dump",source="s",table="public.orders"} 2.0',
        'dblog_events_total{origin="log",source="s",table="public.orders"} 7.0',
    ]


def test_log_lines_count_since_the_last_line() -> None:
    lines = LogLines(lambda p: f"{p.major}/{p.minor}")
    assert lines.due(NOW)
    assert lines.counts({T: 2}) == {T: 2}
    fields = lines.line(NOW, {T: 2}, {T: 2}, [event(1), event(2)], "0/2")
    assert fields == {"events": 2, "tables": {T: 2}, "position": "0/2", "samples": [
        {"table": T, "op": "c", "key": f"[{k}]", "position": "7/1"} for k in (1, 2)]}
    assert not lines.due(NOW + LOG_FEED_INTERVAL_S / 2)
    assert lines.counts({T: 2}) == {} and lines.counts({T: 5}) == {T: 3}
    lines.restart()
    assert lines.counts({T: 1}) == {T: 1}


def test_windows_close_oldest_first_and_count_chunk_rows() -> None:
    windows = Windows()
    windows.opened(OpenWindow(T, "d1", "run.1.lw", 4, NOW, None))
    windows.opened(OpenWindow(T, "d1", "run.2.lw", 4, NOW + 1, None))
    high = Watermark("run.1.hw", Position(9, 0), 0)
    first = windows.closed(WindowClosed(T, "d1", high, (0, 3), 4, 1))
    assert first is not None and first.low == "run.1.lw" and len(windows.open) == 1
    windows.clear()
    assert windows.closed(WindowClosed(T, "d1", high, (), 4, 1)) is None
    text = exposition(windows.metrics)
    for sample in ('dblog_windows_opened_total{source="s",table="public.orders"} 2.0',
                   'dblog_windows_closed_total{source="s",table="public.orders"} 2.0',
                   'dblog_windows_open{source="s"} 0.0',
                   'dblog_chunk_rows_dropped_total{source="s",table="public.orders"} 6.0',
                   'dblog_chunk_rows_emitted_total{source="s",table="public.orders"} 2.0'):
        assert sample in text, sample
