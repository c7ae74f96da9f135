"""Bad input at the edges: a DSN or Redis URL that does not parse never shows its password
(in the ConfigError, nor in what ``dblog`` prints); a table name that is not
``schema.table`` (``database.table``) is refused by every command that takes one. The CLI
runs as a subprocess, as an operator runs it; nothing here reaches a server."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from dblog_worker.cli import main as cli_main
from dblog_worker.config import parse
from dblog_worker.errors import ConfigError
from tests.integration.harness import ROOT, cli

SECRET = "XyzzySecret"  # every case hides a password that contains it
PIECES = ("Xyzzy", "Secret")

BASE = {
    "source": {"name": "shop", "dsn": "host=db dbname=shop user=dblog",
               "tables": ["public.orders"]},
    "redis": {"url": "redis://127.0.0.1:1/0"},
    "landing": {"path": "/nonexistent/landing"},
}

# (kind of the databases, where the bad string goes, the string)
CASES = [
    ("postgresql", "source.dsn", f"host=db user=u password=Xyzzy {SECRET}"),
    ("postgresql", "source.dsn", f"host=db password='{SECRET} dbname=x"),
    ("postgresql", "source.dsn", f"postgresql://u:Xyzzy {SECRET}@db/shop"),
    ("postgresql", "source.dsn", f"postgresql://u:Xyzzy%zz{SECRET}@db/shop"),
    ("postgresql", "source.dsn", f"postgresql://u:{SECRET}@db/shop?{SECRET}=1"),
    ("postgresql", "source.replica.dsn", f"host=replica password=Xyzzy {SECRET}"),
    ("postgresql", "target.dsn", f"host=warehouse password=Xyzzy {SECRET}"),
    ("postgresql", "redis.url", f"http://:{SECRET}@cache:6379/0"),
    ("postgresql", "redis.url", f"redis://:{SECRET}@cache:port/0"),
    ("postgresql", "redis.url", f"redis://:{SECRET}@cache:99999/0"),
    ("postgresql", "redis.url", f"redis://user:{SECRET}"),  # no @host: the password is a port
    ("postgresql", "redis.url", f"redis://:{SECRET}@[cache/0"),
    ("mysql", "source.dsn", f"mysql://u:{SECRET}@db:99999"),
    ("mysql", "source.dsn", f"mysql://u:{SECRET}@[db"),
    ("mysql", "source.dsn", f"http://u:{SECRET}@db"),
    ("mysql", "target.dsn", f"mysql://u:{SECRET}@warehouse:3306/db?x=1"),
    ("mysql", "source.dsn", f"mysql://u:{SECRET}"),  # no @host: the password is a port
]


def configuration(kind: str, where: str, text: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(json.dumps(BASE))
    if kind == "mysql":
        data["source"].update(kind="mysql", dsn="mysql://dblog@db:3306", tables=["shop.orders"])
    target_dsn = "mysql://m@warehouse:3306" if kind == "mysql" else "host=warehouse dbname=r"
    data["target"] = {"kind": kind, "dsn": target_dsn}
    section, _, key = where.rpartition(".")
    if section == "source.replica":
        data["source"]["replica"] = {key: text}
    else:
        data[section][key] = text
    return data


def toml(data: dict[str, Any]) -> str:
    """``data`` (tables of strings and lists of strings, one level of subtables) as TOML."""
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


@pytest.mark.parametrize(("kind", "where", "text"), CASES)
def test_a_dsn_that_does_not_parse_never_shows_its_password(kind: str, where: str,
                                                            text: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse(configuration(kind, where, text), {})
    message = str(info.value)
    assert where in message, message
    assert not any(piece in message for piece in PIECES), message


@pytest.mark.parametrize(("kind", "where", "text"), [
    CASES[0], CASES[6], CASES[8], CASES[10], CASES[-1]])
def test_dblog_prints_one_error_line_without_the_password(
        tmp_path: Path, kind: str, where: str, text: str) -> None:
    config = tmp_path / "dblog.toml"
    config.write_text(toml(configuration(kind, where, text)))
    result = cli(config, "status", check=False)
    output = result.stdout + result.stderr
    assert not any(piece in output for piece in PIECES), output
    assert result.stdout == "" and result.stderr.startswith("error: "), output
    assert result.stderr.count("\n") == 1 and where in result.stderr, output
    assert result.returncode == 2  # docs/cli.md: a configuration that cannot be used


def test_dsn_env_and_password_env_of_the_wrong_type(tmp_path: Path) -> None:
    config = tmp_path / "dblog.toml"
    config.write_text(toml(BASE).replace('tables = ', "password_env = []\ntables = ", 1))
    result = cli(config, "status", check=False)
    assert result.returncode == 2, result.stderr
    assert result.stderr == ("error: source.password_env must name an environment variable, "
                             'like "SHOP_DB_PASSWORD", got []\n')


COMMANDS = [["verify"], ["verify", "--keys-out", "KEYS"], ["merge"], ["merge", "--print-command"],
            ["dump"]]


@pytest.mark.parametrize(("command", "kind", "bad"), [
    *[(command, kind, "nodot") for command in COMMANDS for kind in ("postgresql", "mysql")],
    *[(["verify"], "postgresql", bad) for bad in (".orders", "public.", "a" * 64 + ".t")],
    (["merge"], "postgresql", "a" * 64 + ".t"),
])
def test_commands_refuse_a_table_name_of_the_wrong_form(
        tmp_path: Path, command: list[str], kind: str, bad: str) -> None:
    config = tmp_path / "dblog.toml"
    config.write_text(toml(configuration(kind, "redis.url", "redis://127.0.0.1:1/0")))
    command = [str(tmp_path / "keys-{table}.json") if c == "KEYS" else c for c in command]
    result = cli(config, *command, "--table", bad, check=False)
    form = "database.table" if kind == "mysql" else "schema.table"
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stdout == "", result.stdout
    assert result.stderr.startswith(f"refused: table: {bad!r}"), result.stderr
    assert result.stderr.count("\n") == 1, result.stderr
    if "." not in bad.strip(".") or bad.startswith(".") or bad.endswith("."):
        assert f"must be qualified: {form}" in result.stderr
    else:
        assert "PostgreSQL names are at most 63 bytes" in result.stderr
    assert not list(tmp_path.glob("keys-*"))


def test_the_spark_job_refuses_a_table_name_of_the_wrong_form(tmp_path: Path) -> None:
    config = tmp_path / "dblog.toml"
    config.write_text(toml(configuration("postgresql", "redis.url", "redis://127.0.0.1:1/0")))
    result = subprocess.run(
        [sys.executable, "spark/merge.py", "--config", str(config), "--table", "nodot"],
        capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr == ("refused: table: 'nodot' must be qualified: schema.table (split "
                             "at the first dot: a table name may contain dots, a schema or "
                             "database name may not)\n")



def test_landing_commands_say_what_is_wrong_in_one_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
        ) -> None:
    """The store unreachable: exit 3, one line naming it (no traceback, no credential);
    retention without a [target]: exit 2."""
    bucket = {**BASE, "landing": {"path": "s3://bucket/prefix",
                                  "s3": {"endpoint": "http://127.0.0.1:9", "path_style": True}}}
    config = tmp_path / "s3.toml"
    config.write_text(toml(bucket))
    for name, value in {"AWS_ACCESS_KEY_ID": "dblogkey", "AWS_SECRET_ACCESS_KEY": SECRET,
                        "AWS_EC2_METADATA_DISABLED": "true", "AWS_MAX_ATTEMPTS": "1"}.items():
        monkeypatch.setenv(name, value)
    for action in ("status", "compact", "retain"):
        assert cli_main(["landing", action, "--config", str(config)]) == 3
        err = capsys.readouterr().err
        assert err.startswith("error: cannot reach the landing zone s3://bucket/prefix"), err
        assert err.count("\n") == 1 and SECRET not in err, err
    folder = tmp_path / "folder.toml"
    folder.write_text(toml({**BASE, "landing": {"path": str(tmp_path / "landing")}}))
    assert cli_main(["landing", "retain", "--config", str(folder)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: retention needs the [target] section"), err
