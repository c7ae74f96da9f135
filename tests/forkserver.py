"""``dblog`` commands as processes forked from one that has imported the worker already.

A test starts ``dblog run`` hundreds of times; a new interpreter importing the worker (pyarrow,
numpy, redis, psycopg, the capture packages) costs 1.2 s of CPU each time on the 2-core
machine, more than most of those workers then spend capturing. The fork server imports them
once per test process and forks a child per command: a real process of its own (its pid,
signals, kill -9, exit status, environment, working directory and output file), running
``dblog_worker.cli.main`` as ``python -m dblog_worker`` does. What a fork cannot show, the
interpreter's start, is tested where it matters: ``tests/integration/test_cli_errors.py``,
the benchmarks, the quickstart and Airflow start ``dblog`` as users do, and
``DBLOG_TESTS_FORK=0`` runs every command that way.

Protocol (one Unix-socket connection per command): the test sends one JSON line (argv, env,
cwd, output files), the server answers ``pid N`` once the child runs, then ``exit C`` when it
has ended (C as ``Popen.returncode``: the exit status, or minus the signal that ended it).
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import json
import os
import select
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

ROOT = Path(__file__).resolve().parents[1]

# What every command needs, imported once by the server (the worker's own start imports).
PRELOAD = ("dblog_worker.capture.worker", "dblog_worker.http.server", "dblog_worker.logs",
           "dblog_worker.pg.source", "dblog_worker.mysql.source")


def enabled() -> bool:
    return os.environ.get("DBLOG_TESTS_FORK", "1") != "0"


class Forked:
    """The part of ``subprocess.Popen`` the tests use, for a child of the fork server."""

    def __init__(self, args: list[str], conn: socket.socket) -> None:
        self.args = args
        self._conn = conn
        self._buffer = b""
        self._lock = threading.Lock()
        self.returncode: int | None = None
        first = self._line(None)
        if first is None or not first.startswith("pid "):
            raise RuntimeError(f"the fork server did not start {args}: {first!r}")
        self.pid = int(first.split()[1])

    def poll(self) -> int | None:
        return self._collect(0)

    def wait(self, timeout: float | None = None) -> int:
        code = self._collect(timeout)
        if code is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0)
        return code

    def _collect(self, timeout: float | None) -> int | None:
        with self._lock:
            if self.returncode is None:
                line = self._line(timeout)
                if line is None:
                    return None
                if not line.startswith("exit "):
                    raise RuntimeError(f"the fork server lost {self.args} (pid {self.pid})")
                self.returncode = int(line.split()[1])
                self._conn.close()
            return self.returncode

    def _line(self, timeout: float | None) -> str | None:
        """The server's next line, or None when none came within ``timeout``."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while b"\n" not in self._buffer:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not select.select([self._conn], [], [], left)[0]:
                return None
            chunk = self._conn.recv(4096)
            if not chunk:
                return ""
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line.decode()

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class _Client:
    """The test process's fork server, started at its first command, ended with the process."""

    _lock = threading.Lock()
    _server: subprocess.Popen[bytes] | None = None
    _path = ""

    @classmethod
    def connect(cls) -> socket.socket:
        with cls._lock:
            if cls._server is None or cls._server.poll() is not None:
                cls._start()
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.connect(cls._path)
        return conn

    @classmethod
    def _start(cls) -> None:
        cls._path = os.path.join(tempfile.mkdtemp(prefix="dblog-fork-"), "socket")
        env = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}  # no BLAS threads across fork()
        server = subprocess.Popen([sys.executable, "-m", "tests.forkserver", cls._path],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=ROOT,
                                  env=env)
        assert server.stdout is not None
        ready = server.stdout.readline()
        if ready != b"ready\n":
            server.kill()
            raise RuntimeError(f"the fork server did not start: {ready!r}")
        cls._server = server
        atexit.register(cls._stop, server)

    @staticmethod
    def _stop(server: subprocess.Popen[bytes]) -> None:
        assert server.stdin is not None
        server.stdin.close()  # the server ends when its input does
        with contextlib.suppress(subprocess.TimeoutExpired):
            server.wait(5)


def spawn(argv: Sequence[str], stdout: Path, stderr: Path | None = None,
          env: dict[str, str] | None = None, cwd: Path = ROOT) -> Forked:
    """``python -m dblog_worker *argv`` forked, its output appended to ``stdout`` (and
    ``stderr``, or the same file), with this process's environment unless ``env``."""
    for path in (stdout, stderr):
        if path is not None:
            path.open("ab").close()  # there once this returns, as Popen's output files are
    conn = _Client.connect()
    request = {"argv": list(argv), "env": dict(os.environ if env is None else env),
               "cwd": str(cwd), "stdout": str(stdout),
               "stderr": str(stderr) if stderr is not None else None}
    conn.sendall(json.dumps(request).encode() + b"\n")
    return Forked(["dblog", *argv], conn)


def run(argv: Sequence[str], timeout: float) -> subprocess.CompletedProcess[str]:
    """``subprocess.run(..., capture_output=True, text=True, timeout=...)`` of a forked
    ``dblog`` command."""
    with tempfile.TemporaryDirectory(prefix="dblog-cli-") as tmp:
        out, err = Path(tmp) / "out", Path(tmp) / "err"
        child = spawn(argv, out, err)
        try:
            code = child.wait(timeout)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
            raise
        return subprocess.CompletedProcess(child.args, code, out.read_text(errors="replace"),
                                           err.read_text(errors="replace"))


# -- the server ----------------------------------------------------------------------------


def _child(request: dict[str, Any], closing: Sequence[Any]) -> None:
    """In the forked child: become ``python -m dblog_worker ARGV``; never returns."""
    code = 1
    try:
        signal.set_wakeup_fd(-1)
        for sig in (signal.SIGCHLD, signal.SIGTERM):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        for thing in closing:
            thing.close()
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT
        out = os.open(request["stdout"], flags, 0o644)
        err = os.open(request["stderr"], flags, 0o644) if request["stderr"] else out
        null = os.open(os.devnull, os.O_RDONLY)
        for fd, target in ((null, 0), (out, 1), (err, 2)):
            os.dup2(fd, target)
        for fd in {null, out, err}:
            os.close(fd)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        sys.argv = [str(ROOT / "dblog_worker" / "__main__.py"), *request["argv"]]
        code = _main(request["argv"])
    except BaseException:  # the child must end here, whatever happened
        with contextlib.suppress(BaseException):
            traceback.print_exc()
    finally:
        with contextlib.suppress(BaseException):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def _main(argv: list[str]) -> int:
    """What the interpreter does around ``sys.exit(main())``: the exit code of SystemExit,
    non-daemon threads joined, atexit functions run."""
    from dblog_worker.cli import main

    try:
        code = main(argv)
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            code = exc.code or 0
        else:
            print(exc.code, file=sys.stderr)
            code = 1
    except KeyboardInterrupt:
        traceback.print_exc()
        code = 130
    except BaseException:  # as the interpreter: a traceback, status 1
        traceback.print_exc()
        code = 1
    threading._shutdown()  # type: ignore[attr-defined]  # joins non-daemon threads
    import atexit as exits

    exits._run_exitfuncs()
    return code


def serve(path: str) -> None:
    import importlib

    from dblog_worker.cli import without_pandas

    without_pandas()  # as `dblog run` does before its imports
    for name in PRELOAD:
        importlib.import_module(name)
    # The imports frozen: the children's garbage collections never go through them (nor
    # write to their pages, which the children share with this process until then).
    gc.collect()
    gc.freeze()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C of the test run: its tests end us
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ)
    selector.register(sys.stdin, selectors.EVENT_READ)
    selector.register(wake_r, selectors.EVENT_READ)
    children: dict[int, socket.socket] = {}
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    while True:
        for key, _ in selector.select():
            if key.fileobj is sys.stdin:
                if not os.read(0, 4096):
                    return  # the test process ended
            elif key.fileobj is listener:
                conn, _ = listener.accept()
                try:
                    request = _request(_read_line(conn))
                except ValueError as exc:  # the server serves on; the sender is told why
                    with contextlib.suppress(OSError):
                        conn.sendall(f"error {' '.join(str(exc).split())}\n".encode())
                    conn.close()
                    continue
                closing: list[IO[Any] | socket.socket | selectors.BaseSelector] = [
                    listener, selector, conn, *children.values()]
                pid = os.fork()
                if pid == 0:
                    os.close(wake_r)
                    os.close(wake_w)
                    _child(request, closing)
                conn.sendall(f"pid {pid}\n".encode())
                children[pid] = conn
            else:
                os.read(wake_r, 4096)
        _reap(children)


def _request(line: bytes) -> dict[str, Any]:
    """A command's request, checked: argv, env, cwd, stdout and stderr."""
    try:
        request = json.loads(line)
    except ValueError as exc:
        raise ValueError(f"a request is one JSON line: {exc}") from None
    if not (isinstance(request, dict) and isinstance(request.get("argv"), list)
            and isinstance(request.get("env"), dict) and isinstance(request.get("cwd"), str)
            and isinstance(request.get("stdout"), str)
            and isinstance(request.get("stderr"), str | None)):
        raise ValueError("a request needs argv (list), env (object), cwd, stdout (strings) "
                         "and stderr (string or null)")
    return request


def _read_line(conn: socket.socket) -> bytes:
    data = b""
    while not data.endswith(b"\n"):
        chunk = conn.recv(65536)
        if not chunk:
            break
        data += chunk
    return data


def _reap(children: dict[int, socket.socket]) -> None:
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        conn = children.pop(pid, None)
        if conn is not None:
            with contextlib.suppress(OSError):
                conn.sendall(f"exit {os.waitstatus_to_exitcode(status)}\n".encode())
            conn.close()


if __name__ == "__main__":
    serve(sys.argv[1])
