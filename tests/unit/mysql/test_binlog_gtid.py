"""The GTID state a binlog checkpoint carries, as the translator grows it transaction by
transaction: MariaDB's one GTID per domain, MySQL's executed GTID set."""

from __future__ import annotations

import uuid
from types import SimpleNamespace
from typing import Any

import pytest
from pymysqlreplication.event import GtidEvent, MariadbGtidEvent, XidEvent

from dblog_worker.events import Checkpoint, LogItem
from dblog_worker.mysql.checkpoint import BinlogCheckpoint
from dblog_worker.mysql.translate import BinlogTranslator

SID = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
OTHER = "b9b4712a-df64-11e3-b391-60672090eb04"


def mysql_gtid(sid: str, gno: int) -> Any:
    event = GtidEvent.__new__(GtidEvent)
    event.sid, event.gno = uuid.UUID(sid).bytes, gno
    return event


def mariadb_gtid(domain: int, server: int, sequence: int) -> Any:
    event = MariadbGtidEvent.__new__(MariadbGtidEvent)
    event.domain_id, event.flags = domain, 0
    event.gtid = f"{domain}-{server}-{sequence}"
    return event


def xid(pos: int) -> Any:
    event = XidEvent.__new__(XidEvent)
    event.packet = SimpleNamespace(log_pos=pos)
    return event


def committed(start: BinlogCheckpoint, *events: Any) -> list[BinlogCheckpoint]:
    """The checkpoints the translator emits for ``events``, decoded."""
    translator = BinlogTranslator("src", [], lambda table, event: None,
                                  start)
    out: list[LogItem] = []
    for event in events:
        translator.translate(event, out)
    return [BinlogCheckpoint.decode(str(item.resume)) for item in out
            if isinstance(item, Checkpoint)]


def test_mysql_checkpoints_carry_the_executed_set() -> None:
    start = BinlogCheckpoint("binlog.000007", 100, f"{SID}:1-41,{OTHER}:1-3")
    assert start.mysql_gtid_set
    checkpoints = committed(start, mysql_gtid(SID, 42), xid(200),
                            mysql_gtid(OTHER, 4), xid(300), mysql_gtid(SID, 43), xid(400))
    assert [c.gtid for c in checkpoints] == [
        f"{SID}:1-42,{OTHER}:1-3",
        f"{SID}:1-42,{OTHER}:1-4",
        f"{SID}:1-43,{OTHER}:1-4",
    ]
    assert [c.pos for c in checkpoints] == [200, 300, 400]
    assert all(c.mysql_gtid_set for c in checkpoints)


def test_mysql_set_with_a_gap_keeps_the_gap() -> None:
    """A transaction applied out of order (a multi-threaded replica upstream) fills its own
    number only: resuming asks the server for the numbers in between."""
    start = BinlogCheckpoint("binlog.000007", 100, f"{SID}:1-5")
    [checkpoint] = committed(start, mysql_gtid(SID, 9), xid(200))
    assert checkpoint.gtid == f"{SID}:1-5:9"


def test_mysql_without_a_starting_set_records_none() -> None:
    """GTIDs seen by a worker that started without the server's set (GTIDs were off) would
    make a set that claims too little: the checkpoint keeps file and position only."""
    [checkpoint] = committed(BinlogCheckpoint("binlog.000007", 100, ""),
                             mysql_gtid(SID, 42), xid(200))
    assert checkpoint.gtid == "" and not checkpoint.mysql_gtid_set


def test_mariadb_keeps_one_gtid_per_domain() -> None:
    start = BinlogCheckpoint("mariadb-bin.000002", 100, "0-1-9")
    assert not start.mysql_gtid_set
    checkpoints = committed(start, mariadb_gtid(0, 1, 10), xid(200),
                            mariadb_gtid(1, 1, 1), xid(300))
    assert [c.gtid for c in checkpoints] == ["0-1-10", "0-1-10,1-1-1"]


@pytest.mark.parametrize("gtid, mysql", [
    ("", False), ("0-1-9", False), ("0-1-9,1-2-5", False),
    (f"{SID}:1-5", True), (f"{SID}:1-5:7-9,{OTHER}:1", True),
])
def test_which_kind_of_gtid_state(gtid: str, mysql: bool) -> None:
    assert BinlogCheckpoint("binlog.000001", 4, gtid).mysql_gtid_set is mysql
