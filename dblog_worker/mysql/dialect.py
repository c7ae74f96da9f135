"""MySQL and MariaDB as a dblog dialect: its source, its positions (binlog file and offset)
and its words."""

from __future__ import annotations

from dblog_worker.config import SourceConfig, TargetConfig
from dblog_worker.mysql.options import MySqlRules
from dblog_worker.mysql.source import MySqlSource
from dblog_worker.mysql.target import MySQLTarget
from dblog_worker.position import Position
from dblog_worker.source import SchemaVersion, Source


class MySqlDialect(MySqlRules):
    def open_source(self, config: SourceConfig, schema_version: SchemaVersion) -> Source:
        return MySqlSource(config, schema_version)

    def with_connect_timeout(self, config: SourceConfig, seconds: float) -> SourceConfig:
        return config  # the source sets its own connect timeout

    def describe_position(self, position: Position) -> str:
        return f"{position.major:06d}:{position.minor}#{position.sub}"

    def capture_exists_problem(self, config: SourceConfig) -> str:
        return "the server keeps a log position for this source"

    def forgotten_checkpoint(self, config: SourceConfig) -> str:
        return (f"checkpoint of source {config.name} forgotten; the worker starts at the end "
                "of the binary log")

    def other_server_hint(self) -> str:
        return ("; if the source failed over to a replica, follow "
                "docs/runbooks/mysql-failover.md")

    def incomplete_rows_hint(self) -> str:
        return "the binary log's row image is not full; SET GLOBAL binlog_row_image = FULL"

    def open_target(self, config: TargetConfig) -> MySQLTarget:
        return MySQLTarget(config)


DIALECT = MySqlDialect()
