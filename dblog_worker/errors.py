"""Errors of dblog, as an API.

::

    DblogError                  base of everything dblog raises on purpose
     ├── ChunkStale             a chunk cannot be used (its table's columns changed): the
     │                          window is read again, the session and the dump go on
     ├── TransientError         retry with backoff: the same action may succeed later
     │    ├── SourceUnavailable     the source database is unreachable or dropped us
     │    ├── StateUnavailable      Redis is unreachable
     │    ├── OutputUnavailable     the landing zone cannot be written (disk full, ...)
     │    ├── LeaseLost             another worker of the source leads now: stand by
     │    └── TargetUnavailable     the merge target is unreachable: the batch rolled back
     └── TerminalError          retrying cannot help: a person must act
          ├── ConfigError           the configuration or the source's settings are wrong
          │    └── ConfigInvalid    ... the configuration file itself (missing, not TOML,
          │                         an option or a DSN wrong): nothing was tried
          ├── RequestRejected       a dump request or control command is invalid
          ├── DumpFailed            a running dump cannot go on (its table was dropped, ...)
          ├── CorruptState          a record read back from Redis is malformed (names the key)
          │    └── CorruptRequest   ... a dump request's record: also a DumpFailed, so the
          │                         request fails and the log goes on
          ├── ProtocolError         the log or the watermark sequence is malformed
          ├── LogGone               the checkpoint points at log the source no longer has
          ├── TargetError           a merge target table cannot take the table's events
          └── SegmentCorrupt        a landing segment is truncated or damaged

Every message says what was wrong and what to do about it.
"""


class DblogError(Exception):
    """Base class of the errors dblog raises on purpose."""


class ChunkStale(DblogError):
    """A chunk SELECT read another column list than the worker expected (DDL since the
    catalog was read): its window is discarded and the chunk is read again."""


class ReplicaBehind(ChunkStale):
    """The read replica has not replayed the low watermark in time, or cannot be reached:
    the window reads nothing and the dump waits (it never reads an older state)."""


class TransientError(DblogError):
    """A failure that may go away: reconnect, back off and retry."""


class SourceUnavailable(TransientError):
    """The source database is unreachable, restarting, or closed the connection."""


class StateUnavailable(TransientError):
    """Redis, the control plane, is unreachable."""


class OutputUnavailable(TransientError):
    """The landing zone cannot be written now (disk full, permissions, storage gone)."""


class LeaseLost(TransientError):
    """This worker no longer holds the source's lease (it expired, or another worker took
    over): its writes are refused, and it stands by."""


class TargetUnavailable(TransientError):
    """The merge target database is unreachable; the batch's transaction rolled back."""


class TerminalError(DblogError):
    """A failure that retrying cannot fix."""


class ConfigError(TerminalError):
    """The configuration, or the source database's settings, need a change."""


class ConfigInvalid(ConfigError):
    """The configuration file cannot be used as written (missing, not TOML, an unknown
    option, a value or DSN that is wrong, a section the command needs): found before
    anything is contacted; ``dblog`` exits 2."""


class RequestRejected(TerminalError):
    """A dump request or a control command was refused; nothing was queued or changed."""


class DumpFailed(TerminalError):
    """A running dump cannot go on; the request fails with this message, the log goes on."""


class CorruptState(TerminalError):
    """A record read back from Redis is not what dblog writes there (edited by hand, written
    by another program or another version): ``key`` and ``field`` say where, ``reason`` what
    is wrong; the message adds what to do."""

    def __init__(self, key: str, field: str, reason: str, fix: str) -> None:
        where = f"{key} field {field!r}" if field else key
        super().__init__(f"malformed record in Redis: {where}: {reason}. {fix}")
        self.key = key
        self.field = field
        self.reason = reason


class CorruptRequest(CorruptState, DumpFailed):
    """The record of dump request ``request_id`` (its hash, progress or keys) is malformed:
    the worker fails the request and goes on with the next; front ends show it as malformed."""

    def __init__(self, request_id: str, key: str, field: str, reason: str) -> None:
        super().__init__(
            key, field, reason,
            f"dblog does not write such a record (edited by hand, or by another program?): "
            f"the worker fails request {request_id} and runs the next one; request the dump "
            "again (`dblog dump`) if it is still needed")
        self.request_id = request_id


class ProtocolError(TerminalError):
    """The change log or the watermark sequence is not what the algorithm allows."""


class LogGone(TerminalError):
    """The checkpoint points at a part of the log the source has discarded."""


class TargetError(TerminalError):
    """A target table cannot take a table's events (a type, a primary key); nothing applied."""


class SegmentCorrupt(TerminalError):
    """A landing segment is truncated or damaged; its table is not merged past it."""
