"""Tables captured by pattern, joining and leaving capture while the worker runs.

On both kinds of source: ``source.tables = ["<schema>.auto_*"]`` with an exclusion; a
table created at run time, written right after its creation (a bulk insert, and on
PostgreSQL a ``CREATE TABLE AS`` given a key afterwards), joins capture and, with
``dump_new_tables``, is dumped once; its output converges while it is written. A keyless
table and an excluded one are left out, and the status says why. A table renamed into the
pattern joins, the old name leaves; a dropped table leaves without an error loop, its
landed segments kept. Without ``dump_new_tables`` the status says a new table needs a
dump; on MariaDB the binary log carries its rows from its creation anyway. On
PostgreSQL, a transaction that wrote a new table before the table joined the publication
and commits after is in no log: the table's dump waits for it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg

from dblog_worker.landing.parquet import LandingZone
from dblog_worker.table_patterns import escape
from tests.integration.harness import (
    PARTITIONED,
    SOURCE,
    Backend,
    WorkerProcess,
    assert_converged,
    cli,
    redis_request,
    replay,
    wait_for,
    wait_request,
)


def _status(config: Path) -> dict[str, Any]:
    document: dict[str, Any] = json.loads(cli(config, "status", "--json").stdout)
    return document


def _captured(config: Path) -> dict[str, Any]:
    tables: dict[str, Any] = _status(config)["tables"]["captured"]
    return tables


def _config(backend: Backend, **options: str) -> Path:
    schema = backend.t1.split(".", 1)[0]
    lines = [f'exclude_tables = ["{escape(schema)}.auto_skip*"]', "rescan_interval_s = 0.3",
             *(f"{name} = {value}" for name, value in options.items())]
    return backend.config_path([f"{escape(schema)}.auto_*"],
                               source_extra=backend.source_extra + "\n" + "\n".join(lines))


def _bulk(backend: Backend, table: str, first: int, last: int) -> None:
    key, version, payload = backend.db.names
    backend.execute(f"INSERT INTO {backend.db.sql(table)} ({key}, {version}, {payload}) "
                    f"SELECT g, {backend.next_version}, 'bulk' FROM "
                    f"{backend.db.series(first, last)}")


def _create(backend: Backend, table: str, *, key: bool = True) -> None:
    """A test table created now (no rows), with or without a primary key."""
    if key:
        backend.create(table, 0)
        return
    backend.execute(f"CREATE TABLE {table} (id integer, version bigint, payload text)")


def _writes(backend: Backend, table: str, keys: range) -> None:
    with backend.connect() as session:
        for k in keys:
            session.run(backend.db.update(table), (k,))
        session.run(backend.db.delete(table), (keys[0],))


def test_tables_join_and_leave_capture(backend: Backend,
                                       worker_process: Callable[..., WorkerProcess]) -> None:
    db = backend.db
    a, b, renamed = db.table("auto_a"), db.table("auto_b"), db.table("auto_renamed")
    nokey, skipped = db.table("auto_nokey"), db.table("auto_skip1")
    backend.create(a, 50)
    backend.create(backend.t1, 5)  # matches no pattern
    config = _config(backend, dump_new_tables="true")
    worker = worker_process(config)

    captured = _captured(config)
    assert list(captured) == [a] and not captured[a]["joined"], captured
    assert "matches" in captured[a]["why"] and "auto_*" in captured[a]["why"]
    request = json.loads(cli(config, "dump", "--all", "--json").stdout)
    assert request["tables"] == [a]
    wait_request(backend.redis_url, SOURCE, request["id"], ["completed"], 60, worker)

    # a new table, written right after its creation, and two that are left out
    _create(backend, b)
    _bulk(backend, b, 1, 400)
    _create(backend, nokey, key=False)
    _create(backend, skipped)
    wait_for(lambda: b in _captured(config), 30, f"{b} to join capture", worker.log)
    entry = _captured(config)[b]
    assert entry["joined"] and entry["dump"], entry
    # beside backfills (background), before them; after repairs (urgent)
    assert redis_request(backend.redis_url, SOURCE, entry["dump"])["priority"] == "normal"
    _writes(backend, b, range(1, 60))
    wait_request(backend.redis_url, SOURCE, entry["dump"], ["completed"], 60, worker)
    _writes(backend, b, range(60, 90))
    assert_converged(backend, a, b)
    status = _status(config)
    excluded = status["tables"]["excluded"]
    assert "no primary key" in excluded[nokey], excluded
    assert "excluded by" in excluded[skipped] and "auto_skip*" in excluded[skipped], excluded
    assert not status["tables"]["captured"][b]["needs_dump"]

    # renamed into the pattern: the new name joins (and is dumped), the old one leaves
    old, new = (db.sql(t) for t in (b, renamed))
    backend.execute(f"ALTER TABLE {old} RENAME TO {db.ident(renamed.split('.', 1)[1])}"
                    if backend.kind == "postgresql" else f"RENAME TABLE {old} TO {new}")
    _writes(backend, renamed, range(100, 130))
    wait_for(lambda: renamed in _captured(config) and b not in _captured(config), 30,
             f"{renamed} to replace {b}", worker.log)
    dump_id = _captured(config)[renamed]["dump"]
    wait_request(backend.redis_url, SOURCE, dump_id, ["completed"], 60, worker)
    _writes(backend, renamed, range(130, 150))
    assert_converged(backend, renamed)

    # dropped: it leaves capture, its landed segments stay, nothing fails again and again
    landed = LandingZone(backend.landing, SOURCE)
    before = replay(backend.landing, SOURCE, a).rows
    assert before and a in landed.tables()
    backend.execute(f"DROP TABLE {db.sql(a)}")
    wait_for(lambda: a not in _captured(config), 30, f"{a} to leave capture", worker.log)
    _writes(backend, renamed, range(150, 160))
    assert_converged(backend, renamed)
    assert replay(backend.landing, SOURCE, a).rows == before
    assert worker.alive()
    log = worker.log()
    assert "Traceback" not in log and "session ended" not in log, log[-3000:]
    assert f"table {a} left capture" in log


def test_without_dump_new_tables(backend: Backend,
                                 worker_process: Callable[..., WorkerProcess]) -> None:
    """The status names the table that needs a dump; a dump makes it converge. MariaDB's
    binary log carries the new table's rows from its creation, so they land before any
    dump."""
    a, b = backend.db.table("auto_a"), backend.db.table("auto_b")
    backend.create(a, 5)
    config = _config(backend)
    worker = worker_process(config)
    _create(backend, b)
    _bulk(backend, b, 1, 200)
    wait_for(lambda: b in _captured(config), 30, f"{b} to join capture", worker.log)
    entry = _status(config)["tables"]["captured"][b]
    assert entry["joined"] and not entry["dump"] and entry["needs_dump"], entry
    text = cli(config, "status").stdout
    assert f"{b}: " in text and "NEEDS A DUMP" in text and f"--table {b}" in text, text
    _writes(backend, b, range(1, 20))
    if backend.kind != "postgresql":  # the binary log had every row since CREATE TABLE
        assert_converged(backend, b)
    request = json.loads(cli(config, "dump", "--table", b, "--json").stdout)
    wait_request(backend.redis_url, SOURCE, request["id"], ["completed"], 60, worker)
    assert not _status(config)["tables"]["captured"][b]["needs_dump"]
    assert "NEEDS A DUMP" not in cli(config, "status").stdout
    assert_converged(backend, b)


def test_create_table_as_then_a_key(backend: Backend,
                                    worker_process: Callable[..., WorkerProcess]) -> None:
    """A table made by CREATE TABLE ... AS SELECT has no key: it is left out until it gets
    one, here a unique index on a NOT NULL column (no primary key), then joins and is
    dumped. PostgreSQL: while its REPLICA IDENTITY does not carry that key it stays out
    (published, its UPDATEs would fail), and its UPDATEs work."""
    a, made = backend.db.table("auto_a"), backend.db.table("auto_made")
    backend.create(a, 30)
    config = _config(backend, dump_new_tables="true")
    worker = worker_process(config)
    sql = backend.db.sql(made)
    backend.execute(f"CREATE TABLE {sql} AS SELECT * FROM {backend.db.sql(a)}")
    wait_for(lambda: made in _status(config)["tables"]["excluded"], 30,
             f"{made} to be left out", worker.log)
    if backend.kind == "postgresql":
        backend.execute(f"ALTER TABLE {sql} ALTER COLUMN id SET NOT NULL")
        backend.execute(f"CREATE UNIQUE INDEX auto_made_id ON {sql} (id)")
        wait_for(lambda: "REPLICA IDENTITY DEFAULT does not carry its key (id, unique index "
                 "auto_made_id)" in _status(config)["tables"]["excluded"].get(made, ""), 30,
                 f"{made} to be left out for its replica identity", worker.log)
        _writes(backend, made, range(10, 30, 10))  # not published: its UPDATEs work
        backend.execute(f"ALTER TABLE {sql} REPLICA IDENTITY USING INDEX auto_made_id")
    else:  # CREATE TABLE ... AS SELECT keeps NOT NULL
        backend.execute(f"CREATE UNIQUE INDEX auto_made_id ON {sql} (id)")
    wait_for(lambda: made in _captured(config), 30, f"{made} to join", worker.log)
    wait_request(backend.redis_url, SOURCE, _captured(config)[made]["dump"], ["completed"],
                 60, worker)
    _writes(backend, made, range(30, 100, 10))
    assert_converged(backend, made)


def test_a_transaction_open_when_the_table_joined(
        backend: Backend, worker_process: Callable[..., WorkerProcess]) -> None:
    """PostgreSQL: rows a transaction wrote to a table before it joined the publication
    are decoded by no one, even if it commits after; the table's dump waits for it."""
    backend.only_postgresql("MariaDB's binary log carries every row of the table")
    a, b = backend.db.table("auto_a"), backend.db.table("auto_b")
    backend.create(a, 5)
    config = _config(backend, dump_new_tables="true")
    worker = worker_process(config)
    _create(backend, b)
    with psycopg.connect(backend.db.dsn) as open_transaction:
        open_transaction.execute(f"INSERT INTO {b} VALUES (1, nextval('versions'), 'early')")
        wait_for(lambda: b in _captured(config), 30, f"{b} to join capture", worker.log)
        dump_id = _captured(config)[b]["dump"]
        time.sleep(2)  # many windows' time: the dump would have read the table by now
        state = json.loads(cli(config, "show", dump_id, "--json").stdout)
        assert state["state"] in ("queued", "running"), state
        open_transaction.commit()
    wait_request(backend.redis_url, SOURCE, dump_id, ["completed"], 60, worker)
    assert "waits for them to end" in worker.log()
    assert_converged(backend, b)


def test_partitions_are_not_tables_of_their_own(
        backend: Backend, worker_process: Callable[..., WorkerProcess]) -> None:
    """PostgreSQL: a pattern matches a partitioned table and its partitions; the
    partitioned table is captured, its partitions are left out (their rows are the
    partitioned table's); a partitioned table created while the worker runs joins with
    its partitions left out, is dumped, and its rows land under its own name."""
    backend.only_postgresql("MariaDB's partitions are no tables of their own")
    events, logs = backend.db.table("auto_events"), backend.db.table("auto_logs")
    backend.use(PARTITIONED)
    backend.create(events, 20)
    config = _config(backend, dump_new_tables="true")
    worker = worker_process(config)
    tables = _status(config)["tables"]
    assert list(tables["captured"]) == [events], tables
    assert sorted(tables["excluded"]) == [f"{events}_p{i}" for i in range(4)], tables
    assert all("partition of public.auto_events" in why for why in tables["excluded"].values())
    request = json.loads(cli(config, "dump", "--all", "--json").stdout)
    wait_request(backend.redis_url, SOURCE, request["id"], ["completed"], 60, worker)
    backend.create(logs, 0)
    _bulk(backend, logs, 1, 300)
    wait_for(lambda: logs in _captured(config), 30, f"{logs} to join", worker.log)
    # its partitions are created after it: a rescan in between lists it without them, the
    # next one excludes them
    wait_for(lambda: f"{logs}_p0" in _status(config)["tables"]["excluded"], 30,
             f"{logs}_p0 to be excluded", worker.log)
    tables = _status(config)["tables"]
    assert list(tables["captured"]) == [events, logs], tables
    wait_request(backend.redis_url, SOURCE, _captured(config)[logs]["dump"], ["completed"], 60,
                 worker)
    _writes(backend, logs, range(1, 40))
    assert_converged(backend, events, logs)
    landed = LandingZone(backend.landing, SOURCE).tables()
    assert not [t for t in landed if "_p" in t], landed
