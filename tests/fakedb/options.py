"""What the configuration asks of a fake database: its name in a DSN, its checkpoints."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dblog_worker.errors import ConfigError

SCHEME = "fake:"


@dataclass(frozen=True)
class FakeOptions:
    # False: a low watermark is not followed by the changes its snapshot did not see (a
    # source that ignores commit visibility: the scenarios show what that breaks)
    unseen: bool = True


class FakeRules:
    kind = "fake"
    aliases: tuple[str, ...] = ()
    title = "Fake (in-memory)"
    table_form = "schema.table"
    option_names = frozenset({"unseen"})
    checkpoint_form = "a fake log sequence number (like 42)"
    checkpoint_hint = ""
    jdbc_jar = ""
    jdbc_package = ""
    replica_reads = False

    def name_problem(self, name: str) -> str | None:
        return "a name holds no NUL character" if "\x00" in name else None

    def connection_string(self, dsn: str, password: str | None) -> str:
        if not dsn.startswith(SCHEME) or len(dsn) == len(SCHEME):
            raise ValueError(f" must be {SCHEME}<database name>")
        return dsn

    def redact(self, dsn: str) -> str:
        return dsn  # a fake DSN holds no secret

    def source_options(self, section: Mapping[str, Any], source_name: str) -> FakeOptions:
        unseen = section.get("unseen", True)
        if not isinstance(unseen, bool):
            raise ConfigError(f"source.unseen must be true or false, got {unseen!r}")
        return FakeOptions(unseen=unseen)

    def is_checkpoint(self, text: str) -> bool:
        return text.isdigit() and int(text) > 0


RULES = FakeRules()
