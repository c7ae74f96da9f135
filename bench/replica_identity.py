"""replica_identity: the WAL that updates and deletes write under REPLICA IDENTITY FULL and
DEFAULT (PostgreSQL), side by side.

A table like an orders table (``id`` bigint key, an int, a numeric, a timestamptz, a
200-character text: about 250 bytes a row), ``--rows`` rows; each run, for each identity
(the order rotated): a logical slot exists (the WAL is the one logical decoding reads),
every row is updated once (one small column changed), then a tenth of them deleted and
put back. Reported (medians of the runs): the WAL bytes of the updates and of the
deletes (``pg_current_wal_lsn`` before and after, the server otherwise idle), per row,
and DEFAULT's share of FULL's (``update_wal_ratio``: the per-run ratio's median; the
spread is its lowest and highest).
"""

from __future__ import annotations

from typing import Any

from bench.common import Environment, Options, Result, machine, median, progress, rounded

NAME = "replica_identity"
SOURCE_KINDS = ("postgresql",)
# What a run must produce: finite numbers above 0 (tests/bench: each benchmark, tiny).
FIGURES = ("full.update_wal_bytes_per_row", "default.update_wal_bytes_per_row",
           "update_wal_ratio")
IDENTITIES = ("full", "default")


def _wal(conn: Any, statement: str) -> int:
    """WAL bytes written by ``statement`` (committed)."""
    before = conn.execute("SELECT pg_current_wal_insert_lsn()").fetchone()[0]
    conn.execute(statement)
    return int(conn.execute("SELECT pg_current_wal_insert_lsn() - %s::pg_lsn",
                            (before,)).fetchone()[0])


def run(options: Options) -> Result:
    rows = options.rows
    deleted = max(1, rows // 10)
    with Environment(NAME, options) as env, env.connect() as conn:
        conn.autocommit = True
        table = env.table("ri_orders")
        conn.execute(f"CREATE TABLE {table} (id bigint PRIMARY KEY, n int NOT NULL, "
                     "amount numeric(12,2), at timestamptz, note text)")
        conn.execute(f"INSERT INTO {table} SELECT g, 0, g * 1.25, now(), "
                     f"repeat(md5(g::text), 7)::varchar(200) FROM generate_series(1, {rows}) g")
        conn.execute("SELECT pg_create_logical_replication_slot('bench_ri', 'pgoutput')")
        updates: dict[str, list[int]] = {name: [] for name in IDENTITIES}
        deletes: dict[str, list[int]] = {name: [] for name in IDENTITIES}
        try:
            for i in range(options.runs):
                for name in IDENTITIES[i % 2:] + IDENTITIES[:i % 2]:
                    conn.execute(f"ALTER TABLE {table} REPLICA IDENTITY {name.upper()}")
                    conn.execute(f"VACUUM {table}")
                    conn.execute("CHECKPOINT")  # full-page images alike for both
                    updates[name].append(_wal(conn, f"UPDATE {table} SET n = n + 1"))
                    deletes[name].append(_wal(
                        conn, f"WITH d AS (DELETE FROM {table} WHERE id <= {deleted} "
                              f"RETURNING *) INSERT INTO {table} SELECT * FROM d"))
                progress(f"{NAME} run {i + 1}/{options.runs}: " + ", ".join(
                    f"{name} {updates[name][-1] / rows:.0f} B/update" for name in IDENTITIES))
        finally:
            conn.execute("SELECT pg_drop_replication_slot('bench_ri')")
    ratios = [d / f for d, f in zip(updates["default"], updates["full"], strict=True)]
    report: dict[str, Any] = {"benchmark": NAME, "rows": rows, "runs": options.runs,
                              "deleted_and_reinserted": deleted}
    for name in IDENTITIES:
        report[name] = {
            "update_wal_bytes": round(median(updates[name])),
            "update_wal_bytes_per_row": rounded(median(updates[name]) / rows, 1),
            "delete_reinsert_wal_bytes": round(median(deletes[name])),
        }
    report["update_wal_ratio"] = rounded(median(ratios))
    report["update_wal_ratio_spread"] = [rounded(min(ratios)), rounded(max(ratios))]
    report["machine"] = machine(options.source)
    return report
