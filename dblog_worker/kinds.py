"""The database kinds dblog knows, registered in one place, and their configuration rules.

A kind is a package (``dblog_worker/pg``, ``dblog_worker/mysql``): its ``options`` module
holds ``RULES`` (what the configuration needs: names, DSNs, ``[source]`` options), its
``dialect`` module ``DIALECT`` (everything else, see :mod:`dblog_worker.dialect`). Adding a
database is its package and one line in ``REGISTRY``. This module imports no kind: the
configuration loads only the rules of the kinds it names.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any, Protocol, cast

from dblog_worker.errors import ConfigError

REGISTRY: Mapping[str, str] = {
    "postgresql": "dblog_worker.pg",
    "mysql": "dblog_worker.mysql",
}
DEFAULT = "postgresql"
LAKE_PACKAGE = "dblog_worker.lake"  # the lake targets' formats (config_lake.LAKE_KINDS)


class Rules(Protocol):
    """What the configuration asks a kind of database."""

    kind: str  # its name in configuration files, and REGISTRY's key
    aliases: tuple[str, ...]  # other names accepted for it ("mariadb")
    title: str  # for people: "PostgreSQL"
    table_form: str  # how a table is qualified: "schema.table"
    option_names: frozenset[str]  # the [source] options of this kind only
    checkpoint_form: str  # what its checkpoints look like: "a PostgreSQL LSN (like 0/16B3748)"
    checkpoint_hint: str  # where an operator finds the position to write back ("" if nowhere)
    jdbc_jar: str  # where Debian installs its JDBC driver, which Spark's merge loads ("": none)
    jdbc_package: str  # the Debian package of that jar
    replica_reads: bool  # whether dumps may read chunks on a read replica ([source.replica])

    def name_problem(self, name: str) -> str | None:
        """Why ``name`` cannot be a schema, table or column name; None if it can."""

    def connection_string(self, dsn: str, password: str | None) -> str:
        """The DSN with ``password`` set in it; ValueError saying what is wrong with it, in
        words that follow the option's name (``source.dsn`` + ``": a MySQL DSN is ..."``)."""

    def redact(self, dsn: str) -> str:
        """The DSN without its password: the only form that may be logged."""

    def source_options(self, section: Mapping[str, Any], source_name: str) -> object:
        """This kind's ``[source]`` options, checked (ConfigError), with their defaults."""

    def is_checkpoint(self, text: str) -> bool:
        """Whether ``text`` is a checkpoint as this kind's source saves it."""


def canonical(name: object) -> str:
    """The kind a configuration's ``kind = ...`` names; ConfigError listing the choices."""
    for kind in REGISTRY:
        found = rules(kind)
        if name == kind or name in found.aliases:
            return kind
    choices = [name for kind in REGISTRY for name in (kind, *rules(kind).aliases)]
    raise ConfigError(f"{name!r} is not supported; use one of "
                      + ", ".join(f'"{c}"' for c in choices))


def every_rules() -> list[Rules]:
    return [rules(kind) for kind in REGISTRY]


def rules(kind: str) -> Rules:
    return cast(Rules, load(kind, "options").RULES)


def load(kind: str, module: str) -> Any:
    package = REGISTRY.get(kind)
    if package is None:
        raise ConfigError(f"unknown database kind {kind!r}; known: {', '.join(REGISTRY)}")
    return importlib.import_module(f"{package}.{module}")


def lake(module: str) -> Any:
    """A module of the lake targets' package (``target``, ``runtime``, ``read``)."""
    return importlib.import_module(f"{LAKE_PACKAGE}.{module}")
