"""The landing zone's lifecycle settings, ``[landing.compaction]`` and
``[landing.retention]``: values the configuration reads and
:mod:`~dblog_worker.landing.maintenance` applies (no I/O, nothing heavy to import)."""

from __future__ import annotations

from dataclasses import dataclass

MIB = 1024 * 1024


@dataclass(frozen=True)
class CompactionPolicy:
    """``[landing.compaction]``: runs of segments under ``target_bytes`` each, at least
    ``min_age_s`` old, become one segment of about ``target_bytes``; what they replaced
    goes ``grace_s`` later."""

    target_bytes: int = 64 * MIB
    min_age_s: float = 600.0
    grace_s: float = 900.0
    min_segments: int = 2


@dataclass(frozen=True)
class RetentionPolicy:
    """``[landing.retention]``: segments every target merged, landed ``keep_s`` ago."""

    keep_s: float = 7 * 86400.0
