"""Stride scheduling of windows among the dumps ready for one: shares by weight, no credit
for a dump that was not ready, a newcomer not ahead of those running."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence

import pytest

from dblog_worker.dump.requests import Priority
from dblog_worker.dump.schedule import Ready, Scheduler


def ready(dump_id: str, priority: Priority, number: int) -> Ready:
    return Ready(dump_id, priority.weight, (priority.rank, number))


URGENT = ready("repair", Priority.URGENT, 9)
NORMAL = ready("tables", Priority.NORMAL, 5)
BACKGROUND = ready("backfill", Priority.BACKGROUND, 1)


def run(scheduler: Scheduler, windows: int,
        ready_at: Callable[[int], Sequence[Ready]]) -> list[str]:
    """The dumps that opened each of ``windows`` windows, ``ready_at(i)`` ready at the i-th."""
    opened = []
    for i in range(windows):
        chosen = scheduler.pick(ready_at(i))
        assert chosen is not None
        scheduler.opened(chosen.id, chosen.weight)
        opened.append(chosen.id)
    return opened


@pytest.mark.parametrize(("dumps", "windows", "shares"), [
    ((URGENT, BACKGROUND), 170, {"repair": 160, "backfill": 10}),
    ((NORMAL, BACKGROUND), 50, {"tables": 40, "backfill": 10}),
    ((URGENT, NORMAL, BACKGROUND), 210, {"repair": 160, "tables": 40, "backfill": 10}),
    ((BACKGROUND,), 7, {"backfill": 7}),
    ((ready("a", Priority.NORMAL, 1), ready("b", Priority.NORMAL, 2)), 10, {"a": 5, "b": 5}),
])
def test_windows_are_shared_by_weight(dumps: tuple[Ready, ...], windows: int,
                                      shares: dict[str, int]) -> None:
    assert Counter(run(Scheduler(), windows, lambda i: dumps)) == shares


def test_ties_go_to_the_higher_priority_then_the_older() -> None:
    scheduler = Scheduler()
    assert scheduler.pick([BACKGROUND, NORMAL, URGENT]) == URGENT
    older, newer = ready("old", Priority.NORMAL, 3), ready("new", Priority.NORMAL, 4)
    assert scheduler.pick([newer, older]) == older
    assert scheduler.pick([]) is None


def test_a_repair_queued_during_a_backfill_gets_the_next_window() -> None:
    """A backfill alone takes every window; a repair that comes gets the next one, and
    all but one in 17 while both are ready."""
    scheduler = Scheduler()
    assert run(scheduler, 100, lambda i: [BACKGROUND]) == ["backfill"] * 100
    opened = run(scheduler, 34, lambda i: [BACKGROUND, URGENT])
    assert opened[0] == "repair"
    assert 1 <= Counter(opened)["backfill"] <= 2  # 34 / 17: one or two, by phase


def test_a_dump_that_was_not_ready_earns_nothing_meanwhile() -> None:
    """A paced backfill (ready one window in four) next to a normal dump: while it waits,
    the other takes the windows; when it is ready again it gets one turn, not a run of the
    turns it missed."""
    scheduler = Scheduler()
    opened = run(scheduler, 200, lambda i: [NORMAL, BACKGROUND] if i % 4 == 0 else [NORMAL])
    runs = "".join("b" if d == "backfill" else "t" for d in opened)
    assert "bb" not in runs
    assert Counter(opened)["backfill"] <= 50


def test_a_dump_that_left_and_came_back_starts_at_the_virtual_time() -> None:
    scheduler = Scheduler()
    run(scheduler, 40, lambda i: [URGENT, NORMAL])
    scheduler.forget("repair")
    assert scheduler.pass_of("repair") == scheduler.virtual
    opened = run(scheduler, 20, lambda i: [URGENT, NORMAL])
    assert opened[0] == "repair"
    assert 3 <= Counter(opened)["tables"] <= 5  # 20 / 5: four, give or take the phase
