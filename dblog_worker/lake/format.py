"""What differs between the lake formats (:class:`LakeFormat`), and the merge log they both
keep: one JSON document per target table, written into the metadata of the commit that
applies a batch, so the log and the rows commit together.

The document maps ``<source>:<source table>`` (a source name has no ``:``) to that source
table's entry::

    {"dblog": 1, "tables": {"shop:public.orders": {"last_segment": 12,
      "last_position": "…48 hex…", "truncated_at": "", "events": 120000, "batches": 3}}}

The formats keep the commit's metadata only as long as they keep the commit (Iceberg
expires snapshots, Delta cleans its log), so each run also copies the document into a
table property once a table's batches are applied; the log is the newer of the two.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from dblog_worker.config_lake import LakeConfig, Partition
from dblog_worker.merge.plan import MergeLogEntry

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["KEY_PROPERTY", "LOG_PROPERTY", "LakeFormat", "LogEntry", "MergeLog"]

LOG_PROPERTY = "dblog.merge-log"
KEY_PROPERTY = "dblog.key"


@dataclass(frozen=True, slots=True)
class LogEntry:
    last_segment: int = 0
    last_position: str = ""
    truncated_at: str = ""
    events: int = 0
    batches: int = 0

    def entry(self) -> MergeLogEntry:
        return MergeLogEntry(self.last_segment, self.last_position, self.truncated_at)


@dataclass(frozen=True)
class MergeLog:
    """The merge log of one lake table: an entry per (source, source table)."""

    tables: Mapping[str, LogEntry]

    @staticmethod
    def key(source: str, source_table: str) -> str:
        return f"{source}:{source_table}"

    def get(self, source: str, source_table: str) -> LogEntry:
        return self.tables.get(self.key(source, source_table), LogEntry())

    def with_entry(self, source: str, source_table: str, entry: LogEntry) -> MergeLog:
        return MergeLog({**self.tables, self.key(source, source_table): entry})

    def newer(self, other: MergeLog) -> MergeLog:
        """Per source table, the entry that went further."""
        merged = dict(self.tables)
        for key, entry in other.tables.items():
            if key not in merged or entry.last_segment > merged[key].last_segment:
                merged[key] = entry
        return MergeLog(merged)

    def to_json(self) -> str:
        return json.dumps({"dblog": 1, "tables": {k: {
            "last_segment": e.last_segment, "last_position": e.last_position,
            "truncated_at": e.truncated_at, "events": e.events, "batches": e.batches}
            for k, e in sorted(self.tables.items())}}, separators=(",", ":"), sort_keys=True)

    @staticmethod
    def parse(text: str | None) -> MergeLog | None:
        """The document in ``text``; None for anything that is not one (another writer's
        metadata)."""
        try:
            found = json.loads(text) if text else None
        except ValueError:
            return None
        if not isinstance(found, dict) or found.get("dblog") != 1 \
                or not isinstance(found.get("tables"), dict):
            return None
        tables = {}
        for key, e in found["tables"].items():
            if isinstance(e, dict):
                tables[str(key)] = LogEntry(
                    int(e.get("last_segment", 0)), str(e.get("last_position", "")),
                    str(e.get("truncated_at", "")), int(e.get("events", 0)),
                    int(e.get("batches", 0)))
        return MergeLog(tables)


EMPTY = MergeLog({})


class LakeFormat(Protocol):
    """One lake format, as the Spark job's session uses it."""

    title: str  # "Iceberg"

    def session_conf(self, lake: LakeConfig) -> dict[str, str]:
        """Spark settings the session needs from its start (extensions, catalogs); no
        secret: they go on the spark-submit line."""

    def runtime_conf(self, lake: LakeConfig) -> dict[str, str]:
        """Settings set in the running session (secrets included) before the first use."""

    def table(self, lake: LakeConfig, table: str) -> str:
        """``schema.table`` as Spark SQL names it."""

    def exists(self, spark: SparkSession, lake: LakeConfig, table: str) -> bool: ...

    def create_sql(self, lake: LakeConfig, table: str, columns: Sequence[tuple[str, str]],
                   key: Sequence[str], partition: Sequence[Partition]) -> list[str]:
        """The statements that create the table (and its namespace) if missing."""

    def properties(self, spark: SparkSession, lake: LakeConfig, table: str) -> dict[str, str]:
        ...

    def committed_log(self, spark: SparkSession, lake: LakeConfig, table: str) -> MergeLog:
        """The merge log of the newest commit that carries one."""

    def commit(self, spark: SparkSession, lake: LakeConfig, table: str, log: MergeLog,
               writer: str, version: int, apply: Callable[[], list[Any]],
               inserted: Callable[[int | None], int]) -> tuple[int, int]:
        """Run ``apply`` (one MERGE, its result rows) so that its commit carries ``log``;
        ``writer`` (the merge log's key) and ``version`` (the batch's last segment), for a
        format that can refuse a commit made twice. The rows the commit changed, from the
        format's metrics: (upserted, deleted). ``inserted(snapshot)``: how many staged
        upserts have no row in the table as of that snapshot (None: empty), for a format
        whose metrics do not tell inserted from updated rows."""
