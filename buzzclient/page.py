"""One incremental page (PROTOCOL.md section 5), parsed and checked before anything is applied.

A page is applied whole or not at all, so everything that could make applying it fail (shape,
tags, ids, signatures) is checked here first.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import cache

import orjson

from buzzclient.errors import ProtocolViolation
from nostr.events import (
    Event,
    InvalidEvent,
    check_event_id,
    check_signature,
    first_tag,
    is_canonical_uuid,
    is_lower_hex,
    served_event,
)
from nostr.kinds import KIND_ARTIFACT, KIND_REMOVAL_MARKER

# Signature checks dominate a full round's client time (~0.1 ms each). libsecp256k1 runs with
# the GIL released (cffi), so a page's checks spread over a few threads use several cores.
VERIFY_THREADS = min(4, os.cpu_count() or 1)
VERIFY_CHUNK = 128

@dataclass(frozen=True, slots=True)
class ArtifactEvent:
    """A served event, with what the collection indexes read from its tags once."""

    event: Event
    d: str
    channel: str
    type: str | None
    op: str | None
    title: str | None
    prev: str | None

    @property
    def event_id(self) -> str:
        return self.event.id

    @property
    def kind(self) -> int:
        return self.event.kind


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


def parse_artifact_event(obj: object, *, verify: bool) -> ArtifactEvent:
    """Check one served 45010/45011 event; raises ``ProtocolViolation``."""
    try:
        event = served_event(obj)
    except InvalidEvent as exc:
        claimed = obj.get("id") if isinstance(obj, dict) else None
        if is_lower_hex(claimed, 64):
            raise ProtocolViolation(f"relay served a malformed event {claimed} ({exc})") from None
        raise ProtocolViolation(
            f"relay served an event that is not a Nostr event object ({exc})"
        ) from None
    if event.kind not in (KIND_ARTIFACT, KIND_REMOVAL_MARKER):
        raise ProtocolViolation(f"relay served an event of kind {event.kind!r} in an artifact read")
    d, channel = first_tag(event, "d"), first_tag(event, "h")
    if not is_canonical_uuid(d) or not is_canonical_uuid(channel):
        raise ProtocolViolation(f"relay served event {event.id} without a canonical d or h tag")
    assert d is not None and channel is not None  # narrowed by is_canonical_uuid
    if verify:
        _check_served_event(event)
    return ArtifactEvent(
        event=event,
        d=d,
        channel=channel,
        type=first_tag(event, "type"),
        op=first_tag(event, "op"),
        title=first_tag(event, "title"),
        prev=first_tag(event, "prev"),
    )


def _check_served_event(event: Event) -> None:
    """The id is the hash of the content and the author signed it: a relay cannot forge or
    alter an artifact without this failing."""
    try:
        digest = check_event_id(event)
    except InvalidEvent:
        raise ProtocolViolation(
            f"relay served event {event.id} whose id does not match it"
        ) from None
    try:
        check_signature(event, digest)
    except InvalidEvent:
        raise ProtocolViolation(f"relay served event {event.id} with a bad signature") from None


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
        _verify_all([parsed.event for parsed in parsed_events])
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


def _verify_chunk(events: list[Event]) -> None:
    for event in events:
        _check_served_event(event)


def _verify_all(events: list[Event]) -> None:
    """Checks every event's id and signature (shape was checked by ``parse_artifact_event``);
    raises ``ProtocolViolation`` for the first bad one found."""
    if VERIFY_THREADS < 2 or len(events) <= VERIFY_CHUNK:
        _verify_chunk(events)
        return
    chunks = [events[i : i + VERIFY_CHUNK] for i in range(0, len(events), VERIFY_CHUNK)]
    for _ in _verify_pool().map(_verify_chunk, chunks):
        pass  # map re-raises a chunk's ProtocolViolation here
