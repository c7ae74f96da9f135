"""The checks of a session's start that refuse to capture rather than lose changes: state
that Redis lost, and a landing zone filled from another database server."""

from __future__ import annotations

from dblog_worker.config import Config
from dblog_worker.dialect import dialect
from dblog_worker.errors import ConfigError
from dblog_worker.landing.sink import Sink
from dblog_worker.position import Position
from dblog_worker.source import LogReader, Setup


def refuse_lost_state(config: Config, source: Setup, sink: Sink, ran_before: bool) -> None:
    """No checkpoint, but the source or the landing zone says capture ran before:
    starting over would skip the changes in between without a word."""
    if source.capture_exists():
        raise ConfigError(
            f"Redis holds no checkpoint for source {config.source.name!r}, but "
            f"{dialect(config.source.kind).capture_exists_problem(config.source)}: Redis lost "
            "its data or another Redis was configured. Start once with `dblog run "
            "--adopt-slot` to continue from the slot's position, then request a full dump to "
            "re-sync."
        )
    if ran_before:
        raise ConfigError(
            f"Redis holds no state for source {config.source.name!r}, but the landing "
            f"zone {sink.where} holds its output: Redis lost its data "
            "(restarted without persistence, or flushed) or another Redis was configured. "
            "Point [redis] at the Redis that holds the state; or start once with `dblog run "
            "--adopt-slot` to capture from the end of the log now (changes in between are "
            "not captured), then request `dblog dump --all` to re-sync."
        )


def check_landed(config: Config, source: LogReader, sink: Sink,
                 landed: dict[str, Position]) -> None:
    """Everything landed was read from this log, so it lies before the log's end; a
    landing zone ahead of it was filled from another database server's log."""
    if not landed:
        return
    end = source.log_position()
    ahead = sorted(t for t, p in landed.items() if (p.major, p.minor) > (end.major, end.minor))
    if ahead:
        raise ConfigError(
            f"the landing zone {sink.where} holds events of "
            f"{', '.join(ahead)} at positions after the end of this source's log "
            f"({end.encode()}): it was filled from another database server (or one "
            "restored from a backup). Move that folder away, or set another [landing] "
            "path or source name, then start again and request a full dump"
            + dialect(config.source.kind).other_server_hint()
        )
