"""The operator and the deferrable sensor in a real DAG run (``dag.test()``, with Airflow's
metadata database): submit, defer to the trigger, resume on its event; the dump's state
is driven from the test, as the worker would.

``dag.test()`` runs only DAGs of a DAG bundle: the test DAG is a file in a bundle of its own
(a temporary folder), so the DAGs of dags/ are not parsed here."""

from __future__ import annotations

import importlib.util
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from airflow.sdk import DAG
from airflow.serialization.definitions.operatorlink import XComOperatorLink
from airflow.serialization.serialized_objects import OperatorSerialization

from dblog_worker.errors import RequestRejected
from dblog_worker.lease import Lease
from dblog_worker.requests import RequestState, TableProgress
from dblog_worker.state import StateStore
from tests.airflow.conftest import DblogConnection

SOURCE = "shop"


def play_worker(store: StateStore, stop: threading.Event, error: str | None) -> None:
    """Run the first request when it appears: some progress, then completed (or failed)."""
    while not stop.is_set():
        requests = store.list_requests()
        if requests:
            request = requests[0]
            break
        time.sleep(0.05)
    else:
        return
    store.transition(request.id, RequestState.RUNNING)
    time.sleep(0.3)  # the sensor defers meanwhile
    store.save_progress(None, {request.id: [TableProgress(t, done=True, chunks=1, rows=10)
                                            for t in request.tables]}, {})
    store.transition(request.id, RequestState.FAILED if error else RequestState.COMPLETED,
                     error=error)


@pytest.fixture
def store(redis_url: str, dblog_connection: DblogConnection) -> Iterator[StateStore]:
    dblog_connection(redis_url, SOURCE)
    state = StateStore(redis_url, SOURCE)
    yield state
    state.close()


DAG_FILE = """
from airflow.sdk import DAG
from airflow.serialization.definitions.operatorlink import XComOperatorLink
from airflow.serialization.serialized_objects import OperatorSerialization
from dblog_airflow.operators.dump import DblogDumpOperator
from dblog_airflow.sensors.dump import DblogDumpSensor

with DAG("dblog_provider_test", schedule=None,
         params={"tables": ["public.a", "public.b"]}) as dag:
    submit = DblogDumpOperator(task_id="submit", scope="tables",
                               tables="{{ params.tables }}", chunk_size=100)
    wait = DblogDumpSensor(task_id="wait", request_id=submit.output, poll_interval=0.1,
                           timeout=60, deferrable=True)
    submit >> wait
"""


@pytest.fixture
def dump_dag(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> DAG:
    folder = tmp_path_factory.mktemp("dags")
    path = folder / "dblog_provider_test.py"
    path.write_text(DAG_FILE)
    monkeypatch.setenv("AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST", json.dumps([{
        "name": "dblog-provider-tests",
        "classpath": "airflow.dag_processing.bundles.local.LocalDagBundle",
        "kwargs": {"path": str(folder), "refresh_interval": 0}}]))
    spec = importlib.util.spec_from_file_location("dblog_provider_test", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    dag: DAG = module.dag
    return dag


@pytest.mark.parametrize("error", [None, "table public.b was dropped"])
def test_dump_and_deferred_wait_in_a_dag_run(airflow_db: Path, store: StateStore, redis_url: str,
                                             dump_dag: DAG, error: str | None) -> None:
    # a leader with its HTTP API, as a worker; held for the whole DAG run, however long a
    # loaded machine takes to start its tasks (the link comes from the lease)
    lease = Lease(redis_url, SOURCE, ttl_s=3600)
    assert lease.acquire(http="http://127.0.0.1:8470") is not None
    stop = threading.Event()
    worker = threading.Thread(target=play_worker, args=(store, stop, error))
    worker.start()
    try:
        run = dump_dag.test()
    finally:
        stop.set()
        worker.join(10)
        lease.release()
    [request] = store.list_requests()
    assert request.tables == ("public.a", "public.b")
    assert request.client_token == f"airflow:{run.dag_id}:{run.run_id}:submit:-1"
    states = {ti.task_id: ti.state for ti in run.get_task_instances()}
    # The extra link as the API server resolves it: the serialized task names the link and
    # its XCom key; the URL is what the task stored there.
    for task_id in ("submit", "wait"):
        task = OperatorSerialization.serialize_operator(dump_dag.get_task(task_id))
        assert task["_operator_extra_links"] == {"dblog live view": "_link_DblogLiveViewLink"}
        ti = run.get_task_instance(task_id)
        assert ti is not None
        op = OperatorSerialization.deserialize_operator(task)
        link = XComOperatorLink(name="dblog live view", xcom_key="_link_DblogLiveViewLink")
        assert link.get_link(op, ti_key=ti.key) == "http://127.0.0.1:8470/"
    if error is None:
        assert (run.state, states) == ("success", {"submit": "success", "wait": "success"})
        assert request.state is RequestState.COMPLETED
    else:
        assert (run.state, states) == ("failed", {"submit": "success", "wait": "failed"})
        with pytest.raises(RequestRejected):
            store.get_request("dump-2")  # the failure was not retried into a new dump
