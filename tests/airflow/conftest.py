"""Fixtures for the Airflow provider (plugins/dblog_airflow) and the DAGs (dags/).

At import, before anything imports Airflow, this points Airflow at a private home for
the session (a temporary directory removed at exit)::

    AIRFLOW_HOME                      <tmp>/airflow-home (airflow.cfg, airflow.db, logs)
    AIRFLOW__CORE__LOAD_EXAMPLES      False
    AIRFLOW__CORE__DAGS_FOLDER        <repo>/dags
    AIRFLOW__CORE__PLUGINS_FOLDER     <repo>/plugins
    AIRFLOW__DATABASE__SQL_ALCHEMY_CONN  sqlite:///<tmp>/airflow-home/airflow.db

Fixtures (the Redis, PostgreSQL and Spark ones of tests/conftest.py apply too):

``airflow_home`` (session)
    The AIRFLOW_HOME directory.
``airflow_db`` (session)
    A migrated SQLite metadata database, once per session (a copy of the one ``airflow db
    migrate`` made once: tests/airflow/metadata_db.py). Only what touches the metadata
    database needs it, e.g. ``dag.test()``; hooks, operators, sensors and triggers read
    connections from the environment.
``dblog_connection`` (function)
    A factory: ``dblog_connection(redis_url, source, config=None, *, conn_id="dblog_default",
    password=None, login=None) -> conn_id`` defines a ``dblog`` connection for the test
    (``AIRFLOW_CONN_<ID>`` as JSON: no database needed; removed after the test). The Redis
    URL's host, port and database become the connection's fields.
``spark_connection`` (function)
    ``spark_default`` as ``{"conn_type": "spark", "host": "local[2]"}`` for the test;
    returns its id.
``log_text`` (function)
    A function returning everything logged in the test so far: the standard library's
    records (``caplog``, from DEBUG) and what Airflow's structlog loggers printed (the
    ``self.log`` of hooks, operators, sensors and triggers writes to stdout, not to
    ``logging``).
``pg_target`` (function)
    The DSN of another fresh database of the session PostgreSQL (a merge target), dropped
    after the test.
``task_context`` (function)
    A factory: ``task_context(dag_id="dag", run_id="run", task_id="task", map_index=-1)``
    gives the part of an Airflow task context that the provider's operators read (``ti``
    with dag_id, run_id, task_id, map_index, try_number; ``run_id``; ``params``), for
    calling ``operator.execute(context)`` directly.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, Protocol, cast
from urllib.parse import urlsplit

import pytest

from tests.airflow.metadata_db import migrated
from tests.services import PostgresServer
from tests.spark_jvm import FAST_JVM

ROOT = Path(__file__).resolve().parents[2]

_BASE = Path(tempfile.mkdtemp(prefix="dblog-airflow-tests-"))
atexit.register(shutil.rmtree, _BASE, ignore_errors=True)
AIRFLOW_HOME = _BASE / "airflow-home"
AIRFLOW_HOME.mkdir()
os.environ.update({
    "AIRFLOW_HOME": str(AIRFLOW_HOME),
    "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
    "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"),
    "AIRFLOW__CORE__PLUGINS_FOLDER": str(ROOT / "plugins"),
    "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{AIRFLOW_HOME / 'airflow.db'}",
})

if TYPE_CHECKING:
    from airflow.sdk import Context


class DblogConnection(Protocol):
    def __call__(self, redis_url: str, source: str, config: str | Path | None = None, *,
                 conn_id: str = "dblog_default", password: str | None = None,
                 login: str | None = None, extra: dict[str, Any] | None = None) -> str: ...


@pytest.fixture(scope="session")
def airflow_home() -> Path:
    return AIRFLOW_HOME


@pytest.fixture(scope="session")
def airflow_db(airflow_home: Path) -> Path:
    """The migrated metadata database (SQLite), once per session."""
    return migrated(airflow_home / "airflow.db")


def connection_env_name(conn_id: str) -> str:
    return f"AIRFLOW_CONN_{conn_id.upper()}"


@pytest.fixture
def dblog_connection(monkeypatch: pytest.MonkeyPatch) -> DblogConnection:
    def define(redis_url: str, source: str, config: str | Path | None = None, *,
               conn_id: str = "dblog_default", password: str | None = None,
               login: str | None = None, extra: dict[str, Any] | None = None) -> str:
        url = urlsplit(redis_url)
        fields: dict[str, Any] = {
            "conn_type": "dblog", "host": url.hostname, "port": url.port,
            "schema": url.path.strip("/") or "0",
            "extra": {"source": source, **({"config": str(config)} if config else {}),
                      **(extra or {})},
        }
        if password is not None:
            fields["password"] = password
        if login is not None:
            fields["login"] = login
        monkeypatch.setenv(connection_env_name(conn_id), json.dumps(fields))
        return conn_id

    return define


@pytest.fixture
def spark_connection(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv(connection_env_name("spark_default"),
                       json.dumps({"conn_type": "spark", "host": "local[2]"}))
    return "spark_default"


@pytest.fixture
def log_text(caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
             ) -> Callable[[], str]:
    caplog.set_level(logging.DEBUG)
    printed: list[str] = []

    def text() -> str:
        out, err = capfd.readouterr()
        printed.append(out + err)
        return caplog.text + "".join(printed)

    return text




def target_sections(target_dsn: str) -> str:
    """The [target] and [merge] sections of a worker configuration whose merge runs on the
    venv's Spark (local, with the JDBC jars) into the PostgreSQL ``target_dsn``."""
    from tests.spark_local import jdbc_jars

    return f"""
[target]
kind = "postgresql"
dsn = {json.dumps(target_dsn)}

[merge]
jars = {json.dumps([str(j) for j in jdbc_jars()])}

[merge.spark_conf]
"spark.ui.enabled" = "false"
"spark.sql.shuffle.partitions" = "4"
"spark.driver.extraJavaOptions" = "{FAST_JVM}"
"""


@pytest.fixture
def pg_target(postgres_server: PostgresServer) -> Iterator[str]:
    name = f"t_{uuid.uuid4().hex[:16]}"
    yield postgres_server.create_database(name)
    postgres_server.drop_database(name)


@pytest.fixture
def task_context() -> Callable[..., Context]:
    def make(dag_id: str = "dag", run_id: str = "run", task_id: str = "task",
             map_index: int = -1, params: dict[str, Any] | None = None) -> Context:
        ti = SimpleNamespace(dag_id=dag_id, run_id=run_id, task_id=task_id,
                             map_index=map_index, try_number=1)
        return cast("Context", {"ti": ti, "task_instance": ti, "run_id": run_id,
                                "params": params or {}})

    return make
