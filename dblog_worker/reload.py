"""Reading the configuration again while the worker runs (SIGHUP, ``POST /api/v1/reload``).

What may change without a restart is what a new session picks up: the captured tables
(``source.tables``, ``exclude_tables``, ``dump_new_tables``, ``rescan_interval_s``,
``keys``), the
column rules (``[source.columns]``), the timings of ``[landing]`` and ``[worker]`` and
``max_active_dumps`` (the new session's first look at the queue keeps the running dumps
within its slots, parking the least urgent), and the
sections the worker does not use (``[target]``, ``[merge]``). Anything else (the source's
name, kind, DSN and kind options, ``[source.replica]``, ``[redis]``, where and how it
lands, ``[lease]``, ``[http]``, ``[logging]``) needs a restart: a reload that changes it is
refused, with a one-line reason, and nothing changes.

A reload is checked before it is taken: the file must parse, and the source must pass
preflight with it (a table named that does not exist, a rule that would mask a key column
refuse it). Once taken, the running session ends as at a stop (its open windows close,
its output is written, its checkpoint saved) and a new one starts at once with the new
configuration: the log goes on from the checkpoint, a running dump from its progress.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path

from dblog_worker import config as config_module
from dblog_worker.config import Config, SourceConfig
from dblog_worker.dialect import open_source
from dblog_worker.errors import DblogError

log = logging.getLogger(__name__)

RELOADABLE_SOURCE = frozenset({"tables", "exclude_tables", "dump_new_tables",
                               "rescan_interval_s", "columns", "keys"})
RELOADABLE = frozenset({"flush_interval_s", "flush_max_events", "heartbeat_interval_s",
                        "status_interval_s", "control_interval_s", "reconnect_max_s",
                        "shutdown_timeout_s", "max_active_dumps", "target", "merge"})
# how a field is named in the file, where it is not [source] <field>
_OPTION = {
    "redis_url": "[redis] url", "landing_path": "landing.path",
    "landing_format": "landing.format", "lease": "[lease]", "http": "[http]",
    "logs": "[logging]", "options": "a [source] option of its kind (slot, publication, "
    "server_id, watermarks, ...)", "dsn": "source.dsn (or its password)",
    "replica": "[source.replica]", "flush_interval_s": "landing.flush_interval_s",
    "flush_max_events": "landing.flush_max_events", "columns": "[source.columns]",
    "max_active_dumps": "[worker] max_active_dumps",
}


@dataclass(frozen=True)
class ReloadResult:
    """What a reload did: ``accepted`` and what ``changed``, or the ``reason`` it was
    refused (one line)."""

    accepted: bool
    changed: tuple[str, ...] = ()
    reason: str = ""
    notes: tuple[str, ...] = ()

    def to_json(self) -> dict[str, object]:
        if not self.accepted:
            return {"reloaded": False, "error": self.reason}
        return {"reloaded": True, "changed": list(self.changed), "notes": list(self.notes)}

    def describe(self) -> str:
        if not self.accepted:
            return self.reason
        if not self.changed:
            return "configuration read again: nothing changed"
        return ("configuration reloaded: " + ", ".join(self.changed) + " changed; a new "
                "session starts with it" + "".join(f"; {n}" for n in self.notes))


def _name(field: str, section: str = "") -> str:
    return _OPTION.get(field, f"{section}{field}")


def differences(old: Config, new: Config) -> tuple[list[str], list[str]]:
    """The options that differ: (those a new session takes, those that need a restart)."""
    taken: list[str] = []
    restart: list[str] = []
    for field in fields(Config):
        if field.name == "source":
            for inner in fields(SourceConfig):
                if getattr(old.source, inner.name) != getattr(new.source, inner.name):
                    (taken if inner.name in RELOADABLE_SOURCE else restart).append(
                        _name(inner.name, "source."))
        elif getattr(old, field.name) != getattr(new, field.name):
            (taken if field.name in RELOADABLE else restart).append(_name(field.name))
    return taken, restart


def refused(reason: str) -> ReloadResult:
    return ReloadResult(False, reason=f"reload refused: {reason}; nothing changed")


def check_source(config: Config) -> str | None:
    """Why the source refuses capture with ``config`` (the first problem, one line), or
    None: the checks of a session's start, changing nothing."""
    source = open_source(config.source, lambda table, schema: 0)
    try:
        source.connect()
        problems = [p for p in source.preflight() if p.capture]
    finally:
        source.close()
    if not problems:
        return None
    first = problems[0]
    more = f" (and {len(problems) - 1} more problem(s): dblog preflight lists them)" \
        if len(problems) > 1 else ""
    return f"{first.what} (fix: {first.fix}){more}"


def reload(path: Path, current: Config,
           source_check: Callable[[Config], str | None] = check_source) -> tuple[
               ReloadResult, Config | None]:
    """Read ``path`` again: the result, and the configuration to run with (None if
    refused or unchanged)."""
    try:
        new = config_module.load(path)
    except DblogError as exc:
        return refused(_one_line(str(exc))), None
    taken, restart = differences(current, new)
    if restart:
        return refused(f"{restart[0]} changed, which needs a restart of the worker"
                       + (f" (so did {', '.join(restart[1:])})" if restart[1:] else "")), None
    if not taken:
        return ReloadResult(True), None
    try:
        problem = source_check(new)
    except DblogError as exc:
        return refused(f"the source could not be checked: {_one_line(str(exc))}"), None
    if problem is not None:
        return refused(f"the source refuses the new configuration: {_one_line(problem)}"), None
    notes = []
    if "[source.columns]" in taken:
        notes.append("the tables whose column rules changed get a new schema version; rows "
                     "landed before keep the old values: dump those tables again (dblog "
                     "dump --table ...)")
    return ReloadResult(True, tuple(taken), notes=tuple(notes)), new


def _one_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return "; ".join(lines)
