"""Merge targets without a database: type mapping, batch planning, configuration."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from dblog_worker import config as config_module
from dblog_worker.config import TargetConfig
from dblog_worker.errors import ConfigError, SegmentCorrupt, TargetError
from dblog_worker.events import ChangeEvent, Op, Origin
from dblog_worker.landing.parquet import LandingZone
from dblog_worker.merge.column_types import (
    Encoding,
    SourceColumn,
    columns_of,
    target_type,
    union_columns,
)
from dblog_worker.merge.plan import (
    Batch,
    MergeLogEntry,
    next_batch,
    pending_segments,
    stage_name,
)
from dblog_worker.mysql.options import MYSQL, url_args
from dblog_worker.mysql.target import MySQLTarget, typed, widened
from dblog_worker.mysql.target import convert as my_convert
from dblog_worker.pg import target as postgres
from dblog_worker.pg.options import POSTGRESQL
from dblog_worker.position import Position

PG_SCHEMA = {
    "columns": [
        {"name": "id", "type": "int8", "type_oid": 20},
        {"name": "blob", "type": "bytea", "type_oid": 17},
        {"name": "tags", "type": "_text", "type_oid": 1009},
        {"name": "at", "type": "timestamptz", "type_oid": 1184},
        {"name": "ok", "type": "bool", "type_oid": 16},
        {"name": "mood", "type": "mood", "type_oid": 91234},
    ],
    "key": ["id"],
}
MY_SCHEMA = {
    "columns": [
        {"name": "id", "type": "integer", "unsigned": True},
        {"name": "price", "type": "decimal", "unsigned": False, "scale": 2},
        {"name": "code", "type": "binary", "length": 4},
        {"name": "at", "type": "timestamp", "fsp": 3},
        {"name": "size", "type": "enum", "members": ["s", "it's"]},
        {"name": "span", "type": "time", "fsp": 0},
    ],
    "key": ["id"],
}


def test_columns_of_postgresql_schema_documents() -> None:
    columns = {c.name: c for c in columns_of(POSTGRESQL, PG_SCHEMA)}
    assert columns["blob"].encoding is Encoding.BASE64
    assert columns["tags"].encoding is Encoding.ARRAY and columns["tags"].element == "text"
    assert columns["tags"].describe() == "text[]"
    assert columns["at"].encoding is Encoding.TIMESTAMPTZ
    assert columns["ok"].encoding is Encoding.BOOL
    assert columns["mood"].encoding is Encoding.TEXT


@pytest.mark.parametrize(
    ("name", "target", "key_columns", "expected"),
    [
        ("id", POSTGRESQL, 1, '"int8"'),
        ("tags", POSTGRESQL, 0, '"text"[]'),
        ("at", MYSQL, 0, "DATETIME(6)"),
        ("blob", MYSQL, 0, "LONGBLOB"),
        ("blob", MYSQL, 1, "VARBINARY(3072)"),
        ("blob", MYSQL, 2, "VARBINARY(1536)"),
        ("ok", MYSQL, 0, "BOOLEAN"),
    ],
)
def test_postgresql_types_map(name: str, target: str, key_columns: int, expected: str) -> None:
    column = {c.name: c for c in columns_of(POSTGRESQL, PG_SCHEMA)}[name]
    assert target_type("public.t", column, target, key_columns) == expected


@pytest.mark.parametrize(
    ("name", "target", "key_columns", "expected"),
    [
        ("id", POSTGRESQL, 1, "numeric(20,0)"),
        ("id", MYSQL, 1, "BIGINT UNSIGNED"),
        ("price", POSTGRESQL, 0, "numeric"),
        ("price", MYSQL, 0, "DECIMAL(65,2)"),
        ("code", MYSQL, 0, "BINARY(4)"),
        ("code", POSTGRESQL, 0, "bytea"),
        ("at", POSTGRESQL, 0, "timestamptz"),
        ("at", MYSQL, 0, "TIMESTAMP(3)"),
        ("size", MYSQL, 0, "ENUM('s','it''s')"),
        ("size", POSTGRESQL, 0, "text"),
        ("span", POSTGRESQL, 0, "interval"),
    ],
)
def test_mysql_types_map(name: str, target: str, key_columns: int, expected: str) -> None:
    column = {c.name: c for c in columns_of(MYSQL, MY_SCHEMA)}[name]
    assert target_type("shop.t", column, target, key_columns) == expected


@pytest.mark.parametrize(("key_columns", "expected"), [(1, "VARCHAR(768)"), (2, "VARCHAR(384)"),
                                                       (3, "VARCHAR(256)")])
def test_text_key_columns_share_the_innodb_key_limit(key_columns: int, expected: str) -> None:
    text = SourceColumn("region", POSTGRESQL, "text", Encoding.TEXT)
    assert target_type("public.t", text, MYSQL, key_columns) == expected
    assert target_type("public.t", text, MYSQL, 0) == "LONGTEXT"


def _my(kind: str, **fields: object) -> SourceColumn:
    return SourceColumn("c", MYSQL, kind, Encoding.TEXT, **fields)  # type: ignore[arg-type]


def _pg(kind: str) -> SourceColumn:
    return SourceColumn("c", POSTGRESQL, kind, Encoding.TEXT)


@pytest.mark.parametrize(
    ("column", "existing", "expected"),
    [
        (_pg("int8"), "integer", "bigint"),
        (_pg("int4"), "smallint", "integer"),
        (_pg("int4"), "bigint", None),  # already wider
        (_pg("float8"), "real", "double precision"),
        (_pg("int8"), "numeric", None),  # a type the operator chose
        (_my("integer"), "integer", "bigint"),
        (_my("integer", unsigned=True), "bigint", None),
        (_my("datetime", fsp=6), "timestamp(0) without time zone",
         "timestamp(6) without time zone"),
        (_my("timestamp", fsp=3), "timestamp(0) with time zone", "timestamp(3) with time zone"),
        (_my("datetime", fsp=6), "timestamp(0) with time zone", None),  # another type
        (_my("datetime", fsp=6), "timestamp without time zone", None),  # microseconds already
        (_my("decimal", scale=4), "numeric(10,2)", "numeric(12,4)"),
        (_my("decimal", scale=2), "numeric(10,2)", None),
        (_my("decimal", scale=4), "numeric", None),
    ],
)
def test_postgresql_target_columns_widen_with_the_source(column: SourceColumn, existing: str,
                                                         expected: str | None) -> None:
    assert postgres.widened(column, existing) == expected


@pytest.mark.parametrize(
    ("column", "existing", "expected"),
    [
        (_my("datetime", fsp=6), "datetime", "DATETIME(6)"),
        (_my("timestamp", fsp=3), "timestamp(0)", "TIMESTAMP(3)"),
        (_my("time", fsp=2), "time(4)", None),  # already wider
        (_my("datetime", fsp=6), "varchar(40)", None),  # a type the operator chose
        (_my("decimal", scale=4), "decimal(65,2)", "DECIMAL(65,4)"),
        (_my("decimal", scale=4), "decimal(10,2) unsigned", "DECIMAL(12,4) UNSIGNED"),
        (_my("decimal", scale=2), "decimal(10,2)", None),
        (_my("enum", members=("a", "b", "c")), "enum('a','b')", "ENUM('a','b','c')"),
        (_my("enum", members=("c", "a")), "enum('a','b')", "ENUM('a','b','c')"),
        (_my("set", members=("a",)), "set('a','b')", None),
        (_my("enum", members=("it's", "a\\b", "new")), "enum('it''s','a\\\\b')",
         "ENUM('it''s','a\\\\b','new')"),
        (SourceColumn("c", POSTGRESQL, "timestamp", Encoding.TEXT), "datetime(0)", None),
    ],
)
def test_mysql_target_columns_widen_with_the_source(column: SourceColumn, existing: str,
                                                    expected: str | None) -> None:
    assert widened("shop.t", column, existing) == expected


@pytest.mark.parametrize(("name", "target"), [("mood", POSTGRESQL), ("tags", MYSQL),
                                              ("mood", MYSQL)])
def test_types_a_target_cannot_hold_are_named(name: str, target: str) -> None:
    column = {c.name: c for c in columns_of(POSTGRESQL, PG_SCHEMA)}[name]
    with pytest.raises(TargetError, match=rf"public\.t: column '{name}' has type .* cannot hold"):
        target_type("public.t", column, target)


def test_union_of_schema_versions_keeps_dropped_columns_and_newest_types() -> None:
    v1 = [SourceColumn("id", POSTGRESQL, "int4", Encoding.TEXT),
          SourceColumn("gone", POSTGRESQL, "text", Encoding.TEXT)]
    v2 = [SourceColumn("id", POSTGRESQL, "int8", Encoding.TEXT),
          SourceColumn("new", POSTGRESQL, "text", Encoding.TEXT)]
    merged = union_columns([v1, v2])
    assert [(c.name, c.type) for c in merged] == [("id", "int8"), ("new", "text"),
                                                  ("gone", "text")]


@pytest.mark.parametrize(
    ("type_sql", "expected"),
    [
        ("bigint(20) unsigned", "CAST(v AS UNSIGNED)"),
        ("int(11)", "CAST(v AS SIGNED)"),
        ("decimal(65,2)", "CAST(v AS DECIMAL(65,2))"),
        ("datetime(6)", "CAST(v AS DATETIME(6))"),
        ("date", "CAST(v AS DATE)"),
        ("varchar(768)", "v"),
    ],
)
def test_mysql_key_values_are_cast_to_the_key_type(type_sql: str, expected: str) -> None:
    assert typed("v", type_sql) == expected


def _event(major: int, op: str = "c", version: int = 1) -> ChangeEvent:
    key = None if op == "t" else f"[{major}]"
    after = None if op in "dt" else json.dumps({"id": major})
    return ChangeEvent("public.t", Op(op), Position(major, 0, 0), key, after, None, Origin.LOG,
                       0, version)


def _zone(tmp_path: Path) -> LandingZone:
    zone = LandingZone(tmp_path, "src")
    zone.write_schema("public.t", 1, {"columns": [{"name": "id", "type": "int4",
                                                   "type_oid": 23}], "key": ["id"]})
    return zone


def test_batches_follow_the_merge_log_and_the_event_budget(tmp_path: Path) -> None:
    zone = _zone(tmp_path)
    for major in range(1, 7, 2):
        zone.commit_segment("public.t", [_event(major), _event(major + 1, "t" if major == 3
                                                                        else "u")])
    pending = pending_segments(zone, "public.t", MergeLogEntry())
    first = next_batch(zone, POSTGRESQL, "public.t", "x.t", MergeLogEntry(), pending, 3)
    assert first is not None
    assert [s.seq for s in first.segments] == [1, 2] and first.events == 4
    assert first.truncate_at == Position(4, 0, 0).encode()
    assert first.key == ("id",) and first.stage == stage_name("src", "public.t", "x.t")
    after = MergeLogEntry(first.last_segment, first.last_position)
    second = next_batch(zone, POSTGRESQL, "public.t", "x.t", after, pending, 3)
    assert second is not None and [s.seq for s in second.segments] == [3]
    assert second.truncate_at == "" and second.after_segment == 2
    done = MergeLogEntry(3, second.last_position)
    assert next_batch(zone, POSTGRESQL, "public.t", "x.t", done, pending, 3) is None


def test_every_pending_segment_is_checked_before_the_first_batch(tmp_path: Path) -> None:
    zone = _zone(tmp_path)
    zone.commit_segment("public.t", [_event(1)])
    bad = zone.commit_segment("public.t", [_event(2)])
    table = pq.read_table(bad.path)
    pq.write_table(table.replace_schema_metadata({}), bad.path)
    with pytest.raises(SegmentCorrupt, match=f"{bad.path} is not a dblog segment"):
        pending_segments(zone, "public.t", MergeLogEntry())
    assert len(pending_segments(zone, "public.t", MergeLogEntry(2))) == 0


def test_the_planner_reads_footers_only(tmp_path: Path) -> None:
    """Every data page of a segment zeroed, its footer intact: planned as before (rows,
    truncate, schema versions, positions checked against the name), yet unreadable whole.
    A segment written before footers carried the plan is planned from its small columns."""
    zone = _zone(tmp_path)
    zone.write_schema("public.t", 3, {"columns": [{"name": "id", "type": "int4",
                                                   "type_oid": 23}], "key": ["id"]})
    segment = zone.commit_segment("public.t", [_event(1), _event(2, "t"), _event(3, "u", 3),
                                               _event(4, "d")])
    plan = pending_segments(zone, "public.t", MergeLogEntry())
    data = bytearray(segment.path.read_bytes())
    footer_start = len(data) - 8 - int.from_bytes(data[-8:-4], "little")
    data[4:footer_start] = bytes(footer_start - 4)
    segment.path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="not a complete dblog segment"):
        zone.read(segment)
    (pending,) = pending_segments(zone, "public.t", MergeLogEntry())
    assert pending == plan[0]
    assert (pending.rows, pending.truncate_at, pending.versions) == (
        4, Position(2, 0, 0).encode(), frozenset({1, 3}))
    renamed = segment.path.with_name(segment.path.name.replace(
        Position(4, 0, 0).encode(), Position(5, 0, 0).encode()))
    segment.path.rename(renamed)
    with pytest.raises(SegmentCorrupt, match="positions in the file do not match its name"):
        pending_segments(zone, "public.t", MergeLogEntry())
    renamed.unlink()

    older = zone.commit_segment("public.t", [_event(6), _event(7, "t")])
    table = pq.read_table(older.path)
    kept = {k: v for k, v in (table.schema.metadata or {}).items()
            if k not in (b"dblog.truncate_at", b"dblog.schema_versions")}
    pq.write_table(table.replace_schema_metadata(kept), older.path)
    (pending,) = pending_segments(zone, "public.t", MergeLogEntry(1))
    assert (pending.rows, pending.truncate_at, pending.versions) == (
        2, Position(7, 0, 0).encode(), frozenset({1}))


def test_a_missing_schema_file_is_named(tmp_path: Path) -> None:
    zone = _zone(tmp_path)
    zone.commit_segment("public.t", [_event(1, version=2)])
    pending = pending_segments(zone, "public.t", MergeLogEntry())
    with pytest.raises(SegmentCorrupt, match="schema version 2 is used by a segment"):
        next_batch(zone, POSTGRESQL, "public.t", "x.t", MergeLogEntry(), pending, 10)


BASE = {"source": {"name": "shop", "dsn": "host=db", "tables": ["public.t"]},
        "redis": {"url": "redis://r"}, "landing": {"path": "/l"}}


def test_target_and_merge_sections() -> None:
    config = config_module.parse({
        **BASE,
        "target": {"kind": "mariadb", "dsn": "mysql://m@wh:3306", "password_env": "PW",
                   "tables": {"public.t": "replica.t"}, "state_schema": "merge_state"},
        "merge": {"master": "yarn", "batch_max_events": 1000, "tombstone_retention_h": 1.5,
                  "spark_conf": {"spark.executor.memory": "4g", "spark.executor.cores": 2}},
    }, {"PW": "s3cret"})
    target = config.require_target()
    assert target.kind == MYSQL and target.table("public.t") == "replica.t"
    assert target.table("public.u") == "public.u"
    assert url_args(target.dsn)["password"] == "s3cret"
    assert "s3cret" not in target.safe_dsn() and "s3cret" not in repr(config)
    assert config.merge.master == "yarn" and config.merge.batch_max_events == 1000
    assert config.merge.spark_conf == {"spark.executor.memory": "4g", "spark.executor.cores": "2"}


def test_commands_that_need_a_target_say_so() -> None:
    config = config_module.parse(BASE, {})
    with pytest.raises(ConfigError, match=r"needs a \[target\] section"):
        config.require_target()


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ({"target": {"dsn": "host=w", "tables": {"t": "public.t"}}},
         "'t' must be qualified: schema.table"),
        ({"target": {"dsn": "host=w", "state_schema": "Bad-Name"}}, "target.state_schema"),
        ({"target": {"kind": "oracle", "dsn": "x"}}, "target.kind 'oracle' is not supported"),
        ({"target": {"dsn": "host=w", "colour": 1}}, "unknown option target.colour"),
        ({"merge": {"batch_max_events": 0}}, "batch_max_events must be an integer"),
        ({"merge": {"jars": "a.jar"}}, "merge.jars must be a list"),
        ({"merge": {"spark_conf": {"a": True}}}, "merge.spark_conf must map"),
    ],
)
def test_bad_target_and_merge_options_are_refused(section: dict[str, object],
                                                  message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace(".", r"\.")):
        config_module.parse({**BASE, **section}, {})


def test_the_example_configuration_has_a_target() -> None:
    example = Path(__file__).resolve().parents[3] / "examples" / "worker.toml"
    config = config_module.load(example, {"SHOP_DB_PASSWORD": "a", "REPLICA_DB_PASSWORD": "b"})
    assert config.require_target().table("public.orders") == "public.orders"
    assert config.merge.batch_max_events == 5_000_000


# -- names that need quoting ----------------------------------------------------------------

PCT_PG = Batch("src", "public.t", "public.t%s", (), 0, 0, "", "",
               (SourceColumn("i d%", POSTGRESQL, "int4", Encoding.TEXT),
                SourceColumn('a%sb"', POSTGRESQL, "bytea", Encoding.BASE64)), ("i d%",))
PCT_MY = Batch("src", "db.t", "db.t%s", (), 0, 0, "", "",
               (SourceColumn("i d%", MYSQL, "integer", Encoding.TEXT),
                SourceColumn('a%sb`"', MYSQL, "text", Encoding.TEXT)), ("i d%",))


def test_postgresql_merge_sql_doubles_percent_in_names_and_types() -> None:
    """The apply statements run with named parameters: a name or type with ``%`` has it
    doubled (psycopg reads ``%%`` back as ``%``), quotes are doubled as always."""
    types = {"i d%": "integer", 'a%sb"': '"by%te"'}
    assert PCT_PG.stage == "stage_5dac100f2bfa095f"
    assert postgres.upsert_sql(PCT_PG, types, "dblog") == (
        'INSERT INTO "public"."t%%s" AS t ("i d%%", "a%%sb""", "_dblog_position")'
        ' SELECT CAST(x."i d%%" AS integer), CAST(decode(x."a%%sb""", \'base64\') AS "by%%te"),'
        ' s.position FROM "dblog"."stage_5dac100f2bfa095f" s CROSS JOIN LATERAL'
        ' json_to_record(s.after_json::json) AS x("i d%%" text, "a%%sb""" text)'
        " WHERE s.op IN ('c', 'u', 'r') AND s.position > %(cut)s AND NOT EXISTS (SELECT 1"
        ' FROM "dblog".tombstones tb WHERE tb.target_table = %(target)s'
        " AND tb.key_hash = decode(md5(s.key_json), 'hex') AND tb.position >= s.position)"
        ' AND NOT EXISTS (SELECT 1 FROM "dblog".tombstones tb WHERE tb.target_table ='
        " %(target)s AND tb.key_hash = decode(md5(('typed:' || json_build_array(CAST(CAST("
        """x."i d%%" AS integer) AS text))::text)), 'hex') AND tb.position >= s.position)"""
        ' ON CONFLICT ("i d%%") DO UPDATE SET "i d%%" = EXCLUDED."i d%%",'
        ' "a%%sb""" = EXCLUDED."a%%sb""", "_dblog_position" = EXCLUDED."_dblog_position"'
        ' WHERE t."_dblog_position" IS NULL OR t."_dblog_position" < EXCLUDED."_dblog_position"')
    assert postgres.delete_sql(PCT_PG, types, "dblog") == (
        'DELETE FROM "public"."t%%s" t USING "dblog"."stage_5dac100f2bfa095f" s'
        " WHERE s.op = 'd' AND s.position > %(cut)s"
        ' AND t."i d%%" = CAST((s.key_json::json ->> 0) AS integer)'
        ' AND (t."_dblog_position" IS NULL OR t."_dblog_position" < s.position)')
    assert postgres.qualified('sch "%s".a.b%') == '"sch ""%%s"""."a.b%%"'


def test_mysql_merge_sql_doubles_percent_in_names_and_json_paths() -> None:
    """PyMySQL formats every statement with ``%``: names, and the JSON paths spelled from
    them, have it doubled; backticks are doubled in names, quotes escaped in paths."""
    target = MySQLTarget(TargetConfig(MYSQL, "mysql://u@h:3306"))
    types = {"i d%": "bigint", 'a%sb`"': "longtext"}
    stage = "`dblog`.`stage_21bbeeadc9c68947`"
    assert target.stage_table(PCT_MY.stage) == stage  # Spark's dbtable: SQL text
    newer = ("`db`.`t%%s`.`_dblog_position` IS NULL OR `db`.`t%%s`.`_dblog_position`"
             " < VALUES(`_dblog_position`)")
    assert target.upsert_sql(PCT_MY, types) == (
        'INSERT INTO `db`.`t%%s` (`i d%%`, `a%%sb``"`, `_dblog_position`)'
        f" SELECT x.j0, x.j1, s.position FROM {stage} s CROSS JOIN JSON_TABLE(s.after_json,"
        " '$' COLUMNS (j0 LONGTEXT CHARACTER SET utf8mb4 PATH '$.\"i d%%\"',"
        " j1 LONGTEXT CHARACTER SET utf8mb4 PATH '$.\"a%%sb`\\\\\"\"')) AS x"
        " WHERE s.op IN ('c', 'u', 'r') AND s.position > %s AND NOT EXISTS (SELECT 1 FROM"
        " `dblog`.tombstones tb WHERE tb.target_table = %s"
        " AND tb.key_hash = UNHEX(MD5(s.key_json)) AND tb.position >= s.position)"
        " AND NOT EXISTS (SELECT 1 FROM `dblog`.tombstones tb WHERE tb.target_table = %s"
        " AND tb.key_hash = UNHEX(MD5(CONCAT('typed:', JSON_ARRAY(CAST(CAST(x.j0 AS SIGNED)"
        " AS CHAR))))) AND tb.position >= s.position)"
        f" ON DUPLICATE KEY UPDATE `db`.`t%%s`.`i d%%` = IF({newer}, VALUES(`i d%%`),"
        f" `db`.`t%%s`.`i d%%`), `db`.`t%%s`.`a%%sb``\"` = IF({newer},"
        ' VALUES(`a%%sb``"`), `db`.`t%%s`.`a%%sb``"`),'
        f" `db`.`t%%s`.`_dblog_position` = IF({newer}, VALUES(`_dblog_position`),"
        " `db`.`t%%s`.`_dblog_position`)")
    assert target.delete_sql(PCT_MY, types) == (
        f"DELETE t FROM `db`.`t%%s` t JOIN {stage} s ON t.`i d%%` ="
        " CAST(JSON_VALUE(s.key_json, '$[0]') AS SIGNED) WHERE s.op = 'd' AND s.position > %s"
        " AND (t.`_dblog_position` IS NULL OR t.`_dblog_position` < s.position)")


@pytest.mark.parametrize(("kind", "batch", "message"), [
    (POSTGRESQL, dataclasses.replace(PCT_PG, columns=(
        SourceColumn("i d%", MYSQL, "integer", Encoding.TEXT),
        SourceColumn("ü" * 32, MYSQL, "text", Encoding.TEXT))),
     "public.t: column 'üüüüüüüüüüüüüüüüüüüüüüüüüüüüüüüü' cannot be a column of a PostgreSQL"
     " target table: PostgreSQL names are at most 63 bytes (it truncates longer ones); this"
     " one has 64; leave the table out of the merge (--table)"),
    (MYSQL, dataclasses.replace(PCT_MY, target_table="db.t "),
     "target table 'db.t ' cannot be a MySQL/MariaDB table: MySQL/MariaDB names cannot end"
     " with a space (or other white space); map it to another name (target.tables)"),
    (MYSQL, dataclasses.replace(PCT_MY, columns=(
        *PCT_MY.columns, SourceColumn("😀", POSTGRESQL, "text", Encoding.TEXT))),
     "db.t: column '😀' cannot be a column of a MySQL/MariaDB target table: MySQL/MariaDB"
     " names hold only characters of the Basic Multilingual Plane (no emoji); leave the"
     " table out of the merge (--table)"),
], ids=["pg-64-bytes", "mysql-trailing-space", "mysql-emoji"])
def test_names_a_target_cannot_take_are_refused_before_anything(kind: str, batch: Batch,
                                                                 message: str) -> None:
    """A name PostgreSQL would truncate (silently: the merge would write NULLs) or MySQL
    refuses stops the table with the reason; nothing is asked of the database."""
    target = (MySQLTarget if kind == MYSQL else postgres.PostgresTarget)(
        TargetConfig(kind, "mysql://u@h:3306" if kind == MYSQL else "host=h"))
    with pytest.raises(TargetError) as refused:
        target.prepare_table(batch)  # not connected: it must not get that far
    assert str(refused.value) == message


@pytest.mark.parametrize(
    ("column", "target", "expected"),
    [
        (SourceColumn("g", MYSQL, "geometry", Encoding.BASE64, subtype="point"), MYSQL,
         "POINT"),
        (SourceColumn("g", MYSQL, "geometry", Encoding.BASE64), MYSQL, "GEOMETRY"),
        (SourceColumn("g", MYSQL, "geometry", Encoding.BASE64, subtype="point"), POSTGRESQL,
         "bytea"),
        (_my("uuid"), MYSQL, "UUID"), (_my("uuid"), POSTGRESQL, "uuid"),
        (_my("inet4"), MYSQL, "INET4"), (_my("inet4"), POSTGRESQL, "inet"),
        (_my("inet6"), MYSQL, "INET6"), (_my("inet6"), POSTGRESQL, "text"),
        (_pg("interval"), MYSQL, "LONGTEXT"), (_pg("point"), MYSQL, "LONGTEXT"),
        (_pg("int4range"), MYSQL, "LONGTEXT"), (_pg("money"), MYSQL, "LONGTEXT"),
        (_pg("timetz"), MYSQL, "LONGTEXT"), (_pg("xml"), MYSQL, "LONGTEXT"),
    ],
)
def test_every_type_has_a_target_type(column: SourceColumn, target: str, expected: str) -> None:
    assert target_type("t.t", column, target) == expected


def test_mysql_schema_documents_carry_the_spatial_type() -> None:
    (column,) = columns_of(MYSQL, {"columns": [{"name": "g", "type": "geometry",
                                                "spatial": "polygon"}], "key": []})
    assert (column.encoding, column.subtype) == (Encoding.BASE64, "polygon")


@pytest.mark.parametrize(
    ("column", "type_sql", "expected"),
    [
        (_my("year"), "year(4)", "CAST(x AS UNSIGNED)"),  # '0' would be 2000
        (_my("float"), "float",
         "LEAST(GREATEST(CAST(x AS DOUBLE), -3.4028234663852886e38), 3.4028234663852886e38)"),
        (_my("date"), "date", "x"),  # zero and invalid dates as they are
        (_pg("numeric"), "decimal(65,30)",
         "IF(x IN ('NaN', 'Infinity', '-Infinity'), NULL, IF(LOCATE('.', x) > 0 AND"
         " CHAR_LENGTH(TRIM(TRAILING '0' FROM SUBSTRING_INDEX(x, '.', -1))) > 30,"
         " CONCAT('more than 30 digits after the point: ', x), x))"),
        (_pg("float8"), "double", "IF(x IN ('NaN', 'Infinity', '-Infinity'), NULL, x)"),
        (_pg("date"), "date", "IF(x IN ('infinity', '-infinity') OR x LIKE '%% BC'"
                              " OR LOCATE('-', x) > 5, '0000-00-00', x)"),
        (SourceColumn("c", POSTGRESQL, "timestamptz", Encoding.TIMESTAMPTZ), "datetime(6)",
         "IF(x IN ('infinity', '-infinity') OR x LIKE '%% BC' OR LOCATE('-', x) > 5,"
         " '0000-00-00 00:00:00', LEFT(x, CHAR_LENGTH(x) - 3))"),
    ],
)
def test_mysql_target_conversions(column: SourceColumn, type_sql: str, expected: str) -> None:
    """What a MySQL target stores of values it cannot hold as they are (docs/merge.md)."""
    assert my_convert(column, "x", type_sql) == expected


def test_postgresql_target_takes_mysql_dates_that_are_no_date_as_minus_infinity() -> None:
    converted = postgres.convert(_my("date"), "x", "date", '"dblog"')
    assert converted.startswith("CAST(CASE WHEN substr(x, 1, 4) = '0000' OR substr(x, 6, 2)"
                                " = '00' OR substr(x, 9, 2) = '00' THEN '-infinity'")
    assert converted.endswith("ELSE x END AS date)")
    assert postgres.convert(_pg("date"), "x", "date", '"dblog"') == "CAST(x AS date)"
