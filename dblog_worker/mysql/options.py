"""What the configuration asks of a MySQL or MariaDB server: names, ``mysql://`` URLs and the
replica id of the binary log connection."""

from __future__ import annotations

import json
import re
import zlib
from collections.abc import Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import parse_qsl, quote, unquote, urlsplit

from dblog_worker.checks import integer
from dblog_worker.config import SourceConfig
from dblog_worker.errors import ConfigError
from dblog_worker.mysql.tls import MyTls, UnknownParameter, parse_tls, tls_errors

MYSQL = "mysql"
_BINLOG_FILE = re.compile(r".+\.[0-9]+")
NAME_CHARACTERS = 64
WATERMARK_MODES = ("table", "position")
_FORM = "mysql://user@host:3306"
_HOST = re.compile(r"[A-Za-z0-9._-]+|[0-9A-Fa-f:.]+")  # a name, IPv4, IPv6


@dataclass(frozen=True)
class MySqlOptions:
    server_id: int  # the replica id of the binary log connection
    # "table": upserts of dblog.watermark; "position": each chunk read in a consistent
    # snapshot whose binary log position is the watermark (MariaDB), no table
    watermarks: str = "table"

    @property
    def watermark_table(self) -> bool:
        return self.watermarks == "table"


class MySqlRules:
    kind = MYSQL
    aliases = ("mariadb",)
    title = "MySQL/MariaDB"
    table_form = "database.table"
    option_names = frozenset({"server_id", "watermarks"})
    checkpoint_form = ('a binlog checkpoint (like {"file": "mariadb-bin.000042", "pos": 4, '
                       '"gtid": ""})')
    checkpoint_hint = ""
    jdbc_jar = "/usr/share/java/mariadb-java-client.jar"
    jdbc_package = "libmariadb-java"
    replica_reads = True

    def is_checkpoint(self, text: str) -> bool:
        try:
            data = json.loads(text)
        except (ValueError, RecursionError):
            return False
        return (isinstance(data, dict) and isinstance(data.get("file"), str)
                and _BINLOG_FILE.fullmatch(data["file"]) is not None
                and type(data.get("pos")) is int and 0 <= data["pos"] < 2**64
                and isinstance(data.get("gtid", ""), str))

    def name_problem(self, name: str) -> str | None:
        if len(name) > NAME_CHARACTERS:
            return (f"MySQL/MariaDB names are at most {NAME_CHARACTERS} characters; "
                    f"this one has {len(name)}")
        if name[-1] in " \t\n\v\f\r":
            return "MySQL/MariaDB names cannot end with a space (or other white space)"
        if any(ord(c) > 0xFFFF for c in name):
            return ("MySQL/MariaDB names hold only characters of the Basic Multilingual Plane "
                    "(no emoji)")
        return None

    def connection_string(self, dsn: str, password: str | None) -> str:
        try:
            parsed = parse_dsn(dsn)
        except ValueError as exc:
            raise ValueError(f": {exc}") from None
        if password is not None:
            parsed = replace(parsed, password=password)
        return parsed.url()

    def redact(self, dsn: str) -> str:
        try:
            return parse_dsn(dsn).url(password=False)
        except ValueError:
            return "<unparseable dsn>"

    def source_options(self, section: Mapping[str, Any], source_name: str) -> MySqlOptions:
        watermarks = section.get("watermarks", "table")
        if watermarks not in WATERMARK_MODES:
            raise ConfigError(f"source.watermarks must be one of {', '.join(WATERMARK_MODES)} "
                              f"(a watermark table, or the binary log positions of consistent "
                              f"snapshots), got {watermarks!r}")
        if watermarks == "position" and "replica" in section:
            raise ConfigError(
                'source.watermarks = "position" reads each chunk in a consistent snapshot of '
                "the source itself, whose binary log position is the watermark: remove "
                '[source.replica], or set watermarks = "table" to read chunks on the replica')
        return MySqlOptions(server_id=integer(section, "server_id",
                                              default_server_id(source_name), 1, 2**32 - 1),
                            watermarks=str(watermarks))


@dataclass(frozen=True)
class MyDsn:
    """A ``mysql://user:password@host:port?sslmode=...`` DSN, parsed."""

    host: str
    port: int
    user: str
    password: str
    tls: MyTls = field(default_factory=MyTls)

    def connect_args(self) -> dict[str, Any]:
        """Keyword arguments of ``pymysql.connect``."""
        return {"host": self.host, "port": self.port, "user": self.user,
                "password": self.password, **self.tls.connect_args()}

    def tls_errors(self) -> AbstractContextManager[None]:
        """Around opening a connection: a failure of its TLS is a ConfigError naming the
        DSN without its password."""
        return tls_errors(self.url(password=False), self.tls)

    def url(self, password: bool = True) -> str:
        secret = f":{quote(self.password, safe='')}" if password and self.password else ""
        return (f"mysql://{quote(self.user, safe='')}{secret}@{self.host}:{self.port}"
                f"{self.tls.query()}")


def parse_dsn(url: str) -> MyDsn:
    """A DSN's parts. Its messages quote nothing of it: a malformed DSN may hold a part of
    its password anywhere (``mysql://user:pa/ss@host`` has the host ``user``, the port
    ``pa`` and the path ``/ss@host``)."""
    try:
        parts = urlsplit(url)
        host = parts.hostname
    except ValueError:  # brackets that are no IPv6 address
        raise ValueError(f"a MySQL DSN is a URL like {_FORM}; a password holding [ or ] is "
                         "percent-encoded") from None
    if parts.scheme not in ("mysql", "mariadb") or not host:
        raise ValueError(f"a MySQL DSN is a URL like {_FORM}")
    if not _HOST.fullmatch(host):
        raise ValueError("the host of a MySQL DSN is a name or an IP address; a password "
                         "holding @ is percent-encoded")
    try:
        port = 3306 if parts.port is None else parts.port
        if port == 0:
            raise ValueError("port 0")
    except ValueError:
        raise ValueError(f"the port of a MySQL DSN is a number from 1 to 65535 ({_FORM}); "
                         "a password holding / ? # @ or : is percent-encoded") from None
    if parts.path not in ("", "/") or parts.fragment:
        raise ValueError(f"a MySQL DSN names no database: {_FORM}; a password holding / ? "
                         "or # is percent-encoded")
    try:
        query = parse_qsl(parts.query, keep_blank_values=True, strict_parsing=True) \
            if parts.query else []
    except ValueError:
        raise ValueError(f"the query of a MySQL DSN is name=value pairs joined by & "
                         f"({_FORM})") from None
    try:
        tls = parse_tls(query)
    except UnknownParameter as exc:
        # a name in a query that holds "@" may be a piece of the password: mysql://u:1?x@db
        raise ValueError(str(exc) if "@" not in parts.query else exc.unnamed) from None
    return MyDsn(host=host, port=port, user=unquote(parts.username or ""),
                 password=unquote(parts.password or ""), tls=tls)


def url_args(url: str) -> dict[str, Any]:
    """``mysql://user:password@host:port?sslmode=...`` to ``pymysql.connect`` keyword
    arguments."""
    return parse_dsn(url).connect_args()


def default_server_id(name: str) -> int:
    """A replica id derived from the source name, away from the small ids servers use."""
    return 1_000_000_000 + zlib.crc32(name.encode()) % 1_000_000_000


def my_options(config: SourceConfig) -> MySqlOptions:
    """The ``[source]`` options of a MySQL/MariaDB source's configuration."""
    if not isinstance(config.options, MySqlOptions):
        raise TypeError(f"source {config.name} is not a MySQL/MariaDB source")
    return config.options


def server_id(config: SourceConfig) -> int:
    """The replica id of a MySQL/MariaDB source's configuration."""
    return my_options(config).server_id


RULES = MySqlRules()
