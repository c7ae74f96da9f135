"""The fake kind registered for these tests, and Redis as a fakeredis server in this process."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fakeredis
import pytest
import redis

from dblog_worker import kinds
from tests.fakedb import DATABASES, KIND, PACKAGE
from tests.unit.scenarios.capture import Capture


@pytest.fixture
def fake_kind(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The one registry line that adds a database kind, for this test."""
    monkeypatch.setitem(kinds.REGISTRY, KIND, PACKAGE)
    yield KIND
    DATABASES.clear()


@pytest.fixture
def fake_redis(monkeypatch: pytest.MonkeyPatch) -> fakeredis.FakeServer:
    """Every Redis client the worker opens (``redis.Redis.from_url``) talks to one
    in-process fakeredis server: no Redis server runs."""
    server = fakeredis.FakeServer()

    def from_url(cls: type[redis.Redis], url: str, /, **options: Any) -> redis.Redis:
        return fakeredis.FakeRedis(server=server,
                                   decode_responses=options.get("decode_responses", False))

    monkeypatch.setattr(redis.Redis, "from_url", classmethod(from_url))
    return server


@pytest.fixture
def capture(fake_kind: str, fake_redis: fakeredis.FakeServer, tmp_path: Path
            ) -> Iterator[Capture]:
    made = Capture(tmp_path)
    yield made
    if made.worker is not None and made.thread is not None and made.thread.is_alive():
        made.worker.stopping = True
        made.thread.join(15)
