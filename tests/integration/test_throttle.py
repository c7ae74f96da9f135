"""Automatic throttling on real servers (both sources): a competing load the throttle must
observe drives its delay up, with the reason in `dblog show`, `dblog status`, the HTTP
status and the metrics; when the load stops the delay comes back down; limits set at
runtime (CLI, HTTP) take effect; bad limits are refused; the dump converges."""

from __future__ import annotations

import http.client
import json
import threading
import time
from collections.abc import Callable
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from dblog_worker.control.store import StateStore
from dblog_worker.mysql import pressure as my_pressure
from dblog_worker.pg import pressure as pg_pressure
from tests.integration.harness import (
    SOURCE,
    Backend,
    Session,
    WorkerProcess,
    assert_converged,
    chunks,
    cli,
    dump,
    wait_for,
    wait_request,
)


class Sleepers:
    """``count`` sessions each running a sleeping statement again and again: active
    sessions on the source (PostgreSQL ``pg_sleep``, MariaDB ``SLEEP``) until stopped."""

    def __init__(self, backend: Backend, count: int) -> None:
        self.backend = backend
        self.count = count
        self.stopping = threading.Event()
        self.threads = [threading.Thread(target=self._run, daemon=True) for _ in range(count)]
        sleep = "pg_sleep" if backend.kind == "postgresql" else "SLEEP"
        self.statement = f"SELECT {sleep}(0.5)"

    def _run(self) -> None:
        session: Session = self.backend.connect()
        try:
            while not self.stopping.is_set():
                session.run(self.statement)
        finally:
            session.close()

    def __enter__(self) -> Sleepers:
        for thread in self.threads:
            thread.start()
        return self

    def stop(self) -> None:
        self.stopping.set()
        for thread in self.threads:
            thread.join(10)

    def __exit__(self, *exc: object) -> None:
        self.stop()


def call(url: str, method: str = "GET", body: object = None) -> tuple[int, Any]:
    """A call to the worker's HTTP API: the status and the parsed JSON (or the text)."""
    host, port = url.removeprefix("http://").split("/", 1)[0].rsplit(":", 1)
    path = "/" + url.removeprefix("http://").split("/", 1)[1]
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        connection.request(method, path, None if body is None else json.dumps(body),
                           {"Content-Type": "application/json"})
        response = connection.getresponse()
        text = response.read().decode()
    finally:
        connection.close()
    return response.status, json.loads(text) if text.startswith(("{", "[")) else text


def active_sessions(backend: Backend) -> int:
    """What the worker's query counts, read on a session of the test's own."""
    session: Any = backend.connect()
    try:
        if backend.kind == "postgresql":
            return pg_pressure.active_sessions(session.conn)
        return my_pressure.active_sessions(session.conn)
    finally:
        session.close()


def throttle_ms(store: StateStore, request_id: str) -> int:
    return int(store.dump_status(request_id).get("throttle_ms") or 0)


def throttle_text(store: StateStore, request_id: str) -> str:
    """The throttle's decision the worker's status shows for a dump ("" if none)."""
    return str(store.dump_status(request_id).get("throttle") or "")


def test_active_sessions_throttle_the_dump_until_the_load_stops(
        backend: Backend, worker_process: Callable[..., WorkerProcess]) -> None:
    t1 = backend.t1
    backend.create(t1, 3000)
    config = backend.config_path([t1])
    worker = worker_process(config)
    store = StateStore(backend.redis_url, SOURCE)
    try:
        wait_for(lambda: bool(store.status().get("http")), 30, "the worker's first status")
        base = store.status()["http"]
        # the worker streams the log (a WAL sender, a binlog dump thread): not counted; a
        # query of the worker's (its heartbeat, a watermark) may run at any one reading
        wait_for(lambda: active_sessions(backend) == 0, 10,
                 "no active session while the worker only streams the log")
        with Sleepers(backend, 6) as sleepers:
            wait_for(lambda: active_sessions(backend) >= 5, 20, "the sleepers' sessions")
            request_id = dump(config, "--table", t1, "--chunk-size", "20",
                              "--max-active-sessions", "3")
            wait_for(lambda: throttle_ms(store, request_id) >= 800
                     and "active sessions > 3" in throttle_text(store, request_id), 60,
                     "the throttle's delay rising", worker.log)
            shown = cli(config, "show", request_id).stdout
            assert "throttle limits: active sessions <= 3" in shown, shown
            assert "throttle: +" in shown, shown
            assert f"dump {request_id}: running, priority normal, throttle: +" in cli(
                config, "status").stdout
            wait_for(lambda: (call(f"{base}/api/v1/status")[1]["dump"]["throttle"] or {}
                              ).get("over") == ["active_sessions"], 10,
                     "the HTTP status naming the signal over its limit")
            code, http_status = call(f"{base}/api/v1/status")
            assert code == 200
            view = http_status["dump"]["throttle"]
            assert view["limits"]["max_active_sessions"] == 3, view
            assert view["delay_ms"] >= 400 and "signals" in view, view
            code, metrics = call(f"{base}/metrics")
            samples = {(sample.name, frozenset(sample.labels.items())): sample.value
                       for family in text_string_to_metric_families(metrics)
                       for sample in family.samples}
            labels = {"source": SOURCE, "request": request_id}
            assert samples[("dblog_dump_throttle_over_limit", frozenset(
                {**labels, "signal": "active_sessions"}.items()))] == 1, metrics
            assert ("dblog_dump_throttle_delay_seconds", frozenset(labels.items())) in samples
            # throttled: few windows while the sessions run
            before = chunks(backend, request_id)
            time.sleep(3.0)
            throttled = chunks(backend, request_id) - before
            assert throttled <= 5, throttled
            sleepers.stop()
            wait_for(lambda: throttle_ms(store, request_id) == 0, 60,
                     "the throttle's delay easing to none", worker.log)
        shown = throttle_text(store, request_id)  # "" once the dump has ended
        assert shown == "" or shown.startswith("none"), shown
        state = wait_request(backend.redis_url, SOURCE, request_id, ["completed", "failed"],
                             120, worker)
        assert state["state"] == "completed", state
    finally:
        store.close()
    assert_converged(backend, t1)


def test_limits_set_at_runtime_take_effect_and_bad_ones_are_refused(
        backend: Backend, worker_process: Callable[..., WorkerProcess]) -> None:
    t1, t2 = backend.t1, backend.t2
    backend.create(t1, 100_000)  # 100 windows 300 ms apart: the limit set comes in time
    backend.create(t2, 0)        # even when the first window shows late (a loaded machine)
    config = backend.config_path([t1, t2])
    worker = worker_process(config)
    store = StateStore(backend.redis_url, SOURCE)
    workload = backend.workload([t1, t2], seed=17)
    workload.start()
    try:
        wait_for(lambda: bool(store.status().get("http")), 30, "the worker's first status")
        base = store.status()["http"]
        request_id = dump(config, "--table", t1, "--chunk-size", "1000", "--delay-ms", "300")
        wait_for(lambda: chunks(backend, request_id) >= 1, 30, "a first window")
        assert throttle_text(store, request_id) == ""  # no policy: nothing shown
        # a limit every chunk SELECT is over (thousands of rows take more than 1 ms)
        code, body = call(f"{base}/api/v1/requests/{request_id}", "PATCH",
                          {"throttle": {"max_chunk_ms": 1}})
        assert code == 200 and body["throttle"]["max_chunk_ms"] == 1, body
        wait_for(lambda: throttle_ms(store, request_id) >= 400, 30,
                 "the throttle's delay rising", worker.log)
        assert "chunk SELECT" in throttle_text(store, request_id)
        assert "> 1 ms" in throttle_text(store, request_id)
        for bad, message in (
                (["--max-chunk-ms", "-5"], "throttle max_chunk_ms (a window's chunk SELECT "
                                           "wall time) must be an integer number of "
                                           "milliseconds from 0 (off) to 3600000, got -5"),
                (["--max-active-sessions", "100001"], "from 0 (off) to 100000, got 100001")):
            result = cli(config, "set", request_id, *bad, check=False)
            assert result.returncode == 2 and message in result.stderr, result
        for body, message in (({"throttle": {"max_cpu": 5}}, "unknown throttle limit"),
                              ({"throttle": 5}, "throttle must be an object"),
                              ({"throttle": {}}, "throttle must name at least one limit"),
                              ({"throttle": {"max_log_lag_mb": "5"}}, "got '5'")):
            code, answer = call(f"{base}/api/v1/requests/{request_id}", "PATCH", body)
            assert code == 400 and message in answer["error"], (body, answer)
        assert store.get_request(request_id).throttle.max_chunk_ms == 1  # nothing lost
        out = cli(config, "set", request_id, "--no-throttle", "--delay-ms", "0").stdout
        assert "delay 0 ms, parallelism 1, throttle limits off" in out, out
        wait_for(lambda: throttle_ms(store, request_id) == 0, 10, "the delay gone at once")
        state = wait_request(backend.redis_url, SOURCE, request_id, ["completed", "failed"],
                             180, worker)
        assert state["state"] == "completed", state
        time.sleep(0.5)
    finally:
        workload.stop()
        store.close()
    assert_converged(backend, t1, t2)


def test_a_dump_created_with_limits_shows_them_and_reads_the_log_lag(
        backend: Backend, worker_process: Callable[..., WorkerProcess]) -> None:
    t1 = backend.t1
    backend.create(t1, 1000)
    config = backend.config_path([t1])
    worker = worker_process(config)
    store = StateStore(backend.redis_url, SOURCE)
    try:
        wait_for(lambda: bool(store.status().get("http")), 30, "the worker's first status")
        base = store.status()["http"]
        out = cli(config, "dump", "--table", t1, "--max-log-lag-mb", "64", "--chunk-size",
                  "20", "--delay-ms", "200", "--json").stdout
        document = json.loads(out)
        assert document["throttle"] == {"max_chunk_ms": 0, "max_active_sessions": 0,
                                        "max_replica_lag_ms": 0, "max_log_lag_mb": 64}

        def log_lag_read() -> bool:
            view = (call(f"{base}/api/v1/status")[1].get("dump") or {}).get("throttle")
            return view is not None and "log_lag" in view["signals"]

        wait_for(log_lag_read, 30, "the log lag read by the throttle", worker.log)
        wait_for(lambda: "throttle: none (log lag " in cli(config, "show",
                                                            document["id"]).stdout,
                 30, "dblog show with the log lag read")
        cli(config, "set", document["id"], "--delay-ms", "0")
        state = wait_request(backend.redis_url, SOURCE, document["id"],
                             ["completed", "failed"], 60, worker)
        assert state["state"] == "completed", state
        shown = cli(config, "show", document["id"]).stdout
        assert "throttle limits: log lag <= 64 MiB" in shown, shown
    finally:
        store.close()
    assert_converged(backend, t1)
