"""Fixtures of the integration suites: a source of each kind, and worker processes."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.integration.harness import Backend, MariaDatabase, PgDatabase, WorkerProcess, Workers
from tests.services import MariaDBServer, PostgresServer


@pytest.fixture(params=["postgresql", "mariadb"])
def backend(request: pytest.FixtureRequest, redis_url: str, tmp_path: Path) -> Backend:
    """A fresh database of each source kind (test ids name it), with Redis and a landing
    zone; modules that test one kind only define their own."""
    if request.param == "postgresql":
        postgres: PostgresServer = request.getfixturevalue("postgres_server")
        return Backend(PgDatabase(request.getfixturevalue("pg_dsn")), redis_url, tmp_path,
                       postgres.restart)
    mariadb: MariaDBServer = request.getfixturevalue("mariadb_server")
    return Backend(MariaDatabase(mariadb, request.getfixturevalue("mariadb_database")),
                   redis_url, tmp_path, mariadb.restart)


@pytest.fixture
def worker_process(backend: Backend) -> Iterator[Callable[..., WorkerProcess]]:
    """Starts ``dblog run`` processes, killed at the end of the test."""
    with Workers(backend.tmp / "worker.log") as workers:
        yield workers.start
