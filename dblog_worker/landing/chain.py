"""Which of a table's segment files readers use: the chain, once compaction has run.

A table's segments carry sequence numbers 1, 2, 3, ... A compacted segment holds the
events of a run ``lo..hi`` of them, so for a while both it and the segments it replaces
are present: readers must use one or the other, never both, and never leave a hole.

:func:`resolve` decides from the listing alone (names, sequence ranges, when each file
appeared), the same way for every reader. In the order files appeared (their time,
then their name): a file is **active** unless it *partly* overlaps an active one (it
covers some of its sequence numbers but not all, or exactly the same ones); an active
file that a newer one covers wholly is **superseded** by it. So a compacted segment
replaces what it covers the moment it appears, and of two compactions that raced over
overlapping runs the first to land wins; the other is a **loser**, ignored. Superseded
and losing files stay until :mod:`~dblog_worker.landing.maintenance` removes them, a
grace period after what replaced them appeared, so a reader that listed before still
finds its files.

The active files must cover one contiguous run of sequence numbers (retention removes
from the start only): a hole raises ValueError naming it, and readers refuse rather than
skip events. Pure: no I/O.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Iterable
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True, order=True)
class Candidate:
    """One segment file as listed: the sequence numbers it covers, its name, when it
    appeared (seconds since the epoch) and its size in bytes."""

    lo: int
    hi: int
    name: str
    mtime: float = 0.0
    size: int = 0

    def covers(self, other: Candidate) -> bool:
        return self.lo <= other.lo and other.hi <= self.hi


@dataclass(frozen=True)
class Resolution:
    active: list[Candidate]  # in sequence order, contiguous
    superseded: dict[Candidate, Candidate] = field(default_factory=dict)  # file -> its cover
    losers: list[Candidate] = field(default_factory=list)


def resolve(files: Iterable[Candidate], what: str = "table") -> Resolution:
    """The chain of ``files`` (see the module's docstring); ValueError on a hole."""
    active: list[Candidate] = []  # sorted by lo, pairwise disjoint
    replaced_by: dict[Candidate, Candidate] = {}
    losers: list[Candidate] = []
    for file in sorted(files, key=lambda f: (f.mtime, f.name)):
        if file.hi < file.lo or file.lo < 1:
            raise ValueError(f"{what}: {file.name} covers no sequence number")
        start = bisect.bisect_left(active, file.hi + 1, key=lambda a: a.lo)
        first = start
        while first > 0 and active[first - 1].hi >= file.lo:
            first -= 1
        overlapping = active[first:start]
        if any(not file.covers(a) or (a.lo, a.hi) == (file.lo, file.hi) for a in overlapping):
            losers.append(file)
            continue
        for old in overlapping:
            replaced_by[old] = file
        active[first:start] = [file]
    for before, after in itertools.pairwise(active):
        if after.lo != before.hi + 1:
            raise ValueError(
                f"{what}: segments {before.hi + 1}..{after.lo - 1} are missing between "
                f"{before.name} and {after.name}; the landing zone lost files")
    return Resolution(active, {old: _final(old, replaced_by) for old in replaced_by}, losers)


def _final(file: Candidate, replaced_by: dict[Candidate, Candidate]) -> Candidate:
    while file in replaced_by:
        file = replaced_by[file]
    return file
