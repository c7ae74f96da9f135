"""Shared fixtures: throwaway PostgreSQL, MariaDB and Redis servers (see tests/services.py),
and a local Spark with the JDBC drivers (tests/spark_local.py).

Servers start lazily, on the first test that asks for them, once per session.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
import redis
from hypothesis import settings
from pyspark.sql import SparkSession

from tests.services import MariaDBServer, PostgresServer, RedisServer
from tests.spark_local import local_spark

# No per-example deadline: the machines are shared and noisy, and speed is measured by the
# benchmarks (bench/), not by tests; a slow example is not a wrong one.
settings.register_profile("dblog", deadline=None)
settings.load_profile("dblog")


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
def spark() -> Iterator[SparkSession]:
    """One local[2] SparkSession for the whole run (its JVM takes seconds to start)."""
    with local_spark() as session:
        yield session


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
