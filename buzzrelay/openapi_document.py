"""The relay's OpenAPI document: the request and answer bodies no serializer describes, with
every limit taken from its one definition, and the generated document (/openapi.json).

The vocabulary (`Answer`, `error_answer`, `RelayAutoSchema`, the generator) is the edge's, on the
ground floor (relaycore.edge.openapi); the bodies are the apps' (artifacts' filters and events,
relayinfo's NIP-11), so they are drawn up here, in the project, which sits on both.
"""

from __future__ import annotations

import copy
from functools import cache
from typing import Any

from django.conf import settings

from artifacts.selectors.filters import (
    DEFAULT_LIMIT,
    MAX_OFFSET,
    MAX_TAG_NAMES,
    MAX_TAG_VALUES,
    VIEW_CHANGES,
)
from nostr.events import HEX64_PATTERN as HEX64
from nostr.events import UUID_PATTERN as UUID
from nostr.kinds import KIND_ARTIFACT
from relaycore.edge.openapi import RelaySchemaGenerator, Schema, ref

__all__ = ["openapi_document", "relay_components"]



def _headers() -> Schema:
    return {
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
    }


def _schemas() -> Schema:
    # Every limit from its one definition (the filter parser, the event limits, the settings
    # NIP-11 announces), so the document can never drift from what the relay enforces.
    max_body = settings.RELAY_MAX_BODY_BYTES
    limits = settings.RELAY_EVENT_LIMITS
    max_limit = settings.RELAY_MAX_LIMIT
    tag = {
        "type": "array", "items": {"type": "string", "maxLength": limits.max_tag_value_bytes},
        "minItems": 1,
    }
    tag_values = {
        "type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": MAX_TAG_VALUES,
    }
    common_filter_props: Schema = {
        "kinds": {
            "type": "array", "items": {"const": KIND_ARTIFACT}, "minItems": 1, "maxItems": 1,
            "description": f"Optional; must be `[{KIND_ARTIFACT}]`.",
        },
        "limit": {
            "type": "integer", "minimum": 1, "maximum": max_limit, "default": DEFAULT_LIMIT,
        },
    }
    return {
        "Event": {
            "description": (
                "A signed Nostr event (NIP-01). The relay recomputes `id`, checks the BIP-340"
                f" signature and the limits: at most {max_body} bytes, {limits.max_tags} tags,"
                f" tag values of {limits.max_tag_value_bytes} bytes, `created_at` within"
                f" [now - {limits.created_at_lower} s, now + {limits.created_at_upper} s]."
            ),
            "type": "object",
            "required": ["id", "pubkey", "created_at", "kind", "tags", "content", "sig"],
            "properties": {
                "id": {"type": "string", "pattern": HEX64},
                "pubkey": {"type": "string", "pattern": HEX64},
                "created_at": {"type": "integer", "minimum": 0},
                "kind": {"type": "integer", "minimum": 0, "maximum": 65535},
                "tags": {"type": "array", "items": tag, "maxItems": limits.max_tags},
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
                f" `offset + limit` <= {MAX_OFFSET + max_limit} rows per filter."
            ),
            "type": "object",
            "required": ["artifact"],
            "properties": {
                "artifact": {"type": "string", "enum": ["current", "history"]},
                **common_filter_props,
                "offset": {"type": "integer", "minimum": 0, "maximum": MAX_OFFSET},
            },
            "patternProperties": {"^#[A-Za-z0-9_.-]{1,64}$": tag_values},
            "additionalProperties": False,
            # The tag predicates and the four other keys (artifact, kinds, limit, offset).
            "maxProperties": MAX_TAG_NAMES + 4,
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
                "view_changes": {"enum": list(VIEW_CHANGES)},
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
                "events": {"type": "array", "items": ref("Event"), "maxItems": max_limit},
                "removed": {"type": "array", "items": ref("Removal"), "maxItems": max_limit},
                "removed_channels": {"type": "array", "items": {"type": "string", "pattern": UUID}},
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
                                "view_changes": {"type": "array", "items": {"type": "string"}},
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
    }


def relay_components(result: Schema, **kwargs: Any) -> Schema:
    """SPECTACULAR_SETTINGS["POSTPROCESSING_HOOKS"]: the bodies and headers the operations
    refer to, which no serializer describes."""
    components = result.setdefault("components", {})
    components.setdefault("schemas", {}).update(_schemas())
    components.setdefault("headers", {}).update(_headers())
    return result


@cache
def _generated() -> Schema:
    return RelaySchemaGenerator().get_schema(request=None, public=True)  # type: ignore[no-any-return]


def openapi_document(*, server_url: str | None = None) -> Schema:
    """The generated document (once per process); `server_url` (scheme://host[:port]) fills
    `servers` when given."""
    document = copy.deepcopy(_generated())
    if server_url:
        document["servers"] = [{"url": server_url}]
    return document
