"""The routes of the HTTP API: what each one checks, does, and answers.

Every handler takes a :class:`Call` (path parameters, query, parsed JSON body) and
returns a :class:`Response`, or raises :class:`ApiError` for a refusal. The server
(``server.py``) does the HTTP: reading, auth, limits, and errors the handlers did not
map (``RequestRejected`` 400, a transient error 503).
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from dblog_worker import lifecycle
from dblog_worker.config import Config
from dblog_worker.control import (
    command,
    create_dump,
    entry_json,
    list_entries,
    set_knobs,
    show_json,
    show_record_json,
)
from dblog_worker.dump_spec import (
    KNOB_FIELDS,
    MAX_CLIENT_TOKEN,
    SPEC_FIELDS,
    DumpSpec,
    Knobs,
)
from dblog_worker.errors import (
    ConfigError,
    CorruptRequest,
    CorruptState,
    DblogError,
    RequestRejected,
    StateUnavailable,
    TransientError,
)
from dblog_worker.http import openapi
from dblog_worker.http.openapi import FEED_LIMIT
from dblog_worker.requests import (
    COMMANDS,
    DEFAULT_CHUNK_SIZE,
    REQUEST_ID,
    DumpRequest,
)
from dblog_worker.state import StateStore
from dblog_worker.telemetry import Telemetry
from dblog_worker.throttle import LIMITS, check_limit

log = logging.getLogger(__name__)
JSON = "application/json"
LANDING_SCAN_S = 60.0  # /metrics lists the landing zone at most this often
STATIC = Path(__file__).parent / "static"
CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".mjs": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".json": "application/json",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".ico": "image/x-icon",
    ".txt": "text/plain; charset=utf-8",
    ".map": "application/json",
}
STATIC_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9_.-]{0,99}")  # one file, never a path
CREATE_FIELDS = SPEC_FIELDS  # a request's body is a dump spec's JSON
NOT_READY = ("not ready (connecting, standing by, or failed); /readyz with the token, or "
             "GET /api/v1/status, says why")


@dataclass(frozen=True)
class Response:
    status: int
    body: bytes
    content_type: str = JSON
    headers: tuple[tuple[str, str], ...] = ()


def json_response(status: int, document: object, headers: tuple[tuple[str, str], ...] = ()
                  ) -> Response:
    return Response(status, json.dumps(document, ensure_ascii=False).encode(), JSON, headers)


class ApiError(Exception):
    """A refusal: the status and what was wrong and what to do."""

    def __init__(self, status: int, message: str,
                 headers: tuple[tuple[str, str], ...] = ()) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers


NO_BODY = object()  # a request without a body (JSON null is None)


@dataclass(frozen=True)
class Call:
    params: Mapping[str, str] = field(default_factory=dict)
    query: Mapping[str, str] = field(default_factory=dict)
    body: object = NO_BODY  # the parsed JSON body
    token_given: bool = False  # the request carries the configured token
    accept: str = ""  # the Accept header (/metrics negotiates its format)


Handler = Callable[[Call], Response]


@dataclass(frozen=True)
class Route:
    method: str
    template: str  # "/api/v1/requests/{id}"
    handler: str  # the name of the Api method
    public: bool = False  # no token needed
    body: bool = False  # takes a JSON body
    query: tuple[str, ...] = ()  # the query parameters it takes; others are refused
    any_query: bool = False  # the query is ignored (probes, static files: cache busters)

    @functools.cached_property
    def pattern(self) -> re.Pattern[str]:
        return re.compile("^" + re.sub(r"\\{(\w+)\\}", r"(?P<\1>[^/]+)",
                                       re.escape(self.template)) + "$")


ROUTES: tuple[Route, ...] = (
    Route("GET", "/healthz", "healthz", public=True, any_query=True),
    Route("GET", "/readyz", "readyz", public=True, any_query=True),
    Route("GET", "/api/v1/status", "status"),
    Route("GET", "/api/v1/requests", "list_requests", query=("active",)),
    Route("POST", "/api/v1/requests", "create_request", body=True),
    Route("GET", "/api/v1/requests/{id}", "get_request"),
    Route("PATCH", "/api/v1/requests/{id}", "set_knobs", body=True),
    *(Route("POST", f"/api/v1/requests/{{id}}/{name}", f"{name}_request", body=True)
      for name in COMMANDS),
    Route("GET", "/api/v1/landing", "landing", query=("table",)),
    Route("POST", "/api/v1/landing/compact", "landing_compact", body=True),
    Route("POST", "/api/v1/landing/retain", "landing_retain", body=True),
    Route("GET", "/api/v1/feed", "feed", query=("after", "limit")),
    Route("POST", "/api/v1/reload", "reload"),
    Route("GET", "/metrics", "metrics"),
    Route("GET", "/api/v1/openapi.json", "openapi"),
    Route("GET", "/", "index", public=True, any_query=True),
    Route("GET", "/live/{file}", "static_file", public=True, any_query=True),
)


class Reloaded(Protocol):
    """What a reload of the configuration answers (``dblog_worker.reload.ReloadResult``)."""

    @property
    def accepted(self) -> bool: ...

    def to_json(self) -> dict[str, object]: ...


class Api:
    """The handlers, over one source's Redis state and the worker's telemetry."""

    def __init__(self, config: Config, telemetry: Telemetry, url: Callable[[], str],
                 reload: Callable[[], Reloaded] | None = None) -> None:
        self.config = config  # the worker puts a reloaded configuration here
        self.telemetry = telemetry
        self.url = url
        self._reload = reload
        self.state = StateStore(config.redis_url, config.source.name, socket_timeout=2.0)
        self._scanning = threading.Lock()
        self._openapi = json.dumps(openapi.document(auth=config.http.token is not None),
                                   indent=1).encode()

    def close(self) -> None:
        self.state.close()

    # -- health ---------------------------------------------------------------

    def healthz(self, call: Call) -> Response:
        return json_response(200, {"status": "ok"})

    def readyz(self, call: Call) -> Response:
        """Ready or not; why not only with the token (the reason names hosts, users,
        the leader: not for whoever can reach the port)."""
        snapshot = self.telemetry.snapshot()
        if snapshot.get("connected"):
            return json_response(200, {"ready": True})
        if not call.token_given:
            why = NOT_READY
        elif snapshot.get("role") == "standby":
            leader = snapshot.get("leader") or {}
            why = (f"this worker stands by for source {self.config.source.name}: the lease is "
                   f"held by {leader.get('holder', '?')} (token {leader.get('token', '?')}, "
                   f"HTTP {leader.get('http') or '-'})")
        else:
            reason = snapshot.get("last_error") or "it is connecting"
            why = (f"the worker is not streaming the log of source "
                   f"{self.config.source.name}: {reason}")
        return json_response(503, {"ready": False, "error": why}, (("Retry-After", "1"),))

    def status(self, call: Call) -> Response:
        document: dict[str, Any] = self.telemetry.snapshot()
        redis: dict[str, Any] = {"checkpoint": None, "checkpoint_error": None, "worker": None,
                                 "members": [], "captured": {}, "excluded": {},
                                 "error": None}
        try:
            try:
                redis["checkpoint"] = self.state.checkpoint()
            except CorruptState as exc:
                redis["checkpoint_error"] = str(exc)
            redis["worker"] = self.state.status()
            redis["members"] = self.state.members()
            redis["captured"] = self.state.captured()
            redis["excluded"] = self.state.excluded()
        except StateUnavailable as exc:
            redis["error"] = str(exc)
        document["http"] = self.url()
        document["redis"] = redis
        return json_response(200, document)

    # -- dump requests ----------------------------------------------------------

    def list_requests(self, call: Call) -> Response:
        active = call.query.get("active", "false")
        if active not in ("true", "false"):
            raise ApiError(400, f"active must be true or false, got {active!r}")
        entries = list_entries(self.state, active_only=active == "true")
        return json_response(200, [entry_json(entry) for entry in entries])

    def create_request(self, call: Call) -> Response:
        body = _object(call.body, CREATE_FIELDS, required=True)
        keys = body.get("keys")
        if "keys" in body and not isinstance(keys, list):
            raise ApiError(400, "keys must be a non-empty JSON array such as [1, 2] or "
                                '[[1, "a"], [2, "b"]]')
        tables = body.get("tables")
        if "tables" in body and not isinstance(tables, list):
            raise ApiError(400, 'tables must be a non-empty list of "schema.table" names')
        client_token = body.get("client_token")
        if "client_token" in body and not isinstance(client_token, str):
            raise ApiError(400, f"client_token must be a string of 1 to {MAX_CLIENT_TOKEN} "
                                "characters")
        spec = DumpSpec.of(body.get("kind"), tables, keys,
                           chunk_size=_integer(body, "chunk_size", DEFAULT_CHUNK_SIZE),
                           delay_ms=_integer(body, "delay_ms", 0),
                           client_token=client_token,
                           parallelism=_integer(body, "parallelism", 1),
                           where=body.get("where"), from_key=body.get("from_key"),
                           to_key=body.get("to_key"), throttle=_throttle(body),
                           prune=body.get("prune", False), priority=_priority(body))
        known = self._existing(spec.client_token)
        request = create_dump(self.config, self.state, spec)
        created = known is None or known != request.id
        return json_response(201 if created else 200, show_json(self.state, request),
                             (("Location", f"/api/v1/requests/{request.id}"),))

    def _existing(self, client_token: str | None) -> str | None:
        """The request a client token made already, if any (only for the status code)."""
        return None if client_token is None else self.state.token_request(client_token)

    def get_request(self, call: Call) -> Response:
        request_id = self._request_id(call)
        try:
            return json_response(200, show_record_json(self.state, request_id))
        except RequestRejected:
            raise self._no_request(request_id) from None

    def set_knobs(self, call: Call) -> Response:
        body = _object(call.body, KNOB_FIELDS, required=True)
        if not body:
            raise ApiError(400, f"give {', '.join(KNOB_FIELDS[:-1])} and/or {KNOB_FIELDS[-1]}")
        throttle = _throttle(body)
        if throttle == {}:
            raise ApiError(400, "throttle must name at least one limit: "
                                f"{', '.join(LIMITS)} (0 turns one off)")
        knobs = Knobs.of(chunk_size=_integer(body, "chunk_size", None),
                         delay_ms=_integer(body, "delay_ms", None),
                         parallelism=_integer(body, "parallelism", None), throttle=throttle,
                         priority=_priority(body))
        request = self._request(call)
        try:
            request = set_knobs(self.state, request.id, knobs)
        except RequestRejected as exc:
            raise ApiError(409, str(exc)) from None
        return json_response(200, show_json(self.state, request))

    def pause_request(self, call: Call) -> Response:
        return self._command(call, "pause")

    def resume_request(self, call: Call) -> Response:
        return self._command(call, "resume")

    def cancel_request(self, call: Call) -> Response:
        return self._command(call, "cancel")

    def _command(self, call: Call, name: str) -> Response:
        _object(call.body, (), required=False)
        request = self._request(call)
        try:
            previous = command(self.state, request.id, name)
        except RequestRejected as exc:
            raise ApiError(409, str(exc)) from None
        document = show_json(self.state, self.state.get_request(request.id))
        document["previous_state"] = previous.value
        return json_response(200, document)

    def _request(self, call: Call) -> DumpRequest:
        """The request of the path; 404 if there is none, 409 if its record is malformed."""
        request_id = self._request_id(call)
        try:
            return self.state.get_request(request_id)
        except CorruptRequest as exc:
            raise ApiError(409, str(exc)) from None
        except RequestRejected:
            raise self._no_request(request_id) from None

    def _request_id(self, call: Call) -> str:
        request_id = call.params["id"]
        if not REQUEST_ID.fullmatch(request_id):
            raise ApiError(404, f"no dump request {request_id!r}: ids look like dump-12; "
                                "GET /api/v1/requests lists them")
        return request_id

    def _no_request(self, request_id: str) -> ApiError:
        return ApiError(404, f"no dump request {request_id!r} for source "
                             f"{self.config.source.name!r}; GET /api/v1/requests lists them")

    # -- telemetry ------------------------------------------------------------------

    # -- the landing zone's files ---------------------------------------------------

    def landing(self, call: Call) -> Response:
        """Files, bytes, the oldest unmerged position per table (also /metrics')."""
        tables = [call.query["table"]] if "table" in call.query else []
        with _landing_errors():
            rows = [r.as_dict() for r in lifecycle.landing_status(self.config, tables)]
        if not tables:
            self.telemetry.landing_scanned(rows)
        return json_response(200, {"source": self.config.source.name,
                                   "where": str(self.config.landing_path), "tables": rows})

    def _scan_landing(self) -> None:
        """List the landing zone for /metrics, at most once a LANDING_SCAN_S (a scrape
        that finds the store or the target unreachable shows the last figures)."""
        last = self.telemetry.landing_scanned_at()
        if last is not None and time.time() - last < LANDING_SCAN_S:
            return
        if not self._scanning.acquire(blocking=False):
            return
        try:
            rows = [r.as_dict() for r in lifecycle.landing_status(self.config)]
            self.telemetry.landing_scanned(rows)
        except (DblogError, OSError) as exc:
            log.warning("cannot list the landing zone for /metrics: %s", exc)
        finally:
            self._scanning.release()

    def landing_compact(self, call: Call) -> Response:
        return self._maintain(call, compact=True, retain=False)

    def landing_retain(self, call: Call) -> Response:
        return self._maintain(call, compact=False, retain=True)

    def _maintain(self, call: Call, *, compact: bool, retain: bool) -> Response:
        body = _object(call.body, ("tables", "dry_run"), required=False)
        tables = body.get("tables", [])
        if not isinstance(tables, list) or not all(isinstance(t, str) for t in tables):
            raise ApiError(400, 'tables must be a list of "schema.table" names')
        dry_run = body.get("dry_run", False)
        if not isinstance(dry_run, bool):
            raise ApiError(400, f"dry_run must be true or false, got {json.dumps(dry_run)}")
        with _landing_errors():
            report = lifecycle.maintain(self.config, compact=compact, retain=retain,
                                        dry_run=dry_run, tables=tables)
        return json_response(200, report.as_dict())

    def feed(self, call: Call) -> Response:
        after = _query_integer(call.query, "after", 0, 0, 2**63 - 1)
        limit = _query_integer(call.query, "limit", FEED_LIMIT, 1, FEED_LIMIT)
        return json_response(200, self.telemetry.feed(after, limit))

    def reload(self, call: Call) -> Response:
        """Read the worker's configuration file again (as SIGHUP does): 200 with what
        changed, or 409 with the one-line reason it was refused (nothing changed)."""
        if self._reload is None:
            raise ApiError(409, "reload refused: this server does not run in a worker")
        result = self._reload()
        return json_response(200 if result.accepted else 409, result.to_json())

    def metrics(self, call: Call) -> Response:
        self._scan_landing()
        body, content_type = self.telemetry.exposition(call.accept)
        return Response(200, body, content_type)

    def openapi(self, call: Call) -> Response:
        return Response(200, self._openapi, JSON)

    # -- the live view ------------------------------------------------------------

    def index(self, call: Call) -> Response:
        return _static("index.html")

    def static_file(self, call: Call) -> Response:
        return _static(call.params["file"])


def _static(name: str) -> Response:
    path = STATIC / name
    if not STATIC_NAME.fullmatch(name) or not path.is_file():
        raise ApiError(404, f"no file {name!r} in the live view")
    content_type = CONTENT_TYPES.get(path.suffix.lower(), "application/octet-stream")
    return Response(200, path.read_bytes(), content_type, (("Cache-Control", "no-cache"),))


@contextlib.contextmanager
def _landing_errors() -> Iterator[None]:
    """A configuration that cannot do it: 409; the store or a target unreachable: 503."""
    try:
        yield
    except ConfigError as exc:
        raise ApiError(409, str(exc)) from None
    except (OSError, TransientError) as exc:
        raise ApiError(503, f"the landing zone or a target is unreachable: {exc}") from None


def _object(body: object, known: Sequence[str], *, required: bool) -> dict[str, Any]:
    """The JSON body as an object with only ``known`` fields."""
    if body is NO_BODY:
        if required:
            raise ApiError(400, "this request needs a JSON object body "
                                "(Content-Type: application/json)")
        return {}
    if not isinstance(body, dict):
        got = "null" if body is None else type(body).__name__
        raise ApiError(400, f"the body must be a JSON object, got {got}")
    unknown = sorted(set(body) - set(known))
    if unknown:
        allowed = ", ".join(known) if known else "none (send no body, or {})"
        raise ApiError(400, f"unknown field(s) {', '.join(unknown)}; allowed: {allowed}")
    return body


def _integer(body: Mapping[str, Any], name: str, default: int | None) -> Any:
    if name not in body:
        return default
    value = body[name]
    if isinstance(value, bool) or not isinstance(value, int):
        raise ApiError(400, f"{name} must be an integer, got {json.dumps(value)}")
    return value


def _priority(body: Mapping[str, Any]) -> str | None:
    """The ``priority`` of a body: a name (checked by the spec or the knobs), or None when
    left out (the kind's when creating, unchanged in a PATCH)."""
    if "priority" not in body:
        return None
    value = body["priority"]
    if not isinstance(value, str):
        raise ApiError(400, f"priority must be one of urgent, normal, background, got "
                            f"{json.dumps(value)}")
    return value


def _throttle(body: Mapping[str, Any]) -> dict[str, int] | None:
    """The ``throttle`` object of a body: limits by name (each checked), or None."""
    if "throttle" not in body:
        return None
    given = body["throttle"]
    if not isinstance(given, dict):
        raise ApiError(400, f"throttle must be an object of limits ({', '.join(LIMITS)}), "
                            f"got {json.dumps(given)}")
    return {name: check_limit(name, value) for name, value in given.items()}


def _query_integer(query: Mapping[str, str], name: str, default: int, low: int,
                   high: int) -> int:
    text = query.get(name)
    if text is None:
        return default
    if not re.fullmatch(r"[0-9]{1,19}", text) or not low <= int(text) <= high:
        raise ApiError(400, f"{name} must be an integer from {low} to {high}, got {text!r}")
    return int(text)
