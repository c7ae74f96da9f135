"""Foreign-key cascades in the binlog translator, event by event: the derived events of a
captured and of an uncaptured parent, their positions (a table that references itself, an
XA transaction), ``foreign_key_checks = 0``, the tables to prune, a DDL statement that
reads the foreign keys again.

The same on a real MariaDB with a running worker: tests/integration/test_mysql_cascades.py.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from pymysqlreplication.constants import NONE_SOURCE
from pymysqlreplication.event import XidEvent
from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent

from dblog_worker.events import Cascaded, ChangeEvent, LogItem
from dblog_worker.foreign_keys import CascadePlan, ForeignKey, Rule
from dblog_worker.mysql.checkpoint import BinlogCheckpoint
from dblog_worker.mysql.translate import BinlogTranslator, TableView
from tests.unit.mysql import test_binlog_xa as xa
from tests.unit.mysql.test_binlog_xa import FILE, event, feed, gtid, prepare, query, resolved

C, N = Rule.CASCADE, Rule.SET_NULL
KEYS = (
    ForeignKey("c_p", "shop.c", ("pid",), "shop.p", ("id",), C, C),
    ForeignKey("n_q", "shop.n", ("qid",), "shop.q", ("id",), N, N),  # q is not captured
    ForeignKey("g_c", "shop.g", ("cid",), "shop.c", ("id",), C, C),
    ForeignKey("s_s", "shop.s", ("up",), "shop.s", ("id",), C, C),
)
CAPTURED = ("shop.p", "shop.c", "shop.n", "shop.g", "shop.s")


class Codec(xa.Codec):
    def key_row_from_binlog(self, values: Mapping[str, object],
                            none_sources: Mapping[str, str] | None = None) -> tuple[str, str]:
        return (json.dumps([values["id"]]),
                json.dumps(dict(values), separators=(",", ":")))


def translator(keys: tuple[ForeignKey, ...] = KEYS) -> tuple[BinlogTranslator, list[str]]:
    described: list[str] = []

    def describe(table: str, event: Any) -> TableView:
        described.append(f"view {table}")
        return TableView(table, Codec(), 3)

    def describe_parent(table: str, event: Any) -> TableView:
        described.append(f"parent {table}")
        return TableView(table, Codec(), 0)

    return BinlogTranslator(
        "src", CAPTURED, describe, BinlogCheckpoint(FILE, 100, "0-1-9", "server_id=1"),
        cascades=CascadePlan(keys, frozenset(CAPTURED)), describe_parent=describe_parent,
        version_of=lambda table: 5), described


def delete(end: int, table: str, *rows: dict[str, object], flags: int = 1) -> Any:
    return event(DeleteRowsEvent, end, schema="shop", table=table, columns=[], flags=flags,
                 rows=[{"values": row} for row in rows])


def update(end: int, table: str, *pairs: tuple[dict[str, object], dict[str, object]]) -> Any:
    return event(UpdateRowsEvent, end, schema="shop", table=table, columns=[], flags=1,
                 rows=[{"before_values": b, "after_values": a} for b, a in pairs])


def items(out: list[LogItem]) -> list[tuple[str, ...]]:
    return [(e.table, e.op.value, str(e.key), e.position.encode()[32:], str(e.before),
             str(e.after)) if isinstance(e, ChangeEvent) else ("cascaded", *sorted(e.tables))
            for e in out if isinstance(e, ChangeEvent | Cascaded)]


def sub(n: int) -> str:
    return f"{n:016x}"


def test_a_captured_parents_deletes_derive_its_childrens_events_at_their_positions() -> None:
    t, described = translator()
    out = feed(t, delete(500, "p", {"id": 1}, {"id": None}, {"id": 3}))
    assert items(out) == [
        ("shop.p", "d", "[1]", sub(0), '{"id":1}', "None"),
        ("shop.p", "d", "[null]", sub(2), '{"id":null}', "None"),
        ("shop.p", "d", "[3]", sub(4), '{"id":3}', "None"),
        ("shop.c", "f", "None", sub(0), '[{"pid":1}]', "[null]"),
        ("shop.c", "f", "None", sub(4), '[{"pid":3}]', "[null]"),
        ("cascaded", "shop.g"),  # below c: no event can say which rows
    ]
    child = next(e for e in out if isinstance(e, ChangeEvent) and e.table == "shop.c")
    assert child.schema_version == 5 and child.position.minor == 500
    assert described == ["view shop.p"]


def test_an_uncaptured_parent_is_decoded_for_its_captured_childrens_events() -> None:
    t, described = translator()
    out = feed(t, delete(600, "q", {"id": 7}),
               update(700, "q", ({"id": 8}, {"id": 9}), ({"id": 10}, {"id": 10})))
    assert items(out) == [
        ("shop.n", "f", "None", sub(0), '[{"qid":7}]', '[{"qid":null}]'),
        ("shop.n", "f", "None", sub(0), '[{"qid":8}]', '[{"qid":null}]'),
    ]
    assert out[1].position.minor == 700  # type: ignore[union-attr]
    assert described == ["parent shop.q"]


def test_nothing_cascades_with_foreign_key_checks_off() -> None:
    t, _ = translator()
    out = feed(t, delete(500, "p", {"id": 1}, flags=1 | 2), delete(600, "q", {"id": 7}, flags=3))
    assert items(out) == [("shop.p", "d", "[1]", sub(0), '{"id":1}', "None")]


def test_a_table_that_references_itself_interleaves_its_events_in_order() -> None:
    t, _ = translator()
    out = feed(t, delete(800, "s", {"id": 1, "up": None}, {"id": 2, "up": 1}))
    assert [(i[1], i[3]) for i in items(out)[:4]] == [("d", sub(0)), ("f", sub(1)),
                                                      ("d", sub(2)), ("f", sub(3))]
    assert items(out)[4] == ("cascaded", "shop.s")
    # a key change takes 2 i and 2 i + 1 itself: the cascade into itself is pruned instead
    out = feed(t, update(900, "s", ({"id": 5, "up": None}, {"id": 6, "up": None})))
    assert [(i[1], i[3]) for i in items(out)[:2]] == [("d", sub(0)), ("c", sub(1))]
    assert items(out)[2:] == [("cascaded", "shop.s")]


def test_xa_rows_cascade_at_the_commits_positions() -> None:
    t, _ = translator()
    group = [gtid(1046, 10, flags=76, size=46), delete(1200, "q", {"id": 4}),
             delete(1250, "c", {"id": 11, "pid": 2}),
             query(1280, "XA END X'6131',X'',1"), prepare(1318, b"a1")]
    assert items(feed(t, *group, gtid(1400, 11), event(XidEvent, 1430))) == []
    out = feed(t, *resolved(1700, 12, "COMMIT", b"a1"))
    assert t.committing is not None
    for again in group:
        t.read_again(again, out)
    t.committed(out)
    # q's row is index 0 of the transaction, c's row index 1
    assert items(out) == [
        ("shop.n", "f", "None", sub(0), '[{"qid":4}]', '[{"qid":null}]'),
        ("shop.c", "d", "[11]", sub(2), '{"id":11,"pid":2}', "None"),
        ("shop.g", "f", "None", sub(2), '[{"cid":11}]', "[null]"),
    ]


def test_a_ddl_statement_reads_the_foreign_keys_again() -> None:
    t, _ = translator(keys=())
    assert items(feed(t, delete(500, "p", {"id": 1}))) == [
        ("shop.p", "d", "[1]", sub(0), '{"id":1}', "None")]
    reloaded = CascadePlan(KEYS, frozenset(CAPTURED))
    calls: list[str] = []

    def reload() -> CascadePlan:
        calls.append("reload")
        return reloaded

    t._reload_cascades = reload
    feed(t, query(550, "ALTER TABLE c ADD FOREIGN KEY (pid) REFERENCES p (id)"),
         query(560, "CREATE INDEX i ON c (pid)"))
    assert calls == ["reload", "reload"] and t.cascades is reloaded
    assert ("shop.c", "f", "None", sub(0), '[{"pid":2}]', "[null]") in items(
        feed(t, delete(600, "p", {"id": 2})))
    feed(t, query(650, "ANALYZE TABLE c"))
    assert calls == ["reload", "reload"]


def test_a_parent_image_the_log_cut_short_prunes_its_children() -> None:
    """A value mysql-replication could not decode (a zero date) leaves the old image
    unknown: which children it had is unknown too, so every captured one is pruned."""
    t, _ = translator()
    lost = event(DeleteRowsEvent, 500, schema="shop", table="p", columns=[], flags=1,
                 rows=[{"values": {"id": 1, "d": None},
                        "none_sources": {"d": NONE_SOURCE.OUT_OF_DATE_RANGE}}])
    out = feed(t, lost)
    assert items(out) == [("shop.p", "d", "[1]", sub(0), "None", "None"),
                          ("cascaded", "shop.c", "shop.g")]
