"""A database kind as one object: everything generic code asks PostgreSQL or MySQL/MariaDB.

The worker, telemetry, the CLI, control, verify, the merge targets and the Airflow provider
ask ``dialect(kind)`` and never branch on the kind; each kind's package
(:data:`dblog_worker.kinds.REGISTRY`) holds its ``DIALECT`` in its ``dialect`` module.
"""

from __future__ import annotations

from typing import Protocol

from dblog_worker.config import SourceConfig, TargetConfig
from dblog_worker.kinds import Part, Rules, kind
from dblog_worker.merge.target import Target
from dblog_worker.position import Position
from dblog_worker.source import SchemaVersion, Source


class Dialect(Rules, Protocol):
    def open_source(self, config: SourceConfig, schema_version: SchemaVersion) -> Source:
        """The source of ``config`` (not connected yet)."""

    def with_connect_timeout(self, config: SourceConfig, seconds: float) -> SourceConfig:
        """``config`` whose connections give up after ``seconds`` (unless it sets its own)."""

    def describe_position(self, position: Position) -> str:
        """A log position as the database's own tools show it (``0/16B3748``)."""

    def capture_exists_problem(self, config: SourceConfig) -> str:
        """What the database keeps for capture, when Redis lost the checkpoint: the start of
        the message that refuses to start over (``replication slot dblog_shop exists``)."""

    def forgotten_checkpoint(self, config: SourceConfig) -> str:
        """What `dblog reset` tells the operator after forgetting the checkpoint."""

    def other_server_hint(self) -> str:
        """Added when the landing zone was filled from another server's log ("" for none)."""

    def incomplete_rows_hint(self) -> str:
        """Why a change can come without its whole row, and the fix."""

    def open_target(self, config: TargetConfig) -> Target:
        """The merge target of ``config`` (not connected yet)."""


DIALECT: Part[Dialect] = Part("dialect", "DIALECT")


def dialect(name: str) -> Dialect:
    return kind(name).part(DIALECT)


def open_source(config: SourceConfig, schema_version: SchemaVersion) -> Source:
    """The source of ``config``'s kind (not connected yet)."""
    return dialect(config.kind).open_source(config, schema_version)
