"""verify_throughput: ``dblog verify`` of a table against its merged target.

The source table is the benchmark's 5-column table (``bench.common.create_table``:
``--rows`` rows, default 1M; PostgreSQL ``public.verify_src`` or, with ``--source
mariadb``, MariaDB ``bench.verify_src``). The target is a PostgreSQL database on a
throwaway server of its own kind (with a PostgreSQL source: the same server, another
database) holding the table as the merge would have created it -- the source's columns
in the merge's target types and ``_dblog_position`` -- filled with the same rows by one
``INSERT ... SELECT generate_series``, primary key added after the load, ``VACUUM
(ANALYZE, FREEZE)``.

Per run: ``dblog_worker.verify.command.verify(config)`` with the default options (ranges of
10 000 source rows). Rows/s is source rows / the result's wall time (connecting and
reading the catalogs included). Verify sends each range's queries to both databases at
once (the target's from a second thread); the result counts, around each query (so
with the round trip and psycopg's or PyMySQL's reading of the result), the seconds
each database was busy, ``source_s`` and ``target_s``, which overlap, and the seconds
at least one of them was, ``database_s``; ``python_s`` is the rest of the wall time
(the walk, binding keys, comparing), ``db_share`` = ``database_s`` / wall time.
Every run must find the tables equal.

Then one more run after corrupting the target: values changed in five rows (text,
numeric by 0.01, timestamp by 1 µs, a NULL, an integer), two rows deleted, two added
(below and above the source's keys). That run must report exactly those keys --
changed, missing and extra -- and nothing else. No target is set: the figures are
reported.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import psycopg

from bench.common import (
    MARIADB,
    POSTGRESQL,
    ROW_SELECT,
    Environment,
    Options,
    Result,
    create_table,
    machine,
    median,
    progress,
    rounded,
)
from dblog_worker.config import Config, parse
from dblog_worker.verify.command import verify
from dblog_worker.verify.report import VerifyResult

NAME = "verify_throughput"
# What a run must produce: finite numbers above 0 (tests/bench: each benchmark, tiny).
FIGURES = ("rows_per_s", "corrupted_s")
SOURCE_KINDS = (POSTGRESQL, MARIADB)
TABLE_NAME = "verify_src"
TARGET_DATABASE = "target"
POSITION = "0" * 48
# The merge's target types for the benchmark table's columns (target.columns.target_type).
TARGET_COLUMNS = {
    POSTGRESQL: 'id "int8", a "int4", b "text", c "numeric", d "timestamptz"',
    MARIADB: "id bigint, a bigint, b text, c numeric, d timestamptz(6)",
}


@dataclass(frozen=True)
class Corruption:
    changed: frozenset[int]
    missing: frozenset[int]
    extra: frozenset[int]

    def as_dict(self) -> dict[str, list[int]]:
        return {"changed": sorted(self.changed), "missing": sorted(self.missing),
                "extra": sorted(self.extra)}


def create_target(dsn: str, kind: str, table: str, rows: int) -> None:
    """The target table as the merge makes it, with the source's rows."""
    schema = table.split(".", 1)[0]
    started = time.monotonic()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA IF NOT EXISTS {schema}".encode())
        conn.execute(f'CREATE TABLE {table} ({TARGET_COLUMNS[kind]}, "_dblog_position" '
                     'varchar(48) COLLATE "C") WITH (autovacuum_enabled = off)'.encode())
        conn.execute(f"INSERT INTO {table} SELECT *, %s FROM ({ROW_SELECT}) AS r".encode(),
                     (POSITION, 1, rows))
        conn.execute(f"ALTER TABLE {table} ADD PRIMARY KEY (id)".encode())
        conn.execute(f"VACUUM (ANALYZE, FREEZE) {table}".encode())
    progress(f"created target {table}: {rows} rows, {time.monotonic() - started:.1f} s")


def corrupt(dsn: str, table: str, rows: int) -> Corruption:
    """Change, delete and add a few target rows; the keys verify must report."""
    spots = [rows * i // 10 for i in range(1, 10)]
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"UPDATE {table} SET b = 'corrupted' WHERE id = %s".encode(), (spots[0],))
        conn.execute(f"UPDATE {table} SET c = c + 0.01 WHERE id = %s".encode(), (spots[1],))
        conn.execute(f"UPDATE {table} SET d = d + interval '1 microsecond' WHERE id = %s"
                     .encode(), (spots[2],))
        conn.execute(f"UPDATE {table} SET b = NULL WHERE id = %s".encode(), (spots[3],))
        conn.execute(f"UPDATE {table} SET a = a + 1 WHERE id = %s".encode(), (spots[4],))
        conn.execute(f"DELETE FROM {table} WHERE id IN (%s, %s)".encode(), spots[5:7])
        for offset, key in ((-1, 1), (10, rows)):  # new keys 0 and rows + 10
            conn.execute(f"INSERT INTO {table} SELECT id + %s, a, b, c, d, _dblog_position "
                         f"FROM {table} WHERE id = %s".encode(), (offset, key))
    return Corruption(changed=frozenset(spots[:5]), missing=frozenset(spots[5:7]),
                      extra=frozenset({0, rows + 10}))


def verify_config(env: Environment, table: str, target_dsn: str) -> Config:
    return parse({
        "source": {"name": "bench", "kind": env.kind, "dsn": env.dsn, "tables": [table]},
        "redis": {"url": env.redis.url},
        "landing": {"path": str(env.landing)},
        "target": {"kind": "postgresql", "dsn": target_dsn},
    }, {})


def keys_of(keys: tuple[tuple[object, ...], ...]) -> set[int]:
    return {int(str(key[0])) for key in keys}


def check_equal(result: VerifyResult, rows: int) -> None:
    table = result.tables[0]
    if not result.equal or table.source_rows != rows or table.target_rows != rows:
        raise RuntimeError(f"verify of equal tables of {rows} rows reported: "
                           f"{result.to_json()}")


def check_found(result: VerifyResult, expected: Corruption) -> None:
    table = result.tables[0]
    found = Corruption(frozenset(keys_of(table.changed)), frozenset(keys_of(table.missing)),
                       frozenset(keys_of(table.extra)))
    if table.error is not None or table.truncated or found != expected:
        raise RuntimeError(f"verify after corrupting the target found {found.as_dict()}, "
                           f"expected {expected.as_dict()} (error: {table.error})")


def run(options: Options) -> Result:
    rows = options.rows
    results: list[VerifyResult] = []
    with Environment(NAME, options) as env:
        if env.is_mariadb:
            env.postgres.start()
        target_dsn = env.postgres.create_database(TARGET_DATABASE)
        table = env.table(TABLE_NAME)
        create_table(env, table, rows)
        create_target(target_dsn, env.kind, table, rows)
        config = verify_config(env, table, target_dsn)
        for i in range(options.runs):
            result = verify(config)
            check_equal(result, rows)
            results.append(result)
            progress(f"{NAME} run {i + 1}/{options.runs}: {result.seconds:.1f} s, "
                     f"{rows / result.seconds:,.0f} rows/s (databases "
                     f"{result.database_seconds:.1f} s: source {result.source_seconds:.1f} s,"
                     f" target {result.target_seconds:.1f} s side by side; python "
                     f"{result.python_seconds:.1f} s)")
        expected = corrupt(target_dsn, table, rows)
        corrupted = verify(config)
        check_found(corrupted, expected)
        progress(f"{NAME}: after corrupting {len(corrupted.tables[0].keys())} rows of the "
                 f"target: found them all in {corrupted.seconds:.1f} s")
    return result_of(options, env.kind, rows, results, corrupted, expected)


def result_of(options: Options, kind: str, rows: int, results: list[VerifyResult],
              corrupted: VerifyResult, expected: Corruption) -> Result:
    seconds = median([r.seconds for r in results])
    database_s = median([r.database_seconds for r in results])
    source_s = median([r.source_seconds for r in results])
    target_s = median([r.target_seconds for r in results])
    python_s = median([r.python_seconds for r in results])
    db_shares = [r.database_seconds / r.seconds for r in results]
    table = results[-1].tables[0]
    found = corrupted.tables[0]
    extra: dict[str, Any] = {}
    if kind == MARIADB:
        extra["target_postgresql"] = machine(POSTGRESQL)["postgresql"]
    return {
        "benchmark": NAME,
        "rows": rows,
        "runs": options.runs,
        "range_rows": 10_000,
        "ranges": table.ranges,
        "source_queries": table.source_queries,
        "target_queries": table.target_queries,
        "verify_s": rounded(seconds),
        "rows_per_s": round(rows / seconds),
        "database_s": rounded(database_s),
        "source_s": rounded(source_s),
        "target_s": rounded(target_s),
        "python_s": rounded(python_s),
        "db_share": rounded(median(db_shares)),
        "python_share": rounded(1 - median(db_shares)),
        "corrupted": expected.as_dict(),
        "corrupted_found": True,
        "corrupted_s": rounded(corrupted.seconds),
        "corrupted_differing_ranges": found.differing_ranges,
        "corrupted_queries": found.source_queries + found.target_queries,
        "target": None,
        "target_met": None,
        "run_verify_s": [rounded(r.seconds) for r in results],
        "run_database_s": [rounded(r.database_seconds) for r in results],
        "run_source_s": [rounded(r.source_seconds) for r in results],
        "run_target_s": [rounded(r.target_seconds) for r in results],
        "run_python_s": [rounded(r.python_seconds) for r in results],
        "machine": {**machine(kind), **extra},
    }
