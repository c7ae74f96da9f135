"""The fork server gives the tests' ``dblog`` commands what a process started by Popen has:
its own pid, its exit status or the signal that ended it, the environment and output files
it was given, a timeout that kills it."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

from tests import forkserver


def _silent_redis(tmp_path: Path) -> tuple[Path, socket.socket]:
    """A configuration whose Redis accepts connections and never answers: a command that
    asks it something waits (redis-py's 5 s socket timeout)."""
    listener = socket.create_server(("127.0.0.1", 0))
    config = tmp_path / "dblog.toml"
    config.write_text('[source]\nname = "shop"\ndsn = "host=127.0.0.1 port=1 dbname=x"\n'
                      'tables = ["public.orders"]\n[redis]\n'
                      f'url = "redis://127.0.0.1:{listener.getsockname()[1]}/0"\n'
                      f'[landing]\npath = "{tmp_path / "landing"}"\n')
    return config, listener


def test_a_command_runs_in_a_process_of_its_own(tmp_path: Path) -> None:
    out = tmp_path / "out.log"
    child = forkserver.spawn(["--help"], out)
    assert child.pid != os.getpid()
    assert child.wait(30) == 0
    assert child.poll() == 0
    assert "usage: dblog" in out.read_text()


def test_exit_status_stderr_and_environment(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DBLOG_CONFIG", str(tmp_path / "missing.toml"))
    result = forkserver.run(["status"], timeout=30)
    assert result.returncode == 2
    assert f"{tmp_path / 'missing.toml'} does not exist" in result.stderr
    assert result.stdout == ""
    monkeypatch.delenv("DBLOG_CONFIG")
    result = forkserver.run(["status"], timeout=30)  # the variable is gone in the child too
    assert "no configuration file" in result.stderr


def test_a_signal_ends_the_child_with_its_number(tmp_path: Path) -> None:
    log = tmp_path / "worker.log"
    config, listener = _silent_redis(tmp_path)
    child = forkserver.spawn(["wait", "--config", str(config), "r1", "--timeout", "600"], log)
    assert log.exists()
    time.sleep(0.5)
    assert child.poll() is None
    with pytest.raises(subprocess.TimeoutExpired):
        child.wait(0.2)
    child.send_signal(signal.SIGKILL)
    assert child.wait(10) == -signal.SIGKILL
    child.kill()  # ended already: nothing happens
    listener.close()


def test_run_kills_a_command_past_its_timeout(tmp_path: Path) -> None:
    config, listener = _silent_redis(tmp_path)
    with listener, pytest.raises(subprocess.TimeoutExpired):
        forkserver.run(["wait", "--config", str(config), "r1", "--timeout", "600"], timeout=1)


def test_a_bad_request_is_refused_and_the_server_serves_on(tmp_path: Path) -> None:
    for bad in (b"not json\n", b'{"argv": "run"}\n'):
        with forkserver._Client.connect() as conn:
            conn.sendall(bad)
            answer = conn.makefile("r").readline()
        assert answer.startswith("error a request"), answer
    result = forkserver.run(["--help"], timeout=30)
    assert result.returncode == 0 and "usage: dblog" in result.stdout
