"""The sink seam: the registry of formats, the Parquet format through the seam's two
protocols, and the output buffer over a sink that is not Parquet."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from dblog_worker import config as config_module
from dblog_worker.capture.output import OutputBuffer
from dblog_worker.capture.schemas import SchemaRegistry
from dblog_worker.errors import ConfigError, LeaseLost, SegmentCorrupt
from dblog_worker.events import ChangeEvent, Op, Origin
from dblog_worker.landing.arrow import Item, first_position, last_position
from dblog_worker.landing.parquet import LandingZone
from dblog_worker.landing.sink import FORMATS, LandedReader, Sink, open_reader, open_sink
from dblog_worker.position import Position
from tests.unit.helpers import flush

TABLE = "public.orders"


def event(major: int, op: Op = Op.CREATE, version: int = 1) -> ChangeEvent:
    return ChangeEvent(
        table=TABLE, op=op, position=Position(major, 0, 0), key=f"[{major}]",
        after=None if op in (Op.DELETE, Op.TRUNCATE) else f'{{"id":{major}}}', before=None,
        origin=Origin.LOG, commit_ts_us=1_700_000_000_000_000, schema_version=version,
    )


def test_the_registry_opens_the_parquet_format(tmp_path: Path) -> None:
    assert set(FORMATS) == {"parquet"}
    sink: Sink = open_sink(tmp_path, "shop", "parquet")
    reader: LandedReader = open_reader(tmp_path, "shop")
    assert isinstance(sink, LandingZone) and isinstance(reader, LandingZone)
    assert sink.where == str(tmp_path / "shop") and reader.format == "parquet"
    with pytest.raises(ValueError, match="landing format 'delta' is not one of parquet"):
        open_sink(tmp_path, "shop", "delta")


def test_the_configuration_names_the_format(tmp_path: Path) -> None:
    text = (
        '[source]\nname = "shop"\nkind = "postgresql"\ndsn = "dbname=shop"\n'
        'tables = ["public.orders"]\n[redis]\nurl = "redis://localhost:6379/0"\n'
        '[landing]\npath = "{path}"\n{extra}'
    )
    path = tmp_path / "worker.toml"
    path.write_text(text.format(path=tmp_path, extra=""))
    assert config_module.load(path).landing_format == "parquet"
    path.write_text(text.format(path=tmp_path, extra='format = "delta"\n'))
    with pytest.raises(ConfigError, match=r"landing\.format must be one of parquet, got 'delta'"):
        config_module.load(path)


def test_parquet_through_the_seam(tmp_path: Path) -> None:
    sink = open_sink(tmp_path, "shop")
    sink.fence(3)
    assert sink.writer_tokens() == [3]
    assert sink.commit(TABLE, [event(1), event(2, version=2)]) == Position(2, 0, 0)
    assert sink.commit(TABLE, [event(3, Op.TRUNCATE), event(4)]) == Position(4, 0, 0)
    sink.write_schema(TABLE, 1, {"columns": []})
    assert sink.recover() == {TABLE: Position(4, 0, 0)}
    with pytest.raises(ValueError, match="not after the last committed position"):
        sink.commit(TABLE, [event(4)])
    with pytest.raises(LeaseLost):
        open_sink(tmp_path, "shop").fence(2)  # an older token cannot take over

    reader = open_reader(tmp_path, "shop")
    assert reader.tables() == [TABLE]
    segments = reader.segments(TABLE)
    assert [(s.seq, s.first, s.last) for s in segments] == [
        (1, Position(1, 0, 0), Position(2, 0, 0)), (2, Position(3, 0, 0), Position(4, 0, 0))]
    assert all(Path(s.location).is_file() for s in segments)
    first, second = (reader.summary(s) for s in segments)
    assert (first.rows, first.truncate_at, first.versions) == (2, "", frozenset({1, 2}))
    assert (second.truncate_at, second.versions) == (Position(3, 0, 0).encode(),
                                                      frozenset({1}))
    assert reader.read(segments[0]).column("key").to_pylist() == ["[1]", "[2]"]
    assert reader.schemas(TABLE) == {1: {"columns": []}}
    Path(segments[1].location).write_bytes(b"PAR1 not a segment")
    with pytest.raises(SegmentCorrupt, match="truncated or damaged"):
        reader.summary(segments[1])


class MemorySink:
    """A sink that keeps what it is given, by the seam's contract (fencing, order, schema
    versions): the output buffer and the schema registry need nothing of Parquet."""

    def __init__(self) -> None:
        self.committed: dict[str, list[Item]] = {}
        self.tokens: list[int] = []
        self.started = False
        self.documents: dict[str, dict[int, dict[str, object]]] = {}

    @property
    def where(self) -> str:
        return "memory"

    def writer_tokens(self) -> list[int]:
        return sorted(self.tokens)

    def fence(self, token: int) -> None:
        if any(t > token for t in self.tokens):
            raise LeaseLost(f"a writer of a newer token than {token} wrote here")
        self.tokens = [token]

    def capture_started(self) -> bool:
        return self.started

    def mark_capture_started(self) -> None:
        self.started = True

    def recover(self) -> dict[str, Position]:
        return {t: last_position(items[-1]) for t, items in self.committed.items()}

    def commit(self, table: str, items: Sequence[Item]) -> Position:
        if not self.tokens:
            raise LeaseLost("not fenced")
        landed = self.committed.get(table)
        if landed and not first_position(items[0]) > last_position(landed[-1]):
            raise ValueError(f"{table}: not after the last committed position")
        self.committed.setdefault(table, []).extend(items)
        return last_position(items[-1])

    def schemas(self, table: str) -> dict[int, dict[str, object]]:
        return dict(self.documents.get(table, {}))

    def write_schema(self, table: str, version: int, schema: Mapping[str, object]) -> None:
        known = self.documents.setdefault(table, {})
        if version in known and known[version] != dict(schema):
            raise ValueError(f"schema version {version} of {table} has different content")
        known[version] = dict(schema)


@pytest.fixture(params=["parquet", "memory"])
def any_sink(request: pytest.FixtureRequest, tmp_path: Path) -> Sink:
    return open_sink(tmp_path, "shop") if request.param == "parquet" else MemorySink()


def test_every_sink_keeps_the_contract(any_sink: Sink) -> None:
    """What the worker relies on, on Parquet and on the sink that is not Parquet alike."""
    sink = any_sink
    assert not sink.capture_started() and sink.recover() == {}
    sink.fence(5)
    sink.mark_capture_started()
    assert sink.capture_started() and sink.writer_tokens() == [5]
    assert sink.commit(TABLE, [event(1), event(2)]) == Position(2, 0, 0)
    with pytest.raises(ValueError, match="not after the last committed position"):
        sink.commit(TABLE, [event(2)])  # a replay is never written twice
    assert sink.recover() == {TABLE: Position(2, 0, 0)}
    with pytest.raises(LeaseLost):
        sink.fence(4)  # an older leader cannot take over
    sink.write_schema(TABLE, 1, {"columns": ["id"]})
    sink.write_schema(TABLE, 1, {"columns": ["id"]})  # the same again: nothing
    with pytest.raises(ValueError, match="differ"):  # Parquet: "different content"
        sink.write_schema(TABLE, 1, {"columns": ["other"]})
    assert sink.schemas(TABLE) == {1: {"columns": ["id"]}}
    registry = SchemaRegistry(sink)
    assert registry.version(TABLE, {"columns": ["id"]}) == 1  # found, not written again
    assert registry.version(TABLE, {"columns": ["id", "b"]}) == 2


def test_the_output_buffer_writes_through_any_sink() -> None:
    sink = MemorySink()
    sink.fence(1)
    buffer = OutputBuffer(sink, {TABLE: Position(2, 0, 0)})
    for major in (1, 2, 3, 4):
        buffer.add(event(major))
    assert flush(buffer) == 2  # 1 and 2 are durable already: a replay
    assert [e.position.major for e in sink.committed[TABLE]] == [3, 4]  # type: ignore[union-attr]
    assert buffer.replayed == 2
    buffer.close()
