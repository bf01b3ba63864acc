"""NIP-01 filters of the artifact sync WebSocket: parsing, and matching of live events.

Pure code (no Django): the same `Filter` drives the replay query (artifacts.selectors.replay)
and the live matching here, so what a subscription replays and what it streams agree. Only the
keys the sync serves are accepted; anything else is refused with a reason rather than ignored,
so a client never believes a predicate applied when it did not.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from nostr import kinds
from nostr.events import is_canonical_uuid, is_lower_hex
from nostr.jsonstrict import is_int
from nostr.kinds import HINT_KINDS, KIND_ARTIFACT, KIND_REDACTION, KIND_REMOVAL_MARKER

__all__ = [
    "SYNC_KIND_SET",
    "Filter",
    "FilterError",
    "LiveEvent",
    "parse_req_filter",
]

# As a set, for matching; the kinds themselves are nostr.kinds'. SYNC_KINDS are replayed and
# streamed (and what a filter without `kinds` means); a filter may also name the live-only
# kinds, streamed but never replayed (PROTOCOL.md section 8): redactions, and the events that
# change the subscriber's own access.
SYNC_KIND_SET = frozenset(kinds.SYNC_KINDS)
SERVED_KINDS = SYNC_KIND_SET | frozenset(kinds.LIVE_ONLY_KINDS)
# Values per list, as POST /query allows (PROTOCOL.md section 5).
MAX_FILTER_VALUES = 256
_KEYS = frozenset({"ids", "authors", "kinds", "#h", "#d", "since", "until", "limit"})


class FilterError(ValueError):
    """A filter the relay refuses; `prefix` is the NIP-01 machine-readable prefix."""

    def __init__(self, prefix: str, reason: str) -> None:
        super().__init__(reason)
        self.prefix = prefix
        self.reason = reason

    def message(self) -> str:
        return f"{self.prefix}: {self.reason}"


@dataclass(frozen=True, slots=True)
class LiveEvent:
    """What matching needs of a stored event the stream serves, parsed once."""

    id: str
    pubkey: str
    kind: int
    created_at: int
    channel_id: str  # the `h` tag: the home channel, or a marker's source channel
    artifact_id: str  # the `d` tag ("" for a redaction or a channel event)
    artifact_type: str | None  # of the artifact; None when not known
    raw: str  # the stored JSON text, sent byte-for-byte


@dataclass(frozen=True, slots=True)
class Filter:
    """One parsed filter. `None` means the predicate is absent (matches everything)."""

    ids: frozenset[str] | None = None
    authors: frozenset[str] | None = None
    kinds: frozenset[int] = SYNC_KIND_SET
    channels: frozenset[str] | None = None  # #h
    artifacts: frozenset[str] | None = None  # #d
    since: int | None = None
    until: int | None = None
    limit: int = 1000

    def matches(self, event: LiveEvent) -> bool:
        """NIP-01 matching of a live event (`limit` applies to the replay only)."""
        return (
            event.kind in self.kinds
            and (self.channels is None or event.channel_id in self.channels)
            and (self.artifacts is None or event.artifact_id in self.artifacts)
            and (self.ids is None or event.id in self.ids)
            and (self.authors is None or event.pubkey in self.authors)
            and (self.since is None or event.created_at >= self.since)
            and (self.until is None or event.created_at <= self.until)
        )

    def may_cover(self, channel_id: str) -> bool:
        """Whether events of `channel_id` can match (for access re-checks)."""
        return self.channels is None or channel_id in self.channels


def parse_req_filter(value: object, *, max_limit: int) -> Filter:
    """A filter object from a REQ; raises `FilterError` with the NIP-01 prefix to answer."""
    if not isinstance(value, Mapping):
        raise FilterError("invalid", "each filter must be a JSON object")
    for key in value:
        if key not in _KEYS:
            raise FilterError("invalid", f"unsupported filter key {_printable(key)}")
    kinds = SYNC_KIND_SET
    if "kinds" in value:
        listed = _int_list(value["kinds"], "kinds")
        unsupported = listed - SERVED_KINDS
        if unsupported:
            raise FilterError(
                "blocked",
                f"kind {min(unsupported)} is not served here; the sync serves kinds "
                f"{KIND_ARTIFACT} and {KIND_REMOVAL_MARKER}, and live only {KIND_REDACTION}"
                " and the access hints " + ", ".join(str(k) for k in HINT_KINDS),
            )
        kinds = frozenset(listed)
    limit = max_limit
    if "limit" in value:
        raw_limit = value["limit"]
        if not is_int(raw_limit) or raw_limit < 0:
            raise FilterError("invalid", "limit must be a non-negative integer")
        # NIP-11: the relay clamps each filter's limit to max_limit.
        limit = min(raw_limit, max_limit)
    return Filter(
        ids=_hex_list(value, "ids"),
        authors=_hex_list(value, "authors"),
        kinds=kinds,
        channels=_uuid_list(value, "#h"),
        artifacts=_uuid_list(value, "#d"),
        since=_timestamp(value, "since"),
        until=_timestamp(value, "until"),
        limit=limit,
    )


def _values(raw: object, key: str) -> list[Any]:
    if not isinstance(raw, list):
        raise FilterError("invalid", f"{key} must be a list")
    if len(raw) > MAX_FILTER_VALUES:
        raise FilterError("invalid", f"too many values in {key} (max {MAX_FILTER_VALUES})")
    return raw


def _int_list(raw: object, key: str) -> frozenset[int]:
    values = _values(raw, key)
    if not all(is_int(v) for v in values):
        raise FilterError("invalid", f"{key} must be a list of integers")
    return frozenset(values)


def _hex_list(value: Mapping[str, object], key: str) -> frozenset[str] | None:
    if key not in value:
        return None
    values = _values(value[key], key)
    if not all(is_lower_hex(v, 64) for v in values):
        raise FilterError("invalid", f"{key} must be 64-character lowercase hex strings")
    return frozenset(values)


def _uuid_list(value: Mapping[str, object], key: str) -> frozenset[str] | None:
    if key not in value:
        return None
    values = _values(value[key], key)
    if not all(is_canonical_uuid(v) for v in values):
        raise FilterError("invalid", f"{key} must be canonical lowercase UUIDs")
    return frozenset(values)


def _timestamp(value: Mapping[str, object], key: str) -> int | None:
    if key not in value:
        return None
    raw = value[key]
    if isinstance(raw, bool) or not isinstance(raw, int) or raw < 0:
        raise FilterError("invalid", f"{key} must be a non-negative integer")
    return raw


def _printable(key: object) -> str:
    text = str(key)
    if len(text) <= 32 and text.isprintable() and text.isascii():
        return repr(text)
    return "(unprintable)"
