"""The OpenAPI 3.1 document of the HTTP API (served at ``/api/v1/openapi.json``).

Written by hand next to the routes (``api.ROUTES``); a unit test checks that both name
the same operations, and the schemathesis test checks the answers against it.
"""

from __future__ import annotations

from typing import Any

from dblog_worker import __version__
from dblog_worker.dump_spec import MAX_CLIENT_TOKEN
from dblog_worker.requests import (
    DEFAULT_CHUNK_SIZE,
    MAX_CHUNK_SIZE,
    MAX_DELAY_MS,
    MAX_KEYS,
    MAX_PARALLELISM,
    DumpKind,
    Priority,
    RequestState,
)
from dblog_worker.row_filter import MAX_CONDITIONS, MAX_VALUES, Op
from dblog_worker.throttle import LIMITS

Schema = dict[str, Any]

FEED_LIMIT = 500
MAX_BODY_BYTES = 4 * 1024 * 1024  # about 300,000 integer keys


def _ref(name: str) -> Schema:
    return {"$ref": f"#/components/schemas/{name}"}


def _nullable(type_name: str) -> Schema:
    return {"type": [type_name, "null"]}


TABLE_PROGRESS: Schema = {
    "type": "object",
    "description": "Progress of one table of a dump.",
    "properties": {
        "table": {"type": "string"},
        "done": {"type": "boolean"},
        "started": {"type": "boolean", "description": "its upper bound was captured"},
        "last_key": {"type": ["array", "null"], "items": {"type": "string"},
                     "description": "texts of the last completed key (table dumps)"},
        "upper_bound": {"type": ["array", "null"], "items": {"type": "string"},
                        "description": "the table's largest key when its dump started"},
        "next_key_index": {"type": "integer", "minimum": 0,
                           "description": "keys dumps: keys already done"},
        "chunks": {"type": "integer", "minimum": 0},
        "selected": {"type": "integer", "minimum": 0},
        "rows": {"type": "integer", "minimum": 0, "description": "emitted to the output"},
        "dropped": {"type": "integer", "minimum": 0,
                    "description": "removed by log events inside their window"},
        "missing": {"type": "integer", "minimum": 0, "description": "keys dumps: keys not found"},
        "prune_from": {**_nullable("string"),
                       "description": "pruning dumps: the position (48 hex digits) of the low "
                                      "watermark of the window that read the upper bound"},
    },
    "required": ["table", "done", "started", "chunks", "selected", "rows", "dropped",
                 "missing"],
}

REQUEST_FIELDS: Schema = {
    "id": {"type": "string", "examples": ["dump-12"]},
    "state": {"type": "string", "enum": [s.value for s in RequestState]},
    "kind": {"type": "string", "enum": [k.value for k in DumpKind]},
    "tables": {"type": "array", "items": {"type": "string"}},
    "chunk_size": {"type": "integer", "minimum": 1, "maximum": MAX_CHUNK_SIZE},
    "delay_ms": {"type": "integer", "minimum": 0, "maximum": MAX_DELAY_MS},
    "parallelism": {"type": "integer", "minimum": 1, "maximum": MAX_PARALLELISM},
    "throttle": _ref("Throttle"),
    "priority": _ref("Priority"),
    "key_count": {"type": "integer", "minimum": 0},
    "filter": {"oneOf": [{"type": "null"}, _ref("RowFilter")],
               "description": "a filtered dump's conditions and key range"},
    "prune": {"type": "boolean",
              "description": "a pruning dump: once each table is read, the rows no event "
                             "wrote since it began are removed downstream"},
    "created_at": {"type": "number", "description": "Unix time, seconds"},
    "updated_at": {"type": "number", "description": "Unix time, seconds"},
    "error": {**_nullable("string"), "description": "why it failed or was cancelled"},
    "progress": {"type": "object", "additionalProperties": _ref("TableProgress"),
                 "description": "per table, once the table's dump has started"},
}
REQUEST_REQUIRED = list(REQUEST_FIELDS)
KEY_VALUE: Schema = {"type": ["string", "number"]}
CHUNK_SIZE: Schema = {"type": "integer", "minimum": 1, "maximum": MAX_CHUNK_SIZE,
                      "default": DEFAULT_CHUNK_SIZE, "description": "rows per chunk"}
DELAY_MS: Schema = {"type": "integer", "minimum": 0, "maximum": MAX_DELAY_MS, "default": 0,
                    "description": "pause between chunks, milliseconds"}
PARALLELISM: Schema = {"type": "integer", "minimum": 1, "maximum": MAX_PARALLELISM, "default": 1,
                       "description": "chunk SELECTs per window of a table dump, each on a "
                                      "source connection of its own (a primary-key dump "
                                      "reads one batch per window)"}
PRUNE: Schema = {"type": "boolean", "default": False,
                 "description": "also remove, downstream, the rows the source no longer has "
                                "(whole tables: no filter)"}

KEY: Schema = {"oneOf": [KEY_VALUE, {"type": "array", "minItems": 1, "items": KEY_VALUE}]}
CONDITION: Schema = {
    "type": "object",
    "description": "column op value: one value, a list of values (in, not in), or none "
                   "(is null, is not null); values are read as the column's type",
    "properties": {
        "column": {"type": "string", "minLength": 1},
        "op": {"enum": [o.value for o in Op]},
        "value": KEY_VALUE,
        "values": {"type": "array", "minItems": 1, "maxItems": MAX_VALUES,
                   "items": KEY_VALUE},
    },
    "required": ["column", "op"],
    "additionalProperties": False,
    "examples": [{"column": "region", "op": "in", "values": ["EU", "US"]}],
}
FILTER_FIELDS: Schema = {
    "where": {"type": "array", "maxItems": MAX_CONDITIONS, "items": CONDITION,
              "description": "conditions every dumped row meets (AND); kind tables only"},
    "from_key": {**KEY, "description": "the first primary key of the range (included); "
                                       "kind tables with one table"},
    "to_key": {**KEY, "description": "the last primary key of the range (included)"},
}

SCHEMAS: dict[str, Schema] = {
    "Error": {
        "type": "object",
        "properties": {"error": {"type": "string",
                                 "description": "what was wrong and what to do"}},
        "required": ["error"],
    },
    "Health": {"type": "object", "properties": {"status": {"const": "ok"}},
               "required": ["status"]},
    "Ready": {"type": "object", "properties": {"ready": {"const": True}},
              "required": ["ready"], "additionalProperties": False},
    "NotReady": {
        "type": "object",
        "properties": {
            "ready": {"const": False},
            "error": {"type": "string", "description": (
                "why not, with the token: connecting, the failure, or the leader a standby "
                "waits for; without it only that the worker is not ready")},
        },
        "required": ["ready", "error"],
        "additionalProperties": False,
    },
    "TableProgress": TABLE_PROGRESS,
    "RowFilter": {
        "type": "object",
        "properties": {"where": {"type": "array", "items": CONDITION},
                       "from_key": {**_nullable("array"), "items": {"type": "string"}},
                       "to_key": {**_nullable("array"), "items": {"type": "string"}}},
        "required": ["where", "from_key", "to_key"],
    },
    "RequestSummary": {
        "type": "object",
        "description": "A dump request, as `dblog list --json` shows it.",
        "properties": REQUEST_FIELDS,
        "required": REQUEST_REQUIRED,
    },
    "Request": {
        "type": "object",
        "description": "A dump request, as `dblog show --json` shows it.",
        "properties": {
            **REQUEST_FIELDS,
            "missing_keys": {"type": "array", "items": {"type": "array",
                                                        "items": {"type": "string"}},
                             "description": "keys dumps only: the keys not found"},
        },
        "required": REQUEST_REQUIRED,
    },
    "MalformedRequest": {
        "type": "object",
        "description": "A request whose record in Redis (its hash, progress or keys) is "
                       "malformed: the worker fails it and runs the next one.",
        "properties": {
            "id": {"type": "string", "examples": ["dump-12"]},
            "malformed": {
                "type": "object",
                "properties": {
                    "key": {"type": "string", "description": "the Redis key"},
                    "field": {"type": "string",
                              "description": "its field (a hash) or #index (a list); "
                                             "empty for the whole key"},
                    "reason": {"type": "string", "description": "what is wrong"},
                },
                "required": ["key", "field", "reason"],
            },
            "error": {"type": "string", "description": "the whole message, with what to do"},
            "fields": {"type": "object", "additionalProperties": {"type": "string"},
                       "description": "what the request's hash holds"},
        },
        "required": ["id", "malformed", "error", "fields"],
    },
    "ControlResult": {
        "type": "object",
        "description": "The request after the command, and the state it was in before.",
        "properties": {
            **REQUEST_FIELDS,
            "missing_keys": {"type": "array", "items": {"type": "array",
                                                        "items": {"type": "string"}}},
            "previous_state": {"type": "string", "enum": [s.value for s in RequestState]},
        },
        "required": [*REQUEST_REQUIRED, "previous_state"],
    },
    "CreateRequest": {
        "description": "A dump: every captured table, some tables, or some keys of one "
                       "table. The same client_token again returns the request it made.",
        "oneOf": [_ref("AllDump"), _ref("TablesDump"), _ref("KeysDump")],
        "discriminator": {"propertyName": "kind", "mapping": {
            "all": "#/components/schemas/AllDump",
            "tables": "#/components/schemas/TablesDump",
            "keys": "#/components/schemas/KeysDump",
        }},
    },
    "AllDump": {
        "type": "object",
        "properties": {"kind": {"const": "all"}, "chunk_size": CHUNK_SIZE,
                       "delay_ms": DELAY_MS, "parallelism": PARALLELISM,
                       "throttle": _ref("Throttle"), "priority": _ref("Priority"),
                       "client_token": _ref("ClientToken"), "prune": PRUNE},
        "required": ["kind"],
        "additionalProperties": False,
    },
    "TablesDump": {
        "type": "object",
        "properties": {
            "kind": {"const": "tables"},
            "tables": {"type": "array", "minItems": 1,
                       "items": {"type": "string", "minLength": 1},
                       "examples": [["public.orders"]]},
            "chunk_size": CHUNK_SIZE,
            "delay_ms": DELAY_MS,
            "parallelism": PARALLELISM,
            "throttle": _ref("Throttle"),
            "priority": _ref("Priority"),
            "client_token": _ref("ClientToken"),
            "prune": PRUNE,
            **FILTER_FIELDS,
        },
        "required": ["kind", "tables"],
        "additionalProperties": False,
    },
    "KeysDump": {
        "type": "object",
        "properties": {
            "kind": {"const": "keys"},
            "tables": {"type": "array", "minItems": 1, "maxItems": 1,
                       "items": {"type": "string", "minLength": 1}},
            "keys": {
                "type": "array", "minItems": 1, "maxItems": MAX_KEYS,
                "description": "primary keys: [1, 2] for a one-column key, "
                               '[[1, "a"], [2, "b"]] for a composite one',
                "items": {"oneOf": [KEY_VALUE, {"type": "array", "minItems": 1,
                                                "items": KEY_VALUE}]},
            },
            "chunk_size": CHUNK_SIZE,
            "delay_ms": DELAY_MS,
            "parallelism": PARALLELISM,
            "throttle": _ref("Throttle"),
            "priority": _ref("Priority"),
            "client_token": _ref("ClientToken"),
        },
        "required": ["kind", "tables", "keys"],
        "additionalProperties": False,
    },
    "ClientToken": {"type": "string", "minLength": 1, "maxLength": MAX_CLIENT_TOKEN,
                    "description": "idempotency token: the same token, one request"},
    "Knobs": {
        "type": "object",
        "properties": {"chunk_size": CHUNK_SIZE, "delay_ms": DELAY_MS,
                       "parallelism": PARALLELISM, "throttle": _ref("Throttle"),
                       "priority": _ref("Priority")},
        "minProperties": 1,
        "additionalProperties": False,
    },
    "Priority": {
        "type": "string", "enum": [p.value for p in Priority],
        "description": "The request's share of the worker's windows while other dumps run, "
                       "and its place in the queue (then age): "
                       + ", ".join(f"{p.value} (weight {p.weight})" for p in Priority)
                       + ". Left out when creating: urgent for kind keys, normal otherwise. "
                       "Changed while the request runs by a PATCH.",
    },
    "Throttle": {
        "type": "object",
        "description": "Automatic throttling: over a limit, the next window waits longer (up "
                       "to 30 s beyond delay_ms); 0 or left out turns a limit off. In a "
                       "PATCH, only the limits given change.",
        "properties": {name: {"type": "integer", "minimum": 0, "maximum": high,
                              "default": 0, "description": f"{what}, {unit}"}
                       for name, (high, unit, what) in LIMITS.items()},
        "additionalProperties": False,
    },
    "NoBody": {"type": "object", "maxProperties": 0,
               "description": "an empty object, or no body at all"},
    "Status": {
        "type": "object",
        "description": "What the worker process is doing now (its telemetry), its HTTP "
                       "address, and what Redis holds: the saved checkpoint and the "
                       "worker's last report (the same as `dblog status --json`).",
        "properties": {
            "source": {"type": "string"},
            "connected": {"type": "boolean", "description": "a session streams the log"},
            "role": {"enum": ["starting", "leader", "standby", "stopped"],
                     "description": "leader: this worker holds the source's lease and "
                                    "streams; standby: another worker does"},
            "lease_token": {**_nullable("integer"),
                            "description": "the fencing token of the lease this worker holds"},
            "leader": {"type": ["object", "null"], "additionalProperties": {"type": "string"},
                       "description": "a standby's view of the lease: holder, token, host, "
                                      "pid, http of the leader"},
            "last_error": _nullable("string"),
            "position": {**_nullable("string"), "description": "last log position read"},
            "checkpoint": {**_nullable("string"),
                           "description": "the checkpoint this process saved last"},
            "checkpoint_age_s": _nullable("number"),
            "lag_bytes": _nullable("number"),
            "lag_s": {**_nullable("number"),
                      "description": "source commit to durable output, seconds"},
            "window": {"type": ["object", "null"],
                       "properties": {"table": {"type": "string"},
                                      "dump_id": {"type": "string"},
                                      "opened_at": {"type": "number"}}},
            "active_requests": {"type": "array", "items": {"type": "string"},
                                "description": "the dump requests this worker runs, in "
                                               "queue order (priority, then age)"},
            "active_request": {**_nullable("string"),
                               "description": "the first of active_requests"},
            "events_per_s": {"type": "number"},
            "uptime_s": {"type": "number"},
            "reconnects": {"type": "integer", "minimum": 0},
            "dumps": {"type": "array", "items": {"type": "object"},
                      "description": "each running dump: request_id, state, priority, "
                                     "waiting (why it reads nothing, or null), throttle, "
                                     "per-table progress and eta_s"},
            "dump": {"type": ["object", "null"], "description": "the first of dumps"},
            "tables": {**_ref("Tables"),
                       "description": "the captured tables (empty before the first session)"},
            "http": {"type": "string", "examples": ["http://127.0.0.1:8750"]},
            "redis": {
                "type": "object",
                "properties": {
                    "checkpoint": {**_nullable("string"),
                                   "description": "the checkpoint saved in Redis"},
                    "checkpoint_error": {**_nullable("string"),
                                         "description": "set when the saved checkpoint is "
                                                        "malformed: the key, what is wrong, "
                                                        "what to do"},
                    "worker": {"type": ["object", "null"],
                               "additionalProperties": {"type": "string"},
                               "description": "the worker's last report"},
                    "members": {"type": "array",
                                "items": {"type": "object",
                                          "additionalProperties": {"type": "string"}},
                                "description": "every worker of the source seen lately, "
                                               "leader first: holder, role, host, pid, http, "
                                               "token, updated_at"},
                    "captured": {"type": "object", "additionalProperties": {"type": "object"},
                                 "description": "the captured tables as the leader recorded "
                                                "them: table -> why, since, joined (while "
                                                "capture ran), dump (queued for it)"},
                    "excluded": {"type": "object", "additionalProperties": {"type": "string"},
                                 "description": "tables a pattern matched that are not "
                                                "captured, and why"},
                    "error": {**_nullable("string"),
                              "description": "set when Redis is unreachable"},
                },
                "required": ["checkpoint", "checkpoint_error", "worker", "members", "captured",
                             "excluded", "error"],
            },
        },
        "required": ["source", "connected", "role", "lease_token", "leader", "last_error",
                     "position", "checkpoint",
                     "checkpoint_age_s", "lag_bytes", "lag_s", "window", "active_requests",
                     "active_request", "events_per_s", "uptime_s", "reconnects", "dumps",
                     "dump", "http", "redis"],
    },
    "Reloaded": {
        "type": "object",
        "description": "A reload of the configuration file that was taken: a new session "
                       "starts with it (the lease kept).",
        "properties": {
            "reloaded": {"const": True},
            "changed": {"type": "array", "items": {"type": "string"},
                        "description": "the options that changed (none: the file is as it "
                                       "was)"},
            "notes": {"type": "array", "items": {"type": "string"},
                      "description": "what the user must do, such as dumping tables whose "
                                     "column rules changed"},
        },
        "required": ["reloaded", "changed", "notes"],
    },
    "Tables": {
        "type": "object",
        "description": "What source.tables captures now (table -> why: the name, or the "
                       "pattern that matched) and what its patterns matched but it leaves "
                       "out (table -> why not).",
        "properties": {
            "captured": {"type": "object", "additionalProperties": {"type": "string"}},
            "excluded": {"type": "object", "additionalProperties": {"type": "string"}},
            "missing": {"type": "array", "items": {"type": "string"},
                        "description": "tables named in source.tables that do not exist"},
        },
    },
    "LandingTable": {
        "type": "object",
        "properties": {
            "table": {"type": "string"},
            "files": {"type": "integer", "minimum": 0,
                      "description": "segment files, compacted runs and replaced files too"},
            "bytes": {"type": "integer", "minimum": 0},
            "active_files": {"type": "integer", "minimum": 0,
                             "description": "the files readers use"},
            "first_segment": {"type": "integer", "minimum": 0},
            "last_segment": {"type": "integer", "minimum": 0},
            "merged_segment": {"type": ["integer", "null"],
                               "description": "every target merged up to this segment "
                                              "(null: no target configured)"},
            "oldest_unmerged": {"type": "string",
                                "description": "the first position some target has not "
                                               "merged (empty: none)"},
            "oldest_unmerged_age_s": {"type": ["number", "null"]},
            "error": {"type": "string"},
        },
        "required": ["table", "files", "bytes", "active_files", "first_segment",
                     "last_segment", "merged_segment", "oldest_unmerged",
                     "oldest_unmerged_age_s", "error"],
    },
    "Landing": {
        "type": "object",
        "properties": {"source": {"type": "string"},
                       "where": {"type": "string", "description": "a folder or s3://..."},
                       "tables": {"type": "array", "items": {"$ref":
                                                             "#/components/schemas/LandingTable"}}},
        "required": ["source", "where", "tables"],
    },
    "Maintain": {
        "type": "object",
        "properties": {"tables": {"type": "array", "items": {"type": "string"},
                                  "description": "default: every landed table"},
                       "dry_run": {"type": "boolean", "default": False,
                                   "description": "list what would be written and removed"}},
        "additionalProperties": False,
    },
    "MaintenanceReport": {
        "type": "object",
        "properties": {"ok": {"type": "boolean"}, "dry_run": {"type": "boolean"},
                       "compact": {"type": "boolean"}, "retain": {"type": "boolean"},
                       "tables": {"type": "array", "items": {"type": "object"},
                                  "description": "per table: the runs compacted, the files "
                                                 "removed (location, bytes), or an error"}},
        "required": ["ok", "dry_run", "compact", "retain", "tables"],
    },
    "Feed": {
        "type": "object",
        "properties": {
            "next": {"type": "integer", "minimum": 0,
                     "description": "pass as after= to get what came since"},
            "events": {"type": "array", "items": {
                "type": "object",
                "properties": {"seq": {"type": "integer"}, "ts": {"type": "number"},
                               "type": {"type": "string"}},
                "required": ["seq", "ts", "type"],
            }},
        },
        "required": ["next", "events"],
    },
}

ERRORS = {
    400: "Bad input: malformed JSON, a wrong type, an unknown field, a value out of range, "
         "a table that is not captured, keys that do not fit the key",
    401: "The bearer token is missing or wrong",
    403: "A cross-origin request from a browser, or (without a token) a Host header that is "
         "not a loopback name",
    404: "No such request, file or route",
    405: "The route does not take this method (see the Allow header)",
    409: "The request's state does not allow this (e.g. resume a request that is not paused), "
         "or its record in Redis is malformed; a reload refused (the reason, one line)",
    411: "A chunked body: send a Content-Length instead",
    413: f"The body is larger than {MAX_BODY_BYTES // 1024 // 1024} MiB",
    415: "The body is not application/json",
    503: "Redis or the source database is unreachable; try again",
}


def _json(schema: Schema, description: str) -> dict[str, Any]:
    return {"description": description, "headers": _headers(),
            "content": {"application/json": {"schema": schema}}}


def _headers() -> dict[str, Any]:
    return {"X-Request-Id": {"$ref": "#/components/headers/RequestId"}}


def _errors(*codes: int) -> dict[str, Any]:
    return {str(code): {"$ref": f"#/components/responses/E{code}"} for code in codes}


def _operation(summary: str, responses: dict[str, Any], *, public: bool, auth: bool,
               errors: tuple[int, ...] = (), **extra: Any) -> dict[str, Any]:
    operation: dict[str, Any] = {"summary": summary, **extra}
    codes = (*errors, 400, 405, 413) if public else (*errors, 400, 403, 405, 413)
    if auth and not public:
        codes = (*codes, 401)
    operation["responses"] = {**responses, **_errors(*sorted(set(codes)))}
    if public:
        operation["security"] = []
    return operation


def _id() -> dict[str, Any]:
    return {"name": "id", "in": "path", "required": True, "schema": {"type": "string"},
            "description": "the request id, e.g. dump-12"}


def _body(schema: Schema, required: bool = True) -> dict[str, Any]:
    return {"required": required, "content": {"application/json": {"schema": schema}}}


def document(*, auth: bool) -> dict[str, Any]:
    """The OpenAPI document; ``auth``: a token is configured (every route but the public
    ones needs ``Authorization: Bearer <token>``)."""
    with_body = (400, 404, 409, 411, 413, 415, 503)
    request_ok = _json(_ref("Request"), "The request with its progress")

    def command(name: str, what: str) -> dict[str, Any]:
        return {"post": _operation(
            f"{name.capitalize()} a dump request: {what}",
            {"200": _json(_ref("ControlResult"), "The request after the command")},
            public=False, errors=with_body, parameters=[_id()],
            requestBody=_body(_ref("NoBody"), required=False), auth=auth)}

    paths: dict[str, Any] = {
        "/healthz": {"get": _operation(
            "Liveness: the process serves HTTP",
            {"200": _json(_ref("Health"), "The process is alive")}, public=True, auth=auth)},
        "/readyz": {"get": _operation(
            "Readiness: the worker streams the source's log",
            {"200": _json(_ref("Ready"), "Streaming"),
             "503": _json(_ref("NotReady"), "Not streaming (connecting, standing by, or a "
                                            "failure); why only with the token")},
            public=True, auth=auth,
            description="Public: without the token it says ready or not and nothing "
                        "else. With the token (when one is configured), a 503 says why: "
                        "the failure, or the leader a standby waits for.")},
        "/api/v1/status": {"get": _operation(
            "What the worker is doing, and what Redis holds",
            {"200": _json(_ref("Status"), "The status")}, public=False, auth=auth)},
        "/api/v1/requests": {
            "get": _operation(
                "List dump requests, oldest first",
                {"200": _json({"type": "array", "items": {"oneOf": [
                    _ref("RequestSummary"), _ref("MalformedRequest")]}},
                              "The requests (a malformed one as MalformedRequest)")},
                public=False, errors=(503,), parameters=[{
                    "name": "active", "in": "query", "required": False,
                    "schema": {"type": "string", "enum": ["true", "false"],
                               "default": "false"},
                    "description": "true: only requests that have not ended"}], auth=auth),
            "post": _operation(
                "Request a dump (checked against the source first)",
                {"201": {**_json(_ref("Request"), "Queued"),
                         "headers": {**_headers(), "Location": {
                             "schema": {"type": "string"},
                             "description": "/api/v1/requests/{id}"}}},
                 "200": _json(_ref("Request"),
                              "The request made earlier with the same client_token")},
                public=False, errors=(400, 411, 413, 415, 503),
                requestBody=_body(_ref("CreateRequest")), auth=auth),
        },
        "/api/v1/requests/{id}": {
            "get": _operation("One dump request with its per-table progress",
                              {"200": _json({"oneOf": [_ref("Request"),
                                                       _ref("MalformedRequest")]},
                                            "The request with its progress, or what is "
                                            "malformed in its record")},
                              public=False, errors=(404, 503), parameters=[_id()],
                              auth=auth),
            "patch": _operation(
                "Change the chunk size, delay, parallelism, throttle limits and/or priority of "
                "a request that has not ended",
                {"200": request_ok}, public=False, errors=with_body, parameters=[_id()],
                requestBody=_body(_ref("Knobs")), auth=auth),
        },
        "/api/v1/requests/{id}/pause": command("pause", "between chunks (running only)"),
        "/api/v1/requests/{id}/resume": command("resume", "a paused request"),
        "/api/v1/requests/{id}/cancel": command("cancel", "a request that has not ended"),
        "/api/v1/landing": {"get": _operation(
            "The landing zone's files per table: files, bytes, how far every target merged, "
            "the oldest unmerged position",
            {"200": _json(_ref("Landing"), "The figures (also in /metrics)")},
            public=False, errors=(409, 503), parameters=[{
                "name": "table", "in": "query", "required": False,
                "schema": {"type": "string"}, "description": "one table only"}], auth=auth)},
        "/api/v1/landing/compact": {"post": _operation(
            "Compact small segments into large ones (landing.compaction); remove the files "
            "compacted runs replaced a grace period ago",
            {"200": _json(_ref("MaintenanceReport"), "What was done, or would be")},
            public=False, errors=(400, 409, 411, 413, 415, 503),
            requestBody=_body(_ref("Maintain"), required=False), auth=auth)},
        "/api/v1/landing/retain": {"post": _operation(
            "Remove segments every target merged that landed longer ago than "
            "landing.retention.keep_h (never a table's newest)",
            {"200": _json(_ref("MaintenanceReport"), "What was removed, or would be")},
            public=False, errors=(400, 409, 411, 413, 415, 503),
            requestBody=_body(_ref("Maintain"), required=False), auth=auth)},
        "/api/v1/feed": {"get": _operation(
            "Recent events of the worker (windows, flushes, dumps, errors), after a sequence "
            "number",
            {"200": _json(_ref("Feed"), "Events with seq > after, oldest first")},
            public=False, parameters=[
                {"name": "after", "in": "query", "required": False,
                 "schema": {"type": "integer", "minimum": 0, "maximum": 2**63 - 1,
                            "default": 0}},
                {"name": "limit", "in": "query", "required": False,
                 "schema": {"type": "integer", "minimum": 1, "maximum": FEED_LIMIT,
                            "default": FEED_LIMIT}}], auth=auth)},
        "/api/v1/reload": {"post": _operation(
            "Read the worker's configuration file again (as SIGHUP does). What may change "
            "without a restart: source.tables, exclude_tables, dump_new_tables, "
            "rescan_interval_s, [source.columns], the [landing] and [worker] timings; the "
            "new configuration is checked against the source first. Anything else is refused "
            "(409) with the one-line reason, and nothing changes",
            {"200": _json(_ref("Reloaded"), "Taken: a new session starts with it")},
            public=False, errors=(409, 503), auth=auth)},
        "/metrics": {"get": _operation(
            "Prometheus metrics: the text format 0.0.4, or OpenMetrics 1.0 when the Accept "
            "header asks for application/openmetrics-text",
            {"200": {"description": "The metrics", "headers": _headers(),
                     "content": {"text/plain": {"schema": {"type": "string"}},
                                 "application/openmetrics-text": {
                                     "schema": {"type": "string"}}}}},
            public=False, auth=auth)},
        "/api/v1/openapi.json": {"get": _operation(
            "This document", {"200": _json({"type": "object"}, "OpenAPI 3.1")},
            public=False, auth=auth)},
        "/": {"get": _operation(
            "The live view (HTML; the token goes in the URL fragment: /#token=...)",
            {"200": {"description": "The page", "headers": _headers(),
                     "content": {"text/html": {"schema": {"type": "string"}}}}},
            public=True, errors=(404,), auth=auth)},
        "/live/{file}": {"get": _operation(
            "A file of the live view (script, style sheet, image)",
            {"200": {"description": "The file", "headers": _headers(),
                     "content": {"*/*": {"schema": {"type": "string"}}}}},
            public=True, errors=(404,),
            parameters=[{"name": "file", "in": "path", "required": True,
                         "schema": {"type": "string"}}], auth=auth)},
    }
    components: dict[str, Any] = {
        "schemas": SCHEMAS,
        "headers": {"RequestId": {
            "description": "The request's X-Request-Id, or a new one; also in the access log",
            "schema": {"type": "string"}}},
        "responses": {f"E{code}": _json(_ref("Error"), text) for code, text in ERRORS.items()},
    }
    document: dict[str, Any] = {
        "openapi": "3.1.0",
        "info": {
            "title": "dblog worker HTTP API",
            "version": __version__,
            "description": "Status, dump requests and their control, metrics and a live "
                           "feed of one dblog capture worker (one source database). "
                           "Errors are {\"error\": \"...\"}. See docs/http.md.",
        },
        "paths": paths,
        "components": components,
    }
    if auth:
        components["securitySchemes"] = {"bearer": {
            "type": "http", "scheme": "bearer",
            "description": "the token in the environment variable http.token_env names"}}
        document["security"] = [{"bearer": []}]
    return document
