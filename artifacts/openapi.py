"""The HTTP API as an OpenAPI 3.1 document written by hand from PROTOCOL.md (GET /openapi.json).

Written by hand rather than generated from the views because the views are plain Django functions
rendering orjson (no DRF serializers on the hot paths), and because the contract is PROTOCOL.md,
not whatever the code happens to do: tests/fuzz/test_openapi_fuzz.py runs schemathesis against a
live relay with this document, so a view drifting from the contract fails there.

Every answer, errors included, carries the CORS headers (PROTOCOL.md section 3): the document
declares them on every response so the fuzzer checks them too.
"""

from __future__ import annotations

import copy
from functools import cache
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse

from buzzrelay.http import json_error, json_response, public_netloc, public_scheme

JSON = "application/json"
NOSTR_JSON = "application/nostr+json"
HEX64 = "^[0-9a-f]{64}$"
UUID = "^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"

Schema = dict[str, Any]


def _ref(name: str) -> Schema:
    return {"$ref": f"#/components/schemas/{name}"}


def _error_schema(*codes: str) -> Schema:
    """An error body whose `error` is one of `codes` (any lowercase code when none are named)."""
    code: Schema = {"type": "string", "enum": list(codes)} if codes else {
        "type": "string", "pattern": "^[a-z][a-z_]*$"
    }
    return {
        "type": "object",
        "required": ["error"],
        "properties": {"error": code, "message": {"type": "string"}},
        "additionalProperties": False,
    }


_CORS = {
    name: {"$ref": f"#/components/headers/{ref}"}
    for name, ref in (
        ("Access-Control-Allow-Origin", "CorsAllowOrigin"),
        ("Access-Control-Allow-Headers", "CorsAllowHeaders"),
        ("Access-Control-Allow-Methods", "CorsAllowMethods"),
        ("Access-Control-Expose-Headers", "CorsExposeHeaders"),
    )
}


def _response(
    description: str,
    schema: Schema | None = None,
    *,
    media_type: str = JSON,
    headers: dict[str, Schema] | None = None,
) -> Schema:
    answer: Schema = {"description": description, "headers": {**_CORS, **(headers or {})}}
    if schema is not None:
        answer["content"] = {media_type: {"schema": schema}}
    return answer


def _error(description: str, *codes: str, headers: dict[str, Schema] | None = None) -> Schema:
    return _response(description, _error_schema(*codes), headers=headers)


_RETRY_AFTER = {"Retry-After": {"$ref": "#/components/headers/RetryAfter"}}
_RETRY_AFTER_OPTIONAL = {"Retry-After": {"$ref": "#/components/headers/RetryAfterOptional"}}

# Answers any endpoint may give: the community lookup and the database sit in front of all of
# them (PROTOCOL.md section 3, in the order the relay checks).
_COMMON_ERRORS = {
    "404": _error("No community is served at the request's host.", "unknown_community"),
    "503": _error(
        "The database is unavailable or the request ran past its work budget; retry later.",
        "database_unavailable", "budget_exceeded",
        headers=_RETRY_AFTER_OPTIONAL,
    ),
}

_AUTHENTICATED_ERRORS = {
    "401": _error(
        "NIP-98 authentication failed: missing, malformed, stale, replayed, signed for another"
        " URL, method or body.",
        "unauthorized",
        headers={"WWW-Authenticate": {"$ref": "#/components/headers/WwwAuthenticate"}},
    ),
    "413": _error("The body is over 64 KiB.", "payload_too_large"),
    "429": _error("The per-pubkey or per-address rate limit was hit.", headers=_RETRY_AFTER),
}


def _preflight(path: str) -> Schema:
    return {
        "summary": f"CORS preflight for {path}",
        "description": "Answered without authentication and without a community lookup.",
        "security": [],
        "responses": {"204": _response("Preflight accepted.")},
    }


def _nip11_operation(path: str) -> Schema:
    root = path == "/"
    content: Schema = {NOSTR_JSON: {"schema": _ref("RelayInformation")}}
    if root:
        content["text/html"] = {"schema": {"type": "string"}}
    return {
        "summary": "Relay information document (NIP-11)" + (", or a page" if root else ""),
        "description": (
            "The NIP-11 document of the request host's community: `/info` always, `/` when"
            " `Accept` names `application/nostr+json` (q-values honoured; otherwise `/` answers"
            " an HTML page). `artifacts.incremental` is advertised only while the deployment is"
            " ready (PROTOCOL.md section 7) and the community has artifacts enabled. The"
            " WebSocket at `/` (NIP-01, NIP-42) is not described here."
        ),
        "operationId": "relayRoot" if root else "relayInfo",
        "security": [],
        "parameters": [
            {
                "name": "Accept",
                "in": "header",
                "required": False,
                "schema": {
                    "type": "string",
                    "enum": [NOSTR_JSON, f"{NOSTR_JSON}, {JSON}", "text/html", "*/*"],
                },
            }
        ],
        "responses": {
            "200": {
                "description": "The NIP-11 document" + (" or the relay's page." if root else "."),
                "headers": _CORS,
                "content": content,
            },
            "405": _error("Only GET and HEAD.", "method_not_allowed"),
            **_COMMON_ERRORS,
        },
    }


def _components() -> Schema:
    max_body = settings.RELAY_MAX_BODY_BYTES
    tag = {"type": "array", "items": {"type": "string", "maxLength": 4096}, "minItems": 1}
    tag_values = {
        "type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 256,
    }
    common_filter_props: Schema = {
        "kinds": {
            "type": "array", "items": {"const": 45010}, "minItems": 1, "maxItems": 1,
            "description": "Optional; must be `[45010]`.",
        },
        "limit": {"type": "integer", "minimum": 1, "maximum": 1000, "default": 100},
    }
    return {
        "securitySchemes": {
            "nip98": {
                "type": "apiKey",
                "in": "header",
                "name": "Authorization",
                "description": (
                    "NIP-98: `Nostr <base64 of a signed kind-27235 event>`, at most 2048 bytes."
                    " Tags: `u` = the absolute request URL, `method` = the request method,"
                    " `payload` = hex sha256 of the exact body bytes (required with a body);"
                    " `created_at` within 60 s of the relay's clock. Each event id is accepted"
                    " once: add a `nonce` tag to vary identical requests."
                ),
            }
        },
        "headers": {
            "CorsAllowOrigin": {"required": True, "schema": {"const": "*"}},
            "CorsAllowHeaders": {
                "required": True,
                "schema": {"type": "string", "pattern": "(?i)authorization"},
            },
            "CorsAllowMethods": {
                "required": True, "schema": {"type": "string", "pattern": "POST"},
            },
            "CorsExposeHeaders": {
                "required": True, "schema": {"type": "string", "pattern": "(?i)retry-after"},
            },
            "RetryAfter": {
                "required": True,
                "description": "Seconds to wait before retrying.",
                "schema": {"type": "string", "pattern": "^[0-9]+$"},
            },
            "RetryAfterOptional": {
                "required": False,
                "description": "Seconds to wait before retrying.",
                "schema": {"type": "string", "pattern": "^[0-9]+$"},
            },
            "WwwAuthenticate": {
                "required": True, "schema": {"type": "string", "pattern": "^Nostr"},
            },
        },
        "schemas": {
            "Event": {
                "description": (
                    "A signed Nostr event (NIP-01). The relay recomputes `id`, checks the BIP-340"
                    f" signature and the limits: at most {max_body} bytes, 256 tags, tag values"
                    " of 4096 bytes, `created_at` within [now - 1 year, now + 15 min]."
                ),
                "type": "object",
                "required": ["id", "pubkey", "created_at", "kind", "tags", "content", "sig"],
                "properties": {
                    "id": {"type": "string", "pattern": HEX64},
                    "pubkey": {"type": "string", "pattern": HEX64},
                    "created_at": {"type": "integer", "minimum": 0},
                    "kind": {"type": "integer", "minimum": 0, "maximum": 65535},
                    "tags": {"type": "array", "items": tag, "maxItems": 256},
                    "content": {"type": "string"},
                    "sig": {"type": "string", "pattern": "^[0-9a-f]{128}$"},
                },
                "additionalProperties": False,
            },
            "OkAnswer": {
                "description": (
                    'The NIP-01 OK triple: `["OK", <event id>, <accepted>, "<prefix>: <message>"]`;'
                    " prefixes `duplicate`, `invalid`, `restricted`, `blocked`, `rate-limited`,"
                    " `error`."
                ),
                # Positional item schemas (`prefixItems`) trip schemathesis' 3.1 response
                # validation; the fuzz test checks the positions itself.
                "type": "array",
                "items": {"type": ["string", "boolean"]},
                "minItems": 4,
                "maxItems": 4,
            },
            "PlainFilter": {
                "description": (
                    "Plain mode: readable current heads (`current`) or revisions of the named"
                    " artifacts (`history`, needs `#d`), newest first. At most"
                    " `offset + limit` <= 11000 rows per filter."
                ),
                "type": "object",
                "required": ["artifact"],
                "properties": {
                    "artifact": {"type": "string", "enum": ["current", "history"]},
                    **common_filter_props,
                    "offset": {"type": "integer", "minimum": 0, "maximum": 10000},
                },
                "patternProperties": {"^#[A-Za-z0-9_.-]{1,64}$": tag_values},
                "additionalProperties": False,
                "maxProperties": 36,
            },
            "IncrementalFilter": {
                "description": (
                    "Incremental mode: `progress` is `null` to start a full round, or the token"
                    " of the last applied page. Only `#h` and `#type` predicates, no `offset`."
                ),
                "type": "object",
                "required": ["artifact", "progress"],
                "properties": {
                    "artifact": {"const": "current"},
                    **common_filter_props,
                    "progress": {"type": ["string", "null"], "maxLength": 8192},
                    "#h": {**tag_values, "items": {"type": "string", "pattern": UUID}},
                    "#type": tag_values,
                },
                "additionalProperties": False,
            },
            "Removal": {
                "type": "object",
                "required": ["d", "reason"],
                "properties": {
                    "d": {"type": "string", "pattern": UUID},
                    "reason": {"enum": ["deleted", "redacted", "moved", "access"]},
                },
                "additionalProperties": False,
            },
            "IncrementalPage": {
                "type": "object",
                "required": ["events", "removed", "progress", "more", "reset"],
                "properties": {
                    "events": {"type": "array", "items": _ref("Event"), "maxItems": 1000},
                    "removed": {"type": "array", "items": _ref("Removal"), "maxItems": 1000},
                    "progress": {"type": "string", "pattern": "^[A-Za-z0-9_-]+={0,2}$"},
                    "more": {"type": "boolean"},
                    "reset": {"type": "boolean"},
                },
                "additionalProperties": False,
            },
            "RelayInformation": {
                "type": "object",
                "required": [
                    "name", "pubkey", "supported_nips", "supported_extensions", "limitation",
                ],
                "properties": {
                    "name": {"type": "string"},
                    "description": {"type": "string"},
                    "pubkey": {"type": "string", "pattern": HEX64},
                    "self": {"type": "string", "pattern": HEX64},
                    "software": {"type": "string"},
                    "version": {"type": "string"},
                    "supported_nips": {"type": "array", "items": {"type": "integer"}},
                    "supported_extensions": {
                        "type": "array",
                        "items": {"enum": ["artifacts.incremental", "artifacts.sync"]},
                        "uniqueItems": True,
                    },
                    "artifacts": {
                        "type": "object",
                        "properties": {
                            "incremental": {
                                "type": "object",
                                "required": ["endpoint", "overlap_seconds", "max_limit"],
                                "properties": {
                                    "endpoint": {"const": "/query"},
                                    "overlap_seconds": {"type": "integer", "minimum": 0},
                                    "max_limit": {"type": "integer", "minimum": 1},
                                },
                            },
                            "sync": {
                                "type": "object",
                                "required": ["endpoint", "kinds"],
                                "properties": {
                                    "endpoint": {"const": "/"},
                                    "kinds": {"type": "array", "items": {"type": "integer"}},
                                },
                            },
                        },
                    },
                    "limitation": {
                        "type": "object",
                        "properties": {
                            "max_message_length": {"type": "integer"},
                            "max_subscriptions": {"type": "integer"},
                            "max_limit": {"type": "integer"},
                            "max_subid_length": {"type": "integer"},
                            "max_event_tags": {"type": "integer"},
                            "auth_required": {"type": "boolean"},
                            "restricted_writes": {"type": "boolean"},
                            "created_at_lower_limit": {"type": "integer"},
                            "created_at_upper_limit": {"type": "integer"},
                        },
                    },
                },
            },
        },
    }


@cache
def _document() -> Schema:
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Buzz relay HTTP API",
            "version": settings.RELAY_VERSION,
            "description": (
                "The HTTP half of the Buzz relay's wire contract (PROTOCOL.md): writes over"
                " `POST /event`, artifact reads over `POST /query` (plain and incremental),"
                " NIP-11 and health. Errors are `{\"error\": \"<code>\", \"message\": \"...\"}`;"
                " checks apply in the order 413, 404, 401, 400, 429, 503."
            ),
        },
        "security": [{"nip98": []}],
        "paths": {
            "/event": {
                "post": {
                    "summary": "Publish one signed event",
                    "operationId": "postEvent",
                    "requestBody": {
                        "required": True,
                        "content": {JSON: {"schema": _ref("Event")}},
                    },
                    "responses": {
                        "200": _response(
                            "The event was judged; `accepted` says whether it was stored.",
                            _ref("OkAnswer"),
                        ),
                        "400": _error(
                            "The body is not an event object.", "invalid_event", "bad_request"
                        ),
                        **_AUTHENTICATED_ERRORS,
                        **_COMMON_ERRORS,
                    },
                },
                "options": _preflight("/event"),
            },
            "/query": {
                "post": {
                    "summary": "Read artifacts: plain or incremental",
                    "operationId": "postQuery",
                    "requestBody": {
                        "required": True,
                        "content": {
                            JSON: {
                                "schema": {
                                    "type": "array",
                                    "minItems": 1,
                                    "maxItems": 1,
                                    "items": {
                                        "oneOf": [
                                            _ref("PlainFilter"), _ref("IncrementalFilter"),
                                        ]
                                    },
                                }
                            }
                        },
                    },
                    "responses": {
                        "200": _response(
                            "Plain mode: the readable events. Incremental mode: one page.",
                            {
                                "oneOf": [
                                    {"type": "array", "items": _ref("Event"), "maxItems": 1000},
                                    _ref("IncrementalPage"),
                                ]
                            },
                        ),
                        "400": _error(
                            "The filter is malformed or out of range, or the progress token is"
                            " not this reader's, community's or filter's.",
                            "invalid_filter", "invalid_progress", "bad_request",
                        ),
                        **_AUTHENTICATED_ERRORS,
                        **_COMMON_ERRORS,
                    },
                },
                "options": _preflight("/query"),
            },
            "/": {"get": _nip11_operation("/")},
            "/info": {"get": _nip11_operation("/info")},
            "/metrics": {
                "get": {
                    "summary": "Prometheus metrics for operators",
                    "operationId": "metrics",
                    "security": [],
                    "responses": {
                        "200": _response(
                            "Readiness, sync epoch, fleet, rounds, resets, lags.",
                            {"type": "string"},
                            media_type="text/plain",
                        ),
                        **_COMMON_ERRORS,
                    },
                }
            },
            "/healthz": {
                "get": {
                    "summary": "The process is up",
                    "operationId": "healthz",
                    "security": [],
                    "responses": {
                        "200": _response(
                            "Up.",
                            {
                                "type": "object",
                                "required": ["status"],
                                "properties": {"status": {"const": "ok"}},
                            },
                        )
                    },
                }
            },
            "/readyz": {
                "get": {
                    "summary": "The database answers and every migration is applied",
                    "operationId": "readyz",
                    "security": [],
                    "responses": {
                        "200": _response(
                            "Ready.",
                            {
                                "type": "object",
                                "required": ["status"],
                                "properties": {"status": {"const": "ready"}},
                            },
                        ),
                        "503": _error("Not ready: the message says why.", "not_ready"),
                    },
                }
            },
            "/openapi.json": {
                "get": {
                    "summary": "This document",
                    "operationId": "openapi",
                    "security": [],
                    "responses": {
                        "200": _response("The OpenAPI document.", {"type": "object"}),
                        **_COMMON_ERRORS,
                    },
                }
            },
        },
        "components": _components(),
    }


def openapi_document(*, server_url: str | None = None) -> Schema:
    """The OpenAPI document; `server_url` (scheme://host[:port]) fills `servers` when given."""
    document = copy.deepcopy(_document())
    if server_url:
        document["servers"] = [{"url": server_url}]
    return document


def openapi_view(request: HttpRequest) -> HttpResponse:
    """GET /openapi.json: the document, naming the host the client addressed as its server."""
    if request.method not in ("GET", "HEAD"):
        return json_error(405, "method_not_allowed", "GET only", headers={"Allow": "GET"})
    return json_response(
        openapi_document(server_url=f"{public_scheme(request)}://{public_netloc(request)}")
    )
