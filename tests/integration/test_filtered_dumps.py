"""Filtered dumps (``--where``, ``--from-key``/``--to-key``) on a real source of each kind.

The filter is spelled into every SELECT of the dump, so the watermark rule still holds:
under a concurrent workload that moves rows into and out of the filter, every row the dump
emitted met the filter when it was read, the output holds every row that meets it at the
end, and what the output holds equals the table (no time travel). Each operator selects
what SQL would; a filter that does not fit the table is refused before anything is queued.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import pytest

from tests.integration.harness import (
    HOSTILE,
    PARTITIONED,
    PLAIN,
    SOURCE,
    Backend,
    TableFlavour,
    WorkerProcess,
    assert_landed_once,
    chunks,
    cli,
    dump,
    events_of,
    replay,
    wait_for,
    wait_request,
)

Row = dict[str, Any]


def assert_filtered_converged(backend: Backend, table: str, request_id: str,
                              matches: Callable[[Row], bool]) -> int:
    """The dump's rows each met the filter when read; once the log is in, the output holds
    every row of the table that meets it, each equal to the table's, and nothing the table
    does not hold (rows that left the filter come from the log, as they are). Returns how
    many rows the dump emitted."""
    version = backend.db.flavour.version
    dumped = [e for e in events_of(backend, table) if e["dump_id"] == request_id]
    for event in dumped:
        assert event["op"] == "r" and matches(json.loads(str(event["after"]))), event

    def difference() -> str:
        expected = backend.rows(table)
        got = replay(backend.landing, SOURCE, table, version).rows
        missing = [k for k, row in expected.items() if matches(row) and k not in got]
        wrong = [k for k, row in got.items() if expected.get(k) != row]
        return f"missing {missing[:10]}, different or gone {wrong[:10]}" \
            if missing or wrong else ""

    wait_for(lambda: difference() == "", 30, f"the output of {table} to hold the filtered rows",
             difference)
    assert replay(backend.landing, SOURCE, table, version).time_travel == []
    return len(dumped)


@pytest.mark.parametrize(("flavour", "parallelism", "key_range"), [
    (PLAIN, "1", False), (PLAIN, "3", True), (HOSTILE, "3", False), (PARTITIONED, "1", True),
], ids=["tables", "parallel-key-range", "parallel-hostile-names", "partitioned-key-range"])
def test_filtered_dumps_converge_under_load(
        backend: Backend, flavour: TableFlavour, parallelism: str, key_range: bool,
        worker_process: Callable[..., WorkerProcess]) -> None:
    """The workload rewrites payloads (random md5 texts) and moves keys: rows enter and leave
    ``payload < '8'`` all through the dump."""
    backend.use(flavour)
    t1 = backend.t1
    backend.create(t1, 1500)
    f = flavour
    config = backend.config_path([t1])
    worker = worker_process(config)
    args = ["--table", t1, "--where", f.payload, "<", "8", "--where", f.version, ">", "0",
            "--chunk-size", "7" if key_range else "31", "--parallelism", parallelism]
    low, high = (200, 1500) if key_range else (None, None)
    if key_range:
        args += ["--from-key", "200", "--to-key", "1500"]

    def matches(row: Row) -> bool:
        key = int(row[f.key])
        return (row[f.payload] is not None and row[f.payload] < "8" and row[f.version] > 0
                and (low is None or low <= key) and (high is None or key <= high))

    workload = backend.workload([t1], seed=17)
    workload.start()
    try:
        request_id = dump(config, *args)
        state = wait_request(backend.redis_url, SOURCE, request_id, ["completed", "failed"],
                             120, worker)
        assert state["state"] == "completed", state
        # a dump quicker than the workload's first key change: it writes on until it has
        wait_for(lambda: workload.transactions > 20 and workload.key_changes > 0, 60,
                 "the workload's writes")
    finally:
        workload.stop()
    assert workload.transactions > 20 and workload.key_changes > 0
    emitted = assert_filtered_converged(backend, t1, request_id, matches)
    in_range = sum(1 for row in backend.rows(t1).values() if matches(row))
    assert emitted > 0.6 * in_range > 20  # most rows meeting the filter came from the dump
    shown = json.loads(cli(config, "show", request_id, "--json").stdout)
    assert shown["filter"]["where"][0] == {"column": f.payload, "op": "<", "value": "8"}
    assert chunks(backend, request_id) > 3
    assert_landed_once(backend, t1)


# -- what each operator selects -----------------------------------------------------------

REGIONS = ["EU", "US", "APAC", None]
ROWS = 120


def rows_of_shop() -> list[Row]:
    return [{"id": i, "region": REGIONS[i % 4], "amount": f"{i * 1.25:.2f}",
             "created": f"2026-{1 + i % 3:02d}-{1 + i % 28:02d}",
             "deleted_at": None if i % 3 else "2026-03-01 12:00:00", "disc%": i % 7}
            for i in range(1, ROWS + 1)]


def create_shop(backend: Backend) -> str:
    table = backend.db.table("shop")
    if backend.kind == "postgresql":
        backend.execute(f"CREATE TABLE {table} (id integer PRIMARY KEY, region text, "
                        "amount numeric(10,2), created date, deleted_at timestamp, "
                        '"disc%%" integer, doc json)')
        backend.execute(f"ALTER TABLE {table} REPLICA IDENTITY FULL")
        insert = f'INSERT INTO {table} VALUES (%s, %s, %s, %s, %s, %s, \'{{}}\')'
    else:
        backend.execute(f"CREATE TABLE {table} (id INT PRIMARY KEY, region VARCHAR(8), "
                        "amount DECIMAL(10,2), created DATE, deleted_at DATETIME NULL, "
                        "`disc%` INT, doc JSON)")  # no parameters: % as it is
        insert = f"INSERT INTO {table} VALUES (%s, %s, %s, %s, %s, %s, '{{}}')"
    with backend.connect() as session:
        for row in rows_of_shop():
            session.execute(insert, list(row.values()))
    return table


CASES: list[tuple[list[list[str]], list[str], Callable[[Row], bool]]] = [
    ([["region", "=", "EU"]], [], lambda r: r["region"] == "EU"),
    ([["region", "in", "EU", "US"]], [], lambda r: r["region"] in ("EU", "US")),
    ([["region", "not in", "EU", "APAC"]], [], lambda r: r["region"] == "US"),  # not NULL
    ([["region", "!=", "US"]], [], lambda r: r["region"] in ("EU", "APAC")),
    ([["region", "is", "null"]], [], lambda r: r["region"] is None),
    ([["deleted_at", "is not null"]], [], lambda r: r["deleted_at"] is not None),
    ([["amount", ">=", "100.5"], ["created", "<", "2026-02-01"]], [],
     lambda r: float(r["amount"]) >= 100.5 and r["created"] < "2026-02-01"),
    ([["disc%", "<=", "3"]], [], lambda r: r["disc%"] <= 3),
    ([["amount", ">", "50"]], ["--from-key", "20", "--to-key", "90"],
     lambda r: float(r["amount"]) > 50 and 20 <= r["id"] <= 90),
    ([], ["--from-key", "115"], lambda r: r["id"] >= 115),
    ([], ["--from-key", "300"], lambda r: False),  # an empty range completes
]


def test_each_operator_selects_what_sql_would(
        backend: Backend, worker_process: Callable[..., WorkerProcess]) -> None:
    table = create_shop(backend)
    config = backend.config_path([table])
    worker = worker_process(config)
    rows = rows_of_shop()
    requests = []
    for where, extra, _ in CASES:
        words = [arg for condition in where for arg in ("--where", *condition)]
        requests.append(dump(config, "--table", table, *words, *extra, "--chunk-size", "7"))
    events = []
    for request_id in requests:
        state = wait_request(backend.redis_url, SOURCE, request_id, ["completed", "failed"], 60,
                             worker)
        assert state["state"] == "completed", state
    wait_for(lambda: {e["dump_id"] for e in events_of(backend, table)} >= set(requests[:-1]),
             20, "the dumps' rows to land")
    events = events_of(backend, table)
    for request_id, (where, extra, matches) in zip(requests, CASES, strict=True):
        got = sorted(json.loads(str(e["key"]))[0] for e in events if e["dump_id"] == request_id)
        assert got == [r["id"] for r in rows if matches(r)], (where, extra)
    shown = cli(config, "show", requests[6]).stdout
    assert 'where: amount >= "100.5" AND created < "2026-02-01"' in shown


@pytest.mark.parametrize(("args", "message"), [
    (["--where", "nope", "=", "1"], "has no column 'nope' (it has id, region, amount"),
    (["--where", "created", ">=", "not a date"], "created"),
    (["--where", "amount", ">", "abc"], "amount"),
    (["--where", "region", "like", "E%"], '"like" is not an operator'),
    (["--where", "region", "="], "region = takes one value, got 0"),
    (["--from-key", "abc"], "abc"),
    (["--from-key", "[1, 2]"], "key"),  # PostgreSQL: "has 2 value(s)"
    (["--keys", "[1]", "--where", "region", "=", "EU"], "reads the keys it names"),
])
def test_a_filter_that_does_not_fit_is_refused_and_nothing_is_queued(
        backend: Backend, args: list[str], message: str) -> None:
    table = create_shop(backend)
    config = backend.config_path([table])
    result = cli(config, "dump", "--table", table, *args, check=False)
    assert result.returncode != 0
    assert message in result.stderr, result.stderr
    assert re.search(r"^(refused|error): ", result.stderr, re.M), result.stderr
    assert "Traceback" not in result.stderr
    assert json.loads(cli(config, "list", "--json").stdout) == []


def test_an_operator_the_type_lacks_is_refused(backend: Backend) -> None:
    backend.only_postgresql("MariaDB compares a JSON column with any value")
    table = create_shop(backend)
    config = backend.config_path([table])
    result = cli(config, "dump", "--table", table, "--where", "doc", "=", "{}", check=False)
    assert result.returncode != 0
    assert "the filter does not apply to" in result.stderr
    assert "operator does not exist: json = json" in result.stderr


def test_a_dropped_filter_column_fails_the_dump_saying_why(
        backend: Backend, worker_process: Callable[..., WorkerProcess]) -> None:
    table = create_shop(backend)
    config = backend.config_path([table])
    worker = worker_process(config)
    request_id = dump(config, "--table", table, "--where", "disc%", ">=", "0", "--chunk-size",
                      "1", "--delay-ms", "300")
    wait_for(lambda: chunks(backend, request_id) >= 1, 20, "the first chunk", worker.log)
    column = '"disc%%"' if backend.kind == "postgresql" else "`disc%`"
    backend.execute(f"ALTER TABLE {table} DROP COLUMN {column}")
    state = wait_request(backend.redis_url, SOURCE, request_id, ["completed", "failed"], 30,
                         worker)
    assert state["state"] == "failed", state
    assert "the filter's column 'disc%' is not a column" in state["error"] or \
        "the filter does not fit" in state["error"], state["error"]
    assert worker.alive()
