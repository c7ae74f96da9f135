"""Lake targets' pure parts: the configuration, the MERGE text, the merge log document,
which Spark a format's jar fits."""

from __future__ import annotations

import hashlib
import math
import random
import struct
from collections.abc import Sequence
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal

import pytest

from dblog_worker import config as config_module
from dblog_worker.config_lake import Partition
from dblog_worker.errors import ConfigError, TargetError
from dblog_worker.lake.format import LogEntry, MergeLog
from dblog_worker.lake.runtime import jar_spark_line, runtime_problem
from dblog_worker.lake.target import merge_sql
from dblog_worker.lake.types import TIME_COMMENT, column_type, quote, sql_literal, widened
from dblog_worker.lake.verify_sql import SQL as LAKE_SQL
from dblog_worker.lake.verify_sql import lake_family
from dblog_worker.merge.column_types import Encoding, SourceColumn
from dblog_worker.verify.sql import Column, Family

P = "0" * 47 + "1"


def parse(target: dict[str, object], env: dict[str, str] | None = None) -> config_module.Config:
    return config_module.parse({
        "source": {"name": "s", "dsn": "host=x", "tables": ["public.a"]},
        "redis": {"url": "redis://x"}, "landing": {"path": "/tmp/l"}, "target": target,
    }, env or {})


def test_an_iceberg_target_with_a_jdbc_catalog() -> None:
    found = parse({"kind": "iceberg", "warehouse": "/w", "catalog": "jdbc",
                   "catalog_uri": "jdbc:postgresql://h:5432/lake", "catalog_user": "u",
                   "catalog_password_env": "PW",
                   "partition_by": {"public.a": ["days:at", "bucket:16:id", "r"]}},
                  {"PW": "secret"}).require_target()
    assert found.is_lake and found.lake is not None
    assert found.lake.catalog_password == "secret"
    assert "secret" not in repr(found) and "secret" not in found.safe_dsn()
    assert found.lake.partition_by["public.a"] == (
        Partition("at", "days"), Partition("id", "bucket", 16), Partition("r"))


@pytest.mark.parametrize(("target", "message"), [
    ({"kind": "iceberg"}, "target.warehouse"),
    ({"kind": "iceberg", "warehouse": "/w", "dsn": "host=x"}, "database targets"),
    ({"kind": "delta", "warehouse": "/w", "catalog": "jdbc"}, "without a catalog"),
    ({"kind": "iceberg", "warehouse": "/w", "catalog": "jdbc",
      "catalog_uri": "postgresql://h/x", "catalog_user": "u"}, "JDBC URL"),
    ({"kind": "iceberg", "warehouse": "/w", "catalog": "jdbc",
      "catalog_uri": "jdbc:postgresql://u:pw@h/x", "catalog_user": "u"}, "password"),
    ({"kind": "iceberg", "warehouse": "/w", "partition_by": {"public.a": ["weeks:x"]}},
     "not a partition field"),
    ({"kind": "iceberg", "warehouse": "/w", "partition_by": {"public.a": ["bucket:x"]}},
     "take a width"),
    ({"kind": "delta", "warehouse": "/w", "partition_by": {"public.a": ["days:x"]}},
     "plain columns"),
    ({"kind": "iceberg", "warehouse": "/w", "partition_by": {"public.b": ["x"]}},
     "not in source.tables"),
    ({"kind": "postgresql", "dsn": "host=x", "warehouse": "/w"}, "lake targets"),
])
def test_lake_options_are_checked(target: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse(target)


def test_the_merge_of_a_batch() -> None:
    assert merge_sql("dblog_lake.`p`.`t`", "`stage_1`", ["id", "n`x"], ["id"], None) == (
        "MERGE INTO dblog_lake.`p`.`t` AS t USING `stage_1` AS s ON t.`id` = s.`id`"
        " WHEN MATCHED AND s.`_dblog_op` = 'd' AND (t.`_dblog_position` IS NULL OR"
        " t.`_dblog_position` < s.`_dblog_position`) THEN DELETE"
        " WHEN MATCHED AND s.`_dblog_op` <> 'd' AND (t.`_dblog_position` IS NULL OR"
        " t.`_dblog_position` < s.`_dblog_position`) THEN UPDATE SET t.`id` = s.`id`,"
        " t.`n``x` = s.`n``x`, t.`_dblog_position` = s.`_dblog_position`"
        " WHEN NOT MATCHED AND s.`_dblog_op` <> 'd' THEN INSERT (`id`, `n``x`,"
        " `_dblog_position`) VALUES (s.`id`, s.`n``x`, s.`_dblog_position`)")
    truncating = merge_sql("t", "v", ["id"], ["id"], P)
    assert truncating.endswith(
        f" WHEN NOT MATCHED BY SOURCE AND (t.`_dblog_position` IS NULL OR"
        f" t.`_dblog_position` < '{P}') THEN DELETE")
    with pytest.raises(TargetError, match="not a position"):
        merge_sql("t", "v", ["id"], ["id"], "x' OR 1=1")


def test_names_and_texts_are_quoted() -> None:
    assert quote("a`b") == "`a``b`"
    assert sql_literal("it's \\ here") == "'it\\'s \\\\ here'"


def test_the_merge_log_keeps_the_newer_entry() -> None:
    log = MergeLog({}).with_entry("s", "public.a", LogEntry(3, P, "", 10, 1))
    again = MergeLog.parse(log.to_json())
    assert again == log
    older = MergeLog({}).with_entry("s", "public.a", LogEntry(2, P, "", 5, 1))
    assert older.newer(log).get("s", "public.a").last_segment == 3
    assert log.newer(older).get("s", "public.a").last_segment == 3
    assert MergeLog.parse('{"other": 1}') is None and MergeLog.parse("not json") is None


def test_types() -> None:
    def col(type_: str, kind: str = "postgresql") -> SourceColumn:
        return SourceColumn("c", kind, type_, Encoding.TEXT)

    assert column_type("t", col("int4"), "Iceberg") == "INT"
    assert column_type("t", col("numeric"), "Iceberg") == "DECIMAL(38,18)"
    assert column_type("t", col("timestamptz"), "Iceberg") == "TIMESTAMP"
    assert column_type("t", col("point"), "Iceberg") == "STRING"  # its text, as neutral
    with pytest.raises(TargetError, match="cannot hold"):
        column_type("t", SourceColumn("c", "postgresql", "int4", Encoding.TEXT,
                                      element="int4"), "Iceberg")
    assert widened(col("int8"), "INT") == "BIGINT"
    assert widened(col("int4"), "BIGINT") is None


def test_which_spark_a_jar_fits() -> None:
    assert jar_spark_line("iceberg", "/j/iceberg-spark-runtime-3.5_2.12-1.12.0.jar") == (
        "3.5", "2.12")
    assert jar_spark_line("delta", "/j/delta-spark_2.12-3.3.2.jar") == ("3.5", "2.12")
    assert jar_spark_line("delta", "/j/delta-spark_2.13-4.4.0.jar") == ("4.2", "2.13")
    assert jar_spark_line("delta", "/j/delta-spark_4.1_2.13-4.4.0.jar") == ("4.1", "2.13")
    jars = "/usr/share/java/postgresql.jar,/j/iceberg-spark-runtime-3.5_2.12-1.12.0.jar"
    assert runtime_problem("iceberg", "3.5.9", "2.12.18", jars) is None
    problem = runtime_problem("iceberg", "4.2.0", "2.13.18", jars)
    assert problem is not None and "built for Spark 3.5" in problem
    missing = runtime_problem("delta", "3.5.9", "2.12.18", jars)
    assert missing is not None and "needs its Spark runtime jar" in missing


# -- verify's normalized values in DuckDB (docs/verify.md, "Comparing values") -------------


def reference_float(value: float) -> str | None:
    """The normalized text of a double, as PostgreSQL's and MySQL's sides compute it."""
    if math.isnan(value) or math.isinf(value):
        return None
    if 2.0 ** 53 <= abs(value) < 2.0 ** 90:
        return str(int(value))
    if value == 0:
        return "0"
    sign, digits, exponent = Decimal(repr(value)).normalize().as_tuple()
    assert isinstance(exponent, int)
    text = "".join(map(str, digits))
    return f"{'-' if sign else ''}{text}e{len(text) + exponent}"


def duckdb_values(type_sql: str, family: Family, values: Sequence[object],
                  comment: str = "") -> list[str | None]:
    import duckdb

    column = Column("c", type_sql, lake_family(type_sql, comment), cast=type_sql)
    assert column.family is family
    expression = LAKE_SQL.value_sql(column, family, cross=True, ref='"c"').replace("%%", "%")
    with duckdb.connect() as db:
        db.execute(f"CREATE TABLE t (i INTEGER, c {type_sql})")
        db.executemany("INSERT INTO t VALUES (?, ?)", list(enumerate(values)))
        return [r[0] for r in db.execute(f"SELECT {expression} FROM t ORDER BY i").fetchall()]


def test_lake_doubles_normalize_as_the_databases_do() -> None:
    rnd = random.Random(52)
    doubles = [0.1, -250.0, 1e20, 1.2345e-05, 123.0, -0.0, 0.0, 5e-324, 1.7976931348623157e308,
               2.0 ** 53, 2.0 ** 60 + 2.0 ** 10, -(2.0 ** 89), 2.0 ** 90, 1e23, float("nan"),
               float("inf"), float("-inf")]
    doubles += [struct.unpack("<d", rnd.getrandbits(64).to_bytes(8, "little"))[0]
                for _ in range(3000)]
    doubles += [rnd.uniform(-1e6, 1e6) for _ in range(1000)]
    assert duckdb_values("DOUBLE", Family.FLOAT, doubles) == [reference_float(d) for d in doubles]


def test_lake_values_normalize_as_the_databases_do() -> None:
    assert duckdb_values("DECIMAL(38,18)", Family.NUMBER,
                         [Decimal("1.50"), Decimal("0.000"), Decimal("-12"), Decimal("100"),
                          None]) == ["1.5", "0", "-12", "100", None]
    assert duckdb_values("BOOLEAN", Family.NUMBER, [True, False]) == ["1", "0"]
    assert duckdb_values("BIGINT", Family.NUMBER, [-9223372036854775808]) == [
        "-9223372036854775808"]
    assert duckdb_values("BLOB", Family.BINARY, [b"\x00\xffA", b""]) == ["00ff41", ""]
    assert duckdb_values("DATE", Family.DATE, [date(1, 1, 1), date(2024, 2, 29),
                                                date(9999, 12, 31), None]) == [
        "0001-01-01", "2024-02-29", "9999-12-31", None]
    assert duckdb_values("TIMESTAMP", Family.DATETIME,
                         [datetime(2024, 1, 2, 3, 4, 5, 500000)]) == [
        "2024-01-02 03:04:05.500000"]
    assert duckdb_values("TIMESTAMP WITH TIME ZONE", Family.DATETIME,
                         [datetime(2024, 1, 2, 3, 4, 5, 1, tzinfo=timezone(timedelta(hours=2)))]
                         ) == ["2024-01-02 01:04:05.000001"]
    assert duckdb_values("VARCHAR", Family.TIME,
                         ["12:34:56.789", "00:00:00", "-838:59:59.000000", "24:00:00"],
                         TIME_COMMENT) == ["45296789000", "0", "-3020399000000", "86400000000"]
    assert duckdb_values("VARCHAR", Family.TEXT, ["é, x"]) == ["é, x"]


def test_lake_rows_and_checksums() -> None:
    row = LAKE_SQL.row_sql(["'a'", "NULL", "'1'"], [True, True, False])
    import duckdb

    with duckdb.connect() as db:
        (text, checksum), = db.execute(f"SELECT {row}, {LAKE_SQL.checksum(row)}").fetchall()
    assert text == "1:a,N,1"
    assert checksum == int(hashlib.md5(b"1:a,N,1", usedforsecurity=False).hexdigest()[:15], 16)
