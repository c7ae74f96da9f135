"""The convergence checker (tests/integration/harness.py ``replay``): its index of replayed
rows (``_Images``), through which a foreign-key action event visits the rows it matches (the
rows it finds must be exactly those the product's own ``apply_actions`` changes), and its
replay applied segment by segment (it must return what a replay from scratch returns), or
the checker would let a wrong output pass."""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from dblog_worker.events import ChangeEvent, Op, Origin
from dblog_worker.foreign_keys import Action, apply_actions
from dblog_worker.landing.parquet import LandingZone
from dblog_worker.position import Position
from tests.integration import harness
from tests.integration.harness import Replay, _Images, replay

VALUE = st.one_of(st.none(), st.integers(0, 3))
ROW = st.fixed_dictionaries({"a": VALUE, "b": VALUE, "c": VALUE})
COLUMNS = st.sampled_from([("a",), ("b",), ("a", "b"), ("b", "c")])


def text(row: dict[str, int | None]) -> str:
    return json.dumps(row, separators=(",", ":"))


@st.composite
def actions(draw: st.DrawFn) -> list[Action]:
    found = []
    for _ in range(draw(st.integers(1, 3))):
        columns = draw(COLUMNS)
        match = tuple((c, json.dumps(draw(VALUE))) for c in columns)
        values = draw(st.one_of(st.none(), st.just(tuple((c, "null") for c in columns))))
        found.append(Action(match, values))
    return found


@given(st.lists(ROW, max_size=25), st.lists(actions(), min_size=1, max_size=4),
       st.lists(st.integers(0, 24), max_size=5))
def test_the_index_finds_the_rows_an_action_changes(
        rows: list[dict[str, int | None]], events: list[list[Action]], dropped: list[int]) -> None:
    images = _Images()
    for number, row in enumerate(rows):
        images.put(str(number), text(row))
    for number in dropped:
        images.drop(str(number))
    for event in events:
        changed = {key for key, image in images.text.items()
                   if apply_actions(image, [event]) is not image}
        assert images.matching(event) == changed
        for key in changed:  # applied, as the replay does: the index follows the new values
            after = apply_actions(images.text[key], [event])
            if after is None:
                images.drop(key)
            else:
                images.put(key, after)


# -- the replay, applied incrementally ---------------------------------------------------

TABLE = "public.items"


def change(op: Op, major: int, id_: int, version: int) -> ChangeEvent:
    row = json.dumps({"id": id_, "version": version}, separators=(",", ":"))
    return ChangeEvent(TABLE, op, Position(major, 0, 0), f"[{id_}]",
                       None if op is Op.DELETE else row, row if op is Op.DELETE else None,
                       Origin.LOG, 1_700_000_000_000_000, 1)


def from_scratch(landing: Path) -> Replay:
    harness._REPLAYS.clear()
    return replay(landing, "src", TABLE)


def test_a_replay_applied_segment_by_segment_is_a_replay_from_scratch(tmp_path: Path) -> None:
    """Each call applies the segments landed since the last one; what it returns is what a
    replay from scratch returns, when segments land, when retention removes the first ones
    and when a caller changes what it got."""
    zone = LandingZone(tmp_path, "src")
    zone.commit_segment(TABLE, [change(Op.CREATE, 1, 1, 1), change(Op.CREATE, 2, 2, 1)])
    assert sorted(replay(tmp_path, "src", TABLE).rows) == ["[1]", "[2]"]
    zone.commit_segment(TABLE, [change(Op.UPDATE, 3, 1, 2), change(Op.DELETE, 4, 2, 1)])
    got = replay(tmp_path, "src", TABLE)
    assert got.rows == {"[1]": {"id": 1, "version": 2}} and got.time_travel == []
    assert got == from_scratch(tmp_path)

    zone.commit_segment(TABLE, [change(Op.UPDATE, 5, 1, 1)])  # back in time
    got = replay(tmp_path, "src", TABLE)
    assert got.time_travel == ["[1]: u version 1 at " + Position(5, 0, 0).encode()
                               + " after version 2"]
    got.rows["[1]"]["version"] = 99  # the caller's copy
    got.rows.clear()
    assert replay(tmp_path, "src", TABLE) == from_scratch(tmp_path)

    zone.remove(TABLE, zone.segments(TABLE)[:2])  # the segments that made [1] version 2
    got = replay(tmp_path, "src", TABLE)
    assert got.rows == {"[1]": {"id": 1, "version": 1}} and got.time_travel == []
    assert got == from_scratch(tmp_path)
