"""What the configuration asks of a MySQL or MariaDB server: names, ``mysql://`` URLs and the
replica id of the binary log connection."""

from __future__ import annotations

import json
import re
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, unquote, urlsplit

from dblog_worker.checks import integer
from dblog_worker.config import SourceConfig
from dblog_worker.errors import ConfigError

MYSQL = "mysql"
_BINLOG_FILE = re.compile(r".+\.[0-9]+")
NAME_CHARACTERS = 64
WATERMARK_MODES = ("table", "position")


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
            args = url_args(dsn)
        except ValueError as exc:
            raise ValueError(f": {exc}") from None
        if password is not None:
            args["password"] = password
        user = quote(args["user"], safe="")
        secret = f":{quote(args['password'], safe='')}" if args["password"] else ""
        return f"mysql://{user}{secret}@{args['host']}:{args['port']}"

    def redact(self, dsn: str) -> str:
        try:
            args = url_args(dsn)
        except ValueError:
            return "<unparseable dsn>"
        return f"mysql://{quote(args['user'], safe='')}@{args['host']}:{args['port']}"

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


def url_args(url: str) -> dict[str, Any]:
    """``mysql://user:password@host:port/`` to ``pymysql.connect`` keyword arguments."""
    parts = urlsplit(url)
    if parts.scheme not in ("mysql", "mariadb") or not parts.hostname:
        raise ValueError("a MySQL DSN is a URL like mysql://user@host:3306")
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise ValueError("a MySQL DSN names no database and takes no options: mysql://user@host:3306")
    return {
        "host": parts.hostname,
        "port": parts.port or 3306,
        "user": unquote(parts.username or ""),
        "password": unquote(parts.password or ""),
    }


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
