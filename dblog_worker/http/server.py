"""The HTTP server of the worker: stdlib ``ThreadingHTTPServer`` in a daemon thread.

Each request goes through, in order: the request id (``X-Request-Id``, echoed or
made), the route, the bearer token (all routes but the public ones, when a token is
configured), the browser checks (cross-origin writes; without a token, a Host that is
not a loopback name: DNS rebinding), the method (405 with ``Allow``), the query, the
body (size 413, type 415, JSON 400), then the handler (``api.py``). Every answer but a
static file or the metrics is JSON; every error is ``{"error": "..."}``. How many
connections it keeps and how long it waits for a request: ``connections.py``.
"""

from __future__ import annotations

import contextlib
import errno
import hmac
import io
import ipaddress
import json
import logging
import re
import socket
import socketserver
import sys
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

import redis

from dblog_worker.config import Config
from dblog_worker.config_sections import HttpConfig
from dblog_worker.errors import ConfigError, DblogError, RequestRejected, TransientError
from dblog_worker.http import connections
from dblog_worker.http.api import (
    JSON,
    NO_BODY,
    ROUTES,
    Api,
    ApiError,
    Call,
    Reloaded,
    Response,
    Route,
    json_response,
)
from dblog_worker.http.connections import (
    IDLE_TIMEOUT_S,
    MAX_CONNECTIONS,
    AuthFailures,
    Clients,
    Connection,
    DeadlineReader,
    DeadlineWriter,
)
from dblog_worker.http.openapi import MAX_BODY_BYTES
from dblog_worker.telemetry import Telemetry

log = logging.getLogger(__name__)

MAX_QUERY_FIELDS = 20
DISCARD_MAX_BYTES = 65536  # a refused request's body up to this size is read, to keep alive
REQUEST_ID = re.compile(r"[A-Za-z0-9._:/+=-]{1,128}")
BUSY_BODY = b'{"error": "too many requests at once; try again later"}'
BUSY = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\nRetry-After: 1\r\nConnection: close\r\n\r\n%s"
        % (len(BUSY_BODY), BUSY_BODY))
TOO_SLOW_BODY = b'{"error": "the request was not sent in time; send it at once"}'
TOO_SLOW = (b"HTTP/1.1 408 Request Timeout\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\nConnection: close\r\n\r\n%s"
            % (len(TOO_SLOW_BODY), TOO_SLOW_BODY))
READ_METHODS = ("GET", "HEAD")
PROBES = ("/healthz", "/readyz")  # what a place kept for the probes answers


class _ClientGone(Exception):
    """The client closed the connection or stopped sending: nothing to answer."""


class ControlServer:
    """The HTTP API of one worker: bound at construction, served once started."""

    def __init__(self, config: Config, telemetry: Telemetry,
                 reload: Callable[[], Reloaded] | None = None) -> None:
        http = config.http
        self.api = Api(config, telemetry, lambda: self.url, reload)
        family = socket.AF_INET6 if ":" in http.host else socket.AF_INET
        try:
            self.server = _Server((http.host, http.port), family, self.api, http.token)
        except OSError as exc:
            self.api.close()
            raise ConfigError(bind_problem(http, exc)) from None
        self.thread = threading.Thread(target=self.server.serve_forever,
                                       kwargs={"poll_interval": 0.2}, name="dblog-http",
                                       daemon=True)

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        host = str(host)
        if host in ("0.0.0.0", "::"):  # noqa: S104 (naming the wildcard, not binding it)
            host = socket.gethostname()
        return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"

    def start(self) -> ControlServer:
        self.thread.start()
        log.info("HTTP API on %s%s", self.url,
                 "" if self.server.token else " (no token: loopback only)")
        return self

    def stop(self) -> None:
        self.server.stopping.set()
        if self.thread.is_alive():
            self.server.shutdown()
            self.thread.join(5)
        self.server.server_close()
        self.api.close()


def bind_problem(http: HttpConfig, exc: OSError) -> str:
    """Why the worker cannot listen on http.listen, and what to do."""
    where = f"http.listen {http.listen!r}"
    if exc.errno == errno.EADDRINUSE:
        return (f"{where}: port {http.port} is in use (another worker on this host? each "
                "needs its own port). Set http.listen to a free port, or http.enabled = false")
    if exc.errno == errno.EADDRNOTAVAIL:
        return f"{where}: {http.host} is not an address of this machine; fix http.listen"
    if exc.errno == errno.EACCES:
        return (f"{where}: not allowed to listen there (ports below 1024 need privileges); "
                "choose a port above 1023")
    if isinstance(exc, socket.gaierror):
        return f"{where}: cannot resolve {http.host!r} ({exc}); fix http.listen"
    return f"{where}: cannot listen: {exc}; fix http.listen, or set http.enabled = false"


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = MAX_CONNECTIONS

    def __init__(self, address: tuple[str, int], family: socket.AddressFamily, api: Api,
                 token: str | None) -> None:
        self.address_family = family
        self.api = api
        self.token = token
        self.clients = Clients()
        self.auth_failures = AuthFailures()
        self.stopping = threading.Event()  # ends the waits before wrong tokens' answers
        super().__init__(address, _Handler)

    def server_bind(self) -> None:
        # HTTPServer.server_bind looks the host's name up (socket.getfqdn): slow, unused.
        socketserver.TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name, self.server_port = str(host), int(port)

    def process_request(self, request: Any, client_address: Any) -> None:
        with contextlib.suppress(OSError):
            request.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF,
                               connections.SEND_BUFFER_BYTES)
        if self.clients.admit(request, str(client_address[0])) is None:
            with contextlib.suppress(OSError):
                request.sendall(BUSY)
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.clients.leave(request)
            raise

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A connection that broke mid-answer (the client left, or it was closed to make
        room) is no error of the server's: no traceback on stderr."""
        if isinstance(sys.exc_info()[1], OSError):
            log.debug("%s: connection lost while answering", client_address[0])
            return
        super().handle_error(request, client_address)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.clients.leave(request)


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"
    server_version = "dblog"
    sys_version = ""
    timeout = IDLE_TIMEOUT_S
    request_id = ""
    body_read = False  # the request's body was read (or it had none)
    connection_entry: Connection | None = None
    reader: DeadlineReader
    writer: DeadlineWriter
    pipelined = 0  # requests in a row that came before their predecessor's answer was sent

    def setup(self) -> None:
        super().setup()
        self.connection_entry = self.server.clients.get(self.connection)
        self.reader = DeadlineReader(self.connection)
        self.buffered = io.BufferedReader(self.reader)
        self.rfile = self.buffered
        self.writer = DeadlineWriter(self.connection)
        self.wfile = self.writer

    @property
    def reserved(self) -> bool:
        """This connection has a place kept for the probes: one of them, then close."""
        return self.connection_entry is not None and self.connection_entry.reserved

    def handle_one_request(self) -> None:
        """One request, read against its deadline; one sent too slowly is answered 408.
        An answer not read in time closes the connection."""
        self.reader.next_request()
        if self.connection_entry is not None:
            self.server.clients.waiting(self.connection_entry)
        super().handle_one_request()
        if self.writer.expired:
            self.close_connection = True
            log.debug("%s: an answer was not read within its deadline; closed",
                      self.client_address[0])
            return
        if self.reader.expired:
            self.close_connection = True
            with contextlib.suppress(OSError):
                self.writer.next_response()
                self.writer.write(TOO_SLOW)
            log.debug("%s: request not sent within its deadline; closed",
                      self.client_address[0])
            return
        if not self.close_connection:
            pending = self.reader.pending(self.buffered)
            self.pipelined = self.pipelined + 1 if pending else 0

    def do_GET(self) -> None:
        self._handle()

    def __getattr__(self, name: str) -> Any:
        """Every other method too (PUT, TRACE, ...): 405 on a route, 404 elsewhere."""
        if name.startswith("do_"):
            return self._handle
        raise AttributeError(name)

    # -- one request ----------------------------------------------------------------

    def _handle(self) -> None:
        started = time.monotonic()
        self.request_id = _request_id(self.headers.get("X-Request-Id"))
        self.body_read = False
        if self.reserved or self.pipelined >= connections.MAX_PIPELINED:
            self.close_connection = True  # answered, then closed
        try:
            if self.reserved and not (self.command in READ_METHODS
                                      and urlsplit(self.path).path in PROBES):
                self._discard_body()
                response = json_response(503, json.loads(BUSY_BODY), (("Retry-After", "1"),))
            else:
                response = self._respond()
        except _ClientGone:
            self.close_connection = True
            return
        if response.status == 401 and "Authorization" in self.headers and not self._late(
                self.server.auth_failures.failed(self.client_address[0])):
            self.close_connection = True
            return
        if not self.body_read and ("Content-Length" in self.headers
                                   or "Transfer-Encoding" in self.headers):
            self.close_connection = True  # its body would be taken for the next request
        self._send(response)
        path = urlsplit(self.path).path[:200]
        elapsed_ms = round((time.monotonic() - started) * 1000, 1)
        log.debug('%s "%s %s" %d %d %.1fms request_id=%s', self.client_address[0],
                  self.command, path, response.status, len(response.body), elapsed_ms,
                  self.request_id, extra={
                      "http_request_id": self.request_id, "http_method": self.command,
                      "http_path": path, "http_status": response.status,
                      "http_ms": elapsed_ms})

    def _late(self, delay: float) -> bool:
        """Wait ``delay`` before answering (a wrong token); False if, meanwhile, the
        connection was closed to make room (it is not being handled: it may be) or the
        server stops."""
        end = time.monotonic() + delay
        entry = self.connection_entry
        while (left := end - time.monotonic()) > 0:
            if entry is not None and entry.gone.wait(min(left, 0.2)):
                return False
            if entry is None:
                time.sleep(min(left, 0.2))
            if self.server.stopping.is_set():
                return False
        return True

    def _respond(self) -> Response:
        try:
            return self._route()
        except ApiError as exc:
            return json_response(exc.status, {"error": exc.message}, exc.headers)
        except RequestRejected as exc:
            return json_response(400, {"error": str(exc)})
        except TransientError as exc:
            return json_response(503, {"error": f"{exc}; try again"}, (("Retry-After", "1"),))
        except redis.RedisError as exc:
            return json_response(503, {"error": f"Redis failed: {exc}; try again"},
                                 (("Retry-After", "1"),))
        except DblogError as exc:
            log.error("HTTP %s %s (request_id=%s): %s", self.command,
                      urlsplit(self.path).path[:200], self.request_id, exc)
            return json_response(500, {"error": str(exc)})
        except (_ClientGone, TimeoutError, ConnectionError):
            raise _ClientGone() from None
        except Exception:
            log.exception("HTTP %s %s (request_id=%s) failed", self.command,
                          urlsplit(self.path).path[:200], self.request_id)
            return json_response(500, {"error": "internal error; the worker's log has it "
                                                f"(request_id={self.request_id})"})

    def _route(self) -> Response:
        parts = urlsplit(self.path)
        matches = [(route, found) for route in ROUTES
                   if (found := route.pattern.match(parts.path)) is not None]
        public = bool(matches) and all(route.public for route, _ in matches)
        if not public:
            self._check_token()
            self._check_browser()
        if not matches:
            self._discard_body()
            raise ApiError(404, f"no route {parts.path[:200]!r}; GET /api/v1/openapi.json "
                                "lists the routes")
        method = "GET" if self.command == "HEAD" else self.command
        chosen = [(route, found) for route, found in matches if route.method == method]
        if not chosen:
            self._discard_body()
            allowed = sorted({r.method for r, _ in matches}
                             | ({"HEAD"} if any(r.method == "GET" for r, _ in matches)
                                else set()))
            raise ApiError(405, f"{self.command} is not allowed on {parts.path[:200]}; allowed: "
                                f"{', '.join(allowed)}", (("Allow", ", ".join(allowed)),))
        route, found = chosen[0]
        body = self._body(route)
        query = {} if route.any_query else _query(parts.query, route)
        params = {name: unquote(value) for name, value in found.groupdict().items()}
        entry = self.connection_entry
        if entry is not None and not self.server.clients.handling(entry):
            raise _ClientGone()  # closed to make room while it was sent
        handler = getattr(self.server.api, route.handler)
        response: Response = handler(Call(params=params, query=query, body=body,
                                          token_given=self._token_given(),
                                          accept=self.headers.get("Accept", "")))
        return response

    # -- checks -------------------------------------------------------------------------

    def _token_given(self) -> bool:
        """The request carries the configured token (False when none is configured)."""
        token = self.server.token
        if token is None:
            return False
        scheme, _, given = self.headers.get("Authorization", "").partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(
            given.strip().encode("utf-8", "replace"), token.encode())

    def _check_token(self) -> None:
        if self.server.token is not None and not self._token_given():
            self._discard_body()
            raise ApiError(401, "missing or wrong token: send the header Authorization: "
                                "Bearer <token> (the token is in the environment variable "
                                "that http.token_env names)",
                           (("WWW-Authenticate", 'Bearer realm="dblog"'),))

    def _check_browser(self) -> None:
        """Refuse what a web page of another site makes a browser send here."""
        host = self.headers.get("Host")
        if self.server.token is None and host is not None and not _loopback_host(host):
            self._discard_body()
            raise ApiError(403, f"Host {host[:100]!r} is not a loopback name: without a token "
                                "this API answers only to localhost, 127.0.0.1 or [::1] "
                                "(configure http.token_env to use other names)")
        if self.command in READ_METHODS:
            return
        origin = self.headers.get("Origin")
        site = self.headers.get("Sec-Fetch-Site")
        cross = site is not None and site not in ("same-origin", "none")
        if origin is not None:
            cross = cross or (urlsplit(origin).netloc.lower() != (host or "").lower())
        if cross:
            self._discard_body()
            raise ApiError(403, "cross-origin requests that change state are refused; call "
                                "the API from the live view or a client, not another site")

    # -- the body ---------------------------------------------------------------------

    def _content_length(self) -> int:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            self.close_connection = True
            raise ApiError(411, "send the body with a Content-Length header (chunked bodies "
                                "are not read)")
        lengths = set(self.headers.get_all("Content-Length") or [])
        if not lengths:
            return 0
        text = lengths.pop().strip()
        if lengths or not re.fullmatch(r"[0-9]{1,15}", text):
            self.close_connection = True
            raise ApiError(400, "the Content-Length header is not one number")
        return int(text)

    def _discard_body(self) -> None:
        """Before a refusal: a body not read would be taken for the next request, so a
        small one is read and dropped, and after a large one the connection closes."""
        try:
            length = self._content_length()
        except ApiError:
            return  # it closes the connection
        if length > DISCARD_MAX_BYTES:
            self.close_connection = True
        else:
            self._read(length)

    def _body(self, route: Route) -> object:
        length = self._content_length()
        if length > MAX_BODY_BYTES:
            self.close_connection = True
            raise ApiError(413, _too_large(length))
        data = self._read(length)
        if not data:
            return NO_BODY
        if not route.body:
            raise ApiError(400, f"{route.method} {route.template} takes no body")
        content_type = self.headers.get_content_type()
        charset = self.headers.get_content_charset()
        if content_type != JSON or charset not in (None, "utf-8", "utf8"):
            raise ApiError(415, f"the body must be JSON, sent with Content-Type: {JSON} "
                                f"(got {self.headers.get('Content-Type', 'none')[:100]!r})")
        try:
            return json.loads(data.decode("utf-8"), parse_constant=_no_constant)
        except (UnicodeDecodeError, ValueError, RecursionError) as exc:
            raise ApiError(400, f"the body is not valid JSON: {exc}") from None

    def _read(self, length: int) -> bytes:
        chunks: list[bytes] = []
        left = length
        try:
            while left > 0:
                chunk = self.rfile.read(min(left, 65536))
                if not chunk:
                    raise _ClientGone()
                chunks.append(chunk)
                left -= len(chunk)
        except OSError:
            raise _ClientGone() from None
        self.body_read = True
        return b"".join(chunks)

    def handle_expect_100(self) -> bool:
        """A client that waits for 100 Continue learns of a body too large at once."""
        self.request_id = _request_id(self.headers.get("X-Request-Id"))
        try:
            length = self._content_length()
        except ApiError:
            length = 0  # the route's reading of the body answers
        if length > MAX_BODY_BYTES:
            self.close_connection = True
            self._send(json_response(413, {"error": _too_large(length)}))
            return False
        return super().handle_expect_100()

    # -- answers ------------------------------------------------------------------------

    def _send(self, response: Response) -> None:
        self.writer.next_response()
        self.send_response(response.status)
        headers = dict(response.headers)
        headers.setdefault("Cache-Control", "no-store")
        for name, value in (("Content-Type", response.content_type),
                            ("Content-Length", str(len(response.body))),
                            ("X-Request-Id", self.request_id),
                            ("X-Content-Type-Options", "nosniff"),
                            ("X-Frame-Options", "DENY"),
                            *headers.items()):
            self.send_header(name, value)
        if self.close_connection:
            self.send_header("Connection", "close")
        # end_headers without its own write: the head and the body in one write, not two
        # small ones (the second would wait for the client's delayed ACK: about 40 ms)
        buffered: list[bytes] = self._headers_buffer
        head = b"".join([*buffered, b"\r\n"])
        buffered.clear()
        self.wfile.write(head if self.command == "HEAD" else head + response.body)

    def send_error(self, code: int, message: str | None = None,
                   explain: str | None = None) -> None:
        """Errors of the HTTP layer (a bad request line, an unknown method): JSON too."""
        self.request_id = self.request_id or uuid.uuid4().hex
        self.close_connection = True
        if self.request_version == "HTTP/0.9":  # a request line it could not parse:
            self.request_version = "HTTP/1.0"  # answer with a status line all the same
        try:
            phrase = HTTPStatus(code).phrase
        except ValueError:
            phrase = "error"
        self._send(json_response(code, {"error": message or phrase}))

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        """Not the stdlib's access line: ``_handle`` logs each request once, with its id."""

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s %s", self.client_address[0], format % args)


def _request_id(given: str | None) -> str:
    if given is not None and REQUEST_ID.fullmatch(given):
        return given
    return uuid.uuid4().hex


def _query(text: str, route: Route) -> Mapping[str, str]:
    try:
        pairs = parse_qsl(text, keep_blank_values=True, strict_parsing=bool(text),
                          max_num_fields=MAX_QUERY_FIELDS)
    except ValueError:
        raise ApiError(400, "the query string is malformed") from None
    query: dict[str, str] = {}
    for name, value in pairs:
        if name not in route.query:
            allowed = ", ".join(route.query) or "none"
            raise ApiError(400, f"unknown query parameter {name[:100]!r}; allowed: {allowed}")
        if name in query:
            raise ApiError(400, f"query parameter {name!r} is given twice")
        query[name] = value
    return query


def _loopback_host(host: str) -> bool:
    name = host.strip().lower()
    if name.startswith("["):
        name = name[1:].partition("]")[0]
    elif name.count(":") == 1:
        name = name.partition(":")[0]
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def _too_large(length: int) -> str:
    return (f"the body has {length} bytes; at most {MAX_BODY_BYTES} are read (send long key "
            "lists in several requests)")


def _no_constant(name: str) -> object:
    raise ValueError(f"{name} is not a JSON number")
