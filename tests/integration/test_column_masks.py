"""Column exclusion and masking (``[source.columns]``) on real servers.

For each kind of source: every column type hashed (the tables of test_same_bytes), and a
table of people with a hashed e-mail (a text key of joins), an excluded column and two
masks. Rows are written while the worker streams (the log path), then dumped by table and
by key (the dump path): for each key, the same bytes, and the hashes are those the
documentation defines (HMAC-SHA256 of the value's canonical JSON). The schema document
says what was done. Then the landing zone is merged into a real target, whose masked
columns hold the text, and ``dblog verify`` finds it equal (and a changed hash unequal).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from pyspark.sql import SparkSession

from dblog_worker import config as config_module
from dblog_worker.landing.parquet import LandingZone
from dblog_worker.target.merge import merge_source
from dblog_worker.verify import verify
from spark.merge import spark_stager
from tests.integration.harness import MariaDatabase, WorkerProcess, wait_for
from tests.integration.test_same_bytes import (
    ALL_TYPES_DDL,
    COLUMNS,
    KEYS,
    MY_ALL_TYPES_DDL,
    MY_COLUMNS,
    MY_KEYS,
    MY_ROWS,
    ROWS,
    latest_log_after,
    run_dump,
    wait_dump_rows,
    wait_log_events,
)
from tests.services import MariaDBServer, PostgresServer

SOURCE = "src"
KEY = "a column key of 32 bytes, or so!"
PEOPLE = [
    (1, "ann@example.com", "Ann", "likes tea", "123-45-6789", "+1 555 0100"),
    (2, "bob@example.com", 'Bob "B" \\ ☃', None, None, None),
    (3, None, "Cy", "notes", "987-65-4321", "+1 555 0101"),
    (4, "ann@example.com", "Ann again", "", "", ""),
]


def _hash(fragment: str) -> str:
    return hmac.new(KEY.encode(), fragment.encode(), hashlib.sha256).hexdigest()


@pytest.fixture(autouse=True)
def column_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """The HMAC key, in the environment of the worker, the CLI and this process."""
    monkeypatch.setenv("DBLOG_COLUMN_KEY", KEY)


def _columns_section(schema: str, all_types: str) -> str:
    return f"""
[source.columns]
key_env = "DBLOG_COLUMN_KEY"

[source.columns."{schema}.all_types"]
{all_types}

[source.columns."{schema}.people"]
email = "hash"
notes = "exclude"
ssn = {{ mask = "XXX-XX-XXXX" }}
phone = "mask"
"""


def _config(tmp_path: Path, dsn: str, redis_url: str, kind: str, schema: str, all_types: str,
            target: str = "") -> Path:
    path = tmp_path / "src.toml"
    path.write_text(f"""
[source]
name = "{SOURCE}"
kind = "{kind}"
dsn = {json.dumps(dsn)}
tables = ["{schema}.all_types", "{schema}.people"]
{_columns_section(schema, all_types)}

[redis]
url = "{redis_url}"

[landing]
path = "{tmp_path / 'landing'}"
flush_interval_s = 0.2

[worker]
heartbeat_interval_s = 1.0
control_interval_s = 0.05

[http]
listen = "127.0.0.1:0"
{target}
""")
    return path


def _both_paths(config: Path, redis_url: str, worker: WorkerProcess, tmp_path: Path,
                table: str, keys: list[str], old_rows: bool = True) -> dict[str, str]:
    """The rows of ``table`` from the log (inserted and updated), from a table dump and from
    a key dump: the same bytes for each key; returns them. ``old_rows``: the log's updates
    carry the old row (REPLICA IDENTITY FULL; USING INDEX: none)."""
    events = wait_log_events(tmp_path, table, keys, worker, ops=("u",))
    inserted = {str(e["key"]): e["after"] for e in events if e["op"] == "c"}
    for event in events:
        if event["op"] == "u":  # its old row is the insert's: the same bytes again
            assert event["before"] == (inserted[str(event["key"])] if old_rows else None), \
                event
    logged = latest_log_after(events)
    table_dump = run_dump(config, redis_url, worker, "--table", table)
    dumped = wait_dump_rows(tmp_path, table, table_dump, len(keys), worker)
    numbers = [json.loads(k)[0] for k in keys]
    keys_dump = run_dump(config, redis_url, worker, "--table", table, "--keys",
                         json.dumps(numbers))
    by_key = wait_dump_rows(tmp_path, table, keys_dump, len(keys), worker)
    for key in keys:
        assert dumped[key] == logged[key], f"{table} {key}: table dump and log differ"
        assert by_key[key] == logged[key], f"{table} {key}: key dump and log differ"
    return logged


def _check_people(rows: dict[str, str], schema_document: dict[str, Any],
                  excluded: tuple[str, ...] = ("notes",)) -> None:
    people = {k: json.loads(v) for k, v in rows.items()}
    ann = people["[1]"]
    assert list(ann) == ["id", "email", "name", "ssn", "phone", "touched"]  # no notes
    assert ann["email"] == _hash('"ann@example.com"')  # the JSON string, quotes included
    assert ann["email"] == people["[4]"]["email"]  # same value, same hash: joins work
    assert ann["ssn"] == "XXX-XX-XXXX" and ann["phone"] == "****"
    assert people["[2]"]["ssn"] is None and people["[2]"]["phone"] is None  # NULL stays
    assert people["[3]"]["email"] is None
    assert people["[4]"]["ssn"] == "XXX-XX-XXXX"  # '' is a value: masked
    columns = {c["name"]: c for c in schema_document["columns"]}
    assert columns["email"]["masked"] == "hash" and columns["email"]["type"] == "text"
    assert columns["ssn"]["masked"] == "mask" and "notes" not in columns
    assert schema_document["excluded"] == list(excluded)
    assert KEY not in json.dumps(schema_document)


def _schema(tmp_path: Path, table: str) -> dict[str, Any]:
    documents = LandingZone(tmp_path / "landing", SOURCE).schemas(table)
    return dict(documents[max(documents)])


# -- PostgreSQL ----------------------------------------------------------------------------

# No primary key: keyed by a unique index, which the replica identity names. Two STORED
# generated columns, which the rows do not carry and a PostgreSQL target computes: one
# reads the hashed e-mail (left out: the target would compute it from the hash), one not.
PG_PEOPLE_DDL = """
CREATE TABLE public.people (id integer NOT NULL, email text, name text, notes text,
                            ssn varchar(11), phone text, touched int NOT NULL DEFAULT 0,
                            domain text GENERATED ALWAYS AS (split_part(email, '@', 2)) STORED,
                            name_len int GENERATED ALWAYS AS (length(name)) STORED);
CREATE UNIQUE INDEX people_id ON public.people (id);
ALTER TABLE public.people REPLICA IDENTITY USING INDEX people_id;
"""


def _pg_write(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        for row in ROWS:
            conn.execute(f"INSERT INTO public.all_types ({COLUMNS}) VALUES {row}".encode())
        for person in PEOPLE:
            conn.execute("INSERT INTO public.people (id, email, name, notes, ssn, phone) "
                         "VALUES (%s, %s, %s, %s, %s, %s)", person)
        conn.execute("UPDATE public.all_types SET id = id")
        conn.execute("UPDATE public.people SET touched = 1")


@pytest.fixture
def pg_landed(tmp_path: Path, pg_dsn: str, redis_url: str,
              postgres_server: PostgresServer) -> Iterator[tuple[Path, str]]:
    """A PostgreSQL source captured with masks: the landing zone holds both tables from
    the log and from dumps (checked equal); yields the configuration and a target DSN."""
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(ALL_TYPES_DDL.encode())
        conn.execute(PG_PEOPLE_DDL.encode())
    target_name = f"t_{uuid.uuid4().hex[:16]}"
    target = postgres_server.create_database(target_name)
    config = _config(tmp_path, pg_dsn, redis_url, "postgresql", "public",
                     '"c_*" = "hash"\n"a_*" = "hash"',
                     f'[target]\nkind = "postgresql"\ndsn = {json.dumps(target)}\n')
    worker = WorkerProcess(config, tmp_path / "worker.log").start()
    try:
        wait_for(lambda: " streaming " in worker.log() or not worker.alive(), 30,
                 "the worker to stream", lambda: worker.log()[-4000:])
        _pg_write(pg_dsn)
        rows = _both_paths(config, redis_url, worker, tmp_path, "public.all_types", KEYS)
        row1 = json.loads(rows["[1]"])
        assert list(row1) == [c.strip() for c in COLUMNS.split(",")]
        assert row1["c_int4"] == _hash("2147483647")
        assert row1["c_num"] == _hash('"1.50"') and row1["c_bool"] == _hash("true")
        assert row1["c_bytea"] == _hash('"AP8A"') and row1["a_int"] == _hash("[1,null,-3]")
        assert row1["c_text"] == _hash(json.dumps('Grüße 😀 "q" \\ tab\tnl\n',
                                                  ensure_ascii=False))
        assert json.loads(rows["[2]"])["c_text"] is None
        people = _both_paths(config, redis_url, worker, tmp_path, "public.people",
                             [f"[{p[0]}]" for p in PEOPLE], old_rows=False)
        document = _schema(tmp_path, "public.people")
        _check_people(people, document, ("notes", "domain"))
        assert document["key"] == ["id"]
        assert [g["name"] for g in document["generated"]] == ["name_len"]
        assert KEY not in worker.log()
        yield config, target
    finally:
        worker.stop()
        postgres_server.drop_database(target_name)


def test_postgresql_masks_on_both_paths_then_merge_and_verify(
        pg_landed: tuple[Path, str], spark: SparkSession, pg_dsn: str) -> None:
    config_path, target = pg_landed
    config = config_module.load(config_path)
    report = merge_source(config, spark_stager(spark))
    assert report.ok, report.as_dict()
    with psycopg.connect(target) as conn:
        columns: dict[str, str] = dict(conn.execute(
            "SELECT column_name, data_type FROM information_schema.columns "
            "WHERE table_name = 'people'").fetchall())
        assert columns["email"] == "text" and "notes" not in columns
        assert "domain" not in columns and columns["name_len"] == "integer"
        ann = conn.execute("SELECT email, ssn, name_len FROM public.people WHERE id = 1"
                           ).fetchone()
    assert ann == (_hash('"ann@example.com"'), "XXX-XX-XXXX", 3)
    result = verify(config)
    assert result.equal, result.to_json()
    with psycopg.connect(target, autocommit=True) as conn:
        conn.execute("UPDATE public.people SET email = 'tampered' WHERE id = 2")
        conn.execute("UPDATE public.all_types SET c_int4 = NULL WHERE id = 1")
    tampered = {t.table: t for t in verify(config).tables}
    assert [list(k) for k in tampered["public.people"].changed] == [[2]]
    assert [list(k) for k in tampered["public.all_types"].changed] == [[1]]


# -- MariaDB -------------------------------------------------------------------------------

# No primary key: keyed by a unique index on a NOT NULL column.
MY_PEOPLE_DDL = """
CREATE TABLE people (id int NOT NULL, email varchar(100), name text, notes text,
                     ssn char(11), phone varchar(20), touched int NOT NULL DEFAULT 0,
                     UNIQUE KEY people_id (id))
"""


def test_mariadb_masks_on_both_paths_then_merge_and_verify(
        tmp_path: Path, mariadb_server: MariaDBServer, mariadb_database: str, redis_url: str,
        spark: SparkSession) -> None:
    database = MariaDatabase(mariadb_server, mariadb_database)
    database.execute(MY_ALL_TYPES_DDL)
    database.execute(MY_PEOPLE_DDL)
    target_db = f"{mariadb_database}_t"
    mariadb_server.create_database(target_db)
    target = MariaDatabase(mariadb_server, target_db)
    renames = {f"{mariadb_database}.{t}": f"{target_db}.{t}" for t in ("all_types", "people")}
    section = (f'[target]\nkind = "mariadb"\ndsn = {json.dumps(mariadb_server.url())}\n'
               f'state_schema = "{target_db}_s"\ntables = {{ '
               + ", ".join(f"{json.dumps(s)} = {json.dumps(t)}" for s, t in renames.items())
               + " }\n")
    config_path = _config(tmp_path, mariadb_server.url(), redis_url, "mariadb",
                          mariadb_database, '"c_*" = "hash"', section)
    worker = WorkerProcess(config_path, tmp_path / "worker.log").start()
    try:
        wait_for(lambda: " streaming " in worker.log() or not worker.alive(), 30,
                 "the worker to stream", lambda: worker.log()[-4000:])
        with database.connect() as session:
            session.execute("SET time_zone = '+05:00', sql_mode = ''")
            for row in MY_ROWS:
                session.execute(f"INSERT INTO all_types ({MY_COLUMNS}) VALUES {row}")
            for person in PEOPLE:
                session.execute("INSERT INTO people (id, email, name, notes, ssn, phone) "
                                "VALUES (%s, %s, %s, %s, %s, %s)", person)
            session.execute("UPDATE all_types SET touched = 1")
            session.execute("UPDATE people SET touched = 1")
        table = f"{mariadb_database}.all_types"
        rows = _both_paths(config_path, redis_url, worker, tmp_path, table, MY_KEYS)
        row1 = json.loads(rows["[1]"])
        assert row1["touched"] == 1  # not a c_* column: as it is
        assert row1["c_int"] == _hash("-2147483648") and row1["c_dec"] == _hash('"1.50"')
        assert row1["c_char"] == _hash('"ab"')  # CHAR padding is not data, on both paths
        assert row1["c_bit"] == _hash("513") and row1["c_blob"] == _hash('"AP8="')
        row3 = json.loads(rows["[3]"])  # zero dates land as MySQL's text: hashed so
        assert row3["c_date"] == _hash('"0000-00-00"')
        assert row3["c_uuid"] == _hash('"00000000-0000-0000-0000-000000000000"')
        assert row3["c_inet6"] == _hash('"::"')
        people_table = f"{mariadb_database}.people"
        people = _both_paths(config_path, redis_url, worker, tmp_path, people_table,
                             [f"[{p[0]}]" for p in PEOPLE])
        _check_people(people, _schema(tmp_path, people_table))
        assert KEY not in worker.log()
    finally:
        worker.stop()
    config = config_module.load(config_path)
    report = merge_source(config, spark_stager(spark))
    assert report.ok, report.as_dict()
    merged = target.rows(f"{target_db}.people")
    assert merged["[1]"]["email"] == _hash('"ann@example.com"') and "notes" not in merged["[1]"]
    result = verify(config)
    assert result.equal, result.to_json()
    target.execute("UPDATE people SET ssn = 'changed' WHERE id = 3")
    tampered = {t.table: t for t in verify(config).tables}
    assert [list(k) for k in tampered[people_table].changed] == [[3]]
    mariadb_server.drop_database(target_db)
    mariadb_server.drop_database(f"{target_db}_s")
