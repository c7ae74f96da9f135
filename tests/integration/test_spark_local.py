"""The local Spark fixture: a JVM on loopback with the JDBC drivers of PostgreSQL and
MariaDB, writing to and reading from the throwaway servers."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import psycopg
import pymysql
from psycopg.conninfo import conninfo_to_dict
from pyspark.sql import SparkSession

from tests.services import HOST, MariaDBServer

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
