"""The watermark windows: those open now, and what the closed ones did to their chunks."""

from __future__ import annotations

from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass

from dblog_worker.capture.window import WindowClosed
from dblog_worker.events import Encoded
from dblog_worker.telemetry.exposition import MetricWriter, by_table


@dataclass(slots=True)
class OpenWindow:
    table: str
    dump_id: str
    low: str
    selected: int
    opened_at: float
    chunk: Future[Encoded] | None  # a table's first chunk: its first key starts the range


class Windows:
    def __init__(self) -> None:
        self.open: deque[OpenWindow] = deque()  # oldest first: windows close in log order
        self._opened: dict[str, int] = {}
        self._closed: dict[str, int] = {}
        self._selected: dict[str, int] = {}
        self._dropped: dict[str, int] = {}
        self._emitted: dict[str, int] = {}

    def opened(self, window: OpenWindow) -> None:
        self.open.append(window)
        self._opened[window.table] = self._opened.get(window.table, 0) + 1

    def closed(self, closed: WindowClosed) -> OpenWindow | None:
        """The oldest open window closed; returns it, or None if none was known open."""
        table = closed.table
        window = self.open.popleft() if self.open else None
        self._closed[table] = self._closed.get(table, 0) + 1
        self._selected[table] = self._selected.get(table, 0) + closed.selected
        self._dropped[table] = self._dropped.get(table, 0) + closed.dropped
        self._emitted[table] = self._emitted.get(table, 0) + len(closed.survivors)
        return window

    def clear(self) -> None:
        """The session ended: its open windows never close."""
        self.open.clear()

    def metrics(self, out: MetricWriter) -> None:
        out.metric("dblog_windows_opened_total", "counter",
                   "Watermark windows opened (LW written, chunk selected, HW written).",
                   by_table(self._opened))
        out.metric("dblog_windows_closed_total", "counter",
                   "Watermark windows closed (HW read back from the log).",
                   by_table(self._closed))
        out.metric("dblog_windows_open", "gauge", "Windows open now.",
                   [({}, len(self.open))])
        out.metric("dblog_chunk_rows_selected_total", "counter",
                   "Rows selected by the chunks of closed windows.",
                   by_table(self._selected))
        out.metric("dblog_chunk_rows_dropped_total", "counter",
                   "Chunk rows dropped because a log event in the window had their key.",
                   by_table(self._dropped))
        out.metric("dblog_chunk_rows_emitted_total", "counter",
                   "Chunk rows released to the output at their high watermark.",
                   by_table(self._emitted))
