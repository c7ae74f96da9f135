"""Hostile identifiers, end to end: every place a table or column name travels.

``test_hostile_names_end_to_end`` runs once per source kind (PostgreSQL, MariaDB) over
three tables whose schema, table and column names need quoting everywhere: ``%`` (a
placeholder to psycopg and PyMySQL), ``%s`` (which PyMySQL would fill with a key value),
quotes, backticks, spaces, dots, non-ASCII, SQL keywords and the longest name the
database takes (:data:`CLASSICS`), and names drawn by a seeded generator
(:func:`hostile_name`). The seed is in the test id; ``DBLOG_HOSTILE_SEED=<n>`` runs
another one, reproducibly. The first table has every classic as a column and a keyword
as its key, the second a composite key, the third only generated names in a schema (a
MariaDB database) with a hostile name.

``dblog preflight`` names the PostgreSQL tables that lack REPLICA IDENTITY FULL with
fixes that, run as printed, fix them. One worker per source captures live inserts,
updates, key changes and deletes; every dump kind runs (all tables from the CLI, some
tables over the HTTP API, keys from the CLI and from the Airflow dump operator, which
checks them against the source first); the output converges to each table; the Spark
job merges the landing zone into a target of the source's kind (one merge run per
target kind), which must equal the source column by column and by ``dblog verify``; the
DAG forms take the names, and the repair DAG's compare (verify) and remove_extra steps
work on them. The generator draws no newline: such names go through too, but split the
text of log lines and of ``dblog preflight``'s fixes, which this test reads.

The merge target is of the source's kind so that each kind's whole range of names is
used (a 64-character MySQL name is too long for PostgreSQL, a trailing space is not a
MySQL name); the SQL of each target for each kind of name is tested on exact text and
through both drivers in tests/unit and tests/integration/test_identifiers.py.
"""

from __future__ import annotations

import contextlib
import copy
import http.client
import io
import json
import os
import random
import re
import unicodedata
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, cast

import psycopg
import pymysql
import pymysql.cursors
import pytest
from pyspark.sql import SparkSession

import tests.airflow.conftest  # noqa: F401  (AIRFLOW_HOME for Airflow, imported below)
from dblog_worker import config as config_module
from dblog_worker.cli import main as cli_main
from dblog_worker.config import name_problem
from dblog_worker.landing.parquet import LandingZone, read_events
from dblog_worker.mysql.catalog import ident as my_ident
from dblog_worker.mysql.options import MYSQL
from dblog_worker.pg.queries import ident as pg_ident
from dblog_worker.table_patterns import escape
from dblog_worker.target.base import POSITION_COLUMN
from dblog_worker.target.merge import merge_source
from spark.merge import spark_stager
from tests.integration.harness import (
    MySession,
    PgSession,
    Session,
    WorkerProcess,
    Workers,
    redis_request,
    replay,
    toml_list,
    toml_string,
    wait_for,
    write_config,
)
from tests.services import MariaDBServer, PostgresServer

if TYPE_CHECKING:
    from airflow.sdk import Context

SOURCE = "src"
SEED = int(os.environ.get("DBLOG_HOSTILE_SEED", "1130"))
CONN_ID = "dblog_hostile"

PG_LONGEST = ('longest %s "name" of 63 bytes: ☃ ' + "x" * 63).encode()[:63].decode()
MY_LONGEST = ('longest %s `name` of 64 characters: ☃ ' + "x" * 64)[:64]
CLASSICS = ["disc%", "a%sb", "%%", 'x"y', "a`b", "with space", "dot.ted",
            "naïve ünïcode ☃", "select", '"']
"""Names that break something when they are not quoted for the statement they are in;
with the key ``order`` and the longest name, the columns of the first table."""

# The generator's characters: SQL and driver specials, non-ASCII; emoji are not MySQL names.
ALPHABET = "abcXYZ019 _%\"`'.\\;:-$?()[]{}#@!&*+=,/<>|~^äöüßé€漢字☃"
EMOJI = "😀🎉"
TOKENS = ("%s", "%(x)s", "%%", "$1", "?", ":name", "--", "/*", "*/", "select", "'); --")


def hostile_name(rnd: random.Random, kind: str, longest: int = 16) -> str:
    """A random name a ``kind`` database takes, of specials, tokens and non-ASCII."""
    alphabet = ALPHABET + ("" if kind == MYSQL else EMOJI)
    while True:
        text = ""
        for _ in range(rnd.randint(1, longest)):
            text += rnd.choice(TOKENS) if rnd.random() < 0.2 else rnd.choice(alphabet)
        text = text[:longest]
        if name_problem(kind, text) is None and text != POSITION_COLUMN:
            return text


def _folded(name: str) -> str:
    """What MySQL compares column names as, at most: no case, no accents."""
    return unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode().casefold()


def distinct_names(rnd: random.Random, kind: str, count: int, taken: Sequence[str] = ()
                   ) -> list[str]:
    names: list[str] = []
    seen = {_folded(n) for n in taken}
    while len(names) < count:
        name = hostile_name(rnd, kind)
        if _folded(name) not in seen:
            seen.add(_folded(name))
            names.append(name)
    return names


# -- the tables -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Table:
    """A source table: its worker's name, its columns (name, "int" or "text") in order,
    and its key columns."""

    name: str
    columns: tuple[tuple[str, str], ...]
    key: tuple[str, ...]

    def value(self, rnd: random.Random, column: str, index: int) -> object:
        """Row ``index``'s value of ``column``: the same key every time, random text."""
        kind = dict(self.columns)[column]
        if kind == "int":
            return index
        if column in self.key:
            return f"k{index} %s '\"`☃"
        return f"v{index} %s '\"`{rnd.choice(ALPHABET)}☃"

    def row(self, rnd: random.Random, index: int) -> dict[str, object]:
        return {name: self.value(rnd, name, index) for name, _ in self.columns}


def make_tables(rnd: random.Random, kind: str, namespace: str, odd_namespace: str
                ) -> list[Table]:
    longest = MY_LONGEST if kind == MYSQL else PG_LONGEST
    classic = Table(
        f"{namespace}.a%sb",
        (("order", "int"), *((c, "text") for c in CLASSICS), (longest, "text")),
        ("order",))
    composite = Table(f"{namespace}.dot.ted",
                      (("a%sb", "text"), ("a`b", "int"), ("%%", "text"), ('x"y', "int")),
                      ("a%sb", "a`b"))
    names = distinct_names(rnd, kind, 5)
    generated = Table(f"{odd_namespace}.{names[0]}",
                      tuple((n, "int" if i == 1 else "text") for i, n in enumerate(names)
                            if i > 0),
                      (names[1],))
    return [classic, composite, generated]


class Database:
    """A source or target database as this test writes and reads it."""

    def __init__(self, kind: str, dsn: str, connect: Callable[[], Session],
                 rows_of: Callable[[str], list[dict[str, Any]]]) -> None:
        self.kind = kind
        self.dsn = dsn
        self.connect = connect
        self._rows = rows_of

    def ident(self, name: str) -> str:
        return my_ident(name) if self.kind == MYSQL else pg_ident(name)

    def sql(self, table: str) -> str:
        schema, name = table.split(".", 1)
        return f"{self.ident(schema)}.{self.ident(name)}"

    def create(self, session: Session, table: Table) -> None:
        def type_of(name: str, kind: str) -> str:
            if kind == "int":
                return "integer"
            return "varchar(100)" if self.kind == MYSQL and name in table.key else "text"

        columns = ", ".join(f"{self.ident(n)} {type_of(n, t)}"
                            + (" NOT NULL" if n in table.key else "")
                            for n, t in table.columns)
        key = ", ".join(self.ident(k) for k in table.key)
        session.run(f"CREATE TABLE {self.sql(table.name)} ({columns}, PRIMARY KEY ({key}))")

    def insert(self, session: Session, table: str, row: dict[str, object]) -> int:
        names = ", ".join(self.ident(n) for n in row)
        marks = ", ".join(["%s"] * len(row))
        return session.run(f"INSERT INTO {self.sql(table)} ({names}) VALUES ({marks})",
                           list(row.values()))

    def rows(self, table: str, key: Sequence[str]) -> dict[str, dict[str, Any]]:
        """The table keyed like the landing zone's keys; without ``_dblog_position``."""
        result = {}
        for row in self._rows(table):
            row.pop(POSITION_COLUMN, None)
            result[json.dumps([row[k] for k in key], ensure_ascii=False,
                              separators=(",", ":"))] = row
        return result


def pg_database(dsn: str) -> Database:
    def rows_of(table: str) -> list[dict[str, Any]]:
        schema, name = table.split(".", 1)
        with psycopg.connect(dsn) as conn, conn.cursor(row_factory=psycopg.rows.dict_row) as cur:
            cur.execute(f"SELECT * FROM {pg_ident(schema)}.{pg_ident(name)}".encode(), ())
            return list(cur.fetchall())

    return Database("postgresql", dsn, partial(PgSession, dsn), rows_of)


def my_database(server: MariaDBServer) -> Database:
    def rows_of(table: str) -> list[dict[str, Any]]:
        schema, name = table.split(".", 1)
        connection = pymysql.connect(**server.connect_args(),
                                     cursorclass=pymysql.cursors.DictCursor)
        with connection, connection.cursor() as cur:
            cur.execute(f"SELECT * FROM {my_ident(schema)}.{my_ident(name)}", ())
            return list(cur.fetchall())

    return Database(MYSQL, server.url(), partial(MySession, server.connect_args()), rows_of)


# -- the case: a source, its target, the configuration --------------------------------------


@dataclass
class Case:
    source: Database
    target: Database
    tables: list[Table]
    config: Path
    renames: dict[str, str]
    rnd: random.Random

    def target_table(self, table: Table) -> str:
        return self.renames.get(table.name, table.name)


@pytest.fixture
def pg_target(postgres_server: PostgresServer) -> Iterator[str]:
    name = f"t_{os.urandom(8).hex()}"
    yield postgres_server.create_database(name)
    postgres_server.drop_database(name)


def make_case(request: pytest.FixtureRequest, kind: str, redis_url: str, tmp_path: Path
              ) -> Case:
    rnd = random.Random(SEED)
    if kind == MYSQL:
        server: MariaDBServer = request.getfixturevalue("mariadb_server")
        namespace: str = request.getfixturevalue("mariadb_database")
        odd = f"db %s \"{namespace[-4:]}\" ☃"
        for database in (odd, f"{namespace}_tgt", f"{namespace}_state"):
            request.addfinalizer(partial(server.drop_database, database))
        source = target = my_database(server)
        tables = make_tables(rnd, kind, namespace, odd)
        renames = {t.name: f"{namespace}_tgt.{t.name.split('.', 1)[1]}" for t in tables}
        section = (f'[target]\nkind = "mariadb"\ndsn = {toml_string(server.url())}\n'
                   f'state_schema = "{namespace}_state"\ntables = {{ '
                   + ", ".join(f"{toml_string(s)} = {toml_string(t)}"
                               for s, t in renames.items()) + " }\n")
        with source.connect() as session:
            session.run(f"CREATE DATABASE {my_ident(odd)} CHARACTER SET utf8mb4")
    else:
        source = pg_database(request.getfixturevalue("pg_dsn"))
        target = pg_database(request.getfixturevalue("pg_target"))
        odd = 'sch "%s" ☃ 😀'
        tables = make_tables(rnd, kind, "public", odd)
        renames = {}
        section = f'[target]\nkind = "postgresql"\ndsn = {toml_string(target.dsn)}\n'
        with source.connect() as session:
            session.run(f"CREATE SCHEMA {pg_ident(odd)}")
    with source.connect() as session:
        for table in tables:
            source.create(session, table)
    # source.tables takes patterns: a name with *, ?, [, ] or \ is written escaped
    config = write_config(tmp_path, source.dsn, redis_url, [escape(t.name) for t in tables],
                          name=SOURCE, kind=source.kind, extra=section)
    return Case(source, target, tables, config, renames, rnd)


# -- writes and checks ----------------------------------------------------------------------


def seed_rows(case: Case, first: int, count: int) -> None:
    with case.source.connect() as session, session.transaction():
        for table in case.tables:
            for index in range(first, first + count):
                case.source.insert(session, table.name, table.row(case.rnd, index))


def live_changes(case: Case, first: int) -> None:
    """On each table: inserts, an update of every other column, a key change, a delete."""
    db = case.source
    with db.connect() as session:
        for table in case.tables:
            sql = db.sql(table.name)
            key = table.key
            where = " AND ".join(f"{db.ident(k)} = %s" for k in key)
            others = [n for n, _ in table.columns if n not in key]
            with session.transaction():
                for index in range(first, first + 3):
                    db.insert(session, table.name, table.row(case.rnd, index))
            row = table.row(case.rnd, first)
            sets = ", ".join(f"{db.ident(n)} = %s" for n in others)
            assert session.run(f"UPDATE {sql} SET {sets} WHERE {where}",
                               [case.rnd.choice([None, 7]) if dict(table.columns)[n] == "int"
                                else f"changed %s {n}" for n in others]
                               + [row[k] for k in key]) == 1
            moved = table.row(case.rnd, first + 1)
            new_key = [v + 1000 if isinstance(v, int) else f"{v} moved" for v in
                       (moved[k] for k in key)]
            changes = ", ".join(f"{db.ident(k)} = %s" for k in key)
            assert session.run(f"UPDATE {sql} SET {changes} WHERE {where}",
                               [*new_key, *(moved[k] for k in key)]) == 1
            gone = table.row(case.rnd, first + 2)
            assert session.run(f"DELETE FROM {sql} WHERE {where}",
                               [gone[k] for k in key]) == 1


def wait_converged(case: Case, worker: WorkerProcess) -> None:
    """The landed output of each table, replayed, equals the table."""
    for table in case.tables:
        def same(table: Table = table) -> bool:
            landed = replay(case.config.parent / "landing", SOURCE, table.name, "-").rows
            return landed == case.source.rows(table.name, table.key)

        wait_for(same, 30, f"the output of {table.name!r} to equal the table",
                 lambda: worker.log()[-4000:])


def preflight_and_fix(case: Case) -> None:
    """``dblog preflight`` names what is missing (on PostgreSQL, a REPLICA IDENTITY that
    carries the key: NOTHING does not) with fixes a person runs as printed; run so, they fix
    exactly these tables."""
    config = str(case.config)
    if case.source.kind != MYSQL:
        with psycopg.connect(case.source.dsn, autocommit=True) as conn:
            for table in case.tables:
                conn.execute(f"ALTER TABLE {case.source.sql(table.name)} "  # %% written %
                             "REPLICA IDENTITY NOTHING", [])
    status, output = run_cli("preflight", "--config", config)
    if case.source.kind != MYSQL:
        assert status == 1, output
        fixes = [line.removeprefix("  fix: ") for line in output.splitlines()
                 if line.startswith("  fix: ")]
        assert len(fixes) == len(case.tables), output
        with psycopg.connect(case.source.dsn, autocommit=True) as conn:
            for fix in fixes:
                conn.execute(fix.encode())  # as psql would: no parameters
        status, output = run_cli("preflight", "--config", config)
    assert status == 0 and f"is ready: {len(case.tables)} table(s)" in output, output


def run_cli(*args: str) -> tuple[int, str]:
    output = io.StringIO()
    with contextlib.redirect_stdout(output):
        status = cli_main(list(args))
    return status, output.getvalue()


def dump(case: Case, *args: str) -> str:
    status, output = run_cli("dump", "--config", str(case.config), *args, "--json")
    assert status == 0, output
    request_id: str = json.loads(output)["id"]
    return request_id


def wait_completed(case: Case, request_id: str, worker: WorkerProcess) -> dict[str, str]:
    redis_url = config_module.load(case.config).redis_url

    def ended() -> bool:
        return redis_request(redis_url, SOURCE, request_id).get("state") in (
            "completed", "failed")

    wait_for(ended, 60, f"{request_id} to end", lambda: worker.log()[-4000:])
    state = redis_request(redis_url, SOURCE, request_id)
    assert state["state"] == "completed", state
    return state


# -- the HTTP API ---------------------------------------------------------------------------


def http_call(url: str, method: str, path: str, body: object = None) -> tuple[int, Any]:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        payload = None if body is None else json.dumps(body, ensure_ascii=False).encode()
        connection.request(method, path, body=payload,
                           headers={"Content-Type": "application/json"})
        response = connection.getresponse()
        return response.status, json.loads(response.read())
    finally:
        connection.close()


def http_dump(case: Case, worker: WorkerProcess, tables: Sequence[str]) -> None:
    """A tables dump over the HTTP API: the names come back exactly, in the request and in
    its progress."""
    found = re.search(r"HTTP API on (http://127\.0\.0\.1:\d+)", worker.log())
    assert found is not None, worker.log()[-3000:]
    url = found.group(1)
    status, created = http_call(url, "POST", "/api/v1/requests",
                                {"kind": "tables", "tables": list(tables), "chunk_size": 4})
    assert status == 201, created
    assert created["tables"] == list(tables)

    def done() -> bool:
        return http_call(url, "GET", f"/api/v1/requests/{created['id']}")[1]["state"] in (
            "completed", "failed")

    wait_for(done, 60, "the HTTP dump", lambda: worker.log()[-4000:])
    status, shown = http_call(url, "GET", f"/api/v1/requests/{created['id']}")
    assert (status, shown["state"]) == (200, "completed"), shown
    assert set(shown["progress"]) == set(tables)
    assert all(p["done"] for p in shown["progress"].values()), shown
    status, listed = http_call(url, "GET", "/api/v1/requests")
    assert status == 200 and [e["tables"] for e in listed if e["id"] == created["id"]] == [
        list(tables)]


# -- Airflow --------------------------------------------------------------------------------


def airflow_dump_and_forms(case: Case, worker: WorkerProcess,
                           monkeypatch: pytest.MonkeyPatch) -> None:
    """The DAG forms take the names; the dump operator (its hook checks the tables and
    keys against the source) queues a keys dump that completes."""
    from airflow.sdk.definitions.param import ParamsDict
    from dblog_airflow.operators.dump import DblogDumpOperator

    from tests.airflow.dag_files import load_dags

    from dblog_dags.params import check_dump  # isort: skip  (dags/ is on sys.path now)

    names = [t.name for t in case.tables]
    redis_url = config_module.load(case.config).redis_url
    host, port = redis_url.removeprefix("redis://").split("/")[0].rsplit(":", 1)
    monkeypatch.setenv(f"AIRFLOW_CONN_{CONN_ID.upper()}", json.dumps({
        "conn_type": "dblog", "host": host, "port": int(port), "schema": "0",
        "extra": {"source": SOURCE, "config": str(case.config)}}))
    dags = load_dags({"DBLOG_CONFIG": str(case.config)})
    for dag_id, conf in (("dblog_dump", {"scope": "tables", "tables": names}),
                         ("dblog_dump", {"scope": "keys", "tables": names[:1], "keys": "[1]"}),
                         ("dblog_repair", {"table": names[2]})):
        params: ParamsDict = copy.deepcopy(dags[dag_id].params)
        assert params.get_param("table" if dag_id == "dblog_repair" else "tables"
                                ).schema["examples"] == names
        params.update(conf)
        params.validate()
        assert {k: params[k] for k in conf} == conf
    form = check_dump("keys", names[:1], "[1, 2, 99999]")
    composite = case.tables[1]
    row = composite.row(case.rnd, 5)
    operator = DblogDumpOperator(task_id="submit", scope="keys", tables=[composite.name],
                                 keys=json.dumps([[row[k] for k in composite.key]]),
                                 chunk_size=3, dblog_conn_id=CONN_ID)
    pushed: dict[str, object] = {}  # the task's XCom: the live view link's URL
    ti = SimpleNamespace(dag_id="dblog_dump", run_id="hostile", task_id="submit",
                         map_index=-1, try_number=1,
                         xcom_push=lambda key, value: pushed.__setitem__(key, value))
    request_id = operator.execute(cast("Context", {"ti": ti, "run_id": "hostile"}))
    wait_completed(case, request_id, worker)
    checked = DblogDumpOperator(task_id="submit2", scope=form.scope, tables=form.tables,
                                keys=form.keys, chunk_size=2, dblog_conn_id=CONN_ID)
    ti2 = SimpleNamespace(**{**ti.__dict__, "task_id": "submit2"})
    request_id = checked.execute(cast("Context", {"ti": ti2, "run_id": "hostile"}))
    wait_completed(case, request_id, worker)


def airflow_repair_steps(case: Case) -> None:
    """The repair DAG's compare (verify) and remove_extra on a hostile table: an extra row
    in the target is found, removed, and the table is equal again."""
    from dblog_airflow.verify import run_verify

    from dblog_dags.extras import remove_extra  # isort: skip

    table = case.tables[1]  # a composite key: "a%sb", "a`b"
    extra = {**table.row(case.rnd, 90_000), POSITION_COLUMN: None}
    with case.target.connect() as session:
        case.target.insert(session, case.target_table(table), extra)
    key = [extra[k] for k in table.key]
    found = run_verify(CONN_ID, [table.name], range_rows=8)
    entry = found["tables"][table.name]
    assert (found["equal"], entry["error"], entry["extra"]) == (False, None, [key]), entry
    config = config_module.load(case.config)
    done = remove_extra(config, table.name, entry["extra"])
    assert (done.removed, done.kept) == ([key], [])
    again = run_verify(CONN_ID, [t.name for t in case.tables], range_rows=8)
    assert again["equal"], again


# -- the test -------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["postgresql", MYSQL],
                         ids=[f"postgresql-seed{SEED}", f"mariadb-seed{SEED}"])
def test_hostile_names_end_to_end(kind: str, request: pytest.FixtureRequest, redis_url: str,
                                  tmp_path: Path, spark: SparkSession,
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    case = make_case(request, kind, redis_url, tmp_path)
    seed_rows(case, 1, 20)
    preflight_and_fix(case)
    names = [t.name for t in case.tables]
    with Workers(tmp_path / "worker.log") as workers:
        worker = workers.start(case.config)
        live_changes(case, 100)
        # all tables (CLI), then the output equals every table
        wait_completed(case, dump(case, "--all", "--chunk-size", "6"), worker)
        wait_converged(case, worker)
        live_changes(case, 200)
        # some tables, over the HTTP API
        http_dump(case, worker, [names[2], names[0]])
        # keys (CLI): one that exists, one that never did
        composite = case.tables[1]
        row = composite.row(case.rnd, 7)
        keys = json.dumps([[row[k] for k in composite.key], ["nope %s", -1]],
                          ensure_ascii=False)
        request_id = dump(case, f"--table={composite.name}", "--keys", keys)
        wait_completed(case, request_id, worker)
        status, shown = run_cli("show", request_id, "--config", str(case.config), "--json")
        assert status == 0 and json.loads(shown)["tables"] == [composite.name], shown
        assert json.loads(shown)["progress"][composite.name]["missing"] == 1, shown
        airflow_dump_and_forms(case, worker, monkeypatch)
        live_changes(case, 300)
        wait_converged(case, worker)
        assert worker.alive(), worker.log()[-4000:]
    zone = LandingZone(tmp_path / "landing", SOURCE)
    assert sorted(zone.tables()) == sorted(names)
    for name in names:  # live inserts, updates, key changes (d + c), deletes; dump reads
        assert {str(e["op"]) for e in read_events(zone, name)} == {"c", "u", "d", "r"}, name

    report = merge_source(config_module.load(case.config), spark_stager(spark))
    assert report.ok, report.as_dict()
    assert [(t.table, t.target_table) for t in report.tables] == sorted(
        (t.name, case.target_table(t)) for t in case.tables)
    assert all(t.upserted > 20 for t in report.tables), report.as_dict()
    for table in case.tables:
        expected = case.source.rows(table.name, table.key)
        assert len(expected) > 20
        assert case.target.rows(case.target_table(table), table.key) == expected, table.name
    status, output = run_cli("verify", "--config", str(case.config), "--range-rows", "8",
                             "--json")
    assert status == 0, output
    assert [(t["table"], t["equal"]) for t in json.loads(output)["tables"]] == [
        (name, True) for name in names]
    airflow_repair_steps(case)


def test_the_generator_is_seeded_and_keeps_to_each_kind() -> None:
    for kind in ("postgresql", MYSQL):
        first = distinct_names(random.Random(SEED), kind, 50)
        assert first == distinct_names(random.Random(SEED), kind, 50)
        assert all(name_problem(kind, n) is None for n in first)
        assert any("%" in n for n in first) and any(not n.isascii() for n in first)
    assert name_problem("postgresql", PG_LONGEST) is None and len(PG_LONGEST.encode()) == 63
    assert name_problem(MYSQL, MY_LONGEST) is None and len(MY_LONGEST) == 64
    assert toml_list(["a😀"]) == '["a😀"]'
