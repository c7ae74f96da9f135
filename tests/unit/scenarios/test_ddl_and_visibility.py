"""DDL in the middle of a dump, and commits logged before a snapshot sees them."""

from __future__ import annotations

import threading

import pytest

from tests.fakedb.database import Commit
from tests.fakedb.source import WATERMARK_TABLE
from tests.unit.scenarios.capture import Capture, items_table, race_chunks, wait_for
from tests.unit.scenarios.test_dumps import T1, T2, writing


def test_columns_added_and_dropped_mid_dump(capture: Capture) -> None:
    items_table(capture.db, T1, 500)
    capture.tables = [T1]
    capture.start()
    race_chunks(capture.db, seed=11)
    with writing(capture, [T1], seed=11):
        request = capture.dump("tables", [T1], chunk_size=25, delay_ms=2)
        wait_for(lambda: capture.chunks(request) >= 4, 10, "four chunks", capture.why)
        capture.db.add_column(T1, "note", "text")
        with capture.db.transaction() as tx:
            tx.update(T1, (10,), {"note": "added"})
        wait_for(lambda: capture.chunks(request) >= 8, 10, "eight chunks", capture.why)
        capture.db.drop_column(T1, "payload")
        capture.wait_completed(request)
    capture.assert_converged(T1)
    versions = {e["schema_version"] for e in capture.events(T1)}
    assert len(versions) == 3, versions  # before, with note, without payload


def test_a_table_created_and_one_dropped_mid_dump(capture: Capture) -> None:
    """A table dropped while it is dumped fails the dump, saying so; the log goes on, and a
    table created after the worker started is captured and dumped."""
    items_table(capture.db, T1, 300)
    capture.tables = [T1, T2]
    capture.start()
    request = capture.dump("tables", [T1], chunk_size=10, delay_ms=5)
    wait_for(lambda: capture.chunks(request) >= 3, 10, "three chunks", capture.why)
    capture.db.drop_table(T1)
    state = capture.wait_request(request)
    assert state["state"] == "failed" and "does not exist" in state["error"], state
    items_table(capture.db, T2, 50)
    capture.db.write(T2, {"id": 5, "version": 1, "payload": "new"})
    second = capture.dump("tables", [T2], chunk_size=7)
    capture.wait_completed(second)
    capture.assert_converged(T2)


@pytest.mark.parametrize("unseen", [True, False], ids=["unseen", "unseen-ignored"])
def test_commits_logged_before_the_chunk_sees_them(capture: Capture, unseen: bool) -> None:
    """Writes whose commits are in the log before a low watermark but not yet visible to the
    chunk SELECT (PostgreSQL's commit before ProcArray, MariaDB's XA / group commit): the
    chunk reads the old rows; the window must drop them (the log had the new ones). A source
    that does not report them (``unseen = false``) lands stale rows: the check fails."""
    items_table(capture.db, T1, 200)
    capture.tables = [T1]
    capture.source_extra = {"unseen": unseen}
    capture.start()
    db = capture.db
    held = threading.Event()

    def on_commit(commit: Commit) -> None:
        highs = [c for c in commit.changes if c.table == WATERMARK_TABLE and c.after
                 and str(c.after["value"]).endswith(".hw")]
        if highs:  # the last window's chunk is read: what it did not see becomes visible,
            db.publish()  # and the next window's chunk will not see a new write, logged
            # before its low watermark
            with db.hold_visibility(), db.transaction() as tx:
                for key in range(10, 2001, 10):
                    tx.update(T1, (key,), {"payload": f"late {commit.seq}"})
            held.set()

    with writing(capture, [T1], seed=13):
        db.on_commit = on_commit
        request = capture.dump("tables", [T1], chunk_size=20)
        capture.wait_completed(request)
        db.on_commit = None
        db.publish()
    assert held.is_set()
    if unseen:
        capture.assert_converged(T1)
    else:
        with pytest.raises(AssertionError, match="version"):
            capture.assert_converged(T1)
