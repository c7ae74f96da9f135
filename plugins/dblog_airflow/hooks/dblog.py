"""DblogHook: dump requests, their progress and their knobs, through a ``dblog`` connection.

The connection (type ``dblog``, default id ``dblog_default``) names the worker's Redis and
its source::

    host, port            the Redis server                      (port default 6379)
    login, password       Redis ACL user and password            (optional)
    schema                the Redis database number              (default 0)
    extra                 {"source": "shop",                     the worker's [source] name
                           "config": "/etc/dblog/shop.toml",     its configuration file
                           "ssl": true}                          rediss:// (optional)

``config`` is optional for dumps of named tables and for waiting; it is needed for a dump
of all tables (the captured tables are in the worker's configuration, not in Redis), for
the merge and for verify. When it is set, a dump request is checked against the source
database like ``dblog dump`` does (the tables are captured, the keys fit the key columns).

The hook never logs the Redis password: its log lines and messages show the URL with the
password as ``***`` (:attr:`DblogSettings.safe_redis_url`).
"""

from __future__ import annotations

import ast
import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import redis
from airflow.sdk import BaseHook

from dblog_worker import config as config_module
from dblog_worker import control
from dblog_worker.config import NAME, Config
from dblog_worker.dump_spec import DumpSpec, Knobs
from dblog_worker.errors import (
    ConfigError,
    DblogError,
    RequestRejected,
    SourceUnavailable,
    StateUnavailable,
)
from dblog_worker.requests import (
    COMMANDS,
    DEFAULT_CHUNK_SIZE,
    DumpKind,
    DumpRequest,
    KeyTexts,
    MalformedRequest,
    RequestState,
    TableProgress,
)
from dblog_worker.state import StateStore

if TYPE_CHECKING:
    from airflow.sdk import Connection

__all__ = ["DEFAULT_CONN_ID", "DblogHook", "DblogSettings", "as_int", "as_key", "as_keys",
           "as_tables", "as_throttle", "as_where", "spec_of"]

DEFAULT_CONN_ID = "dblog_default"
DEFAULT_REDIS_PORT = 6379


@dataclass(frozen=True)
class DblogSettings:
    """What a ``dblog`` connection says, checked: the Redis URL, the source, the config file."""

    conn_id: str
    redis_url: str = field(repr=False)
    safe_redis_url: str  # the URL with the password as ***: the only form that is logged
    source: str
    config_path: str | None = None

    @classmethod
    def from_connection(cls, conn: Connection, extra: Mapping[str, Any]) -> DblogSettings:
        """Read a connection (its extra already parsed: sync and async callers differ)."""
        conn_id = conn.conn_id
        if not conn.host:
            raise ConfigError(
                f"connection {conn_id!r} has no host: set it to the Redis server of the dblog "
                "worker (the host of its [redis] url)"
            )
        database = (conn.schema or "0").strip() or "0"
        if not database.isdigit():
            raise ConfigError(
                f"connection {conn_id!r}: schema {conn.schema!r} is not a Redis database "
                "number; set the number of the worker's Redis database, or leave it empty for 0"
            )
        source = _extra(extra, "source")
        if not isinstance(source, str) or not source:
            raise ConfigError(
                f"connection {conn_id!r} has no \"source\" in its extra: set it to the worker's "
                'source name ([source] name in its configuration), e.g. {"source": "shop"}'
            )
        if not NAME.fullmatch(source):
            raise ConfigError(
                f"connection {conn_id!r}: source {source!r} is not a dblog source name (1-40 "
                "characters of a-z, 0-9 and _, starting with a letter)"
            )
        config_path = _extra(extra, "config")
        if config_path is not None and not isinstance(config_path, str):
            raise ConfigError(f"connection {conn_id!r}: \"config\" in the extra must be the path "
                              "of the worker's configuration file")
        ssl = _extra(extra, "ssl")
        url = partial(redis_url, host=conn.host, port=conn.port or DEFAULT_REDIS_PORT,
                      login=conn.login, password=conn.password, database=int(database),
                      ssl=ssl is True or str(ssl).lower() == "true")
        return cls(
            conn_id=conn_id,
            redis_url=url(),
            safe_redis_url=url(masked=True),
            source=source,
            config_path=config_path or None,
        )


def _extra(extra: Mapping[str, Any], name: str) -> Any:
    """An extra field, as JSON or as a connection form stores it (``extra__dblog__name``)."""
    value = extra.get(name)
    return extra.get(f"extra__dblog__{name}") if value in (None, "") else value


def redis_url(*, host: str, port: int, login: str | None, password: str | None,
              database: int, ssl: bool, masked: bool = False) -> str:
    """``redis[s]://[login[:password]@]host:port/database``, each part quoted; ``masked``
    writes the password as ``***``."""
    credentials = ""
    if login or password:
        credentials = quote(login or "", safe="")
        if password:
            credentials += ":" + ("***" if masked else quote(password, safe=""))
        credentials += "@"
    netloc = f"[{host}]" if ":" in host else host
    return f"{'rediss' if ssl else 'redis'}://{credentials}{netloc}:{port}/{database}"


# -- templated values: operators get strings when a template renders a param -----------


def as_tables(value: object) -> list[str]:
    """Table names from a list, a JSON or Python list literal, or one name; duplicates dropped.
    Names are kept exactly as given: a PostgreSQL name may begin or end with a space."""
    if value is None or value == "":
        return []
    if isinstance(value, str):
        text = value.strip()
        if not text.startswith("["):
            return [value]
        value = _literal(text, "tables")
    if not isinstance(value, Sequence) or isinstance(value, str) or not all(
        isinstance(t, str) and t for t in value
    ):
        raise RequestRejected(f"tables must be a list of names like [\"public.orders\"], "
                              f"got {value!r}")
    return list(dict.fromkeys(value))


def as_keys(value: object) -> list[object] | None:
    """Primary keys from a list, or a JSON (or Python) list literal; None when there are none."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if isinstance(value, str):
        value = _literal(value.strip(), "keys")
    if isinstance(value, tuple):
        value = list(value)
    if not isinstance(value, list):
        raise RequestRejected(
            f"keys must be a JSON array such as [1, 2] or [[1, \"a\"]], got {value!r}")
    return [list(k) if isinstance(k, tuple) else k for k in value]


def as_where(value: object) -> object:
    """A filter's conditions from a list, its JSON (or Python) text, or one condition (a
    mapping); None when there are none. :class:`~dblog_worker.row_filter.RowFilter` checks
    each condition."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if isinstance(value, str):
        value = _literal(value.strip(), "where conditions")
    if isinstance(value, Mapping):
        return [value]
    return value


def as_key(value: object, what: str) -> object:
    """A key range's end from a value, a list (one value per key column), or their text:
    JSON or a Python literal (``10``, ``[7, "EU"]``), else the text itself (``abc``), as
    ``dblog dump --from-key`` reads it; None when empty."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if not isinstance(value, str):
        return value
    text = value.strip()
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        pass
    if text.startswith("["):
        return _literal(text, f"{what} values")
    return text


def as_int(value: object, what: str) -> int:
    """An integer knob from an int or its text (a rendered template)."""
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value.strip())
    if isinstance(value, bool) or not isinstance(value, int):
        raise RequestRejected(f"{what} must be an integer, got {value!r}")
    return value


def as_throttle(limits: Mapping[str, object] | None) -> dict[str, int]:
    """Throttle limits by name, each an int or its text (a rendered template)."""
    if limits is None:
        return {}
    if not isinstance(limits, Mapping):
        raise RequestRejected(f"throttle must be a mapping of limits, got {limits!r}")
    return {name: as_int(value, f"throttle {name}") for name, value in limits.items()}


def spec_of(scope: object, tables: object = (), keys: object = None, *,
            chunk_size: object = DEFAULT_CHUNK_SIZE, delay_ms: object = 0,
            client_token: str | None = None, parallelism: object = 1, where: object = None,
            from_key: object = None, to_key: object = None,
            throttle: Mapping[str, object] | None = None, priority: object = None) -> DumpSpec:
    """A :class:`~dblog_worker.dump_spec.DumpSpec` from separate values, each a value or
    its text as a rendered template gives it (:func:`as_tables`, :func:`as_keys`, ...).
    The DAGs pass a spec's JSON instead (``DblogDumpOperator(spec=...)``)."""
    return DumpSpec.of(scope, as_tables(tables), as_keys(keys),
                       chunk_size=as_int(chunk_size, "chunk size"),
                       delay_ms=as_int(delay_ms, "delay"), client_token=client_token,
                       parallelism=as_int(parallelism, "parallelism"), where=as_where(where),
                       from_key=as_key(from_key, "from_key"), to_key=as_key(to_key, "to_key"),
                       throttle=as_throttle(throttle), priority=priority or None)


def _literal(text: str, what: str) -> object:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        try:  # a Python list, as a template renders a list param
            return ast.literal_eval(text)
        except (ValueError, SyntaxError):
            raise RequestRejected(f"{what} are not valid JSON: {exc}") from None


class DblogHook(BaseHook):
    """Request, follow and steer dumps of a dblog worker, through its Redis control plane.

    Like the ``dblog`` CLI's dump commands; the worker itself runs elsewhere and picks the
    requests up. Methods raise dblog's errors: :class:`~dblog_worker.errors.RequestRejected`
    when a request or command is refused (nothing was queued or changed),
    :class:`~dblog_worker.errors.CorruptRequest` when a request's record in Redis is
    malformed (the message names the key, the field and what is wrong; the worker fails
    such a request; :meth:`get_record` returns it as a ``MalformedRequest`` instead),
    :class:`~dblog_worker.errors.ConfigError` for a connection or configuration that needs a
    change, :class:`~dblog_worker.errors.StateUnavailable` when Redis is unreachable (try
    again). Call :meth:`close` when done (operators do).

    :param dblog_conn_id: The ``dblog`` connection: Redis, the source name, the worker's
        configuration file (see the module's documentation).
    """

    conn_name_attr = "dblog_conn_id"
    default_conn_name = DEFAULT_CONN_ID
    conn_type = "dblog"
    hook_name = "dblog (DBLog capture worker)"

    def __init__(self, dblog_conn_id: str = DEFAULT_CONN_ID) -> None:
        super().__init__()
        self.dblog_conn_id = dblog_conn_id
        self._settings: DblogSettings | None = None
        self._state: StateStore | None = None
        self._config: Config | None = None

    # -- the connection -----------------------------------------------------------------

    @property
    def settings(self) -> DblogSettings:
        if self._settings is None:
            conn = self.get_connection(self.dblog_conn_id)
            self._settings = DblogSettings.from_connection(conn, conn.extra_dejson)
        return self._settings

    @classmethod
    async def aget_settings(cls, dblog_conn_id: str = DEFAULT_CONN_ID) -> DblogSettings:
        """The settings of a connection, from async code (a trigger): no blocking call."""
        conn = await cls.aget_connection(dblog_conn_id)
        return DblogSettings.from_connection(conn, await conn.aextra_dejson())

    @property
    def source(self) -> str:
        """The worker's source name (the prefix of its Redis keys)."""
        return self.settings.source

    @property
    def config_path(self) -> str | None:
        """The worker's configuration file, when the connection names it."""
        return self.settings.config_path

    def load_config(self) -> Config:
        """The worker's configuration (secrets from this process's environment), checked
        against the connection: both must name the same source."""
        if self._config is None:
            path = self.config_path
            if path is None:
                raise ConfigError(
                    f"connection {self.dblog_conn_id!r} names no worker configuration: add "
                    '"config": "/path/to/worker.toml" to its extra (the merge, verify and dumps '
                    "of all tables read the source, the tables and the target from it)"
                )
            config = config_module.load(path)
            if config.source.name != self.source:
                raise ConfigError(
                    f"connection {self.dblog_conn_id!r} names source {self.source!r} but its "
                    f"configuration {path} is of source {config.source.name!r}: both must "
                    "name the same worker"
                )
            self._config = config
        return self._config

    def state(self) -> StateStore:
        """The Redis state of the source (one client, kept until :meth:`close`)."""
        if self._state is None:
            settings = self.settings
            try:
                self._state = StateStore(settings.redis_url, settings.source)
            except ValueError as exc:  # redis-py refuses the URL; its text may hold it
                raise ConfigError(f"connection {self.dblog_conn_id!r}: {settings.safe_redis_url} "
                                  f"is not a usable Redis URL ({type(exc).__name__})") from None
            self.log.info("dblog source %s at %s", settings.source, settings.safe_redis_url)
        return self._state

    get_conn = state

    def close(self) -> None:
        if self._state is not None:
            self._state.close()
            self._state = None

    def test_connection(self) -> tuple[bool, str]:
        """Whether Redis answers, and what the worker of the source last reported."""
        try:
            settings = self.settings
            state = self.state()
            try:
                state.redis.ping()
            except redis.RedisError as exc:
                raise StateUnavailable(
                    f"Redis at {settings.safe_redis_url} does not answer: {exc}") from None
            status = state.status()
        except DblogError as exc:
            return False, str(exc)
        finally:
            self.close()
        where = f"Redis at {settings.safe_redis_url} answers; source {settings.source}: "
        if not status:
            return True, where + "no worker has reported yet (is `dblog run` running?)"
        try:
            when = f"{time.time() - float(status.get('updated_at', '')):.0f} s ago"
        except ValueError:  # not a time: say so rather than fail
            when = "at an unknown time"
        return True, where + (f"worker pid {status.get('pid')} on {status.get('host')} reported "
                              f"{when}")

    # -- dumps --------------------------------------------------------------------------

    def create(self, spec: DumpSpec) -> DumpRequest:
        """Queue the dump ``spec`` asks for, like ``dblog dump``
        (:func:`dblog_worker.control.create_dump`); with a client token used before, return
        that request instead (no second dump).

        With the worker's configuration (the connection's ``config``), the request is
        checked against the source as ``dblog dump`` checks it (tables captured, with a
        primary key; keys that fit it; the filter's columns); when the source is
        unreachable, it is queued anyway and the worker checks it when it runs. Without the
        configuration, only the keys' shape is checked, and scope ``"all"`` is refused.
        """
        config = self.load_config() if self.config_path is not None else None
        if spec.kind is DumpKind.ALL and config is None:
            raise RequestRejected(
                'scope "all" needs the captured tables: add the worker\'s configuration to '
                f'connection {self.dblog_conn_id!r} ("config" in its extra), or use scope '
                '"tables" and name them')
        started = time.time()

        def unreachable(exc: SourceUnavailable) -> None:
            assert config is not None
            self.log.warning(
                "source %s (%s) is unreachable, so the tables and keys are not checked "
                "against it now; the worker checks them when the dump runs: %s",
                config.source.name, config.source.safe_dsn(), exc)

        request = control.create_dump(config, self.state(), spec, unreachable=unreachable)
        again = spec.client_token is not None and request.created_at < started
        self.log.info(
            "%s %s: %s dump of %s%s%s%s, priority %s, chunk size %d, delay %d ms, "
            "parallelism %d, throttle limits %s%s",
            request.id,
            request.state.value, request.kind.value, ", ".join(request.tables),
            f" ({request.key_count} keys)" if request.key_count else "",
            f" where {request.row_filter.describe()}" if request.row_filter else "",
            ", pruning" if request.prune else "",
            request.priority.value, request.chunk_size, request.delay_ms,
            request.parallelism, request.throttle.describe(),
            f"; client token {spec.client_token} was used before: this is that request, no "
            "second dump" if again else "")
        return request

    def submit_dump(
        self,
        scope: str,
        tables: str | Sequence[str] = (),
        keys: object = None,
        chunk_size: int | str = DEFAULT_CHUNK_SIZE,
        delay_ms: int | str = 0,
        client_token: str | None = None,
        parallelism: int | str = 1,
        where: object = None,
        from_key: object = None,
        to_key: object = None,
        throttle: Mapping[str, int | str] | None = None,
        priority: str | None = None,
    ) -> DumpRequest:
        """Queue a dump from separate values, each a value or its text (a rendered
        template): :func:`spec_of` builds the spec, :meth:`create` queues it.

        :param scope: ``"all"`` (every table of the worker's configuration), ``"tables"``
            (the tables given) or ``"keys"`` (some primary keys of one table).
        :param tables: Table names (``schema.table``; ``database.table`` for MySQL).
        :param keys: For scope ``"keys"``: a list, or its JSON text: ``[1, 2]`` for a
            one-column key, ``[[1, "a"], [2, "b"]]`` for a composite one.
        :param chunk_size: Rows per chunk SELECT (1 to 100,000); an int or its text.
        :param delay_ms: Pause between chunks, in milliseconds; an int or its text.
        :param client_token: Idempotency token: the same token gives the same request.
        :param parallelism: Chunk SELECTs per window of a table dump, each on a source
            connection of its own (1 to 8); an int or its text.
        :param where: A filtered dump's conditions, all of which a dumped row meets: a list
            (or its JSON text) of ``{"column": ..., "op": ..., "value": ...}`` (``"values":
            [...]`` for ``in`` and ``not in``, none for ``is null`` and ``is not null``), or
            one such condition. Not for scope ``"keys"``.
        :param from_key: The first primary key to dump (included), for scope ``"tables"``
            with one table: a value, a list of one value per key column, or their text.
        :param to_key: The last primary key to dump (included), like ``from_key``.
        :param throttle: Automatic throttling: limits by name (``max_chunk_ms``,
            ``max_active_sessions``, ``max_replica_lag_ms``, ``max_log_lag_mb``), each an
            int or its text; 0 or left out: off.
        :param priority: ``"urgent"``, ``"normal"`` or ``"background"``: the request's share
            of windows while other dumps run, and its place in the queue; None or empty:
            urgent for scope ``"keys"``, else normal.
        """
        return self.create(spec_of(scope, tables, keys, chunk_size=chunk_size,
                                   delay_ms=delay_ms, client_token=client_token,
                                   parallelism=parallelism, where=where, from_key=from_key,
                                   to_key=to_key, throttle=throttle, priority=priority))

    def get_request(self, request_id: str) -> DumpRequest:
        """The request; :class:`~dblog_worker.errors.CorruptRequest` if its record is
        malformed."""
        return self.state().get_request(request_id)

    def get_record(self, request_id: str) -> DumpRequest | MalformedRequest:
        """The request, or, if its record in Redis is malformed, what is wrong with it."""
        return self.state().get_record(request_id)

    def list_requests(self, active_only: bool = False) -> list[DumpRequest | MalformedRequest]:
        """Every request, oldest first; one whose record is malformed as a
        ``MalformedRequest`` (its ``error`` names the key and what is wrong)."""
        return self.state().list_records(active_only=active_only)

    def progress(self, request_id: str) -> dict[str, TableProgress]:
        """Per table: done, chunks, rows selected and emitted, keys missing."""
        return self.state().progress(request_id)

    def missing_keys(self, request_id: str) -> list[KeyTexts]:
        """Keys a primary-key dump did not find in the source."""
        return self.state().missing_keys(request_id)

    def pause(self, request_id: str) -> RequestState:
        """Pause a running dump (between chunks); returns the state it was in. The others
        go on."""
        return self._command(request_id, "pause")

    def resume(self, request_id: str) -> RequestState:
        """Resume a paused dump; returns the state it was in."""
        return self._command(request_id, "resume")

    def cancel(self, request_id: str) -> RequestState:
        """Cancel a dump that has not ended; returns the state it was in."""
        return self._command(request_id, "cancel")

    def _command(self, request_id: str, name: str) -> RequestState:
        previous = control.command(self.state(), request_id, name)
        self.log.info("%s: %s -> %s", request_id, previous.value,
                      COMMANDS[name][0].value)
        return previous

    def set_knobs(self, request_id: str, chunk_size: int | str | None = None,
                  delay_ms: int | str | None = None,
                  parallelism: int | str | None = None,
                  throttle: Mapping[str, int | str] | None = None,
                  priority: str | None = None) -> DumpRequest:
        """Change the chunk size, delay, parallelism, throttle limits and/or priority
        (those given; each a value or its text) of a dump that has not ended."""
        knobs = Knobs.of(
            chunk_size=None if chunk_size is None else as_int(chunk_size, "chunk size"),
            delay_ms=None if delay_ms is None else as_int(delay_ms, "delay"),
            parallelism=None if parallelism is None else as_int(parallelism, "parallelism"),
            throttle=as_throttle(throttle) or None, priority=priority or None)
        request = control.set_knobs(self.state(), request_id, knobs)
        self.log.info("%s", control.describe_knobs(request))
        return request


