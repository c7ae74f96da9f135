"""DblogDumpTrigger: follow a dump request in the triggerer until it ends.

It polls the request in Redis every ``poll_interval`` seconds, logs the progress when it
changes (tables done, chunks, rows, rows/s since the trigger started, an ETA: for a
primary-key dump from the keys done, for a table dump with a numeric key from how fast the
chunks walk up to the table's upper bound) and why the dump waits when the worker says so
(a read replica behind, a table locked), and fires exactly one event::

    {"status": "completed" | "failed" | "cancelled" | "error",
     "request_id": "dump-3", "message": "...", "rows": 120000}

``failed`` carries the worker's error in ``message`` (also when the request's record in
Redis is malformed: the worker fails such a request; the message names the key and what is
wrong); ``error`` means the trigger could not follow the request (no such request, a
connection that needs a change). With ``wake_after``, it also fires ``{"status":
"running", ...}`` once that many seconds passed and the dump still runs (the backfill's
*pace* task wakes so to set the delay of the hour, and ends as soon as the dump does).
While Redis is
unreachable it logs a warning and keeps polling: the sensor's timeout bounds the wait.
It reads Redis with ``redis.asyncio`` in the triggerer's event loop (no thread).

When a user marks the deferred task failed or success, or clears it, the triggerer
(Airflow 3.3+) calls :meth:`DblogDumpTrigger.on_kill`: the dump is cancelled. A triggerer
that restarts, or hands the trigger to another, leaves it running.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from dblog_airflow.hooks.dblog import DEFAULT_CONN_ID, DblogHook
from dblog_worker.control.async_requests import AsyncRequests
from dblog_worker.control.commands import command_async
from dblog_worker.dump.requests import DumpKind, DumpRequest, RequestState, TableProgress
from dblog_worker.errors import CorruptRequest, DblogError, StateUnavailable

__all__ = ["DblogDumpTrigger", "Progress", "describe_progress", "dump_event"]


@dataclass(frozen=True, slots=True)
class Progress:
    """A dump's progress, summed over its tables (what the worker saved in Redis)."""

    tables_done: int = 0
    tables: int = 0
    chunks: int = 0
    rows: int = 0  # emitted to the landing zone
    keys_done: int = 0  # primary-key dumps: keys looked up so far
    keys: int = 0  # primary-key dumps: keys requested
    missing: int = 0  # primary-key dumps: keys the source does not have
    # Table dumps: the table being dumped, and its last dumped key and upper bound when the
    # key is one number (the chunks walk the key space upwards: that gives an ETA).
    table: str = ""
    key_at: float | None = None
    key_bound: float | None = None

    @classmethod
    def of(cls, request: DumpRequest, progress: Mapping[str, TableProgress]) -> Progress:
        parts = [progress.get(table) or TableProgress(table) for table in request.tables]
        current = next((p for p in parts if p.started and not p.done), None)
        return cls(
            tables_done=sum(1 for p in parts if p.done), tables=len(request.tables),
            chunks=sum(p.chunks for p in parts), rows=sum(p.rows for p in parts),
            keys_done=sum(p.next_key_index for p in parts),
            keys=request.key_count if request.kind is DumpKind.KEYS else 0,
            missing=sum(p.missing for p in parts),
            table=current.table if current else "",
            key_at=_number(current.last_key) if current else None,
            key_bound=_number(current.upper_bound) if current else None,
        )


def _number(key: list[str] | None) -> float | None:
    if key is None or len(key) != 1:
        return None
    try:
        return float(key[0])
    except ValueError:
        return None


def _table_eta(now: Progress, start: Progress, seconds: float) -> str:
    """The ETA of the table being dumped, from how fast its key advanced."""
    if (now.table != start.table or None in (now.key_at, start.key_at, now.key_bound)):
        return "; ETA unknown (the key is not a number, or the dump moved to another table)"
    assert now.key_at is not None and start.key_at is not None and now.key_bound is not None
    speed = (now.key_at - start.key_at) / seconds
    if speed <= 0:
        return "; ETA unknown (the key has not advanced since the trigger started)"
    left = now.tables - now.tables_done - 1
    then = f", then {left} more table(s)" if left else ""
    return (f"; ETA {now.table} {max(0.0, now.key_bound - now.key_at) / speed:,.0f} s"
            f" (by the key's progress to {now.key_bound:,.0f}){then}")


def describe_progress(request: DumpRequest, now: Progress, start: Progress,
                      seconds: float) -> str:
    """One log line: where the dump is, its rate since ``start`` (``seconds`` ago), the ETA."""
    line = (f"{request.id} {request.state.value}: tables {now.tables_done}/{now.tables} done, "
            f"{now.chunks:,} chunks, {now.rows:,} rows")
    if now.keys:
        line += f", keys {now.keys_done:,}/{now.keys:,}"
    if seconds <= 0 or now == start:
        return line + "; rate and ETA not known yet"
    line += f"; {(now.rows - start.rows) / seconds:,.0f} rows/s since the trigger started"
    if not now.keys:
        return line + _table_eta(now, start, seconds)
    keys_per_s = (now.keys_done - start.keys_done) / seconds
    if keys_per_s <= 0:
        return line + "; ETA unknown (no keys done since the trigger started)"
    return line + f"; ETA {(now.keys - now.keys_done) / keys_per_s:,.0f} s"


def dump_event(request: DumpRequest, progress: Progress) -> dict[str, Any]:
    """The event of a request that ended (the sensor decides on the same dict)."""
    if request.state is RequestState.COMPLETED:
        message = (f"{request.id} completed: {progress.tables} table(s), "
                   f"{progress.rows:,} rows")
        if progress.missing:
            message += (f"; {progress.missing:,} of {progress.keys:,} keys are not in the "
                        "source (`dblog show --json` lists them)")
    elif request.state is RequestState.FAILED:
        message = f"{request.id} failed: {request.error or 'the worker recorded no error'}"
    elif request.state is RequestState.CANCELLED:
        message = f"{request.id} was cancelled" + (f": {request.error}" if request.error else "")
    else:
        raise ValueError(f"{request.id} is {request.state.value}: it has not ended")
    return {"status": request.state.value, "request_id": request.id, "message": message,
            "rows": progress.rows}


def _raise_if_cancelled() -> None:
    """Raise the cancellation a call let through. Python 3.11's ``asyncio.wait_for``
    returns its result and drops a cancellation that arrives as its awaitable completes
    (gh-86296), and redis-py sends every command inside one: a triggerer that stops (it
    cancels its triggers and waits) would wait for a trigger that polls on."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


async def _read(requests: AsyncRequests, request_id: str
                ) -> tuple[DumpRequest, Progress, str, str]:
    """The request, its progress, why the worker does not read it now ("" if it reads: its
    last window read nothing, or more urgent requests hold every slot), and its automatic
    throttle's decision while it delays the dump ("" if not); both "" if the worker does
    not run it now."""
    request = await requests.get_request(request_id)
    ours = dump_status(await requests.status(), request_id)
    waiting = str(ours.get("waiting") or "")
    throttle = str(ours.get("throttle") or "") if ours.get("throttle_ms") else ""
    return request, Progress.of(request, await requests.progress(request_id)), waiting, throttle


def dump_status(status: Mapping[str, str], request_id: str) -> dict[str, Any]:
    """What the worker's status hash says of one dump it runs ({} if it does not)."""
    try:
        dumps = json.loads(status.get("dumps") or "{}")
    except ValueError:
        return {}
    found = dumps.get(request_id) if isinstance(dumps, dict) else None
    return found if isinstance(found, dict) else {}


class DblogDumpTrigger(BaseTrigger):
    """Wait in the triggerer until a dump request ends; fire one event with its outcome.

    The Redis password is not among the trigger's arguments: :meth:`run` reads the
    connection itself.

    :param request_id: The dump request, e.g. ``dump-3``.
    :param dblog_conn_id: The ``dblog`` connection (Redis and the source).
    :param poll_interval: Seconds between two reads of the request.
    :param wake_after: Fire ``{"status": "running"}`` once this many seconds passed and the
        dump has not ended (None: only when it ends).
    :param log_progress: Log the progress as it changes (the *wait* task does; the *pace*
        task, which follows the same dump, does not).
    """

    def __init__(self, request_id: str, dblog_conn_id: str = DEFAULT_CONN_ID,
                 poll_interval: float = 10.0, wake_after: float | None = None,
                 log_progress: bool = True) -> None:
        # BaseTrigger.__init__ is not annotated; mypy's untyped_calls_exclude misses super().
        super().__init__()  # type: ignore[no-untyped-call]
        self.request_id = request_id
        self.dblog_conn_id = dblog_conn_id
        self.poll_interval = float(poll_interval)
        self.wake_after = None if wake_after is None else float(wake_after)
        self.log_progress = log_progress

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (f"{type(self).__module__}.{type(self).__qualname__}",
                {"request_id": self.request_id, "dblog_conn_id": self.dblog_conn_id,
                 "poll_interval": self.poll_interval, "wake_after": self.wake_after,
                 "log_progress": self.log_progress})

    def _event(self, status: str, message: str, rows: int = 0) -> TriggerEvent:
        return TriggerEvent({"status": status, "request_id": self.request_id,
                             "message": message, "rows": rows})

    async def run(self) -> AsyncIterator[TriggerEvent]:
        try:
            settings = await DblogHook.aget_settings(self.dblog_conn_id)
            requests = AsyncRequests(settings.redis_url, settings.source)
        except Exception as exc:  # no such connection, or one that needs a change
            yield self._event("error", f"cannot follow {self.request_id}: {exc}")
            return
        self.log.info("following %s of source %s at %s every %s s", self.request_id,
                      settings.source, settings.safe_redis_url, self.poll_interval)
        start: Progress | None = None  # the progress at the first read, and when it was
        started = 0.0
        woken = time.monotonic() + (self.wake_after if self.wake_after is not None
                                    else float("inf"))
        logged: tuple[object, ...] = ()
        said = ""  # the waiting reason last logged
        throttled = False  # whether the throttle delayed the dump when last logged
        try:
            while True:
                _raise_if_cancelled()
                try:
                    request, now, waiting, throttle = await _read(requests, self.request_id)
                except StateUnavailable as exc:
                    if logged != ("unreachable",):
                        self.log.warning("%s; trying again every %s s", exc, self.poll_interval)
                        logged = ("unreachable",)
                    await asyncio.sleep(self.poll_interval)
                    continue
                except CorruptRequest as exc:  # the worker fails it: it cannot run
                    self.log.error("%s", exc)
                    yield self._event("failed", str(exc))
                    return
                except DblogError as exc:  # the request does not exist
                    yield self._event("error", str(exc))
                    return
                if request.state.terminal:
                    event = dump_event(request, now)
                    self.log.info("%s", event["message"])
                    yield TriggerEvent(event)
                    return
                if time.monotonic() >= woken:
                    yield self._event("running", f"{self.request_id} is {request.state.value}",
                                      now.rows)
                    return
                if start is None:
                    start, started = now, time.monotonic()
                if not self.log_progress:
                    await asyncio.sleep(self.poll_interval)
                    continue
                if (request.state, now) != logged:
                    self.log.info("%s", describe_progress(request, now, start,
                                                          time.monotonic() - started))
                    logged = (request.state, now)
                if waiting != said:
                    if waiting:
                        self.log.warning("%s waits: %s", self.request_id, waiting)
                    else:
                        self.log.info("%s reads again", self.request_id)
                    said = waiting
                if bool(throttle) != throttled:  # once when it starts, once when it ends
                    if throttle:
                        self.log.warning("%s is throttled: %s", self.request_id, throttle)
                    else:
                        self.log.info("%s is no longer throttled", self.request_id)
                    throttled = bool(throttle)
                await asyncio.sleep(self.poll_interval)
        except Exception as exc:  # anything else: the sensor fails, its retries apply
            yield self._event("error", f"following {self.request_id} failed: "
                                       f"{type(exc).__name__}: {exc}")
        finally:
            await requests.close()

    async def on_kill(self) -> None:
        """The task was marked failed or success, or cleared, while deferred: cancel the
        dump (Airflow 3.3+ calls this; a triggerer restart or a timeout does not)."""
        try:
            settings = await DblogHook.aget_settings(self.dblog_conn_id)
        except Exception as exc:
            self.log.error("cannot cancel %s: %s", self.request_id, exc)
            return
        requests = AsyncRequests(settings.redis_url, settings.source)
        try:
            previous = await command_async(requests, self.request_id, "cancel")
        except DblogError as exc:
            self.log.error("cannot cancel %s: %s", self.request_id, exc)
        else:
            if previous is None:
                self.log.info("%s had ended: nothing to cancel", self.request_id)
            else:
                self.log.warning("the task was stopped by hand: %s cancelled (it was %s)",
                                 self.request_id, previous.value)
        finally:
            await requests.close()
