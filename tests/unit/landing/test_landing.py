from __future__ import annotations

import json
import os
import re
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dblog_worker.errors import LeaseLost
from dblog_worker.events import ChangeEvent, DumpRows, Op, Origin
from dblog_worker.landing.arrow import SEGMENT_SCHEMA
from dblog_worker.landing.names import parse_table_dir_name, table_dir_name
from dblog_worker.landing.parquet import LandingZone, read_events
from dblog_worker.landing.parquet_files import MAX_ROW_GROUP_ROWS, FileSegment, read_segment
from dblog_worker.names import split_table
from dblog_worker.position import Position

TABLE = "public.orders"
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
u64 = st.integers(min_value=0, max_value=2**64 - 1)


def event(
    major: int,
    minor: int = 0,
    sub: int = 0,
    *,
    table: str = TABLE,
    op: Op = Op.CREATE,
    key: str | None = "[1]",
    after: str | None = '{"id":1}',
    before: str | None = None,
    origin: Origin = Origin.LOG,
    ts: int = 1_700_000_000_000_000,
    schema_version: int = 1,
    dump_id: str | None = None,
) -> ChangeEvent:
    return ChangeEvent(
        table=table,
        op=op,
        position=Position(major, minor, sub),
        key=key,
        after=after,
        before=before,
        origin=origin,
        commit_ts_us=ts,
        schema_version=schema_version,
        dump_id=dump_id,
    )


def expected_row(e: ChangeEvent) -> dict[str, object]:
    return {
        "position": e.position.encode(),
        "op": e.op.value,
        "origin": e.origin.value,
        "key": e.key,
        "after": e.after,
        "before": e.before,
        "commit_ts": EPOCH + timedelta(microseconds=e.commit_ts_us),
        "schema_version": e.schema_version,
        "dump_id": e.dump_id,
    }


@pytest.fixture
def zone(tmp_path: Path) -> LandingZone:
    return LandingZone(tmp_path, "src1")


# ----------------------------------------------------------------- round trip


def test_round_trip_of_every_field(zone: LandingZone) -> None:
    events = [
        event(
            10,
            0,
            op=Op.CREATE,
            key='[1,"ä"]',
            after='{"id":1,"name":"日本語 🎉","z":null}',
            ts=0,
        ),
        event(
            10,
            1,
            op=Op.UPDATE,
            key='[1,"ä"]',
            after='{"id":1,"name":"b"}',
            before='{"id":1,"name":"日本語 🎉","z":null}',
            ts=1_700_000_000_123_456,
            schema_version=2**31 - 1,
        ),
        event(10, 2, op=Op.DELETE, after=None, before='{"id":1}', ts=-1),
        event(11, 0, op=Op.TRUNCATE, key=None, after=None, before=None),
        event(
            11,
            0,
            5,
            op=Op.READ,
            origin=Origin.DUMP,
            key="[2]",
            after='{"id":2,"s":"\\u0000 ok"}',
            dump_id="dump-é-1",
            schema_version=0,
        ),
        event(2**64 - 1, 2**64 - 1, 2**64 - 1, ts=253_402_300_799_999_999),
    ]
    segment = zone.commit_segment(TABLE, events)

    assert segment == FileSegment(
        table=TABLE,
        seq=1,
        first=Position(10, 0),
        last=Position(2**64 - 1, 2**64 - 1, 2**64 - 1),
        path=segment.path,
    )
    assert segment.path.parent == zone.root / "src1" / "public.orders"
    assert segment.path.name == (
        "segment-000000000001-"
        f"{Position(10, 0).encode()}-{Position(2**64 - 1, 2**64 - 1, 2**64 - 1).encode()}.parquet"
    )
    assert read_events(zone, TABLE) == [expected_row(e) for e in events]

    data = read_segment(segment.path)
    assert data.schema.equals(SEGMENT_SCHEMA, check_metadata=False)
    assert [(f.name, str(f.type)) for f in data.schema] == [
        ("position", "string"),
        ("op", "string"),
        ("origin", "string"),
        ("key", "string"),
        ("after", "string"),
        ("before", "string"),
        ("commit_ts", "timestamp[us, tz=UTC]"),
        ("schema_version", "int32"),
        ("dump_id", "string"),
    ]


def test_file_metadata_compression_and_row_groups(zone: LandingZone) -> None:
    segment = zone.commit_segment(TABLE, [event(1, i) for i in range(3)])
    meta = pq.read_metadata(segment.path)
    kv = meta.metadata
    assert kv[b"dblog.format"] == b"1"
    assert kv[b"dblog.source"] == b"src1"
    assert kv[b"dblog.table"] == TABLE.encode()
    assert meta.num_row_groups == 1
    assert meta.num_rows == 3
    columns = {
        meta.row_group(0).column(i).path_in_schema: meta.row_group(0).column(i)
        for i in range(meta.num_columns)
    }
    assert {c.compression for c in columns.values()} == {"ZSTD"}
    for name in ("op", "origin", "dump_id"):
        assert columns[name].dictionary_page_offset is not None
    for name in ("position", "after"):
        assert columns[name].dictionary_page_offset is None


def test_large_segment_is_split_into_row_groups_of_128k(zone: LandingZone) -> None:
    n = MAX_ROW_GROUP_ROWS + 10
    events = [event(1, i, key=None, after=None) for i in range(n)]
    segment = zone.commit_segment(TABLE, events)
    assert pq.read_metadata(segment.path).num_row_groups == 2
    assert read_segment(segment.path).num_rows == n


# ----------------------------------------------------------------- ordering


def test_segments_are_numbered_in_order(zone: LandingZone) -> None:
    committed = [zone.commit_segment(TABLE, [event(i, 0), event(i, 1)]) for i in range(1, 13)]
    listed = zone.segments(TABLE)
    assert listed == committed
    assert [s.seq for s in listed] == list(range(1, 13))
    assert [s.path.name for s in listed] == sorted(os.listdir(listed[0].path.parent))
    assert zone.last_position(TABLE) == Position(12, 1)
    # a fresh zone (another process) sees the same and continues the sequence
    other = LandingZone(zone.root, "src1")
    assert other.segments(TABLE) == committed
    assert other.commit_segment(TABLE, [event(13)]).seq == 13
    rows = read_events(other, TABLE)
    assert [r["position"] for r in rows] == sorted(str(r["position"]) for r in rows)


def test_positions_must_not_decrease_within_a_segment(zone: LandingZone) -> None:
    with pytest.raises(ValueError, match="backwards"):
        zone.commit_segment(TABLE, [event(5, 1), event(5, 0)])
    # equal positions are allowed (a primary-key change: delete + create)
    segment = zone.commit_segment(
        TABLE, [event(5, 0, op=Op.DELETE, key="[1]"), event(5, 0, key="[2]")]
    )
    assert segment.first == segment.last == Position(5, 0)


def test_first_position_must_follow_the_previous_segment(zone: LandingZone) -> None:
    zone.commit_segment(TABLE, [event(5, 0), event(5, 3)])
    for bad in ([event(5, 3)], [event(5, 2), event(9)], [event(1)]):
        with pytest.raises(ValueError, match="not after the last committed"):
            zone.commit_segment(TABLE, bad)
    # the same holds for a fresh zone over the same directory
    with pytest.raises(ValueError, match="not after the last committed"):
        LandingZone(zone.root, "src1").commit_segment(TABLE, [event(5, 3)])
    assert len(zone.segments(TABLE)) == 1
    assert zone.commit_segment(TABLE, [event(5, 3, 1)]).seq == 2


def test_invalid_segments_write_nothing(zone: LandingZone) -> None:
    with pytest.raises(ValueError, match="at least one"):
        zone.commit_segment(TABLE, [])
    with pytest.raises(ValueError, match=r"public\.other"):
        zone.commit_segment(TABLE, [event(1), event(2, table="public.other")])
    with pytest.raises(ValueError, match=r"public\.other"):
        zone.commit_segment(TABLE, [event(1, table="public.other")])
    with pytest.raises(ValueError, match="cannot be written"):
        zone.commit_segment(TABLE, [event(1, schema_version=2**31)])
    assert zone.tables() == []
    assert not (zone.root / "src1").exists()


def test_tables_are_kept_apart(zone: LandingZone) -> None:
    zone.commit_segment("public.a", [event(1, table="public.a")])
    zone.commit_segment("public.b", [event(1, table="public.b")])
    zone.commit_segment('my schema."odd.name"', [event(7, table='my schema."odd.name"')])
    assert zone.tables() == ['my schema."odd.name"', "public.a", "public.b"]
    assert (zone.root / "src1" / "my%20schema.%22odd%2Ename%22").is_dir()
    assert zone.last_position("public.a") == Position(1, 0)
    assert zone.last_position('my schema."odd.name"') == Position(7, 0)
    assert zone.last_position("public.none") is None
    assert zone.segments("public.none") == []
    # another source under the same root is invisible
    assert LandingZone(zone.root, "src2").tables() == []


def test_foreign_files_are_ignored(zone: LandingZone) -> None:
    segment = zone.commit_segment(TABLE, [event(1)])
    directory = segment.path.parent
    for name in (
        "README",
        "segment-1-x-y.parquet",
        "segment-000000000002-" + "A" * 48 + "-" + "A" * 48 + ".parquet",
        ".DS_Store",
    ):
        (directory / name).write_text("x")
    (zone.root / "src1" / "not-a-table").mkdir()
    (zone.root / "src1" / "public.%2e").mkdir()  # not canonical
    (zone.root / "src1" / "stray.file").write_text("x")
    assert zone.segments(TABLE) == [segment]
    assert zone.tables() == [TABLE]
    assert zone.schemas(TABLE) == {}


def test_duplicate_sequence_numbers_are_an_error(zone: LandingZone) -> None:
    segment = zone.commit_segment(TABLE, [event(1)])
    twin = segment.path.with_name(
        f"segment-000000000001-{Position(2, 0).encode()}-{Position(2, 0).encode()}.parquet"
    )
    twin.write_bytes(segment.path.read_bytes())
    with pytest.raises(ValueError, match="same sequence number"):
        zone.segments(TABLE)


# ----------------------------------------------------------------- crashes


def test_a_crashed_write_is_invisible_and_recover_removes_it(zone: LandingZone) -> None:
    zone.commit_segment(TABLE, [event(1), event(2)])
    zone.commit_segment("public.b", [event(4, table="public.b")])
    directory = zone.table_dir(TABLE)
    # a crash in the middle of the next commit: half a parquet file under a temp name
    full = zone.root / "whole.parquet"
    pq.write_table(pa.table({"x": list(range(1000))}), full)
    partial = directory / ".tmp-0123456789abcdef"
    partial.write_bytes(full.read_bytes()[:200])
    (directory / ".tmp-schema").write_text("{")

    assert [s.seq for s in zone.segments(TABLE)] == [1]
    assert [r["position"] for r in read_events(zone, TABLE)] == [
        Position(1, 0).encode(),
        Position(2, 0).encode(),
    ]
    assert zone.schemas(TABLE) == {}
    assert zone.tables() == ["public.b", TABLE]

    restarted = LandingZone(zone.root, "src1")
    assert restarted.recover() == {TABLE: Position(2, 0), "public.b": Position(4, 0)}
    assert sorted(os.listdir(directory)) == [zone.segments(TABLE)[0].path.name]
    assert restarted.commit_segment(TABLE, [event(3)]).seq == 2


def test_recover_on_an_empty_zone(tmp_path: Path) -> None:
    assert LandingZone(tmp_path / "nothing", "s").recover() == {}
    zone = LandingZone(tmp_path, "s")
    zone.write_schema(TABLE, 1, {"columns": []})
    assert zone.recover() == {}


def test_a_failed_write_leaves_no_temp_file(zone: LandingZone) -> None:
    zone.commit_segment(TABLE, [event(1)])

    class Boom(Exception):
        """What the failing write raises."""

    def fail(*args: object, **kwargs: object) -> None:
        raise Boom

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(pq, "write_table", fail)
        with pytest.raises(Boom):
            zone.commit_segment(TABLE, [event(2)])
    assert [p.name.startswith("segment-") for p in zone.table_dir(TABLE).iterdir()] == [True]
    assert zone.commit_segment(TABLE, [event(2)]).seq == 2


def test_read_segment_on_a_truncated_file_names_it(zone: LandingZone) -> None:
    segment = zone.commit_segment(TABLE, [event(1, i, after="x" * 100) for i in range(100)])
    data = segment.path.read_bytes()
    for size in (0, 3, len(data) // 2, len(data) - 1):
        broken = segment.path.with_name(f"broken-{size}.parquet")
        broken.write_bytes(data[:size])
        with pytest.raises(ValueError, match=re.escape(broken.name)):
            read_segment(broken)


def test_read_segment_rejects_foreign_parquet(tmp_path: Path) -> None:
    path = tmp_path / "other.parquet"
    pq.write_table(pa.table({"position": ["x"]}), path)
    with pytest.raises(ValueError, match=r"other\.parquet"):
        read_segment(path)


def test_read_segment_checks_the_name_against_the_content(zone: LandingZone) -> None:
    segment = zone.commit_segment(TABLE, [event(1), event(2)])
    renamed = segment.path.with_name(
        f"segment-000000000009-{Position(1, 0).encode()}-{Position(3, 0).encode()}.parquet"
    )
    renamed.write_bytes(segment.path.read_bytes())
    with pytest.raises(ValueError, match="do not match its name"):
        read_segment(renamed)


# ----------------------------------------------------------------- names


def test_table_dir_name_examples() -> None:
    assert table_dir_name("public", "orders") == "public.orders"
    assert table_dir_name("my schema", '"odd.name"') == "my%20schema.%22odd%2Ename%22"
    assert table_dir_name("Ä", "a-b_C9") == "%C3%84.a-b_C9"
    assert parse_table_dir_name("my%20schema.%22odd%2Ename%22") == ("my schema", '"odd.name"')
    assert split_table('my schema."odd.name"') == ("my schema", '"odd.name"')
    assert split_table("a.b.c") == ("a", "b.c")


@pytest.mark.parametrize("bad", ["", "nodot", ".x", "x.", "../x", "a/b", "."])
def test_split_table_rejects(bad: str) -> None:
    with pytest.raises(ValueError):
        split_table(bad)


@pytest.mark.parametrize(
    "bad",
    ["", ".", "..", "a", "a.b.c", "a..b", ".a", "a.", "a.%2e", "a.%41", "a.%", "a.%C3", "a/b.c"],
)
def test_parse_table_dir_name_rejects(bad: str) -> None:
    with pytest.raises(ValueError):
        parse_table_dir_name(bad)


@given(st.text(min_size=1, max_size=10), st.text(min_size=1, max_size=10))
def test_table_dir_name_round_trip(schema: str, name: str) -> None:
    encoded = table_dir_name(schema, name)
    assert parse_table_dir_name(encoded) == (schema, name)
    assert encoded.count(".") == 1
    assert "/" not in encoded and "\\" not in encoded and "\x00" not in encoded
    assert not encoded.startswith(".")
    assert encoded.isascii()
    # the table string round trips through split_table too
    table = f"{schema}.{name}"
    if "." not in schema:
        assert split_table(table) == (schema, name)


@given(st.text(min_size=1), st.text(min_size=1))
def test_table_dir_name_fits_or_refuses(schema: str, name: str) -> None:
    try:
        encoded = table_dir_name(schema, name)
    except ValueError as exc:
        assert "255" in str(exc)
    else:
        assert len(encoded.encode()) <= 255


def test_unencodable_names_are_refused() -> None:
    with pytest.raises(ValueError):
        table_dir_name("a", "\ud800")


@pytest.mark.parametrize(
    "table",
    ["x./../../etc", "a/b.c", "../x", "x.\\..\\y", "x.\x00", "x.../..", "~.~", "x.\n", "..x"],
)
def test_odd_names_stay_inside_the_source_dir(zone: LandingZone, table: str) -> None:
    if table.startswith("."):  # an empty schema: refused before anything is written
        with pytest.raises(ValueError, match="non-empty"):
            zone.commit_segment(table, [event(1, table=table)])
        assert not zone.root.joinpath("src1").exists()
        return
    segment = zone.commit_segment(table, [event(1, table=table)])
    zone.write_schema(table, 1, {"t": table})
    source_dir = (zone.root / "src1").resolve()
    assert segment.path.resolve().parent.parent == source_dir
    assert zone.tables() == [table]
    assert zone.schemas(table) == {1: {"t": table}}
    assert read_events(zone, table)[0]["position"] == Position(1, 0).encode()
    all_files = [p for p in zone.root.rglob("*") if p.is_file()]
    assert all(p.resolve().is_relative_to(source_dir) for p in all_files)


@settings(max_examples=30, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    # names are UTF-8 (no lone surrogates: PostgreSQL and MySQL have none)
    st.text(st.characters(exclude_characters=".", codec="utf-8"), min_size=1, max_size=10),
    st.text(st.characters(codec="utf-8"), min_size=1, max_size=10),
)
def test_any_table_name_lands_in_one_directory(tmp_path: Path, schema: str, name: str) -> None:
    root = tmp_path / f"r{abs(hash((schema, name)))}"
    zone = LandingZone(root, "s")
    table = f"{schema}.{name}"
    zone.commit_segment(table, [event(1, table=table)])
    assert LandingZone(root, "s").tables() == [table]
    assert [p.parent.parent for p in root.rglob("segment-*")] == [root / "s"]


@pytest.mark.parametrize("source", ["", ".", "..", "a/b", "a.b", "a b", "é", "x\n"])
def test_source_name_must_be_plain(tmp_path: Path, source: str) -> None:
    with pytest.raises(ValueError):
        LandingZone(tmp_path, source)


@given(st.lists(st.tuples(u64, u64, u64), min_size=1, max_size=30))
def test_segment_positions_match_position_encode(parts: list[tuple[int, int, int]]) -> None:
    # the writer hex-encodes positions itself, all at once; it must agree with encode()
    from dblog_worker.landing.arrow import segment_table as _segment_table

    events = [event(*p) for p in sorted(parts)]
    got = _segment_table(events, "s", TABLE, None).column("position").to_pylist()
    assert got == [e.position.encode() for e in events]


# ----------------------------------------------------------------- schemas


def test_schema_write_is_idempotent_and_conflicts_raise(zone: LandingZone) -> None:
    v1 = {"columns": [{"name": "id", "type": "int8"}, {"name": "ä", "type": "text"}], "pk": ["id"]}
    zone.write_schema(TABLE, 1, v1)
    path = zone.table_dir(TABLE) / "schema-000001.json"
    text = path.read_text(encoding="utf-8")
    assert json.loads(text) == v1
    assert "\n  " in text  # pretty
    mtime = path.stat().st_mtime_ns

    zone.write_schema(TABLE, 1, dict(reversed(list(v1.items()))))  # same content
    assert path.read_text(encoding="utf-8") == text
    assert path.stat().st_mtime_ns == mtime

    with pytest.raises(ValueError, match="different content"):
        zone.write_schema(TABLE, 1, {"columns": []})
    assert path.read_text(encoding="utf-8") == text

    zone.write_schema(TABLE, 2, {"columns": []})
    assert zone.schemas(TABLE) == {1: v1, 2: {"columns": []}}
    assert LandingZone(zone.root, "src1").schemas(TABLE) == {1: v1, 2: {"columns": []}}
    assert [p.name for p in zone.table_dir(TABLE).iterdir() if p.name.startswith(".")] == []


@pytest.mark.parametrize("version", [-1, 1_000_000, True])
def test_schema_version_range(zone: LandingZone, version: int) -> None:
    with pytest.raises(ValueError):
        zone.write_schema(TABLE, version, {})


def test_schema_must_be_json(zone: LandingZone) -> None:
    with pytest.raises(ValueError):
        zone.write_schema(TABLE, 1, {"x": float("nan")})
    with pytest.raises(TypeError):
        zone.write_schema(TABLE, 1, {"x": object()})
    assert zone.schemas(TABLE) == {}


def test_a_corrupt_schema_file_is_reported(zone: LandingZone) -> None:
    zone.write_schema(TABLE, 1, {"a": 1})
    (zone.table_dir(TABLE) / "schema-000002.json").write_text("[1]")
    with pytest.raises(ValueError, match=r"schema-000002\.json"):
        zone.schemas(TABLE)


def test_a_segment_mixes_log_events_and_window_rows(tmp_path: Path) -> None:
    zone = LandingZone(tmp_path, "src")
    high = Position(7, 2, 0)
    rows = DumpRows(TABLE, pa.array(["[2]", "[3]"]), pa.array(['{"id":2}', '{"id":3}']),
                    high, 1_700_000_000_000_000, 4, "dump-9")
    items: list[ChangeEvent | DumpRows] = [
        event(7, 1, key="[9]"), rows, event(8, 0, key="[2]", op=Op.UPDATE)
    ]
    segment = zone.commit_segment(TABLE, items)
    assert (segment.first, segment.last) == (Position(7, 1), Position(8, 0))
    landed = read_events(zone, TABLE)
    assert [(e["position"], e["op"], e["origin"], e["key"], e["dump_id"], e["schema_version"])
            for e in landed] == [
        (Position(7, 1).encode(), "c", "log", "[9]", None, 1),
        (Position(7, 2, 1).encode(), "r", "dump", "[2]", "dump-9", 4),
        (Position(7, 2, 2).encode(), "r", "dump", "[3]", "dump-9", 4),
        (Position(8, 0).encode(), "u", "log", "[2]", None, 1),
    ]
    assert landed[1]["after"] == '{"id":2}' and landed[1]["before"] is None
    with pytest.raises(ValueError, match="not after the last committed"):
        zone.commit_segment(TABLE, [rows])


@pytest.mark.parametrize("high", [Position(5, 3, 0), Position(2**64 - 1, 7, 99_990),
                                  Position(1, 1, 2**40)])
def test_dump_row_positions_are_the_high_watermark_plus_their_index(
    tmp_path: Path, high: Position
) -> None:
    zone = LandingZone(tmp_path, "src")
    count = 20
    rows = DumpRows(TABLE, pa.array([f"[{i}]" for i in range(count)]),
                    pa.array(["{}"] * count), high, 0, 1, "dump-1")
    zone.commit_segment(TABLE, [rows])
    assert [e["position"] for e in read_events(zone, TABLE)] == [
        high.dump_row(i).encode() for i in range(count)
    ]


# ----------------------------------------------------------------- fencing


def test_a_fenced_writer_stamps_its_token_and_stages_in_its_directory(tmp_path: Path) -> None:
    zone = LandingZone(tmp_path, "s")
    zone.fence(7)
    segment = zone.commit_segment(TABLE, [event(1)])
    zone.write_schema(TABLE, 1, {"columns": []})
    assert pq.read_schema(segment.path).metadata[b"dblog.writer"] == b"7"
    assert zone.writer_tokens() == [7]
    assert os.listdir(tmp_path / "s" / ".writer-000000000007") == []  # nothing left staged
    assert zone.tables() == [TABLE]  # the writer directory is no table


def test_a_newer_writer_fences_the_older_one_out(tmp_path: Path) -> None:
    old, new = LandingZone(tmp_path, "s"), LandingZone(tmp_path, "s")
    old.fence(1)
    old.commit_segment(TABLE, [event(1)])
    new.fence(2)
    assert new.recover() == {TABLE: Position(1, 0)}  # what the old one published before: seen
    with pytest.raises(LeaseLost, match="writer directory of token 1 was moved away"):
        old.commit_segment(TABLE, [event(2)])
    with pytest.raises(LeaseLost):
        old.write_schema(TABLE, 1, {"columns": []})
    assert [s.seq for s in new.segments(TABLE)] == [1]
    assert new.commit_segment(TABLE, [event(2)]).seq == 2
    assert new.writer_tokens() == [2]
    # the old one cannot come back: a newer writer exists
    with pytest.raises(LeaseLost, match="newer than this worker's token 1"):
        old.fence(1)
    assert new.commit_segment(TABLE, [event(3)]).seq == 3


def test_fencing_again_with_the_same_token_clears_what_a_crash_left(tmp_path: Path) -> None:
    zone = LandingZone(tmp_path, "s")
    zone.fence(3)
    (tmp_path / "s" / ".writer-000000000003" / ".tmp-crashed").write_bytes(b"partial")
    LandingZone(tmp_path, "s").fence(3)
    assert os.listdir(tmp_path / "s" / ".writer-000000000003") == []


def test_a_writer_racing_the_fence_never_publishes_after_it(tmp_path: Path) -> None:
    """The old writer commits in a loop while the new one fences: every segment the old
    one published is there at the fence's end, and none comes after."""
    old, new = LandingZone(tmp_path, "s"), LandingZone(tmp_path, "s")
    old.fence(1)
    published: list[int] = []
    failed = threading.Event()

    def write() -> None:
        major = 1
        while not failed.is_set():
            try:
                published.append(old.commit_segment(TABLE, [event(major)]).seq)
            except LeaseLost:
                failed.set()
            major += 1

    writer = threading.Thread(target=write)
    writer.start()
    while len(published) < 5:
        time.sleep(0.001)
    new.fence(2)
    seen_at_fence = [s.seq for s in new.segments(TABLE)]
    failed.wait(10)
    writer.join(10)
    assert failed.is_set()
    assert [s.seq for s in new.segments(TABLE)] == seen_at_fence == published


def test_writer_tokens_are_checked(tmp_path: Path) -> None:
    for bad in (0, -1, True, 10**12):
        with pytest.raises(ValueError, match="writer token"):
            LandingZone(tmp_path, "s").fence(bad)


# ----------------------------------------------------------------- columns of runs

ops = st.sampled_from([Op.CREATE, Op.UPDATE, Op.DELETE])


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(ops, st.sampled_from([1, 2]), st.sampled_from([0, 5, 2**40]),
                          st.sampled_from([None, "d1"]), u64, st.integers(0, 3)),
                min_size=1, max_size=60),
       st.booleans())
def test_segment_columns_are_each_events_values(
    values: list[tuple[Op, int, int, str | None, int, int]], same: bool
) -> None:
    """Runs whose operation, origin, commit time, schema version or dump are all alike are
    made without converting each value (``arrow._column``), and positions from a reused
    buffer of offsets: the table is each event's values all the same, however long the
    run (longer ones grow the buffer, shorter ones slice it)."""
    from dblog_worker.landing.arrow import segment_table

    if same:
        values = [values[0][:4] + v[4:] for v in values]
    events = [event(major, n, sub, op=op, schema_version=version, ts=ts, dump_id=dump)
              for n, (op, version, ts, dump, major, sub) in enumerate(values)]
    for run in (events, events * 40, events[:1]):
        table = segment_table(run, "src1", TABLE, None)
        table.validate(full=True)
        assert table.to_pylist() == [expected_row(e) for e in run]


def _modes(root: Path) -> tuple[dict[str, int], dict[str, int]]:
    """Every directory and file under ``root`` (itself included) with its permission bits."""
    dirs, files = {str(root): root.stat().st_mode & 0o7777}, {}
    for parent, dirnames, filenames in os.walk(root):
        for name in dirnames:
            dirs[os.path.join(parent, name)] = os.stat(os.path.join(parent, name)).st_mode & 0o7777
        for name in filenames:
            files[os.path.join(parent, name)] = os.stat(os.path.join(parent, name)).st_mode & 0o7777
    return dirs, files


@pytest.mark.parametrize("umask", [0o022, 0o000, 0o077, 0o277])
def test_landing_files_are_owner_only_whatever_the_umask(tmp_path: Path, umask: int) -> None:
    root = tmp_path / "landing" / "below"  # the worker creates missing parents too
    old = os.umask(umask)
    try:
        zone = LandingZone(root, "src1")
        zone.mark_capture_started()
        zone.fence(3)
        zone.write_schema(TABLE, 1, {"columns": []})
        zone.commit_segment(TABLE, [event(1), event(2)])
        zone.commit_segment("other.t", [event(3, table="other.t")])
        zone.fence(4)  # a new writer directory; the old one moved away
        zone.commit_segment(TABLE, [event(4)])
    finally:
        os.umask(old)
    dirs, files = _modes(tmp_path / "landing")
    assert len(files) == 5 and len(dirs) == 6, (dirs, files)
    assert {path: 0o700 for path in dirs} == dirs
    assert {path: 0o600 for path in files} == files
    assert [e["position"] for e in read_events(zone, TABLE)] == [
        Position(n, 0, 0).encode() for n in (1, 2, 4)]
