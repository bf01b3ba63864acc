"""The one filter of `POST /query`: parsing and validation (PROTOCOL.md section 5).

Everything the protocol does not list is refused with `InvalidFilter` (400 `invalid_filter`):
unknown keys, several filters, a non-array body, out-of-range numbers, booleans or floats where
integers belong, empty or oversized predicate lists. Values are de-duplicated and sorted here,
so the incremental filter's canonical form (the one tokens bind) is simply its fields.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any, Literal

import orjson
from django.conf import settings

from nostr.events import is_canonical_uuid
from nostr.jsonstrict import StrictJSONError, is_int, loads_strict
from nostr.kinds import KIND_ARTIFACT

DEFAULT_LIMIT = 100
# The largest `limit` is settings.RELAY_MAX_LIMIT, the value NIP-11 announces (read per request).
MAX_OFFSET = 10_000
MAX_TAG_NAMES = 32
# Across all predicates of the filter (the protocol gives one figure per filter).
MAX_TAG_VALUES = 256
MAX_TAG_BYTES = 64 * 1024
# Tag names a filter may name: NIP-01 letters plus the multi-letter names NIP-AR uses (`type`).
_TAG_NAME = re.compile(r"[A-Za-z0-9_.:\-]{1,64}")
_KNOWN_KEYS = frozenset({"artifact", "kinds", "limit", "offset", "progress", "view_changes"})
# Predicates whose values are UUIDs in the schema: anything else could never match.
_UUID_TAGS = frozenset({"d", "h"})
INCREMENTAL_TAGS = frozenset({"h", "type"})
# `view_changes` (incremental mode only): how a change of the reader's view is answered.
VIEW_CHANGES = ("reset", "incremental")


class InvalidFilter(ValueError):
    """The body is not one filter the relay serves; `str()` says why (short, safe to echo)."""


@dataclass(frozen=True, slots=True)
class QueryFilter:
    artifact: Literal["current", "history"]
    # Tag name (without '#') -> sorted, de-duplicated values.
    tags: dict[str, tuple[str, ...]]
    limit: int
    offset: int
    incremental: bool
    # The token string, or None to start (only meaningful when `incremental`).
    progress: str | None
    # True when the request opted in to incremental view changes (`view_changes:
    # "incremental"`); not bound in the token, so each request says it again.
    view_changes_incremental: bool = False

    def values(self, name: str) -> tuple[str, ...] | None:
        """The predicate's values, or None when the filter does not constrain `name`."""
        return self.tags.get(name)

    def canonical_digest(self) -> bytes:
        """What a progress token binds: the sorted, de-duplicated `#h` and `#type` (not `limit`)."""
        canonical = orjson.dumps(
            {"h": list(self.tags.get("h", ())), "type": list(self.tags.get("type", ()))}
        )
        return hashlib.sha256(b"buzz filter v1\0" + canonical).digest()


def parse_query_body(body: bytes) -> QueryFilter:
    """Parse the request body: a JSON array holding exactly one filter object."""
    try:
        parsed = loads_strict(body)
    except StrictJSONError as exc:
        raise InvalidFilter(f"body is not JSON: {exc}") from None
    if not isinstance(parsed, list) or len(parsed) != 1:
        raise InvalidFilter("body must be a JSON array holding exactly one filter")
    return parse_filter(parsed[0])


def parse_filter(raw: Any) -> QueryFilter:
    if not isinstance(raw, dict):
        raise InvalidFilter("the filter must be an object")
    tags: dict[str, tuple[str, ...]] = {}
    value_count = value_bytes = 0
    for key, value in raw.items():
        if key.startswith("#"):
            name = key[1:]
            if not _TAG_NAME.fullmatch(name):
                raise InvalidFilter(f"bad tag predicate name {key[:70]!r}")
            values = _filter_values(name, value)
            tags[name] = values
            value_count += len(values)
            value_bytes += sum(len(v.encode("utf-8")) for v in values)
        elif key not in _KNOWN_KEYS:
            raise InvalidFilter(f"unknown filter key {key[:40]!r}")
    if len(tags) > MAX_TAG_NAMES:
        raise InvalidFilter(f"at most {MAX_TAG_NAMES} tag predicates")
    if value_count > MAX_TAG_VALUES:
        raise InvalidFilter(f"at most {MAX_TAG_VALUES} tag values in one filter")
    if value_bytes > MAX_TAG_BYTES:
        raise InvalidFilter(f"tag values over {MAX_TAG_BYTES} bytes")

    artifact = raw.get("artifact")
    if artifact not in ("current", "history"):
        raise InvalidFilter('"artifact" must be "current" or "history"')
    kinds = raw.get("kinds", [KIND_ARTIFACT])
    # `is_int` as well: 45010.0 == 45010 in Python, and a float is not a kind.
    if not (isinstance(kinds, list) and kinds == [KIND_ARTIFACT] and is_int(kinds[0])):
        raise InvalidFilter(f'"kinds" must be [{KIND_ARTIFACT}]')
    limit = _int_in(raw, "limit", DEFAULT_LIMIT, 1, settings.RELAY_MAX_LIMIT)
    offset = _int_in(raw, "offset", 0, 0, MAX_OFFSET)
    incremental = "progress" in raw
    progress = raw.get("progress")

    if incremental:
        if progress is not None and not isinstance(progress, str):
            raise InvalidFilter('"progress" must be a token string or null')
        if artifact != "current":
            raise InvalidFilter('incremental reads serve "artifact": "current" only')
        if "offset" in raw:
            raise InvalidFilter('"offset" is not allowed with "progress"')
        extra = set(tags) - INCREMENTAL_TAGS
        if extra:
            raise InvalidFilter("incremental reads take #h and #type predicates only")
        if raw.get("view_changes", "reset") not in VIEW_CHANGES:
            raise InvalidFilter('"view_changes" must be "reset" or "incremental"')
    elif "view_changes" in raw:
        raise InvalidFilter('"view_changes" needs "progress" (incremental mode)')
    elif artifact == "history" and "d" not in tags:
        raise InvalidFilter('"artifact": "history" needs a #d predicate')
    return QueryFilter(
        artifact=artifact,
        tags=tags,
        limit=limit,
        offset=offset,
        incremental=incremental,
        progress=progress,
        view_changes_incremental=incremental and raw.get("view_changes") == "incremental",
    )


def _filter_values(name: str, value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not value:
        raise InvalidFilter(f"#{name} must be a non-empty list of strings")
    if not all(isinstance(v, str) for v in value):
        raise InvalidFilter(f"#{name} must be a non-empty list of strings")
    if name in _UUID_TAGS and not all(is_canonical_uuid(v) for v in value):
        raise InvalidFilter(f"#{name} values must be canonical lowercase UUIDs")
    # PostgreSQL text cannot hold NUL (the query would fail with a 500); no tag matches one.
    if any("\x00" in v for v in value):
        raise InvalidFilter(f"#{name} values cannot contain NUL characters")
    return tuple(sorted(set(value)))


def _int_in(raw: dict[str, Any], key: str, default: int, low: int, high: int) -> int:
    if key not in raw:
        return default
    value = raw[key]
    if not is_int(value) or not low <= value <= high:
        raise InvalidFilter(f'"{key}" must be an integer from {low} to {high}')
    return int(value)
