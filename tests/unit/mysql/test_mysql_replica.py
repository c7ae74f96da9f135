"""Whether a MariaDB read replica replicates the source: the GTIDs it applied in the
source's domains must be ones the source logged (:func:`foreign_gtids`)."""

from __future__ import annotations

import pytest

from dblog_worker.mysql.replica import foreign_gtids


@pytest.mark.parametrize(("applied", "state", "foreign"), [
    ("0-1-20", "0-1-20", []),
    ("0-1-18", "0-1-20", []),  # behind: MASTER_GTID_WAIT waits for it
    ("0-1-500", "0-1-20", ["0-1-500"]),  # ahead: another server 1, or RESET MASTER here
    ("0-2-7", "0-1-20", ["0-2-7"]),  # another primary's GTID in the source's domain
    ("0-2-7", "0-2-9,0-1-20", []),  # a former primary's, which this source logged too
    ("0-1-20,5-9-3", "0-1-20", []),  # another source's domain (multi-source): not ours
    ("", "0-1-20", []),
    ("0-1-3", "", []),  # the source logged nothing yet: nothing to compare
])
def test_gtids_the_source_never_logged(applied: str, state: str, foreign: list[str]) -> None:
    assert foreign_gtids(applied, state) == foreign
