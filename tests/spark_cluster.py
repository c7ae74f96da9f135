"""A Spark standalone cluster for the test suite: one master and one worker on loopback.

PySpark's pip package has no ``sbin/start-master.sh`` / ``start-worker.sh`` (only the
history server's scripts), so both daemons run in the foreground through its
``bin/spark-class`` (``org.apache.spark.deploy.master.Master`` and
``org.apache.spark.deploy.worker.Worker``), as direct children of the test process, each in
its own session with a parent-death signal, stopped with SIGTERM (then SIGKILL).

The daemons get a bare environment: ``PATH=/usr/bin:/bin``, ``SPARK_HOME`` (the pip
package's ``pyspark`` folder), ``SPARK_LOCAL_IP`` and their private directories; no
``PYTHONPATH``, no virtualenv. Executors inherit the worker's environment, so nothing of
dblog (nor the virtualenv's Python) is within their reach unless the job ships it.
"""

from __future__ import annotations

import atexit
import json
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any, Self

import pyspark

from tests.services import (
    HOST,
    START_TIMEOUT,
    ServiceError,
    _die_with_parent,
    _stop_process,
    _tail,
    free_port,
    refuse_in_fast_runs,
)
from tests.spark_jvm import jvm_opts, spark_submit_opts

__all__ = ["SparkStandalone"]

SPARK_HOME = Path(pyspark.__file__).resolve().parent
BARE_PATH = "/usr/bin:/bin"


class SparkStandalone:
    """A master and one worker (``cores`` cores, ``memory`` of executor memory)."""

    def __init__(self, cores: int = 2, memory: str = "1g") -> None:
        refuse_in_fast_runs("a Spark standalone cluster")
        self.cores = cores
        self.memory = memory
        self.base: Path | None = None
        self.port = 0
        self.webui_port = 0
        self._procs: list[subprocess.Popen[bytes]] = []

    @property
    def master_url(self) -> str:
        return f"spark://{HOST}:{self.port}"

    @property
    def work_dir(self) -> Path:
        """The worker's directory: one ``app-*/<executor id>/`` per executor it ran."""
        if self.base is None:
            raise ServiceError("SparkStandalone has not been started")
        return self.base / "work"

    def log(self, name: str) -> str:
        return _tail(self.base / f"{name}.log", 60) if self.base else ""

    def start(self) -> Self:
        if self.base is not None:
            raise ServiceError("SparkStandalone already started")
        self.base = Path(tempfile.mkdtemp(prefix="dblog-spark-"))
        atexit.register(self.stop)
        try:
            self.port, self.webui_port = free_port(), free_port()
            self._launch("master", "org.apache.spark.deploy.master.Master",
                         "--host", HOST, "--port", str(self.port),
                         "--webui-port", str(self.webui_port))
            self._wait(lambda state: True, "the master to answer")
            self.work_dir.mkdir()
            self._launch("worker", "org.apache.spark.deploy.worker.Worker",
                         "--host", HOST, "--port", str(free_port()),
                         "--webui-port", str(free_port()), "--cores", str(self.cores),
                         "--memory", self.memory, "--work-dir", str(self.work_dir),
                         self.master_url)
            self._wait(lambda state: any(w.get("state") == "ALIVE"
                                         for w in state.get("workers", [])),
                       "the worker to register with the master")
        except BaseException:
            self.stop()
            raise
        return self

    def state(self) -> dict[str, Any]:
        """The master's JSON status page (workers, running and completed applications)."""
        url = f"http://{HOST}:{self.webui_port}/json/"
        with urllib.request.urlopen(url, timeout=5) as response:
            value: dict[str, Any] = json.load(response)
        return value

    def stop(self) -> None:
        for proc in reversed(self._procs):
            _stop_process(proc, [signal.SIGTERM])
        self._procs = []
        atexit.unregister(self.stop)
        if self.base is not None:
            shutil.rmtree(self.base, ignore_errors=True)
            self.base = None

    def _environment(self) -> dict[str, str]:
        assert self.base is not None
        return {
            "PATH": BARE_PATH,
            "HOME": str(self.base),
            "SPARK_HOME": str(SPARK_HOME),
            "SPARK_LOCAL_IP": HOST,
            "SPARK_LOG_DIR": str(self.base),
            "SPARK_PID_DIR": str(self.base),
            "SPARK_WORKER_DIR": str(self.base / "work"),
            "SPARK_DAEMON_MEMORY": "512m",
            "SPARK_DAEMON_JAVA_OPTS": jvm_opts(SPARK_HOME),  # tests/spark_jvm.py
            "SPARK_LAUNCHER_OPTS": spark_submit_opts(SPARK_HOME),
        }

    def _launch(self, name: str, main_class: str, *args: str) -> None:
        assert self.base is not None
        with open(self.base / f"{name}.log", "ab") as log:
            self._procs.append(subprocess.Popen(
                [str(SPARK_HOME / "bin" / "spark-class"), main_class, *args],
                cwd=self.base, env=self._environment(), stdin=subprocess.DEVNULL,
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                preexec_fn=_die_with_parent(signal.SIGTERM),
            ))

    def _wait(self, ready: Callable[[dict[str, Any]], bool], what: str) -> None:
        deadline = time.monotonic() + START_TIMEOUT * 2
        while time.monotonic() < deadline:
            for proc, name in zip(self._procs, ("master", "worker"), strict=False):
                if proc.poll() is not None:
                    raise ServiceError(f"the Spark {name} exited with {proc.returncode};"
                                       f" log tail:\n{self.log(name)}")
            try:
                if ready(self.state()):
                    return
            except (urllib.error.URLError, OSError, ValueError) as exc:
                self.last_error = exc  # the master's UI not up yet: asked again
            time.sleep(0.2)
        raise ServiceError(f"timed out waiting for {what}; master log:\n{self.log('master')}"
                           f"\nworker log:\n{self.log('worker')}")
