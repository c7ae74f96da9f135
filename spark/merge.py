"""Spark job: merge a source's landed change events into its target tables.

    spark-submit --master 'local[*]' \\
        --jars /usr/share/java/postgresql.jar,/usr/share/java/mariadb-java-client.jar \\
        spark/merge.py --config worker.toml [--table schema.table ...] [--json] [--report FILE]

Per table and batch of segments, Spark reads the segments, drops what a truncate
in the batch cleared, keeps the latest event per key (greatest position) and every
foreign-key action and prune event (they name no key: the driver applies them by
predicate, after the keyed ones, ``dblog_worker/merge/derived.py``), and
writes those rows into the batch's staging table in the target over JDBC; up to
``merge.parallel_tables`` tables at once, each on its own driver thread. The
driver then applies the staging table in one transaction with the merge log
(``dblog_worker/merge``). No Python runs on the executors.

Exit status: 0 every table merged; 1 a table was left out (damaged segment, a
target that cannot take it: see the report); 2 bad arguments or configuration;
3 the target database was unreachable (nothing of the batch in flight applied).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from dblog_worker import config as config_module
from dblog_worker import kinds
from dblog_worker.config import Config
from dblog_worker.errors import (
    ConfigError,
    RequestRejected,
    SegmentCorrupt,
    TargetError,
    TransientError,
)
from dblog_worker.landing.sink import LandedReader
from dblog_worker.merge.loop import MergeReport, Stager, merge_source, open_target
from dblog_worker.merge.plan import Batch
from dblog_worker.merge.submit import reach_target
from dblog_worker.merge.target import Target

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger("dblog.merge")

JDBC_BATCH_ROWS = "10000"
BY_PREDICATE = ("f", "p")  # foreign-key action and prune events: no key


def spark_stager(spark: SparkSession) -> Stager:
    """Stage a batch with Spark: the latest keyed event per key, and every foreign-key
    action and prune event, written over JDBC."""
    from pyspark.sql import functions as F

    def stage(batch: Batch, target: Target, reader: LandedReader) -> None:
        # Each table merges on its own thread: its jobs share the executors fairly
        # (spark.scheduler.mode=FAIR, one pool per table) and are named after its batch.
        context = spark.sparkContext
        context.setLocalProperty("spark.scheduler.pool", batch.stage)
        context.setJobDescription(f"dblog merge: segments {batch.segments[0].seq}-"
                                  f"{batch.last_segment} into {batch.stage}")
        url, properties = target.jdbc()
        events = (spark.read.format(batch.format).load(batch.locations)
                  .select("position", "op", "key", "after", "before"))
        if batch.after_position:  # a compacted segment holds events merged already
            events = events.where(F.col("position") > F.lit(batch.after_position))
        if batch.truncate_at:
            events = events.where(F.col("position") > F.lit(batch.truncate_at))
        by_predicate = F.col("op").isin(*BY_PREDICATE)
        latest = (
            events.where((F.col("op") != F.lit("t")) & ~by_predicate)
            .groupBy("key")
            .agg(F.max(F.struct("position", "op", "after")).alias("e"))
            .select(
                F.col("key").alias("key_json"),
                F.col("e.op").alias("op"),
                F.col("e.position").alias("position"),
                F.col("e.after").alias("after_json"),
                F.lit(None).cast("string").alias("before_json"),
            )
        )
        derived = events.where(by_predicate).select(
            F.lit(None).cast("string").alias("key_json"),
            "op",
            "position",
            F.col("after").alias("after_json"),
            F.col("before").alias("before_json"),
        )
        try:
            latest.unionByName(derived).write.jdbc(
                url, target.stage_table(batch.stage), mode="append",
                properties={**properties, "batchsize": JDBC_BATCH_ROWS})
        except Exception as exc:
            raise _staging_error(batch, reader, exc) from None

    return stage


def lake_stager() -> Stager:
    """Stage a batch for a lake target: a persisted view in the table's session."""

    def stage(batch: Batch, target: Target, reader: LandedReader) -> None:
        context = target.spark.sparkContext  # type: ignore[attr-defined]
        context.setLocalProperty("spark.scheduler.pool", batch.stage)
        context.setJobDescription(f"dblog merge: segments {batch.segments[0].seq}-"
                                  f"{batch.last_segment} into {batch.target_table}")
        try:
            target.stage(batch)  # type: ignore[attr-defined]  # a lake target's
        except TransientError:
            raise
        except Exception as exc:
            raise _staging_error(batch, reader, exc) from None

    return stage


def _staging_error(batch: Batch, reader: LandedReader, exc: Exception) -> Exception:
    """Name the damaged segment if one is; otherwise the target's refusal, shortened."""
    for segment in batch.segments:
        try:
            reader.read(segment)
        except (ValueError, OSError) as damaged:
            return SegmentCorrupt(f"{segment.location} is truncated or damaged: {damaged}")
    first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc)
    return TargetError(f"{batch.target_table}: staging failed: {first_line[:500]}")


def merge_in(spark: SparkSession, config: Config, tables: Sequence[str] = ()) -> MergeReport:
    """The job in a running session: ConfigError when its Spark cannot write the target
    (a lake format's jar of another Spark line), TransientError when the target is
    unreachable (nothing of the batch in flight applied)."""
    target_config = config.require_target()
    if not target_config.is_lake:
        return merge_source(config, spark_stager(spark), tables, open_target)
    problem = kinds.lake("runtime").runtime_problem(
        target_config.kind, spark.version, _scala(spark), spark.conf.get("spark.jars", "") or "")
    if problem:
        raise ConfigError(problem)
    return merge_source(config, lake_stager(), tables,
                        lambda c: kinds.lake("target").LakeTarget(c, spark))


def _scala(spark: SparkSession) -> str:
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    return str(jvm.scala.util.Properties.versionNumberString())


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="spark/merge.py", description=__doc__.split("\n")[0])
    parser.add_argument("--config", "-c", required=True, help="the worker's configuration file")
    parser.add_argument("--table", "-t", action="append", dest="tables", default=[],
                        metavar="SCHEMA.TABLE", help="merge only this source table (repeat)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--report", metavar="FILE",
                        help="also write the report as JSON to this file (the driver's)")
    return parser


def print_report(report: MergeReport, as_json: bool) -> None:
    if as_json:
        print(json.dumps(report.as_dict(), indent=2))
        return
    for t in report.tables:
        if t.error:
            print(f"{t.table} -> {t.target_table}: NOT MERGED: {t.error}")
        elif t.batches == 0:
            print(f"{t.table} -> {t.target_table}: up to date")
        else:
            print(f"{t.table} -> {t.target_table}: {t.events:,} events in {t.batches}"
                  f" batch(es), {t.upserted:,} upserted, {t.deleted:,} deleted"
                  + (f", {t.derived:,} by foreign-key or prune events" if t.derived else "")
                  + f"{', truncated' if t.truncated else ''}, {t.seconds:.1f} s")


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    logging.getLogger("py4j").setLevel(logging.WARNING)
    try:
        config = config_module.load(args.config)
        config.require_target()
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        config.source.check_table_names(args.tables)
    except RequestRejected as exc:
        print(f"refused: {exc}", file=sys.stderr)
        return 2
    try:  # before Spark starts (seconds): a target that is down fails at once
        reach_target(config)
    except TransientError as exc:
        print(f"error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 3
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.appName(f"dblog-merge-{config.source.name}").getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    application = {"application_id": spark.sparkContext.applicationId,
                   "master": spark.sparkContext.master}
    try:
        report = merge_in(spark, config, args.tables)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except TransientError as exc:  # a driver's message may span lines
        print(f"error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 3
    finally:
        spark.stop()
    print_report(report, args.json)
    if args.report:
        Path(args.report).write_text(json.dumps({**report.as_dict(), "spark": application}),
                                     encoding="utf-8")
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
