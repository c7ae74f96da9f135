"""Every ``dblog`` command against broken configurations and unreachable servers: one line
that says what is wrong (naming the option, never a value), the exit status of
docs/cli.md (2: the configuration cannot be used; 3: a server is unreachable, try again),
never a traceback. ``dblog run`` retries an unreachable server forever (docs/cli.md): its
log says why on one line a time, and it stops at SIGTERM."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from dblog_worker.cli import main
from tests.integration.harness import ROOT, wait_for
from tests.services import MariaDBServer, free_port

# Every command of `dblog --help`, with the arguments it needs besides --config.
COMMANDS: dict[str, list[str]] = {
    "run": [], "preflight": [], "dump": ["--all"], "list": [], "show": ["dump-1"],
    "wait": ["dump-1", "--timeout", "5"], "pause": ["dump-1"], "resume": ["dump-1"],
    "cancel": ["dump-1"], "set": ["dump-1", "--chunk-size", "10"], "status": [],
    "reset": ["--yes"], "merge": [], "verify": [], "landing": ["status"],
}
SECRET = "Pw-9f3c02d1"  # in every DSN: it must never be printed


def closed_port() -> int:
    return free_port()  # nothing listens there: connections are refused at once


def configuration(**changes: Any) -> dict[str, Any]:
    """A PostgreSQL source's configuration whose servers are all unreachable; ``changes``
    are ``section__option`` (``source__dsn``, ``source__replica``) values (None removes
    it), or ``section=None`` to leave a section out."""
    data: dict[str, Any] = {
        "source": {"name": "shop", "kind": "postgresql", "tables": ["public.orders"],
                   "dsn": f"host=127.0.0.1 port={closed_port()} dbname=shop user=dblog "
                          f"password={SECRET}"},
        "redis": {"url": f"redis://:{SECRET}@127.0.0.1:{closed_port()}/0"},
        "landing": {"path": "LANDING"},
        "http": {"listen": f"127.0.0.1:{free_port()}"},  # tests run side by side
        "target": {"kind": "postgresql",
                   "dsn": f"host=127.0.0.1 port={closed_port()} dbname=t user=m "
                          f"password={SECRET}"},
    }
    for name, value in changes.items():
        section, _, option = name.partition("__")
        if not option:  # a whole section
            data.pop(section)
        elif value is None:
            data[section].pop(option, None)
        else:
            data[section][option] = value
    return data


def toml(data: dict[str, Any]) -> str:
    lines: list[str] = []

    def table(name: str, values: dict[str, Any]) -> None:
        lines.append(f"[{name}]")
        nested = {k: v for k, v in values.items() if isinstance(v, dict)}
        lines.extend(f"{k} = {json.dumps(v)}" for k, v in values.items() if k not in nested)
        for key, value in nested.items():
            table(f"{name}.{key}", value)

    for name, values in data.items():
        table(name, values)
    return "\n".join(lines) + "\n"


def write(tmp_path: Path, data: dict[str, Any] | str, name: str = "dblog.toml") -> Path:
    path = tmp_path / name
    text = data if isinstance(data, str) else toml(data)
    path.write_text(text.replace("LANDING", str(tmp_path / "landing")))
    return path


def mysql(**changes: Any) -> dict[str, Any]:
    return configuration(**{"source__kind": "mysql", "source__tables": ["shop.orders"],
                            "source__dsn": f"mysql://dblog:{SECRET}@127.0.0.1:{closed_port()}",
                            **changes})


# (what is broken, the configuration file's text or data, what the line must say)
BROKEN: list[tuple[str, dict[str, Any] | str | None, str]] = [
    ("no file", None, "configuration file {path} does not exist"),
    ("not TOML", "[source\nname = 'shop'\n", "configuration file {path} is not valid TOML: "),
    ("an unknown option", configuration(source__tabels=["public.orders"]),
     "unknown option source.tabels; did you mean tables?"),
    ("a misspelt libpq option", configuration(source__dsn="host=db sslmod=require"),
     "source.dsn is not a valid libpq connection string: unknown option 'sslmod'; did you "
     "mean sslmode?"),
    ("a misspelt option of a libpq URL",
     configuration(source__dsn=f"postgresql://u:{SECRET}@db/shop?sslmod=require"),
     "unknown option 'sslmod'; did you mean sslmode?"),
    ("a libpq port that is no number",
     configuration(source__dsn=f"host=db port=abc password={SECRET}"),
     "source.dsn: option port must be a number from 1 to 65535"),
    ("a libpq URL's port that is no number",
     configuration(source__dsn=f"postgresql://u:{SECRET}@db:abc/shop"),
     "source.dsn: option port must be a number from 1 to 65535"),
    ("port 0", configuration(source__dsn="host=db port=0"), "source.dsn: option port must be"),
    ("a timeout that is no number",
     configuration(source__dsn="host=db connect_timeout=soon"),
     "source.dsn: option connect_timeout must be a whole number"),
    ("an sslmode libpq does not know", configuration(source__dsn="host=db sslmode=on"),
     "source.dsn: option sslmode must be one of disable, allow, prefer, require, "
     "verify-ca, verify-full"),
    ("more ports than hosts", configuration(source__dsn="host=a,b port=1,2,3"),
     "source.dsn: option port lists 3 ports and host 2 host(s)"),
    ("a host name as hostaddr", configuration(source__dsn="hostaddr=db.internal"),
     "source.dsn: option hostaddr must be IP addresses"),
    ("a replica's port", configuration(source__replica={"dsn": "host=r port=x"}),
     "source.replica.dsn: option port must be"),
    ("the target's port", configuration(target__dsn=f"host=w port=5432x password={SECRET}"),
     "target.dsn: option port must be"),
    ("a misspelt MySQL parameter",
     mysql(source__dsn=f"mysql://u:{SECRET}@db?sslmod=require"),
     "source.dsn: unknown parameter 'sslmod' (did you mean sslmode?)"),
    ("a MySQL port that is no number", mysql(source__dsn=f"mysql://u:{SECRET}@db:abc"),
     "source.dsn: the port of a MySQL DSN is a number from 1 to 65535"),
    ("MySQL port 0", mysql(source__dsn=f"mysql://u:{SECRET}@db:0"),
     "source.dsn: the port of a MySQL DSN is a number from 1 to 65535"),
    ("a MySQL target's port",
     configuration(target__kind="mysql", target__dsn=f"mysql://u:{SECRET}@w:99999"),
     "target.dsn: the port of a MySQL DSN is a number from 1 to 65535"),
    ("a Redis port that is no number",
     configuration(redis__url=f"redis://:{SECRET}@127.0.0.1:abc/0"),
     "redis.url is not a valid URL (a port from 0 to 65535?)"),
    ("Redis port 0", configuration(redis__url=f"redis://:{SECRET}@127.0.0.1:0/0"),
     "redis.url: the port is a number from 1 to 65535 and the path the database number"),
    ("a Redis database that is no number",
     configuration(redis__url=f"redis://:{SECRET}@127.0.0.1:6379/zero"),
     "redis.url: the port is a number from 1 to 65535 and the path the database number"),
    ("a Redis option redis-py does not know",
     configuration(redis__url=f"redis://:{SECRET}@127.0.0.1:6379/0?timeout=5"),
     "redis.url: redis-py does not know the query parameter timeout"),
    ("a Redis option of the wrong type",
     configuration(redis__url=f"redis://:{SECRET}@127.0.0.1:6379/0?socket_timeout=soon"),
     "redis.url: Invalid value for 'socket_timeout' in connection URL"),
    ("no [target] for merge and verify", configuration(target=None),
     "MERGE_VERIFY"),
]


def run_cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """``dblog`` in this process (fast), but ``run`` as a child: a worker that starts on a
    configuration it should have refused would not return."""
    if argv[0] == "run":
        try:
            done = subprocess.run([sys.executable, "-m", "dblog_worker", *argv],
                                  capture_output=True, text=True, timeout=30, cwd=ROOT)
        except subprocess.TimeoutExpired as exc:
            raise AssertionError(f"dblog run started: {exc.stderr!r}") from None
        return done.returncode, done.stdout, done.stderr
    status = main(argv)
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_the_commands_here_are_every_command() -> None:
    shown = subprocess.run([sys.executable, "-m", "dblog_worker", "--help"],
                           capture_output=True, text=True, timeout=60, cwd=ROOT, check=True)
    listed = re.findall(r"^    ([a-z]+)\b", shown.stdout, re.MULTILINE)
    assert set(listed) == set(COMMANDS), shown.stdout


@pytest.mark.parametrize(("case", "text", "expected"), BROKEN, ids=[c[0] for c in BROKEN])
def test_a_broken_configuration_is_one_line_and_exit_2_for_every_command(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str,
        text: dict[str, Any] | str | None, expected: str) -> None:
    path = tmp_path / "missing.toml" if text is None else write(tmp_path, text)
    commands = COMMANDS
    if expected == "MERGE_VERIFY":  # only these two need the section
        commands = {c: COMMANDS[c] for c in ("merge", "verify")}
        expected = ("this command needs a [target] section: the database to merge into "
                    "(see docs/configuration.md#target-the-merged-tables)")
    for command, arguments in commands.items():
        status, out, err = run_cli([command, *arguments, "--config", str(path)], capsys)
        assert (status, out) == (2, ""), (command, status, out, err)
        assert err.startswith("error: ") and err.count("\n") == 1, (command, err)
        assert expected.format(path=path) in err, (command, err)
        assert SECRET not in err and "Traceback" not in err, (command, err)


def test_without_a_configuration_the_line_names_the_option_and_the_variable(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DBLOG_CONFIG", raising=False)
    for command, arguments in COMMANDS.items():
        status, out, err = run_cli([command, *arguments], capsys)
        assert (status, out) == (2, ""), (command, err)
        assert err == ("error: no configuration file: give --config FILE, or set the "
                       "environment variable $DBLOG_CONFIG to its path\n"), command


def test_dump_help_shows_each_default_and_range() -> None:
    shown = subprocess.run([sys.executable, "-m", "dblog_worker", "dump", "--help"],
                           capture_output=True, text=True, timeout=60, cwd=ROOT, check=True)
    text = " ".join(shown.stdout.split())
    for option, default in (("--chunk-size N", "(default 5000; 1-100,000)"),
                            ("--delay-ms MS", "(default 0; 0-3,600,000)"),
                            ("--parallelism P", "(default 1: one chunk per window; 1-8)"),
                            ("--max-chunk-ms MS", "(default 0: off; 0-3,600,000)"),
                            ("--max-active-sessions N", "(default 0: off; 0-100,000)"),
                            ("--max-replica-lag-ms MS", "(default 0: off; 0-86,400,000)"),
                            ("--max-log-lag-mb MIB", "(default 0: off; 0-1,048,576)")):
        assert re.search(re.escape(option) + r" [^-]*" + re.escape(default), text), option
    assert "$DBLOG_CONFIG" in text


# -- unreachable servers ------------------------------------------------------------------


def dblog(config: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "dblog_worker", *args, "--config", str(config)],
                          capture_output=True, text=True, timeout=timeout, cwd=ROOT)


def assert_unreachable(result: subprocess.CompletedProcess[str], *names: str) -> None:
    """Exit 3 and one line ``error: …`` (the last of stderr: merge's Spark may log before
    it) that names what is unreachable, no secret, no traceback."""
    output = result.stdout + result.stderr
    assert result.returncode == 3, output
    lines = result.stderr.splitlines()
    assert lines and lines[-1].startswith("error: "), output
    assert sum(line.startswith("error: ") for line in lines) == 1, output
    assert all(name in lines[-1] for name in names), (names, lines[-1])
    assert SECRET not in output and "Traceback" not in output, output


@pytest.fixture
def reachable(pg_dsn: str, redis_url: str) -> dict[str, str]:
    """A PostgreSQL source with its table, and Redis, both up."""
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE public.orders (id bigint PRIMARY KEY, note text)")
        conn.execute("ALTER TABLE public.orders REPLICA IDENTITY FULL")
    return {"source__dsn": pg_dsn, "redis__url": redis_url}


@pytest.fixture
def stopped_mariadb() -> Iterator[int]:
    """The port of a MariaDB server that was started, then stopped: nothing listens."""
    with MariaDBServer().start() as server:
        port = server.port
    yield port


def test_an_unreachable_postgresql_source(tmp_path: Path, redis_url: str) -> None:
    config = write(tmp_path, configuration(redis__url=redis_url))
    for command in ("preflight", "dump", "verify"):
        result = dblog(config, command, *COMMANDS[command])
        assert_unreachable(result, "source database", "Connection refused")
    check_run_retries(config, "session ended: ", "the source database is unreachable")


def test_an_unreachable_mariadb_source(tmp_path: Path, redis_url: str,
                                       stopped_mariadb: int) -> None:
    config = write(tmp_path, mysql(redis__url=redis_url,
                                   source__dsn=f"mysql://dblog:{SECRET}@127.0.0.1:"
                                               f"{stopped_mariadb}"))
    for command in ("preflight", "dump", "verify"):
        result = dblog(config, command, *COMMANDS[command])
        assert_unreachable(result, "source database", "Can't connect to MySQL server")
    check_run_retries(config, "session ended: ", "the source database is unreachable")


def test_unreachable_redis(tmp_path: Path, reachable: dict[str, str]) -> None:
    config = write(tmp_path, configuration(source__dsn=reachable["source__dsn"]))
    for command in ("dump", "list", "show", "wait", "pause", "resume", "cancel", "set",
                    "status", "reset"):
        result = dblog(config, command, *COMMANDS[command])
        assert_unreachable(result, "Redis is unreachable", "[redis] url")
    check_run_retries(config, "cannot read the lease: Redis is unreachable", "[redis] url")


@pytest.mark.parametrize("kind", ["postgresql", "mysql"])
def test_an_unreachable_target(tmp_path: Path, reachable: dict[str, str], kind: str,
                               stopped_mariadb: int) -> None:
    target = (f"mysql://m:{SECRET}@127.0.0.1:{stopped_mariadb}" if kind == "mysql"
              else configuration()["target"]["dsn"])
    config = write(tmp_path, configuration(**reachable, target__kind=kind,
                                           target__dsn=target))
    assert_unreachable(dblog(config, "verify"), "target database")
    assert_unreachable(dblog(config, "merge"), "target database")


def check_run_retries(config: Path, *expected: str) -> None:
    """``dblog run``: the failure on one line of its log (no traceback), retried until
    SIGTERM, then exit 0."""
    log_path = config.with_suffix(".log")
    with log_path.open("wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "dblog_worker", "run", "--config",
                                 str(config)], stdout=log, stderr=subprocess.STDOUT,
                                cwd=ROOT, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        wait_for(lambda: all(e in log_path.read_text() for e in expected), 60,
                 f"the worker to log {expected}", log_path.read_text)
        assert proc.poll() is None, log_path.read_text()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0, log_path.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = log_path.read_text()
    assert "Traceback" not in text and SECRET not in text, text
    lines = [line for line in text.splitlines() if all(e in line for e in expected)]
    assert lines, text
    assert all(re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} WARNING ", line)
               for line in lines), text  # each one line of its own, no continuation
    assert all(not line.startswith(("\t", " ")) for line in text.splitlines()), text
