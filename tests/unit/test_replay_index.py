"""The convergence checker's index of replayed rows (tests/integration/harness.py ``_Images``):
a foreign-key action event visits the rows it matches through the index; the rows it finds
must be exactly those the product's own ``apply_actions`` changes, or the checker would let a
wrong output pass."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from dblog_worker.foreign_keys import Action, apply_actions
from tests.integration.harness import _Images

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
