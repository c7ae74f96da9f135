"""The feed: a bounded, ordered ring of what happened, read by sequence number."""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Callable
from typing import Any

FEED_SIZE = 2000


class Feed:
    """Entries numbered from 1; a reader asks for what came after the last one it saw.

    Each entry is ``{"seq", "ts", "type", **fields}``; the oldest fall out of the ring.
    """

    def __init__(self, clock: Callable[[], float], size: int = FEED_SIZE) -> None:
        self._clock = clock
        self._seq = 0
        self._entries: deque[dict[str, Any]] = deque(maxlen=size)

    def add(self, entry_type: str, **fields: Any) -> None:
        self._seq += 1
        self._entries.append({"seq": self._seq, "ts": round(self._clock(), 3),
                              "type": entry_type, **fields})

    def after(self, after: int, limit: int) -> dict[str, Any]:
        """Entries with ``seq > after``, oldest first, at most ``limit``; ``next`` is the
        ``after`` of the next call (entries pushed out of the ring meanwhile are lost)."""
        if not self._entries or after >= self._seq:
            return {"next": self._seq, "events": []}
        first = self._entries[0]["seq"]
        start = max(0, after + 1 - first)
        events = list(itertools.islice(self._entries, start, start + max(0, limit)))
        return {"next": events[-1]["seq"] if events else after, "events": events}
