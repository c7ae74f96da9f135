"""Position: the ordering key of every output event.

A position is three unsigned 64-bit numbers compared as numbers:

* PostgreSQL: (commit LSN of the transaction, index of the event in the transaction, 0)
* MySQL/MariaDB: (binlog file number, event position, row index in the event)
* a dump row: the high watermark's position with ``sub`` raised by 1 + its index
  among the surviving chunk rows (:meth:`Position.dump_row`). The high watermark
  is a one-row transaction, so nothing else in the log can sit at those positions.
  MariaDB's position watermarks (:mod:`dblog_worker.mysql.snapshot`) sit at the end
  of a transaction, with a ``sub`` of their own far above any event's there.

On the wire (landing output, Redis) a position is 48 lowercase hex digits, so
that sorting the strings sorts the numbers in any engine and any collation.
"""

from __future__ import annotations

from typing import NamedTuple

_MAX = (1 << 64) - 1
ENCODED_LENGTH = 48


class Position(NamedTuple):
    """Compared as a tuple of numbers. Built unchecked on the hot path; :meth:`of` checks."""

    major: int
    minor: int
    sub: int = 0

    @classmethod
    def of(cls, major: int, minor: int, sub: int = 0) -> Position:
        for part in (major, minor, sub):
            if not 0 <= part <= _MAX:
                raise ValueError(f"position part {part} is outside 0..2**64-1")
        return cls(major, minor, sub)

    def encode(self) -> str:
        return f"{self.major:016x}{self.minor:016x}{self.sub:016x}"

    @classmethod
    def decode(cls, text: str) -> Position:
        if len(text) != ENCODED_LENGTH:
            raise ValueError(f"a position is {ENCODED_LENGTH} hex digits, got {text!r}")
        try:
            return cls(int(text[0:16], 16), int(text[16:32], 16), int(text[32:48], 16))
        except ValueError:
            raise ValueError(f"a position is {ENCODED_LENGTH} hex digits, got {text!r}") from None

    def dump_row(self, index: int) -> Position:
        """Position of the ``index``-th surviving chunk row emitted at this high watermark."""
        return Position(self.major, self.minor, self.sub + 1 + index)


ZERO = Position(0, 0, 0)
