"""Values mysql-replication cannot decode never land as NULL; tables the worker cannot read
are skipped, the others translated.

A table with a MySQL 8 JSON column keeps mysql-replication's row decoding, which gives a
zero or invalid date as None (saying "out of date range" in ``none_sources``): such an
image was cut short, its key is dumped again (an :class:`IncompleteRow`), never written
with null.
"""

from __future__ import annotations

from typing import Any

from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

from dblog_worker.events import ChangeEvent, IncompleteRow, LogItem, Op
from dblog_worker.mysql.checkpoint import BinlogCheckpoint
from dblog_worker.mysql.column_model import Kind, MyColumn
from dblog_worker.mysql.translate import BinlogTranslator, TableView
from dblog_worker.mysql.values import MyRowCodec
from tests.unit.mysql.test_binlog_xa import FILE, event, feed

CODEC = MyRowCodec([MyColumn("id", Kind.INTEGER), MyColumn("d", Kind.DATE)], ["id"])
LOST = {"d": "out of date range"}


def translator(codec: MyRowCodec | None = CODEC) -> BinlogTranslator:
    def describe(table: str, rows_event: Any) -> TableView:
        return TableView(table, codec, 1)

    return BinlogTranslator("src", ["shop.items", "shop.other"], describe,
                            BinlogCheckpoint(FILE, 100, "0-1-9", "server_id=1"))


def rows(kind: Any, *images: dict[str, Any], table: str = "items") -> Any:
    return event(kind, 500, schema="shop", table=table, columns=[], rows=list(images))


def summary(items: list[LogItem]) -> list[tuple[str, ...]]:
    out: list[tuple[str, ...]] = []
    for item in items:
        if isinstance(item, IncompleteRow):
            out.append(("incomplete", item.table, *item.key))
        elif isinstance(item, ChangeEvent):
            out.append((item.op.value, item.key or "", item.after or "-", item.before or "-"))
    return out


def test_an_insert_with_a_lost_date_is_dumped_again() -> None:
    items = feed(translator(), rows(
        WriteRowsEvent,
        {"values": {"id": 1, "d": None}, "none_sources": LOST},
        {"values": {"id": 2, "d": None}, "none_sources": {"d": "null"}},  # a real NULL
    ))
    assert summary(items) == [("incomplete", "shop.items", "1"),
                              ("c", "[2]", '{"id":2,"d":null}', "-")]


def test_updates_and_deletes_with_lost_dates() -> None:
    lost_after = {"before_values": {"id": 1, "d": "2024-01-01"}, "before_none_sources": {},
                  "after_values": {"id": 1, "d": None}, "after_none_sources": LOST}
    lost_before = {"before_values": {"id": 2, "d": None}, "before_none_sources": LOST,
                   "after_values": {"id": 2, "d": "2024-01-02"}, "after_none_sources": {}}
    key_change = {"before_values": {"id": 3, "d": "2024-01-03"}, "before_none_sources": {},
                  "after_values": {"id": 4, "d": None}, "after_none_sources": LOST}
    items = feed(translator(), rows(UpdateRowsEvent, lost_after, lost_before, key_change),
                 rows(DeleteRowsEvent, {"values": {"id": 5, "d": None}, "none_sources": LOST}))
    assert summary(items) == [
        ("incomplete", "shop.items", "1"),
        ("u", "[2]", '{"id":2,"d":"2024-01-02"}', "-"),  # the old image left out
        ("d", "[3]", "-", '{"id":3,"d":"2024-01-03"}'),
        ("incomplete", "shop.items", "4"),
        ("d", "[5]", "-", "-"),
    ]
    assert {item.op for item in items if isinstance(item, ChangeEvent)} == {Op.UPDATE, Op.DELETE}


def test_a_table_the_worker_cannot_read_is_skipped() -> None:
    """A view without a codec (a column of a type the worker does not read): its rows are
    skipped, the other tables' rows translated."""
    skipped = translator(None)
    items = feed(skipped, rows(WriteRowsEvent, {"values": {"id": 1, "d": None}}))
    assert summary(items) == []
    assert summary(feed(translator(), rows(WriteRowsEvent, {"values": {"id": 1, "d": "x"}},
                                          table="other"))) == [
        ("c", "[1]", '{"id":1,"d":"x"}', "-")]
