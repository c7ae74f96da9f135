"""The merge's plan of a batch's foreign-key action and prune events: set-based runs, cut
where applying them together would not be applying them one by one."""

from __future__ import annotations

import pytest

from dblog_worker.merge.derived import ActionRun, Prune, Slot, plan


def p(n: int) -> str:
    return f"{n:048x}"


def f(n: int, before: str, after: str) -> tuple[str, str, str | None, str | None]:
    return (p(n), "f", before, after)


DELETE = Slot(("pid",), True)
SET = Slot(("pid",), False)


def test_a_bulk_delete_is_one_run() -> None:
    staged = [f(n, f'[{{"pid":{n}}}]', "[null]") for n in range(1, 10_001)]
    assert plan(staged) == [ActionRun(p(1), p(10_000), (DELETE,), 10_000)]


@pytest.mark.parametrize(("staged", "runs"), [
    # the same old value twice (a parent deleted, inserted again, deleted again)
    ([f(1, '[{"pid":7}]', "[null]"), f(2, '[{"pid":7}]', "[null]")], [(1, 1), (2, 2)]),
    # a chain: 7 -> 8, then 8 -> 9
    ([f(1, '[{"pid":7}]', '[{"pid":8}]'), f(2, '[{"pid":8}]', '[{"pid":9}]')],
     [(1, 1), (2, 2)]),
    # ... and back: 8 -> 9 after 7 -> 8 is a chain the other way too
    ([f(1, '[{"pid":8}]', '[{"pid":9}]'), f(2, '[{"pid":7}]', '[{"pid":8}]')],
     [(1, 1), (2, 2)]),
    # set null never chains
    ([f(1, '[{"pid":7}]', '[{"pid":null}]'), f(2, '[{"pid":8}]', '[{"pid":null}]')],
     [(1, 2)]),
    # another shape starts another run
    ([f(1, '[{"pid":7}]', "[null]"), f(2, '[{"pid":8}]', '[{"pid":null}]'),
      f(3, '[{"pid":9}]', '[{"pid":null}]')], [(1, 1), (2, 3)]),
], ids=["repeated-old", "chain", "chain-back", "set-null", "shapes"])
def test_runs_are_cut_where_together_is_not_one_by_one(
        staged: list[tuple[str, str, str | None, str | None]],
        runs: list[tuple[int, int]]) -> None:
    assert [(int(r.first, 16), int(r.last, 16)) for r in plan(staged)
            if isinstance(r, ActionRun)] == runs


def test_prunes_are_steps_of_their_own_in_position_order() -> None:
    staged = [f(1, '[{"pid":7}]', "[null]"), (p(2), "p", f'{{"older_than":"{p(1)}"}}', None),
              f(3, '[{"pid":8}]', "[null]")]
    assert plan(staged) == [ActionRun(p(1), p(1), (DELETE,), 1), Prune(p(2), p(1)),
                            ActionRun(p(3), p(3), (DELETE,), 1)]


def test_several_foreign_keys_of_one_child_run_together_unless_they_overlap() -> None:
    two = [f(n, f'[{{"a":{n}}},{{"b":{n}}}]', '[{"a":null},{"b":null}]') for n in (1, 2, 3)]
    (run,) = plan(two)
    assert isinstance(run, ActionRun) and run.events == 3 and run.disjoint
    assert run.slots == (Slot(("a",), False), Slot(("b",), False))
    overlapping = [f(n, f'[{{"a":{n}}},{{"a":{n},"b":1}}]', '[null,{"a":null,"b":null}]')
                   for n in (1, 2)]
    assert [r.events for r in plan(overlapping) if isinstance(r, ActionRun)] == [1, 1]


def test_a_malformed_event_is_named() -> None:
    with pytest.raises(ValueError, match=f"the f event at {p(4)} is malformed"):
        plan([f(4, '[{"a":1}]', "[]")])
    with pytest.raises(ValueError, match="the p event"):
        plan([(p(5), "p", "{}", None)])
