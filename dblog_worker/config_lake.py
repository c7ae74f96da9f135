"""The ``[target]`` options of a lake target (``kind = "iceberg"`` or ``"delta"``): where its
tables live, its catalog, and how a table is partitioned. A frozen value and its parser; the
formats themselves are :mod:`dblog_worker.lake` (docs/merge.md#lake-targets)::

    [target]
    kind = "iceberg"
    warehouse = "/srv/lake/warehouse"          # or s3a://bucket/warehouse, s3://...
    catalog = "jdbc"                           # "hadoop": the warehouse alone
    catalog_uri = "jdbc:postgresql://catalog:5432/lake"
    catalog_user = "lake"
    catalog_password_env = "LAKE_CATALOG_PASSWORD"
    partition_by = { "public.orders" = ["days:created_at", "bucket:16:id"] }

    [target.s3]                                # a warehouse on S3: its store, as [landing.s3]
    endpoint = "https://s3.internal:9000"
    path_style = true

A warehouse on S3 without ``[target.s3]`` shares the store options of an ``s3://`` landing
zone (the same store); with a local landing zone it is AWS's own S3, as each client finds it
by its own defaults (S3A's, the ``AWS_*`` variables of verify's readers).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from dblog_worker.config_sections import s3_options
from dblog_worker.errors import ConfigError
from dblog_worker.landing.s3_objects import S3Location

__all__ = ["LAKE_KINDS", "LAKE_OPTIONS", "LakeConfig", "Partition", "lake_section"]

LAKE_KINDS = ("iceberg", "delta")
CATALOGS = ("jdbc", "hadoop")
LAKE_OPTIONS = frozenset({"warehouse", "catalog", "catalog_uri", "catalog_user",
                          "catalog_password_env", "partition_by", "s3"})
S3_SCHEMES = ("s3://", "s3a://")  # a warehouse in an S3-compatible store
# Iceberg's partition transforms; a Delta table takes plain columns only.
TRANSFORMS = ("identity", "years", "months", "days", "hours", "bucket", "truncate")
_WITH_WIDTH = ("bucket", "truncate")
_PARTITION = re.compile(r"(?:(?P<transform>[a-z]+):(?:(?P<width>\d{1,6}):)?)?(?P<column>.+)",
                        re.DOTALL)


@dataclass(frozen=True, slots=True)
class Partition:
    """One partition field: a column, and an Iceberg transform of it (``identity``: the
    column itself)."""

    column: str
    transform: str = "identity"
    width: int = 0  # bucket count, truncate width

    def describe(self) -> str:
        width = f":{self.width}" if self.transform in _WITH_WIDTH else ""
        return self.column if self.transform == "identity" else \
            f"{self.transform}{width}:{self.column}"


@dataclass(frozen=True)
class LakeConfig:
    """Where a lake target's tables live and how they are found."""

    format: str  # "iceberg" or "delta"
    warehouse: str  # a local path or a Hadoop URI (file:, s3a:, hdfs:)
    catalog: str = "hadoop"  # Iceberg: "jdbc" or "hadoop"; Delta: tables by path
    catalog_uri: str = ""  # Iceberg JDBC catalog: jdbc:postgresql://host:port/database
    catalog_user: str = ""
    catalog_password: str = field(default="", repr=False)
    partition_by: Mapping[str, tuple[Partition, ...]] = field(default_factory=dict)
    # a warehouse on S3 whose store is configured ([target.s3], or the S3 landing zone's):
    # its bucket, prefix and store options
    s3: S3Location | None = None

    @property
    def on_s3(self) -> bool:
        """The warehouse is in an S3 store (configured or not)."""
        return self.warehouse.startswith(S3_SCHEMES)

    def describe(self) -> str:
        """The target as it may be logged (never a password)."""
        where = self.catalog_uri if self.catalog == "jdbc" else self.warehouse
        return f"{self.format} tables ({self.catalog} catalog {where})"


def _text(target: Mapping[str, Any], key: str, default: str | None = None) -> str:
    value = target.get(key, default)
    if not isinstance(value, str) or not value:
        raise ConfigError(f"target.{key} must be a non-empty string, got {value!r}")
    return value


def lake_section(kind: str, target: Mapping[str, Any], env: Mapping[str, str],
                 tables: frozenset[str], landing: S3Location | None = None) -> LakeConfig:
    """The lake options of a ``[target]`` of ``kind`` (``iceberg``, ``delta``);
    ``tables``: the source tables partition_by may name; ``landing``: the landing zone's
    place when it is on S3 (a warehouse on S3 shares its store by default)."""
    for option in ("dsn", "dsn_env", "password_env"):
        if option in target:
            raise ConfigError(f"target.{option} is an option of database targets; a {kind}"
                              " target names its warehouse (target.warehouse) and catalog")
    warehouse = _text(target, "warehouse")
    catalog = target.get("catalog", "hadoop")
    if kind == "delta":
        for option in ("catalog", "catalog_uri", "catalog_user", "catalog_password_env"):
            if option in target:
                raise ConfigError(f"target.{option}: a Delta target's tables are found by"
                                  " path under target.warehouse, without a catalog; remove it")
    elif catalog not in CATALOGS:
        raise ConfigError(f"target.catalog must be one of {', '.join(CATALOGS)}, got"
                          f" {catalog!r}")
    uri = user = password = ""
    if catalog == "jdbc" and kind == "iceberg":
        uri = _text(target, "catalog_uri")
        parts = urlsplit(uri.removeprefix("jdbc:"))
        if not uri.startswith("jdbc:") or not parts.hostname or not parts.path.strip("/"):
            raise ConfigError("target.catalog_uri must be a JDBC URL of the catalog's"
                              ' database, like "jdbc:postgresql://catalog:5432/lake"')
        if parts.password or "password" in parts.query.lower():
            raise ConfigError("target.catalog_uri must not hold a password: name the variable"
                              " that holds it in target.catalog_password_env")
        user = _text(target, "catalog_user")
        if "catalog_password_env" in target:
            name = target["catalog_password_env"]
            if not isinstance(name, str) or name not in env:
                raise ConfigError(f"target.catalog_password_env names {name!r}, which is not"
                                  " set")
            password = env[name]
    elif kind == "iceberg":
        for option in ("catalog_uri", "catalog_user", "catalog_password_env"):
            if option in target:
                raise ConfigError(f"target.{option} is an option of the jdbc catalog; set"
                                  ' target.catalog = "jdbc", or remove it')
    store = warehouse_store(warehouse, target.get("s3"), landing)
    if kind == "iceberg" and catalog == "hadoop" and warehouse.startswith(S3_SCHEMES):
        raise ConfigError('target.catalog = "hadoop" needs a warehouse that renames'
                          " atomically, which S3 does not: use the JDBC catalog"
                          ' (target.catalog = "jdbc") for a warehouse on S3')
    return LakeConfig(format=kind, warehouse=warehouse, catalog=str(catalog),
                      catalog_uri=uri, catalog_user=user, catalog_password=password,
                      partition_by=_partitions(kind, target.get("partition_by", {}), tables),
                      s3=store)


def warehouse_store(warehouse: str, section: object, landing: S3Location | None
                    ) -> S3Location | None:
    """Where a warehouse on S3 (``s3://`` or ``s3a://``) is and how its store is reached:
    ``[target.s3]``, else the store of an S3 landing zone; None for any other warehouse,
    and for one on S3 with neither (each client's defaults: AWS's S3)."""
    if section is not None and not isinstance(section, dict):
        raise ConfigError("[target.s3] must be a table of options")
    scheme = next((s for s in S3_SCHEMES if warehouse.startswith(s)), None)
    if scheme is None:
        if section is not None:
            raise ConfigError("[target.s3] applies to a warehouse on S3 only (target.warehouse"
                              f" = \"s3a://bucket/prefix\"), not to {warehouse!r}")
        return None
    if section is not None:
        options = s3_options(section, "target.s3")
    elif landing is not None:
        options = landing.store_options()
    else:
        options = {}
    try:
        found = S3Location.parse("s3://" + warehouse[len(scheme):], **options)
    except ValueError as exc:
        raise ConfigError(f"target.warehouse: {str(exc).replace('s3://', scheme, 1)}") from None
    if landing is not None and landing.bucket == found.bucket and \
            landing.store_options() != found.store_options():
        raise ConfigError(f"target.warehouse is in the landing zone's bucket {found.bucket!r},"
                          " but [target.s3] names another store: make them the same, or"
                          " remove [target.s3]")
    return found if options else None


def _partitions(kind: str, value: object, tables: frozenset[str]
                ) -> dict[str, tuple[Partition, ...]]:
    example = ('target.partition_by must map source tables to partition fields, like'
               ' { "public.orders" = ["days:created_at", "region"] }')
    if not isinstance(value, dict):
        raise ConfigError(example)
    found: dict[str, tuple[Partition, ...]] = {}
    for table, fields in value.items():
        if table not in tables:
            raise ConfigError(f"target.partition_by names {table!r}, which is not in"
                              " source.tables")
        if not isinstance(fields, list) or not fields or \
                not all(isinstance(f, str) and f for f in fields):
            raise ConfigError(f"target.partition_by of {table}: {example}")
        found[str(table)] = tuple(parse_partition(kind, table, f) for f in fields)
    return found


def parse_partition(kind: str, table: str, text: str) -> Partition:
    """``column``, ``transform:column`` or ``bucket:N:column`` / ``truncate:N:column``."""
    match = _PARTITION.fullmatch(text)
    transform = (match and match["transform"]) or "identity"
    if match is None or transform not in TRANSFORMS or (match["transform"] is None
                                                        and ":" in text):
        raise ConfigError(
            f"target.partition_by of {table}: {text!r} is not a partition field: a column,"
            f" or transform:column with a transform of {', '.join(TRANSFORMS[1:])}"
            " (bucket:N:column, truncate:N:column)")
    width = int(match["width"] or 0)
    if (transform in _WITH_WIDTH) != bool(width):
        raise ConfigError(f"target.partition_by of {table}: {text!r}: bucket and truncate"
                          " take a width (bucket:16:id), the other transforms none")
    if kind == "delta" and transform != "identity":
        raise ConfigError(f"target.partition_by of {table}: {text!r}: a Delta table is"
                          " partitioned by plain columns; transforms are Iceberg's")
    return Partition(column=match["column"], transform=transform, width=width)
