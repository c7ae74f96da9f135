"""A lake target: Iceberg or Delta tables, written by the Spark job's own session.

Per batch (the loop is :func:`dblog_worker.merge.loop.merge_source`, as for a database):

1. **Stage.** Spark reads the batch's segments, drops what a truncate in the batch
   cleared, keeps the latest event per key and turns its row image into typed columns
   (:mod:`.types`); keys whose tombstone is as new as the event are dropped. The result
   is persisted and named as a temporary view of the table's session.
2. **Tombstones.** Deleted keys are remembered, with the delete's position, in the
   state namespace's ``tombstones`` table (a ``MERGE``, idempotent: a replay changes
   nothing); a newer upsert of the key removes its tombstone; a truncate removes the
   older ones.
3. **Apply.** One ``MERGE INTO`` the target table, guarded by position on every row
   (``t._dblog_position < s._dblog_position``): deletes, updates, inserts, and for a
   truncate ``WHEN NOT MATCHED BY SOURCE`` rows older than it. Its commit carries the
   merge log (:mod:`.format`): the rows and the log commit together, or neither.

A job killed between 2 and 3 left tombstones a re-run writes again (the same), and no
row: the next run stages the batch anew and applies it once. Lake formats have no
session lock: a second merge of the same table that read the same log is refused by the
merge log check before its MERGE, and by the format's own conflict check at commit
(Iceberg's serializable isolation, Delta's transaction identifier); whatever it applied
is position-guarded.
"""

from __future__ import annotations

import functools
import json
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from dblog_worker.config import TargetConfig
from dblog_worker.config_lake import LakeConfig
from dblog_worker.errors import DblogError, TargetError, TargetUnavailable
from dblog_worker.lake import delta, iceberg
from dblog_worker.lake.format import (
    EMPTY,
    KEY_PROPERTY,
    LOG_PROPERTY,
    LakeFormat,
    LogEntry,
    MergeLog,
)
from dblog_worker.lake.types import column_ddl, quote, sql_literal, value_sql
from dblog_worker.lake.types import widened as widened_type
from dblog_worker.merge.column_types import SourceColumn
from dblog_worker.merge.plan import Batch, MergeLogEntry
from dblog_worker.merge.target import POSITION_COLUMN, Applied, Target

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["FORMATS", "LakeTarget", "merge_sql", "session_conf"]

FORMATS: Mapping[str, LakeFormat] = {"iceberg": iceberg.FORMAT, "delta": delta.FORMAT}
OP = "_dblog_op"  # staged columns besides the table's own
KEY = "_dblog_key"
RESERVED = (OP, KEY, POSITION_COLUMN)
TOMBSTONE_COLUMNS = (("target_table", "STRING"), ("key_json", "STRING"), ("position", "STRING"),
                     ("deleted_at", "TIMESTAMP"))
_HEX = frozenset("0123456789abcdef")
_R = TypeVar("_R")
# The tables a job merges at once share the tombstones table: their writes to it take turns
# (Delta refuses a MERGE or DELETE that a concurrent commit to the same table overlaps).
_TOMBSTONES = threading.Lock()


def session_conf(config: TargetConfig) -> dict[str, str]:
    """What the job's Spark session needs from its start for this lake target."""
    lake = _lake(config)
    return FORMATS[config.kind].session_conf(lake)


def _lake(config: TargetConfig) -> LakeConfig:
    if config.lake is None:
        raise TargetError(f"target kind {config.kind} has no lake options")
    return config.lake


def _position(text: str) -> str:
    """A position as a SQL literal, checked: 48 hex digits (or empty)."""
    if len(text) not in (0, 48) or not set(text) <= _HEX:
        raise TargetError(f"not a position: {text!r}")
    return sql_literal(text)


def merge_sql(table: str, view: str, columns: Sequence[str], key: Sequence[str],
              cut: str | None) -> str:
    """The MERGE of a staged view into ``table`` (both as Spark SQL names them): the
    latest event per key, applied only where newer than the row; with ``cut`` (a
    truncate's position), rows older than it that the batch does not touch go too."""
    p = quote(POSITION_COLUMN)
    newer = f"(t.{p} IS NULL OR t.{p} < s.{p})"
    on = " AND ".join(f"t.{quote(k)} = s.{quote(k)}" for k in key)
    sets = ", ".join(f"t.{quote(c)} = s.{quote(c)}" for c in columns)
    names = ", ".join(quote(c) for c in [*columns, POSITION_COLUMN])
    values = ", ".join(f"s.{quote(c)}" for c in [*columns, POSITION_COLUMN])
    op = quote(OP)
    sql = (f"MERGE INTO {table} AS t USING {view} AS s ON {on}"
           f" WHEN MATCHED AND s.{op} = 'd' AND {newer} THEN DELETE"
           f" WHEN MATCHED AND s.{op} <> 'd' AND {newer} THEN UPDATE SET {sets}, t.{p} = s.{p}"
           f" WHEN NOT MATCHED AND s.{op} <> 'd' THEN INSERT ({names}) VALUES ({values})")
    if cut is not None:
        sql += (f" WHEN NOT MATCHED BY SOURCE AND (t.{p} IS NULL OR t.{p} < {_position(cut)})"
                " THEN DELETE")
    return sql


def tombstones_sql(tombstones: str, view: str, target_table: str, cut: str) -> str:
    """Remember the batch's deletes; forget a key's tombstone once a newer upsert came."""
    p, op, k = quote(POSITION_COLUMN), quote(OP), quote(KEY)
    target = sql_literal(target_table)
    return (f"MERGE INTO {tombstones} AS tb USING (SELECT {k}, {op}, {p} FROM {view}"
            f" WHERE {p} > {_position(cut)}) AS s"
            f" ON tb.target_table = {target} AND tb.key_json = s.{k}"
            f" WHEN MATCHED AND s.{op} = 'd' AND tb.position < s.{p}"
            f" THEN UPDATE SET tb.position = s.{p}, tb.deleted_at = current_timestamp()"
            f" WHEN MATCHED AND s.{op} <> 'd' AND tb.position < s.{p} THEN DELETE"
            f" WHEN NOT MATCHED AND s.{op} = 'd' THEN INSERT (target_table, key_json, position,"
            f" deleted_at) VALUES ({target}, s.{k}, s.{p}, current_timestamp())")


_CONNECTION_FAILURES = ("java.net.ConnectException", "java.net.UnknownHostException",
                        "java.net.NoRouteToHostException",
                        "java.sql.SQLTransientConnectionException",
                        "java.sql.SQLNonTransientConnectionException")


def unreachable_cause(exc: BaseException) -> str | None:
    """The message of the JVM exception that says a catalog's database could not be
    reached (a refused or dropped connection: SQLSTATE class 08), among the causes of a
    Py4J error; None for any other failure."""
    java = getattr(exc, "java_exception", None) or getattr(exc, "_origin", None)
    for _ in range(20):
        if java is None:
            return None
        try:
            name = str(java.getClass().getName())
            message = str(java.getMessage() or name)
            cause = java.getCause()
        except Exception:  # the gateway itself is gone: not a catalog's failure
            return None
        try:  # a java.sql.SQLException's; other exceptions have no such method
            state = str(java.getSQLState() or "")
        except Exception:
            state = ""
        if name in _CONNECTION_FAILURES or state.startswith("08"):
            return message.strip().splitlines()[0][:300]
        java = cause
    return None


def _reachable(method: Callable[..., _R]) -> Callable[..., _R]:
    """TargetUnavailable, one line, for a failure to reach the catalog's database."""

    @functools.wraps(method)
    def guarded(self: LakeTarget, *args: Any, **kwargs: Any) -> _R:
        try:
            return method(self, *args, **kwargs)
        except DblogError:
            raise
        except Exception as exc:
            self._raise_unavailable(exc)
            raise

    return guarded


class LakeTarget(Target):
    """Lake tables through a Spark session of their own (one per merged table)."""

    position_type = "STRING"

    def __init__(self, config: TargetConfig, spark: SparkSession) -> None:
        super().__init__(config)
        self.kind = config.kind
        self.lake = _lake(config)
        self.format = FORMATS[config.kind]
        self.spark = spark.newSession()  # its own settings (commit metadata) and views
        for key, value in {**self.format.runtime_conf(self.lake),
                           "spark.sql.ansi.enabled": "true",  # a bad value fails, not NULL
                           "spark.sql.caseSensitive": "true"}.items():
            self.spark.conf.set(key, value)
        self._staged: dict[str, DataFrame] = {}
        self._column_types: dict[str, str] = {}
        self._committed: dict[str, MergeLog] = {}  # table -> the log its last commit carried
        self._source_table = ""

    # -- connection, state, locks -----------------------------------------------------------

    def connect(self) -> None:
        return None

    def close(self) -> None:
        for view, frame in self._staged.items():
            self.spark.catalog.dropTempView(view)
            frame.unpersist()
        self._staged.clear()

    def _sql(self, sql: str) -> list[Any]:
        return list(self.spark.sql(sql).collect())

    def _raise_unavailable(self, exc: BaseException) -> None:
        cause = unreachable_cause(exc)
        if cause is not None:
            raise TargetUnavailable(f"the {self.format.title} target ({self.lake.describe()})"
                                    f" is unreachable: {cause}; nothing of the batch in flight"
                                    " was applied, run the merge again") from None

    @property
    def tombstones(self) -> str:
        return self.format.table(self.lake, f"{self.state}.tombstones")

    @_reachable
    def ensure_state(self) -> None:
        table = f"{self.state}.tombstones"
        if not self.format.exists(self.spark, self.lake, table):
            for sql in self.format.create_sql(self.lake, table, TOMBSTONE_COLUMNS,
                                              ("target_table", "key_json"), ()):
                self._sql(sql)

    def merge_log_rows(self, sql: str, params: Sequence[str]) -> list[tuple[Any, ...]]:
        raise TargetError("a lake target keeps its merge log in its tables' commits")

    @_reachable
    def merge_log(self, table: str, *, fresh: bool = True) -> MergeLog:
        """The newer of the log of the last commit that carries one and the table's copy;
        not ``fresh``: the log this target committed last, if it did (reading a format's
        history takes a Spark job)."""
        if not fresh and table in self._committed:
            return self._committed[table]
        if not self.format.exists(self.spark, self.lake, table):
            return EMPTY
        copied = MergeLog.parse(self.format.properties(self.spark, self.lake, table)
                                .get(LOG_PROPERTY)) or EMPTY
        return self.format.committed_log(self.spark, self.lake, table).newer(copied)

    def merged(self, source: str, source_table: str, target_table: str) -> MergeLogEntry:
        """Between this target's own batches, the log it committed; apply reads the
        table's again, so a merge that ran meanwhile is still found."""
        return self.merge_log(target_table, fresh=False).get(source, source_table).entry()

    def try_lock(self, stage: str) -> bool:
        return True  # no session lock in a lake: see the module's docstring

    def unlock(self, stage: str) -> None:
        return None

    # -- tables -----------------------------------------------------------------------------

    @_reachable
    def table_columns(self, table: str) -> dict[str, str] | None:
        if not self.format.exists(self.spark, self.lake, table):
            return None
        schema = self.spark.table(self.format.table(self.lake, table)).schema
        return {f.name: f.dataType.simpleString().upper() for f in schema.fields}

    @_reachable
    def primary_key(self, table: str) -> list[str]:
        found = self.format.properties(self.spark, self.lake, table).get(KEY_PROPERTY)
        key = json.loads(found) if found else []
        return [str(k) for k in key] if isinstance(key, list) else []

    def create_table(self, table: str, columns: Sequence[tuple[str, str]],
                     key: Sequence[str]) -> None:
        partition = self.lake.partition_by.get(self._source_table, ())
        known = {n for n, _ in columns}
        for field in partition:
            if field.column not in known:
                raise TargetError(f"target.partition_by of {self._source_table} names column"
                                  f" {field.column!r}, which the table does not have")
        for sql in self.format.create_sql(self.lake, table, columns, key, partition):
            self._ddl(table, sql)

    def add_columns(self, table: str, columns: Sequence[tuple[str, str]]) -> None:
        added = ", ".join(f"{quote(n)} {t}" for n, t in columns)
        self._ddl(table, f"ALTER TABLE {self.format.table(self.lake, table)} ADD COLUMNS"
                         f" ({added})")

    def widened(self, table: str, column: SourceColumn, existing: str) -> str | None:
        return widened_type(column, existing) if self.kind == "iceberg" else None

    def modify_columns(self, table: str, columns: Sequence[tuple[str, str]]) -> None:
        for name, type_sql in columns:
            self._ddl(table, f"ALTER TABLE {self.format.table(self.lake, table)} ALTER COLUMN"
                             f" {quote(name)} TYPE {type_sql}")

    def _ddl(self, table: str, sql: str) -> None:
        for attempt in range(2):
            try:
                self._sql(sql)
                return
            except Exception as exc:  # AnalysisException and the JVM's errors alike
                self._raise_unavailable(exc)
                if attempt == 0 and " IF NOT EXISTS " in sql:
                    # the JDBC catalog checks, then inserts: a table merged in parallel
                    # created the same namespace between the two; it exists now
                    continue
                raise TargetError(f"cannot prepare target table {table}: {_first_line(exc)}"
                                  ) from None

    @_reachable
    def prepare_table(self, batch: Batch) -> dict[str, str]:
        self._source_table = batch.source_table
        found = super().prepare_table(batch)
        self._column_types = found
        return found

    def _check_names(self, batch: Batch) -> None:
        for column in batch.columns:
            if column.name in (OP, KEY):
                raise TargetError(f"{batch.source_table}: a source column is named"
                                  f" {column.name}, which the merge keeps for itself")

    def _types(self, batch: Batch, columns: Sequence[SourceColumn]) -> list[tuple[str, str]]:
        return [(c.name, column_ddl(batch.source_table, c, self.format.title))
                for c in columns]

    # -- staging ------------------------------------------------------------------------------

    def prepare_stage(self, stage: str) -> None:
        frame = self._staged.pop(stage, None)
        if frame is not None:
            self.spark.catalog.dropTempView(stage)
            frame.unpersist()

    def stage_table(self, stage: str) -> str:
        return quote(stage)

    def jdbc(self) -> tuple[str, dict[str, str]]:
        raise TargetError("a lake target is written by Spark itself, not over JDBC")

    @_reachable
    def stage(self, batch: Batch) -> None:
        """The batch's latest event per key, typed, without keys whose tombstone is newer:
        persisted, as the temporary view ``batch.stage``."""
        from pyspark.sql import functions as F
        from pyspark.sql.types import ArrayType, StringType, StructField, StructType

        events = (self.spark.read.format(batch.format).load(batch.locations)
                  .select("position", "op", "key", "after"))
        if batch.truncate_at:
            events = events.where(F.col("position") > F.lit(batch.truncate_at))
        latest = (events.where(F.col("op") != F.lit("t")).groupBy("key")
                  .agg(F.max(F.struct("position", "op", "after")).alias("e"))
                  .select(F.col("key").alias(KEY), F.col("e.op").alias(OP),
                          F.col("e.position").alias(POSITION_COLUMN),
                          F.from_json(F.col("key"), ArrayType(StringType())).alias("_k"),
                          F.from_json(F.col("e.after"), StructType(
                              [StructField(c.name, StringType()) for c in batch.columns]))
                          .alias("_a")))
        tombstones = (self.spark.table(self.tombstones)
                      .where(F.col("target_table") == F.lit(batch.target_table))
                      .select(F.col("key_json").alias("_tb_key"),
                              F.col("position").alias("_tb_position")))
        latest = latest.join(tombstones, latest[KEY] == tombstones["_tb_key"], "left").where(
            F.col("_tb_position").isNull() | (F.col(OP) == F.lit("d"))
            | (F.col("_tb_position") < F.col(POSITION_COLUMN)))
        typed = [
            f"{value_sql(c, self._column_types[c.name], self._ref(batch, c))} AS {quote(c.name)}"
            for c in batch.columns]
        staged = latest.selectExpr(quote(KEY), quote(OP), quote(POSITION_COLUMN), *typed)
        staged = staged.persist()
        self._staged[batch.stage] = staged
        staged.createOrReplaceTempView(batch.stage)

    @staticmethod
    def _ref(batch: Batch, column: SourceColumn) -> str:
        if column.name in batch.key:  # deletes carry their key only
            return f"_k[{batch.key.index(column.name)}]"
        return f"_a.{quote(column.name)}"

    # -- apply --------------------------------------------------------------------------------

    def apply(self, batch: Batch, types: Mapping[str, str], retention_h: float) -> Applied:
        table = batch.target_table
        log = self.merge_log(table)
        entry = log.get(batch.source, batch.source_table)
        if entry.last_segment != batch.after_segment:
            raise TargetError(
                f"{table}: the merge log moved from segment {batch.after_segment} to"
                f" {entry.last_segment} while this batch was staged; another merge ran at the"
                " same time. Re-run the merge.")
        cut = max(entry.truncated_at, batch.truncate_at)
        truncated = bool(batch.truncate_at) and batch.truncate_at > entry.truncated_at
        view = quote(batch.stage)
        try:
            with _TOMBSTONES:
                if truncated:
                    self._sql(f"DELETE FROM {self.tombstones} WHERE target_table ="
                              f" {sql_literal(table)} AND position < {_position(cut)}")
                self._sql(tombstones_sql(self.tombstones, view, table, cut))
            after = LogEntry(batch.last_segment, batch.last_position, cut,
                             entry.events + batch.events, entry.batches + 1)
            named = self.format.table(self.lake, table)
            merge = merge_sql(named, view, [c.name for c in batch.columns], batch.key,
                              cut if truncated else None)
            committed = log.with_entry(batch.source, batch.source_table, after)
            upserted, deleted = self.format.commit(
                self.spark, self.lake, table, committed,
                MergeLog.key(batch.source, batch.source_table), batch.last_segment,
                lambda: self._sql(merge),
                lambda snapshot: self._inserted(named, view, batch.key, snapshot))
        except TargetError:
            raise
        except Exception as exc:
            self._raise_unavailable(exc)
            raise TargetError(
                f"{table}: the batch of segments {batch.segments[0].seq}-{batch.last_segment}"
                f" was not applied: {_first_line(exc)}") from None
        finally:
            self.prepare_stage(batch.stage)
        self._committed[table] = committed
        return Applied(upserted=upserted, deleted=deleted, truncated=truncated)

    def _inserted(self, named: str, view: str, key: Sequence[str], snapshot: int | None
                  ) -> int:
        """Staged upserts whose key has no row in the table as of ``snapshot`` (None: the
        table was empty)."""
        upserts = f"SELECT * FROM {view} WHERE {quote(OP)} <> 'd'"
        if snapshot is None:
            return int(self._sql(f"SELECT count(*) FROM ({upserts})")[0][0])
        on = " AND ".join(f"s.{quote(k)} = t.{quote(k)}" for k in key)
        return int(self._sql(f"SELECT count(*) FROM ({upserts}) AS s LEFT ANTI JOIN {named}"
                             f" VERSION AS OF {int(snapshot)} AS t ON {on}")[0][0])

    @_reachable
    def finish(self, source: str, source_table: str, target_table: str,
               retention_h: float) -> None:
        """After a table's batches: copy the merge log into a table property (it outlives
        the commit that carries it) and drop tombstones past their retention."""
        log = self.merge_log(target_table, fresh=False)
        entry = log.get(source, source_table)
        named = self.format.table(self.lake, target_table)
        self._sql(f"ALTER TABLE {named} SET TBLPROPERTIES ({sql_literal(LOG_PROPERTY)} ="
                  f" {sql_literal(log.to_json())})")
        with _TOMBSTONES:
            self._sql(f"DELETE FROM {self.tombstones} WHERE target_table ="
                      f" {sql_literal(target_table)} AND position <="
                      f" {_position(entry.last_position)} AND deleted_at < current_timestamp()"
                      f" - make_interval(0, 0, 0, 0, 0, 0, {float(retention_h) * 3600:.3f})")

    # -- one row by its key -------------------------------------------------------------------

    def row_position(self, table: str, key_columns: Sequence[str], types: Mapping[str, str],
                     key: Sequence[str]) -> tuple[bool, object]:
        where = " AND ".join(f"{quote(c)} = CAST({sql_literal(v)} AS {types[c]})"
                             for c, v in zip(key_columns, key, strict=True))
        rows = self._sql(f"SELECT {quote(POSITION_COLUMN)} FROM"
                         f" {self.format.table(self.lake, table)} WHERE {where}")
        return (True, rows[0][0]) if rows else (False, None)

    def delete_row(self, table: str, key_columns: Sequence[str], types: Mapping[str, str],
                   key: Sequence[str], position: object) -> bool:
        where = " AND ".join(f"{quote(c)} = CAST({sql_literal(v)} AS {types[c]})"
                             for c, v in zip(key_columns, key, strict=True))
        p = quote(POSITION_COLUMN)
        guard = f"{p} IS NULL" if position is None else f"{p} = {_position(str(position))}"
        named = self.format.table(self.lake, table)
        if not self._sql(f"SELECT 1 FROM {named} WHERE {where} AND {guard}"):
            return False
        self._sql(f"DELETE FROM {named} WHERE {where} AND {guard}")
        return True


def _first_line(exc: BaseException) -> str:
    """The first line of ``exc``'s message: a Py4J error's is the JVM exception's."""
    java = getattr(exc, "java_exception", None)
    try:
        text = str(java.toString()).strip() if java is not None else str(exc).strip()
    except Exception:  # the gateway is gone
        text = str(exc).strip()
    return (text.splitlines()[0] if text else repr(exc))[:500]
