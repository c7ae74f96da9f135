"""The landing zone's files as last scanned (``dblog_worker.lifecycle.landing_status``):
files, bytes and the oldest position not merged by every target, per table."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from dblog_worker.telemetry.exposition import MetricWriter


class LandingFiles:
    def __init__(self) -> None:
        self.scanned_at: float | None = None
        self.rows: list[dict[str, Any]] = []

    def scanned(self, at: float, rows: Sequence[Mapping[str, Any]]) -> None:
        self.scanned_at, self.rows = at, [dict(r) for r in rows]

    def metrics(self, out: MetricWriter) -> None:
        if self.scanned_at is None:
            return
        out.metric("dblog_landing_scan_time_seconds", "gauge",
                   "When the landing zone's files were last listed (seconds since the epoch).",
                   [({}, self.scanned_at)], unit="seconds")
        rows = [r for r in self.rows if not r.get("error")]
        out.metric("dblog_landing_files", "gauge",
                   "Segment files of the table in the landing zone (compacted runs and the "
                   "files they replace, until removed, included).",
                   [({"table": r["table"]}, r["files"]) for r in rows])
        out.metric("dblog_landing_bytes", "gauge", "Bytes of the table's segment files.",
                   [({"table": r["table"]}, r["bytes"]) for r in rows], unit="bytes")
        merged = [r for r in rows if r.get("merged_segment") is not None]
        out.metric("dblog_landing_merged_segment", "gauge",
                   "The segment every target has merged the table up to.",
                   [({"table": r["table"]}, r["merged_segment"]) for r in merged])
        out.metric("dblog_landing_unmerged_age_seconds", "gauge",
                   "How long ago the oldest segment some target has not merged landed "
                   "(0: everything merged).",
                   [({"table": r["table"]}, r.get("oldest_unmerged_age_s") or 0.0)
                    for r in merged], unit="seconds")
        out.metric("dblog_landing_oldest_unmerged_info", "gauge",
                   "The first position some target has not merged, per table (value 1).",
                   [({"table": r["table"], "position": r["oldest_unmerged"]}, 1)
                    for r in merged if r.get("oldest_unmerged")])
