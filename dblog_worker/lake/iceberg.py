"""Apache Iceberg tables through ``iceberg-spark-runtime``, in a JDBC catalog (a database
holds the catalog: PostgreSQL here) or a Hadoop catalog (the warehouse alone).

The merge log rides in the snapshot summary of the MERGE's commit: Iceberg's
``CommitMetadata.withCommitProperties`` attaches properties to the snapshots committed
by the code it runs, on the calling thread; the job hands it the MERGE as a Java
``Callable`` implemented in Python (Py4J's callback server, which PySpark starts for
``foreachBatch`` the same way), so the summary and the rows commit atomically. Tables are
format version 2, merge-on-read (position deletes: a MERGE writes what changed, not the
files it touches), with the source's key as identifier fields.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from dblog_worker.config_lake import LakeConfig, Partition
from dblog_worker.lake.format import KEY_PROPERTY, LOG_PROPERTY, MergeLog
from dblog_worker.lake.types import quote, sql_literal
from dblog_worker.names import split_table

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["CATALOG", "FORMAT"]

CATALOG = "dblog_lake"  # the Spark catalog the job registers
_PREFIX = f"spark.sql.catalog.{CATALOG}"
TABLE_PROPERTIES = {
    "format-version": "2", "write.merge.mode": "merge-on-read",
    "write.update.mode": "merge-on-read", "write.delete.mode": "merge-on-read",
}


def _partition_sql(field: Partition) -> str:
    column = quote(field.column)
    if field.transform == "identity":
        return column
    if field.width:
        return f"{field.transform}({field.width}, {column})"
    return f"{field.transform}({column})"


class IcebergFormat:
    title = "Iceberg"

    def session_conf(self, lake: LakeConfig) -> dict[str, str]:
        return {"spark.sql.extensions":
                "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions"}

    def runtime_conf(self, lake: LakeConfig) -> dict[str, str]:
        conf = {_PREFIX: "org.apache.iceberg.spark.SparkCatalog",
                f"{_PREFIX}.type": lake.catalog, f"{_PREFIX}.warehouse": lake.warehouse}
        if lake.catalog == "jdbc":
            conf[f"{_PREFIX}.uri"] = lake.catalog_uri
            conf[f"{_PREFIX}.jdbc.user"] = lake.catalog_user
            if lake.catalog_password:
                conf[f"{_PREFIX}.jdbc.password"] = lake.catalog_password
        return conf

    def table(self, lake: LakeConfig, table: str) -> str:
        schema, name = split_table(table)
        return f"{CATALOG}.{quote(schema)}.{quote(name)}"

    def exists(self, spark: SparkSession, lake: LakeConfig, table: str) -> bool:
        if lake.catalog != "jdbc":  # a Hadoop catalog lists a warehouse not made yet: it fails
            return bool(spark.catalog.tableExists(self.table(lake, table)))
        schema, name = split_table(table)
        if not spark.sql(f"SHOW NAMESPACES IN {CATALOG}").where(
                f"namespace = {sql_literal(schema)}").count():
            return False
        return bool(spark.sql(f"SHOW TABLES IN {CATALOG}.{quote(schema)}").where(
            f"tableName = {sql_literal(name)}").count())

    def create_sql(self, lake: LakeConfig, table: str, columns: Sequence[tuple[str, str]],
                   key: Sequence[str], partition: Sequence[Partition]) -> list[str]:
        schema, _ = split_table(table)
        described = ", ".join(f"{quote(n)} {t}{' NOT NULL' if n in key else ''}"
                              for n, t in columns)
        spec = (f" PARTITIONED BY ({', '.join(_partition_sql(p) for p in partition)})"
                if partition else "")
        properties = {**TABLE_PROPERTIES, KEY_PROPERTY: _json_list(key)}
        listed = ", ".join(f"{sql_literal(k)} = {sql_literal(v)}" for k, v in properties.items())
        named = self.table(lake, table)
        return [f"CREATE NAMESPACE IF NOT EXISTS {CATALOG}.{quote(schema)}",
                f"CREATE TABLE IF NOT EXISTS {named} ({described}) USING iceberg{spec}"
                f" TBLPROPERTIES ({listed})",
                f"ALTER TABLE {named} SET IDENTIFIER FIELDS {', '.join(quote(k) for k in key)}"]

    def properties(self, spark: SparkSession, lake: LakeConfig, table: str) -> dict[str, str]:
        rows = spark.sql(f"SHOW TBLPROPERTIES {self.table(lake, table)}").collect()
        return {str(r[0]): str(r[1]) for r in rows}

    def committed_log(self, spark: SparkSession, lake: LakeConfig, table: str) -> MergeLog:
        named = self.table(lake, table)
        rows = spark.sql(
            f"SELECT s.summary[{sql_literal(LOG_PROPERTY)}] FROM {named}.snapshots s"
            f" JOIN {named}.history h ON s.snapshot_id = h.snapshot_id"
            f" WHERE h.is_current_ancestor AND s.summary[{sql_literal(LOG_PROPERTY)}]"
            " IS NOT NULL ORDER BY s.committed_at DESC LIMIT 1").collect()
        found = MergeLog.parse(str(rows[0][0])) if rows else None
        return found or MergeLog({})

    def commit(self, spark: SparkSession, lake: LakeConfig, table: str, log: MergeLog,
               writer: str, version: int, apply: Callable[[], list[Any]],
               inserted: Callable[[int | None], int]) -> tuple[int, int]:
        """The counts come from the summary of the snapshot the MERGE committed: a
        merge-on-read MERGE adds a record per row inserted or updated (``added-records``)
        and a position delete per row updated or deleted (``added-position-deletes``), so
        with the rows it inserted (the staged upserts without a row in the parent
        snapshot): updated = added - inserted, deleted = position deletes - updated."""
        from pyspark.java_gateway import ensure_callback_server_started

        context = spark.sparkContext
        gateway = context._gateway
        jvm = context._jvm
        assert gateway is not None and jvm is not None
        ensure_callback_server_started(gateway)  # type: ignore[no-untyped-call]
        properties = jvm.java.util.HashMap()
        properties.put(LOG_PROPERTY, log.to_json())
        failure = jvm.java.lang.Exception().getClass()
        jvm.org.apache.iceberg.spark.CommitMetadata.withCommitProperties(
            properties, _Callable(apply), failure)
        named = self.table(lake, table)
        found = spark.sql(
            f"SELECT parent_id, summary FROM {named}.snapshots"
            f" WHERE summary[{sql_literal(LOG_PROPERTY)}] = {sql_literal(log.to_json())}"
            " ORDER BY committed_at DESC LIMIT 1").collect()
        if not found:  # the MERGE changed nothing, so committed no snapshot: the log alone
            spark.sql(f"ALTER TABLE {named} SET TBLPROPERTIES ({sql_literal(LOG_PROPERTY)} ="
                      f" {sql_literal(log.to_json())})")
            return 0, 0
        parent, summary = found[0][0], dict(found[0][1] or {})
        added = int(summary.get("added-records", 0))
        removed = int(summary.get("added-position-deletes", 0)) + int(
            summary.get("added-equality-deletes", 0))
        if not added and not removed:
            return 0, 0
        updated = added - inserted(None if parent is None else int(parent)) if added else 0
        return added, max(0, removed - updated)


class _Callable:
    """A ``java.util.concurrent.Callable`` that runs a Python function (through Py4J)."""

    def __init__(self, function: Callable[[], Any]) -> None:
        self.function = function

    def call(self) -> None:
        self.function()

    class Java:
        implements = ["java.util.concurrent.Callable"]  # noqa: RUF012 - Py4J reads it so


def _json_list(values: Sequence[str]) -> str:
    import json

    return json.dumps(list(values), ensure_ascii=False, separators=(",", ":"))


FORMAT = IcebergFormat()
