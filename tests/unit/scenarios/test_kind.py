"""Adding a database is one package and one registry line: the worker runs on the fake kind,
which the product does not ship, once a fixture adds ``kinds.REGISTRY["fake"]``."""

from __future__ import annotations

import pytest

from dblog_worker import config, kinds
from dblog_worker.errors import ConfigError
from tests.unit.scenarios.capture import Capture, items_table

SHIPPED = set(kinds.REGISTRY)  # as the product registers them, before any fixture ran


def test_the_product_does_not_ship_the_fake_kind() -> None:
    assert "fake" not in SHIPPED and {"postgresql", "mysql"} <= SHIPPED
    with pytest.raises(ConfigError, match="'fake' is not supported"):
        config.parse({"source": {"name": "src", "kind": "fake", "dsn": "fake:x",
                                 "tables": ["a.b"]},
                      "redis": {"url": "redis://localhost"}, "landing": {"path": "/tmp/x"}}, {})


def test_the_worker_captures_a_kind_added_by_one_registry_line(capture: Capture) -> None:
    assert set(kinds.REGISTRY) == SHIPPED | {"fake"}
    items_table(capture.db, "a.b", 3)
    capture.tables = ["a.b"]
    capture.start()
    capture.db.write("a.b", {"id": 40, "version": 1, "payload": "new"})
    with capture.db.transaction() as tx:
        tx.delete("a.b", (10,))
        tx.update("a.b", (20,), {"id": 25, "version": 2})
    capture.assert_converged()
    ops = [(e["op"], e["key"]) for e in capture.events("a.b")]
    assert ops == [("c", "[40]"), ("d", "[10]"), ("d", "[20]"), ("c", "[25]")]
    capture.wait_completed(capture.dump("all", chunk_size=2))
    capture.assert_converged("a.b")


def test_bad_options_of_the_fake_kind_are_refused(capture: Capture) -> None:
    capture.tables = ["a.b"]
    capture.source_extra = {"unseen": "yes"}
    with pytest.raises(ConfigError, match=r"source\.unseen must be true or false"):
        capture.config()
    capture.source_extra = {"dsn": "memory:x"}
    with pytest.raises(ConfigError, match="fake:<database name>"):
        capture.config()
