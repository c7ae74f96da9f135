"""Redis, the control plane: checkpoint, dump requests, their progress and knobs.

Layout 2 (every key under ``dblog:v1:<source>:``; the layout version is in ``meta``)::

    meta                      hash   layout version, created_at
    checkpoint                hash   value (source-specific log position), updated_at
    seq                       int    request number counter
    requests                  zset   every request id, scored by number
    active                    zset   ids of the requests not yet terminal, by priority then
                                     age (score: rank * 2**40 + number)
    tokens                    hash   client token -> request id (idempotent creation)
    request:<id>              hash   the DumpRequest fields
    request:<id>:keys         list   primary-key dumps: the keys, JSON arrays of texts
    request:<id>:missing      list   primary-key dumps: keys that did not exist
    request:<id>:progress     hash   table -> TableProgress JSON
    worker                    hash   status of the leading worker (position, window, ...)
    captured                  hash   table -> JSON: why it is captured, since when, whether it
                                     joined while capture ran (dblog_worker.capture)
    excluded                  hash   table -> why a pattern matched it but it is not captured
    lease, lease:epoch, members, member:<id>    the leader lease (dblog_worker.lease)

Every state change of a request goes through one Lua script that checks the
transition against :data:`dblog_worker.requests.TRANSITIONS`, so a user's pause
and the worker's completion cannot overwrite each other. A leading worker's store is
*fenced* with its lease token (:meth:`StateStore.fence`): each of its writes happens
only while the lease still carries that token, atomically (WATCH / the script checks
it), else :class:`LeaseLost`. Redis errors become :class:`StateUnavailable` here, at
the boundary.

Every record read back is checked before it is used (:meth:`DumpRequest.from_fields`,
:meth:`TableProgress.from_json`, :func:`key_record`, :func:`check_checkpoint`): a record
dblog did not write (edited by hand, another program) is :class:`CorruptRequest` or
:class:`CorruptState`, naming the key, the field and what to do, never an arbitrary
exception. :meth:`StateStore.quarantine` takes a malformed request out of the queue
whatever its fields hold.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from typing import Any, cast

import redis

from dblog_worker import kinds
from dblog_worker.errors import CorruptState
from dblog_worker.redis_store import (
    LAYOUT_VERSION,
    NAMESPACE,
    decode,
    fields_of,
    redis_errors,
)
from dblog_worker.request_store import RequestStore
from dblog_worker.requests import KeyTexts, TableProgress

__all__ = ["LAYOUT_VERSION", "NAMESPACE", "StateStore", "check_checkpoint", "redis_errors"]


def check_checkpoint(text: str, key: str) -> str:
    """A checkpoint as a source of one of the known kinds saves it (a PostgreSQL LSN, a
    binlog checkpoint, ...); else :class:`CorruptState` with what to do (the worker cannot
    stream without one)."""
    if any(rules.is_checkpoint(text) for rules in kinds.every_rules()):
        return text
    shown = repr(text) if len(text) <= 80 else repr(text[:76]) + "..."
    forms = " nor ".join(rules.checkpoint_form for rules in kinds.every_rules())
    raise CorruptState(key, "value", f"{shown} is neither {forms}", _checkpoint_fix(key))


def _checkpoint_fix(key: str) -> str:
    hints = "; ".join(r.checkpoint_hint for r in kinds.every_rules() if r.checkpoint_hint)
    return ("The worker cannot stream without knowing where the log was left: write the right "
            f"position back (`redis-cli HSET {key} value <position>`"
            + (f": {hints}" if hints else "") + "), or start capture anew: "
            "`dblog reset --yes`, start the worker, then `dblog dump --all`")


class StateStore(RequestStore):
    """The Redis state of one source: its checkpoint, its dump requests
    (:class:`~dblog_worker.request_store.RequestStore`), the leader's status."""

    # -- checkpoint -----------------------------------------------------------

    def forget_checkpoint(self) -> None:
        """``dblog reset``: no checkpoint, and a note that it was forgotten on purpose."""
        with redis_errors():
            pipe = self.redis.pipeline(transaction=True)
            pipe.delete(self.key("checkpoint"))
            pipe.hset(self.key("checkpoint"), "reset_at", repr(time.time()))
            pipe.execute()

    def was_reset(self) -> bool:
        """Whether ``dblog reset`` forgot the checkpoint (rather than Redis losing it)."""
        with redis_errors():
            return bool(self.redis.hexists(self.key("checkpoint"), "reset_at"))

    def checkpoint(self) -> str | None:
        """The saved checkpoint, checked (:func:`check_checkpoint`); None if there is none."""
        key = self.key("checkpoint")
        try:
            raw = self._raw("HGET", key, "value")
            return None if raw is None else check_checkpoint(decode(raw), key)
        except redis.ResponseError as exc:
            raise CorruptState(key, "", f"is not a hash ({exc})", _checkpoint_fix(key)) from None
        except ValueError as exc:  # not UTF-8
            raise CorruptState(key, "value", str(exc), _checkpoint_fix(key)) from None

    def save_progress(
        self,
        checkpoint: str | None,
        progress: Mapping[str, Sequence[TableProgress]],
        missing: Mapping[str, Sequence[KeyTexts]],
    ) -> None:
        """Record, in one transaction, what the last durable flush covered."""
        now = repr(time.time())

        def fill(pipe: Any) -> None:
            if checkpoint is not None:
                fields = {"value": checkpoint, "updated_at": now}
                if self._fence is not None:
                    fields["token"] = str(self._fence)  # which leader saved it
                pipe.hset(self.key("checkpoint"), mapping=fields_of(fields))
            for request_id, tables in progress.items():
                if not tables:
                    continue
                pipe.hset(
                    self.key("request", request_id, "progress"),
                    mapping={p.table: p.to_json() for p in tables},
                )
            for request_id, keys in missing.items():
                if keys:
                    pipe.rpush(self.key("request", request_id, "missing"),
                               *(json.dumps(list(k)) for k in keys))

        self._write(fill)

    # -- the captured tables -------------------------------------------------

    def captured(self) -> dict[str, dict[str, Any]]:
        """The captured tables as the leader recorded them: table -> ``why``, ``since``,
        ``joined`` (while capture ran), ``dump`` (the request queued for it); an entry that
        is not such a JSON object is shown as ``{"malformed": text}``."""
        with redis_errors():
            raw = cast(dict[str, str], self.redis.hgetall(self.key("captured")))
        found: dict[str, dict[str, Any]] = {}
        for table, text in sorted(raw.items()):
            try:
                entry = json.loads(text)
            except ValueError:
                entry = None
            found[table] = entry if isinstance(entry, dict) else {"malformed": text}
        return found

    def excluded(self) -> dict[str, str]:
        """The tables a pattern matched that are not captured, and why."""
        with redis_errors():
            return dict(sorted(cast(dict[str, str],
                                    self.redis.hgetall(self.key("excluded"))).items()))

    def save_captured(self, joined: Mapping[str, Mapping[str, Any]], left: Sequence[str],
                      excluded: Mapping[str, str]) -> None:
        """Record the tables that joined capture, forget those that left it, and replace
        the tables left out."""
        key, out = self.key("captured"), self.key("excluded")

        def fill(pipe: Any) -> None:
            if left:
                pipe.hdel(key, *left)
            if joined:
                pipe.hset(key, mapping={t: json.dumps(dict(e)) for t, e in joined.items()})
            pipe.delete(out)
            if excluded:
                pipe.hset(out, mapping=dict(excluded))

        self._write(fill)

    # -- worker status --------------------------------------------------------

    def publish_status(self, status: Mapping[str, Any]) -> None:
        fields = fields_of({k: str(v) for k, v in status.items()})
        self._write(lambda pipe: pipe.hset(self.key("worker"), mapping=fields))

    def status(self) -> dict[str, str]:
        with redis_errors():
            return cast(dict[str, str], self.redis.hgetall(self.key("worker")))

    def dump_statuses(self) -> dict[str, dict[str, Any]]:
        """What the leader's status says of each dump it runs (``dumps``: state, priority,
        why it waits, its throttle's decision), in the order it runs them; {} when it runs
        none (or the field is not what a worker writes)."""
        try:
            dumps = json.loads(self.status().get("dumps") or "{}")
        except ValueError:
            return {}
        if not isinstance(dumps, dict):
            return {}
        return {str(k): v for k, v in dumps.items() if isinstance(v, dict)}

    def dump_status(self, request_id: str) -> dict[str, Any]:
        """:meth:`dump_statuses` of one request; {} if the leader does not run it now."""
        return self.dump_statuses().get(request_id, {})

    def lease(self) -> dict[str, str]:
        """The leader lease ({} while nobody holds it): holder, token, host, pid, http."""
        with redis_errors():
            return cast(dict[str, str], self.redis.hgetall(self.key("lease")))

    def members(self) -> list[dict[str, str]]:
        """Every worker of the source seen lately (leader first): holder, role, host, pid,
        http, token, updated_at."""
        with redis_errors():
            holders = cast(list[str], self.redis.zrange(self.key("members"), 0, -1))
            pipe = self.redis.pipeline(transaction=False)
            for holder in holders:
                pipe.hgetall(self.key("member", holder))
            rows = cast(list[dict[str, str]], pipe.execute())
        found = [{"holder": h, **fields} for h, fields in zip(holders, rows, strict=True) if fields]
        found.sort(key=lambda m: (m.get("role") != "leader", m["holder"]))
        return found
