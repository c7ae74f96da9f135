"""What the configuration asks of a PostgreSQL database: names, libpq DSNs, the slot and the
publication."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from psycopg.conninfo import conninfo_to_dict, make_conninfo

from dblog_worker.config import SourceConfig
from dblog_worker.errors import ConfigError
from dblog_worker.pg.dsn import parse_problem, shown, value_problem

POSTGRESQL = "postgresql"
_LSN = re.compile(r"[0-9A-Fa-f]{1,8}/[0-9A-Fa-f]{1,8}")
NAME_BYTES = 63  # NAMEDATALEN - 1: PostgreSQL truncates a longer name, silently


WATERMARK_MODES = ("table", "message")


@dataclass(frozen=True)
class PgOptions:
    slot: str  # the logical replication slot
    publication: str  # the publication of the captured tables
    # "table": upserts of dblog.watermark; "message": pg_logical_emit_message, no table
    watermarks: str = "table"

    @property
    def watermark_table(self) -> bool:
        return self.watermarks == "table"


class PgRules:
    kind = POSTGRESQL
    aliases: tuple[str, ...] = ()
    title = "PostgreSQL"
    table_form = "schema.table"
    option_names = frozenset({"slot", "publication", "watermarks"})
    checkpoint_form = "a PostgreSQL LSN (like 0/16B3748)"
    checkpoint_hint = "for PostgreSQL the slot's confirmed_flush_lsn in pg_replication_slots"
    jdbc_jar = "/usr/share/java/postgresql.jar"
    jdbc_package = "libpostgresql-jdbc-java"
    replica_reads = True

    def is_checkpoint(self, text: str) -> bool:
        return _LSN.fullmatch(text) is not None

    def name_problem(self, name: str) -> str | None:
        size = len(name.encode())
        if size > NAME_BYTES:
            return (f"PostgreSQL names are at most {NAME_BYTES} bytes (it truncates longer "
                    f"ones); this one has {size}")
        return None

    def connection_string(self, dsn: str, password: str | None) -> str:
        try:
            if password is not None:
                dsn = make_conninfo(dsn, password=password)
            params = conninfo_to_dict(dsn)
        except Exception as exc:
            raise ValueError(" is not a valid libpq connection string: "
                             + parse_problem(str(exc).strip(), dsn)) from None
        problem = value_problem({k: str(v) for k, v in params.items()})
        if problem is not None:
            raise ValueError(f": {problem}")
        return dsn

    def redact(self, dsn: str) -> str:
        """Only the options known to be safe to show (:data:`dsn.SAFE_KEYS`): a password,
        an ``sslpassword``, ``options`` and any option not known are left out."""
        try:
            params = conninfo_to_dict(dsn)
        except Exception:
            return "<unparseable dsn>"
        return make_conninfo("", **shown({k: str(v) for k, v in params.items()}))

    def source_options(self, section: Mapping[str, Any], source_name: str) -> PgOptions:
        watermarks = section.get("watermarks", "table")
        if watermarks not in WATERMARK_MODES:
            raise ConfigError(f"source.watermarks must be one of {', '.join(WATERMARK_MODES)} "
                              f"(a watermark table, or logical decoding messages), got "
                              f"{watermarks!r}")
        return PgOptions(slot=_identifier(section, "slot", f"dblog_{source_name}"),
                         publication=_identifier(section, "publication", f"dblog_{source_name}"),
                         watermarks=str(watermarks))


def pg_options(config: SourceConfig) -> PgOptions:
    """The slot and publication of a PostgreSQL source's configuration."""
    if not isinstance(config.options, PgOptions):
        raise TypeError(f"source {config.name} is not a PostgreSQL source")
    return config.options


def _identifier(section: Mapping[str, Any], key: str, default: str) -> str:
    """A slot or publication name: it is spelled into replication commands."""
    value = section.get(key, default)
    if not isinstance(value, str) or not re.fullmatch(r"[a-z_][a-z0-9_]{0,62}", value):
        raise ConfigError(
            f"source.{key} {value!r} must be 1-63 characters of a-z, 0-9 and _ "
            "(PostgreSQL's rule for replication slot names)"
        )
    return value


RULES = PgRules()
