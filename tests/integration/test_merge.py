"""The merge against real targets, from landing zones written event by event.

Spark stages (the session's local[2]), PostgreSQL and MariaDB apply. Each test lands
segments with :class:`LandingZone` as the worker would, merges, and reads the target
back. Replays are made by forgetting the merge log (what an operator's reset does) and
by hiding newer segments, so that older events reach a target that has seen newer ones.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pymysql
import pytest
from pyspark.sql import SparkSession

from dblog_worker import config as config_module
from dblog_worker.config import Config
from dblog_worker.errors import TargetUnavailable
from dblog_worker.events import ChangeEvent, Op, Origin
from dblog_worker.landing.parquet import LandingZone
from dblog_worker.landing.parquet_files import FileSegment as Segment
from dblog_worker.landing.sink import LandedReader
from dblog_worker.pg.target import PostgresTarget
from dblog_worker.pg.values import libpq_options
from dblog_worker.position import Position
from dblog_worker.target.base import Target
from dblog_worker.target.merge import MergeReport, merge_source, open_target
from dblog_worker.target.plan import Batch, stage_name
from dblog_worker.target.submit import submit_command
from spark import merge as merge_job
from spark.merge import spark_stager
from tests.services import MariaDBServer

TABLE = "public.items"
COLUMNS = [("id", "int4", 23), ("name", "text", 25), ("n", "int8", 20)]


def schema(columns: Sequence[tuple[str, str, int]] = COLUMNS) -> dict[str, object]:
    return {"columns": [{"name": n, "type": t, "type_oid": o} for n, t, o in columns],
            "key": ["id"]}


def row(id_: int, name: str | None, n: int | None = None, **extra: object) -> str:
    return json.dumps({"id": id_, "name": name, "n": n, **extra}, separators=(",", ":"),
                      ensure_ascii=False)


def ev(op: str, major: int, id_: int | None, after: str | None = None, *,
       version: int = 1, table: str = TABLE) -> ChangeEvent:
    return ChangeEvent(table, Op(op), Position(major, 0, 0),
                       None if id_ is None else f"[{id_}]", after, None,
                       Origin.DUMP if op == "r" else Origin.LOG, 1_700_000_000_000_000, version)


@dataclass
class Bed:
    """A landing zone of source ``src`` and one target database."""

    root: Path
    kind: str  # target kind
    dsn: str
    target_table: str
    state: str
    mysql_args: dict[str, Any]

    @property
    def zone(self) -> LandingZone:
        return LandingZone(self.root, "src")

    def config(self, **merge: object) -> Config:
        return config_module.parse({
            "source": {"name": "src", "dsn": "host=127.0.0.1", "tables": [TABLE]},
            "redis": {"url": "redis://127.0.0.1:1"},
            "landing": {"path": str(self.root)},
            "target": {"kind": self.kind, "dsn": self.dsn, "state_schema": self.state,
                       "tables": {TABLE: self.target_table}},
            "merge": merge,
        }, {})

    def land(self, *events: ChangeEvent, table: str = TABLE) -> Segment:
        return self.zone.commit_segment(table, list(events))

    def merge(self, spark: SparkSession, tables: Sequence[str] = (),
              **merge: object) -> MergeReport:
        return merge_source(self.config(**merge), spark_stager(spark), tables)

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        if self.kind == "postgresql":
            with psycopg.connect(self.dsn, autocommit=True, options=libpq_options()) as conn:
                cursor = conn.execute(sql.encode(), params)
                return cursor.fetchall() if cursor.description else []
        conn = pymysql.connect(**self.mysql_args, autocommit=True)
        try:
            with conn.cursor() as cursor:
                cursor.execute(sql, params)
                return list(cursor.fetchall())
        finally:
            conn.close()

    def q(self, name: str) -> str:
        quote = '"' if self.kind == "postgresql" else "`"
        return ".".join(f"{quote}{part}{quote}" for part in name.split(".", 1))

    def rows(self) -> dict[int, tuple[Any, ...]]:
        """The target table's rows by id; {} while it does not exist."""
        schema, name = self.target_table.split(".", 1)
        if not self.query("SELECT 1 FROM information_schema.tables WHERE table_schema = %s"
                          " AND table_name = %s", (schema, name)):
            return {}
        return {r[0]: tuple(r[1:]) for r in self.query(
            f"SELECT id, name, n FROM {self.q(self.target_table)} ORDER BY id")}

    def forget_merge_log(self) -> None:
        self.query(f"DELETE FROM {self.q(self.state + '.merge_log')}")

    def merged_events(self) -> int:
        found = self.query(f"SELECT events FROM {self.q(self.state + '.merge_log')}")
        return int(found[0][0]) if found else 0

    def tombstones(self) -> list[str]:
        return [r[0] for r in self.query(
            f"SELECT key_json FROM {self.q(self.state + '.tombstones')} ORDER BY key_json")]


@pytest.fixture(params=["postgresql", "mariadb"])
def bed(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Bed]:
    if request.param == "postgresql":
        dsn = request.getfixturevalue("pg_dsn")
        yield Bed(tmp_path / "landing", "postgresql", dsn, "public.items", "dblog", {})
        return
    server: MariaDBServer = request.getfixturevalue("mariadb_server")
    database = request.getfixturevalue("mariadb_database")
    args = server.connect_args()
    url = f"mysql://{args['user']}@{args['host']}:{args['port']}"
    yield Bed(tmp_path / "landing", "mysql", url, f"{database}.items", database,
              {k: args[k] for k in ("host", "port", "user")})


@pytest.fixture
def pg_bed(tmp_path: Path, pg_dsn: str) -> Bed:
    return Bed(tmp_path / "landing", "postgresql", pg_dsn, "public.items", "dblog", {})


def setup_zone(bed: Bed) -> None:
    bed.zone.write_schema(TABLE, 1, schema())


def hide(segment: Segment) -> Path:
    hidden = segment.path.with_name("hidden-" + segment.path.name)
    os.rename(segment.path, hidden)
    return hidden


# -- the guarded apply --------------------------------------------------------------------


def test_merge_applies_the_latest_event_per_key(bed: Bed, spark: SparkSession) -> None:
    setup_zone(bed)
    bed.land(ev("r", 1, 1, row(1, "a", 10)), ev("r", 2, 2, row(2, "b")), ev("c", 3, 3, row(3, "c")))
    bed.land(ev("u", 4, 1, row(1, "a2", 11)), ev("d", 5, 2), ev("u", 6, 1, row(1, "a3", 12)))
    report = bed.merge(spark)
    assert report.ok, report.as_dict()
    assert bed.rows() == {1: ("a3", 12), 3: ("c", None)}
    [table] = report.tables
    assert (table.batches, table.events, table.upserted, table.deleted) == (1, 6, 2, 0)
    assert bed.tombstones() == ["[2]"]

    again = bed.merge(spark)
    assert again.ok and again.tables[0].batches == 0
    assert bed.merged_events() == 6


def test_the_same_batch_twice_changes_nothing(bed: Bed, spark: SparkSession) -> None:
    setup_zone(bed)
    bed.land(ev("c", 1, 1, row(1, "a")), ev("c", 2, 2, row(2, "b")))
    bed.land(ev("u", 3, 1, row(1, "a2")), ev("d", 4, 2))
    assert bed.merge(spark).ok
    before = bed.rows()
    bed.forget_merge_log()
    report = bed.merge(spark)
    assert report.ok and report.tables[0].events == 4
    assert report.tables[0].upserted == 0 and report.tables[0].deleted == 0
    assert bed.rows() == before == {1: ("a2", None)}


def test_an_older_batch_after_a_newer_one_changes_nothing(bed: Bed, spark: SparkSession) -> None:
    setup_zone(bed)
    older = bed.land(ev("c", 1, 1, row(1, "old")), ev("c", 2, 2, row(2, "old")))
    newer = bed.land(ev("u", 3, 1, row(1, "new")), ev("u", 4, 2, row(2, "new")),
                     ev("c", 5, 3, row(3, "new")))
    assert bed.merge(spark, batch_max_events=2).tables[0].batches == 2
    hidden = hide(newer)
    bed.forget_merge_log()
    report = bed.merge(spark)
    assert report.ok and report.tables[0].upserted == 0
    assert bed.rows() == {1: ("new", None), 2: ("new", None), 3: ("new", None)}
    os.rename(hidden, newer.path)
    assert older.seq < newer.seq


def test_a_replayed_upsert_does_not_bring_a_deleted_row_back(bed: Bed, spark: SparkSession) -> None:
    setup_zone(bed)
    bed.land(ev("c", 1, 1, row(1, "a")), ev("c", 2, 2, row(2, "b")))
    deletes = bed.land(ev("d", 3, 1))
    assert bed.merge(spark).ok
    assert bed.rows() == {2: ("b", None)}
    hidden = hide(deletes)
    bed.forget_merge_log()
    assert bed.merge(spark).ok
    assert bed.rows() == {2: ("b", None)}, "the upsert at 1 is older than the tombstone at 3"
    os.rename(hidden, deletes.path)
    bed.land(ev("c", 4, 1, row(1, "again")))
    assert bed.merge(spark).ok
    assert bed.rows() == {1: ("again", None), 2: ("b", None)}
    assert bed.tombstones() == [], "a newer upsert of the key retires its tombstone"


def test_a_truncate_clears_what_came_before_it(bed: Bed, spark: SparkSession) -> None:
    setup_zone(bed)
    bed.land(ev("c", 1, 1, row(1, "a")), ev("c", 2, 2, row(2, "b")))
    assert bed.merge(spark).ok
    bed.land(ev("u", 3, 2, row(2, "b2")), ev("t", 4, None), ev("c", 5, 3, row(3, "c")))
    bed.land(ev("c", 6, 4, row(4, "d")))
    report = bed.merge(spark)
    assert report.ok and report.tables[0].truncated
    assert bed.rows() == {3: ("c", None), 4: ("d", None)}
    # A truncate inside one batch with rows before it: none of them applies.
    bed.land(ev("c", 7, 5, row(5, "e")), ev("t", 8, None), ev("c", 9, 6, row(6, "f")))
    assert bed.merge(spark).ok
    assert bed.rows() == {6: ("f", None)}


def test_tombstones_go_after_their_retention(bed: Bed, spark: SparkSession) -> None:
    setup_zone(bed)
    bed.land(ev("c", 1, 1, row(1, "a")), ev("d", 2, 1), ev("c", 3, 2, row(2, "b")), ev("d", 4, 2))
    assert bed.merge(spark, tombstone_retention_h=24).ok
    assert bed.tombstones() == ["[1]", "[2]"]
    bed.land(ev("c", 5, 3, row(3, "c")))
    assert bed.merge(spark, tombstone_retention_h=24).ok
    assert bed.tombstones() == ["[1]", "[2]"], "younger than the retention"
    bed.land(ev("c", 6, 4, row(4, "d")))
    assert bed.merge(spark, tombstone_retention_h=0).ok
    assert bed.tombstones() == []
    assert bed.rows() == {3: ("c", None), 4: ("d", None)}


# -- schema ---------------------------------------------------------------------------------


def test_a_column_added_at_the_source_is_added_to_the_target(bed: Bed,
                                                             spark: SparkSession) -> None:
    setup_zone(bed)
    bed.land(ev("c", 1, 1, row(1, "a")), ev("c", 2, 2, row(2, "b")))
    assert bed.merge(spark).ok
    bed.zone.write_schema(TABLE, 2, schema([*COLUMNS, ("note", "varchar", 1043)]))
    bed.land(ev("u", 3, 1, row(1, "a2", note="ünï ✓"), version=2),
             ev("c", 4, 3, row(3, "c", note=None), version=2))
    assert bed.merge(spark).ok
    found = {r[0]: r[1:] for r in bed.query(
        f"SELECT id, name, note FROM {bed.q(bed.target_table)} ORDER BY id")}
    assert found == {1: ("a2", "ünï ✓"), 2: ("b", None), 3: ("c", None)}


def test_a_target_with_another_primary_key_is_refused(bed: Bed, spark: SparkSession) -> None:
    setup_zone(bed)
    if bed.kind == "postgresql":
        bed.query("CREATE TABLE public.items (id int, name text, n bigint, PRIMARY KEY (name))")
    else:
        bed.query(f"CREATE TABLE {bed.q(bed.target_table)} (id INT, name VARCHAR(20), n BIGINT,"
                  " PRIMARY KEY (name))")
    bed.land(ev("c", 1, 1, row(1, "a")))
    report = bed.merge(spark)
    [table] = report.tables
    assert not report.ok
    assert f"target table {bed.target_table} has primary key (name)" in table.error
    assert "has (id)" in table.error
    assert bed.rows() == {} and bed.merged_events() == 0


def test_a_type_the_target_cannot_hold_is_refused_by_name(bed: Bed, spark: SparkSession) -> None:
    columns = [*COLUMNS, ("spot", "point" if bed.kind == "postgresql" else "_int4",
                          600 if bed.kind == "postgresql" else 1007)]
    if bed.kind == "postgresql":
        columns[-1] = ("spot", "tid", 27)
    bed.zone.write_schema(TABLE, 1, schema(columns))
    bed.land(ev("c", 1, 1, row(1, "a")))
    report = bed.merge(spark)
    assert not report.ok
    assert f"{TABLE}: column 'spot' has type" in report.tables[0].error
    assert "cannot hold" in report.tables[0].error
    assert bed.merged_events() == 0


def test_a_value_the_target_type_refuses_rolls_the_batch_back(bed: Bed,
                                                              spark: SparkSession) -> None:
    setup_zone(bed)
    bed.land(ev("c", 1, 1, row(1, "a")))
    assert bed.merge(spark).ok
    bed.land(ev("c", 2, 2, row(2, "b")), ev("c", 3, 3, '{"id":3,"name":"c","n":"many"}'))
    report = bed.merge(spark)
    assert not report.ok
    assert "was not applied" in report.tables[0].error or "refused" in report.tables[0].error
    assert bed.rows() == {1: ("a", None)}
    assert bed.merged_events() == 1


# -- damaged input ---------------------------------------------------------------------------


def test_a_truncated_segment_stops_its_table_only(bed: Bed, spark: SparkSession) -> None:
    other = "public.others"
    setup_zone(bed)
    bed.zone.write_schema(other, 1, schema())
    bed.land(ev("c", 1, 1, row(1, "a")))
    broken = bed.land(ev("c", 2, 2, row(2, "b")))
    bed.land(ev("c", 3, 3, row(3, "c")))
    bed.land(ev("c", 1, 7, row(7, "x"), table=other), table=other)
    data = broken.path.read_bytes()
    broken.path.write_bytes(data[: len(data) // 2])
    config = bed.config(batch_max_events=1)
    target = config.require_target()
    renames = {TABLE: bed.target_table, other: bed.target_table.replace("items", "others")}
    config = config_module.parse({
        "source": {"name": "src", "dsn": "host=127.0.0.1", "tables": [TABLE, other]},
        "redis": {"url": "redis://127.0.0.1:1"}, "landing": {"path": str(bed.root)},
        "target": {"kind": bed.kind, "dsn": target.dsn, "state_schema": bed.state,
                   "tables": renames},
        "merge": {"batch_max_events": 1},
    }, {})
    report = merge_source(config, spark_stager(spark))
    by_table = {t.table: t for t in report.tables}
    assert not report.ok
    assert str(broken.path) in by_table[TABLE].error
    assert by_table[TABLE].batches == 0 and bed.rows() == {}, "nothing of the table applied"
    assert by_table[other].error == "" and by_table[other].events == 1
    assert bed.query(f"SELECT id FROM {bed.q(renames[other])}") == [(7,)]


def test_a_damaged_page_is_named_when_spark_reads_it(pg_bed: Bed, spark: SparkSession) -> None:
    bed = pg_bed
    setup_zone(bed)
    text = "".join(chr(0x41 + (i * 7919) % 26) for i in range(20_000))
    segment = bed.land(*(ev("c", i, i, row(i, text[i:] + text[:i])) for i in range(1, 60)))
    data = bytearray(segment.path.read_bytes())
    middle = len(data) // 2
    data[middle:middle + 64] = bytes(64)
    segment.path.write_bytes(bytes(data))
    report = bed.merge(spark)
    assert not report.ok
    assert str(segment.path) in report.tables[0].error
    assert bed.merged_events() == 0


# -- the target goes away, another merge runs -------------------------------------------------


def test_a_target_lost_mid_batch_rolls_back_and_the_rerun_applies_once(
    pg_bed: Bed, spark: SparkSession
) -> None:
    bed = pg_bed
    setup_zone(bed)
    bed.land(*(ev("c", i, i, row(i, f"r{i}")) for i in range(1, 101)))
    bed.land(*(ev("u", 100 + i, i, row(i, f"u{i}")) for i in range(1, 51)))
    stage = spark_stager(spark)

    def stage_then_lose_the_target(batch: Batch, target: Target, reader: LandedReader) -> None:
        stage(batch, target, reader)
        assert isinstance(target, PostgresTarget)
        pid = target.conn.info.backend_pid
        with psycopg.connect(bed.dsn, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (pid,))

    with pytest.raises(TargetUnavailable, match="re-run the merge"):
        merge_source(bed.config(), stage_then_lose_the_target)
    assert bed.rows() == {} and bed.merged_events() == 0
    report = bed.merge(spark)
    assert report.ok and report.tables[0].events == 150
    assert bed.merged_events() == 150
    assert bed.rows() == {i: (f"u{i}" if i <= 50 else f"r{i}", None) for i in range(1, 101)}


def test_a_second_merge_of_the_same_table_waits_its_turn(pg_bed: Bed, spark: SparkSession) -> None:
    bed = pg_bed
    setup_zone(bed)
    bed.land(ev("c", 1, 1, row(1, "a")))
    lock = stage_name("src", TABLE, bed.target_table)
    with psycopg.connect(bed.dsn, autocommit=True) as other:
        other.execute("SELECT pg_advisory_lock(hashtextextended(%s, 0))", (lock,))
        report = bed.merge(spark)
        assert "another merge into public.items is running" in report.tables[0].error
        assert bed.merged_events() == 0
    assert bed.merge(spark).ok
    assert bed.rows() == {1: ("a", None)}


def test_the_spark_submit_line(pg_bed: Bed, tmp_path: Path) -> None:
    config = pg_bed.config(master="spark://cluster:7077", jars=["/opt/jars/pg.jar"],
                           spark_conf={"spark.executor.memory": "4g"})
    with pytest.raises(ValueError, match="give the properties file"):
        submit_command(config, tmp_path / "worker.toml", tables=[TABLE])
    properties = tmp_path / "spark.properties"
    command = submit_command(config, tmp_path / "worker.toml", tables=[TABLE], as_json=True,
                             properties_file=properties)
    assert command[:5] == ["spark-submit", "--master", "spark://cluster:7077", "--name",
                           "dblog-merge-src"]
    assert command[command.index("--jars") + 1] == "/opt/jars/pg.jar"
    assert "spark.executor.memory=4g" not in command  # merge.spark_conf: in the file
    assert command[command.index("--properties-file") + 1] == str(properties)
    assert "--load-spark-defaults" not in command  # not in Spark 3.5: the file holds them
    assert "spark.driver.host=127.0.0.1" not in command, "loopback only for local masters"
    assert command[-5:] == [str(Path("spark/merge.py").resolve()), "--config",
                            str((tmp_path / "worker.toml").resolve()), f"--table={TABLE}",
                            "--json"]
    assert not any("password" in part for part in command)
    # --table=T: a name that starts with "-" or holds spaces stays one argument
    odd = submit_command(config, tmp_path / "worker.toml", tables=["-s.t %s", "public.a b"],
                         properties_file=properties)
    assert odd[-2:] == ["--table=-s.t %s", "--table=public.a b"]
    assert merge_job._parser().parse_args(odd[odd.index("--config"):]).tables == [
        "-s.t %s", "public.a b"]


def test_names_that_need_quoting_stay_names(bed: Bed, spark: SparkSession) -> None:
    odd = ['key "id"', "b`c", "d'e", "f\\g", 'h."i"', "$.j", "ü ✓"]
    columns = [(odd[0], "int4", 23), *((name, "text", 25) for name in odd[1:])]
    bed.zone.write_schema(TABLE, 1, {**schema(columns), "key": [odd[0]]})
    after = json.dumps({name: (7 if i == 0 else f"v{i}") for i, name in enumerate(odd)},
                       separators=(",", ":"), ensure_ascii=False)
    bed.land(ChangeEvent(TABLE, Op.CREATE, Position(1, 0, 0), "[7]", after, None, Origin.LOG,
                         0, 1))
    assert bed.merge(spark).ok
    bed.land(ChangeEvent(TABLE, Op.DELETE, Position(2, 0, 0), "[7]", None, None, Origin.LOG,
                         0, 1))
    found = bed.query(f"SELECT * FROM {bed.q(bed.target_table)}")
    assert [r[:-1] for r in found] == [(7, "v1", "v2", "v3", "v4", "v5", "v6")]
    assert bed.merge(spark).ok
    assert bed.query(f"SELECT * FROM {bed.q(bed.target_table)}") == []


MY_COLUMNS: list[dict[str, object]] = [
    {"name": "id", "type": "integer", "unsigned": True},
    {"name": "big", "type": "integer", "unsigned": True},
    {"name": "price", "type": "decimal", "unsigned": False, "scale": 2},
    {"name": "ratio", "type": "double", "unsigned": False},
    {"name": "small", "type": "float", "unsigned": False},
    {"name": "code", "type": "binary", "length": 3},
    {"name": "blob", "type": "binary"},
    {"name": "at", "type": "datetime", "fsp": 6},
    {"name": "ts", "type": "timestamp", "fsp": 3},
    {"name": "day", "type": "date"},
    {"name": "span", "type": "time", "fsp": 1},
    {"name": "yr", "type": "year"},
    {"name": "size", "type": "enum", "members": ["s", "m"]},
    {"name": "opts", "type": "set", "members": ["a", "b"]},
    {"name": "flags", "type": "bit"},
    {"name": "doc", "type": "json"},
    {"name": "note", "type": "text"},
]
MY_TYPES = {"columns": MY_COLUMNS, "key": ["id"]}
MY_ROW = ('{"id":18446744073709551615,"big":18446744073709551614,"price":"-0.50",'
          '"ratio":0.30000000000000004,"small":0.1,"code":"AP8A","blob":"",'
          '"at":"2024-02-29 12:34:56.123456","ts":"2038-01-19 03:14:07.999",'
          '"day":"1000-01-01","span":"-838:59:59.0","yr":2155,"size":"m","opts":"a,b",'
          '"flags":5,"doc":"{\\"k\\": [1, \\"ü\\"]}","note":"it\'s \\"ü\\" ✓"}')


def test_mysql_source_values_land_in_either_target(bed: Bed, spark: SparkSession) -> None:
    bed.zone.write_schema(TABLE, 1, MY_TYPES)
    bed.land(ChangeEvent(TABLE, Op.CREATE, Position(1, 0, 0), "[18446744073709551615]", MY_ROW,
                         None, Origin.LOG, 0, 1))
    config = config_module.parse({
        "source": {"name": "src", "kind": "mariadb", "dsn": "mysql://u@127.0.0.1:1",
                   "tables": [TABLE]},
        "redis": {"url": "redis://127.0.0.1:1"}, "landing": {"path": str(bed.root)},
        "target": {"kind": bed.kind, "dsn": bed.dsn, "state_schema": bed.state,
                   "tables": {TABLE: bed.target_table}},
    }, {})
    report = merge_source(config, spark_stager(spark))
    assert report.ok, report.as_dict()
    names = [str(c["name"]) for c in MY_COLUMNS]
    if bed.kind == "postgresql":
        select = ", ".join(f'"{n}"::text' for n in names)
        expected = ("18446744073709551615", "18446744073709551614", "-0.50",
                    "0.30000000000000004", "0.1", "\\x00ff00", "\\x",
                    "2024-02-29 12:34:56.123456", "2038-01-19 03:14:07.999+00", "1000-01-01",
                    "-838:59:59", "2155", "m", "a,b", "5", '{"k": [1, "ü"]}', 'it\'s "ü" ✓')
    else:
        select = ", ".join(f"CAST(`{n}` AS CHAR)" if n not in ("code", "blob")
                           else f"HEX(`{n}`)" for n in names)
        expected = ("18446744073709551615", "18446744073709551614", "-0.50",
                    "0.30000000000000004", "0.1", "00FF00", "", "2024-02-29 12:34:56.123456",
                    "2038-01-19 03:14:07.999", "1000-01-01", "-838:59:59.0", "2155", "m", "a,b",
                    "5", '{"k": [1, "ü"]}', 'it\'s "ü" ✓')
    [found] = bed.query(f"SELECT {select} FROM {bed.q(bed.target_table)}")
    assert found == expected


PG_TYPES = [("id", "int8", 20), ("amount", "numeric", 1700), ("ratio", "float8", 701),
            ("ok", "bool", 16), ("data", "bytea", 17), ("at", "timestamptz", 1184),
            ("local", "timestamp", 1114), ("day", "date", 1082), ("clock", "time", 1083),
            ("doc", "jsonb", 3802), ("uid", "uuid", 2950), ("note", "varchar", 1043)]
PG_ROW = ('{"id":-9223372036854775808,"amount":"12345678901234567890.123","ratio":-1.5e-07,'
          '"ok":false,"data":"AP8=","at":"2024-02-29 12:34:56.5+00",'
          '"local":"1999-12-31 23:59:59.999999","day":"2000-02-29","clock":"23:59:59.25",'
          '"doc":"{\\"a\\": [1, 2]}","uid":"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",'
          '"note":"x\'y\\\\z"}')


def test_postgresql_source_values_land_in_either_target(bed: Bed, spark: SparkSession) -> None:
    bed.zone.write_schema(TABLE, 1, schema(PG_TYPES))
    bed.land(ChangeEvent(TABLE, Op.CREATE, Position(1, 0, 0), "[-9223372036854775808]", PG_ROW,
                         None, Origin.LOG, 0, 1))
    assert bed.merge(spark).ok
    names = [n for n, _, _ in PG_TYPES]
    if bed.kind == "postgresql":
        select = ", ".join(f'"{n}"::text' for n in names)
        expected = ("-9223372036854775808", "12345678901234567890.123", "-1.5e-07", "false",
                    "\\x00ff", "2024-02-29 12:34:56.5+00", "1999-12-31 23:59:59.999999",
                    "2000-02-29", "23:59:59.25", '{"a": [1, 2]}',
                    "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", "x'y\\z")
    else:
        select = ", ".join(f"CAST(`{n}` AS CHAR)" if n != "data" else f"HEX(`{n}`)"
                           for n in names)
        expected = ("-9223372036854775808", "12345678901234567890.123000000000000000000000000000",
                    "-0.00000015", "0", "00FF", "2024-02-29 12:34:56.500000",
                    "1999-12-31 23:59:59.999999", "2000-02-29", "23:59:59.250000",
                    '{"a": [1, 2]}', "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", "x'y\\z")
    [found] = bed.query(f"SELECT {select} FROM {bed.q(bed.target_table)}")
    assert found == expected


# -- tables in parallel ------------------------------------------------------------------------


def test_tables_merge_in_parallel_within_the_bound(pg_bed: Bed, spark: SparkSession) -> None:
    bed = pg_bed
    tables = [TABLE, "public.more", "public.most"]
    renames = {t: t for t in tables}
    for n, table in enumerate(tables):
        bed.zone.write_schema(table, 1, schema())
        bed.land(*(ev("c", i, i, row(i, f"{table}{i}"), table=table) for i in range(1, 201)),
                 table=table)
        bed.land(*(ev("u", 200 + i, i, row(i, "u", n), table=table) for i in range(1, 51)),
                 table=table)
        bed.land(ev("d", 300, 7, table=table), table=table)
    config = config_module.parse({
        "source": {"name": "src", "dsn": "host=127.0.0.1", "tables": tables},
        "redis": {"url": "redis://127.0.0.1:1"}, "landing": {"path": str(bed.root)},
        "target": {"kind": "postgresql", "dsn": bed.dsn, "tables": renames},
        "merge": {"parallel_tables": 2, "batch_max_events": 200},
    }, {})
    report = merge_source(config, spark_stager(spark))
    assert report.ok, report
    assert [t.table for t in report.tables] == tables, "reported in order"
    assert [t.batches for t in report.tables] == [2, 2, 2]
    assert report.parallel_tables == 2 and report.most_tables_in_flight == 2
    spans = [(t.started_at, t.finished_at) for t in report.tables]
    for instant, _ in spans:  # never three at once
        assert sum(start <= instant < end for start, end in spans) <= 2, spans
    for n, table in enumerate(tables):
        got = {r[0]: r[1:] for r in bed.query(
            f"SELECT id, name, n FROM {bed.q(table)} ORDER BY id")}
        assert got == {i: ("u", n) if i <= 50 else (f"{table}{i}", None)
                       for i in range(1, 201) if i != 7}, table
    again = merge_source(config, spark_stager(spark))
    assert [t.batches for t in again.tables] == [0, 0, 0]


@pytest.mark.parametrize("round_", range(3))
def test_concurrent_merges_create_one_schema_without_tripping(bed: Bed, round_: int) -> None:
    """Two merges (two tables of one job, or two jobs) meeting a new schema at once."""
    fresh = f"fresh_{os.getpid()}_{round_}"
    target_config = config_module.parse({
        "source": {"name": "src", "dsn": "host=127.0.0.1", "tables": [TABLE]},
        "redis": {"url": "redis://127.0.0.1:1"}, "landing": {"path": str(bed.root)},
        "target": {"kind": bed.kind, "dsn": bed.dsn, "state_schema": f"{fresh}_state"},
    }, {}).require_target()
    sessions = 6
    barrier = threading.Barrier(sessions)

    def prepare(n: int) -> None:
        target = open_target(target_config)
        target.connect()
        try:
            barrier.wait(timeout=60)
            target.ensure_state()
            barrier.wait(timeout=60)
            target.create_table(f"{fresh}.t{n % 2}", [("id", "int4" if bed.kind ==
                                                      "postgresql" else "int")], ["id"])
        except BaseException:
            barrier.abort()  # the others stop waiting for this one
            raise
        finally:
            target.close()

    try:
        with ThreadPoolExecutor(max_workers=sessions) as pool:
            for future in [pool.submit(prepare, n) for n in range(sessions)]:
                future.result()  # raises what a session hit
        found = bed.query("SELECT table_schema, table_name FROM information_schema.tables"
                          " WHERE table_schema LIKE %s AND table_type = 'BASE TABLE'"
                          " ORDER BY 1, 2", (f"{fresh}%",))
        assert [tuple(r) for r in found] == [
            (fresh, "t0"), (fresh, "t1"), (f"{fresh}_state", "merge_log"),
            (f"{fresh}_state", "tombstones")]
    finally:
        if bed.kind == "mysql":  # a database of the session's server, not of the test's
            for name in (fresh, f"{fresh}_state"):
                bed.query(f"DROP DATABASE IF EXISTS `{name}`")
