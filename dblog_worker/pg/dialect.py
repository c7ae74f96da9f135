"""PostgreSQL as a dblog dialect: its source, its positions (LSNs) and its words."""

from __future__ import annotations

import dataclasses

from psycopg.conninfo import conninfo_to_dict, make_conninfo

from dblog_worker.config import SourceConfig, TargetConfig
from dblog_worker.pg.options import PgRules, pg_options
from dblog_worker.pg.source import PgSource
from dblog_worker.pg.target import PostgresTarget
from dblog_worker.position import Position
from dblog_worker.source import SchemaVersion, Source


class PgDialect(PgRules):
    def open_source(self, config: SourceConfig, schema_version: SchemaVersion) -> Source:
        return PgSource(config, schema_version)

    def with_connect_timeout(self, config: SourceConfig, seconds: float) -> SourceConfig:
        if "connect_timeout" in conninfo_to_dict(config.dsn):
            return config
        return dataclasses.replace(config, dsn=make_conninfo(config.dsn,
                                                             connect_timeout=round(seconds)))

    def describe_position(self, position: Position) -> str:
        lsn = f"{position.major >> 32:X}/{position.major & 0xFFFFFFFF:X}"
        return f"{lsn}#{position.minor}" if position.minor or position.sub else lsn

    def capture_exists_problem(self, config: SourceConfig) -> str:
        return f"replication slot {pg_options(config).slot} exists"

    def forgotten_checkpoint(self, config: SourceConfig) -> str:
        return (f"checkpoint of source {config.name} forgotten; drop the slot with "
                f"SELECT pg_drop_replication_slot('{pg_options(config).slot}'); if it still "
                "exists")

    def other_server_hint(self) -> str:
        return ""

    def incomplete_rows_hint(self) -> str:
        return ("the table's REPLICA IDENTITY is not FULL; run ALTER TABLE ... REPLICA "
                "IDENTITY FULL")

    def open_target(self, config: TargetConfig) -> PostgresTarget:
        return PostgresTarget(config)


DIALECT = PgDialect()
