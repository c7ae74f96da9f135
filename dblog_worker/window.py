"""The watermark window: the reconciliation rule of DBLog (paper, Algorithm 1, steps 5-7).

Pure: no I/O, no clock. The worker feeds it every log event and every watermark
it reads, in log order; the rule is

* every log event is emitted at once, in or out of a window (the caller does that);
* between the low watermark (LW) and the high watermark (HW), a log event of the
  window's table removes from the chunk the row with the same key (a key change
  arrives as a delete of the old key and a create of the new one, so it touches
  both; a truncate removes every row);
* at HW, the surviving chunk rows are emitted, in chunk order, at HW's position
  plus their index among the survivors.

A change logged before LW that the chunk SELECT did not see (PostgreSQL makes a
transaction visible only after logging its commit) arrives right after LW as
:class:`Unseen` and counts as inside the window; when such changes were too many to
keep, the window is *read again*: no row survives, and :attr:`WindowClosed.retry` tells
the dump not to count the chunk as read.

A foreign-key action event (:mod:`dblog_worker.foreign_keys`: what a cascade the log does
not carry did to child rows) names no key but a predicate: between LW and HW, it removes
from the chunk every row it deletes, and writes into every row it sets the new values
(the chunk read the row before the cascade, and no event carries the row after it); a row
read after the cascade no longer matches. The reconciler reads the chunk's row images only
when such an event comes.

A window that reads a pruning dump's upper bound (``bound``) reads no row: it is read again
if a change of its table logged before LW was not seen by its SELECT, since the prune
counts on every row older than LW being visible to it.

The reconciler sees only the chunk's keys: it answers which rows survive
(:class:`WindowClosed`); the rows themselves travel as columns (:class:`DumpRows`).

A window moves through two states and closes::

    open() ──► AWAITING_LOW ──LW──► IN_WINDOW ──HW──► closed (WindowClosed)

Tokens are ``<run id>.<window number>.<lw|hw>``. A token of another run (a replay
after a crash, another worker on the same database, a hand-written value) is stale
and ignored. A token of this run that does not fit the sequence above -- HW before
LW, LW twice, a token of no open window -- is a :class:`ProtocolError`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum

from dblog_worker.errors import ProtocolError
from dblog_worker.events import EVERY_TABLE, ChangeEvent, Op, Unseen, Watermark
from dblog_worker.foreign_keys import Action, apply_actions, parse_actions
from dblog_worker.position import Position


def is_low_watermark(token: str) -> bool:
    """Whether a token of :meth:`Reconciler.next_tokens` is a window's low watermark."""
    return token.endswith(".lw")


class WindowState(Enum):
    AWAITING_LOW = "awaiting low watermark"
    IN_WINDOW = "in window"


@dataclass(frozen=True, slots=True)
class WindowTokens:
    low: str
    high: str


@dataclass(frozen=True, slots=True)
class WindowClosed:
    """What a window decided: which chunk rows survive, and where they go in the output."""

    table: str
    dump_id: str
    high: Watermark
    survivors: Sequence[int]  # indices into the chunk, in chunk order
    selected: int
    schema_version: int
    retry: bool = False  # the chunk is to be read again: nothing of it survives
    low: Position | None = None  # where LW was in the log
    # surviving rows whose image a foreign-key action event changed: chunk index → image
    replaced: Mapping[int, str] = field(default_factory=dict)

    @property
    def dropped(self) -> int:
        return self.selected - len(self.survivors)


class _OpenWindow:
    __slots__ = ("actions", "bound", "dump_id", "keys", "low", "retry", "rows",
                 "schema_version", "state", "table", "tokens", "touched", "truncated")

    def __init__(
        self,
        table: str,
        tokens: WindowTokens,
        keys: Sequence[str],
        dump_id: str,
        schema_version: int,
        rows: Sequence[str],
        bound: bool,
    ) -> None:
        self.table = table
        self.tokens = tokens
        self.keys = keys  # unique: a primary key; read only if an event touched the table
        self.rows = rows  # the row images, in chunk order: read only for foreign-key events
        self.touched: set[str] = set()
        self.actions: list[list[Action]] = []  # foreign-key action events, in log order
        self.truncated = False
        self.retry = False
        self.bound = bound
        self.low: Position | None = None
        self.dump_id = dump_id
        self.schema_version = schema_version
        self.state = WindowState.AWAITING_LOW


class Reconciler:
    """Keeps the open windows of a worker run, oldest first, and applies the rule.

    Windows never overlap in the log: the worker writes a window's LW only after the
    previous HW has committed. So several may be open (their chunks read, their
    watermarks still on the way), but only the oldest can be between its LW and HW.
    """

    def __init__(self, run_id: str) -> None:
        if not run_id or "." in run_id:
            raise ValueError("run id must be non-empty and contain no '.'")
        self.run_id = run_id
        self._next_window = 1
        self._windows: deque[_OpenWindow] = deque()

    @property
    def open_windows(self) -> int:
        return len(self._windows)

    @property
    def watching(self) -> bool:
        """A window is between its LW and HW: log events may remove chunk rows."""
        return bool(self._windows) and self._windows[0].state is WindowState.IN_WINDOW

    @property
    def window_state(self) -> WindowState | None:
        return self._windows[0].state if self._windows else None

    def next_tokens(self) -> WindowTokens:
        """Tokens for the next window; write LW before the chunk SELECT, HW after."""
        number = self._next_window
        self._next_window += 1
        prefix = f"{self.run_id}.{number}"
        return WindowTokens(low=f"{prefix}.lw", high=f"{prefix}.hw")

    def open(
        self,
        table: str,
        tokens: WindowTokens,
        keys: Sequence[str],
        dump_id: str,
        schema_version: int,
        rows: Sequence[str] = (),
        bound: bool = False,
    ) -> None:
        """Register the keys (and row images) of the chunk selected between the two
        watermark writes; ``bound``: the window read a pruning dump's upper bound."""
        self._windows.append(_OpenWindow(table, tokens, keys, dump_id, schema_version, rows,
                                         bound))

    def on_change(self, event: ChangeEvent) -> None:
        """Step 6: a log event inside the window removes the chunk rows it touches."""
        if not self._windows:
            return
        window = self._windows[0]
        if window.state is not WindowState.IN_WINDOW or event.table != window.table:
            return
        if event.op is Op.TRUNCATE:
            window.truncated = True
        elif event.key is not None:
            window.touched.add(event.key)
        elif event.op is Op.FOREIGN_KEY and event.before and event.after:
            window.actions.append(parse_actions(event.before, event.after))

    def on_unseen(self, unseen: Unseen) -> None:
        """Changes logged before LW that the chunk SELECT did not see: inside the window."""
        if not self.watching:
            return
        window = self._windows[0]
        for table, key in unseen.changes:
            if table != window.table:
                continue
            if window.bound:
                window.retry = True
            if key is None:
                window.truncated = True
            else:
                window.touched.add(key)
        if window.table in unseen.overflow or EVERY_TABLE in unseen.overflow:
            window.retry = True

    def on_watermark(self, watermark: Watermark) -> WindowClosed | None:
        """Steps 5 and 7: LW opens the window, HW closes it and releases the survivors."""
        token = watermark.token
        if token.split(".", 1)[0] != self.run_id:
            return None
        if not self._windows:
            raise ProtocolError(f"watermark {token} of this run arrived, but no window is open")
        window = self._windows[0]
        if token == window.tokens.low:
            if window.state is WindowState.IN_WINDOW:
                raise ProtocolError(f"low watermark {token} arrived twice")
            window.state = WindowState.IN_WINDOW
            window.low = watermark.position
            return None
        if token == window.tokens.high:
            if window.state is not WindowState.IN_WINDOW:
                raise ProtocolError(f"high watermark {token} arrived before its low watermark")
            self._windows.popleft()
            return _close(window, watermark)
        if any(token in (later.tokens.low, later.tokens.high) for later in self._windows):
            raise ProtocolError(
                f"watermark {token} arrived before window {window.tokens.low} closed: "
                "windows overlap in the log"
            )
        raise ProtocolError(
            f"watermark {token} of this run is not one of the open window "
            f"({window.tokens.low}, {window.tokens.high})"
        )


def _close(window: _OpenWindow, high: Watermark) -> WindowClosed:
    keys, touched = window.keys, window.touched
    survivors: Sequence[int]
    replaced: dict[int, str] = {}
    if window.truncated or window.retry:
        survivors = ()
    elif not touched:
        survivors = range(len(keys))
    else:
        survivors = [i for i, key in enumerate(keys) if key not in touched]
    if window.actions and survivors:
        survivors, replaced = _cascaded(window, survivors)
    return WindowClosed(
        table=window.table,
        dump_id=window.dump_id,
        high=high,
        survivors=survivors,
        selected=len(keys),
        schema_version=window.schema_version,
        retry=window.retry,
        low=window.low,
        replaced=replaced,
    )


def _cascaded(window: _OpenWindow, survivors: Sequence[int]
              ) -> tuple[list[int], dict[int, str]]:
    """The survivors once the window's foreign-key action events applied to their images:
    those deleted are gone, those changed carry their new image."""
    kept, replaced = [], {}
    rows = window.rows
    for index in survivors:
        row = rows[index]
        after = apply_actions(row, window.actions)
        if after is None:
            continue
        kept.append(index)
        if after is not row:
            replaced[index] = after
    return kept, replaced
