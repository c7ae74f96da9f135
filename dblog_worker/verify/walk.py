"""The walk of ``dblog verify`` over one table, range by key range (:func:`walk`)::

    source key order:  (open ─ k10000] (k10000 ─ k20000] ... (k990000 ─ open)
                       a range every ``range_rows`` source rows; the first is open
                       below and the last open above, so target rows beyond the
                       source's keys fall into them

    each range         count and checksum sum, computed by each database
      equal            → the next range
      different        → drill: split the range at every n/16-th key of the side
                         with more rows, summarize the 16 buckets on both sides (one
                         query each), drill into the buckets that differ; a bucket
                         with at most ``leaf_rows`` rows on both sides (or none on
                         one side) is fetched as (key, row md5) pairs and compared:
                         missing (source only), extra (target only), changed

The walk sees the databases through :class:`RangeReader` (and the source's
:meth:`SourceReader.boundary`): :class:`dblog_worker.verify.command.TableReader` runs the queries
of :mod:`dblog_worker.verify.sql`, the unit tests use keys in memory.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Protocol, TypeVar

from dblog_worker.dump.requests import MAX_KEYS

Key = tuple[str, ...]
"""A primary key as its normalized texts, in key order."""

_S = TypeVar("_S")
_T = TypeVar("_T")

MAX_DEPTH = 32  # drill levels; far more than 16-way splits of any range need
LOOKUP_BATCH = 500  # keys per recheck query


# --- the walk -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Summary:
    count: int
    checksum: int  # sum of the rows' 60-bit md5 prefixes


class RangeReader(Protocol):
    """One side of a compared table, in key ranges ``(lower, upper]`` (None: open)."""

    def summaries(self, lower: Key | None, bounds: Sequence[Key],
                  upper: Key | None) -> list[Summary]:
        """Count and checksum of each bucket ``(lower, b1], (b1, b2], ..., (bn, upper]``."""
        ...

    def split_points(self, lower: Key | None, upper: Key | None, step: int,
                     limit: int) -> list[Key]:
        """Every ``step``-th key of the range, in key order, at most ``limit``."""
        ...

    def rows(self, lower: Key | None, upper: Key | None,
             limit: int | None = None) -> list[tuple[Key, str]]:
        """(key, row md5) of the range's rows in key order, at most ``limit``."""
        ...

    def lookup(self, keys: Sequence[Key]) -> dict[Key, str]:
        """Row md5 of each of these keys that exists."""
        ...


class SourceReader(RangeReader, Protocol):
    def boundary(self, lower: Key | None, offset: int) -> Key | None:
        """The key ``offset + 1`` rows after ``lower``, None if there are fewer rows."""
        ...


@dataclass(frozen=True, slots=True)
class WalkOptions:
    range_rows: int = 10_000
    leaf_rows: int = 64
    fanout: int = 16
    max_keys: int = MAX_KEYS  # stop (truncated) once this many keys differ
    delay_s: float = 0.0  # pause between ranges


@dataclass
class Differences:
    """Differing keys by kind, each list in key order of discovery."""

    missing: list[Key] = field(default_factory=list)
    extra: list[Key] = field(default_factory=list)
    changed: list[Key] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.missing) + len(self.extra) + len(self.changed)

    def keys(self) -> list[Key]:
        return [*self.missing, *self.changed, *self.extra]


@dataclass
class WalkStats:
    source_rows: int = 0
    target_rows: int = 0
    ranges: int = 0
    differing_ranges: int = 0
    truncated: bool = False
    delay_seconds: float = 0.0


def compare_rows(source_rows: Sequence[tuple[Key, str]], target_rows: Sequence[tuple[Key, str]],
                 into: Differences) -> None:
    """Classify the keys of two lists of (key, row md5)."""
    target = dict(target_rows)
    for key, digest in source_rows:
        other = target.pop(key, None)
        if other is None:
            into.missing.append(key)
        elif other != digest:
            into.changed.append(key)
    into.extra.extend(target)


class Both(Protocol):
    """Runs a source call and a target call, perhaps at the same time; returns both
    results."""

    def __call__(self, source: Callable[[], _S], target: Callable[[], _T]) -> tuple[_S, _T]:
        ...


def one_after_the_other(source: Callable[[], _S], target: Callable[[], _T]) -> tuple[_S, _T]:
    return source(), target()


@dataclass(frozen=True, slots=True)
class Sides:
    """The two sides of a compared table, and how calls to both are run."""

    source: SourceReader
    target: RangeReader
    both: Both = one_after_the_other

    def summaries(self, lower: Key | None, bounds: Sequence[Key],
                  upper: Key | None) -> list[tuple[Summary, Summary]]:
        s, t = self.both(lambda: self.source.summaries(lower, bounds, upper),
                         lambda: self.target.summaries(lower, bounds, upper))
        return list(zip(s, t, strict=True))

    def rows(self, lower: Key | None, upper: Key | None, counts: tuple[Summary, Summary],
             limit: int | None = None) -> tuple[list[tuple[Key, str]], list[tuple[Key, str]]]:
        """Both sides' rows of a range (no query for a side without rows)."""
        s, t = counts
        return self.both(lambda: self.source.rows(lower, upper, limit) if s.count else [],
                         lambda: self.target.rows(lower, upper, limit) if t.count else [])


def drill(sides: Sides, lower: Key | None, upper: Key | None, sums: tuple[Summary, Summary],
          into: Differences, options: WalkOptions, depth: int = 0) -> None:
    """Find the differing keys of a range whose summaries ``sums`` (source, target) differ."""
    room = options.max_keys - len(into)
    if room <= 0:
        return
    s, t = sums
    if s.count == 0 or t.count == 0:  # all of one side's keys differ: no need to split
        one_side = Differences()
        compare_rows(*sides.rows(lower, upper, sums, room), one_side)
        into.missing.extend(one_side.missing[:room])
        into.extra.extend(one_side.extra[:room])
        return
    if max(s.count, t.count) <= options.leaf_rows or depth >= MAX_DEPTH:
        compare_rows(*sides.rows(lower, upper, sums), into)
        return
    larger = sides.source if s.count >= t.count else sides.target
    step = -(-max(s.count, t.count) // options.fanout)
    bounds = larger.split_points(lower, upper, step, options.fanout - 1)
    if not bounds:  # the rows went away meanwhile
        compare_rows(*sides.rows(lower, upper, sums), into)
        return
    edges = [lower, *bounds, upper]
    for i, bucket in enumerate(sides.summaries(lower, bounds, upper)):
        if bucket[0] != bucket[1]:
            drill(sides, edges[i], edges[i + 1], bucket, into, options, depth + 1)


def walk(sides: Sides, options: WalkOptions, sleep: Callable[[float], None] = time.sleep
         ) -> tuple[Differences, WalkStats]:
    """Compare a whole table, range by range along the source's keys."""
    differences, stats = Differences(), WalkStats()
    lower: Key | None = None
    while True:
        upper = sides.source.boundary(lower, options.range_rows - 1)
        ((s, t),) = sides.summaries(lower, (), upper)
        stats.ranges += 1
        stats.source_rows += s.count
        stats.target_rows += t.count
        if s != t:
            stats.differing_ranges += 1
            drill(sides, lower, upper, (s, t), differences, options)
            if len(differences) >= options.max_keys:
                stats.truncated = True
                break
        if upper is None:
            break
        lower = upper
        if options.delay_s:
            sleep(options.delay_s)
            stats.delay_seconds += options.delay_s
    return differences, stats


def recheck(sides: Sides, keys: Sequence[Key]) -> Differences:
    """Compare just these keys again (after the source had time to be merged)."""
    result = Differences()
    for start in range(0, len(keys), LOOKUP_BATCH):
        batch = keys[start:start + LOOKUP_BATCH]
        s, t = sides.both(partial(sides.source.lookup, batch), partial(sides.target.lookup, batch))
        for key in batch:
            a, b = s.get(key), t.get(key)
            if a is not None and b is None:
                result.missing.append(key)
            elif a is None and b is not None:
                result.extra.append(key)
            elif a != b:
                result.changed.append(key)
    return result
