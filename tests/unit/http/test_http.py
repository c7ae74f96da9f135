"""The HTTP API's pure parts: routes and their OpenAPI document, the checks of the server."""

from __future__ import annotations

import errno
import json
import socket
from typing import Any

import jsonschema
import pytest
from referencing import Registry
from referencing.jsonschema import DRAFT202012

from dblog_worker.config_sections import HttpConfig
from dblog_worker.control.commands import request_json
from dblog_worker.dump.requests import DumpKind, DumpRequest, RequestState, TableProgress
from dblog_worker.http.api import ROUTES, ApiError, Route
from dblog_worker.http.openapi import document
from dblog_worker.http.server import _loopback_host, _query, _request_id, bind_problem
from dblog_worker.telemetry import Telemetry

METHODS = {"get", "post", "patch", "put", "delete"}


def operations(doc: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(method.upper(), path): operation for path, item in doc["paths"].items()
            for method, operation in item.items() if method in METHODS}


@pytest.mark.parametrize("auth", [True, False])
def test_the_document_names_exactly_the_routes(auth: bool) -> None:
    doc = document(auth=auth)
    assert set(operations(doc)) == {(r.method, r.template) for r in ROUTES}
    for route in ROUTES:
        operation = operations(doc)[(route.method, route.template)]
        assert ("requestBody" in operation) == route.body, route
        assert (operation.get("security") == []) == route.public, route
        codes = set(operation["responses"])
        assert ("401" in codes) == (auth and not route.public), route
        assert {"400", "405", "413"} <= codes, route
        declared = {p["name"] for p in operation.get("parameters", []) if p["in"] == "query"}
        assert declared == set(route.query), route
        path_params = {p["name"] for p in operation.get("parameters", []) if p["in"] == "path"}
        assert path_params == set(route.pattern.groupindex), route
    assert ("securitySchemes" in doc["components"]) == auth
    json.dumps(doc)  # serializable as it is served


def test_the_schemas_are_valid_json_schema() -> None:
    doc = document(auth=True)
    for schema in doc["components"]["schemas"].values():
        jsonschema.Draft202012Validator.check_schema(schema)


def _validator(name: str) -> jsonschema.Draft202012Validator:
    """A validator of one component schema, its references resolved in the document."""
    resource = DRAFT202012.create_resource(document(auth=True))
    registry: Registry[Any] = Registry().with_resource("urn:dblog-openapi", resource)
    return jsonschema.Draft202012Validator(
        {"$ref": f"urn:dblog-openapi#/components/schemas/{name}"}, registry=registry)


def test_request_json_matches_its_schema() -> None:
    request = DumpRequest(id="dump-3", kind=DumpKind.KEYS, tables=("public.a",), chunk_size=10,
                          delay_ms=0, state=RequestState.RUNNING, created_at=1.5,
                          updated_at=2.5, key_count=2)
    progress = {"public.a": TableProgress("public.a", chunks=1, selected=2, rows=1, missing=1,
                                          next_key_index=2)}
    shown = {**request_json(request, progress), "missing_keys": [["7"]]}
    _validator("Request").validate(shown)
    _validator("ControlResult").validate({**shown, "previous_state": "paused"})
    _validator("RequestSummary").validate(request_json(request, {}))
    with pytest.raises(jsonschema.ValidationError):
        _validator("Request").validate({**shown, "state": "sleeping"})


def test_a_fresh_status_matches_its_schema() -> None:
    """What /api/v1/status sends: the telemetry's snapshot, the address, Redis's part."""
    status = {**Telemetry("shop", kind="postgresql").snapshot(), "http": "http://127.0.0.1:1",
              "redis": {"checkpoint": None, "checkpoint_error": None, "worker": {"pid": "1"},
                        "members": [{"holder": "h:1:ab", "role": "leader"}], "captured": {},
                        "excluded": {}, "error": None}}
    _validator("Status").validate(status)
    telemetry = Telemetry("shop", kind="postgresql")
    telemetry.tables({"captured": {"shop.a": "matches 'shop.*'"},
                      "excluded": {"shop.b": "matches 'shop.*', but it has no primary key"},
                      "missing": []})
    status["tables"] = telemetry.snapshot()["tables"]
    _validator("Status").validate(status)
    _validator("Feed").validate(Telemetry("shop", kind="postgresql").feed(0))


@pytest.mark.parametrize(
    ("body", "valid"),
    [
        ({"kind": "all"}, True),
        ({"kind": "tables", "tables": ["public.a"], "chunk_size": 5, "client_token": "t"}, True),
        ({"kind": "keys", "tables": ["public.a"], "keys": [1, "b", [1, "a"]]}, True),
        ({"kind": "all", "tables": ["public.a"]}, False),
        ({"kind": "tables"}, False),
        ({"kind": "keys", "tables": ["public.a", "public.b"], "keys": [1]}, False),
        ({"kind": "keys", "tables": ["public.a"], "keys": []}, False),
        ({"kind": "tables", "tables": ["public.a"], "chunk_size": 0}, False),
        ({"kind": "all", "client_token": None}, False),
        ({"kind": "all", "extra": 1}, False),
    ],
)
def test_create_request_schema(body: dict[str, Any], valid: bool) -> None:
    validator = _validator("CreateRequest")
    assert validator.is_valid(body) == valid


@pytest.mark.parametrize(
    ("template", "path", "params"),
    [
        ("/api/v1/requests/{id}", "/api/v1/requests/dump-1", {"id": "dump-1"}),
        ("/api/v1/requests/{id}", "/api/v1/requests/dump-1/pause", None),
        ("/api/v1/requests/{id}/pause", "/api/v1/requests/a.b/pause", {"id": "a.b"}),
        ("/live/{file}", "/live/app.js", {"file": "app.js"}),
        ("/live/{file}", "/live/../x", None),
        ("/", "/", {}),
        ("/", "/index.html", None),
    ],
)
def test_route_patterns(template: str, path: str, params: dict[str, str] | None) -> None:
    found = Route("GET", template, "x").pattern.match(path)
    assert (None if found is None else found.groupdict()) == params


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("localhost", True), ("localhost:8750", True), ("LOCALHOST", True),
        ("127.0.0.1:8750", True), ("127.1.2.3", True), ("[::1]:8750", True), ("[::1]", True),
        ("app.localhost:80", True),
        ("evil.example", False), ("evil.example:8750", False), ("10.0.0.1:8750", False),
        ("127.0.0.1.evil.example", False), ("[::2]:1", False), ("", False),
        ("localhost.evil.example", False),
    ],
)
def test_loopback_host(host: str, loopback: bool) -> None:
    assert _loopback_host(host) == loopback


def test_request_id_is_echoed_only_when_safe() -> None:
    assert _request_id("abc-123_x.y:z/w+=") == "abc-123_x.y:z/w+="
    for bad in (None, "", "a b", "a\r\nb", "x" * 129, "é"):
        made = _request_id(bad)
        assert made != bad and len(made) == 32 and made.isalnum()


def test_query() -> None:
    route = Route("GET", "/api/v1/feed", "feed", query=("after", "limit"))
    assert _query("", route) == {}
    assert _query("after=3&limit=", route) == {"after": "3", "limit": ""}
    for text, message in [("other=1", "unknown query parameter 'other'; allowed: after, limit"),
                          ("after=1&after=2", "query parameter 'after' is given twice"),
                          ("after", "the query string is malformed"),
                          ("&".join(f"after{i}=1" for i in range(30)),
                           "the query string is malformed")]:
        with pytest.raises(ApiError) as info:
            _query(text, route)
        assert (info.value.status, info.value.message) == (400, message)


@pytest.mark.parametrize(
    ("error", "message"),
    [
        (OSError(errno.EADDRINUSE, "Address already in use"),
         "http.listen '127.0.0.1:8750': port 8750 is in use (another worker on this host? "
         "each needs its own port). Set http.listen to a free port, or http.enabled = false"),
        (OSError(errno.EADDRNOTAVAIL, "Cannot assign"),
         "http.listen '127.0.0.1:8750': 127.0.0.1 is not an address of this machine; "
         "fix http.listen"),
        (OSError(errno.EACCES, "Permission denied"),
         "http.listen '127.0.0.1:8750': not allowed to listen there (ports below 1024 need "
         "privileges); choose a port above 1023"),
        (socket.gaierror(-2, "Name or service not known"),
         "http.listen '127.0.0.1:8750': cannot resolve '127.0.0.1'"),
    ],
)
def test_bind_problem(error: OSError, message: str) -> None:
    assert bind_problem(HttpConfig(), error).startswith(message)
