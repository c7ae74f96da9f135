"""Fixtures of the chaos suite: the source backends (as in the scenario suite) on a
persistent Redis of their own, and the report of what each scenario did."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from dblog_worker.landing.s3_objects import S3Location
from tests.chaos.cluster import Report
from tests.integration.harness import Backend, MariaDatabase, PgDatabase
from tests.services import MariaDBServer, PostgresServer, RedisServer, SeaweedServer

REPORT = "chaos report"  # tests/conftest.py prints these lines in a section at the end


@pytest.fixture(scope="session")
def chaos_redis() -> Iterator[RedisServer]:
    """A Redis that keeps its data when restarted (append-only file); the chaos tests
    restart it, so it is not the session's Redis of the other suites."""
    with RedisServer(persistent=True).start() as server:
        yield server


@pytest.fixture
def chaos_redis_url(chaos_redis: RedisServer) -> str:
    """URL of the chaos Redis, flushed before the test."""
    if not chaos_redis.running:  # a previous test stopped it
        chaos_redis.restart()
    with redis.Redis.from_url(chaos_redis.url) as client:
        client.flushall()
    return chaos_redis.url


@pytest.fixture(params=["postgresql", "mariadb"])
def backend(request: pytest.FixtureRequest, chaos_redis_url: str, tmp_path: Path) -> Backend:
    """The scenario suite's view of a source (tests/integration/harness.py); tests that
    need only one kind parametrize it indirectly, and those that concern the landing zone
    add ``postgresql-s3``: a PostgreSQL source landing in a bucket of SeaweedFS."""
    if request.param in ("postgresql", "postgresql-s3"):
        postgres: PostgresServer = request.getfixturevalue("postgres_server")
        location = None
        if request.param == "postgresql-s3":
            server: SeaweedServer = request.getfixturevalue("seaweed_server")
            bucket = request.getfixturevalue("s3_bucket")
            location = S3Location.parse(f"s3://{bucket}/landing", endpoint=server.endpoint,
                                        path_style=True)
        return Backend(PgDatabase(request.getfixturevalue("pg_dsn")), chaos_redis_url,
                       tmp_path, postgres.restart, s3=location)
    mariadb: MariaDBServer = request.getfixturevalue("mariadb_server")
    return Backend(MariaDatabase(mariadb, request.getfixturevalue("mariadb_database")),
                   chaos_redis_url, tmp_path, mariadb.restart)


@pytest.fixture
def report(request: pytest.FixtureRequest) -> Iterator[Report]:
    result = Report(request.node)
    yield result
    line = result.line()
    print(f"{REPORT} {line}")
    request.node.user_properties.append((REPORT, line))

