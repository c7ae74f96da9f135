"""Helpers of the worker's unit tests: what production code has no use for."""

from __future__ import annotations

from collections.abc import Sequence

from dblog_worker.capture.output import OutputBuffer
from dblog_worker.capture.window import WindowClosed
from dblog_worker.events import ChangeEvent, Op, Origin


def dump_events(
    closed: WindowClosed, keys: Sequence[str], afters: Sequence[str]
) -> tuple[ChangeEvent, ...]:
    """The survivors as events, from the chunk's keys and row images (in chunk order)."""
    high = closed.high
    return tuple(
        ChangeEvent(
            table=closed.table,
            op=Op.READ,
            position=high.position.dump_row(index),
            key=keys[row],
            after=afters[row],
            before=None,
            origin=Origin.DUMP,
            commit_ts_us=high.commit_ts_us,
            schema_version=closed.schema_version,
            dump_id=closed.dump_id,
        )
        for index, row in enumerate(closed.survivors)
    )


def flush(buffer: OutputBuffer) -> int:
    """Write everything buffered, and wait for it."""
    buffer.submit()
    return buffer.wait()
