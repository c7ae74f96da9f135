"""The fake database as a dblog dialect: its source and its words."""

from __future__ import annotations

from dblog_worker.config import SourceConfig, TargetConfig
from dblog_worker.errors import ConfigError
from dblog_worker.merge.target import Target
from dblog_worker.position import Position
from dblog_worker.source import SchemaVersion, Source
from tests.fakedb.options import FakeRules
from tests.fakedb.source import FakeSource


class FakeDialect(FakeRules):
    def open_source(self, config: SourceConfig, schema_version: SchemaVersion) -> Source:
        return FakeSource(config, schema_version)

    def with_connect_timeout(self, config: SourceConfig, seconds: float) -> SourceConfig:
        return config  # connecting to the fake never waits

    def describe_position(self, position: Position) -> str:
        return f"{position.major}#{position.minor}"

    def capture_exists_problem(self, config: SourceConfig) -> str:
        return f"capture {config.name} exists in {config.dsn}"

    def forgotten_checkpoint(self, config: SourceConfig) -> str:
        return f"checkpoint of source {config.name} forgotten"

    def other_server_hint(self) -> str:
        return ""

    def incomplete_rows_hint(self) -> str:
        return "the fake's log carries whole rows"

    def open_target(self, config: TargetConfig) -> Target:
        raise ConfigError("the fake database kind has no merge target")


DIALECT = FakeDialect()
