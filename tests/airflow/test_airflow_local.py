"""scripts/airflow-local: the environment it gives Airflow next to ``./scripts/quickstart --keep``,
and that Airflow's own CLI, in that environment, lists the five DAGs without import errors.

``airflow standalone`` itself is not started here (it runs until Ctrl-C); the command after
``--`` runs in the same environment instead.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from tests.airflow.conftest import ROOT

SCRIPT = ROOT / "scripts" / "airflow-local"


def demo_workdir(parent: Path, name: str = "dblog-quickstart-abc123") -> Path:
    """What ``scripts/quickstart.py`` leaves: a run directory with shop_pg.toml."""
    workdir = parent / name
    workdir.mkdir()
    (workdir / "shop_pg.toml").write_text("""\
[source]
name = "shop"
kind = "postgresql"
dsn = "host=127.0.0.1 port=1 dbname=shop user=postgres"
tables = ["public.customers", "public.orders"]

[redis]
url = "redis://:s3cret@127.0.0.1:6390/2"

[landing]
path = "/nonexistent/landing"

[target]
kind = "postgresql"
dsn = "host=127.0.0.1 port=1 dbname=shop_replica user=postgres"
""")
    return workdir


def run(*args: str, tmpdir: Path, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items()
               if not k.startswith(("AIRFLOW", "DBLOG_"))} | {"TMPDIR": str(tmpdir)}
    return subprocess.run([str(SCRIPT), *args], env=environ, capture_output=True, text=True,
                          timeout=timeout, cwd=tmpdir)


def test_the_environment_of_airflow(tmp_path: Path) -> None:
    workdir = demo_workdir(tmp_path)
    result = run("--", "env", tmpdir=tmp_path)  # finds the demo's configuration by itself
    assert result.returncode == 0, result.stderr
    env = dict(line.split("=", 1) for line in result.stdout.splitlines() if "=" in line)
    config = str(workdir / "shop_pg.toml")
    assert env["AIRFLOW_HOME"] == str(workdir / "airflow")
    assert env["AIRFLOW__CORE__DAGS_FOLDER"] == str(ROOT / "dags")
    assert env["AIRFLOW__CORE__PLUGINS_FOLDER"] == str(ROOT / "plugins")
    assert env["AIRFLOW__DBLOG__CONFIG"] == config
    assert json.loads(env["AIRFLOW_CONN_DBLOG_DEFAULT"]) == {
        "conn_type": "dblog", "host": "127.0.0.1", "port": 6390, "schema": "2",
        "password": "s3cret", "extra": {"source": "shop", "config": config}}
    assert json.loads(env["AIRFLOW_CONN_SPARK_DEFAULT"]) == {"conn_type": "spark",
                                                             "host": "local[2]"}
    assert env["PATH"].split(os.pathsep)[0] == str(ROOT / ".venv" / "bin")
    assert "s3cret" not in result.stderr
    assert (f"dblog_default: Redis 127.0.0.1:6390/2, source shop, config {config}"
            in result.stderr)


def test_the_newest_demo_or_the_one_given(tmp_path: Path) -> None:
    older = demo_workdir(tmp_path, "dblog-quickstart-older")
    newer = demo_workdir(tmp_path, "dblog-quickstart-newer")
    os.utime(older, (1_000_000_000, 1_000_000_000))
    assert f"AIRFLOW_HOME={newer / 'airflow'}\n" in run("--", "env", tmpdir=tmp_path).stdout
    given = run("--config", str(older / "shop_pg.toml"), "--", "env", tmpdir=tmp_path)
    assert f"AIRFLOW_HOME={older / 'airflow'}\n" in given.stdout


def test_without_a_demo_it_says_what_to_do(tmp_path: Path) -> None:
    result = run(tmpdir=tmp_path)
    assert result.returncode == 2
    assert "no configuration: start ./scripts/quickstart --keep first" in result.stderr
    assert run("--config", str(tmp_path / "nope.toml"), tmpdir=tmp_path).returncode == 2


def test_airflow_lists_the_dags_without_import_errors(tmp_path: Path) -> None:
    demo_workdir(tmp_path)
    result = run("--", "bash", "-c", "airflow db migrate >/dev/null"
                 " && airflow dags list --local -o json"
                 " && airflow dags list-import-errors --local -o json",
                 tmpdir=tmp_path, timeout=180)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    listed, errors = (json.loads(line) for line in result.stdout.splitlines()
                      if line.startswith("["))
    assert sorted(d["dag_id"] for d in listed) == [
        "dblog_backfill", "dblog_dump", "dblog_landing", "dblog_merge", "dblog_repair"]
    assert errors == []
