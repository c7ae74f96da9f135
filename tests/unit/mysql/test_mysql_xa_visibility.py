"""XA commits logged before they are visible (:mod:`dblog_worker.mysql.xa_visibility`):
which count as inside a window, until when, and where a restart must begin."""

from __future__ import annotations

from dblog_worker.events import Unseen
from dblog_worker.mysql.checkpoint import BinlogCheckpoint, Xid
from dblog_worker.mysql.xa_visibility import XaCommits, XaCommitted, xids_listed
from dblog_worker.position import Position

T = "shop.items"


def xid(name: str) -> Xid:
    return (1, name.encode(), b"")


def commit(name: str, at: int, *keys: str, resume: int = 100) -> XaCommitted:
    return XaCommitted(xid(name), Position(1, at), BinlogCheckpoint("b.000001", resume),
                       tuple((T, key) for key in keys))


def test_commits_count_inside_the_windows_after_them_until_xa_recover_drops_them() -> None:
    kept = XaCommits()
    kept.add(commit("a", 500, "[1]", "[2]"))
    kept.add(commit("b", 700, "[3]"))
    assert kept.unseen(Position(1, 400)) is None  # a window before both
    assert kept.unseen(Position(1, 600, 9)) == Unseen(((T, "[1]"), (T, "[2]")))
    assert kept.unseen(Position(1, 800)) == Unseen(((T, "[1]"), (T, "[2]"), (T, "[3]")))
    kept.confirm([xid("b")])  # "a" committed in InnoDB: every later SELECT sees it
    assert len(kept) == 1 and kept.unseen(Position(1, 800)) == Unseen(((T, "[3]"),))
    kept.confirm([])
    assert not kept and kept.unseen(Position(1, 800)) is None


def test_past_the_limit_a_commit_is_kept_by_its_tables() -> None:
    kept = XaCommits(limit=3)
    kept.add(commit("a", 500, "[1]", "[2]"))
    kept.add(commit("b", 600, "[3]", "[4]"))
    assert kept.unseen(Position(1, 700)) == Unseen(((T, "[1]"), (T, "[2]")), frozenset({T}))


def test_a_restart_begins_before_the_oldest_kept_commit() -> None:
    kept = XaCommits()
    assert kept.resume() is None
    kept.add(commit("a", 900, "[1]", resume=300))
    kept.add(commit("b", 700, "[1]", resume=200))
    assert kept.resume() == BinlogCheckpoint("b.000001", 200)


def test_xa_recover_rows() -> None:
    assert xids_listed([(1, 3, 2, b"gtrbq"), ("7", "1", "0", "x")]) == [
        (1, b"gtr", b"bq"), (7, b"x", b"")]
