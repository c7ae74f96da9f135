"""Which dump opens the next window: stride scheduling over the dumps ready for one.

Windows never overlap in the log, so the dumps a worker runs at once take turns: when
several could open a window now (running, their delay passed, not waiting for a retry,
not held by their own open windows), the one whose *pass* is lowest does; opening a window
adds its *stride*, ``STRIDE / weight``, to its pass (Waldspurger & Weihl, "Stride
Scheduling", 1995). Over any stretch where the same dumps are ready, each gets windows in
proportion to its weight (:attr:`~dblog_worker.requests.Priority.weight`): an urgent
repair (16) next to a background backfill (1) gets 16 windows of 17.

A dump that was not ready (paced by its delay, throttled, paused, waiting for a replica)
earns nothing meanwhile: its pass is raised to the scheduler's *virtual time*, the pass of
the last window given, so it cannot come back and take many windows in a row. A new dump
starts at the virtual time, ahead of every dump that has had windows since. Ties go to the
lower ``order`` (priority rank, then age).

Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

STRIDE = 1 << 20


@dataclass(frozen=True, slots=True)
class Ready:
    """A dump that could open a window now."""

    id: str
    weight: int
    order: tuple[int, int]  # ties: priority rank, then request number


class Scheduler:
    """The passes of the dumps a session runs, and the virtual time."""

    def __init__(self) -> None:
        self.virtual = 0.0
        self._passes: dict[str, float] = {}

    def pass_of(self, dump_id: str) -> float:
        """Where a dump stands: its pass, never behind the virtual time."""
        return max(self._passes.get(dump_id, self.virtual), self.virtual)

    def pick(self, ready: Sequence[Ready]) -> Ready | None:
        """The dump to open the next window, among ``ready``; None if none is."""
        if not ready:
            return None
        return min(ready, key=lambda r: (self.pass_of(r.id), r.order))

    def opened(self, dump_id: str, weight: int) -> None:
        """The dump opened a window: it moves on by its stride, ``STRIDE / weight``."""
        start = self.pass_of(dump_id)
        self.virtual = start
        self._passes[dump_id] = start + STRIDE / max(1, weight)

    def forget(self, dump_id: str) -> None:
        """The dump ended or left this worker."""
        self._passes.pop(dump_id, None)
