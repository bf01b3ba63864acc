"""One incremental page (PROTOCOL.md section 5), parsed and checked before anything is applied.

A page is applied whole or not at all, so everything that could make applying it fail (shape,
tags, ids, signatures) is checked here first.
"""

from __future__ import annotations

import hashlib
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import cache
from typing import Any

import orjson

from buzzclient.errors import ProtocolViolation
from nostr.events import is_canonical_uuid, is_lower_hex, serialize_event
from nostr.jsonstrict import is_int
from nostr.kinds import KIND_ARTIFACT, KIND_REMOVAL_MARKER
from nostr.schnorr import verify_bytes

# Signature checks dominate a full round's client time (~0.1 ms each). libsecp256k1 runs with
# the GIL released (cffi), so a page's checks spread over a few threads use several cores.
VERIFY_THREADS = min(4, os.cpu_count() or 1)
VERIFY_CHUNK = 128

_EVENT_FIELDS = ("id", "pubkey", "created_at", "kind", "tags", "content", "sig")


@dataclass(frozen=True, slots=True)
class ArtifactEvent:
    """A served event reduced to what the collection indexes, plus its JSON as served."""

    d: str
    event_id: str
    kind: int
    pubkey: str
    created_at: int
    channel: str
    type: str | None
    op: str | None
    title: str | None
    prev: str | None
    event_json: str


@dataclass(frozen=True, slots=True)
class Page:
    events: list[ArtifactEvent]
    removed: list[tuple[str, str]]  # (d, reason)
    progress: str
    more: bool
    reset: bool
    # Channels that left the reader's view (only when the request opted in to incremental view
    # changes): every item whose stored head's `h` is one of them goes before the page applies.
    removed_channels: tuple[str, ...] = ()

    @property
    def items(self) -> int:
        return len(self.events) + len(self.removed)


def _first_tags(tags: list[Any]) -> dict[str, str]:
    found: dict[str, str] = {}
    for tag in tags:
        if isinstance(tag, list) and len(tag) > 1 and isinstance(tag[0], str):
            value = tag[1]
            if isinstance(value, str):
                found.setdefault(tag[0], value)
    return found


def parse_artifact_event(event: object, *, verify: bool) -> ArtifactEvent:
    """Check one served 45010/45011 event; raises ``ProtocolViolation``."""
    if not isinstance(event, dict) or any(name not in event for name in _EVENT_FIELDS):
        raise ProtocolViolation("relay served an event that is not a Nostr event object")
    event_id, pubkey, kind = event["id"], event["pubkey"], event["kind"]
    if not (is_lower_hex(event_id, 64) and is_lower_hex(pubkey, 64)):
        raise ProtocolViolation("relay served an event with a malformed id or pubkey")
    if not is_int(kind) or kind not in (KIND_ARTIFACT, KIND_REMOVAL_MARKER):
        raise ProtocolViolation(f"relay served an event of kind {kind!r} in an artifact read")
    created_at, tags = event["created_at"], event["tags"]
    content = event["content"]
    if not is_int(created_at) or not isinstance(tags, list) or not isinstance(content, str):
        raise ProtocolViolation(f"relay served a malformed event {event_id}")
    tag = _first_tags(tags)
    d, channel = tag.get("d"), tag.get("h")
    if not is_canonical_uuid(d) or not is_canonical_uuid(channel):
        raise ProtocolViolation(f"relay served event {event_id} without a canonical d or h tag")
    assert d is not None and channel is not None  # narrowed by is_canonical_uuid
    if verify:
        _verify(event)
    return ArtifactEvent(
        d=d,
        event_id=event_id,
        kind=kind,
        pubkey=pubkey,
        created_at=created_at,
        channel=channel,
        type=tag.get("type"),
        op=tag.get("op"),
        title=tag.get("title"),
        prev=tag.get("prev"),
        event_json=orjson.dumps(event).decode(),
    )


def _verify(event: dict[str, Any]) -> None:
    """The id is the hash of the content and the author signed it: a relay cannot forge or
    alter an artifact without this failing."""
    try:
        serialized = serialize_event(
            event["pubkey"], event["created_at"], event["kind"], event["tags"], event["content"]
        )
        sig = bytes.fromhex(event["sig"]) if isinstance(event["sig"], str) else b""
    except (ValueError, TypeError):
        raise ProtocolViolation(f"relay served a malformed event {event['id']}") from None
    digest = hashlib.sha256(serialized).digest()
    if digest.hex() != event["id"]:
        raise ProtocolViolation(f"relay served event {event['id']} whose id does not match it")
    if not verify_bytes(bytes.fromhex(event["pubkey"]), digest, sig):
        raise ProtocolViolation(f"relay served event {event['id']} with a bad signature")


def parse_page(body: bytes, *, verify: bool = True) -> Page:
    """Parse and check an incremental-mode answer; raises ``ProtocolViolation``."""
    try:
        document = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise ProtocolViolation("relay answered a query with something that is not JSON") from None
    if not isinstance(document, dict):
        raise ProtocolViolation("relay answered an incremental query without a page object")
    events, removed = document.get("events"), document.get("removed")
    progress, more, reset = document.get("progress"), document.get("more"), document.get("reset")
    if not isinstance(events, list) or not isinstance(removed, list):
        raise ProtocolViolation("incremental page lacks its events or removed list")
    if not isinstance(progress, str) or not progress:
        raise ProtocolViolation("incremental page lacks its progress token")
    if not isinstance(more, bool) or not isinstance(reset, bool):
        raise ProtocolViolation("incremental page lacks its more/reset flags")
    parsed_events = [parse_artifact_event(event, verify=False) for event in events]
    if verify:
        _verify_all(events)
    parsed_removed: list[tuple[str, str]] = []
    for entry in removed:
        d = entry.get("d") if isinstance(entry, dict) else None
        reason = entry.get("reason") if isinstance(entry, dict) else None
        if not is_canonical_uuid(d) or not isinstance(reason, str):
            raise ProtocolViolation("incremental page has a malformed removed entry")
        assert isinstance(d, str)
        parsed_removed.append((d, reason))
    named = [event.d for event in parsed_events] + [d for d, _ in parsed_removed]
    if len(set(named)) != len(named):
        # PROTOCOL.md: a d appears at most once per page; two entries would leave the result
        # depending on the order we apply them in.
        raise ProtocolViolation("incremental page names one artifact twice")
    removed_channels = document.get("removed_channels", [])
    if not isinstance(removed_channels, list) or not all(
        is_canonical_uuid(channel) for channel in removed_channels
    ):
        raise ProtocolViolation("incremental page has a malformed removed_channels list")
    if removed_channels and reset:
        # A reset empties the collection anyway; a relay saying both is confused.
        raise ProtocolViolation("incremental page both resets and removes channels")
    return Page(parsed_events, parsed_removed, progress, more, reset, tuple(removed_channels))


@cache
def _verify_pool() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=VERIFY_THREADS, thread_name_prefix="buzz-verify")


def _verify_chunk(events: list[dict[str, Any]]) -> None:
    for event in events:
        _verify(event)


def _verify_all(events: list[dict[str, Any]]) -> None:
    """Checks every event's id and signature (shape was checked by ``parse_artifact_event``);
    raises ``ProtocolViolation`` for the first bad one found."""
    if VERIFY_THREADS < 2 or len(events) <= VERIFY_CHUNK:
        _verify_chunk(events)
        return
    chunks = [events[i : i + VERIFY_CHUNK] for i in range(0, len(events), VERIFY_CHUNK)]
    for _ in _verify_pool().map(_verify_chunk, chunks):
        pass  # map re-raises a chunk's ProtocolViolation here
