"""The worker's configuration: one TOML file, secrets from the environment.

::

    [source]
    name = "shop"                       # names the Redis prefix, landing folder, slot
    kind = "postgresql"
    dsn = "host=db port=5432 dbname=shop user=dblog"
    password_env = "SHOP_DB_PASSWORD"   # optional: the password, from the environment
    tables = ["public.orders", "public.customers"]

    [redis]
    url = "redis://127.0.0.1:6379/0"    # or url_env = "DBLOG_REDIS_URL"

    [landing]
    path = "/var/lib/dblog/landing"

Each kind of database (``dblog_worker.kinds``) checks its own DSN, names and options: a
MySQL or MariaDB source (``kind = "mysql"``; ``"mariadb"`` is the same) takes a URL,
``dsn = "mysql://dblog@db:3306"``, tables named ``database.table``, and ``server_id``, the
replica id it uses to read the binary log.

The optional ``[http]`` section is the worker's HTTP control plane (on by default,
on loopback)::

    [http]
    listen = "127.0.0.1:8750"           # "host:port"; port 0: any free port
    token_env = "DBLOG_HTTP_TOKEN"      # the bearer token; required off loopback

The optional ``[lease]`` section sets how fast a standby takes over when several
workers run for one source (see docs/high-availability.md)::

    [lease]
    ttl_s = 5.0                         # the leader's lease; a standby waits it out
    renew_interval_s = 1.0              # at most ttl_s / 2
    standby_poll_s = 0.5

The optional ``[target]`` and ``[merge]`` sections are read by ``dblog merge``
and ``dblog verify``: the database the landed events are merged into, and how::

    [target]
    kind = "postgresql"
    dsn = "host=warehouse dbname=replica user=merger"
    password_env = "TARGET_DB_PASSWORD"
    tables = { "public.orders" = "shop.orders" }   # renames; default: the same name

    [merge]
    master = "local[*]"

Every option with its default is in ``docs/configuration.md``.
"""

from __future__ import annotations

import difflib
import os
import re
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from dblog_worker import kinds
from dblog_worker.checks import integer, number, str_value
from dblog_worker.config_lake import LAKE_KINDS, LAKE_OPTIONS, LakeConfig, lake_section
from dblog_worker.config_sections import (
    HttpConfig,
    LeaseConfig,
    LogConfig,
    MergeConfig,
    compaction_section,
    http_section,
    landing_root,
    lease_section,
    logs_section,
    merge_section,
    retention_section,
)
from dblog_worker.errors import ConfigError, ConfigInvalid, RequestRejected
from dblog_worker.landing.names import table_dir_name
from dblog_worker.landing.policy import CompactionPolicy, RetentionPolicy
from dblog_worker.landing.s3_objects import S3Location
from dblog_worker.landing.sink import DEFAULT_FORMAT, FORMATS, LandingRoot
from dblog_worker.masking import ColumnRules, parse_rules
from dblog_worker.table_patterns import PatternError, TablePattern, TableSelector

NAME = re.compile(r"[a-z][a-z0-9_]{0,39}")





def name_problem(kind: str, name: str) -> str | None:
    """Why ``name`` cannot be a schema, table or column name of a ``kind`` database; None
    if it can. Any other character is fine: names are always quoted."""
    if not name:
        return "a name cannot be empty"
    if "\x00" in name:
        return "a name cannot contain NUL"
    try:
        name.encode()
    except UnicodeEncodeError:
        return "a name must be valid Unicode"
    if kind in LAKE_KINDS:  # Spark quotes any name; Delta tables map columns by name
        return None
    return kinds.rules(kind).name_problem(name)


def check_table_name(table: str, kind: str, where: str, *, landed: bool = False) -> None:
    """``schema.table`` (``database.table``): split at the first dot, both parts names of a
    ``kind`` database (and, when the table is ``landed``, its landing directory's name
    within the filesystem's limit); ConfigError naming ``where`` otherwise."""
    form = "schema.table" if kind in LAKE_KINDS else kinds.rules(kind).table_form
    schema_name, _, table_name = table.partition(".")
    if not schema_name or not table_name:
        raise ConfigError(f"{where}: {table!r} must be qualified: {form} (split at the first "
                          "dot: a table name may contain dots, a schema or database name may "
                          "not)")
    for part in (schema_name, table_name):
        problem = name_problem(kind, part)
        if problem is not None:
            raise ConfigError(f"{where}: {table!r}: {part!r}: {problem}")
    if landed:
        try:
            table_dir_name(schema_name, table_name)
        except ValueError as exc:
            raise ConfigError(f"{where}: {table!r}: {exc}") from None


@dataclass(frozen=True)
class SourceConfig:
    name: str
    kind: str  # a key of kinds.REGISTRY
    dsn: str = field(repr=False)
    tables: tuple[str, ...]  # as written: names and patterns (table_patterns.py)
    options: object  # the kind's own [source] options (kinds.Rules.source_options)
    replica: ReplicaConfig | None = None  # [source.replica]: where chunk SELECTs run
    exclude_tables: tuple[str, ...] = ()
    dump_new_tables: bool = False  # queue a table dump of each table that joins capture
    rescan_interval_s: float = 10.0  # how often the worker looks for tables to capture
    columns: ColumnRules = field(default_factory=ColumnRules)  # [source.columns]
    # [source] keys: the key columns of tables without a primary key, as their owners know
    keys: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def selector(self) -> TableSelector:
        """``tables`` and ``exclude_tables``, parsed (checked when the file was read)."""
        return _selector(self.kind, self.tables, self.exclude_tables)

    def key_of(self, table: str) -> tuple[str, ...] | None:
        """The key columns ``source.keys`` names for ``table``, if any."""
        return self.keys.get(table)

    def safe_dsn(self) -> str:
        """The DSN with any password removed: the only form that may be logged."""
        return kinds.rules(self.kind).redact(self.dsn)

    def check_table_names(self, tables: Iterable[str], where: str = "table") -> None:
        """Refuse (:class:`RequestRejected`) a name that is not ``schema.table``
        (``database.table``) of this source's kind, before anything looks it up."""
        for table in tables:
            try:
                check_table_name(table, self.kind, where)
            except ConfigError as exc:
                raise RequestRejected(str(exc)) from None

    def check_captured(self, tables: Iterable[str]) -> None:
        """Refuse (:class:`RequestRejected`) a table this source does not capture: one no
        entry of ``source.tables`` names or matches (the source itself refuses a table
        that does not exist, or that a pattern matches but leaves out)."""
        tables = list(tables)
        self.check_table_names(tables)
        selector = self.selector
        for table in tables:
            captured, why = selector.verdict(table)
            if not captured:
                raise RequestRejected(f"table {table} is not captured by source {self.name}: "
                                      f"it {why}; source.tables: {', '.join(self.tables)}")


def _selector(kind: str, tables: Sequence[str], exclude: Sequence[str]) -> TableSelector:
    return _SELECTORS.get((kind, tuple(tables), tuple(exclude))) or _new_selector(
        kind, tables, exclude)


_SELECTORS: dict[tuple[str, tuple[str, ...], tuple[str, ...]], TableSelector] = {}


def _new_selector(kind: str, tables: Sequence[str], exclude: Sequence[str]) -> TableSelector:
    def landing_problem(table: str) -> str | None:
        schema, _, name = table.partition(".")
        try:
            table_dir_name(schema, name)
        except ValueError as exc:
            return str(exc)
        return None

    selector = TableSelector(tables, exclude, kinds.rules(kind).table_form, landing_problem)
    _SELECTORS[(kind, tuple(tables), tuple(exclude))] = selector
    return selector


@dataclass(frozen=True)
class ReplicaConfig:
    """A read replica of the source (``[source.replica]``): the dumps' chunk SELECTs run
    there, once it has replayed each window's low watermark; the log, the watermarks and
    the catalog stay on the primary."""

    dsn: str = field(repr=False)
    max_wait_ms: int = 1000  # how long a window waits for the replay of its low watermark

    def safe_dsn(self, kind: str) -> str:
        return kinds.rules(kind).redact(self.dsn)


@dataclass(frozen=True)
class TargetConfig:
    """The database ``dblog merge`` writes and ``dblog verify`` compares with."""

    kind: str  # a key of kinds.REGISTRY, or a lake format (lake_config.LAKE_KINDS)
    dsn: str = field(repr=False)  # "" for a lake target
    state_schema: str = "dblog"  # merge log, tombstones and staging tables
    renames: Mapping[str, str] = field(default_factory=dict)  # source table -> target table
    lake: LakeConfig | None = None  # an Iceberg or Delta target's warehouse and catalog

    @property
    def is_lake(self) -> bool:
        return self.lake is not None

    def table(self, source_table: str) -> str:
        """The target table (``schema.table``) a source table is merged into."""
        return self.renames.get(source_table, source_table)

    def safe_dsn(self) -> str:
        if self.lake is not None:
            return self.lake.describe()
        return kinds.rules(self.kind).redact(self.dsn)


DEFAULT_ACTIVE_DUMPS = 4
MAX_ACTIVE_DUMPS = 64


@dataclass(frozen=True)
class Config:
    source: SourceConfig
    redis_url: str = field(repr=False)
    landing_path: LandingRoot  # a folder, or an S3Location
    landing_format: str = DEFAULT_FORMAT  # a key of landing.sink.FORMATS
    compaction: CompactionPolicy = field(default_factory=CompactionPolicy)
    retention: RetentionPolicy = field(default_factory=RetentionPolicy)
    flush_interval_s: float = 1.0
    flush_max_events: int = 50_000
    heartbeat_interval_s: float = 10.0
    status_interval_s: float = 1.0
    control_interval_s: float = 0.2
    reconnect_max_s: float = 30.0
    shutdown_timeout_s: float = 30.0
    max_active_dumps: int = DEFAULT_ACTIVE_DUMPS  # dump requests running at once
    lease: LeaseConfig = field(default_factory=LeaseConfig)
    target: TargetConfig | None = None
    merge: MergeConfig = field(default_factory=MergeConfig)
    http: HttpConfig = field(default_factory=HttpConfig)
    logs: LogConfig = field(default_factory=LogConfig)

    def require_target(self) -> TargetConfig:
        if self.target is None:
            raise ConfigInvalid(
                "this command needs a [target] section: the database to merge into "
                "(see docs/configuration.md#target-the-merged-tables)"
            )
        return self.target


def load(path: Path | str, environ: Mapping[str, str] | None = None) -> Config:
    """The configuration in file ``path``; :class:`ConfigInvalid` saying what is wrong."""
    env = os.environ if environ is None else environ
    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigInvalid(f"configuration file {path} does not exist") from None
    except IsADirectoryError:
        raise ConfigInvalid(f"configuration file {path} is a directory") from None
    except OSError as exc:
        raise ConfigInvalid(f"cannot read configuration file {path}: "
                            f"{exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise ConfigInvalid(f"configuration file {path} is not UTF-8 text") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigInvalid(f"configuration file {path} is not valid TOML: {exc}") from None
    try:
        return parse(data, env)
    except ConfigError as exc:
        raise ConfigInvalid(str(exc)) from None


KNOWN: Mapping[str, frozenset[str]] = {
    "source": frozenset({"name", "kind", "dsn", "dsn_env", "password_env", "tables",
                         "exclude_tables", "dump_new_tables", "rescan_interval_s", "columns",
                         "replica", "keys"}),
    "redis": frozenset({"url", "url_env"}),
    "landing": frozenset({"path", "format", "flush_interval_s", "flush_max_events", "s3",
                          "compaction", "retention"}),
    "worker": frozenset({"heartbeat_interval_s", "status_interval_s", "control_interval_s",
                         "reconnect_max_s", "shutdown_timeout_s", "max_active_dumps"}),
    "lease": frozenset({"ttl_s", "renew_interval_s", "standby_poll_s"}),
    "target": frozenset({"kind", "dsn", "dsn_env", "password_env", "state_schema", "tables"})
    | LAKE_OPTIONS,
    "merge": frozenset({"master", "jars", "batch_max_events", "tombstone_retention_h",
                        "parallel_tables", "spark_conf", "s3a_jars"}),
    "http": frozenset({"listen", "enabled", "token_env"}),
    "logging": frozenset({"format", "level"}),
}


def _check_names(data: Mapping[str, Any]) -> None:
    """A misspelt option must not be silently ignored."""
    for name in data:
        if name not in KNOWN:
            raise ConfigError(f"unknown section [{name}]{_did_you_mean(name, KNOWN)}")
    source_options = frozenset().union(*(kinds.rules(k).option_names for k in kinds.REGISTRY))
    for section, known in {**KNOWN, "source": KNOWN["source"] | source_options}.items():
        options = data.get(section)
        if isinstance(options, dict):
            for option in options:
                if option not in known:
                    raise ConfigError(
                        f"unknown option {section}.{option}{_did_you_mean(option, known)}"
                    )


def _keys(source: Mapping[str, Any], selector: TableSelector) -> dict[str, tuple[str, ...]]:
    """``source.keys``: captured table -> its key columns, for tables without a primary
    key (``keys = { "public.events" = ["tenant", "id"] }``); a table named or matched by a
    pattern of ``source.tables``."""
    keys = source.get("keys", {})
    example = 'source.keys must be a table like { "public.events" = ["tenant", "id"] }'
    if not isinstance(keys, dict):
        raise ConfigError(example)
    found: dict[str, tuple[str, ...]] = {}
    for table, columns in keys.items():
        if not selector.captures(table):
            raise ConfigError(f"source.keys names {table!r}, which source.tables does not "
                              f"capture ({selector.verdict(table)[1]})")
        if (not isinstance(columns, list) or not columns
                or not all(isinstance(c, str) and c for c in columns)):
            raise ConfigError(f"source.keys of {table} must be a non-empty list of column "
                              f'names; {example}')
        if len(set(columns)) != len(columns):
            raise ConfigError(f"source.keys of {table} names a column twice")
        found[str(table)] = tuple(columns)
    return found


def _did_you_mean(name: str, known: Iterable[str]) -> str:
    close = difflib.get_close_matches(name, sorted(known), n=1)
    return f"; did you mean {close[0]}?" if close else f"; known: {', '.join(sorted(known))}"


def parse(data: Mapping[str, Any], env: Mapping[str, str]) -> Config:
    _check_names(data)
    source = _table(data, "source")
    name = str_value(source, "source.name")
    if not NAME.fullmatch(name):
        raise ConfigError(
            f"source.name {name!r} must be 1-40 characters of a-z, 0-9 and _, starting "
            "with a letter (it names the Redis keys, the landing folder and what the source "
            "keeps for capture, such as a replication slot)"
        )
    kind = _kind(source, "source.kind")
    _check_foreign_options(source, kind)
    options = kinds.rules(kind).source_options(source, name)
    dsn = _database_dsn(source, kind, env, "source")
    tables = source.get("tables")
    if not isinstance(tables, list) or not tables or not all(isinstance(t, str) for t in tables):
        raise ConfigError('source.tables must be a non-empty list like ["public.orders"] or '
                          '["shop.*"]')
    exclude = source.get("exclude_tables", [])
    if not isinstance(exclude, list) or not all(isinstance(t, str) for t in exclude):
        raise ConfigError('source.exclude_tables must be a list like ["shop.tmp_*"]')
    form = kinds.rules(kind).table_form
    for where, entries in (("source.tables", tables), ("source.exclude_tables", exclude)):
        for entry in entries:
            try:
                TablePattern.parse(entry, form)
            except PatternError as exc:
                raise ConfigError(f"{where}: {exc}") from None
    try:
        selector = _selector(kind, tables, exclude)
    except PatternError as exc:
        raise ConfigError(f"source.tables: {exc}") from None
    for table in selector.names:
        check_table_name(table, kind, "source.tables", landed=True)
    dump_new_tables = source.get("dump_new_tables", False)
    if not isinstance(dump_new_tables, bool):
        raise ConfigError("source.dump_new_tables must be true or false")
    try:
        columns = parse_rules(source.get("columns"), env, form)
    except ValueError as exc:
        raise ConfigError(f"source.columns{exc}") from None
    redis_section = _table(data, "redis")
    landing = _table(data, "landing")
    worker = data.get("worker", {})
    if not isinstance(worker, dict):
        raise ConfigError("[worker] must be a table of options")
    landing_path = landing_root(landing)
    return Config(
        source=SourceConfig(
            name=name,
            kind=kind,
            dsn=dsn,
            tables=tuple(dict.fromkeys(tables)),
            options=options,
            replica=_replica(source, kind, env),
            exclude_tables=tuple(dict.fromkeys(exclude)),
            dump_new_tables=dump_new_tables,
            rescan_interval_s=number(source, "rescan_interval_s", 10.0, 0.2, 3600),
            columns=columns,
            keys=_keys(source, selector),
        ),
        redis_url=_redis_url(redis_section, env),
        landing_path=landing_path,
        landing_format=_landing_format(landing),
        compaction=compaction_section(landing),
        retention=retention_section(landing),
        flush_interval_s=number(landing, "flush_interval_s", 1.0, 0.01, 60),
        flush_max_events=integer(landing, "flush_max_events", 50_000, 1, 10_000_000),
        heartbeat_interval_s=number(worker, "heartbeat_interval_s", 10.0, 0.1, 3600),
        status_interval_s=number(worker, "status_interval_s", 1.0, 0.1, 60),
        control_interval_s=number(worker, "control_interval_s", 0.2, 0.01, 10),
        reconnect_max_s=number(worker, "reconnect_max_s", 30.0, 0.1, 600),
        shutdown_timeout_s=number(worker, "shutdown_timeout_s", 30.0, 1, 3600),
        max_active_dumps=integer(worker, "max_active_dumps", DEFAULT_ACTIVE_DUMPS, 1,
                                 MAX_ACTIVE_DUMPS),
        lease=lease_section(data),
        target=_target(data, env, kind, tables,
                       landing_path if isinstance(landing_path, S3Location) else None),
        merge=merge_section(data),
        http=http_section(data, env),
        logs=logs_section(data),
    )


REPLICA_OPTIONS = frozenset({"dsn", "dsn_env", "password_env", "max_wait_ms"})


def _replica(source: Mapping[str, Any], kind: str,
             env: Mapping[str, str]) -> ReplicaConfig | None:
    if "replica" not in source:
        return None
    replica = source["replica"]
    if not isinstance(replica, dict):
        raise ConfigError("source.replica must be a table: [source.replica] with a dsn")
    for option in replica:
        if option not in REPLICA_OPTIONS:
            raise ConfigError(f"unknown option source.replica.{option}"
                              f"{_did_you_mean(option, REPLICA_OPTIONS)}")
    if not kinds.rules(kind).replica_reads:
        raise ConfigError(
            f"source.replica: chunk reads on a read replica are not supported for {kind} "
            "sources yet; remove [source.replica]")
    try:
        max_wait_ms = integer(replica, "max_wait_ms", 1000, 1, 60_000)
    except ConfigError as exc:
        raise ConfigError(f"source.replica.{exc}") from None
    return ReplicaConfig(dsn=_database_dsn(replica, kind, env, "source.replica"),
                         max_wait_ms=max_wait_ms)


def _check_foreign_options(source: Mapping[str, Any], kind: str) -> None:
    own = kinds.rules(kind).option_names
    for other in kinds.REGISTRY:
        rules = kinds.rules(other)
        for option in sorted((rules.option_names - own) & source.keys()):
            raise ConfigError(f"source.{option} is an option of {rules.title} sources; this "
                              f"source is {kind}: remove it, or set source.kind")


def _kind(section: Mapping[str, Any], dotted: str) -> str:
    try:
        return kinds.canonical(section.get("kind", kinds.DEFAULT))
    except ConfigError as exc:
        raise ConfigError(f"{dotted} {exc}") from None


def _database_dsn(section: Mapping[str, Any], kind: str, env: Mapping[str, str],
                  name: str) -> str:
    dsn = _secret(section, "dsn", env, f"{name}.dsn")
    password = None
    if "password_env" in section:
        password = env[_env_name(section, "password_env", env, f"{name}.password_env")]
    try:
        return kinds.rules(kind).connection_string(dsn, password)
    except ValueError as exc:
        raise ConfigError(f"{_secret_label(section, 'dsn', name)}{exc} ({name}.kind is "
                          f'"{kind}")') from None


REDIS_SCHEMES = ("redis", "rediss", "unix")


def _redis_url(section: Mapping[str, Any], env: Mapping[str, str]) -> str:
    """``redis.url`` (or ``url_env``), checked here so that a bad one is a ConfigError
    that never quotes it: it may hold a password."""
    url = _secret(section, "url", env, "redis.url")
    label = _secret_label(section, "url", "redis")
    form = 'like "redis://[:password@]host:6379/0", "rediss://..." or "unix:///path/redis.sock"'
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise ConfigError(f"{label} is not a valid URL (a port from 0 to 65535?): "
                          f"{form}") from None
    if parts.scheme not in REDIS_SCHEMES:
        raise ConfigError(f"{label} must be a Redis URL {form}; its scheme is not one of "
                          + ", ".join(f"{s}://" for s in REDIS_SCHEMES))
    if parts.scheme == "unix" and not parts.path:
        raise ConfigError(f"{label}: a unix:// URL needs the socket's path: {form}")
    if port == 0 or (parts.scheme != "unix" and not re.fullmatch(r"/?|/[0-9]{1,5}", parts.path)):
        raise ConfigError(f"{label}: the port is a number from 1 to 65535 and the path the "
                          f"database number (0, 1, ...): {form}")
    problem = _redis_options_problem(url)
    if problem is not None:
        raise ConfigError(f"{label}: {problem}")
    return url


def _redis_options_problem(url: str) -> str | None:
    """What redis-py refuses in the URL's query (``?socket_timeout=...``), naming the
    parameter, never its value; None if it takes them. Nothing is contacted."""
    import redis

    try:
        redis.ConnectionPool.from_url(url).make_connection()
    except TypeError as exc:
        unknown = re.search(r"unexpected keyword argument '(\w+)'", str(exc))
        name = f" {unknown[1]}" if unknown else ""
        return (f"redis-py does not know the query parameter{name} (an ssl_ parameter needs "
                "rediss://); see redis-py's from_url")
    except (ValueError, redis.RedisError) as exc:
        if "Certificate Requirements" in str(exc):
            return "ssl_cert_reqs must be none, optional or required"
        return str(exc).partition(":")[0].rstrip(".")  # what follows may be the value
    return None


def _secret_label(section: Mapping[str, Any], key: str, name: str) -> str:
    """How an error names a secret option: ``source.dsn``, or ``source.dsn_env: SHOP_DSN``
    when the value came from the environment."""
    env_name = section.get(f"{key}_env")
    return f"{name}.{key}" if env_name is None else f"{name}.{key}_env: {env_name}"


def _target(data: Mapping[str, Any], env: Mapping[str, str], source_kind: str,
            source_tables: object = (), landing: S3Location | None = None
            ) -> TargetConfig | None:
    if "target" not in data:
        return None
    target = _table(data, "target")
    lake_kind = target.get("kind")
    kind = lake_kind if lake_kind in LAKE_KINDS else _kind(target, "target.kind")
    if kind not in LAKE_KINDS:
        for option in sorted(LAKE_OPTIONS & target.keys()):
            raise ConfigError(f"target.{option} is an option of lake targets (kind = "
                              f'"iceberg" or "delta"); this target is {kind}: remove it')
    renames = target.get("tables", {})
    if not isinstance(renames, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in renames.items()
    ):
        raise ConfigError('target.tables must map source tables to target tables, like '
                          '{ "public.orders" = "replica.orders" }')
    for source_table, target_table in renames.items():
        check_table_name(source_table, source_kind, "target.tables")
        check_table_name(target_table, kind, "target.tables")
    if kind in LAKE_KINDS:
        sources = source_tables if isinstance(source_tables, list) else []
        return TargetConfig(
            kind=kind, dsn="", state_schema=_plain_name(target, "state_schema", "dblog"),
            renames=dict(renames),
            lake=lake_section(kind, target, env, frozenset(str(t) for t in sources), landing))
    return TargetConfig(
        kind=kind,
        dsn=_database_dsn(target, kind, env, "target"),
        state_schema=_plain_name(target, "state_schema", "dblog"),
        renames=dict(renames),
    )


def _landing_format(landing: Mapping[str, Any]) -> str:
    value = landing.get("format", DEFAULT_FORMAT)
    if not isinstance(value, str) or value not in FORMATS:
        raise ConfigError(f"landing.format must be one of {', '.join(sorted(FORMATS))}, got "
                          f"{value!r}")
    return str(value)


def _plain_name(section: Mapping[str, Any], key: str, default: str) -> str:
    value = section.get(key, default)
    if not isinstance(value, str) or not re.fullmatch(r"[a-z_][a-z0-9_]{0,62}", value):
        raise ConfigError(f"target.{key} {value!r} must be 1-63 characters of a-z, 0-9 and _")
    return value


def _table(data: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    section = data.get(name)
    if not isinstance(section, dict):
        raise ConfigError(f"the configuration needs a [{name}] section")
    return section


def _secret(section: Mapping[str, Any], key: str, env: Mapping[str, str], dotted: str) -> str:
    """``key`` in the file, or ``key_env`` naming an environment variable that holds it."""
    if f"{key}_env" in section:
        return env[_env_name(section, f"{key}_env", env, f"{dotted}_env")]
    return str_value(section, dotted)


def _env_name(section: Mapping[str, Any], key: str, env: Mapping[str, str],
              dotted: str) -> str:
    """The environment variable ``key`` names: set, or ConfigError."""
    name = section[key]
    if not isinstance(name, str) or not name:
        raise ConfigError(f"{dotted} must name an environment variable, like "
                          f'"SHOP_DB_PASSWORD", got {name!r}')
    if name not in env:
        raise ConfigError(f"{dotted} names {name}, which is not set")
    return name
