"""DblogDumpTrigger and DblogDumpSensor against a real Redis: the trigger's serialization,
its single event for each way a dump ends (the state driven from the test while it polls),
its progress lines; the sensor's decision on the first read, its deferral, and on each
event."""

from __future__ import annotations

import asyncio
import importlib
import inspect
import json
import threading
import time
from collections.abc import Callable

import pytest
from airflow.configuration import conf
from airflow.jobs.triggerer_job_runner import TriggerRunner
from airflow.sdk import Context, PokeReturnValue
from airflow.sdk.exceptions import AirflowException, AirflowFailException, TaskDeferred
from airflow.triggers.base import TriggerEvent
from dblog_airflow.sensors.dump import DblogDumpSensor
from dblog_airflow.triggers import dump as trigger_module
from dblog_airflow.triggers.dump import DblogDumpTrigger, Progress, describe_progress

from dblog_worker.control.store import StateStore
from dblog_worker.dump.requests import DumpKind, DumpRequest, RequestState, TableProgress
from tests.airflow.conftest import DblogConnection

SOURCE = "shop"
A, B = "public.a", "public.b"
MakeContext = Callable[..., Context]


@pytest.fixture
def store(redis_url: str, dblog_connection: DblogConnection) -> StateStore:
    dblog_connection(redis_url, SOURCE)
    return StateStore(redis_url, SOURCE)


def new_dump(store: StateStore, *states: RequestState, error: str | None = None) -> DumpRequest:
    request = store.create_request(DumpKind.TABLES, [A, B], chunk_size=100, delay_ms=0)
    for state in states:
        store.transition(request.id, state, error=error if state.terminal else None)
    return store.get_request(request.id)


def save(store: StateStore, request_id: str, *progress: TableProgress) -> None:
    store.save_progress(None, {request_id: list(progress)}, {})


def publish(store: StateStore, request_id: str, *, waiting: str = "", throttle: str = "",
            throttle_ms: int = 0, others: dict[str, str] | None = None) -> None:
    """The worker's status as it says what each dump it runs waits for (``dumps``)."""
    dumps = {other: {"state": "running", "priority": "normal", "waiting": why,
                     "throttle": "", "throttle_ms": 0} for other, why in (others or {}).items()}
    dumps[request_id] = {"state": "running", "priority": "normal", "waiting": waiting,
                         "throttle": throttle, "throttle_ms": throttle_ms}
    store.publish_status({"active_requests": ",".join(dumps), "dumps": json.dumps(dumps)})


# -- the trigger -------------------------------------------------------------------------


def test_trigger_serializes_to_primitives_and_back() -> None:
    trigger = DblogDumpTrigger(request_id="dump-7", dblog_conn_id="dblog_shop",
                               poll_interval=2)
    classpath, kwargs = trigger.serialize()
    assert (classpath, kwargs) == ("dblog_airflow.triggers.dump.DblogDumpTrigger",
                                   {"request_id": "dump-7", "dblog_conn_id": "dblog_shop",
                                    "poll_interval": 2.0, "wake_after": None,
                                    "log_progress": True})
    module, _, name = classpath.rpartition(".")
    again = getattr(importlib.import_module(module), name)(**kwargs)
    assert type(again) is DblogDumpTrigger
    assert again.serialize() == (classpath, kwargs)
    pacing = DblogDumpTrigger("dump-7", "dblog_shop", 2, wake_after=300, log_progress=False)
    assert pacing.serialize()[1] == {"request_id": "dump-7", "dblog_conn_id": "dblog_shop",
                                     "poll_interval": 2.0, "wake_after": 300.0,
                                     "log_progress": False}


def follow(trigger: DblogDumpTrigger, drive: Callable[[], object] = lambda: None,
           after: float = 0.15) -> list[TriggerEvent]:
    """Every event ``trigger.run()`` yields until it returns; ``drive`` runs in a thread
    ``after`` seconds in, while the trigger polls."""

    async def main() -> list[TriggerEvent]:
        events: list[TriggerEvent] = []

        async def collect() -> None:
            async for event in trigger.run():
                events.append(event)

        task = asyncio.create_task(collect())
        await asyncio.sleep(after)
        await asyncio.to_thread(drive)
        await asyncio.wait_for(task, 10)
        return events

    return asyncio.run(main())


def trigger_for(request: DumpRequest) -> DblogDumpTrigger:
    return DblogDumpTrigger(request_id=request.id, poll_interval=0.05)


def test_trigger_fires_completed_once_and_logs_progress(
        store: StateStore, log_text: Callable[[], str]) -> None:
    request = new_dump(store, RequestState.RUNNING)

    def drive() -> None:
        deadline = time.monotonic() + 10  # the first read is logged before any progress
        while "rate and ETA not known yet" not in log_text() and time.monotonic() < deadline:
            time.sleep(0.05)
        save(store, request.id, TableProgress(A, done=True, chunks=3, rows=300),
             TableProgress(B, started=True, chunks=1, rows=50))
        time.sleep(0.2)
        save(store, request.id, TableProgress(B, done=True, chunks=2, rows=120))
        store.transition(request.id, RequestState.COMPLETED)

    events = follow(trigger_for(request), drive)
    assert [e.payload for e in events] == [{
        "status": "completed", "request_id": request.id, "rows": 420,
        "message": f"{request.id} completed: 2 table(s), 420 rows"}]
    logged = log_text()
    assert f"{request.id} running: tables 0/2 done, 0 chunks, 0 rows; rate and ETA" in logged
    assert f"{request.id} running: tables 1/2 done, 4 chunks, 350 rows; " in logged
    assert "rows/s since the trigger started; ETA unknown" in logged


def test_a_trigger_that_wakes_fires_running_or_the_end_first(
        store: StateStore, log_text: Callable[[], str]) -> None:
    """``wake_after`` (the backfill's pace): "running" once the time passed, unless the
    dump ended first; it logs no progress."""
    request = new_dump(store, RequestState.RUNNING)
    waking = DblogDumpTrigger(request.id, poll_interval=0.05, wake_after=0.3,
                              log_progress=False)
    started = time.monotonic()
    events = follow(waking)
    assert time.monotonic() - started >= 0.3
    assert [e.payload for e in events] == [{"status": "running", "request_id": request.id,
                                            "message": f"{request.id} is running",
                                            "rows": 0}]
    assert "rate and ETA" not in log_text()
    started = time.monotonic()
    events = follow(DblogDumpTrigger(request.id, poll_interval=0.05, wake_after=60,
                                     log_progress=False),
                    lambda: store.transition(request.id, RequestState.COMPLETED))
    assert [e.payload["status"] for e in events] == ["completed"]
    assert time.monotonic() - started < 30  # the end, not the wake-up


def test_trigger_logs_when_the_throttle_delays_the_dump(store: StateStore,
                                                        log_text: Callable[[], str]) -> None:
    request = new_dump(store, RequestState.RUNNING)
    decision = "+800 ms (37 active sessions > 20)"

    def drive() -> None:
        publish(store, request.id, throttle=decision, throttle_ms=800)
        time.sleep(0.2)
        publish(store, request.id, throttle="+1600 ms (...)", throttle_ms=1600)
        time.sleep(0.2)
        publish(store, request.id, throttle="none", throttle_ms=0)
        time.sleep(0.2)
        store.transition(request.id, RequestState.COMPLETED)

    follow(trigger_for(request), drive)
    logged = log_text()
    assert f"{request.id} is throttled: {decision}" in logged
    assert "+1600 ms" not in logged  # once when it starts, not at every change
    assert f"{request.id} is no longer throttled" in logged


def test_trigger_logs_why_the_dump_waits(store: StateStore,
                                         log_text: Callable[[], str]) -> None:
    request = new_dump(store, RequestState.RUNNING)
    reason = ("the read replica has not replayed the low watermark within 1000 ms "
              "(123 bytes of WAL behind); the dump waits for it")
    publish(store, "dump-other", waiting="not ours")

    def drive() -> None:
        publish(store, request.id, waiting=reason, others={"dump-other": "not ours"})
        time.sleep(0.2)
        publish(store, request.id, waiting="", others={"dump-other": "not ours"})
        time.sleep(0.2)
        store.transition(request.id, RequestState.COMPLETED)

    follow(trigger_for(request), drive)
    logged = log_text()
    assert f"{request.id} waits: {reason}" in logged
    assert f"{request.id} reads again" in logged
    assert "not ours" not in logged


def test_trigger_fires_failed_with_the_workers_error(store: StateStore) -> None:
    request = new_dump(store)
    error = "table public.b was dropped while it was dumped; dump it again once it exists"

    def drive() -> None:
        store.transition(request.id, RequestState.RUNNING)
        store.transition(request.id, RequestState.FAILED, error=error)

    [event] = follow(trigger_for(request), drive)
    assert event.payload == {"status": "failed", "request_id": request.id, "rows": 0,
                             "message": f"{request.id} failed: {error}"}


def test_trigger_fires_cancelled(store: StateStore) -> None:
    request = new_dump(store, RequestState.RUNNING, RequestState.PAUSED)
    [event] = follow(trigger_for(request),
                     lambda: store.transition(request.id, RequestState.CANCELLED))
    assert event.payload == {"status": "cancelled", "request_id": request.id, "rows": 0,
                             "message": f"{request.id} was cancelled"}


def test_trigger_fires_an_error_it_cannot_follow(store: StateStore) -> None:
    [event] = follow(DblogDumpTrigger(request_id="dump-404", poll_interval=0.05))
    assert event.payload["status"] == "error"
    assert "no dump request 'dump-404' for source 'shop'" in event.payload["message"]
    [event] = follow(DblogDumpTrigger(request_id="dump-1", dblog_conn_id="nowhere"))
    assert event.payload["status"] == "error"
    assert "cannot follow dump-1" in event.payload["message"]
    assert "nowhere" in event.payload["message"]


def test_progress_of_a_key_dump_has_an_eta() -> None:
    request = DumpRequest(id="dump-5", kind=DumpKind.KEYS, tables=(A,), chunk_size=100,
                          delay_ms=0, state=RequestState.RUNNING, created_at=0, updated_at=0,
                          key_count=1000)
    start = Progress.of(request, {A: TableProgress(A, next_key_index=200, rows=200)})
    now = Progress.of(request, {A: TableProgress(A, next_key_index=600, rows=590, missing=10)})
    assert describe_progress(request, now, start, 4.0) == (
        "dump-5 running: tables 0/1 done, 0 chunks, 590 rows, keys 600/1,000; 98 rows/s "
        "since the trigger started; ETA 4 s")


def test_progress_of_a_table_dump_has_an_eta_from_its_numeric_key() -> None:
    request = DumpRequest(id="dump-6", kind=DumpKind.TABLES, tables=(A, B), chunk_size=100,
                          delay_ms=0, state=RequestState.RUNNING, created_at=0, updated_at=0)
    start = Progress.of(request, {A: TableProgress(A, started=True, last_key=["1000"],
                                                   upper_bound=["9000"], chunks=10, rows=1000)})
    now = Progress.of(request, {A: TableProgress(A, started=True, last_key=["3000"],
                                                 upper_bound=["9000"], chunks=30, rows=3000)})
    assert describe_progress(request, now, start, 10.0) == (
        "dump-6 running: tables 0/2 done, 30 chunks, 3,000 rows; 200 rows/s since the trigger"
        f" started; ETA {A} 30 s (by the key's progress to 9,000), then 1 more table(s)")
    text_key = Progress.of(request, {A: TableProgress(A, started=True, last_key=["m"],
                                                      upper_bound=["z"], rows=3000)})
    assert "ETA unknown (the key is not a number" in describe_progress(
        request, text_key, start, 10.0)


def test_a_deferred_task_stopped_by_hand_cancels_the_dump(
        store: StateStore, log_text: Callable[[], str]) -> None:
    """Mark failed / success or clear while deferred: the scheduler drops the trigger, and
    the triggerer cancels its task with the user-action message (TriggerRunner.to_cancel),
    which calls the trigger's on_kill."""
    request = new_dump(store, RequestState.RUNNING)
    trigger = trigger_for(request)
    runner = TriggerRunner()

    async def main() -> None:
        task = asyncio.create_task(runner.run_trigger(1, trigger))
        runner.triggers[1] = {"task": task, "is_watcher": False, "name": "wait", "events": 0}
        for _ in range(200):
            if f"{request.id} running" in log_text():
                break
            await asyncio.sleep(0.05)
        runner.to_cancel.append(1)  # what the triggerer's supervisor sends for a user action
        await runner.cancel_triggers()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, 30)
        assert not runner.events

    asyncio.run(main())
    assert store.get_request(request.id).state is RequestState.CANCELLED
    assert f"the task was stopped by hand: {request.id} cancelled (it was running)" in log_text()


def test_a_triggerer_restart_leaves_the_dump_running(store: StateStore) -> None:
    """A triggerer that stops (restart, rolling deploy) cancels its tasks without the
    user-action message: the dump goes on, another triggerer follows it."""
    request = new_dump(store, RequestState.RUNNING)
    trigger = trigger_for(request)
    runner = TriggerRunner()

    async def main() -> None:
        task = asyncio.create_task(runner.run_trigger(1, trigger))
        runner.triggers[1] = {"task": task, "is_watcher": False, "name": "wait", "events": 0}
        await asyncio.sleep(0.3)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, 30)

    asyncio.run(main())
    assert store.get_request(request.id).state is RequestState.RUNNING


def test_a_cancellation_a_redis_call_drops_still_stops_the_trigger(
        store: StateStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """Python 3.11's wait_for, inside every redis-py command, drops a cancellation that
    arrives as the command completes: here the read's completion and the cancel meet so on
    every run (the real read, then what wait_for does), and the trigger stops all the same."""
    request = new_dump(store, RequestState.RUNNING)
    real_read = trigger_module._read
    reading = asyncio.Event()

    async def read_like_wait_for(*args: object) -> object:
        result = await real_read(*args)  # type: ignore[arg-type]
        if not reading.is_set():  # the first read drops the cancellation
            reading.set()
            try:
                await asyncio.sleep(5)
            except asyncio.CancelledError:
                return result  # as asyncio.wait_for does when its future is done
        return result

    monkeypatch.setattr(trigger_module, "_read", read_like_wait_for)
    runner = TriggerRunner()

    async def main() -> None:
        task = asyncio.create_task(runner.run_trigger(1, trigger_for(request)))
        runner.triggers[1] = {"task": task, "is_watcher": False, "name": "wait", "events": 0}
        await asyncio.wait_for(reading.wait(), 10)
        task.cancel()
        done, _ = await asyncio.wait([task], timeout=5)
        assert done, "the trigger polls on after its cancellation"
        assert task.cancelled()

    asyncio.run(main())
    assert store.get_request(request.id).state is RequestState.RUNNING


def test_on_kill_of_an_ended_dump_changes_nothing(store: StateStore,
                                                  log_text: Callable[[], str]) -> None:
    request = new_dump(store, RequestState.RUNNING, RequestState.COMPLETED)
    asyncio.run(trigger_for(request).on_kill())
    assert store.get_request(request.id).state is RequestState.COMPLETED
    assert f"{request.id} had ended: nothing to cancel" in log_text()


# -- the sensor --------------------------------------------------------------------------


def test_deferrable_follows_airflows_default_deferrable() -> None:
    default = inspect.signature(DblogDumpSensor.__init__).parameters["deferrable"].default
    assert default is conf.getboolean("operators", "default_deferrable", fallback=False)
    assert sensor("dump-1").deferrable is default


def test_a_waiting_sensor_stopped_by_hand_cancels_the_dump(
        store: StateStore, log_text: Callable[[], str]) -> None:
    request = new_dump(store)
    sensor(request.id, deferrable=False).on_kill()
    assert store.get_request(request.id).state is RequestState.CANCELLED
    assert f"{request.id} cancelled (it was queued)" in log_text()
    sensor("dump-404", deferrable=False).on_kill()  # logged, never raised
    assert "cannot cancel dump-404: no dump request 'dump-404'" in log_text()


def sensor(request_id: str, **kwargs: object) -> DblogDumpSensor:
    return DblogDumpSensor(task_id="wait", request_id=request_id, poll_interval=0.05,
                           **kwargs)  # type: ignore[arg-type]


def test_completed_dump_ends_the_sensor_at_once(store: StateStore,
                                                task_context: MakeContext) -> None:
    request = new_dump(store, RequestState.RUNNING, RequestState.COMPLETED)
    save(store, request.id, TableProgress(A, done=True, rows=7), TableProgress(B, done=True))
    assert sensor(request.id).execute(task_context()) == {
        "status": "completed", "request_id": request.id, "rows": 7,
        "message": f"{request.id} completed: 2 table(s), 7 rows"}


@pytest.mark.parametrize(("states", "error", "message"), [
    ((RequestState.FAILED,), "source unreachable for too long", "failed: source unreachable"),
    ((RequestState.RUNNING, RequestState.CANCELLED), None, "was cancelled"),
])
def test_failed_or_cancelled_dump_fails_the_sensor(
    store: StateStore, task_context: MakeContext, states: tuple[RequestState, ...],
    error: str | None, message: str,
) -> None:
    request = new_dump(store, *states, error=error)
    for deferrable in (True, False):
        with pytest.raises(AirflowFailException, match=f"{request.id} {message}"):
            sensor(request.id, deferrable=deferrable).execute(task_context())


def test_running_dump_defers_to_the_trigger(store: StateStore,
                                            task_context: MakeContext) -> None:
    request = new_dump(store, RequestState.RUNNING)
    wait = sensor("{{ params.id }}", dblog_conn_id="{{ params.conn_id }}", timeout=600,
                  deferrable=True)
    context = task_context(params={"id": request.id, "conn_id": "dblog_default"})
    wait.render_template_fields(context)
    with pytest.raises(TaskDeferred) as deferred:
        wait.execute(context)
    trigger = deferred.value.trigger
    assert isinstance(trigger, DblogDumpTrigger)
    assert trigger.serialize()[1] == {"request_id": request.id, "dblog_conn_id": "dblog_default",
                                      "poll_interval": 0.05, "wake_after": None,
                                      "log_progress": True}
    assert deferred.value.method_name == "execute_complete"
    assert deferred.value.timeout is not None and deferred.value.timeout.total_seconds() == 600


def test_execute_complete_decides_on_the_event(task_context: MakeContext) -> None:
    wait, context = sensor("dump-3"), task_context()
    done = {"status": "completed", "request_id": "dump-3", "message": "dump-3 completed",
            "rows": 5}
    assert wait.execute_complete(context, done) == done
    for status, kind in (("failed", AirflowFailException), ("cancelled", AirflowFailException),
                         ("error", AirflowException), ("unknown", AirflowException)):
        event = {"status": status, "request_id": "dump-3", "message": f"dump-3 {status}: why",
                 "rows": 0}
        with pytest.raises(kind, match=f"dump-3 {status}") as raised:
            wait.execute_complete(context, event)
        if status in ("error", "unknown"):
            assert not isinstance(raised.value, AirflowFailException)
    with pytest.raises(AirflowException, match="fired no event"):
        wait.execute_complete(context, None)


def test_classic_sensor_pokes_until_the_dump_ends(store: StateStore,
                                                  task_context: MakeContext) -> None:
    request = new_dump(store)
    wait = sensor(request.id, deferrable=False, mode="poke", timeout=10)
    assert wait.poke(task_context()) is False

    def finish() -> None:
        time.sleep(0.2)
        store.transition(request.id, RequestState.RUNNING)
        store.transition(request.id, RequestState.COMPLETED)

    thread = threading.Thread(target=finish)
    thread.start()
    result = wait.execute(task_context())
    thread.join()
    assert result["status"] == "completed"
    poked = wait.poke(task_context())
    assert isinstance(poked, PokeReturnValue) and poked.xcom_value == result


def test_a_malformed_request_fails_the_trigger_and_the_sensor(
        store: StateStore, task_context: MakeContext) -> None:
    """A request whose record in Redis is malformed cannot run (the worker fails it): the
    trigger fires failed and the sensor fails, both with the key and what is wrong."""
    request = new_dump(store, RequestState.RUNNING)
    store.redis.hset(store.key("request", request.id), "chunk_size", "lots")
    where = f"{store.key('request', request.id)} field 'chunk_size': is 'lots', not an integer"
    [event] = follow(trigger_for(request))
    assert event.payload["status"] == "failed"
    assert where in event.payload["message"]
    for deferrable in (True, False):
        with pytest.raises(AirflowFailException, match="malformed record in Redis") as failed:
            sensor(request.id, deferrable=deferrable).execute(task_context())
        assert where in str(failed.value)
    with pytest.raises(AirflowFailException, match=where):
        sensor(request.id).execute_complete(task_context(), event.payload)
