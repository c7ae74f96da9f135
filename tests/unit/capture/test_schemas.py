"""SchemaRegistry: schema documents to version numbers, recorded in the landing zone."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dblog_worker.capture.schemas import SchemaRegistry
from dblog_worker.landing.parquet import LandingZone

A, B = "public.a", "public.b"
SOURCE = "shop"


def schema(*columns: tuple[str, str, int], key: tuple[str, ...] = ("id",)) -> dict[str, object]:
    return {
        "columns": [{"name": n, "type": t, "type_oid": oid} for n, t, oid in columns],
        "key": list(key),
    }


V1 = schema(("id", "int4", 23), ("name", "text", 25))
V2 = schema(("id", "int4", 23), ("name", "text", 25), ("note", "text", 25))
V3 = schema(("id", "int8", 20), ("name", "text", 25), ("note", "text", 25))
UNICODE = schema(("id", "int4", 23), ("naïve ✓", "text", 25))


@pytest.mark.parametrize(
    ("sequence", "versions"),
    [
        pytest.param([V1], [1], id="first"),
        pytest.param([V1, V1, V1], [1, 1, 1], id="same-schema"),
        pytest.param([V1, V2, V3], [1, 2, 3], id="each-new-schema"),
        pytest.param([V1, V2, V1, V2, V3, V1], [1, 2, 1, 2, 3, 1], id="replay-of-older"),
        pytest.param([V2, V1], [1, 2], id="numbered-in-order-seen"),
        pytest.param([UNICODE, V1, UNICODE], [1, 2, 1], id="unicode-names"),
    ],
)
def test_versions(tmp_path: Path, sequence: list[dict[str, object]], versions: list[int]) -> None:
    zone = LandingZone(tmp_path, SOURCE)
    registry = SchemaRegistry(zone)
    assert [registry.version(A, s) for s in sequence] == versions
    distinct = list({json.dumps(s, sort_keys=True): s for s in sequence}.values())
    assert zone.schemas(A) == {number: s for number, s in enumerate(distinct, start=1)}


def test_key_order_of_the_document_does_not_matter(tmp_path: Path) -> None:
    registry = SchemaRegistry(LandingZone(tmp_path, SOURCE))
    assert registry.version(A, {"columns": [], "key": ["id"]}) == 1
    assert registry.version(A, {"key": ["id"], "columns": []}) == 1
    assert registry.version(A, {"key": ("id",), "columns": ()}) == 1  # JSON has no tuples


def test_new_version_written_to_the_landing_zone(tmp_path: Path) -> None:
    zone = LandingZone(tmp_path, SOURCE)
    registry = SchemaRegistry(zone)
    registry.version(A, V1)
    registry.version(A, V2)
    directory = zone.table_dir(A)
    assert sorted(p.name for p in directory.iterdir()) == ["schema-000001.json",
                                                          "schema-000002.json"]
    assert json.loads((directory / "schema-000002.json").read_text()) == V2
    registry.version(A, V1)  # known: nothing written
    assert len(list(directory.iterdir())) == 2


def test_tables_are_numbered_separately(tmp_path: Path) -> None:
    zone = LandingZone(tmp_path, SOURCE)
    registry = SchemaRegistry(zone)
    assert registry.version(A, V1) == 1
    assert registry.version(B, V2) == 1
    assert registry.version(B, V1) == 2
    assert registry.version(A, V2) == 2
    assert zone.schemas(A) == {1: V1, 2: V2}
    assert zone.schemas(B) == {1: V2, 2: V1}


def test_a_new_registry_finds_the_existing_versions(tmp_path: Path) -> None:
    first = SchemaRegistry(LandingZone(tmp_path, SOURCE))
    assert [first.version(A, s) for s in (V1, V2)] == [1, 2]

    zone = LandingZone(tmp_path, SOURCE)  # a restart
    registry = SchemaRegistry(zone)
    assert registry.version(A, V2) == 2
    assert registry.version(A, V1) == 1
    assert registry.version(A, V3) == 3
    assert registry.version(B, V3) == 1
    assert zone.schemas(A) == {1: V1, 2: V2, 3: V3}


def test_gap_in_existing_versions(tmp_path: Path) -> None:
    zone = LandingZone(tmp_path, SOURCE)
    zone.write_schema(A, 1, V1)
    zone.write_schema(A, 5, V2)
    registry = SchemaRegistry(zone)
    assert registry.version(A, V2) == 5
    assert registry.version(A, V3) == 6


V4 = schema(("id", "int8", 20), ("note", "text", 25))


def test_two_workers_leading_in_turn_share_the_numbers(tmp_path: Path) -> None:
    """Two workers of one source, each with its registry for its whole life, lead in turn
    (each fences the landing zone with a higher token): a version the other wrote
    meanwhile is found, not numbered again, and a new schema takes the next free number."""
    first_zone, second_zone = LandingZone(tmp_path, SOURCE), LandingZone(tmp_path, SOURCE)
    first, second = SchemaRegistry(first_zone), SchemaRegistry(second_zone)
    first_zone.fence(1)
    assert first.version(A, V1) == 1
    second_zone.fence(2)  # the second leads: it writes version 2
    assert second.version(A, V1) == 1
    assert second.version(A, V2) == 2
    first_zone.fence(3)  # the first leads again, its registry knows only version 1
    assert first.version(A, V3) == 3
    assert first.version(A, V2) == 2
    second_zone.fence(4)
    assert second.version(A, V3) == 3
    assert second.version(A, V4) == 4
    first_zone.fence(5)
    assert [first.version(A, s) for s in (V4, V1, V2, V3)] == [4, 1, 2, 3]
    assert first_zone.schemas(A) == {1: V1, 2: V2, 3: V3, 4: V4}


def test_a_number_taken_meanwhile_is_not_taken_twice(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Another writer publishes the number this registry picked between its look and its
    write: it takes the next one."""
    zone = LandingZone(tmp_path, SOURCE)
    registry = SchemaRegistry(zone)
    assert registry.version(A, V1) == 1
    write = zone.write_schema

    def other_writer_first(table: str, version: int, document: object) -> None:
        if version == 2 and not (zone.table_dir(table) / "schema-000002.json").exists():
            write(table, 2, V4)  # the other writer's schema, at the same instant
        write(table, version, document)  # type: ignore[arg-type]

    monkeypatch.setattr(zone, "write_schema", other_writer_first)
    assert registry.version(A, V2) == 3
    assert registry.version(A, V4) == 2
    assert zone.schemas(A) == {1: V1, 2: V4, 3: V2}
