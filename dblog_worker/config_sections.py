"""The configuration's operational sections: ``[merge]``, ``[http]``, ``[logging]``,
``[lease]`` and the landing zone's place and lifecycle (``[landing] path``, ``[landing.s3]``,
``[landing.compaction]``, ``[landing.retention]``), each a frozen value with its defaults
and its parser (a ``ConfigError`` that names the option and what it must be).
:mod:`dblog_worker.config` reads the file and the sections that name databases
(``[source]``, ``[target]``, ``[redis]``).
"""

from __future__ import annotations

import collections
import ipaddress
import itertools
import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dblog_worker import kinds
from dblog_worker.checks import integer, number, str_value
from dblog_worker.errors import ConfigError
from dblog_worker.landing.policy import MIB, CompactionPolicy, RetentionPolicy
from dblog_worker.landing.s3_objects import S3Location
from dblog_worker.landing.sink import LandingRoot

# Spark reads an s3:// landing zone through Hadoop's S3A connector: hadoop-aws of the
# Hadoop that PySpark ships (4.2.0: 3.5.0), the analytics stream it names, and the AWS SDK
# v2 modules it calls (hadoop-project 3.5.0's versions; scripts/s3a/pom.xml makes them one
# jar, relocated as the SDK's bundle is). scripts/install puts them in .tools/jars.
S3A_JARS = ("hadoop-aws-3.5.0.jar", "awssdk-s3a-2.35.4.jar", "analyticsaccelerator-s3-1.3.1.jar")
JARS_DIR_ENV = "DBLOG_JARS_DIR"


def jars_dir() -> Path:
    """Where scripts/install puts the S3A jars: ``$DBLOG_JARS_DIR``, else the checkout's
    ``.tools/jars``."""
    configured = os.environ.get(JARS_DIR_ENV)
    if configured:
        return Path(configured)
    return Path(__file__).resolve().parents[1] / ".tools" / "jars"


def default_s3a_jars() -> tuple[str, ...]:
    return tuple(str(jars_dir() / name) for name in S3A_JARS)


def default_jars() -> tuple[str, ...]:
    """Every kind's JDBC driver, where Debian installs it (a kind with no merge target has
    none: its ``jdbc_jar`` is empty)."""
    return tuple(rules.jdbc_jar for rules in kinds.every_rules() if rules.jdbc_jar)


@dataclass(frozen=True)
class MergeConfig:
    """How ``dblog merge`` runs the Spark job."""

    master: str = "local[*]"
    jars: tuple[str, ...] = field(default_factory=default_jars)
    batch_max_events: int = 5_000_000  # landed events per table and transaction
    tombstone_retention_h: float = 168.0
    parallel_tables: int = 4  # tables merged at once, each its own Spark jobs and connection
    spark_conf: Mapping[str, str] = field(default_factory=dict)
    s3a_jars: tuple[str, ...] = field(default_factory=default_s3a_jars)  # s3:// landing only


DEFAULT_LISTEN = "127.0.0.1:8750"
DEFAULT_TOKEN_ENV = "DBLOG_HTTP_TOKEN"  # noqa: S105 (a variable name, not a token)
MIN_TOKEN_BYTES = 16  # off loopback
MIN_TOKEN_BITS = 32  # by the characters' frequencies; random 16-hex-digit tokens have ~50
MIN_TOKEN_CHARACTERS = 5  # distinct characters
EXAMPLE_TOKENS = ("change-me-http-token",)  # .env.example's: refused in any spelling
MAKE_TOKEN = "python3 -c 'import secrets; print(secrets.token_urlsafe(32))'"  # noqa: S105


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


def merge_section(data: Mapping[str, Any]) -> MergeConfig:
    merge = data.get("merge", {})
    if not isinstance(merge, dict):
        raise ConfigError("[merge] must be a table of options")
    master = merge.get("master", "local[*]")
    if not isinstance(master, str) or not master:
        raise ConfigError('merge.master must be a Spark master URL such as "local[*]" or "yarn"')
    jars = merge.get("jars", list(default_jars()))
    if not isinstance(jars, list) or not all(isinstance(j, str) and j for j in jars):
        raise ConfigError("merge.jars must be a list of JDBC driver jar paths or URLs")
    s3a_jars = merge.get("s3a_jars", list(default_s3a_jars()))
    if not isinstance(s3a_jars, list) or not all(isinstance(j, str) and j for j in s3a_jars):
        raise ConfigError("merge.s3a_jars must be a list of jar paths or URLs (hadoop-aws and"
                          " the AWS SDK modules it calls)")
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
        parallel_tables=integer(merge, "parallel_tables", 4, 1, 64),
        spark_conf={k: str(v) for k, v in spark_conf.items()},
        s3a_jars=tuple(s3a_jars),
    )


_S3_OPTIONS = frozenset({"endpoint", "region", "path_style", "ca_bundle"})
_SECRETS = frozenset({"access_key", "access_key_id", "aws_access_key_id", "secret_key",
                      "secret_access_key", "aws_secret_access_key", "session_token",
                      "aws_session_token", "password"})


def landing_root(landing: Mapping[str, Any]) -> LandingRoot:
    """``[landing] path``: a folder, or ``s3://bucket/prefix`` with ``[landing.s3]``."""
    path = str_value(landing, "landing.path")
    s3 = landing.get("s3", {})
    if not isinstance(s3, dict):
        raise ConfigError("[landing.s3] must be a table of options")
    if not path.startswith("s3://"):
        if "://" in path:
            raise ConfigError(f"landing.path {path!r}: only local folders and s3://bucket/prefix"
                              " are supported")
        if s3:
            raise ConfigError("[landing.s3] applies to an s3:// landing.path only")
        return Path(path)
    try:
        return S3Location.parse(path, **s3_options(s3, "landing.s3"))
    except ValueError as exc:
        raise ConfigError(f"landing.path: {exc}") from None


def s3_options(s3: Mapping[str, Any], dotted: str) -> dict[str, Any]:
    """The store options of an S3 section (``[landing.s3]``, ``[target.s3]``), checked:
    ``endpoint``, ``region``, ``path_style``, ``ca_bundle`` for :class:`S3Location`; never
    a credential."""
    for option in s3:
        if option in _SECRETS:
            raise ConfigError(
                f"{dotted}.{option}: credentials are never read from the configuration file;"
                " set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE, or use the"
                " machine's role) in the environment of the worker, the merge and verify")
        if option not in _S3_OPTIONS:
            raise ConfigError(f"unknown option {dotted}.{option}; known: "
                              f"{', '.join(sorted(_S3_OPTIONS))}")
    endpoint = s3.get("endpoint", "")
    if not isinstance(endpoint, str) or (endpoint and not re.fullmatch(
            r"https?://[A-Za-z0-9.\-\[\]:]+(:[0-9]+)?/?", endpoint)):
        raise ConfigError(f"{dotted}.endpoint must be an http:// or https:// URL of the"
                          f" store (scheme, host, port), got {endpoint!r}")
    region = s3.get("region", "us-east-1")
    if not isinstance(region, str) or not re.fullmatch(r"[a-z0-9-]{1,40}", region):
        raise ConfigError(f"{dotted}.region must be a region name like us-east-1, got"
                          f" {region!r}")
    path_style = s3.get("path_style", False)
    if not isinstance(path_style, bool):
        raise ConfigError(f"{dotted}.path_style must be true or false")
    ca_bundle = s3.get("ca_bundle", "")
    if not isinstance(ca_bundle, str) or (ca_bundle and not Path(ca_bundle).is_file()):
        raise ConfigError(f"{dotted}.ca_bundle must be a PEM file of the CAs to trust; "
                          f"{ca_bundle!r} is not a file")
    return {"endpoint": endpoint.rstrip("/"), "region": region, "path_style": path_style,
            "ca_bundle": ca_bundle}


def compaction_section(landing: Mapping[str, Any]) -> CompactionPolicy:
    section = landing.get("compaction", {})
    if not isinstance(section, dict):
        raise ConfigError("[landing.compaction] must be a table of options")
    _known(section, "landing.compaction", {"target_mib", "min_age_s", "grace_s",
                                           "min_segments"})
    return CompactionPolicy(
        target_bytes=integer(section, "target_mib", 64, 1, 4096) * MIB,
        min_age_s=number(section, "min_age_s", 600.0, 0, 30 * 86400),
        grace_s=number(section, "grace_s", 900.0, 0, 30 * 86400),
        min_segments=integer(section, "min_segments", 2, 2, 1_000_000),
    )


def retention_section(landing: Mapping[str, Any]) -> RetentionPolicy:
    section = landing.get("retention", {})
    if not isinstance(section, dict):
        raise ConfigError("[landing.retention] must be a table of options")
    _known(section, "landing.retention", {"keep_h"})
    return RetentionPolicy(keep_s=number(section, "keep_h", 168.0, 0, 87_600) * 3600)


def _known(section: Mapping[str, Any], name: str, known: set[str]) -> None:
    for option in section:
        if option not in known:
            raise ConfigError(f"unknown option {name}.{option}; known: "
                              f"{', '.join(sorted(known))}")


def lease_section(data: Mapping[str, Any]) -> LeaseConfig:
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


def logs_section(data: Mapping[str, Any]) -> LogConfig:
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


def http_section(data: Mapping[str, Any], env: Mapping[str, str]) -> HttpConfig:
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
    if token is not None and not is_loopback(host):
        check_token_strength(token, token_env, listen)
    return HttpConfig(enabled=enabled, host=host, port=port, token=token, token_env=token_env)


def check_token_strength(token: str, token_env: str, listen: str) -> None:
    """Off loopback, whoever reaches the port can guess: no short token, no example's, no
    token with little randomness."""
    weak = token_weakness(token)
    if weak is None:
        return
    raise ConfigError(
        f"http.listen {listen!r} is not a loopback address and the token in {token_env} "
        f"{weak}: anyone who can reach the port could guess it. Set {token_env} to a random "
        f"token of at least {MIN_TOKEN_BYTES} bytes, e.g. the output of `{MAKE_TOKEN}`, "
        'or listen on "127.0.0.1:8750"'
    )


def token_weakness(token: str) -> str | None:
    """Why ``token`` is easy to guess, or None. The example's token in any letter case or
    spelling (``CHANGE_ME-http-token``) and placeholders (``changeme...``) are; so are a
    token shorter than :data:`MIN_TOKEN_BYTES`, one that repeats a short pattern
    (``aaaaaaaaaaaaaaaa``, ``abcabcabc...``), one of consecutive characters
    (``0123456789abcdef``) and one whose characters carry fewer than :data:`MIN_TOKEN_BITS`
    by their frequencies (16 random hexadecimal digits carry about 50)."""
    def plain(text: str) -> str:
        return re.sub(r"[^a-z0-9]", "", text.lower())

    if plain(token) in {plain(t) for t in EXAMPLE_TOKENS} or plain(token).startswith(
            "changeme"):
        return "is the example's token (.env.example) or a placeholder, which anyone can read"
    if len(token) < MIN_TOKEN_BYTES:
        return f"is {len(token)} bytes long, shorter than {MIN_TOKEN_BYTES}"
    period = next(p for p in range(1, len(token) + 1)
                  if all(token[i] == token[i % p] for i in range(len(token))))
    if period <= len(token) // 2:
        return f"repeats a pattern of {period} character(s)"
    if len({ord(b) - ord(a) for a, b in itertools.pairwise(token)}) == 1:
        return "is a run of consecutive characters"
    counts = collections.Counter(token)
    bits = -sum(n * math.log2(n / len(token)) for n in counts.values())
    if bits < MIN_TOKEN_BITS or len(counts) < MIN_TOKEN_CHARACTERS:
        return (f"has too little randomness ({len(counts)} distinct characters; a random "
                "token has many)")
    return None


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
