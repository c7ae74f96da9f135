"""LogTranslator: pgoutput messages to change events, watermarks and checkpoints."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from dblog_worker.errors import ProtocolError
from dblog_worker.events import (
    ChangeEvent,
    Checkpoint,
    IncompleteRow,
    LogItem,
    Op,
    Origin,
    Watermark,
)
from dblog_worker.pg import pgoutput as pg
from dblog_worker.pg.encoders import BUILTIN_TYPES
from dblog_worker.pg.translate import LogTranslator, RelationKind, RelationView
from dblog_worker.pg.values import RowCodec
from dblog_worker.position import Position

SOURCE = "shop"
TABLE = "public.orders"
LSN = 0x16B3748
END = 0x16B3790
TS = 1_700_000_000_123_456
U = pg.UNCHANGED_TOAST

ORDERS, ORDERS_FULL, ITEMS, WATERMARK, HEARTBEAT, IGNORED = 100, 101, 102, 200, 300, 400

INT4, TEXT = 23, 25
CODEC = RowCodec(["id", "name", "note"], [INT4, TEXT, TEXT], ["id"], BUILTIN_TYPES)
ITEMS_CODEC = RowCodec(["region", "id", "qty"], [TEXT, INT4, INT4], ["region", "id"],
                       BUILTIN_TYPES)

VIEWS = {
    ORDERS: RelationView(RelationKind.CAPTURED, TABLE, CODEC, schema_version=3),
    ORDERS_FULL: RelationView(RelationKind.CAPTURED, "public.orders_full", CODEC,
                              schema_version=1, full_identity=True),
    ITEMS: RelationView(RelationKind.CAPTURED, "app.items", ITEMS_CODEC, schema_version=2),
    # The watermark table's columns: (written_at, source, value).
    WATERMARK: RelationView(RelationKind.WATERMARK, "dblog.watermark",
                            watermark_columns=(1, 2)),
    HEARTBEAT: RelationView(RelationKind.IGNORED, "dblog.heartbeat"),
    IGNORED: RelationView(RelationKind.IGNORED, "public.audit"),
}


def relation(oid: int) -> pg.Relation:
    return pg.Relation(oid, "public", f"rel{oid}", "d", (pg.Column(1, "id", INT4, -1),))


class Describer:
    def __init__(self, views: dict[int, RelationView] | None = None) -> None:
        self.views = dict(VIEWS if views is None else views)
        self.calls: list[int] = []

    def __call__(self, message: pg.Relation) -> RelationView:
        self.calls.append(message.relation_oid)
        return self.views[message.relation_oid]


def begin(lsn: int = LSN, ts: int = TS) -> pg.Begin:
    return pg.Begin(final_lsn=lsn, commit_ts_us=ts, xid=742)


def commit(lsn: int = LSN, end: int = END, ts: int = TS) -> pg.Commit:
    return pg.Commit(flags=0, commit_lsn=lsn, end_lsn=end, commit_ts_us=ts)


RELATIONS: tuple[pg.Message, ...] = tuple(relation(oid) for oid in VIEWS)


def run(messages: Sequence[pg.Message], translator: LogTranslator | None = None) -> list[LogItem]:
    """The items of ``messages``; checkpoints by position only (where a restart resumes,
    before transactions no snapshot has seen yet, is tested in test_visibility.py)."""
    translator = translator or LogTranslator(SOURCE, Describer())
    out: list[LogItem] = []
    for message in messages:
        translator.translate(message, out)
    return [Checkpoint(item.position) if isinstance(item, Checkpoint) else item for item in out]


def txn(*rows: pg.Message, lsn: int = LSN, end: int = END) -> list[pg.Message]:
    """The relations, then one transaction holding ``rows``."""
    return [*RELATIONS, begin(lsn), *rows, commit(lsn, end)]


def ev(
    index: int, op: Op, key: str | None, after: str | None = None, before: str | None = None,
    *, table: str = TABLE, version: int = 3, lsn: int = LSN,
) -> ChangeEvent:
    return ChangeEvent(table, op, Position(lsn, index), key, after, before, Origin.LOG, TS,
                       version)


def row(id_: int, name: str, note: str = "n") -> str:
    return f'{{"id":{id_},"name":"{name}","note":"{note}"}}'


CHECKPOINT = Checkpoint(Position(END, 0))  # everything before the commit's end LSN

CASES: list[tuple[str, list[pg.Message], list[LogItem]]] = [
    (
        "insert",
        txn(pg.Insert(ORDERS, ("1", "a", "n"))),
        [ev(0, Op.CREATE, "[1]", row(1, "a")), CHECKPOINT],
    ),
    (
        "insert-null",
        txn(pg.Insert(ORDERS, ("1", None, "n"))),
        [ev(0, Op.CREATE, "[1]", '{"id":1,"name":null,"note":"n"}'), CHECKPOINT],
    ),
    (
        "update-with-full-old-row",
        txn(pg.Update(ORDERS, ("1", "a", "n"), ("1", "b", "n"), old_is_key_only=False)),
        [ev(0, Op.UPDATE, "[1]", row(1, "b"), row(1, "a")), CHECKPOINT],
    ),
    (
        "update-with-full-old-row-key-change",
        txn(pg.Update(ORDERS, ("1", "a", "n"), ("2", "b", "n"), old_is_key_only=False)),
        [
            ev(0, Op.DELETE, "[1]", None, row(1, "a")),
            ev(1, Op.CREATE, "[2]", row(2, "b")),
            CHECKPOINT,
        ],
    ),
    (
        "update-with-key-only-old",
        txn(pg.Update(ORDERS, ("1", None, None), ("2", "b", "n"), old_is_key_only=True)),
        [ev(0, Op.DELETE, "[1]"), ev(1, Op.CREATE, "[2]", row(2, "b")), CHECKPOINT],
    ),
    (
        "update-with-key-only-old-same-key",
        txn(pg.Update(ORDERS, ("1", None, None), ("1", "b", "n"), old_is_key_only=True)),
        [ev(0, Op.UPDATE, "[1]", row(1, "b")), CHECKPOINT],
    ),
    (
        "update-without-old",
        txn(pg.Update(ORDERS, None, ("1", "b", "n"), old_is_key_only=False)),
        [ev(0, Op.UPDATE, "[1]", row(1, "b")), CHECKPOINT],
    ),
    (
        "composite-key-change",
        txn(pg.Update(ITEMS, ("eu", "1", None), ("us", "1", "5"), old_is_key_only=True)),
        [
            ev(0, Op.DELETE, '["eu",1]', table="app.items", version=2),
            ev(1, Op.CREATE, '["us",1]', '{"region":"us","id":1,"qty":5}', table="app.items",
               version=2),
            CHECKPOINT,
        ],
    ),
    (
        "delete-key-only",
        txn(pg.Delete(ORDERS, ("1", None, None), old_is_key_only=True)),
        [ev(0, Op.DELETE, "[1]"), CHECKPOINT],
    ),
    (
        "delete-full-identity",
        txn(pg.Delete(ORDERS_FULL, ("1", "a", "n"), old_is_key_only=False)),
        [ev(0, Op.DELETE, "[1]", None, row(1, "a"), table="public.orders_full", version=1),
         CHECKPOINT],
    ),
    (
        "truncate",
        txn(pg.Truncate(0, (IGNORED, ORDERS, HEARTBEAT, ITEMS))),
        [ev(0, Op.TRUNCATE, None), ev(1, Op.TRUNCATE, None, table="app.items", version=2),
         CHECKPOINT],
    ),
    (
        "unchanged-toast-from-old-row",
        txn(pg.Update(ORDERS_FULL, ("1", "a", "big"), ("1", "b", U), old_is_key_only=False)),
        [ev(0, Op.UPDATE, "[1]", row(1, "b", "big"), row(1, "a", "big"),
            table="public.orders_full", version=1), CHECKPOINT],
    ),
    (
        "unchanged-toast-key-change",
        txn(pg.Update(ORDERS_FULL, ("1", "a", "big"), ("2", U, "x"), old_is_key_only=False)),
        [
            ev(0, Op.DELETE, "[1]", None, row(1, "a", "big"), table="public.orders_full",
               version=1),
            ev(1, Op.CREATE, "[2]", row(2, "a", "x"), table="public.orders_full", version=1),
            CHECKPOINT,
        ],
    ),
    (
        "watermark-update-of-this-source",
        txn(pg.Update(WATERMARK, None, ("2024-01-01", SOURCE, "run.1.lw"), False)),
        [Watermark("run.1.lw", Position(LSN, 0), TS), CHECKPOINT],
    ),
    (
        "watermark-insert-of-this-source",
        txn(pg.Insert(WATERMARK, ("2024-01-01", SOURCE, "run.1.hw"))),
        [Watermark("run.1.hw", Position(LSN, 0), TS), CHECKPOINT],
    ),
    (
        "watermark-of-another-source",
        txn(pg.Update(WATERMARK, None, ("2024-01-01", "other", "run.1.lw"), False),
            pg.Insert(ORDERS, ("1", "a", "n"))),
        [ev(0, Op.CREATE, "[1]", row(1, "a")), CHECKPOINT],
    ),
    (
        "watermark-null-value",
        txn(pg.Update(WATERMARK, None, ("2024-01-01", SOURCE, None), False)),
        [CHECKPOINT],
    ),
    (
        "watermark-delete",
        txn(pg.Delete(WATERMARK, (None, SOURCE, None), True)),
        [CHECKPOINT],
    ),
    (
        "heartbeat-and-ignored",
        txn(
            pg.Insert(HEARTBEAT, ("shop", "2024")),
            pg.Update(HEARTBEAT, None, ("shop", "2025"), False),
            pg.Insert(IGNORED, ("x",)),
            pg.Update(IGNORED, None, ("x",), False),
            pg.Delete(IGNORED, ("x",), True),
            pg.Insert(ORDERS, ("1", "a", "n")),
        ),
        [ev(0, Op.CREATE, "[1]", row(1, "a")), CHECKPOINT],
    ),
    (
        "empty-transaction",
        txn(),
        [CHECKPOINT],
    ),
    (
        "other-messages-produce-nothing",
        txn(pg.Origin(5, "node"), pg.TypeMsg(9000, "public", "mood"),
            pg.LogicalMessage(True, LSN, "p", b"x")),
        [CHECKPOINT],
    ),
]


@pytest.mark.parametrize(("messages", "expected"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_translate(messages: list[pg.Message], expected: list[LogItem]) -> None:
    assert run(messages) == expected


def test_positions_count_events_in_the_transaction() -> None:
    messages = txn(
        pg.Insert(ORDERS, ("1", "a", "n")),  # 0
        pg.Update(WATERMARK, None, ("t", SOURCE, "run.1.lw"), False),  # 1
        pg.Insert(HEARTBEAT, ("shop", "t")),  # nothing
        pg.Update(ORDERS, ("1", None, None), ("2", "b", "n"), True),  # 2, 3
        pg.Update(WATERMARK, None, ("t", "other", "x.1.lw"), False),  # nothing
        pg.Delete(ORDERS, ("2", None, None), True),  # 4
        pg.Truncate(0, (ORDERS,)),  # 5
        pg.Update(WATERMARK, None, ("t", SOURCE, "run.1.hw"), False),  # 6
    )
    out = run(messages)
    positions = [item.position for item in out if isinstance(item, (ChangeEvent, Watermark))]
    assert positions == [Position(LSN, i) for i in range(7)]
    assert all(type(p) is Position for p in positions)
    assert out[-1] == CHECKPOINT


def test_each_transaction_counts_from_zero() -> None:
    second_lsn, second_end = LSN + 0x100, END + 0x100
    messages = [
        *txn(pg.Insert(ORDERS, ("1", "a", "n")), pg.Insert(ORDERS, ("2", "a", "n"))),
        pg.Begin(second_lsn, TS + 1, 743),
        pg.Insert(ORDERS, ("3", "a", "n")),
        pg.Commit(0, second_lsn, second_end, TS + 1),
    ]
    out = run(messages)
    assert out == [
        ev(0, Op.CREATE, "[1]", row(1, "a")),
        ev(1, Op.CREATE, "[2]", row(2, "a")),
        CHECKPOINT,
        ChangeEvent(TABLE, Op.CREATE, Position(second_lsn, 0), "[3]", row(3, "a"), None,
                    Origin.LOG, TS + 1, 3),
        Checkpoint(Position(second_end, 0)),
    ]


def test_in_transaction_flag() -> None:
    translator = LogTranslator(SOURCE, Describer())
    out: list[LogItem] = []
    assert not translator.in_transaction
    translator.translate(begin(), out)
    assert translator.in_transaction
    translator.translate(commit(), out)
    assert not translator.in_transaction
    assert out == [CHECKPOINT]


@pytest.mark.parametrize(
    "message",
    [
        pg.Update(ORDERS, None, ("1", "b", U), old_is_key_only=False),
        pg.Update(ORDERS, ("1", None, None), ("2", "b", U), old_is_key_only=True),
        pg.Update(ORDERS, ("1", None, None), ("1", U, "n"), old_is_key_only=True),
    ],
    ids=["no-old-row", "key-only-old-key-change", "key-only-old-same-key"],
)
def test_unchanged_toast_without_old_row_asks_for_the_key(message: pg.Update) -> None:
    """The after-image would be incomplete: no event; the key goes to a repair dump."""
    out = [item for item in run(txn(message)) if not isinstance(item, Checkpoint)]
    assert out[-1] == IncompleteRow(TABLE, (str(message.new[0]),))
    if message.old is not None and message.old[0] != message.new[0]:
        # the key changed: the old key is deleted all the same
        assert [(e.op, e.key) for e in out[:-1] if isinstance(e, ChangeEvent)] == [
            (Op.DELETE, f"[{message.old[0]}]")
        ]
    else:
        assert len(out) == 1


@pytest.mark.parametrize(
    "message",
    [
        pg.Insert(999, ("1",)),
        pg.Update(999, None, ("1",), False),
        pg.Delete(999, ("1",), True),
        pg.Truncate(0, (ORDERS, 999)),
    ],
    ids=["insert", "update", "delete", "truncate"],
)
def test_row_of_unknown_relation(message: pg.Message) -> None:
    with pytest.raises(ProtocolError) as info:
        run(txn(message))
    assert str(info.value) == "row of relation 999 before its Relation message"


def test_no_relation_at_all() -> None:
    with pytest.raises(ProtocolError, match="row of relation 100 before its Relation message"):
        run([begin(), pg.Insert(ORDERS, ("1", "a", "n"))])


def test_replay_gives_the_same_positions() -> None:
    messages = txn(
        pg.Insert(ORDERS, ("1", "a", "n")),
        pg.Update(ORDERS, ("1", None, None), ("2", "b", "n"), True),
        pg.Update(WATERMARK, None, ("t", SOURCE, "run.1.lw"), False),
        pg.Delete(ORDERS, ("2", None, None), True),
    )
    first = run(messages)
    assert run(messages) == first  # a new translator (a restart)
    translator = LogTranslator(SOURCE, Describer())
    assert run(messages, translator) == first
    assert run(messages, translator) == first  # the same translator, the log replayed


def test_relation_message_describes_anew() -> None:
    describer = Describer()
    translator = LogTranslator(SOURCE, describer)
    out = run(txn(pg.Insert(ORDERS, ("1", "a", "n"))), translator)
    assert describer.calls == list(VIEWS)
    # A new version of the table: two columns, another schema version.
    describer.views[ORDERS] = RelationView(
        RelationKind.CAPTURED, TABLE, RowCodec(["id", "name"], [INT4, TEXT], ["id"],
                                               BUILTIN_TYPES), schema_version=4,
    )
    out = run([relation(ORDERS), begin(), pg.Insert(ORDERS, ("1", "a")), commit()], translator)
    assert describer.calls == [*VIEWS, ORDERS]
    assert out == [
        ChangeEvent(TABLE, Op.CREATE, Position(LSN, 0), "[1]", '{"id":1,"name":"a"}', None,
                    Origin.LOG, TS, 4),
        CHECKPOINT,
    ]


def test_watermark_of_this_source_only() -> None:
    translator = LogTranslator("other", Describer())
    out = run(txn(pg.Update(WATERMARK, None, ("t", SOURCE, "run.1.lw"), False),
                  pg.Update(WATERMARK, None, ("t", "other", "run.2.lw"), False)), translator)
    assert out == [Watermark("run.2.lw", Position(LSN, 0), TS), CHECKPOINT]


def test_watermark_messages_of_this_source_only() -> None:
    """``watermarks = "message"``: a transactional message with this source's prefix is a
    watermark; another source's, a non-transactional one or another prefix are not."""
    out = run(txn(
        pg.LogicalMessage(False, LSN, f"dblog.{SOURCE}", b"run.0.lw"),
        pg.LogicalMessage(True, LSN, "dblog.other", b"run.1.lw"),
        pg.LogicalMessage(True, LSN, "someone.else", b"run.2.lw"),
        pg.LogicalMessage(True, LSN, f"dblog.{SOURCE}", b"run.3.lw"),
    ))
    assert out == [Watermark("run.3.lw", Position(LSN, 0), TS), CHECKPOINT]
