"""Same value, same bytes: a row read by a dump serializes exactly like the same row in the log.

Every supported column type, NULL in every column, TOASTed values carried through an
update that does not touch them, and a database whose own session defaults (time zone,
date style, bytea output, float digits) differ from the worker's. Then every type of a
MariaDB source, the same way.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from dblog_worker.landing.parquet import LandingZone, read_events
from tests.integration.harness import (
    MariaDatabase,
    WorkerProcess,
    cli,
    wait_for,
    wait_request,
    write_config,
)
from tests.services import MariaDBServer

SOURCE = "src"

ALL_TYPES_DDL = """
CREATE TYPE public.mood AS ENUM ('sad', 'ok', 'happy');
CREATE DOMAIN public.posint AS integer CHECK (VALUE > 0);
CREATE TABLE public.all_types (
    id integer PRIMARY KEY,
    c_int2 smallint,
    c_int4 integer,
    c_int8 bigint,
    c_num numeric(12, 2),
    c_num_any numeric,
    c_real real,
    c_double double precision,
    c_text text,
    c_varchar varchar(10),
    c_char char(5),
    c_bool boolean,
    c_date date,
    c_ts timestamp,
    c_ts0 timestamp(0),
    c_tstz timestamptz,
    c_tstz3 timestamptz(3),
    c_time time,
    c_interval interval,
    c_uuid uuid,
    c_json json,
    c_jsonb jsonb,
    c_bytea bytea,
    a_int integer[],
    a_text text[],
    a_int2d integer[][],
    a_num numeric[],
    a_bool boolean[],
    a_tstz timestamptz[],
    a_bytea bytea[],
    a_uuid uuid[],
    c_mood public.mood,
    c_dom public.posint
);
ALTER TABLE public.all_types REPLICA IDENTITY FULL;
"""

COLUMNS = (
    "id, c_int2, c_int4, c_int8, c_num, c_num_any, c_real, c_double, c_text, c_varchar, "
    "c_char, c_bool, c_date, c_ts, c_ts0, c_tstz, c_tstz3, c_time, c_interval, c_uuid, "
    "c_json, c_jsonb, c_bytea, a_int, a_text, a_int2d, a_num, a_bool, a_tstz, a_bytea, "
    "a_uuid, c_mood, c_dom"
)

# Literals, so that the values are exactly what PostgreSQL parses (no client adaptation).
ROWS = (
    # 1: ordinary values of every type
    """(1, -32768, 2147483647, 9223372036854775807, 1.5, 12345678901234567890.123456789,
        1.5, 0.1, E'Gr\\u00fc\\u00dfe \\U0001F600 "q" \\\\ tab\\tnl\\n', 'varchar',
        'ab', true, '2024-02-29', '2024-01-02 03:04:05.678901',
        '2024-01-02 03:04:05.5', '2024-01-02 03:04:05.123456+05:30',
        '2024-01-02 03:04:05.1239+00', '23:59:59.999999', '1 day 02:03:04.5',
        'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '{"b":  1,  "a" : [1, 2], "b": 3}',
        '{"b": 1, "a": [1, 2], "a": 9}', '\\x00ff00'::bytea,
        '{1,NULL,-3}', ARRAY['a,b', 'q"uote', NULL, 'NULL', '', 'back\\slash', ' sp '],
        '{{1,2},{3,4}}', '{1.50,NaN,-0.001}', '{t,f,NULL}',
        ARRAY['2024-01-02 03:04:05+02'::timestamptz, 'infinity'],
        ARRAY['\\x00'::bytea, '\\x'::bytea, NULL, '\\xdeadbeef'::bytea],
        ARRAY['a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'::uuid, NULL],
        'happy', 7)""",
    # 2: NULL in every column but the key
    "(2" + ", NULL" * 32 + ")",
    # 3: the special values
    """(3, 0, 0, -9223372036854775808, 'NaN', '-0.000000000000000000001', 'NaN',
        'Infinity', '', '', '', false, 'infinity', '-infinity', 'infinity', 'infinity',
        '-infinity', '00:00:00', '-1 mons -00:00:01', '00000000-0000-0000-0000-000000000000',
        '[]', 'null', '\\x'::bytea, '{}', '{}', '{{NULL,NULL}}', '{Infinity,-Infinity}',
        '{}', '{}', '{}', '{}', 'sad', 1)""",
    # 4: more floating point and numeric edge cases
    """(4, 1, 1, 1, 123.45, 99999999999999999999999999999999999999.99999999999999999,
        '-0', '-0', 'x', 'x', 'abcde', true, '0001-01-01', '0001-01-01 00:00:00',
        '1999-12-31 23:59:59', '1970-01-01 00:00:00+00', '2000-06-15 12:00:00.5-03:30',
        '12:00', '0 seconds', 'ffffffff-ffff-ffff-ffff-ffffffffffff', '"str"', '"str"',
        '\\x0a0d5c22'::bytea, '[0:1]={5,6}', '{"{}","\\\\",","}', '{{0}}', '{0.0}', '{f}',
        '{"1999-12-31 23:59:59.999999+00"}', '{"\\\\x"}', '{}', 'ok', 2147483647)""",
    # 5: float extremes
    """(5, 2, 2, 2, -0.01, '-Infinity', '3.4028235e+38', '1e-300', 'y', 'y', 'y', false,
        '2024-01-01', '2024-01-01', '2024-01-01', '2024-01-01 00:00:00+00',
        '2024-01-01 00:00:00+00', '00:00:00.000001', '-178000000 years', NULL, NULL, NULL,
        NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)""",
    # 6: more doubles
    """(6, 3, 3, 3, 0, 0, '1e-45', '-Infinity', 'z', 'z', 'z', true, '2024-01-01', NULL,
        NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
        NULL, NULL, NULL, NULL, NULL)""",
    # 7: more doubles
    """(7, 4, 4, 4, 0, 0, '1.17549435e-38', '2.2250738585072014e-308', 'w', 'w', 'w', true,
        NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
        NULL, NULL, NULL, NULL, NULL, NULL, NULL)""",
    # 8: more doubles
    """(8, 5, 5, 5, 0, 0, '0.1', '1.7976931348623157e+308', 'v', 'v', 'v', true, NULL,
        NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
        NULL, NULL, NULL, NULL, NULL, NULL)""",
    # 9: NaN and infinities of both float types
    "(9, 6, 6, 6, 0, 'NaN', '-Infinity', 'NaN', 'u', 'u', 'u'" + ", NULL" * 22 + ")",
    # 10: more infinities
    "(10, 7, 7, 7, 0, 'Infinity', 'Infinity', '-0.0', 't', 't', 't'" + ", NULL" * 22 + ")",
)
KEYS = [f"[{i}]" for i in range(1, len(ROWS) + 1)]

TOAST_DDL = """
CREATE TABLE public.big (
    id integer PRIMARY KEY,
    counter integer NOT NULL,
    payload text NOT NULL,
    blob bytea NOT NULL
);
ALTER TABLE public.big REPLICA IDENTITY FULL;
"""

TZ_DDL = """
CREATE TABLE public.times (
    id integer PRIMARY KEY,
    tstz timestamptz,
    ts timestamp,
    d date,
    iv interval,
    f8 double precision,
    f4 real,
    b bytea,
    a_tstz timestamptz[],
    t text
);
ALTER TABLE public.times REPLICA IDENTITY FULL;
"""


# -- helpers ------------------------------------------------------------------


def execute(dsn: str, statements: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(statements.encode())


def events_of(tmp_path: Path, table: str) -> list[dict[str, Any]]:
    return read_events(LandingZone(tmp_path / "landing", SOURCE), table)


def latest_log_after(events: list[dict[str, Any]]) -> dict[str, str]:
    """key -> the `after` of the key's latest log event (events are in position order)."""
    latest: dict[str, str] = {}
    for event in events:
        if event["origin"] == "log" and event["op"] in ("c", "u"):
            latest[str(event["key"])] = str(event["after"])
    return latest


def dump_rows(events: list[dict[str, Any]], dump_id: str) -> dict[str, str]:
    rows: dict[str, str] = {}
    for event in events:
        if event["dump_id"] == dump_id:
            assert event["op"] == "r" and event["origin"] == "dump", event
            key = str(event["key"])
            assert key not in rows, f"{key} dumped twice by {dump_id}"
            rows[key] = str(event["after"])
    return rows


def wait_log_events(tmp_path: Path, table: str, keys: list[str], worker: WorkerProcess,
                    ops: tuple[str, ...] = ("c",)) -> list[dict[str, Any]]:
    """Poll until the log events of ``keys`` (with one of ``ops``) are in the landing zone."""
    found: list[dict[str, Any]] = []

    def landed() -> bool:
        nonlocal found
        found = events_of(tmp_path, table)
        have = {str(e["key"]) for e in found if e["origin"] == "log" and e["op"] in ops}
        return set(keys) <= have

    wait_for(landed, 30, f"log events {ops} of {keys} in {table}", lambda: worker.log()[-4000:])
    return found


def run_dump(config: Path, redis_url: str, worker: WorkerProcess, *args: str) -> str:
    result = cli(config, "dump", *args, "--chunk-size", "3", "--json")
    request_id = str(json.loads(result.stdout)["id"])
    state = wait_request(redis_url, SOURCE, request_id, ["completed", "failed", "cancelled"],
                         timeout=30, worker=worker)
    assert state["state"] == "completed", state
    return request_id


def wait_dump_rows(tmp_path: Path, table: str, dump_id: str, count: int,
                   worker: WorkerProcess) -> dict[str, str]:
    rows: dict[str, str] = {}

    def landed() -> bool:
        nonlocal rows
        rows = dump_rows(events_of(tmp_path, table), dump_id)
        return len(rows) >= count

    wait_for(landed, 30, f"{count} rows of {dump_id}", lambda: worker.log()[-4000:])
    return rows


# -- every type ---------------------------------------------------------------


def test_every_type_dump_and_log_give_identical_bytes(
    tmp_path: Path, pg_dsn: str, redis_url: str
) -> None:
    execute(pg_dsn, ALL_TYPES_DDL)
    config = write_config(tmp_path, pg_dsn, redis_url, ["public.all_types"])
    with streaming_worker(config, tmp_path, pg_dsn) as worker:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            for row in ROWS:
                conn.execute(f"INSERT INTO public.all_types ({COLUMNS}) VALUES {row}".encode())
        inserted = latest_log_after(wait_log_events(tmp_path, "public.all_types", KEYS, worker))
        assert sorted(inserted) == sorted(KEYS)
        # A no-op update of every row: its old row (REPLICA IDENTITY FULL) and new row
        # are printed by the log again, and must be the same bytes as the insert's.
        execute(pg_dsn, "UPDATE public.all_types SET id = id")
        events = wait_log_events(tmp_path, "public.all_types", KEYS, worker, ops=("u",))
        updates = {str(e["key"]): e for e in events if e["op"] == "u"}
        for key in KEYS:
            assert updates[key]["before"] == inserted[key], f"key {key}: update's before"
            assert updates[key]["after"] == inserted[key], f"key {key}: update's after"
        logged = latest_log_after(events)
        assert logged == inserted

        table_dump = run_dump(config, redis_url, worker, "--table", "public.all_types")
        dumped = wait_dump_rows(tmp_path, "public.all_types", table_dump, len(KEYS), worker)
        assert sorted(dumped) == sorted(KEYS)
        for key in KEYS:
            assert dumped[key] == logged[key], f"key {key}: dump and log differ"

        keys_dump = run_dump(config, redis_url, worker, "--table", "public.all_types",
                             "--keys", json.dumps(list(range(1, len(ROWS) + 1))))
        by_key = wait_dump_rows(tmp_path, "public.all_types", keys_dump, len(KEYS), worker)
        assert sorted(by_key) == sorted(KEYS)
        for key in KEYS:
            assert by_key[key] == logged[key], f"key {key}: primary-key dump and log differ"
        assert worker.alive()

    row1 = logged["[1]"]
    # No insignificant whitespace, columns in table order.
    assert row1.startswith('{"id":1,"c_int2":-32768,"c_int4":2147483647,'
                           '"c_int8":9223372036854775807,"c_num":"1.50",')
    doc1 = json.loads(row1)
    assert list(doc1) == [c.strip() for c in COLUMNS.split(",")]
    assert '"c_num":"1.50"' in row1  # numeric keeps its scale, as a string
    assert '"c_num_any":"12345678901234567890.123456789"' in row1
    assert '"c_real":1.5,"c_double":0.1,' in row1
    assert doc1["c_text"] == 'Grüße 😀 "q" \\ tab\tnl\n'
    assert "Grüße 😀" in row1  # non-ASCII kept as UTF-8, not \u-escaped
    assert '"c_char":"ab   "' in row1  # char(n) padding kept
    assert '"c_bool":true' in row1
    assert '"c_date":"2024-02-29"' in row1
    assert '"c_ts":"2024-01-02 03:04:05.678901"' in row1
    assert '"c_ts0":"2024-01-02 03:04:06"' in row1  # timestamp(0) rounds
    assert '"c_tstz":"2024-01-01 21:34:05.123456+00"' in row1  # in UTC
    assert '"c_tstz3":"2024-01-02 03:04:05.124+00"' in row1
    assert '"c_time":"23:59:59.999999"' in row1
    assert '"c_interval":"1 day 02:03:04.5"' in row1
    assert '"c_uuid":"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"' in row1
    # json keeps whitespace and duplicate keys; jsonb is PostgreSQL's normalized text
    assert doc1["c_json"] == '{"b":  1,  "a" : [1, 2], "b": 3}'
    assert doc1["c_jsonb"] == '{"a": 9, "b": 1}'
    assert '"c_bytea":"AP8A"' in row1  # base64
    assert '"a_int":[1,null,-3]' in row1
    assert doc1["a_text"] == ["a,b", 'q"uote', None, "NULL", "", "back\\slash", " sp "]
    assert '"a_int2d":[[1,2],[3,4]]' in row1
    assert '"a_num":["1.50","NaN","-0.001"]' in row1
    assert '"a_bool":[true,false,null]' in row1
    assert '"a_tstz":["2024-01-02 01:04:05+00","infinity"]' in row1
    assert '"a_bytea":["AA==","",null,"3q2+7w=="]' in row1
    assert '"a_uuid":["a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",null]' in row1
    assert row1.endswith('"c_mood":"happy","c_dom":7}')

    doc2 = json.loads(logged["[2]"])
    assert doc2["id"] == 2 and all(v is None for k, v in doc2.items() if k != "id")

    row3 = logged["[3]"]
    assert '"c_int8":-9223372036854775808' in row3
    assert '"c_num":"NaN"' in row3
    assert '"c_num_any":"-0.000000000000000000001"' in row3
    assert '"c_real":"NaN","c_double":"Infinity"' in row3
    assert ('"c_date":"infinity","c_ts":"-infinity","c_ts0":"infinity","c_tstz":"infinity",'
            in row3)
    assert '"c_tstz3":"-infinity"' in row3
    assert '"c_bytea":""' in row3
    assert '"a_int":[],"a_text":[],"a_int2d":[[null,null]],' in row3
    assert '"a_num":["Infinity","-Infinity"]' in row3
    assert '"c_json":"[]","c_jsonb":"null"' in row3
    assert row3.endswith('"c_mood":"sad","c_dom":1}')

    row4 = logged["[4]"]
    assert '"c_real":-0,"c_double":-0,' in row4
    assert '"c_char":"abcde"' in row4
    assert '"c_tstz3":"2000-06-15 15:30:00.5+00"' in row4
    assert '"c_bytea":"Cg1cIg=="' in row4
    assert '"a_int":[5,6]' in row4  # bounds decoration dropped
    assert json.loads(row4)["a_text"] == ["{}", "\\", ","]
    assert '"a_bytea":[""]' in row4
    assert '"c_dom":2147483647' in row4

    assert '"c_double":1e-300' in logged["[5]"]
    assert '"c_num_any":"-Infinity"' in logged["[5]"]
    assert '"c_double":"-Infinity"' in logged["[6]"]
    assert '"c_double":1.7976931348623157e+308' in logged["[8]"]
    assert '"c_real":0.1,' in logged["[8]"]  # float4 shortest digits, not 0.100000001
    assert '"c_num_any":"NaN","c_real":"-Infinity","c_double":"NaN",' in logged["[9]"]
    assert '"c_num_any":"Infinity","c_real":"Infinity","c_double":-0,' in logged["[10]"]
    # Every value of every row is valid JSON.
    for key in KEYS:
        json.loads(logged[key])


@contextmanager
def streaming_worker(config: Path, tmp_path: Path, dsn: str) -> Iterator[WorkerProcess]:
    """``dblog run``, up once its slot exists: rows written after that are logged."""
    worker = WorkerProcess(config, tmp_path / "worker.log").start()
    try:
        wait_for(lambda: _slot_exists(dsn), 20, "the replication slot",
                 lambda: worker.log()[-4000:])
        yield worker
    finally:
        worker.stop()


def _slot_exists(dsn: str) -> bool:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT count(*) FROM pg_replication_slots "
                           "WHERE database = current_database()").fetchone()
    return row is not None and int(str(row[0])) > 0


# -- TOAST --------------------------------------------------------------------


def test_unchanged_toasted_values_are_carried_by_updates(
    tmp_path: Path, pg_dsn: str, redis_url: str
) -> None:
    execute(pg_dsn, TOAST_DDL)
    config = write_config(tmp_path, pg_dsn, redis_url, ["public.big"])
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        # Incompressible, far beyond the TOAST threshold: stored out of line.
        conn.execute(
            "INSERT INTO public.big (id, counter, payload, blob) SELECT g, 0, "
            "(SELECT string_agg(md5(random()::text || g || i), '') "
            " FROM generate_series(1, 3200) i), "
            "(SELECT decode(string_agg(md5(random()::text || g || i), ''), 'hex') "
            " FROM generate_series(1, 3200) i) "
            "FROM generate_series(1, 2) g"
        )
        stored = conn.execute(
            "SELECT id, payload, encode(blob, 'base64'), pg_column_size(payload) FROM public.big "
            "ORDER BY id"
        ).fetchall()
    payloads = {f"[{row[0]}]": str(row[1]) for row in stored}
    blobs = {f"[{row[0]}]": str(row[2]).replace("\n", "") for row in stored}
    assert all(len(p) == 102_400 for p in payloads.values())
    assert all(int(str(row[3])) > 50_000 for row in stored)  # not compressed away

    with streaming_worker(config, tmp_path, pg_dsn) as worker:
        execute(pg_dsn, "UPDATE public.big SET counter = counter + 1;"
                        "UPDATE public.big SET counter = counter + 1 WHERE id = 1;")
        events = wait_for_updates(tmp_path, worker, {"[1]": 2, "[2]": 1})
        updates = [e for e in events if e["op"] == "u"]
        assert len(updates) == 3
        for event in updates:
            key = str(event["key"])
            after = json.loads(str(event["after"]))
            before = json.loads(str(event["before"]))
            assert after["payload"] == payloads[key], f"{key}: the large value is not carried"
            assert after["blob"] == blobs[key]
            assert before["payload"] == payloads[key]
            assert after["counter"] == before["counter"] + 1
        logged = latest_log_after(events)
        assert json.loads(logged["[1]"])["counter"] == 2

        dump_id = run_dump(config, redis_url, worker, "--table", "public.big")
        dumped = wait_dump_rows(tmp_path, "public.big", dump_id, 2, worker)
        assert dumped == logged
        keys_id = run_dump(config, redis_url, worker, "--table", "public.big",
                           "--keys", "[1, 2]")
        assert wait_dump_rows(tmp_path, "public.big", keys_id, 2, worker) == logged


def wait_for_updates(tmp_path: Path, worker: WorkerProcess,
                     counts: dict[str, int]) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []

    def landed() -> bool:
        nonlocal found
        found = events_of(tmp_path, "public.big")
        seen: dict[str, int] = {}
        for e in found:
            if e["op"] == "u":
                seen[str(e["key"])] = seen.get(str(e["key"]), 0) + 1
        return all(seen.get(k, 0) >= n for k, n in counts.items())

    wait_for(landed, 30, f"updates {counts}", lambda: worker.log()[-4000:])
    return found


# -- the database's own session defaults do not leak into the output ------------


def test_database_session_defaults_do_not_change_the_bytes(
    tmp_path: Path, pg_dsn: str, redis_url: str
) -> None:
    execute(pg_dsn, TZ_DDL)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        database = sql.Identifier(conn.info.dbname)
        for name, value in (("timezone", "Asia/Kolkata"), ("datestyle", "SQL, DMY"),
                            ("intervalstyle", "sql_standard"), ("bytea_output", "escape"),
                            ("extra_float_digits", "0"), ("client_encoding", "LATIN1")):
            conn.execute(sql.SQL("ALTER DATABASE {} SET {} = {}").format(
                database, sql.Identifier(name), sql.Literal(value)))
    with psycopg.connect(pg_dsn) as conn:  # a new session sees the database's defaults
        shown = conn.execute("SELECT current_setting('TimeZone'), "
                             "'2024-01-01 12:00:00'::timestamptz::text, "
                             "current_setting('client_encoding')").fetchone()
    assert shown == ("Asia/Kolkata", "01/01/2024 12:00:00 IST", "LATIN1")

    config = write_config(tmp_path, pg_dsn, redis_url, ["public.times"])
    with streaming_worker(config, tmp_path, pg_dsn) as worker:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            # Literals without an offset are read in the session's (Kolkata) time zone.
            conn.execute(
                "INSERT INTO public.times VALUES "
                "(1, '2024-01-01 12:00:00', '2024-01-01 12:00:00', '2024-03-01', "
                " '1 day 02:00:00', 0.1, 0.1, '\\x00ff'::bytea, "
                " ARRAY['2024-06-30 23:59:59.5'::timestamptz], E'caf\\u00e9 \\U0001F600'), "
                "(2, '2024-07-01 00:00:00+00', NULL, NULL, '-1 year -2 mons', "
                " 1e-300, 3.4e38, '\\x'::bytea, '{}', ''), "
                "(3, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)"
            )
        keys = ["[1]", "[2]", "[3]"]
        logged = latest_log_after(wait_log_events(tmp_path, "public.times", keys, worker))
        dump_id = run_dump(config, redis_url, worker, "--table", "public.times")
        dumped = wait_dump_rows(tmp_path, "public.times", dump_id, 3, worker)
        keys_id = run_dump(config, redis_url, worker, "--table", "public.times",
                           "--keys", "[1, 2, 3]")
        by_key = wait_dump_rows(tmp_path, "public.times", keys_id, 3, worker)
    assert dumped == logged
    assert by_key == logged
    assert logged["[1]"] == (
        '{"id":1,"tstz":"2024-01-01 06:30:00+00","ts":"2024-01-01 12:00:00",'
        '"d":"2024-03-01","iv":"1 day 02:00:00","f8":0.1,"f4":0.1,"b":"AP8=",'
        '"a_tstz":["2024-06-30 18:29:59.5+00"],"t":"café 😀"}'
    )
    assert logged["[2]"] == (
        '{"id":2,"tstz":"2024-07-01 00:00:00+00","ts":null,"d":null,'
        '"iv":"-1 years -2 mons","f8":1e-300,"f4":3.4e+38,"b":"","a_tstz":[],"t":""}'
    )
    assert logged["[3]"] == (
        '{"id":3,"tstz":null,"ts":null,"d":null,"iv":null,"f8":null,"f4":null,"b":null,'
        '"a_tstz":null,"t":null}'
    )


# -- MariaDB ------------------------------------------------------------------

MY_ALL_TYPES_DDL = """
CREATE TABLE all_types (
    id int PRIMARY KEY,
    touched int NOT NULL DEFAULT 0,
    c_tiny tinyint, c_utiny tinyint unsigned, c_small smallint, c_umedium mediumint unsigned,
    c_int int, c_big bigint, c_ubig bigint unsigned, c_zero int(5) zerofill, c_bool bool,
    c_dec decimal(12,2), c_dec30 decimal(65,30), c_float float, c_double double,
    c_char char(5), c_varchar varchar(20), c_text text, c_latin varchar(10) CHARACTER SET latin1,
    c_json json,
    c_binary binary(4), c_varbinary varbinary(10), c_blob blob,
    c_date date, c_datetime datetime, c_datetime3 datetime(3), c_ts timestamp NULL,
    c_ts6 timestamp(6) NULL, c_time time, c_time6 time(6), c_year year,
    c_enum enum('x','y''q','é'), c_set set('p','q','r'), c_bit bit(10),
    c_point point, c_geometry geometry, c_uuid uuid, c_inet4 inet4, c_inet6 inet6
)
"""

MY_COLUMNS = (
    "id, c_tiny, c_utiny, c_small, c_umedium, c_int, c_big, c_ubig, c_zero, c_bool, c_dec, "
    "c_dec30, c_float, c_double, c_char, c_varchar, c_text, c_latin, c_json, c_binary, "
    "c_varbinary, c_blob, c_date, c_datetime, c_datetime3, c_ts, c_ts6, c_time, c_time6, c_year, "
    "c_enum, c_set, c_bit, c_point, c_geometry, c_uuid, c_inet4, c_inet6"
)

MY_ROWS = (
    # 1: ordinary values of every type
    """(1, -128, 255, -32768, 16777215, -2147483648, -9223372036854775808,
        18446744073709551615, 42, true, 1.5, 0.000000000000000000000000000001, 0.1,
        0.30000000000000004, 'ab  ', 'x  ', 'Grüße 😀 "q" \\\\ tab\\tnl\\n', 'é',
        '{"a":  [1, 2]}', x'61', x'6200', x'00ff', '2024-02-29', '2024-01-02 03:04:05',
        '2024-01-02 03:04:05.678', '2024-01-02 03:04:05', '2038-01-19 03:14:07.999999',
        '-838:59:59', '-00:00:01.234567', 2024, 'y''q', 'r,p', b'1000000001',
        ST_GeomFromText('POINT(1 2)', 4326), ST_GeomFromText('LINESTRING(0 0,1 1)'),
        '550e8400-e29b-41d4-a716-446655440000', '192.168.0.1', '2001:db8::ff00:42:8329')""",
    # 2: NULL in every column but the key
    "(2" + ", NULL" * 37 + ")",
    # 3: the edges: zero dates, the empty set, the invalid enum, 0 and maxima
    """(3, 127, 0, 32767, 0, 2147483647, 9223372036854775807, 0, 0, false, -0.50, 0, -0e0,
        1.7976931348623157e308, '', '', '', '', 'null', x'', x'', x'', '0000-00-00',
        '0000-00-00 00:00:00', '2020-05-00 10:00:00.1', '0000-00-00 00:00:00',
        '1970-01-01 05:00:01.5', '838:59:59', '24:00:00', 0, '', '', b'0',
        ST_GeomFromText('POINT(0 0)'), ST_GeomFromText('GEOMETRYCOLLECTION EMPTY'),
        '00000000-0000-0000-0000-000000000000', '0.0.0.0', '::')""",
    # 4: more floating point
    """(4, 0, 1, 0, 1, 0, 0, 1, 99999, 127, 9999999999.99, 1.5, 3.4028234e38, 5e-324,
        'abcde', '😀', NULL, 'ÿ', '[]', x'ffffffff', x'00', NULL, '1000-01-01',
        '9999-12-31 23:59:59', '9999-12-31 23:59:59.999', '2020-01-01 00:00:00',
        '2020-01-01 00:00:00.000001', '00:00:00', '00:00:00.000001', 1901, 'é', 'p,q,r',
        b'1111111111', ST_GeomFromText('POINT(-1.5 1e300)', 3857),
        ST_GeomFromText('MULTIPOLYGON(((0 0,1 0,1 1,0 0)))'),
        'ffffffff-ffff-4fff-bfff-ffffffffffff', '255.255.255.255', '1:0:2:3:4:5:6:7')""",
)
MY_KEYS = [f"[{i}]" for i in range(1, len(MY_ROWS) + 1)]


def test_mariadb_every_type_dump_and_log_give_identical_bytes(
    tmp_path: Path, mariadb_server: MariaDBServer, mariadb_database: str, redis_url: str
) -> None:
    """Rows of every type the MySQL codec supports, inserted while the worker streams (the
    log path), then dumped by table and by key (the dump path): for each key the same
    bytes. Written in a session with its own time zone and SQL mode, which the output
    must not show."""
    database = MariaDatabase(mariadb_server, mariadb_database)
    database.execute(MY_ALL_TYPES_DDL)
    table = database.table("all_types")
    config = write_config(tmp_path, mariadb_server.url(), redis_url, [table], kind="mariadb")
    worker = WorkerProcess(config, tmp_path / "worker.log").start()
    try:
        wait_for(lambda: " streaming " in worker.log() or not worker.alive(), 30,
                 "the worker to stream", lambda: worker.log()[-4000:])
        with database.connect() as session:
            session.execute("SET time_zone = '+05:00', sql_mode = ''")
            for row in MY_ROWS:
                session.execute(f"INSERT INTO all_types ({MY_COLUMNS}) VALUES {row}")
        inserted = latest_log_after(wait_log_events(tmp_path, table, MY_KEYS, worker))
        assert sorted(inserted) == sorted(MY_KEYS)
        # An update of another column: its before image is the insert's row again.
        database.execute("UPDATE all_types SET touched = 1")
        events = wait_log_events(tmp_path, table, MY_KEYS, worker, ops=("u",))
        updates = {str(e["key"]): e for e in events if e["op"] == "u"}
        for key in MY_KEYS:
            assert updates[key]["before"] == inserted[key], f"key {key}: update's before"
        logged = latest_log_after(events)
        assert all('"touched":1,' in logged[key] for key in MY_KEYS)

        table_dump = run_dump(config, redis_url, worker, "--table", table)
        dumped = wait_dump_rows(tmp_path, table, table_dump, len(MY_KEYS), worker)
        assert sorted(dumped) == sorted(MY_KEYS)
        for key in MY_KEYS:
            assert dumped[key] == logged[key], f"key {key}: dump and log differ"
        keys_dump = run_dump(config, redis_url, worker, "--table", table,
                             "--keys", json.dumps(list(range(1, len(MY_ROWS) + 1))))
        by_key = wait_dump_rows(tmp_path, table, keys_dump, len(MY_KEYS), worker)
        for key in MY_KEYS:
            assert by_key[key] == logged[key], f"key {key}: primary-key dump and log differ"
        assert worker.alive()
    finally:
        worker.stop()

    row1 = inserted["[1]"]
    assert row1.startswith('{"id":1,"touched":0,"c_tiny":-128,"c_utiny":255,')
    assert list(json.loads(row1)) == ["id", "touched", *MY_COLUMNS.split(", ")[1:]]
    assert '"c_ubig":18446744073709551615,"c_zero":42,"c_bool":1,' in row1
    assert '"c_dec":"1.50","c_dec30":"0.000000000000000000000000000001",' in row1
    assert '"c_float":0.1,"c_double":0.30000000000000004,' in row1
    assert '"c_char":"ab","c_varchar":"x  ",' in row1  # CHAR padding is not data
    assert json.loads(row1)["c_text"] == 'Grüße 😀 "q" \\ tab\tnl\n'
    assert '"c_latin":"é","c_json":"{\\"a\\":  [1, 2]}",' in row1
    assert '"c_binary":"YQAAAA==","c_varbinary":"YgA=","c_blob":"AP8=",' in row1
    assert '"c_date":"2024-02-29","c_datetime":"2024-01-02 03:04:05",' in row1
    assert '"c_datetime3":"2024-01-02 03:04:05.678",' in row1
    assert '"c_ts":"2024-01-01 22:04:05",' in row1  # written at +05:00, in UTC
    assert '"c_time":"-838:59:59","c_time6":"-00:00:01.234567","c_year":2024,' in row1
    assert '"c_enum":"y\'q","c_set":"p,r","c_bit":513,' in row1
    assert '"c_point":"5hAAAAEBAAAAAAAAAAAA8D8AAAAAAAAAQA==",' in row1  # SRID 4326, WKB
    assert row1.endswith('"c_uuid":"550e8400-e29b-41d4-a716-446655440000",'
                         '"c_inet4":"192.168.0.1","c_inet6":"2001:db8::ff00:42:8329"}')

    doc2 = json.loads(inserted["[2]"])
    assert all(v is None for k, v in doc2.items() if k not in ("id", "touched"))

    row3 = inserted["[3]"]
    assert '"c_dec":"-0.50","c_dec30":"0.000000000000000000000000000000","c_float":0,' in row3
    assert '"c_binary":"AAAAAA==","c_varbinary":"","c_blob":"",' in row3
    assert ('"c_date":"0000-00-00","c_datetime":"0000-00-00 00:00:00",'
            '"c_datetime3":"2020-05-00 10:00:00.100","c_ts":"0000-00-00 00:00:00",'
            '"c_ts6":"1970-01-01 00:00:01.500000",') in row3  # zero dates are MySQL's text
    assert '"c_time6":"24:00:00.000000","c_year":0,"c_enum":"","c_set":"","c_bit":0,' in row3
    assert row3.endswith('"c_uuid":"00000000-0000-0000-0000-000000000000",'
                         '"c_inet4":"0.0.0.0","c_inet6":"::"}')

    row4 = inserted["[4]"]
    assert '"c_float":3.4028235e+38,"c_double":5e-324,' in row4
    assert '"c_zero":99999,"c_bool":127,' in row4
    assert '"c_ts6":"2019-12-31 19:00:00.000001",' in row4
    assert '"c_enum":"é","c_set":"p,q,r","c_bit":1023,' in row4
    assert row4.endswith('"c_inet6":"1::2:3:4:5:6:7"}')
    for key in MY_KEYS:
        json.loads(logged[key])
