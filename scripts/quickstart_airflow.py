"""A private Airflow for the quickstart, and its REST API used as the UI uses it.

:class:`LocalAirflow` runs what ``airflow standalone`` runs (``airflow db migrate``, then the
scheduler, the DAG processor, the triggerer and the API server with the UI), each as a
:class:`~quickstart_shop.Child` with a log file of its own, on a SQLite metadata database in
a throwaway ``AIRFLOW_HOME``, with the API server on a free port of 127.0.0.1 and the task
and trigger log servers on free ports too: nothing is left on Airflow's default ports.

The quickstart talks to it over the public REST API (``/api/v2``) with a JWT from
``/auth/token``, logged in as ``admin`` with the password the simple auth manager generates
(``simple_auth_manager_passwords.json.generated``): it switches DAGs on, triggers runs with
the form's values, follows their tasks and reads their XComs.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from quickstart_shop import ROOT, Child, Failed, indent, say, seconds, tail

COMPONENTS = ("scheduler", "dag-processor", "triggerer", "api-server")
HEALTH = {"scheduler": "scheduler", "dag-processor": "dag_processor", "triggerer": "triggerer"}
USER = "admin"
FINISHED = {"success", "failed", "skipped", "upstream_failed", "removed"}
SHOWN = {*FINISHED, "deferred", "up_for_retry"}  # task states worth a line
# How often a followed run is read. Listing a run's task instances costs the API server
# 0.1-0.4 s (it also serves every task's execution API): read each second, the polls were
# most of its CPU in a quickstart.
POLL_S = 2.0
# The run itself is read when its tasks changed or have all finished, else every 30 s.
RUN_EVERY_S = 30.0


@dataclass
class RunResult:
    """A DAG run as the quickstart followed it."""

    label: str  # whose run: the source's name, or what it does
    dag_id: str
    run_id: str
    state: str = "queued"
    duration: float = 0.0  # seconds, as Airflow measured the run (start to end)
    tasks: dict[str, str] = field(default_factory=dict)  # task id -> state

    @property
    def succeeded(self) -> bool:
        return self.state == "success"


class LocalAirflow:
    """Airflow's components on a throwaway home, and a client of its REST API."""

    def __init__(self, home: Path, logs: Path, port: int, env: Mapping[str, str]) -> None:
        """``env`` is the environment of every component: the base environment, the
        connections (``AIRFLOW_CONN_*``) and the DAGs' settings (``DBLOG_*``)."""
        self.home = home
        self.logs = logs
        self.port = port
        self.env = dict(env)
        self.children: dict[str, Child] = {}
        self.migrate: Child | None = None
        self._token: str | None = None
        self._warm = False

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @staticmethod
    def settings(home: Path, port: int, log_ports: tuple[int, int]) -> dict[str, str]:
        """The ``AIRFLOW__*`` variables of the quickstart's Airflow."""
        url = f"http://127.0.0.1:{port}"
        return {
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"),
            "AIRFLOW__CORE__PLUGINS_FOLDER": str(ROOT / "plugins"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            # dblog_backfill and dblog_merge have schedules: switched on, each starts a run at
            # once. The quickstart switches on the DAGs it runs, when it runs them.
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "True",
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{url}/execution/",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{USER}:admin",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__PORT": str(port),
            "AIRFLOW__API__BASE_URL": url,
            "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_urlsafe(32),
            "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(log_ports[0]),
            "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(log_ports[1]),
            # Four DAG files, parsed at start; again every two minutes rather than every 30 s
            # (each parse costs a second of one of the machine's cores).
            "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "120",
            "AIRFLOW__DAG_PROCESSOR__PARSING_PROCESSES": "1",
        }

    def _argv(self, *args: str) -> list[str]:
        return [str(Path(sys.executable).parent / "airflow"), *args]

    # -- lifecycle ----------------------------------------------------------------------------

    def begin(self) -> None:
        """Create the metadata database (``airflow db migrate``), in the background."""
        self.home.mkdir(parents=True, exist_ok=True)
        self.migrate = Child("airflow db migrate", self._argv("db", "migrate"),
                             self.logs / "airflow-db-migrate.log", self.env)

    def start(self, timeout: float = 300) -> None:
        """Wait for the database, then start the components."""
        if self.migrate is None:
            self.begin()
        assert self.migrate is not None
        code = self.migrate.wait(timeout)
        if code != 0:
            raise Failed(f"airflow db migrate exited with {code}" + tail(self.migrate.log))
        for name in COMPONENTS:
            self.children[name] = Child(f"airflow {name}", self._argv(name),
                                        self.logs / f"airflow-{name}.log", self.env)

    def check(self) -> None:
        """Fail when a component has exited."""
        for child in self.children.values():
            child.check()

    def stop(self) -> None:
        """Stop the components, the scheduler first (it ends the running tasks)."""
        if self.migrate is not None:
            self.migrate.stop(10)
        for name in COMPONENTS:
            child = self.children.pop(name, None)
            if child is not None:
                child.stop(30)

    def log_paths(self) -> list[Path]:
        paths = [self.migrate.log] if self.migrate is not None else []
        return paths + [child.log for child in self.children.values()]

    def wait_ready(self, dag_ids: Sequence[str], timeout: float,
                   check: Callable[[], None]) -> None:
        """Wait until the components report healthy, the admin can log in and the DAGs are
        parsed without import errors. ``check`` is called on the way (the workers alive)."""
        deadline = time.monotonic() + timeout
        waiting_for = "the API server to answer"
        last_said = time.monotonic()
        while time.monotonic() < deadline:
            self.check()
            check()
            waiting_for = self._not_ready(dag_ids)
            if not waiting_for:
                return
            if time.monotonic() - last_said > 30:
                say(f"   ... waiting for {waiting_for}")
                last_said = time.monotonic()
            time.sleep(1.0)
        raise Failed(f"Airflow was not ready within {timeout:.0f} s: still waiting for "
                     f"{waiting_for}" + "".join(tail(p, 15) for p in self.log_paths()))

    def _not_ready(self, dag_ids: Sequence[str]) -> str:
        """What Airflow does not have yet ("" once ready)."""
        try:
            health = self._request("GET", "/api/v2/monitor/health", auth=False, retry=False)
        except (OSError, ValueError):
            return "the API server to answer"
        unhealthy = [name for name, key in HEALTH.items()
                     if (health.get(key) or {}).get("status") != "healthy"]
        if unhealthy:
            return "the " + ", ".join(unhealthy) + " to report healthy"
        if not self._warm:
            # The first request to the execution API (the one task runners call) builds its
            # versioned routes on the API server's event loop: 10 to 40 s on two busy cores,
            # during which the server answers nothing. A task runner that starts then times
            # out and fails its task; so that first request is made here.
            say("   warming up the API server's execution API (its first request takes a while)")
            try:
                self._request("GET", "/execution/health", auth=False, timeout=300, retry=False)
            except OSError:
                return "the API server's execution API to answer"
            self._warm = True
        if not self.password_file.exists():
            return f"the admin password ({self.password_file})"
        errors = self.api("GET", "/api/v2/importErrors")
        if errors.get("import_errors"):
            raise Failed("the DAG files do not import:\n" + indent("\n".join(
                f"{e['filename']}: {e['stack_trace']}" for e in errors["import_errors"])))
        found = {d["dag_id"] for d in self.api("GET", "/api/v2/dags?limit=100")["dags"]}
        missing = [d for d in dag_ids if d not in found]
        if missing:
            return "the DAG processor to parse " + ", ".join(missing)
        return ""

    # -- the REST API -------------------------------------------------------------------------

    @property
    def password_file(self) -> Path:
        return self.home / "simple_auth_manager_passwords.json.generated"

    def password(self) -> str:
        """The admin's password, generated by the API server on its first start."""
        return str(json.loads(self.password_file.read_text())[USER])

    def login(self) -> str:
        """A JWT for the REST API, as the UI's login gets one."""
        answer = self._request("POST", "/auth/token",
                               {"username": USER, "password": self.password()}, auth=False)
        self._token = str(answer["access_token"])
        return self._token

    def api(self, method: str, path: str, body: Mapping[str, Any] | None = None) -> Any:
        """One call of the REST API; logs in first (and again when the token expired)."""
        if self._token is None:
            self.login()
        try:
            return self._request(method, path, body)
        except urllib.error.HTTPError as exc:
            if exc.code != 401:
                raise
        self.login()
        return self._request(method, path, body)

    def _request(self, method: str, path: str, body: Mapping[str, Any] | None = None,
                 auth: bool = True, timeout: float = 60, retry: bool = True) -> Any:
        """One request. A read or a PATCH that meets a busy server (a 5xx answer, a reset
        connection, a timeout) is tried twice more, a few seconds apart."""
        attempt = 1
        while True:
            try:
                return self._request_once(method, path, body, auth, timeout)
            except urllib.error.HTTPError:  # a 401: api() logs in again
                raise
            except (Failed, OSError) as exc:
                busy = isinstance(exc, OSError) or " answered 5" in str(exc)
                if not (retry and busy and method in ("GET", "PATCH") and attempt < 3):
                    raise
                say(f"   Airflow's API did not answer {method} {path} ({exc}); trying "
                    f"again in {2 * attempt} s")
                time.sleep(2 * attempt)
                attempt += 1

    def _request_once(self, method: str, path: str, body: Mapping[str, Any] | None,
                      auth: bool, timeout: float) -> Any:
        headers = {"Accept": "application/json"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        if auth and self._token is not None:
            headers["Authorization"] = f"Bearer {self._token}"
        # self.url is http://127.0.0.1:<port>: no other scheme reaches urlopen.
        request = urllib.request.Request(self.url + path, data=data,  # noqa: S310
                                         headers=headers, method=method)
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310
                text = response.read().decode()
        except urllib.error.HTTPError as exc:
            if exc.code == 401 and auth:
                raise
            detail = exc.read().decode(errors="replace")[:2000]
            raise Failed(f"Airflow's API answered {exc.code} to {method} {path}: "
                         f"{detail}") from None
        return json.loads(text) if text else None

    def set_paused(self, dag_id: str, paused: bool) -> None:
        """The switch next to the DAG's name in the UI."""
        self.api("PATCH", f"/api/v2/dags/{dag_id}?update_mask=is_paused",
                 {"is_paused": paused})

    def trigger(self, dag_id: str, run_id: str, conf: Mapping[str, Any]) -> None:
        """Trigger DAG with a form's values (validated by Airflow against the DAG's params)."""
        self.api("POST", f"/api/v2/dags/{dag_id}/dagRuns",
                 {"dag_run_id": run_id, "logical_date": None, "conf": dict(conf)})

    def runs(self, dag_id: str) -> list[dict[str, Any]]:
        answer = self.api("GET", f"/api/v2/dags/{dag_id}/dagRuns?order_by=run_after&limit=100")
        return list(answer["dag_runs"])

    def run(self, dag_id: str, run_id: str) -> dict[str, Any]:
        return dict(self.api("GET", f"/api/v2/dags/{dag_id}/dagRuns/{_quote(run_id)}"))

    def task_instances(self, dag_id: str, run_id: str) -> list[dict[str, Any]]:
        answer = self.api("GET", f"/api/v2/dags/{dag_id}/dagRuns/{_quote(run_id)}"
                                 "/taskInstances?limit=100")
        return list(answer["task_instances"])

    def xcom(self, dag_id: str, run_id: str, task_id: str) -> Any:
        """The task's return value (``None`` when it has none)."""
        path = (f"/api/v2/dags/{dag_id}/dagRuns/{_quote(run_id)}/taskInstances/{task_id}"
                "/xcomEntries/return_value")
        try:
            value = self.api("GET", path)["value"]
        except Failed as exc:
            if " 404 " in str(exc):
                return None
            raise
        if isinstance(value, str):
            with contextlib.suppress(ValueError):
                return json.loads(value)
        return value

    def task_log(self, dag_id: str, run_id: str, task_id: str, attempt: int) -> Path:
        return (self.home / "logs" / f"dag_id={dag_id}" / f"run_id={run_id}"
                / f"task_id={task_id}" / f"attempt={attempt}.log")

    # -- following runs ----------------------------------------------------------------------

    def follow(self, runs: Sequence[RunResult], timeout: float,
               check: Callable[[], None]) -> None:
        """Follow the runs until each has ended, printing each task as it ends; fail with
        the failed tasks' errors if a run failed. ``check`` is called on the way."""
        started = time.monotonic()
        last_said = started
        pending = list(runs)
        run_read: dict[tuple[str, str], float] = {}
        while pending:
            self.check()
            check()
            for result in list(pending):
                self._update(result, run_read)
                if result.state in ("success", "failed"):
                    pending.remove(result)
                    say(f"   {result.label}: {result.dag_id} run {result.run_id}: "
                        f"{result.state.upper()} in {seconds(result.duration)}")
            if not pending:
                break
            elapsed = time.monotonic() - started
            if elapsed > timeout:
                raise Failed(f"{', '.join(r.dag_id + ' run ' + r.run_id for r in pending)} "
                             f"did not end within {timeout:.0f} s: "
                             + "; ".join(_states(r) for r in pending)
                             + "".join(tail(p, 15) for p in self.log_paths()))
            if time.monotonic() - last_said > 30:
                for result in pending:
                    say(f"   ... {seconds(elapsed)}: waiting for {result.dag_id} run "
                        f"{result.run_id}: {_states(result)}")
                last_said = time.monotonic()
            time.sleep(POLL_S)
        failed = [r for r in runs if not r.succeeded]
        if failed:
            raise Failed("\n".join(self.describe_failure(r) for r in failed))

    def _update(self, result: RunResult, run_read: dict[tuple[str, str], float]) -> None:
        """The run's tasks, printing those that changed; the run itself when they changed or
        have all finished (a run ends only then), else every ``RUN_EVERY_S``: ``run_read``
        has when each run was read."""
        tasks: dict[str, str] = {}  # as the run has them now: a mapped task's instances
        # replace it once expanded, and get their names (merge[conn]) once rendered
        for ti in self.task_instances(result.dag_id, result.run_id):
            task, state = str(ti["task_id"]), str(ti["state"] or "none")
            index = ti.get("map_index")
            if index is not None and index >= 0:  # a mapped instance: dblog_merge's merge[conn]
                task += f"[{ti.get('rendered_map_index') or index}]"
            if result.tasks.get(task) != state and state in SHOWN:
                took = f" ({seconds(float(ti['duration']))})" if ti.get("duration") else ""
                say(f"   {result.label}: {result.dag_id}.{task}: {state}{took}")
            tasks[task] = state
        changed, result.tasks = tasks != result.tasks, tasks
        now = time.monotonic()
        if changed or (tasks and set(tasks.values()) <= FINISHED) or \
                now - run_read.get((result.dag_id, result.run_id), 0.0) >= RUN_EVERY_S:
            run = self.run(result.dag_id, result.run_id)
            run_read[(result.dag_id, result.run_id)] = now
            result.state = str(run["state"])
            result.duration = float(run.get("duration") or 0.0)

    def describe_failure(self, result: RunResult) -> str:
        """The run's failed tasks, each with its log file and the errors in it."""
        lines = [f"{result.dag_id} run {result.run_id} ended {result.state}: {_states(result)}"]
        for ti in self.task_instances(result.dag_id, result.run_id):
            if ti["state"] not in ("failed", "up_for_retry"):
                continue
            path = self.task_log(result.dag_id, result.run_id, str(ti["task_id"]),
                                 max(1, int(ti.get("try_number") or 1)))
            lines.append(f"   task {ti['task_id']} failed; its log: {path}")
            lines += [f"     {line}" for line in log_errors(path)]
        return "\n".join(lines)


def _quote(run_id: str) -> str:
    return urllib.parse.quote(run_id, safe="")


def _states(result: RunResult) -> str:
    if not result.tasks:
        return f"run {result.state}, no task started yet"
    return f"run {result.state}; " + ", ".join(f"{t} {s}" for t, s in result.tasks.items())


def log_errors(path: Path, limit: int = 12) -> list[str]:
    """The error lines of a task's log (JSON lines), with their exceptions; else its end."""
    try:
        text = path.read_text(errors="replace")
    except OSError as exc:
        return [f"(no log: {exc.strerror})"]
    found: list[str] = []
    plain: list[str] = []
    for line in text.splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            plain.append(line)
            continue
        if not isinstance(entry, dict):
            continue
        message = str(entry.get("event", ""))
        plain.append(message)
        if entry.get("level") not in ("error", "critical"):
            continue
        for detail in entry.get("error_detail") or []:
            message += f": {detail.get('exc_type')}: {detail.get('exc_value')}"
        found.append(message)
    return (found or plain)[-limit:]
