"""The events a batch applies by predicate, after its keyed ones: foreign-key actions and
prunes, planned into set-based steps.

A batch's keyed events (``c``, ``u``, ``d``, ``r``) apply first, the latest per key. Its
foreign-key action events (``f``: what a cascade did to child rows the log does not name,
:mod:`dblog_worker.foreign_keys`) and prune events (``p``: a pruning dump's "rows no event
wrote since are gone") then apply in position order, each only to rows whose position is
older than its own: the keyed phase left every row at its latest keyed position, so a row
written after the event keeps what was written, and applying a batch again changes
nothing. This is the order the events have in the log, since each acts on rows older
than itself only.

Applying a bulk parent delete one event at a time would be one statement (and one scan of
the child) per parent row. :func:`plan` groups consecutive action events of one *shape*
(the same foreign keys: columns and delete or set) into a :class:`ActionRun`, which the
target applies with a few set-based statements (a join of the run's events with the
table), which is the same as applying them one by one when, in each action slot, no two
events of the run match the same values (each row meets at most one event per slot) and
no event's new values are another's old ones (no chain: ``7 → 8`` then ``8 → 9``). An event
that breaks either starts a new run. A run of events with several actions (two foreign keys
of one child to one parent) applies each slot against the rows as they were before the run
(the target keeps their positions aside), since the slots of different events interleave.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from dblog_worker.errors import TargetError
from dblog_worker.foreign_keys import Action, parse_actions, parse_prune

__all__ = ["ActionRun", "Prune", "Slot", "Step", "plan"]

FOREIGN_KEY, PRUNE = "f", "p"


@dataclass(frozen=True, slots=True)
class Slot:
    """One foreign key's action in each event of a run: its child columns, and whether it
    deletes the rows it matches (else it sets those columns)."""

    columns: tuple[str, ...]
    deletes: bool


@dataclass(frozen=True, slots=True)
class ActionRun:
    """Consecutive foreign-key action events of one shape, positions ``first`` to
    ``last``: action ``j`` of each event is slot ``j``."""

    first: str
    last: str
    slots: tuple[Slot, ...]
    events: int

    @property
    def disjoint(self) -> bool:
        """Whether its slots touch different columns (else each event is a run alone)."""
        columns = [c for slot in self.slots for c in slot.columns]
        return len(columns) == len(set(columns))


@dataclass(frozen=True, slots=True)
class Prune:
    """A prune event at ``position``: rows last written before ``older_than`` are gone."""

    position: str
    older_than: str


Step = ActionRun | Prune
Staged = tuple[str, str, str | None, str | None]  # position, op, before, after


def _shape(actions: Sequence[Action]) -> tuple[Slot, ...]:
    return tuple(Slot(a.columns, a.deletes) for a in actions)


class _Run:
    """The run being built, and what its slots have matched and set so far."""

    def __init__(self, position: str, actions: Sequence[Action]) -> None:
        self.first = self.last = position
        self.slots = _shape(actions)
        self.events = 0
        self.olds: list[set[tuple[str, ...]]] = [set() for _ in actions]
        self.news: list[set[tuple[str, ...]]] = [set() for _ in actions]
        self.add(position, actions)

    def takes(self, actions: Sequence[Action]) -> bool:
        if _shape(actions) != self.slots or not ActionRun("", "", self.slots, 0).disjoint:
            return False
        for action, olds, news in zip(actions, self.olds, self.news, strict=True):
            old = tuple(v for _, v in action.match)
            new = () if action.values is None else tuple(v for _, v in action.values)
            if old in olds or old in news or (new and new in olds):
                return False
        return True

    def add(self, position: str, actions: Sequence[Action]) -> None:
        self.last = position
        self.events += 1
        for action, olds, news in zip(actions, self.olds, self.news, strict=True):
            olds.add(tuple(v for _, v in action.match))
            if action.values is not None:
                news.add(tuple(v for _, v in action.values))

    def step(self) -> ActionRun:
        return ActionRun(self.first, self.last, self.slots, self.events)


def plan(staged: Iterable[Staged]) -> list[Step]:
    """The steps of a batch's staged foreign-key action and prune events, given in
    position order; ValueError names an event whose images are malformed."""
    steps: list[Step] = []
    run: _Run | None = None
    for position, op, before, after in staged:
        try:
            if op == PRUNE:
                if run is not None:
                    steps.append(run.step())
                    run = None
                steps.append(Prune(position, parse_prune(before or "")))
                continue
            if op != FOREIGN_KEY:
                raise ValueError(f"op {op!r} is not applied by predicate")
            actions = parse_actions(before or "", after or "")
        except ValueError as exc:
            raise ValueError(f"the {op} event at {position} is malformed: {exc}") from None
        if run is not None and run.takes(actions):
            run.add(position, actions)
            continue
        if run is not None:
            steps.append(run.step())
        run = _Run(position, actions)
    if run is not None:
        steps.append(run.step())
    return steps


def batch_steps(staged: Iterable[Staged], target_table: str) -> list[Step]:
    """:func:`plan` for a target: a malformed event is the target table's TargetError."""
    try:
        return plan(staged)
    except ValueError as exc:
        raise TargetError(f"{target_table}: {exc}") from None
