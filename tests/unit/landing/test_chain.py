"""Which segment files readers use once compaction has run (landing/chain.py): table-driven,
including the races of two compactions and a listing made in the middle of one."""

from __future__ import annotations

import pytest

from dblog_worker.landing.chain import Candidate, resolve


def originals(lo: int, hi: int, mtime: float = 1.0) -> list[Candidate]:
    return [Candidate(s, s, f"s{s:03d}", mtime + s / 1000) for s in range(lo, hi + 1)]


def spans(files: list[Candidate]) -> list[tuple[int, int]]:
    return [(c.lo, c.hi) for c in resolve(files).active]


def test_originals_alone_are_the_chain() -> None:
    assert spans(originals(1, 4)) == [(1, 1), (2, 2), (3, 3), (4, 4)]


def test_a_compacted_run_replaces_what_it_covers() -> None:
    files = [*originals(1, 6), Candidate(2, 4, "c2-4", 10.0)]
    result = resolve(files)
    assert [(c.lo, c.hi) for c in result.active] == [(1, 1), (2, 4), (5, 5), (6, 6)]
    assert sorted(c.lo for c in result.superseded) == [2, 3, 4]
    assert all(cover.name == "c2-4" for cover in result.superseded.values())


def test_a_wider_compaction_replaces_a_narrower_one_and_its_originals() -> None:
    files = [*originals(1, 6), Candidate(1, 3, "c1-3", 10.0), Candidate(1, 6, "c1-6", 20.0)]
    result = resolve(files)
    assert [c.name for c in result.active] == ["c1-6"]
    assert {c.name for c in result.superseded} == {"s001", "s002", "s003", "s004", "s005",
                                                   "s006", "c1-3"}
    assert {cover.name for cover in result.superseded.values()} == {"c1-6"}


def test_of_two_partly_overlapping_compactions_the_first_wins() -> None:
    first, second = Candidate(1, 4, "a", 10.0), Candidate(3, 6, "b", 11.0)
    result = resolve([*originals(1, 6), second, first])
    assert [(c.lo, c.hi) for c in result.active] == [(1, 4), (5, 5), (6, 6)]
    assert result.losers == [second]


def test_the_loser_stays_a_loser_once_the_originals_are_gone() -> None:
    """The winner's originals deleted (a grace period later): the other still loses,
    and nothing is missing."""
    first, second = Candidate(1, 4, "a", 10.0), Candidate(3, 6, "b", 11.0)
    files = [first, second, *originals(5, 6)]
    assert spans(files) == [(1, 4), (5, 5), (6, 6)]


def test_the_same_run_twice_keeps_the_first() -> None:
    one, two = Candidate(1, 3, "x", 10.0), Candidate(1, 3, "y", 10.0)
    result = resolve([*originals(1, 3), two, one])
    assert [c.name for c in result.active] == ["x"]
    assert result.losers == [two]


def test_a_listing_without_the_originals_of_a_compaction_is_whole() -> None:
    """Retention removed a prefix: the chain starts later, without a hole."""
    assert spans([Candidate(3, 5, "c", 10.0), *originals(6, 7)]) == [(3, 5), (6, 6), (7, 7)]


@pytest.mark.parametrize("files", [
    [*originals(1, 2), *originals(4, 5)],
    [Candidate(1, 3, "c", 10.0), *originals(5, 6)],
])
def test_a_hole_is_refused(files: list[Candidate]) -> None:
    with pytest.raises(ValueError, match="are missing"):
        resolve(files, "pg1/public.t")


def test_a_file_that_covers_nothing_is_refused() -> None:
    with pytest.raises(ValueError, match="covers no sequence number"):
        resolve([Candidate(3, 2, "bad")])
