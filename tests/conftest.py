"""Shared fixtures: throwaway PostgreSQL, MariaDB and Redis servers (see tests/services.py),
and a local Spark with the JDBC drivers (tests/spark_local.py).

Servers start lazily, on the first test that asks for them, once per session.

Every test is marked by what it uses (:func:`pytest_collection_modifyitems`): ``pg``,
``mariadb``, ``redis``, ``spark``, ``airflow``, ``browser``, ``s3``, from the fixtures it
asks for (directly or through others), the source kinds and landing stores of its
parameters and the server classes its module names; ``slow`` by hand. ``scripts/test
--fast`` runs the tests with none of them.
"""

from __future__ import annotations

import gc
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import redis
from hypothesis import settings

from tests.services import (
    NO_SERVERS_ENV,
    MariaDBServer,
    PostgresServer,
    RedisServer,
    SeaweedServer,
)

if TYPE_CHECKING:  # pyspark only for the tests that use Spark
    from pyspark.sql import SparkSession

    from tests.lake import LakeSession

# No per-example deadline: the machines are shared and noisy, and speed is measured by the
# benchmarks (bench/), not by tests; a slow example is not a wrong one.
settings.register_profile("dblog", deadline=None)
# scripts/test --fast: the same properties, fewer examples (the full run tries the usual 100).
settings.register_profile("fast", deadline=None, max_examples=15)
settings.load_profile(os.environ.get("DBLOG_HYPOTHESIS", "dblog"))

TESTS = Path(__file__).parent
# What a test uses -> its marker: the fixtures it asks for, directly or through others ...
FIXTURE_MARKERS = {
    "postgres_server": "pg", "mariadb_server": "mariadb", "redis_server": "redis",
    "chaos_redis": "redis", "spark": "spark", "airflow_home": "airflow",
    "seaweed_server": "s3", "lake": "spark",
}
# ... the source kind and landing store of its parameters (the ``backend`` fixture's,
# a ``store`` fixture's) ...
KIND_MARKERS = {"postgresql": ("pg",), "mariadb": ("mariadb",), "mysql": ("mariadb",),
                "postgresql-s3": ("pg", "s3"), "s3": ("s3",)}
# ... and what its module names: the servers and Spark it starts itself.
MODULE_MARKERS = {
    "PostgresServer": "pg", "PostgresStandby": "pg", "SynchronousStandby": "pg",
    "MariaDBServer": "mariadb", "MariaDBReplica": "mariadb", "RedisServer": "redis",
    "SparkSession": "spark", "local_spark": "spark", "SparkStandalone": "spark",
    "CHROMIUM": "browser", "Browser": "browser", "SeaweedServer": "s3",
}
FOLDER_MARKERS = {"airflow": "airflow", "chaos": "slow"}


def markers_of(item: pytest.Item) -> set[str]:
    """The resource markers of a test, from what it uses."""
    found = {FIXTURE_MARKERS[name] for name in getattr(item, "fixturenames", ())
             if name in FIXTURE_MARKERS}
    callspec = getattr(item, "callspec", None)
    if callspec is not None:
        found.update(*(KIND_MARKERS[value] for value in callspec.params.values()
                       if isinstance(value, str) and value in KIND_MARKERS))
    module = getattr(item, "module", None)
    if module is not None:
        found |= {marker for name, marker in MODULE_MARKERS.items() if hasattr(module, name)}
    folder = Path(str(item.path)).relative_to(TESTS).parts[0]
    if folder in FOLDER_MARKERS:
        found.add(FOLDER_MARKERS[folder])
    return found


# Session-scoped fixtures that one worker should start once for every test that uses them,
# and their group: the lake tests' Spark 3.5 session (a JVM with the Iceberg and Delta jars)
# and the in-process local Spark (a JVM that costs CPU while it waits for the next test: on
# one worker, not on each).
SHARED_SESSION_GROUPS = {"lake": "lake-spark35", "spark": "spark-local"}


def _uses(item: pytest.Item, fixture: str) -> bool:
    info = getattr(item, "_fixtureinfo", None)
    return info is not None and fixture in info.names_closure


def shared_scope_group(item: pytest.Item, shared_modules: dict[Path, str]) -> str | None:
    """The ``xdist_group`` of a test that uses a module- or class-scoped fixture (a server,
    an Airflow, a Spark cluster of its module): its module's path, so that under
    ``pytest -n N --dist loadgroup`` (scripts/test) the module's tests run on one worker and
    start that fixture once; of a test that uses one of SHARED_SESSION_GROUPS, that group,
    whatever its module, and so too of the module's tests that would have had its module's
    group (``shared_modules``: a module's fixture then starts on one worker only). Other
    tests go to whichever worker is free."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return None
    for name, group in SHARED_SESSION_GROUPS.items():
        if name in info.names_closure:
            return group
    for definitions in info.name2fixturedefs.values():
        if any(d.scope in ("module", "class", "package") for d in definitions):
            return shared_modules.get(item.path) or str(Path(str(item.path)).relative_to(TESTS))
    return None


def shared_session_modules(items: list[pytest.Item]) -> dict[Path, str]:
    """The modules with a test in one of SHARED_SESSION_GROUPS: that group (the first)."""
    found: dict[Path, str] = {}
    for item in items:
        for name, group in SHARED_SESSION_GROUPS.items():
            if _uses(item, name):
                found.setdefault(item.path, group)
    return found


# Under pytest-xdist, the folders of long tests (a benchmark or a chaos scenario runs for a
# minute or more) go first, so that the workers end together instead of one finishing them
# while the others wait.
LONG_FIRST = ("bench", "chaos")


def long_first(item: pytest.Item) -> int:
    folder = Path(str(item.path)).relative_to(TESTS).parts[0]
    return LONG_FIRST.index(folder) if folder in LONG_FIRST else len(LONG_FIRST)


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the xdist_group markers
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get("PYTEST_XDIST_WORKER"):  # the same order in every worker
        items.sort(key=long_first)
    loadgroup = getattr(config.option, "loadgroup", False)  # set in pytest-xdist's workers
    shared_modules = shared_session_modules(items)
    for item in items:
        for marker in sorted(markers_of(item)):
            item.add_marker(marker)
        group = shared_scope_group(item, shared_modules)
        if group is not None and item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(group))
            if loadgroup:
                # --dist loadgroup schedules by the node id's "@group" suffix, which
                # pytest-xdist 3.8 writes where pytest 9 no longer reads it (._nodeid)
                from _pytest.nodeid import coerce_node_id

                item._id = coerce_node_id(f"{item.nodeid}@{group}")
    if not os.environ.get(NO_SERVERS_ENV) and any(map(starts_spark, items)):
        from tests import spark_jvm

        spark_jvm.prepare(*spark_jvm.homes())


def starts_spark(item: pytest.Item) -> bool:
    """The test may start a Spark JVM (a session that runs one sets SPARK_SUBMIT_OPTS and
    makes the class-data-sharing archives: tests/spark_jvm.py)."""
    return (any(item.get_closest_marker(m) for m in ("spark", "airflow"))
            or Path(str(item.path)).relative_to(TESTS).parts[0] == "bench")


def pytest_unconfigure(config: pytest.Config) -> None:
    from tests import spark_jvm

    spark_jvm.finish()


# Lines a test reports for the end of the run: a user property named "<something> report"
# (the chaos scenarios' figures) is printed in a section of that name after the run. Taken
# from the test reports, which under pytest-xdist reach the controlling process.
_report_lines: dict[str, list[str]] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == "teardown":  # a fixture's teardown adds the line before this report
        for name, value in report.user_properties:
            if name.endswith(" report"):
                _report_lines.setdefault(name, []).append(str(value))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    for name, lines in _report_lines.items():
        terminalreporter.section(name)
        for line in lines:
            terminalreporter.write_line(line)


@pytest.hookimpl(trylast=True)  # after the fixtures' teardown, before pytest's own (last)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """What a module's tests and fixtures left to the garbage collector is collected as its
    last test ends (after its fixtures' teardown, before pytest looks for unraisable
    exceptions): a connection or a response a test forgot to close then fails that module
    (ResourceWarning is an error here), not whichever later test the collector ran in. A
    hook, not an autouse fixture: a module-scoped fixture would put every test in its
    module's xdist group (shared_scope_group).

    What outlives that is frozen (``gc.freeze``): the imports, the session's fixtures and
    caches, which later collections then leave alone. A full collection went through all of
    them at each change of module (under pytest-xdist, every few tests), up to 1 s each: 15
    CPU s per worker in a 7-minute subset of the suite, 0.7 s frozen; a third of the CPU of
    the worker running the Spark and Airflow tests in a profile of the whole suite."""
    if nextitem is None or nextitem.path != item.path:
        gc.collect()
        gc.freeze()


def pytest_collection_finish(session: pytest.Session) -> None:
    """The imports of every test module, frozen (see pytest_runtest_teardown)."""
    gc.collect()
    gc.freeze()


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    with PostgresServer().start() as server:
        yield server


@pytest.fixture(scope="session")
def mariadb_server() -> Iterator[MariaDBServer]:
    with MariaDBServer().start() as server:
        yield server


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    with RedisServer().start() as server:
        yield server


@pytest.fixture(scope="session")
def seaweed_server() -> Iterator[SeaweedServer]:
    """A real S3-compatible store (SeaweedFS, built by scripts/install)."""
    with SeaweedServer().start() as server:
        yield server


@pytest.fixture
def s3_bucket(seaweed_server: SeaweedServer, monkeypatch: pytest.MonkeyPatch) -> str:
    """A fresh bucket of the session's SeaweedFS; its credentials in the environment (the
    way the worker and Spark find them)."""
    if not seaweed_server.running:  # a previous test killed it
        seaweed_server.restart()
    for name, value in seaweed_server.env().items():
        monkeypatch.setenv(name, value)
    return seaweed_server.create_bucket(f"t-{uuid.uuid4().hex[:20]}")


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """One local[2] SparkSession for the whole run (its JVM takes seconds to start)."""
    from tests.spark_local import local_spark

    with local_spark() as session:
        yield session


@pytest.fixture(scope="session")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LakeSession]:
    """One Spark 3.5 session with the Iceberg and Delta jars (tests/lake_session.py) that
    merges for every lake test of the worker: its JVM starts once."""
    from tests.lake import LakeSession

    session = LakeSession(tmp_path_factory.mktemp("lake-session") / "spark.log")
    try:
        yield session
    finally:
        session.close()


@pytest.fixture
def pg_dsn(postgres_server: PostgresServer) -> Iterator[str]:
    """DSN of a fresh database, dropped (with its replication slots) after the test."""
    if not postgres_server.running:  # a previous test stopped it
        postgres_server.restart()
    name = f"t_{uuid.uuid4().hex[:16]}"
    yield postgres_server.create_database(name)
    postgres_server.drop_database(name)


@pytest.fixture
def mariadb_database(mariadb_server: MariaDBServer) -> Iterator[str]:
    """Name of a fresh utf8mb4 database, dropped after the test."""
    if not mariadb_server.running:  # a previous test stopped or killed it
        mariadb_server.restart()
    name = f"t_{uuid.uuid4().hex[:16]}"
    yield mariadb_server.create_database(name)
    mariadb_server.drop_database(name)


@pytest.fixture
def redis_url(redis_server: RedisServer) -> Iterator[str]:
    """URL of the session Redis server, flushed before the test."""
    if not redis_server.running:  # a previous test killed it
        redis_server.restart()
    with redis.Redis.from_url(redis_server.url) as client:
        client.flushall()
    yield redis_server.url
