"""XA transactions in the binlog translator, event by event: MariaDB's and MySQL's forms,
the checkpoints held at the oldest prepared transaction, the group read again at its
commit; events that cannot be read; a checkpoint of another server.

The same on a real MariaDB, with a running worker: tests/integration/test_mysql_xa.py.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from types import SimpleNamespace
from typing import Any

import pytest
from pymysqlreplication.event import (
    GtidEvent,
    MariadbGtidEvent,
    NotImplementedEvent,
    QueryEvent,
    XAPrepareEvent,
    XidEvent,
)
from pymysqlreplication.row_event import UpdateRowsEvent, WriteRowsEvent

from dblog_worker.errors import ConfigError, ProtocolError
from dblog_worker.events import ChangeEvent, Checkpoint, LogItem, Op
from dblog_worker.mysql.checkpoint import BinlogCheckpoint
from dblog_worker.mysql.log_reader import _other_server
from dblog_worker.mysql.translate import BinlogTranslator, TableView
from dblog_worker.position import Position

FILE = "mariadb-bin.000003"
TABLE = "shop.items"
SID = "3e11fa47-71ca-11e1-9e33-c80aa9429562"


class Codec:

    def key_row_from_binlog(self, values: Mapping[str, object],
                            none_sources: Mapping[str, str] | None = None) -> tuple[str, str]:
        return json.dumps([values["id"]]), json.dumps(dict(values))

    def key_texts_from_binlog(self, values: Mapping[str, object],
                              none_sources: Mapping[str, str] | None = None) -> tuple[str, ...]:
        return (str(values["id"]),)

    def key_from_texts(self, texts: Sequence[str]) -> str:
        return json.dumps([int(t) for t in texts])


def describe(table: str, event: Any) -> TableView:
    return TableView(table, Codec(), 1)


def event(kind: Any, end: int, size: int = 20, **fields: Any) -> Any:
    made = kind.__new__(kind)
    made.packet = SimpleNamespace(log_pos=end, event_size=size, event_type=fields.pop("type", 0))
    made.timestamp = 1_700_000_000
    for name, value in fields.items():
        setattr(made, "_RowsEvent__rows" if name == "rows" else name, value)
    return made


def gtid(end: int, sequence: int, flags: int = 12, size: int = 20) -> Any:  # transactional
    return event(MariadbGtidEvent, end, size, domain_id=0, flags=flags, gtid=f"0-1-{sequence}")


def query(end: int, text: str) -> Any:
    return event(QueryEvent, end, query=text, schema="shop")


def rows(end: int, *ids: int, table: str = "items") -> Any:
    return event(WriteRowsEvent, end, schema="shop", table=table, columns=[],
                 rows=[{"values": {"id": i, "v": 1}} for i in ids])


def update(end: int, old: int, new: int) -> Any:
    return event(UpdateRowsEvent, end, schema="shop", table="items", columns=[],
                 rows=[{"before_values": {"id": old}, "after_values": {"id": new}}])


def prepare(end: int, gtrid: bytes, *, one_phase: bool = False) -> Any:
    return event(XAPrepareEvent, end, one_phase=one_phase, xid_format_id=1, xid_gtrid=gtrid,
                 xid_bqual=b"")


def xa_group(start: int, sequence: int, gtrid: bytes, *ids: int) -> list[Any]:
    """MariaDB's group of a prepared XA transaction that inserts ``ids``, from ``start``."""
    return [gtid(start + 46, sequence, flags=76, size=46), rows(start + 200, *ids),
            query(start + 280, f"XA END X'{gtrid.hex()}',X'',1"), prepare(start + 318, gtrid)]


def resolved(end: int, sequence: int, verb: str, gtrid: bytes) -> list[Any]:
    return [gtid(end - 86, sequence, flags=141), query(end, f"XA {verb} X'{gtrid.hex()}',X'',1")]


def translator(gtid_state: str = "0-1-9") -> BinlogTranslator:
    return BinlogTranslator("src", [TABLE], describe,
                            BinlogCheckpoint(FILE, 100, gtid_state, "server_id=1"))


def feed(translate: BinlogTranslator, *events: Any) -> list[LogItem]:
    out: list[LogItem] = []
    for item in events:
        translate.translate(item, out)
    return out


def resumes(items: list[LogItem]) -> list[tuple[int, str]]:
    """(pos, gtid) where each checkpoint resumes."""
    decoded = [BinlogCheckpoint.decode(str(i.resume)) for i in items if isinstance(i, Checkpoint)]
    return [(c.pos, c.gtid) for c in decoded]


def changes(items: list[LogItem]) -> list[tuple[str, str, Position]]:
    return [(e.op.value, str(e.key), e.position) for e in items if isinstance(e, ChangeEvent)]


def test_prepared_rows_wait_for_the_commit() -> None:
    """Nothing of a prepared XA transaction is emitted; the checkpoints after it resume
    before it; at XA COMMIT the reader reads the group again, and its rows take the
    commit's positions; the commit's checkpoint resumes after it."""
    t = translator()
    out = feed(t, *xa_group(1000, 10, b"a1", 1, 2), gtid(1400, 11), rows(1500, 7),
               event(XidEvent, 1530))
    assert changes(out) == [("c", "[7]", Position(3, 1500, 0))]
    assert resumes(out) == [(100, "0-1-9"), (100, "0-1-9")]  # held before the XA group
    assert t.committing is None
    out = feed(t, *resolved(1700, 12, "COMMIT", b"a1"))
    assert out == [] and t.committing is not None
    assert t.committing.position == Position(3, 1700)
    assert (t.committing.prepared.start, t.committing.prepared.end) == (1000, 1318)
    for again in xa_group(1000, 10, b"a1", 1, 2):
        t.read_again(again, out)
    t.committed(out)
    assert changes(out) == [("c", "[1]", Position(3, 1700, 0)), ("c", "[2]", Position(3, 1700, 2))]
    assert resumes(out) == [(1700, "0-1-12")]
    assert t.committing is None


def test_the_oldest_prepared_transaction_holds_the_checkpoint() -> None:
    t = translator()
    out = feed(t, *xa_group(1000, 10, b"a1", 1), *xa_group(2000, 11, b"b2", 2),
               *resolved(2600, 12, "ROLLBACK", b"a1"))
    assert t.committing is None  # a rollback: nothing to read again
    assert resumes(out) == [(100, "0-1-9"), (100, "0-1-9"), (1318, "0-1-10")]
    out = feed(t, *resolved(2800, 13, "COMMIT", b"b2"))
    assert t.committing is not None
    for again in xa_group(2000, 11, b"b2", 2):
        t.read_again(again, out)
    t.committed(out)
    assert changes(out) == [("c", "[2]", Position(3, 2800, 0))]
    assert resumes(out) == [(2800, "0-1-13")]


def test_a_key_change_takes_two_positions_in_the_transaction() -> None:
    t = translator()
    group = [gtid(1046, 10, flags=76, size=46), rows(1200, 1), update(1300, 5, 6),
             query(1380, "XA END X'6131',X'',1"), prepare(1418, b"a1")]
    feed(t, *group, *resolved(1700, 11, "COMMIT", b"a1"))
    out: list[LogItem] = []
    for again in group:
        t.read_again(again, out)
    t.committed(out)
    assert changes(out) == [("c", "[1]", Position(3, 1700, 0)), ("d", "[5]", Position(3, 1700, 2)),
                            ("c", "[6]", Position(3, 1700, 3))]


def test_an_xa_transaction_of_other_tables_is_not_read_again() -> None:
    t = translator()
    group = [gtid(1046, 10, flags=76, size=46), rows(1200, 1, table="other"),
             query(1280, "XA END X'6131',X'',1"), prepare(1318, b"a1")]
    out = feed(t, *group, *resolved(1700, 11, "COMMIT", b"a1"))
    assert t.committing is None and changes(out) == []
    assert resumes(out) == [(100, "0-1-9"), (1700, "0-1-11")]


def test_mysql_xa_forms() -> None:
    """MySQL opens the group with an ``XA START`` statement; ``XA COMMIT … ONE PHASE`` is
    the same group ended by an XA_PREPARE event that commits: its rows take that event's
    positions. The executed GTID set in the held checkpoint lacks the prepared one."""
    def mysql_gtid(end: int, gno: int) -> Any:
        return event(GtidEvent, end, sid=uuid.UUID(SID).bytes, gno=gno)

    t = BinlogTranslator("src", [TABLE], describe,
                         BinlogCheckpoint("binlog.000007", 100, f"{SID}:1-41", "server_uuid=u"))
    one_phase = [mysql_gtid(1077, 42), query(1160, "XA START X'6f6e65',X'',1"), rows(1300, 3),
                 query(1380, "XA END X'6f6e65',X'',1"), prepare(1418, b"one", one_phase=True)]
    out = feed(t, *one_phase)
    assert out == [] and t.committing is not None
    assert t.committing.position == Position(7, 1418) and t.committing.prepared.start == 1140
    for again in one_phase[1:]:
        t.read_again(again, out)
    t.committed(out)
    assert changes(out) == [("c", "[3]", Position(7, 1418, 0))]
    out = feed(t, mysql_gtid(1500, 43), query(1580, "XA START X'74776f',X'',1"), rows(1700, 4),
               query(1780, "XA END X'74776f',X'',1"), prepare(1818, b"two"))
    assert changes(out) == [] and t.committing is None
    assert [BinlogCheckpoint.decode(str(c.resume)).gtid for c in out
            if isinstance(c, Checkpoint)] == [f"{SID}:1-42"]


def test_a_group_not_found_again_stops_the_worker() -> None:
    t = translator()
    feed(t, *xa_group(1000, 10, b"a1", 1), *resolved(1700, 11, "COMMIT", b"a1"))
    with pytest.raises(ProtocolError, match=r"not at mariadb-bin\.000003:1000-1318 any more"):
        t.read_again(rows(1200, 1), [])  # not the group's first event
    t = translator()
    feed(t, *xa_group(1000, 10, b"a1", 1), *resolved(1700, 11, "COMMIT", b"a1"))
    t.read_again(xa_group(1000, 10, b"a1", 1)[0], [])
    with pytest.raises(ProtocolError, match="dblog dump --all"):
        t.committed([])  # its XA_PREPARE never came


def test_an_xa_commit_of_a_transaction_prepared_before_the_start_is_reported(
    caplog: pytest.LogCaptureFixture
) -> None:
    out = feed(translator(), *resolved(1700, 11, "COMMIT", b"old"))
    assert resumes(out) == [(1700, "0-1-11")]
    assert "X'6f6c64',X'',1 was committed" in caplog.text


@pytest.mark.parametrize(("event_type", "setting"), [
    (166, "log_bin_compress"), (171, "log_bin_compress"), (165, "log_bin_compress"),
    (40, "binlog_transaction_compression"),
])
def test_events_that_cannot_be_read_stop_the_worker(event_type: int, setting: str) -> None:
    with pytest.raises(ConfigError, match=f"because {setting}.* is on"):
        feed(translator(), event(NotImplementedEvent, 900, type=event_type))
    assert feed(translator(), event(NotImplementedEvent, 900, type=34)) == []  # anonymous GTID


def test_checkpoints_name_their_server() -> None:
    old = '{"file":"mariadb-bin.000003","pos":100,"gtid":"0-1-9"}'
    assert BinlogCheckpoint.decode(old).server == ""
    named = BinlogCheckpoint(FILE, 100, "0-1-9", "server_id=1")
    assert BinlogCheckpoint.decode(named.encode()) == named
    assert json.loads(named.encode())["server"] == "server_id=1"
    assert BinlogCheckpoint(FILE, 100, "0-1-9").encode() == old
    assert resumes(feed(translator(), gtid(200, 10), event(XidEvent, 300))) == [(300, "0-1-10")]
    [item] = [i for i in feed(translator(), gtid(200, 10), event(XidEvent, 300))
              if isinstance(i, Checkpoint)]
    assert BinlogCheckpoint.decode(str(item.resume)).server == "server_id=1"


def test_a_checkpoint_of_another_server_says_what_to_do() -> None:
    start = BinlogCheckpoint("mariadb-bin.000041", 100, "0-1-9", "server_id=1")
    message = _other_server(start, BinlogCheckpoint("mariadb-bin.000007", 4, "", "server_id=2"))
    assert "another server (server_id=1); this one is server_id=2" in message
    assert ("run FLUSH BINARY LOGS 36 time(s), until SHOW MASTER STATUS shows "
            "mariadb-bin.000043") in message
    assert "dblog reset --yes" in message and "dblog dump --all" in message
    ahead = _other_server(start, BinlogCheckpoint("mariadb-bin.000050", 4, "", "server_id=2"))
    assert "FLUSH" not in ahead and "dblog reset --yes" in ahead


def test_untouched_transactions_are_unchanged() -> None:
    """Outside XA transactions, positions and checkpoints are what they always were."""
    out = feed(translator(), gtid(200, 10), rows(300, 1, 2), update(400, 2, 3),
               event(XidEvent, 430), gtid(480, 11, flags=1 | 12), query(600, "TRUNCATE items"))
    assert changes(out) == [("c", "[1]", Position(3, 300, 0)), ("c", "[2]", Position(3, 300, 2)),
                            ("d", "[2]", Position(3, 400, 0)), ("c", "[3]", Position(3, 400, 1)),
                            ("t", "None", Position(3, 600, 0))]
    assert resumes(out) == [(430, "0-1-10"), (600, "0-1-11")]
    assert [e.op for e in out if isinstance(e, ChangeEvent)][-1] is Op.TRUNCATE


def test_a_new_column_layout_makes_a_new_view() -> None:
    """VARCHAR(20) to VARCHAR(300) keeps name and type but not the length bytes of each
    value: the view (codec and row-image decoder) is made again, even without the DDL
    statement in between (a view is found by the columns' layout too)."""
    described: list[list[Any]] = []

    def counting(table: str, event: Any) -> TableView:
        described.append(event.columns)
        return describe(table, event)

    t = BinlogTranslator("src", [TABLE], counting, BinlogCheckpoint(FILE, 100, "0-1-9",
                                                                    "server_id=1"))
    narrow = [SimpleNamespace(name="id", type=3), SimpleNamespace(name="v", type=15,
                                                                   max_length=20)]
    wide = [narrow[0], SimpleNamespace(name="v", type=15, max_length=300)]
    out: list[LogItem] = []
    for end, columns in ((200, narrow), (300, narrow), (400, wide)):
        made = rows(end, end)
        made.columns = columns
        t.translate(gtid(end - 50, end), out)
        t.translate(made, out)
    assert [len(c) for c in described] == [2, 2]
    assert described[1][1].max_length == 300
