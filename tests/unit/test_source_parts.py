"""A source is its setup and its parts: no kind's source class answers a part's call itself
(by hand-forwarding it to the object that does), and each part's class implements its
protocol."""

from __future__ import annotations

import inspect

import pytest

from dblog_worker import source
from dblog_worker.mysql.log_reader import MyLogReader
from dblog_worker.mysql.pressure import MyPressure
from dblog_worker.mysql.reads import CapturedTables
from dblog_worker.mysql.source import MySqlSource
from dblog_worker.pg.log_reader import PgLogReader
from dblog_worker.pg.pressure import PgPressure
from dblog_worker.pg.reads import PgChunkReader
from dblog_worker.pg.source import PgSource
from dblog_worker.pg.watermarks import PgWatermarks
from tests.fakedb.source import FakeLog, FakePressure, FakeReads, FakeSource, FakeWatermarks

PARTS = {"log": source.LogReader, "watermarks": source.WatermarkWriter,
         "chunks": source.DumpReader, "tables": source.Tables, "pressure": source.Pressure}


def calls(protocol: type) -> set[str]:
    return {name for name, value in vars(protocol).items()
            if inspect.isfunction(value) and not name.startswith("_")} | (
        set().union(*(calls(base) for base in protocol.__bases__ if base is not object
                      and base.__name__ != "Protocol" and base.__name__ != "Generic")))


def test_the_source_protocol_is_setup_and_its_parts() -> None:
    members = {name for name in vars(source.Source) if not name.startswith("_")}
    assert members == set(PARTS)
    assert source.Source.__bases__[0] is source.Setup
    for protocol in PARTS.values():  # setup and the parts share no call
        assert not calls(protocol) & calls(source.Setup), protocol


@pytest.mark.parametrize("kind", [PgSource, MySqlSource, FakeSource])
def test_a_source_class_answers_no_call_of_a_part(kind: type) -> None:
    defined = {name for name, value in vars(kind).items() if inspect.isfunction(value)}
    for part, protocol in PARTS.items():
        assert not defined & calls(protocol), (kind.__name__, part, defined & calls(protocol))


@pytest.mark.parametrize(("part", "classes"), [
    ("log", [PgLogReader, MyLogReader, FakeLog]),
    ("watermarks", [PgWatermarks, MyLogReader, FakeWatermarks]),
    ("chunks", [PgChunkReader, CapturedTables, FakeReads]),
    ("tables", [PgChunkReader, CapturedTables, FakeReads]),
    ("pressure", [PgPressure, MyPressure, FakePressure]),
])
def test_each_part_class_has_its_protocols_calls(part: str, classes: list[type]) -> None:
    for cls in classes:
        missing = calls(PARTS[part]) - {n for n in dir(cls) if callable(getattr(cls, n))}
        assert not missing, (cls.__name__, part, missing)
