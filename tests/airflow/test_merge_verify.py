"""merge_operator builds the spark-submit line `dblog merge` runs; run_verify compares real
PostgreSQL tables and returns the differing keys as a primary-key dump takes them."""

from __future__ import annotations

import json
import os
import sys
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

import psycopg
import pytest
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import Context
from airflow.sdk.exceptions import AirflowFailException
from dblog_airflow.merge import MERGED, DblogMergeOperator, merge_operator
from dblog_airflow.verify import run_verify

from dblog_worker import config as config_module
from dblog_worker.target.submit import job_path, spark_submit, submit_command
from tests.airflow.conftest import DblogConnection, target_sections
from tests.integration.harness import write_config
from tests.integration.test_merge_secrets import CommandLines
from tests.services import PostgresServer

SOURCE = "shop"
TARGET = '\n[target]\nkind = "postgresql"\ndsn = {dsn}\n'


FLAGS = ("--verbose",)  # spark-submit options that take no value


def options(argv: list[str]) -> tuple[list[tuple[str, str]], list[str]]:
    """spark-submit's ``--flag value`` pairs (sorted) before the application, and the rest."""
    pairs, index = [], 1
    while argv[index].startswith("--"):
        if argv[index] in FLAGS:
            pairs.append((argv[index], ""))
            index += 1
            continue
        pairs.append((argv[index], argv[index + 1]))
        index += 2
    return sorted(pairs), argv[index:]


def test_merge_submits_the_line_of_dblog_merge(
    tmp_path: Path, redis_url: str, dblog_connection: DblogConnection, spark_connection: str,
    task_context: Callable[..., Context],
) -> None:
    config_path = write_config(
        tmp_path, "host=127.0.0.1 dbname=shop user=dblog", redis_url, ["public.a", "public.b"],
        name=SOURCE, extra=TARGET.format(dsn='"host=127.0.0.1 dbname=replica user=merger"')
        + '\n[merge]\nspark_conf = { "spark.driver.memory" = "2g" }\n')
    dblog_connection(redis_url, SOURCE, config_path, conn_id="dblog_shop")
    op = merge_operator("merge", dblog_conn_id="{{ params.conn_id }}",
                        tables=["{{ params.table }}"], spark_conn_id=spark_connection)
    assert isinstance(op, SparkSubmitOperator) and isinstance(op, DblogMergeOperator)
    assert op.application == str(job_path())
    assert "pyspark" not in op.application  # the job file; PySpark is not imported
    op.render_template_fields(task_context(params={"conn_id": "dblog_shop",
                                                   "table": "public.a"}))
    assert (op.dblog_conn_id, op.tables) == ("dblog_shop", ["public.a"])

    config = config_module.load(config_path)
    master = op.spark_master()
    assert master == "local[2]"
    op.prepare(config, config_path, master)
    op.properties_file = str(tmp_path / "spark.properties")  # what execute writes
    argv = op._get_hook()._build_spark_submit_command(op.application)
    expected = submit_command(config, config_path, tables=["public.a"], master=master,
                              submit=spark_submit(), properties_file=tmp_path / "spark.properties")
    assert "spark.driver.memory=2g" not in argv  # merge.spark_conf: in the file only
    assert argv[0] == "spark-submit"  # by name, as Spark's hook runs it: found on the PATH
    assert Path(spark_submit()).parent in map(Path, op._search_path().split(os.pathsep))
    assert options(argv) == options(expected)
    assert (op.application_args or [])[-1] == "--table=public.a"  # never read as an option
    assert op.env_vars == {"PYSPARK_PYTHON": sys.executable,
                           "PYSPARK_DRIVER_PYTHON": sys.executable,
                           "SPARK_LOCAL_IP": "127.0.0.1"}


@pytest.mark.parametrize(("extra", "message"), [
    ("", r"needs a \[target\] section"),
    (TARGET.format(dsn='"dbname=replica"') + '[merge]\njars = ["/nonexistent/jdbc.jar"]\n',
     "JDBC driver jar.s. not found: /nonexistent/jdbc.jar"),
])
def test_merge_refuses_a_configuration_it_cannot_run(
    tmp_path: Path, redis_url: str, dblog_connection: DblogConnection, spark_connection: str,
    task_context: Callable[..., Context], extra: str, message: str,
) -> None:
    config_path = write_config(tmp_path, "dbname=shop", redis_url, ["public.a"], name=SOURCE,
                               extra=extra)
    dblog_connection(redis_url, SOURCE, config_path)
    with pytest.raises(AirflowFailException, match=message):
        merge_operator("merge").execute(task_context())


def test_merge_needs_the_configuration(redis_url: str, dblog_connection: DblogConnection,
                                       task_context: Callable[..., Context]) -> None:
    dblog_connection(redis_url, SOURCE)
    with pytest.raises(AirflowFailException, match="names no worker configuration"):
        merge_operator("merge").execute(task_context())


@pytest.fixture
def target_dsn(postgres_server: PostgresServer) -> Iterator[str]:
    name = f"t_{uuid.uuid4().hex[:16]}"
    yield postgres_server.create_database(name)
    postgres_server.drop_database(name)


def run(dsn: str, *statements: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        for statement in statements:
            conn.execute(statement.encode())


def test_run_verify_returns_the_keys_that_differ(
    tmp_path: Path, pg_dsn: str, target_dsn: str, redis_url: str,
    dblog_connection: DblogConnection,
) -> None:
    table = "CREATE TABLE items (id bigint PRIMARY KEY, name text)"
    run(pg_dsn, table, "INSERT INTO items SELECT i, 'item ' || i FROM generate_series(1, 5) i")
    run(target_dsn, table, "INSERT INTO items SELECT i, 'item ' || i FROM generate_series(1, 5) i",
        "DELETE FROM items WHERE id = 2", "UPDATE items SET name = 'changed' WHERE id = 3",
        "INSERT INTO items VALUES (9, 'extra')")
    config_path = write_config(tmp_path, pg_dsn, redis_url, ["public.items"], name=SOURCE,
                               extra=TARGET.format(dsn=json.dumps(target_dsn)))
    dblog_connection(redis_url, SOURCE, config_path)
    keys_dir = tmp_path / "keys"
    keys_dir.mkdir()
    keys_file = keys_dir / "public.items.keys.json"

    result = run_verify("dblog_default", '["public.items"]', keys_out_dir=str(keys_dir))
    assert result == {"equal": False, "tables": {"public.items": {
        "equal": False, "error": None, "missing": [2], "extra": [9], "changed": [3],
        "source_rows": 5, "target_rows": 5, "keys_file": str(keys_file)}}}
    assert json.loads(json.dumps(result)) == result
    assert json.loads(keys_file.read_text()) == [2, 3, 9]

    run(target_dsn, "INSERT INTO items VALUES (2, 'item 2')",
        "UPDATE items SET name = 'item 3' WHERE id = 3", "DELETE FROM items WHERE id = 9")
    result = run_verify("dblog_default", keys_out_dir=str(keys_dir))
    assert result["equal"] is True
    assert result["tables"]["public.items"]["keys_file"] is None
    assert not keys_file.exists()  # an old list is not replayed


def test_run_verify_refuses_a_table_not_captured(
        tmp_path: Path, redis_url: str, dblog_connection: DblogConnection) -> None:
    config_path = write_config(tmp_path, "dbname=shop", redis_url, ["public.items"],
                               name=SOURCE, extra=TARGET.format(dsn='"dbname=replica"'))
    dblog_connection(redis_url, SOURCE, config_path)
    with pytest.raises(AirflowFailException,
                       match=r"table public\.other is not captured by source"):
        run_verify("dblog_default", ["public.other"])


def test_the_merge_task_keeps_spark_conf_off_every_command_line(
    tmp_path: Path, pg_target: str, redis_url: str, dblog_connection: DblogConnection,
    spark_connection: str, task_context: Callable[..., Context],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The task writes merge.spark_conf to a properties file of its own (0600, removed at
    the end) after the DAG's properties_file; Spark applies both (its event log lists the
    settings), and no process's command line carries the secret."""
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temporary))  # where the task's folder goes
    events = tmp_path / "events"
    events.mkdir()
    (tmp_path / "landing").mkdir()
    secret = "S3-secret-Tz4n"
    extra = target_sections(pg_target) + (
        f'"spark.hadoop.fs.s3a.secret.key" = "{secret}"\n'
        f'"spark.eventLog.enabled" = "true"\n"spark.eventLog.dir" = "file://{events}"\n'
        '"spark.eventLog.compress" = "false"\n')
    config_path = write_config(tmp_path, "host=127.0.0.1 dbname=shop user=dblog", redis_url,
                               ["public.a"], name=SOURCE, extra=extra)
    dblog_connection(redis_url, SOURCE, config_path)
    given = tmp_path / "dag.properties"
    given.write_text("spark.dblog.from.dag=yes\n")
    op = merge_operator("merge", spark_conn_id=spark_connection,
                        properties_file=str(given))
    assert isinstance(op, DblogMergeOperator)
    context = task_context()
    context["outlet_events"] = cast(Any, {MERGED: None})  # no table changes: none is added
    with CommandLines(secret) as lines:
        report = op.execute(context)
    assert report is not None and report["ok"], report
    assert lines.seen == []
    assert any("java" in p for p in lines.processes), lines.processes
    text = "".join(f.read_text() for f in events.rglob("*") if f.is_file())
    settings = next(json.loads(line) for line in text.splitlines()
                    if '"SparkListenerEnvironmentUpdate"' in line)["Spark Properties"]
    names = set(settings if isinstance(settings, dict) else (n for n, _ in settings))
    assert {"spark.dblog.from.dag", "spark.hadoop.fs.s3a.secret.key",
            "spark.sql.shuffle.partitions"} <= names
    assert secret not in text  # Spark redacts it there by itself
    assert not list(temporary.glob("dblog-merge-*"))
