"""How people read a log position: the text the feed shows for it."""

from __future__ import annotations

from collections.abc import Callable

from dblog_worker.dialect import dialect
from dblog_worker.position import Position


def describe_position(kind: str) -> Callable[[Position], str]:
    """How people read a log position of this source kind."""
    return dialect(kind).describe_position
