"""The captured tables while the worker runs: ``source.tables`` may hold patterns
(``shop.*``), so the tables it captures change with the catalog.

At a session's start, and then every ``source.rescan_interval_s``, :class:`TableFollower`
asks the source to read its catalog again (``Setup.rescan``: the source follows at once,
PostgreSQL's publication too) and, for what changed, records it in Redis (``captured``:
what ``dblog status`` shows), logs it and tells the telemetry. A table that *joined*
capture while capture ran (created, renamed into a pattern, matched by a configuration
reloaded, created again after a drop) may hold rows the output does not have: on
PostgreSQL, every row written before it joined the publication; on MySQL, the rows it had
before it was renamed into a pattern. With ``source.dump_new_tables`` a table dump of it is
queued (once: its client token is the table's and the time it joined); without, the
status says it needs one. A table that left capture (dropped, renamed out) is forgotten:
its landed segments stay, and a dump of it fails with the reason.

The tables found at the very first start (no checkpoint yet, or no record of a previous
run) did not join: they are what capture starts with, dumped when the user says so.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any

from dblog_worker.config import SourceConfig
from dblog_worker.control.store import StateStore
from dblog_worker.dump.requests import (
    DEFAULT_CHUNK_SIZE,
    DumpKind,
    DumpRequest,
    Priority,
    RequestState,
)
from dblog_worker.errors import RequestRejected
from dblog_worker.source import Source
from dblog_worker.table_patterns import Rescan, Selection
from dblog_worker.telemetry import Telemetry

log = logging.getLogger(__name__)


def new_table_token(table: str, since: float) -> str:
    """The client token of the dump of a table that joined capture at ``since``."""
    digest = hashlib.sha256(table.encode()).hexdigest()[:16]
    return f"new-table:{digest}:{since:.6f}"


def needs_dump(table: str, entry: Mapping[str, Any], dumped: Mapping[str, float]) -> bool:
    """Whether a recorded table still needs a dump: it joined while capture ran and no
    table dump of it completed that was requested after (``dumped``: table -> when the
    latest completed unfiltered dump of it was requested, :func:`dumped_since`)."""
    since = entry.get("since")
    return (bool(entry.get("joined")) and isinstance(since, (int, float))
            and dumped.get(table, 0.0) < since)


class TableFollower:
    """The session's view of the captured tables: follows the catalog, records, dumps."""

    def __init__(self, state: StateStore, source: Source, config: SourceConfig,
                 telemetry: Telemetry) -> None:
        self._state = state
        self._source = source
        self._config = config
        self._telemetry = telemetry
        self.last_look = 0.0
        self._excluded: dict[str, str] = {}

    def start(self, first: bool) -> None:
        """At the session's start (the source prepared): the selection against the record
        of the previous run. ``first``: capture begins now (no checkpoint before)."""
        selection = self._source.selection()
        recorded = self._state.captured()
        now = time.time()
        if first or not recorded:
            entries = {t: self._entry(t, selection, now, joined=False)
                       for t in selection.existing}
            self._state.save_captured(entries, [t for t in recorded if t not in entries],
                                      selection.excluded)
            log.info("capturing %d table(s): %s", len(entries), ", ".join(entries) or "none")
        else:
            joined = tuple(t for t in selection.existing if t not in recorded)
            left = tuple(t for t in recorded if t not in selection.existing)
            self._changed(Rescan(selection, joined, left), now)
        self._publish(selection)
        self.last_look = time.monotonic()

    def due(self, now: float) -> bool:
        return now - self.last_look >= self._config.rescan_interval_s

    def look(self, now: float) -> None:
        """Read the catalog again; record, log, dump what changed."""
        self.last_look = now
        found = self._source.rescan()
        if found.added or found.removed or found.selection.excluded != self._excluded:
            self._changed(found, time.time())
            self._publish(found.selection)

    def _entry(self, table: str, selection: Selection, since: float, *, joined: bool,
               dump: str = "") -> dict[str, Any]:
        return {"why": selection.captured.get(table, ""), "since": since, "joined": joined,
                "dump": dump}

    def _changed(self, found: Rescan, now: float) -> None:
        entries = {}
        for table in found.added:
            dump = self._dump(table, now) if self._config.dump_new_tables else ""
            entries[table] = self._entry(table, found.selection, now, joined=True, dump=dump)
            log.warning("table %s joined capture (%s); %s", table,
                        found.selection.captured.get(table, ""),
                        f"dump {dump} reads the rows it had" if dump else
                        "rows it had before are not in the output: dump it (dblog dump "
                        f"--table {table}), or set source.dump_new_tables = true")
        for table in found.removed:
            log.warning("table %s left capture (dropped, or renamed out of source.tables): "
                        "its landed segments stay", table)
        self._state.save_captured(entries, found.removed, found.selection.excluded)
        if found.added or found.removed:
            self._telemetry.tables_changed(found.added, found.removed)

    def _dump(self, table: str, since: float) -> str:
        """Queue a table dump of a table that joined capture; its id ('' if refused). Normal
        priority: downstream the table lacks its earlier rows until the dump ends, and a
        table that joins is mostly new and small; a backfill in the background does not
        hold it back, and an urgent repair goes first."""
        try:
            request = self._state.create_request(
                DumpKind.TABLES, [table], chunk_size=DEFAULT_CHUNK_SIZE, delay_ms=0,
                client_token=new_table_token(table, since), priority=Priority.NORMAL)
        except RequestRejected as exc:
            log.warning("the dump of %s, which joined capture, was refused: %s", table, exc)
            return ""
        return request.id

    def _publish(self, selection: Selection) -> None:
        self._excluded = dict(selection.excluded)
        self._telemetry.tables(selection.to_json())


def status_lines(captured: Mapping[str, Mapping[str, Any]], excluded: Mapping[str, str],
                 dumped: Mapping[str, float], most: int = 50) -> list[str]:
    """``dblog status``'s lines on the tables: each captured one with why and since when
    (and whether it needs a dump), each left out with why."""
    lines = [f"tables: {len(captured)} captured, {len(excluded)} left out by the patterns"]
    for table, entry in list(captured.items())[:most]:
        if "malformed" in entry:
            lines.append(f"  {table}: malformed record {entry['malformed']!r}")
            continue
        since = entry.get("since")
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(since)) \
            if isinstance(since, (int, float)) else "?"
        note = "captured since capture began" if not entry.get("joined") else \
            f"joined capture {when}"
        if needs_dump(table, entry, dumped):
            note += (f"; dump {entry['dump']} reads the rows it had (not completed yet)"
                     if entry.get("dump") else "; NEEDS A DUMP: rows it had before are not "
                     f"in the output (dblog dump --table {table})")
        lines.append(f"  {table}: {entry.get('why', '')}; {note}")
    if len(captured) > most:
        lines.append(f"  ... and {len(captured) - most} more (--json lists them all)")
    for table, why in list(excluded.items())[:most]:
        lines.append(f"  left out {table}: {why}")
    if len(excluded) > most:
        lines.append(f"  ... and {len(excluded) - most} more left out")
    return lines


def dumped_since(requests: Sequence[object]) -> dict[str, float]:
    """For each table, when the latest completed unfiltered dump of it was requested."""
    found: dict[str, float] = {}
    for request in requests:
        if not isinstance(request, DumpRequest) or request.state is not RequestState.COMPLETED:
            continue
        if request.kind is DumpKind.KEYS or request.row_filter is not None:
            continue
        for table in request.tables:
            found[table] = max(found.get(table, 0.0), float(request.created_at))
    return found
