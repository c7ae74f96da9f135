"""The local Spark fixture: a JVM on loopback with the JDBC drivers of PostgreSQL and
MariaDB, writing to and reading from the throwaway servers."""

from __future__ import annotations

import datetime as dt
import os
from decimal import Decimal

import psycopg
import pymysql
from psycopg.conninfo import conninfo_to_dict
from pyspark.sql import SparkSession

from tests.services import HOST, MariaDBServer
from tests.spark_jvm import CODEGEN, CODEGEN_ENV
from tests.spark_local import generating_code

ROWS = [(1, "ä €", Decimal("1.50"), dt.datetime(2024, 2, 29, 12, 34, 56, 123456)),
        (2, None, Decimal("-0.25"), dt.datetime(1999, 12, 31, 23, 59, 59))]
SCHEMA = "id long, name string, amount decimal(12,2), at timestamp"


def test_jdbc_round_trip_postgresql(spark: SparkSession, pg_dsn: str) -> None:
    params = conninfo_to_dict(pg_dsn)
    url = f"jdbc:postgresql://{HOST}:{params['port']}/{params['dbname']}"
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE stage (id bigint PRIMARY KEY, name text, "
                     "amount numeric(12,2), at timestamp)")
    options = {"url": url, "user": str(params["user"]), "driver": "org.postgresql.Driver"}
    spark.createDataFrame(ROWS, SCHEMA).write.format("jdbc").options(
        dbtable="stage", **options).mode("append").save()
    with psycopg.connect(pg_dsn) as conn:
        got = conn.execute("SELECT id, name, amount, at FROM stage ORDER BY id").fetchall()
    assert got == ROWS
    read = spark.read.format("jdbc").options(dbtable="stage", **options).load()
    assert sorted(tuple(r) for r in read.collect()) == ROWS


def test_jdbc_round_trip_mariadb(spark: SparkSession, mariadb_server: MariaDBServer,
                                 mariadb_database: str) -> None:
    args = mariadb_server.connect_args(mariadb_database)
    with pymysql.connect(**args) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE stage (id bigint PRIMARY KEY, name text, "
                    "amount decimal(12,2), at datetime(6))")
    # jdbc:mysql:, not jdbc:mariadb:, so that Spark picks its MySQL dialect (backquoted
    # names); Debian's MariaDB Connector/J 2.x takes either scheme.
    url = f"jdbc:mysql://{HOST}:{mariadb_server.port}/{mariadb_database}"
    spark.createDataFrame(ROWS, SCHEMA).write.format("jdbc").options(
        url=url, dbtable="stage", user="root", password="",
        driver="org.mariadb.jdbc.Driver").mode("append").save()
    with pymysql.connect(**args) as conn, conn.cursor() as cur:
        cur.execute("SELECT id, name, amount, at FROM stage ORDER BY id")
        got = [tuple(r) for r in cur.fetchall()]
    assert got == ROWS


def test_the_session_interprets_expressions(spark: SparkSession) -> None:
    """The suite's JVMs start with Spark's code generation off (tests/spark_jvm.py: its
    -D options on the JVM's command line are the session's settings); generating_code
    turns it on for a test, then back off."""
    expected = ("true", "FALLBACK") if os.environ.get(CODEGEN_ENV) == "1" else (
        "false", "NO_CODEGEN")
    keys = list(CODEGEN)

    def settings() -> tuple[str, str]:
        return str(spark.conf.get(keys[0])), str(spark.conf.get(keys[1]))

    def whole_stage() -> bool:  # a plan's whole-stage code generated operators: "*(1) ..."
        plan = spark.range(10).selectExpr("id * 2 AS x").where("x > 3")._jdf.queryExecution()
        return "*(" in str(plan.executedPlan().toString())

    assert settings() == expected
    assert whole_stage() == (expected[0] == "true")
    with generating_code(spark):
        assert settings() == ("true", "FALLBACK")
        assert whole_stage()
        assert spark.range(10).selectExpr("id * 2 AS x").where("x > 3").count() == 8
    assert settings() == expected
