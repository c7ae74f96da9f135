"""DblogDumpOperator and the control operators against a real Redis: one request per task
instance, templated values, the state changes and the refusals."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import pytest
from airflow.sdk import Context
from airflow.sdk.exceptions import AirflowException, AirflowFailException
from dblog_airflow.operators.control import (
    DblogCancelDumpOperator,
    DblogPauseDumpOperator,
    DblogResumeDumpOperator,
    DblogSetDumpKnobsOperator,
)
from dblog_airflow.operators.dump import DblogDumpOperator

from dblog_worker.dump_spec import DumpSpec
from dblog_worker.requests import DumpKind, Priority, RequestState
from dblog_worker.state import StateStore
from dblog_worker.throttle import ThrottlePolicy
from tests.airflow.conftest import DblogConnection
from tests.services import free_port

SOURCE = "shop"
MakeContext = Callable[..., Context]


@pytest.fixture
def store(redis_url: str, dblog_connection: DblogConnection) -> StateStore:
    dblog_connection(redis_url, SOURCE)
    return StateStore(redis_url, SOURCE)


def test_submit_once_per_task_instance(store: StateStore, task_context: MakeContext) -> None:
    op = DblogDumpOperator(task_id="submit", scope="tables", tables=["public.a"],
                           chunk_size=100, parallelism="3",
                           throttle={"max_chunk_ms": "250", "max_active_sessions": 0})
    context = task_context(dag_id="dblog_dump", run_id="manual__1", task_id="submit")
    first = op.execute(context)
    assert op.execute(context) == first  # a retry: the same request
    request = store.get_request(first)
    assert request.client_token == "airflow:dblog_dump:manual__1:submit:-1"
    assert (request.kind, request.tables, request.chunk_size, request.parallelism) == (
        DumpKind.TABLES, ("public.a",), 100, 3)
    assert request.throttle == ThrottlePolicy(max_chunk_ms=250)
    mapped = op.execute(task_context(dag_id="dblog_dump", run_id="manual__1",
                                     task_id="submit", map_index=2))
    other_run = op.execute(task_context(dag_id="dblog_dump", run_id="manual__2",
                                        task_id="submit"))
    assert len({first, mapped, other_run}) == 3
    assert len(store.list_requests()) == 3


def test_a_spec_passed_once_is_queued_as_built(store: StateStore, tmp_path: Path,
                                              task_context: MakeContext) -> None:
    """What the DAGs do: the check task's XCom is a spec's JSON, rendered into ``spec``;
    the request is that spec (the task instance's client token added), nothing parsed
    again from separate strings."""
    spec = DumpSpec.of("tables", ["public.a"], chunk_size=70, delay_ms=5, parallelism=2,
                       where=[{"column": "region", "op": "=", "value": "EU"}], to_key=[9],
                       throttle={"max_chunk_ms": 30}, priority="background")
    op = DblogDumpOperator(task_id="submit", spec="{{ params.spec }}")
    context = task_context(dag_id="dblog_backfill", run_id="scheduled__1", task_id="submit",
                           params={"spec": spec.to_json()})
    op.render_template_fields(context)
    request = store.get_request(op.execute(context))
    assert (request.kind, request.tables, request.chunk_size, request.delay_ms,
            request.parallelism, request.priority, request.throttle, request.row_filter,
            request.client_token) == (
        DumpKind.TABLES, ("public.a",), 70, 5, 2, Priority.BACKGROUND,
        ThrottlePolicy(max_chunk_ms=30), spec.row_filter,
        "airflow:dblog_backfill:scheduled__1:submit:-1")
    # a spec without its keys, and the keys in a file (dblog_repair's many keys)
    keys = DumpSpec.of("keys", ["public.a"], [1, 2, 3])
    path = tmp_path / "keys.json"
    path.write_text('{"keys": [4, 5]}')
    op = DblogDumpOperator(task_id="submit", spec=keys.to_json(keys=False),
                           keys_file=str(path))
    request = store.get_request(op.execute(task_context(run_id="repair__1")))
    assert (request.kind, request.key_count, request.priority) == (DumpKind.KEYS, 2,
                                                                   Priority.URGENT)
    assert store.request_keys(request.id, 0, 5) == [("4",), ("5",)]
    with pytest.raises(AirflowFailException, match=r"unknown field.* of a dump spec: scope"):
        DblogDumpOperator(task_id="submit", spec='{"scope": "all"}').execute(
            task_context(run_id="bad"))
    with pytest.raises(ValueError, match=r"a spec .* or a scope"):
        DblogDumpOperator(task_id="submit", spec=spec.to_json(), scope="all")
    with pytest.raises(ValueError, match=r"a spec .* or a scope"):
        DblogDumpOperator(task_id="submit")


def test_a_cleared_run_gets_a_new_request_when_asked(store: StateStore,
                                                     task_context: MakeContext) -> None:
    op = DblogDumpOperator(task_id="submit", scope="tables", tables=["public.a"],
                           new_request_on_clear=True)
    context = task_context(dag_id="dblog_repair", run_id="manual__1", task_id="submit")
    first = op.execute(context)  # a run never cleared: the plain token
    assert store.get_request(first).client_token == "airflow:dblog_repair:manual__1:submit:-1"
    context["dag_run"] = SimpleNamespace(clear_number=1)
    again = op.execute(context)  # the run cleared and re-run: a new request
    assert op.execute(context) == again != first  # its automatic retry re-attaches
    assert store.get_request(again).client_token == (
        "airflow:dblog_repair:manual__1:submit:-1:clear1")
    # without the option a cleared run re-attaches, as before
    plain = DblogDumpOperator(task_id="submit", scope="tables", tables=["public.a"])
    assert plain.execute(context) == first
    assert len(store.list_requests()) == 2


def test_templated_params_render_to_a_request(
    redis_url: str, dblog_connection: DblogConnection, task_context: MakeContext,
) -> None:
    dblog_connection(redis_url, "other", conn_id="dblog_other")
    store = StateStore(redis_url, "other")
    # params['keys'], not params.keys: Jinja finds the dict's keys method first
    op = DblogDumpOperator(task_id="submit", scope="{{ params.scope }}",
                           tables="{{ params.tables }}", keys="{{ params['keys'] }}",
                           chunk_size="{{ params.chunk_size }}",
                           delay_ms="{{ params.delay_ms }}", dblog_conn_id="{{ params.conn_id }}")
    context = task_context(params={"scope": "keys", "tables": ["public.a"],
                                   "keys": '[[1, "a"], [2, "b"]]', "chunk_size": 250,
                                   "delay_ms": 10, "conn_id": "dblog_other"})
    op.render_template_fields(context)
    request = store.get_request(op.execute(context))
    assert (request.kind, request.tables, request.key_count, request.chunk_size,
            request.delay_ms) == (DumpKind.KEYS, ("public.a",), 2, 250, 10)
    assert store.request_keys(request.id, 0, 5) == [("1", "a"), ("2", "b")]


def test_templated_filter_renders_to_a_request(store: StateStore,
                                              task_context: MakeContext) -> None:
    # a condition's value is a template of the run, as a scheduled dump's interval
    op = DblogDumpOperator(
        task_id="submit", scope="tables", tables=["public.a"],
        where=[{"column": "updated_at", "op": ">=", "value": "{{ params.since }}"},
               {"column": "region", "op": "in", "values": ["EU", "{{ params.region }}"]}],
        from_key="{{ params.first }}", to_key="{{ params['last'] }}")
    context = task_context(params={"since": "2026-11-16T00:00:00+00:00", "region": "US",
                                   "first": 10, "last": [20]})
    op.render_template_fields(context)
    row_filter = store.get_request(op.execute(context)).row_filter
    assert row_filter is not None
    assert row_filter.describe() == ('updated_at >= "2026-11-16T00:00:00+00:00" AND region in '
                                     '("EU", "US") AND key >= ["10"] AND key <= ["20"]')
    # one condition as JSON text (a param rendered)
    text = DblogDumpOperator(task_id="text", scope="tables", tables=["public.b"],
                             where='{"column": "deleted_at", "op": "is null"}')
    saved = store.get_request(text.execute(task_context(task_id="text")))
    assert saved.row_filter is not None and saved.row_filter.describe() == "deleted_at is null"


def test_refused_dump_fails_without_retry(store: StateStore, task_context: MakeContext) -> None:
    op = DblogDumpOperator(task_id="submit", scope="keys", tables=["public.a"], keys="[]")
    with pytest.raises(AirflowFailException, match="keys must be a non-empty JSON array"):
        op.execute(task_context())
    ranged = DblogDumpOperator(task_id="submit", scope="tables", tables=["public.a", "public.b"],
                               to_key="9")
    with pytest.raises(AirflowFailException, match=r"a key range .* got 2 tables"):
        ranged.execute(task_context())
    assert store.list_requests() == []


def test_keys_from_a_file(store: StateStore, task_context: MakeContext,
                          tmp_path: Path) -> None:
    """Large key sets travel as a file: a list, or an object with "keys"; a file that holds
    none is refused without retries, one that cannot be read fails with retries."""
    listed, wrapped = tmp_path / "keys.json", tmp_path / "plan.json"
    listed.write_text("[1, 2, 3]")
    wrapped.write_text('{"keys": [[4, "a"]], "extra": []}')
    op = DblogDumpOperator(task_id="listed", scope="keys", tables=["public.a"],
                           keys_file=listed.as_uri())
    request = store.get_request(op.execute(task_context(task_id="listed")))
    assert (request.kind, request.key_count) == (DumpKind.KEYS, 3)
    op = DblogDumpOperator(task_id="wrapped", scope="keys", tables=["public.b"],
                           keys_file=str(wrapped))
    assert store.get_request(op.execute(task_context(task_id="wrapped"))).key_count == 1
    for text, message in (("{not json", "is not JSON"), ('{"extra": []}', "holds no list")):
        wrapped.write_text(text)
        with pytest.raises(AirflowFailException, match=message):
            op.execute(task_context(task_id="bad"))
    gone = DblogDumpOperator(task_id="gone", scope="keys", tables=["public.a"],
                             keys_file=str(tmp_path / "missing.json"))
    with pytest.raises(AirflowException, match="cannot be read") as failed:
        gone.execute(task_context(task_id="gone"))
    assert not isinstance(failed.value, AirflowFailException)
    assert len(store.list_requests()) == 2


def test_unreachable_redis_fails_with_retries(dblog_connection: DblogConnection,
                                              task_context: MakeContext) -> None:
    dblog_connection(f"redis://127.0.0.1:{free_port()}/0", SOURCE)
    op = DblogDumpOperator(task_id="submit", scope="tables", tables=["public.a"])
    with pytest.raises(AirflowException, match="Redis is unreachable") as failed:
        op.execute(task_context())
    assert not isinstance(failed.value, AirflowFailException)


def test_control_operators_steer_the_request(store: StateStore,
                                             task_context: MakeContext) -> None:
    request = store.create_request(DumpKind.TABLES, ["public.a"], chunk_size=100, delay_ms=0)
    context = task_context()
    pause = DblogPauseDumpOperator(task_id="pause", request_id=request.id)
    with pytest.raises(AirflowFailException,
                       match=f"dump request {request.id} is queued; it cannot become paused"):
        pause.execute(context)
    store.transition(request.id, RequestState.RUNNING)
    assert pause.execute(context) == "paused"
    assert store.get_request(request.id).state is RequestState.PAUSED
    resume = DblogResumeDumpOperator(task_id="resume", request_id=request.id)
    assert resume.execute(context) == "running"
    assert store.get_request(request.id).state is RequestState.RUNNING

    knobs = DblogSetDumpKnobsOperator(task_id="knobs", request_id=request.id,
                                      chunk_size="{{ params.chunk_size }}", delay_ms="",
                                      parallelism="{{ params.parallelism }}",
                                      throttle={"max_active_sessions": "{{ params.sessions }}"})
    knobs.render_template_fields(task_context(params={"chunk_size": 2000, "parallelism": 3,
                                                      "sessions": 12}))
    assert knobs.execute(context) == {"chunk_size": 2000, "delay_ms": 0, "parallelism": 3,
                                     "throttle": ThrottlePolicy(max_active_sessions=12).limits(),
                                     "priority": "normal"}
    assert store.get_request(request.id).chunk_size == 2000
    assert store.get_request(request.id).parallelism == 3
    urgent = DblogSetDumpKnobsOperator(task_id="urgent", request_id=request.id,
                                       priority="{{ params.priority }}")
    urgent.render_template_fields(task_context(params={"priority": "urgent"}))
    assert urgent.execute(context)["priority"] == "urgent"
    assert store.get_request(request.id).priority is Priority.URGENT
    assert store.queue_head(1)[0].id == request.id

    cancel = DblogCancelDumpOperator(task_id="cancel", request_id="{{ params.id }}",
                                     dblog_conn_id="{{ params.conn_id }}")
    cancel.render_template_fields(task_context(params={"id": request.id,
                                                       "conn_id": "dblog_default"}))
    assert cancel.execute(context) == "cancelled"
    assert store.get_request(request.id).state is RequestState.CANCELLED
    with pytest.raises(AirflowFailException, match="is cancelled; it cannot become cancelled"):
        cancel.execute(context)
    with pytest.raises(AirflowFailException, match="knobs are final"):
        knobs.execute(context)
