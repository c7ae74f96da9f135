"""Errors of dblog, as an API.

::

    DblogError                  base of everything dblog raises on purpose
     ├── TransientError         retry with backoff: the same action may succeed later
     │    ├── SourceUnavailable     the source database is unreachable or dropped us
     │    ├── StateUnavailable      Redis is unreachable
     │    ├── OutputUnavailable     the landing zone cannot be written (disk full, ...)
     │    ├── LeaseLost             another worker of the source leads now: stand by
     │    └── TargetUnavailable     the merge target is unreachable: the batch rolled back
     └── TerminalError          retrying cannot help: a person must act
          ├── ConfigError           the configuration or the source's settings are wrong
          ├── RequestRejected       a dump request or control command is invalid
          ├── DumpFailed            a running dump cannot go on (its table was dropped, ...)
          ├── ProtocolError         the log or the watermark sequence is malformed
          ├── LogGone               the checkpoint points at log the source no longer has
          ├── TargetError           a merge target table cannot take the table's events
          └── SegmentCorrupt        a landing segment is truncated or damaged

Every message says what was wrong and what to do about it.
"""


class DblogError(Exception):
    """Base class of the errors dblog raises on purpose."""


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


class RequestRejected(TerminalError):
    """A dump request or a control command was refused; nothing was queued or changed."""


class DumpFailed(TerminalError):
    """A running dump cannot go on; the request fails with this message, the log goes on."""


class ProtocolError(TerminalError):
    """The change log or the watermark sequence is not what the algorithm allows."""


class LogGone(TerminalError):
    """The checkpoint points at a part of the log the source has discarded."""


class TargetError(TerminalError):
    """A target table cannot take a table's events (a type, a primary key); nothing applied."""


class SegmentCorrupt(TerminalError):
    """A landing segment is truncated or damaged; its table is not merged past it."""
