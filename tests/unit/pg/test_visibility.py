"""Transactions logged before a low watermark that its snapshot did not see (pg/visibility.py),
and how the translator hands them to the window and holds the checkpoint before them."""

from __future__ import annotations

import pytest

from dblog_worker.events import Checkpoint, LogItem, Unseen, Watermark
from dblog_worker.pg import pgoutput as pg
from dblog_worker.pg.encoders import BUILTIN_TYPES
from dblog_worker.pg.translate import LogTranslator, RelationKind, RelationView
from dblog_worker.pg.values import RowCodec
from dblog_worker.pg.visibility import RecentCommits, Snapshot
from dblog_worker.position import Position

T, OTHER = "public.t", "public.other"


def commit(recent: RecentCommits, xid: int, lsn: int, *keys: int | tuple[int, str],
           more: tuple[str, ...] = ()) -> None:
    """Transaction ``xid`` changed these keys (of T, or of the table given with a key)."""
    pairs = [(k, T) if isinstance(k, int) else k for k in keys]
    recent.committed(xid, lsn, [t for _, t in pairs], [f"[{k}]" for k, _ in pairs], more)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("10:20:", Snapshot(10, 20, frozenset())),
        ("10:20:12,15", Snapshot(10, 20, frozenset({12, 15}))),
        # xid8 values carry the epoch in the high 32 bits; pgoutput's xids do not
        (f"{(3 << 32) + 7}:{(3 << 32) + 9}:{(3 << 32) + 8}", Snapshot(7, 9, frozenset({8}))),
    ],
)
def test_snapshot_parse(text: str, expected: Snapshot) -> None:
    assert Snapshot.parse(text) == expected


@pytest.mark.parametrize("text", ["", "1:2", "a:b:c", "1:2:x"])
def test_snapshot_parse_refuses(text: str) -> None:
    with pytest.raises(ValueError, match="not a snapshot"):
        Snapshot.parse(text)


@pytest.mark.parametrize(
    ("snapshot", "xid", "sees"),
    [
        (Snapshot(10, 20, frozenset({12})), 5, True),  # ended before xmin
        (Snapshot(10, 20, frozenset({12})), 11, True),  # ended, not in progress
        (Snapshot(10, 20, frozenset({12})), 12, False),  # in progress
        (Snapshot(10, 20, frozenset({12})), 20, False),  # began after the snapshot
        (Snapshot(10, 20, frozenset({12})), 25, False),
        # across the wrap of 32-bit xids
        (Snapshot(2**32 - 5, 3, frozenset({2**32 - 2})), 2**32 - 3, True),
        (Snapshot(2**32 - 5, 3, frozenset({2**32 - 2})), 2**32 - 2, False),
        (Snapshot(2**32 - 5, 3, frozenset()), 1, True),
        (Snapshot(2**32 - 5, 3, frozenset()), 3, False),
    ],
)
def test_snapshot_sees(snapshot: Snapshot, xid: int, sees: bool) -> None:
    assert snapshot.sees(xid) is sees


def test_unseen_changes_are_those_of_transactions_the_snapshot_missed() -> None:
    recent = RecentCommits()
    commit(recent, 11, 100, 1)
    commit(recent, 12, 200, 2, (3, OTHER))
    commit(recent, 13, 300, 4)
    unseen = recent.unseen(Snapshot(10, 14, frozenset({12, 13})))
    assert unseen == Unseen(((T, "[2]"), (OTHER, "[3]"), (T, "[4]")))
    assert recent.unseen(Snapshot(14, 20, frozenset())) is None


def test_forget_keeps_what_some_snapshot_may_miss_and_the_oldest_holds_the_log() -> None:
    recent = RecentCommits()
    commit(recent, 11, 100, 1)
    commit(recent, 12, 200, 2)
    commit(recent, 13, 300, 3)
    assert recent.oldest() == 100 and len(recent) == 3
    recent.forget([Snapshot(12, 14, frozenset({12}))])  # sees 11: forgotten, from the oldest
    assert recent.oldest() == 200 and len(recent) == 2
    # an older snapshot (a low watermark still on its way) missed 12; a newer one sees all:
    # 12 stays, and holds the log there
    older = Snapshot(12, 14, frozenset({12}))
    recent.forget([older, Snapshot(14, 14, frozenset())])
    assert recent.oldest() == 200
    assert recent.unseen(older) == Unseen(((T, "[2]"),))
    recent.forget([Snapshot(14, 14, frozenset())])
    assert recent.oldest() is None and len(recent) == 0 and recent.kept == 0


def test_memory_is_bounded_beyond_the_limit_a_window_is_read_again() -> None:
    recent = RecentCommits(limit=3)
    commit(recent, 11, 100, 0, 1, 2, 3)  # too many on its own
    assert recent.kept == 0
    commit(recent, 12, 200, 10, 11)
    commit(recent, 13, 300, 12, (13, OTHER))
    assert recent.kept == 4 and recent.over_limit
    recent.forget([Snapshot(10, 14, frozenset({11, 12, 13}))])  # sees none: drop the largest
    assert recent.kept <= 3
    unseen = recent.unseen(Snapshot(10, 14, frozenset({11, 12, 13})))
    assert unseen is not None and T in unseen.overflow
    commit(recent, 14, 400, 20, more=(OTHER,))  # changes left out while read
    unseen = recent.unseen(Snapshot(14, 15, frozenset({14})))
    assert unseen is not None and unseen.overflow == frozenset({T, OTHER})


# -- the translator -------------------------------------------------------------------

CAPTURED, WATERMARK = 1, 2
CODEC = RowCodec(["id", "v"], [23, 23], ["id"], BUILTIN_TYPES)
VIEWS = {
    CAPTURED: RelationView(RelationKind.CAPTURED, T, CODEC, schema_version=1),
    WATERMARK: RelationView(RelationKind.WATERMARK, "dblog.watermark",
                            watermark_columns=(0, 1)),
}


def _translator() -> LogTranslator:
    translator = LogTranslator("src", lambda relation: VIEWS[relation.relation_oid])
    for oid in VIEWS:
        column = pg.Column(1, "id", 23, -1)
        translator.translate(pg.Relation(oid, "public", str(oid), "f", (column,)), [])
    return translator


def _transaction(translator: LogTranslator, xid: int, lsn: int, *rows: pg.Message) -> list[LogItem]:
    out: list[LogItem] = []
    translator.translate(pg.Begin(final_lsn=lsn, commit_ts_us=0, xid=xid), out)
    for row in rows:
        translator.translate(row, out)
    translator.translate(pg.Commit(flags=0, commit_lsn=lsn, end_lsn=lsn + 8, commit_ts_us=0),
                         out)
    return out


def test_after_a_low_watermark_come_the_changes_its_snapshot_did_not_see() -> None:
    translator = _translator()
    t = _transaction(translator, 700, 1000, pg.Insert(CAPTURED, ("5", "2")))
    assert isinstance(t[-1], Checkpoint)
    assert t[-1] == Checkpoint(Position(1008, 0), pg.format_lsn(1000))  # T not seen yet
    translator.observe(Snapshot(700, 702, frozenset({700})), "run.1.lw")
    lw = _transaction(translator, 701, 2000, pg.Insert(WATERMARK, ("src", "run.1.lw")))
    assert [type(item) for item in lw] == [Watermark, Unseen, Checkpoint]
    unseen = lw[1]
    assert isinstance(unseen, Unseen) and unseen.changes == ((T, "[5]"),)
    # a snapshot that sees T: forgotten, and the checkpoint may pass it
    translator.observe(Snapshot(702, 702, frozenset()))
    assert translator.checkpoint(3000) == Checkpoint(Position(3000, 0))


def test_a_watermark_whose_snapshot_saw_everything_has_nothing_after_it() -> None:
    translator = _translator()
    _transaction(translator, 700, 1000, pg.Insert(CAPTURED, ("5", "2")))
    translator.observe(Snapshot(701, 701, frozenset()), "run.1.lw")
    lw = _transaction(translator, 701, 2000, pg.Insert(WATERMARK, ("src", "run.1.lw")))
    assert [type(item) for item in lw] == [Watermark, Checkpoint]
    assert lw[-1] == Checkpoint(Position(2008, 0))


def test_a_transaction_larger_than_the_limit_is_kept_by_its_tables() -> None:
    translator = LogTranslator("src", lambda relation: VIEWS[relation.relation_oid],
                               RecentCommits(limit=2))
    for oid in VIEWS:
        translator.translate(pg.Relation(oid, "public", str(oid), "f",
                                         (pg.Column(1, "id", 23, -1),)), [])
    _transaction(translator, 700, 1000, *(pg.Insert(CAPTURED, (str(k), "1")) for k in range(5)))
    assert translator.recent.kept == 0
    translator.observe(Snapshot(700, 702, frozenset({700})), "run.1.lw")
    lw = _transaction(translator, 701, 2000, pg.Insert(WATERMARK, ("src", "run.1.lw")))
    unseen = lw[1]
    assert isinstance(unseen, Unseen) and unseen.changes == () and unseen.overflow == {T}
