"""The database kinds dblog knows, registered in one place, and their configuration rules.

A kind is a package (``dblog_worker/pg``, ``dblog_worker/mysql``) and one :class:`Kind` in
``REGISTRY``: the one object generic code asks for any part of that database. Each seam
declares the part a kind provides for it as a typed :class:`Part` next to its protocol —
:data:`RULES` here (what the configuration needs: names, DSNs, ``[source]`` options),
``dialect.DIALECT`` (everything else), ``merge.column_types.TYPES``, ``verify.sql.SQL`` —
and ``Kind.part`` loads it from the kind's package when first asked. Parts are declared by
the seams rather than listed here because this module sits below them (the configuration
needs the rules); it imports no kind: the configuration loads only the rules of the kinds
it names. Adding a database is its package and one line in ``REGISTRY``.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar, cast

from dblog_worker.errors import ConfigError

T = TypeVar("T")


@dataclass(frozen=True)
class Part(Generic[T]):
    """What every kind's package provides for one seam: ``<package>.<module>.<name>``."""

    module: str
    name: str


@dataclass(frozen=True)
class Kind:
    """One database kind: its package, whose parts it gives, each loaded when first asked."""

    package: str  # "dblog_worker.pg"

    def part(self, part: Part[T]) -> T:
        module = importlib.import_module(f"{self.package}.{part.module}")
        return cast(T, getattr(module, part.name))

    @property
    def rules(self) -> Rules:
        return self.part(RULES)


REGISTRY: Mapping[str, Kind] = {
    "postgresql": Kind("dblog_worker.pg"),
    "mysql": Kind("dblog_worker.mysql"),
}
DEFAULT = "postgresql"
LAKE_PACKAGE = "dblog_worker.lake"  # the lake targets' formats (config_lake.LAKE_KINDS)
LAKE = Kind(LAKE_PACKAGE)  # its parts: the merge target, verify's dialect


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
    for known in REGISTRY:
        if name == known or name in rules(known).aliases:
            return known
    choices = [n for known in REGISTRY for n in (known, *rules(known).aliases)]
    raise ConfigError(f"{name!r} is not supported; use one of "
                      + ", ".join(f'"{c}"' for c in choices))


def every_rules() -> list[Rules]:
    return [found.rules for found in REGISTRY.values()]


RULES: Part[Rules] = Part("options", "RULES")


def kind(name: str) -> Kind:
    """The kind registered as ``name``; ConfigError naming the known ones."""
    found = REGISTRY.get(name)
    if found is None:
        raise ConfigError(f"unknown database kind {name!r}; known: {', '.join(REGISTRY)}")
    return found


def rules(name: str) -> Rules:
    return kind(name).rules


def lake(module: str) -> Any:
    """A module of the lake targets' package (``target``, ``runtime``, ``read``)."""
    return importlib.import_module(f"{LAKE_PACKAGE}.{module}")
