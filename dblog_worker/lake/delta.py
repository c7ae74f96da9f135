"""Delta Lake tables through ``delta-spark``, each at a path under the warehouse (no
catalog): ``<warehouse>/<schema>.<table>``, each part percent-encoded as the landing zone
encodes its folders.

The merge log rides in the MERGE commit's ``commitInfo.userMetadata`` (the session
setting ``spark.databricks.delta.commitInfo.userMetadata``), and the commit carries a
transaction identifier (``txnAppId`` / ``txnVersion``: ``dblog:<source>:<source table>``
and the batch's last segment): Delta skips a MERGE whose version it has committed already,
and refuses one that races another of the same identifier. Each table merges in its own Spark
session, so these settings never leak into another table's commit. Tables use column
mapping by name, so a column may have any name.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from dblog_worker.config_lake import LakeConfig, Partition
from dblog_worker.lake.format import KEY_PROPERTY, MergeLog
from dblog_worker.lake.types import quote, sql_literal
from dblog_worker.landing.names import table_dir_name
from dblog_worker.names import split_table

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["FORMAT", "table_path"]

TABLE_PROPERTIES = {"delta.columnMapping.mode": "name", "delta.minReaderVersion": "2",
                    "delta.minWriterVersion": "5"}
_USER_METADATA = "spark.databricks.delta.commitInfo.userMetadata"
_TXN_APP = "spark.databricks.delta.write.txnAppId"
_TXN_VERSION = "spark.databricks.delta.write.txnVersion"


def table_path(lake: LakeConfig, table: str) -> str:
    return f"{lake.warehouse.rstrip('/')}/{table_dir_name(*split_table(table))}"


class DeltaFormat:
    title = "Delta"

    def session_conf(self, lake: LakeConfig) -> dict[str, str]:
        return {"spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
                "spark.sql.catalog.spark_catalog":
                "org.apache.spark.sql.delta.catalog.DeltaCatalog"}

    def runtime_conf(self, lake: LakeConfig) -> dict[str, str]:
        # Dates and timestamps as the sources and delta-rs count them (proleptic Gregorian):
        # Spark 3.5 otherwise refuses to write a date before 1582 (0001-01-01) to Parquet.
        return {f"spark.sql.parquet.{kind}RebaseModeIn{way}": "CORRECTED"
                for kind in ("datetime", "int96") for way in ("Write", "Read")}

    def table(self, lake: LakeConfig, table: str) -> str:
        return f"delta.{quote(table_path(lake, table))}"

    def exists(self, spark: SparkSession, lake: LakeConfig, table: str) -> bool:
        jvm = spark.sparkContext._jvm
        assert jvm is not None
        return bool(jvm.io.delta.tables.DeltaTable.isDeltaTable(
            spark._jsparkSession, table_path(lake, table)))

    def create_sql(self, lake: LakeConfig, table: str, columns: Sequence[tuple[str, str]],
                   key: Sequence[str], partition: Sequence[Partition]) -> list[str]:
        described = ", ".join(f"{quote(n)} {t}{' NOT NULL' if n in key else ''}"
                              for n, t in columns)
        spec = (f" PARTITIONED BY ({', '.join(quote(p.column) for p in partition)})"
                if partition else "")
        properties = {**TABLE_PROPERTIES,
                      KEY_PROPERTY: json.dumps(list(key), ensure_ascii=False,
                                               separators=(",", ":"))}
        listed = ", ".join(f"{sql_literal(k)} = {sql_literal(v)}" for k, v in properties.items())
        return [f"CREATE TABLE IF NOT EXISTS {self.table(lake, table)} ({described})"
                f" USING delta{spec} TBLPROPERTIES ({listed})"]

    def properties(self, spark: SparkSession, lake: LakeConfig, table: str) -> dict[str, str]:
        rows = spark.sql(f"SHOW TBLPROPERTIES {self.table(lake, table)}").collect()
        return {str(r[0]): str(r[1]) for r in rows}

    def committed_log(self, spark: SparkSession, lake: LakeConfig, table: str) -> MergeLog:
        rows = spark.sql(f"DESCRIBE HISTORY {self.table(lake, table)}").where(
            "userMetadata IS NOT NULL").orderBy("version", ascending=False) \
            .select("userMetadata").collect()
        for row in rows:
            found = MergeLog.parse(str(row[0]))
            if found is not None:
                return found
        return MergeLog({})

    def commit(self, spark: SparkSession, lake: LakeConfig, table: str, log: MergeLog,
               writer: str, version: int, apply: Callable[[], list[Any]],
               inserted: Callable[[int | None], int]) -> tuple[int, int]:
        """The MERGE's result row is its commit's operationMetrics: num_updated_rows,
        num_inserted_rows, num_deleted_rows (none when Delta skipped a version it had)."""
        spark.conf.set(_USER_METADATA, log.to_json())
        spark.conf.set(_TXN_APP, f"dblog:{writer}")
        spark.conf.set(_TXN_VERSION, str(version))
        try:
            rows = apply()
        finally:
            for key in (_USER_METADATA, _TXN_APP, _TXN_VERSION):
                spark.conf.unset(key)
        if not rows:
            return 0, 0
        metrics = rows[0].asDict()
        return (max(0, int(metrics.get("num_updated_rows") or 0))
                + max(0, int(metrics.get("num_inserted_rows") or 0)),
                max(0, int(metrics.get("num_deleted_rows") or 0)))


FORMAT = DeltaFormat()
