"""The feed's log lines: how many log events were read, per table, with a few samples.

Polls come far more often than people read; a line sums the polls since the last one,
at most every :data:`LOG_FEED_INTERVAL_S`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from dblog_worker.events import ChangeEvent, LogItem
from dblog_worker.position import Position

LOG_FEED_INTERVAL_S = 0.25  # at most four log lines a second; counts add up in between
LOG_SAMPLES = 3  # sample events per log line
KEY_TEXT_MAX = 80


class LogLines:
    def __init__(self, describe_position: Callable[[Position], str]) -> None:
        self._describe_position = describe_position
        self._read: dict[str, int] = {}  # log events read per table, at the last line
        self._fed_at = 0.0

    def due(self, now: float) -> bool:
        return now - self._fed_at >= LOG_FEED_INTERVAL_S

    def counts(self, totals: Mapping[str, int]) -> dict[str, int]:
        """The log events read per table since the last line, from the running totals."""
        return {t: n - self._read.get(t, 0) for t, n in totals.items()
                if n != self._read.get(t, 0)}

    def line(self, now: float, totals: Mapping[str, int], counts: Mapping[str, int],
             items: Sequence[LogItem], position: str | None) -> dict[str, Any]:
        """The fields of a line for ``counts``; the next line counts from ``totals``."""
        self._fed_at = now
        self._read = dict(totals)
        samples = []
        for item in reversed(items):
            if type(item) is ChangeEvent:
                samples.append({
                    "table": item.table, "op": item.op.value,
                    "key": _short(item.key), "position": self._describe_position(item.position),
                })
                if len(samples) == LOG_SAMPLES:
                    break
        samples.reverse()
        return {"events": sum(counts.values()), "tables": counts, "samples": samples,
                "position": position}

    def restart(self) -> None:
        """A new session counts from 0 in a new output buffer."""
        self._read = {}


def _short(key: str | None) -> str | None:
    if key is None or len(key) <= KEY_TEXT_MAX:
        return key
    return key[:KEY_TEXT_MAX - 1] + "…"
