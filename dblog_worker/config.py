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
import ipaddress
import os
import re
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dblog_worker import kinds
from dblog_worker.checks import integer, number, str_value
from dblog_worker.errors import ConfigError, RequestRejected
from dblog_worker.landing.names import table_dir_name
from dblog_worker.landing.sink import DEFAULT_FORMAT, FORMATS

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
    return kinds.rules(kind).name_problem(name)


def check_table_name(table: str, kind: str, where: str, *, landed: bool = False) -> None:
    """``schema.table`` (``database.table``): split at the first dot, both parts names of a
    ``kind`` database (and, when the table is ``landed``, its landing directory's name
    within the filesystem's limit); ConfigError naming ``where`` otherwise."""
    form = kinds.rules(kind).table_form
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
    tables: tuple[str, ...]
    options: object  # the kind's own [source] options (kinds.Rules.source_options)

    def safe_dsn(self) -> str:
        """The DSN with any password removed: the only form that may be logged."""
        return kinds.rules(self.kind).redact(self.dsn)

    def check_captured(self, tables: Iterable[str]) -> None:
        """Refuse (:class:`RequestRejected`) a table this source does not capture."""
        for table in tables:
            if table not in self.tables:
                raise RequestRejected(f"table {table} is not captured by source {self.name}; "
                                      f"captured: {', '.join(self.tables)}")


@dataclass(frozen=True)
class TargetConfig:
    """The database ``dblog merge`` writes and ``dblog verify`` compares with."""

    kind: str  # a key of kinds.REGISTRY
    dsn: str = field(repr=False)
    state_schema: str = "dblog"  # merge log, tombstones and staging tables
    renames: Mapping[str, str] = field(default_factory=dict)  # source table -> target table

    def table(self, source_table: str) -> str:
        """The target table (``schema.table``) a source table is merged into."""
        return self.renames.get(source_table, source_table)

    def safe_dsn(self) -> str:
        return kinds.rules(self.kind).redact(self.dsn)


DEFAULT_JARS = ("/usr/share/java/postgresql.jar", "/usr/share/java/mariadb-java-client.jar")


@dataclass(frozen=True)
class MergeConfig:
    """How ``dblog merge`` runs the Spark job."""

    master: str = "local[*]"
    jars: tuple[str, ...] = DEFAULT_JARS
    batch_max_events: int = 5_000_000  # landed events per table and transaction
    tombstone_retention_h: float = 168.0
    spark_conf: Mapping[str, str] = field(default_factory=dict)


DEFAULT_LISTEN = "127.0.0.1:8750"
DEFAULT_TOKEN_ENV = "DBLOG_HTTP_TOKEN"  # noqa: S105 (a variable name, not a token)


@dataclass(frozen=True)
class HttpConfig:
    """The worker's HTTP control plane (``dblog_worker/http``)."""

    enabled: bool = True
    host: str = "127.0.0.1"
    port: int = 8750  # 0: any free port
    token: str | None = field(default=None, repr=False)  # the bearer token; None: no auth
    token_env: str = DEFAULT_TOKEN_ENV

    @property
    def listen(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


LOG_FORMATS = ("text", "json")
LOG_LEVELS = ("debug", "info", "warning", "error")


@dataclass(frozen=True)
class LogConfig:
    """How the worker logs: plain text, or one JSON object a line (``dblog_worker/logs.py``)."""

    format: str = "text"
    level: str = "info"


@dataclass(frozen=True)
class LeaseConfig:
    """The leader lease: a standby takes over at most ``ttl_s + standby_poll_s`` (plus
    its session's start) after the leader stopped renewing."""

    ttl_s: float = 5.0
    renew_interval_s: float = 1.0
    standby_poll_s: float = 0.5


@dataclass(frozen=True)
class Config:
    source: SourceConfig
    redis_url: str = field(repr=False)
    landing_path: Path
    landing_format: str = DEFAULT_FORMAT  # a key of landing.sink.FORMATS
    flush_interval_s: float = 1.0
    flush_max_events: int = 50_000
    heartbeat_interval_s: float = 10.0
    status_interval_s: float = 1.0
    control_interval_s: float = 0.2
    reconnect_max_s: float = 30.0
    shutdown_timeout_s: float = 30.0
    lease: LeaseConfig = field(default_factory=LeaseConfig)
    target: TargetConfig | None = None
    merge: MergeConfig = field(default_factory=MergeConfig)
    http: HttpConfig = field(default_factory=HttpConfig)
    logs: LogConfig = field(default_factory=LogConfig)

    def require_target(self) -> TargetConfig:
        if self.target is None:
            raise ConfigError(
                "this command needs a [target] section: the database to merge into "
                "(see docs/configuration.md#target-the-merged-tables)"
            )
        return self.target


def load(path: Path | str, environ: Mapping[str, str] | None = None) -> Config:
    env = os.environ if environ is None else environ
    try:
        data = tomllib.loads(Path(path).read_text())
    except FileNotFoundError:
        raise ConfigError(f"configuration file {path} does not exist") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"configuration file {path} is not valid TOML: {exc}") from None
    return parse(data, env)


KNOWN: Mapping[str, frozenset[str]] = {
    "source": frozenset({"name", "kind", "dsn", "dsn_env", "password_env", "tables"}),
    "redis": frozenset({"url", "url_env"}),
    "landing": frozenset({"path", "format", "flush_interval_s", "flush_max_events"}),
    "worker": frozenset({"heartbeat_interval_s", "status_interval_s", "control_interval_s",
                         "reconnect_max_s", "shutdown_timeout_s"}),
    "lease": frozenset({"ttl_s", "renew_interval_s", "standby_poll_s"}),
    "target": frozenset({"kind", "dsn", "dsn_env", "password_env", "state_schema", "tables"}),
    "merge": frozenset({"master", "jars", "batch_max_events", "tombstone_retention_h",
                        "spark_conf"}),
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
        raise ConfigError('source.tables must be a non-empty list like ["public.orders"]')
    for table in tables:
        check_table_name(table, kind, "source.tables", landed=True)
    redis_section = _table(data, "redis")
    landing = _table(data, "landing")
    worker = data.get("worker", {})
    if not isinstance(worker, dict):
        raise ConfigError("[worker] must be a table of options")
    return Config(
        source=SourceConfig(
            name=name,
            kind=kind,
            dsn=dsn,
            tables=tuple(dict.fromkeys(tables)),
            options=options,
        ),
        redis_url=_secret(redis_section, "url", env, "redis.url"),
        landing_path=Path(str_value(landing, "landing.path")),
        landing_format=_landing_format(landing),
        flush_interval_s=number(landing, "flush_interval_s", 1.0, 0.01, 60),
        flush_max_events=integer(landing, "flush_max_events", 50_000, 1, 10_000_000),
        heartbeat_interval_s=number(worker, "heartbeat_interval_s", 10.0, 0.1, 3600),
        status_interval_s=number(worker, "status_interval_s", 1.0, 0.1, 60),
        control_interval_s=number(worker, "control_interval_s", 0.2, 0.01, 10),
        reconnect_max_s=number(worker, "reconnect_max_s", 30.0, 0.1, 600),
        shutdown_timeout_s=number(worker, "shutdown_timeout_s", 30.0, 1, 3600),
        lease=_lease(data),
        target=_target(data, env, kind),
        merge=_merge(data),
        http=_http(data, env),
        logs=_logs(data),
    )


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
    password_env = section.get("password_env")
    password = None
    if password_env is not None:
        if password_env not in env:
            raise ConfigError(f"{name}.password_env names {password_env}, which is not set")
        password = env[password_env]
    try:
        return kinds.rules(kind).connection_string(dsn, password)
    except ValueError as exc:
        raise ConfigError(f"{name}.dsn{exc}") from None


def _target(data: Mapping[str, Any], env: Mapping[str, str],
            source_kind: str) -> TargetConfig | None:
    if "target" not in data:
        return None
    target = _table(data, "target")
    kind = _kind(target, "target.kind")
    renames = target.get("tables", {})
    if not isinstance(renames, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in renames.items()
    ):
        raise ConfigError('target.tables must map source tables to target tables, like '
                          '{ "public.orders" = "replica.orders" }')
    for source_table, target_table in renames.items():
        check_table_name(source_table, source_kind, "target.tables")
        check_table_name(target_table, kind, "target.tables")
    return TargetConfig(
        kind=kind,
        dsn=_database_dsn(target, kind, env, "target"),
        state_schema=_plain_name(target, "state_schema", "dblog"),
        renames=dict(renames),
    )


def _merge(data: Mapping[str, Any]) -> MergeConfig:
    merge = data.get("merge", {})
    if not isinstance(merge, dict):
        raise ConfigError("[merge] must be a table of options")
    master = merge.get("master", "local[*]")
    if not isinstance(master, str) or not master:
        raise ConfigError('merge.master must be a Spark master URL such as "local[*]" or "yarn"')
    jars = merge.get("jars", list(DEFAULT_JARS))
    if not isinstance(jars, list) or not all(isinstance(j, str) and j for j in jars):
        raise ConfigError("merge.jars must be a list of JDBC driver jar paths or URLs")
    spark_conf = merge.get("spark_conf", {})
    if not isinstance(spark_conf, dict) or not all(
        isinstance(k, str) and isinstance(v, (str, int, float)) and not isinstance(v, bool)
        for k, v in spark_conf.items()
    ):
        raise ConfigError('merge.spark_conf must map Spark options to values, like '
                          '{ "spark.driver.memory" = "4g" }')
    return MergeConfig(
        master=master,
        jars=tuple(jars),
        batch_max_events=integer(merge, "batch_max_events", 5_000_000, 1, 1_000_000_000),
        tombstone_retention_h=number(merge, "tombstone_retention_h", 168.0, 0, 87_600),
        spark_conf={k: str(v) for k, v in spark_conf.items()},
    )


def _landing_format(landing: Mapping[str, Any]) -> str:
    value = landing.get("format", DEFAULT_FORMAT)
    if value not in FORMATS:
        raise ConfigError(f"landing.format must be one of {', '.join(sorted(FORMATS))}, got "
                          f"{value!r}")
    return str(value)


def _lease(data: Mapping[str, Any]) -> LeaseConfig:
    section = data.get("lease", {})
    if not isinstance(section, dict):
        raise ConfigError("[lease] must be a table of options")
    ttl_s = number(section, "ttl_s", 5.0, 0.5, 600)
    renew_s = number(section, "renew_interval_s", min(1.0, ttl_s / 3), 0.05, 600)
    if renew_s > ttl_s / 2:
        raise ConfigError(
            f"lease.renew_interval_s ({renew_s}) must be at most half of lease.ttl_s "
            f"({ttl_s}): a leader renews at least twice per lease, or a standby takes over "
            "from a healthy leader"
        )
    return LeaseConfig(ttl_s=ttl_s, renew_interval_s=renew_s,
                       standby_poll_s=number(section, "standby_poll_s", 0.5, 0.05, 60))


def _logs(data: Mapping[str, Any]) -> LogConfig:
    section = data.get("logging", {})
    if not isinstance(section, dict):
        raise ConfigError("[logging] must be a table of options")
    choices = {"format": LOG_FORMATS, "level": LOG_LEVELS}
    values = {}
    for key, allowed in choices.items():
        value = section.get(key, allowed[0] if key == "format" else "info")
        if not isinstance(value, str) or value.lower() not in allowed:
            raise ConfigError(f"logging.{key} must be one of "
                              + ", ".join(f'"{a}"' for a in allowed) + f", got {value!r}")
        values[key] = value.lower()
    return LogConfig(format=values["format"], level=values["level"])


def _http(data: Mapping[str, Any], env: Mapping[str, str]) -> HttpConfig:
    section = data.get("http", {})
    if not isinstance(section, dict):
        raise ConfigError("[http] must be a table of options")
    enabled = section.get("enabled", True)
    if not isinstance(enabled, bool):
        raise ConfigError(f"http.enabled must be true or false, got {enabled!r}")
    listen = section.get("listen", DEFAULT_LISTEN)
    host, port = parse_listen(listen)
    token_env = section.get("token_env", DEFAULT_TOKEN_ENV)
    if not isinstance(token_env, str) or not token_env:
        raise ConfigError("http.token_env must name an environment variable, "
                          f'like "{DEFAULT_TOKEN_ENV}"')
    if not enabled:
        return HttpConfig(enabled=False, host=host, port=port, token_env=token_env)
    token = env.get(token_env)
    if token is not None:
        token = token.strip()
        if not re.fullmatch(r"[\x21-\x7e]{1,1024}", token):
            raise ConfigError(
                f"http.token_env names {token_env}, which is empty or holds spaces or "
                "characters other than printable ASCII: set a token (e.g. the output of "
                "`openssl rand -hex 32`) or unset it"
            )
    if token is None and "token_env" in section:
        raise ConfigError(f"http.token_env names {token_env}, which is not set")
    if token is None and not is_loopback(host):
        raise ConfigError(
            f"http.listen {listen!r} is not a loopback address, so the HTTP API needs a "
            f"token: set {token_env} (e.g. to the output of `openssl rand -hex 32`), or "
            'listen on "127.0.0.1:8750", or set http.enabled = false'
        )
    return HttpConfig(enabled=enabled, host=host, port=port, token=token, token_env=token_env)


def parse_listen(listen: object) -> tuple[str, int]:
    """``"host:port"`` (``"[::1]:port"`` for IPv6) to (host, port)."""
    form = 'http.listen must be "host:port", like "127.0.0.1:8750" or "[::1]:8750"'
    if not isinstance(listen, str):
        raise ConfigError(f"{form}, got {listen!r}")
    host, _, port_text = listen.rpartition(":")
    if not host or not re.fullmatch(r"[0-9]{1,5}", port_text) or int(port_text) > 65535:
        raise ConfigError(f"{form} with a port from 0 to 65535, got {listen!r}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise ConfigError(f"{form}; {host!r} is not an IPv6 address") from None
    elif not re.fullmatch(r"[A-Za-z0-9.-]+", host):
        raise ConfigError(f"{form} (an IPv6 address goes in brackets), got {listen!r}")
    return host, int(port_text)


def is_loopback(host: str) -> bool:
    """Whether only this machine can reach ``host`` (a name other than localhost is not)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


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
    env_name = section.get(f"{key}_env")
    if env_name is not None:
        if env_name not in env:
            raise ConfigError(f"{dotted}_env names {env_name}, which is not set")
        return env[env_name]
    return str_value(section, dotted)
