"""A real Airflow in child processes: ``airflow api-server`` (the REST API, the execution API
and the UI), ``scheduler`` (LocalExecutor), ``dag-processor`` and ``triggerer``, on a SQLite
metadata database in a home of their own, with this checkout's dags/ and plugins/.

New DAGs are paused, as by default; :meth:`start` unpauses ``dblog_repair`` only. The simple
auth manager runs in its all-admins mode: every request is an admin's, the UI
opens without a login and the REST API takes requests without a token.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Self

from tests.airflow.conftest import ROOT
from tests.airflow.metadata_db import migrated
from tests.services import free_port

__all__ = ["LiveAirflow"]

COMPONENTS = ("api-server", "scheduler", "dag-processor", "triggerer")


class LiveAirflow:
    def __init__(self, home: Path, environ: Mapping[str, str]) -> None:
        self.home = home
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        venv_bin = str(Path(sys.executable).parent)
        inherited = {k: v for k, v in os.environ.items()
                     if not k.startswith(("AIRFLOW", "DBLOG_"))}
        self.env = inherited | {
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"),
            "AIRFLOW__CORE__PLUGINS_FOLDER": str(ROOT / "plugins"),
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{self.url}/execution/",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
            "AIRFLOW__API__BASE_URL": self.url,
            "AIRFLOW__API__PORT": str(self.port),
            "AIRFLOW__API_AUTH__JWT_SECRET": "dblog-ui-test-jwt-secret-" + "0123456789abcdef" * 4,
            "AIRFLOW__API__SECRET_KEY": "dblog-ui-test-secret-key",
            # the scheduler's loop sleeps 2 s, not 1, when it has nothing to do: 40 % less of
            # its CPU (a 1 s loop over SQLite costs ~3 CPU s a minute idle), ~0.5 s more a step
            "AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME": "2",
            # the scheduler's and triggerer's heartbeats stay Airflow's 5 s (at 1 s they cost
            # ~0.2 CPU s a minute each; nothing here waits on a heartbeat)
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
            # each file parsed once (the tests change no DAG file), not again every 30 s
            "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "3600",
            "AIRFLOW__DAG_PROCESSOR__PARSING_PROCESSES": "1",
            "PATH": f"{venv_bin}{os.pathsep}{os.environ['PATH']}",
            "PYTHONPATH": str(ROOT / "dags"),
            "SPARK_LOCAL_IP": "127.0.0.1",
        } | dict(environ)
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def airflow(self, *args: str, timeout: float = 300) -> str:
        result = subprocess.run([sys.executable, "-m", "airflow", *args], env=self.env,
                                capture_output=True, text=True, timeout=timeout, cwd=self.home)
        if result.returncode != 0:
            raise AssertionError(f"airflow {' '.join(args)} exited {result.returncode}:\n"
                                 f"{result.stdout[-4000:]}\n{result.stderr[-4000:]}")
        return result.stdout

    def start(self, timeout: float = 180) -> Self:
        migrated(self.home / "airflow.db")
        for name in COMPONENTS:
            args = [name, "--port", str(self.port), "--workers", "1"] \
                if name == "api-server" else [name]
            with (self.home / f"{name}.log").open("ab") as log:
                self.procs[name] = subprocess.Popen(
                    [sys.executable, "-m", "airflow", *args], env=self.env, cwd=self.home,
                    stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout
        while True:
            try:
                # the other DAGs stay paused (new DAGs are): nothing runs but what the
                # test triggers
                self.api("PATCH", "/api/v2/dags/dblog_repair", {"is_paused": False})
                # The execution API's first request builds its versioned routes (seconds of
                # CPU; 38 s on a loaded machine), and the API server answers nothing
                # meanwhile: made here, not by a test's first task while the test waits on
                # the REST API with a shorter timeout (scripts/quickstart_airflow.py too).
                with urllib.request.urlopen(  # noqa: S310 (the api-server's http:// address)
                        f"{self.url}/execution/health", timeout=300) as answer:
                    answer.read()
                return self
            except (urllib.error.URLError, OSError) as exc:  # not up, or not parsed yet
                self.last_error = exc  # asked again below, until the deadline
            for name, proc in self.procs.items():
                if proc.poll() is not None:
                    raise AssertionError(f"airflow {name} exited {proc.returncode}:\n"
                                         f"{self.log(name)[-4000:]}")
            if time.monotonic() > deadline:
                raise AssertionError(f"Airflow did not list dblog_repair within {timeout} s\n"
                                     + self.logs())
            time.sleep(1)

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def api(self, method: str, path: str, body: object = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(  # noqa: S310 (the api-server's http:// address)
            self.url + path, data, {"Content-Type": "application/json"}, method=method)
        with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310
            return json.load(response)

    def trigger(self, dag_id: str, run_id: str, conf: Mapping[str, Any]) -> None:
        self.api("POST", f"/api/v2/dags/{dag_id}/dagRuns",
                 {"dag_run_id": run_id, "logical_date": None, "conf": dict(conf)})

    def run_ids(self, dag_id: str) -> set[str]:
        return {str(run["dag_run_id"]) for run in
                self.api("GET", f"/api/v2/dags/{dag_id}/dagRuns")["dag_runs"]}

    def run(self, dag_id: str, run_id: str) -> dict[str, Any]:
        return dict(self.api("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}"))

    def task_states(self, dag_id: str, run_id: str) -> dict[str, str | None]:
        found = self.api("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances")
        return {ti["task_id"]: ti["state"] for ti in found["task_instances"]}

    def wait_run(self, dag_id: str, run_id: str, timeout: float = 300) -> dict[str, Any]:
        """The run, once it ended (success or failed), read every second."""
        deadline = time.monotonic() + timeout
        run: dict[str, Any] = {}
        while time.monotonic() < deadline:
            run = self.run(dag_id, run_id)
            if run["state"] in ("success", "failed"):
                return run
            time.sleep(1)
        raise AssertionError(f"the run {run_id} of {dag_id} did not end within {timeout} s: "
                             f"{run}\n{self.task_logs(dag_id, run_id)}\n{self.logs()}")

    def log(self, name: str) -> str:
        path = self.home / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def logs(self, tail: int = 3000) -> str:
        return "\n".join(f"--- airflow {name} ---\n{self.log(name)[-tail:]}"
                         for name in COMPONENTS)

    def trigger_log(self, dag_id: str, run_id: str, task_id: str) -> str:
        """What the task's triggers logged (the triggerer writes beside the task's log)."""
        folder = self.home / "logs" / f"dag_id={dag_id}" / f"run_id={run_id}" / \
            f"task_id={task_id}"
        return "".join(path.read_text(errors="replace")
                       for path in sorted(folder.glob("attempt=*.log.trigger.*.log")))

    def task_logs(self, dag_id: str, run_id: str) -> str:
        """What each task of a run logged (the files under the home's logs/)."""
        folder = self.home / "logs" / f"dag_id={dag_id}" / f"run_id={run_id}"
        return "\n".join(f"--- {path.relative_to(folder)} ---\n"
                         f"{path.read_text(errors='replace')[-3000:]}"
                         for path in sorted(folder.rglob("*.log")))
