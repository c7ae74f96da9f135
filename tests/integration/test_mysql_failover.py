"""A failover to a promoted MariaDB replica, with the worker's Redis and landing zone kept.

The positions in the output come from one server's binary log; a promoted replica's
binary log numbers its events otherwise, even where its GTIDs are the same. The worker
recognizes the checkpoint of another server and refuses to resume from it, with the
steps to take (docs/runbooks/mysql-failover.md); the steps, followed as printed, bring
the output back in sync with the new primary.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pymysql
import pytest

from dblog_worker.mysql.checkpoint import BinlogCheckpoint
from tests.integration.harness import (
    SOURCE,
    Backend,
    MariaDatabase,
    Workers,
    assert_converged,
    checkpoint,
    cli,
    dump,
    events_of,
    wait_for,
    wait_request,
    write_config,
)
from tests.services import MariaDBServer


def admin(server: MariaDBServer, *statements: str) -> list[tuple[Any, ...]]:
    with pymysql.connect(**server.connect_args()) as conn, conn.cursor() as cursor:
        for statement in statements:
            cursor.execute(statement)
        return list(cursor.fetchall())


@pytest.fixture
def primary() -> Iterator[MariaDBServer]:
    with MariaDBServer(settings={"server-id": "11"}).start() as server:
        yield server


@pytest.fixture
def replica(primary: MariaDBServer) -> Iterator[MariaDBServer]:
    """A replica of ``primary`` by GTID, logging what it applies."""
    with MariaDBServer(settings={"server-id": "12", "log-slave-updates": ""}).start() as server:
        admin(server, f"CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT={primary.port}, "
                      "MASTER_USER='root', MASTER_USE_GTID=slave_pos", "START SLAVE")
        yield server


def caught_up(primary: MariaDBServer, replica: MariaDBServer) -> None:
    (position,) = admin(primary, "SELECT @@gtid_binlog_pos")[0]
    (waited,) = admin(replica, f"SELECT MASTER_GTID_WAIT('{position}', 30)")[0]
    assert waited == 0, "the replica did not catch up"


def test_failover_to_a_promoted_replica(
    primary: MariaDBServer, replica: MariaDBServer, redis_url: str, tmp_path: Path
) -> None:
    """Capture from the primary; the primary dies; the replica, promoted, takes writes;
    the worker, pointed at it with the same Redis and landing zone, stops (exit 1) and
    says what happened and what to do, landing nothing. Done as it says (FLUSH BINARY
    LOGS, `dblog reset`, start, `dblog dump --all`), the output equals the new primary's
    table, without time travel, and the checkpoint names the new server."""
    admin(primary, "CREATE DATABASE shop")
    old, new = MariaDatabase(primary, "shop"), MariaDatabase(replica, "shop")
    table = old.table("items")
    old.create_test_table(table)
    config = write_config(tmp_path, primary.url(), redis_url, [table], name=SOURCE,
                          kind="mariadb")
    backend = Backend(new, redis_url, tmp_path, replica.restart)
    with Workers(tmp_path / "worker.log") as workers:
        worker = workers.start(config)
        for id_ in range(1, 6):
            old.execute(f"INSERT INTO {table} VALUES ({id_}, NEXTVAL(versions), 'primary')")
        wait_for(lambda: len(events_of(backend, table)) == 5, 30, "the primary's inserts",
                 worker.log)
        caught_up(primary, replica)
        assert worker.stop() == 0
        saved = checkpoint(redis_url)
        assert saved is not None and BinlogCheckpoint.decode(saved).server == "server_id=11"
        primary.kill()
        admin(replica, "STOP SLAVE", "RESET SLAVE ALL", "FLUSH BINARY LOGS")  # promoted
        new.execute(f"UPDATE {table} SET version = NEXTVAL(versions), payload = 'replica' "
                    "WHERE id = 2")
        new.execute(f"INSERT INTO {table} VALUES (6, NEXTVAL(versions), 'replica')")

        config = write_config(tmp_path, replica.url(), redis_url, [table], name=SOURCE,
                              kind="mariadb")
        refused = workers.start(config, streaming=False)
        wait_for(lambda: not refused.alive(), 30, "the worker to stop", refused.log)
        assert refused.proc is not None and refused.proc.returncode == 1
        log = refused.log()
        assert ("was taken on another server (server_id=11); this one is server_id=12"
                in log), log[-3000:]
        assert "docs/runbooks/mysql-failover.md" in log and "Traceback" not in log
        assert len(events_of(backend, table)) == 5
        assert checkpoint(redis_url) == saved

        flushes = re.search(r"run FLUSH BINARY LOGS (\d+) time", log)
        assert flushes is not None, log[-3000:]
        admin(replica, *["FLUSH BINARY LOGS"] * int(flushes.group(1)))
        cli(config, "reset", "--yes", "--force")
        worker = workers.start(config)
        request_id = dump(config, "--all")
        state = wait_request(redis_url, SOURCE, request_id, ["completed", "failed"], 30, worker)
        assert state["state"] == "completed", state
        new.execute(f"DELETE FROM {table} WHERE id = 3")
        assert_converged(backend, table)
        wait_for(lambda: "server_id=12" in (checkpoint(redis_url) or ""), 15,
                 "a checkpoint of the new server", worker.log)
