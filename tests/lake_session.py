"""One Spark 3.5 session that merges many times: run by ``.tools/spark35/bin/python`` (the
tests' own PySpark is 4.2, which no Iceberg runtime fits), it starts its session once with
the Iceberg and Delta jars, then reads one request a line on stdin (JSON: ``config``,
``tables``) and answers each on stdout with one line (JSON: ``status`` as the job's exit
status, ``report`` or ``error``). The merge is the job's own (``dblog_spark.merge.merge_in``)
in that session: what a spark-submit per merge would do, without a JVM start per merge.
"""

from __future__ import annotations

import json
import sys
import traceback
from typing import Any


def run_sql(spark: Any, config: Any, table: str, statements: list[str]) -> list[list[str]]:
    """Run ``statements`` in a lake target's session, ``{t}`` naming ``table``; the rows of
    the last, as texts."""
    from dblog_worker.lake.target import LakeTarget

    target = LakeTarget(config.require_target(), spark)
    named = target.format.table(target.lake, table)
    rows: list[list[str]] = []
    for statement in statements:
        rows = [[str(v) for v in row] for row in target.spark.sql(
            statement.replace("{t}", named)).collect()]
    return rows


def main() -> int:
    jars, extra_conf = sys.argv[1], json.loads(sys.argv[2])
    from dblog_spark.merge import merge_in  # type: ignore[import-not-found]
    from pyspark.sql import SparkSession

    from dblog_worker import config as config_module
    from dblog_worker.errors import ConfigError, TransientError

    builder = SparkSession.builder.master("local[2]").appName("dblog-lake-tests")
    conf = {"spark.jars": jars, "spark.sql.session.timeZone": "UTC",
            "spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "1",
            "spark.default.parallelism": "2", "spark.sql.adaptive.enabled": "false",
            "spark.databricks.delta.snapshotPartitions": "1",
            "spark.ui.showConsoleProgress": "false", "spark.scheduler.mode": "FAIR",
            "spark.executor.heartbeatInterval": "60s",
            "spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1",
            "spark.sql.extensions":
            "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions,"
            "io.delta.sql.DeltaSparkSessionExtension",
            "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
            **extra_conf}
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    print(json.dumps({"ready": spark.version}), flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        try:
            config = config_module.load(request["config"])
            if "sql" in request:  # statements on a lake table ({t}: its name), their rows
                answer = {"status": 0, "rows": run_sql(spark, config, request["table"],
                                                        request["sql"])}
            else:
                report = merge_in(spark, config, request.get("tables") or ())
                answer = {"status": 0 if report.ok else 1, "report": report.as_dict()}
        except ConfigError as exc:
            answer = {"status": 2, "error": str(exc)}
        except TransientError as exc:
            answer = {"status": 3, "error": str(exc)}
        except Exception as exc:  # a crash of the job: its traceback, for the test's message
            answer = {"status": 99, "error": f"{exc!r}\n{traceback.format_exc()[-6000:]}"}
        print(json.dumps(answer), flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
