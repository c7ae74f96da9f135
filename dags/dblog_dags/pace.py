"""The pace of a backfill: one delay between chunks during busy hours, another outside them.

``busy_hours`` is ``"HH-HH"`` (``"08-18"``: from 08:00 up to 18:00) in a time zone, or
empty for none; ``"22-06"`` wraps past midnight, ``"00-24"`` is all day. The backfill's
``pace`` task (:class:`DumpPaceSensor`) applies :meth:`Pace.next_delay` to the running dump
every few minutes: it moves the delay to the value of the hour, but leaves a delay that
someone set by hand (``dblog set``, the runbook *slow down or pause a dump*) alone. Between
two settings it waits deferred, on the dump's trigger, which wakes it when the dump ends:
the run ends with its dump, not minutes after.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo

from airflow.sdk import BaseSensorOperator
from airflow.sdk.exceptions import AirflowException

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

    Every ``poke_interval`` seconds (300 by default) it reads the request and, when
    :meth:`Pace.next_delay` says so, sets its delay (``dblog set --delay-ms``). The pace
    comes from the run's params ``delay_ms``, ``busy_delay_ms`` and ``busy_hours``.
    In between it defers to :class:`~dblog_airflow.triggers.dump.DblogDumpTrigger` (with
    ``wake_after``), which polls the dump every ``poll_interval`` seconds: the task ends
    as soon as the dump does. With ``deferrable=False`` it is a classic sensor in
    ``reschedule`` mode, which notices the end only at its next poke.

    :param request_id: The dump request (templated), e.g. the submit task's XCom.
    :param dblog_conn_id: The ``dblog`` connection (templated).
    :param timezone: The time zone of ``busy_hours`` (an IANA name, e.g. Europe/Paris).
    :param poll_interval: Seconds between two reads of the request while deferred.
    :param deferrable: Wait in the triggerer between two settings (default).
    """

    template_fields: Sequence[str] = ("request_id", "dblog_conn_id")

    def __init__(self, *, request_id: str, dblog_conn_id: str, timezone: str = "UTC",
                 poll_interval: float = 10.0, deferrable: bool = True,
                 **kwargs: Any) -> None:
        kwargs.setdefault("mode", "reschedule")
        kwargs.setdefault("poke_interval", 300)
        super().__init__(**kwargs)
        self.request_id = request_id
        self.dblog_conn_id = dblog_conn_id
        self.zone = ZoneInfo(timezone)
        self.poll_interval = float(poll_interval)
        self.deferrable = deferrable

    def execute(self, context: Context) -> Any:
        if not self.deferrable:
            return super().execute(context)
        if not self.poke(context):
            self._defer()
        return None

    def execute_complete(self, context: Context, event: dict[str, Any] | None = None) -> None:
        """The trigger fired: the dump ended (nothing more to pace), or the next setting is
        due (set it, and wait again)."""
        status = (event or {}).get("status")
        if status == "running":
            if not self.poke(context):
                self._defer()
            return
        if status == "error":
            raise AirflowException((event or {}).get("message") or
                                   f"the trigger following {self.request_id} failed")
        self.log.info("%s: nothing more to pace", (event or {}).get("message")
                      or f"{self.request_id} ended")

    def _defer(self) -> None:
        from dblog_airflow.triggers.dump import DblogDumpTrigger

        self.defer(
            trigger=DblogDumpTrigger(request_id=self.request_id,
                                     dblog_conn_id=self.dblog_conn_id,
                                     poll_interval=self.poll_interval,
                                     wake_after=float(self.poke_interval), log_progress=False),
            method_name="execute_complete",
            timeout=timedelta(seconds=self.timeout),
        )

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
