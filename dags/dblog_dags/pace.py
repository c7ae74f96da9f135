"""The pace of a backfill: one delay between chunks during busy hours, another outside them.

``busy_hours`` is ``"HH-HH"`` (``"08-18"``: from 08:00 up to 18:00) in a time zone, or
empty for none; ``"22-06"`` wraps past midnight, ``"00-24"`` is all day. The backfill's
``pace`` task (:class:`DumpPaceSensor`) applies :meth:`Pace.next_delay` to the running dump
every few minutes: it moves the delay to the value of the hour, but leaves a delay that
someone set by hand (``dblog set``, the runbook *slow down or pause a dump*) alone.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo

from airflow.sdk import BaseSensorOperator

from dblog_worker.errors import RequestRejected, StateUnavailable

if TYPE_CHECKING:
    from airflow.sdk import Context

__all__ = ["BUSY_HOURS_PATTERN", "DumpPaceSensor", "Pace", "parse_busy_hours"]

BUSY_HOURS_PATTERN = r"^\s*(([01]\d|2[0-3])-([01]\d|2[0-4]))?\s*$"


def parse_busy_hours(text: str | None) -> tuple[int, int] | None:
    """``"08-18"`` -> ``(8, 18)``; empty -> None (no busy hours)."""
    match = re.fullmatch(BUSY_HOURS_PATTERN, text or "")
    if match is None:
        raise ValueError(f"busy hours {text!r} are not HH-HH, e.g. 08-18 (or empty for none)")
    if match.group(1) is None:
        return None
    start, end = int(match.group(2)), int(match.group(3))
    if start == end:
        raise ValueError(f"busy hours {text!r} start and end at the same hour")
    return start, end


@dataclass(frozen=True)
class Pace:
    """The delay of each hour: ``busy_delay_ms`` during ``busy_hours``, else ``delay_ms``."""

    delay_ms: int
    busy_delay_ms: int
    busy_hours: tuple[int, int] | None

    def busy(self, now: datetime) -> bool:
        if self.busy_hours is None:
            return False
        start, end = self.busy_hours
        if start < end:
            return start <= now.hour < end
        return now.hour >= start or now.hour < end  # e.g. 22-06

    def delay_at(self, now: datetime) -> int:
        return self.busy_delay_ms if self.busy(now) else self.delay_ms

    def next_delay(self, current_ms: int, now: datetime) -> int | None:
        """The delay to set on a running dump whose delay is ``current_ms``, or None to
        leave it: it is already right, or it is neither of the two values (set by hand)."""
        if self.busy_hours is None:
            return None  # one delay all day: the submit set it
        wanted = self.delay_at(now)
        if current_ms == wanted or current_ms not in (self.delay_ms, self.busy_delay_ms):
            return None
        return wanted


class DumpPaceSensor(BaseSensorOperator):
    """Keep a running dump at the delay of the hour until it ends (then succeed).

    Each poke (``mode="reschedule"``: no worker slot is held in between) reads the request
    and, when :meth:`Pace.next_delay` says so, sets its delay (``dblog set --delay-ms``).
    The pace comes from the run's params ``delay_ms``, ``busy_delay_ms`` and ``busy_hours``.

    :param request_id: The dump request (templated), e.g. the submit task's XCom.
    :param dblog_conn_id: The ``dblog`` connection (templated).
    :param timezone: The time zone of ``busy_hours`` (an IANA name, e.g. Europe/Paris).
    """

    template_fields: Sequence[str] = ("request_id", "dblog_conn_id")

    def __init__(self, *, request_id: str, dblog_conn_id: str, timezone: str = "UTC",
                 **kwargs: Any) -> None:
        kwargs.setdefault("mode", "reschedule")
        kwargs.setdefault("poke_interval", 300)
        super().__init__(**kwargs)
        self.request_id = request_id
        self.dblog_conn_id = dblog_conn_id
        self.zone = ZoneInfo(timezone)

    def poke(self, context: Context) -> bool:
        from dblog_airflow.hooks.dblog import DblogHook

        form = context["params"]
        pace = Pace(int(form["delay_ms"]), int(form["busy_delay_ms"]),
                    parse_busy_hours(form["busy_hours"]))
        hook = DblogHook(self.dblog_conn_id)
        try:
            request = hook.get_request(self.request_id)
            if request.state.terminal:
                self.log.info("%s is %s: nothing more to pace", request.id, request.state.value)
                return True
            now = datetime.now(self.zone)
            delay = pace.next_delay(request.delay_ms, now)
            if delay is not None:
                hook.set_knobs(request.id, delay_ms=delay)
                self.log.info("%s: %s at %s: delay %d ms -> %d ms", request.id,
                              "busy hours" if pace.busy(now) else "quiet hours",
                              now.strftime("%H:%M %Z"), request.delay_ms, delay)
            elif request.delay_ms not in (pace.delay_ms, pace.busy_delay_ms):
                self.log.info("%s: delay %d ms was set by hand; left as it is", request.id,
                              request.delay_ms)
        except StateUnavailable as exc:  # Redis away for a while: the next poke tries again
            self.log.warning("%s", exc)
        except RequestRejected as exc:  # the dump ended between the read and the change
            self.log.info("%s", exc)
        finally:
            hook.close()
        return False
