"""Restarts from the checkpoint with the landing zone kept: a clean stop mid-dump, an
outage that ends the session in the middle of a window, a new worker that resumes."""

from __future__ import annotations

import threading

from tests.fakedb.database import Commit
from tests.fakedb.source import WATERMARK_TABLE
from tests.unit.scenarios.capture import Capture, items_table, race_chunks, wait_for
from tests.unit.scenarios.test_dumps import T1, T2, writing


def stop_at_next_low_watermark(capture: Capture) -> None:
    """The worker is told to stop right after it wrote a low watermark: in the middle of a
    window, which then closes (or is abandoned) while the worker stops."""
    worker = capture.worker
    assert worker is not None

    def on_commit(commit: Commit) -> None:
        if any(c.table == WATERMARK_TABLE and c.after and str(c.after["value"]).endswith(".lw")
               for c in commit.changes):
            worker.stopping = True
            capture.db.on_commit = None

    capture.db.on_commit = on_commit
    wait_for(lambda: worker.stopping, 10, "a low watermark", capture.why)


def test_a_worker_stopped_mid_window_resumes_the_dump_from_the_checkpoint(
        capture: Capture) -> None:
    items_table(capture.db, T1, 600)
    items_table(capture.db, T2, 100)
    capture.tables = [T1, T2]
    capture.start()
    race_chunks(capture.db, seed=3)
    with writing(capture, [T1, T2], seed=3):
        request = capture.dump("all", chunk_size=20, delay_ms=10)
        for stops in range(1, 4):
            wait_for(lambda stops=stops: capture.chunks(request) >= 4 * stops, 10,  # type: ignore[misc]
                     "more chunks", capture.why)
            stop_at_next_low_watermark(capture)
            capture.stop()
            assert capture.request(request)["state"] == "running"
            capture.start()  # a new Worker: same Redis, same landing zone
        capture.wait_completed(request)
    capture.assert_converged(T1, T2)
    positions = [str(e["position"]) for e in capture.events(T1)]
    assert len(positions) == len(set(positions)), "an event landed twice"
    assert capture.workers == 4


def test_an_outage_mid_window_ends_the_session_and_the_next_one_resumes(
        capture: Capture) -> None:
    """The database goes away right after a low watermark, before the chunk SELECT, three
    times: each session ends with its window open and its output unwritten; the next one
    starts from the saved checkpoint, reads the chunk again, and the dump completes."""
    items_table(capture.db, T1, 400)
    capture.tables = [T1]
    capture.start()
    race_chunks(capture.db, seed=5)
    db = capture.db
    outages: list[int] = []

    def back() -> None:
        db.available = True

    def on_commit(commit: Commit) -> None:
        lows = [c for c in commit.changes if c.table == WATERMARK_TABLE and c.after
                and str(c.after["value"]).endswith(".lw")]
        if lows and len(outages) < 3 and commit.seq % 5 == 0:
            outages.append(commit.seq)
            db.available = False
            threading.Timer(0.1, back).start()

    with writing(capture, [T1], seed=5):
        request = capture.dump("tables", [T1], chunk_size=15)
        db.on_commit = on_commit
        capture.wait_completed(request, timeout=30)
    assert len(outages) == 3
    assert capture.worker is not None and capture.worker.sessions == 4
    capture.assert_converged(T1)


def test_a_reload_mid_dumps_resumes_them_and_dumps_the_table_it_adds(
        capture: Capture) -> None:
    """A reload (SIGHUP, ``POST /api/v1/reload``: the worker's pending configuration) while
    dumps of three priorities run: the session ends, the next one runs with the new
    configuration and takes each dump up from its saved progress (never behind it); the
    table the reload adds joins capture, and its dump (``dump_new_tables``: normal) runs
    beside them. All complete and the output converges."""
    t3 = items_table(capture.db, "shop.returns", 100)  # there before: its rows need a dump
    items_table(capture.db, T1, 400)
    items_table(capture.db, T2, 200)
    capture.tables = [T1, T2]
    capture.source_extra = {"dump_new_tables": True}
    capture.start()
    worker = capture.worker
    assert worker is not None
    with writing(capture, [T1, T2], seed=11):
        ids = [capture.dump("tables", [T1], chunk_size=10, delay_ms=5, priority="background"),
               capture.dump("tables", [T2], chunk_size=10, delay_ms=5),
               capture.dump("keys", [T1], [k * 10 for k in range(1, 300)], chunk_size=5,
                            delay_ms=5)]
        wait_for(lambda: all(capture.chunks(i) >= 2 for i in ids), 10, "two chunks each",
                 capture.why)
        saved = {i: capture.chunks(i) for i in ids}
        sessions = worker.sessions
        capture.tables = [T1, T2, t3]
        worker.pending = capture.config()
        wait_for(lambda: worker.sessions > sessions and capture.streaming(), 10,
                 "the session of the reloaded configuration", capture.why)
        assert all(capture.request(i)["state"] in ("running", "completed") for i in ids)
        assert all(capture.chunks(i) >= saved[i] for i in ids), (saved, ids)
        capture.wait_completed(*ids, timeout=30)
        new = [r for r in capture.requests() if r.get("tables") == f'["{t3}"]']
        assert len(new) == 1 and new[0]["priority"] == "normal", new
        capture.wait_completed(new[0]["id"], timeout=30)
    assert worker.sessions == sessions + 1
    capture.assert_converged(T1, T2, t3)
