"""NIP-01 events: the ``Event`` type, canonical id, validation of untrusted events, signing.

``parse_event`` runs every check PROTOCOL.md section 2 lists before policy, cheapest first, so
a malformed event never costs a signature verification. The work per event is one orjson
parse, one orjson serialization for the id, one sha256 and one BIP-340 verification; the
``Event`` it returns keeps the JSON text exactly as received (``raw``), which is what the relay
stores and serves byte for byte, so nothing downstream serializes an event again.
"""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import orjson

from nostr import schnorr
from nostr.jsonstrict import (
    DUPLICATE_KEY,
    StrictJSONError,
    has_duplicate_keys_exact,
    is_int,
    loads_keeping_last_duplicate,
    may_hide_colons,
)

__all__ = [
    "DEFAULT_LIMITS",
    "EVENT_KEYS",
    "DuplicateTag",
    "Event",
    "EventLimits",
    "InvalidEvent",
    "Tag",
    "check_event_id",
    "check_signature",
    "compute_event_id",
    "first_tag",
    "has_tag",
    "is_canonical_uuid",
    "is_lower_hex",
    "parse_event",
    "parse_event_unverified",
    "serialize_event",
    "served_event",
    "sign",
    "sign_event",
    "single_tag",
    "single_tag_value",
    "tag_values",
]

EVENT_KEYS = frozenset({"id", "pubkey", "created_at", "kind", "tags", "content", "sig"})
MAX_KIND = 65535  # NIP-01: "kind: integer between 0 and 65535"

_HEX = re.compile(r"[0-9a-f]*")
# The wire shapes of an id and a UUID, as patterns (the OpenAPI document names them too).
HEX64_PATTERN: Final = "^[0-9a-f]{64}$"
UUID_PATTERN: Final = "^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"
_CANONICAL_UUID = re.compile(UUID_PATTERN)
# Field names echoed back in error messages: short and harmless to show.
_PRINTABLE_NAME = re.compile(r"[A-Za-z0-9_.\-]{1,32}")


@dataclass(frozen=True, slots=True)
class EventLimits:
    """Size and time limits; the defaults are what NIP-11 announces (PROTOCOL.md section 6)."""

    max_event_bytes: int = 65536
    max_tags: int = 256
    max_tag_value_bytes: int = 4096
    created_at_lower: int = 31536000  # seconds into the past accepted (one year)
    created_at_upper: int = 900  # seconds into the future accepted (15 minutes)


DEFAULT_LIMITS = EventLimits()

Tag = tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Event:
    """A NIP-01 event, parsed once from the wire (``parse_event``) or signed here (``sign``).

    ``raw`` is the event's JSON text exactly as received (a client's spacing, key order and
    escapes included): the relay stores and serves it verbatim, and the id and signature are
    over the canonical serialization, which any spelling of the same event shares. Built only
    by this module, after every check, so the fields always have the types NIP-01 gives them.
    """

    id: str
    pubkey: str
    created_at: int
    kind: int
    tags: tuple[Tag, ...]
    content: str
    sig: str
    raw: str = field(repr=False)

    def to_dict(self) -> dict[str, Any]:
        """The NIP-01 object (for JSON a caller builds around it; ``raw`` is the event's text)."""
        return {
            "id": self.id,
            "pubkey": self.pubkey,
            "created_at": self.created_at,
            "kind": self.kind,
            "tags": [list(tag) for tag in self.tags],
            "content": self.content,
            "sig": self.sig,
        }


def _event(fields: dict[str, Any], raw: str) -> Event:
    """The ``Event`` of an object whose fields were checked (``_check_fields``)."""
    # Positional: this runs once per parsed event (every NIP-98 header too), and keywords cost
    # a third more here.
    return Event(
        fields["id"], fields["pubkey"], fields["created_at"], fields["kind"],
        tuple(map(tuple, fields["tags"])), fields["content"], fields["sig"], raw,
    )


class InvalidEvent(ValueError):
    """The event fails validation; ``str()`` is the reason that follows ``invalid: ``."""


def is_lower_hex(value: object, length: int) -> bool:
    """True for a ``str`` of exactly ``length`` lowercase hex digits."""
    return isinstance(value, str) and len(value) == length and _HEX.fullmatch(value) is not None


def is_canonical_uuid(value: object) -> bool:
    """True for a UUID in canonical form only: lowercase hex, 8-4-4-4-12, no braces or URN."""
    return isinstance(value, str) and _CANONICAL_UUID.fullmatch(value) is not None


def serialize_event(
    pubkey: str, created_at: int, kind: int, tags: Sequence[Sequence[str]], content: str
) -> bytes:
    """NIP-01 canonical serialization: compact UTF-8 JSON of ``[0,pubkey,created_at,...]``.

    orjson escapes exactly what ``JSON.stringify`` (nostr-tools) escapes: ``"`` ``\\``, the
    short forms ``\\b \\f \\n \\r \\t`` and other control characters as lowercase ``\\u00xx``;
    everything else verbatim (tests check every code point against both). Raises
    ``ValueError`` for values JSON cannot carry (lone surrogates, integers beyond 64 bits).
    """
    try:
        return orjson.dumps([0, pubkey, created_at, kind, tags, content])
    except orjson.JSONEncodeError as exc:
        raise ValueError(f"cannot serialize event: {exc}") from None


def compute_event_id(
    pubkey: str, created_at: int, kind: int, tags: Sequence[Sequence[str]], content: str
) -> str:
    """The NIP-01 event id: hex sha256 of the canonical serialization."""
    return hashlib.sha256(serialize_event(pubkey, created_at, kind, tags, content)).hexdigest()


def parse_event(
    raw: bytes | bytearray | memoryview | str | dict[str, Any],
    *,
    now: int,
    limits: EventLimits = DEFAULT_LIMITS,
    parsed: dict[str, Any] | None = None,
) -> Event:
    """Validate an untrusted event (JSON text or an already strictly parsed object).

    Checks shape and types, sizes, the ``created_at`` window around ``now``, the id and the
    signature; returns the ``Event``. Raises ``InvalidEvent``. ``parsed``: see
    ``parse_event_unverified``.
    """
    event, event_id = parse_event_unverified(raw, now=now, limits=limits, parsed=parsed)
    check_signature(event, event_id)
    return event


def parse_event_unverified(
    raw: bytes | bytearray | memoryview | str | dict[str, Any],
    *,
    now: int,
    limits: EventLimits = DEFAULT_LIMITS,
    parsed: dict[str, Any] | None = None,
) -> tuple[Event, bytes]:
    """Every check of ``parse_event`` but the signature; returns the event and its 32-byte id.

    For callers (NIP-98, NIP-42) that have cheap checks of their own to run before paying for
    the signature; they finish with ``check_signature``. A ``dict`` must come from
    ``loads_strict`` (or equally strict code): duplicate keys cannot be seen in a dict; its
    ``raw`` text is then its compact JSON. ``parsed`` is the object the text ``raw`` was
    already strictly parsed to (a WebSocket message holding the event): it is not parsed
    again, and ``raw`` is kept as the event's text.
    """
    event, text = _event_object(raw, limits, parsed)
    _check_fields(event, limits)
    _check_created_at(event["created_at"], now, limits)
    # Fields were checked above, so serialization cannot fail.
    canonical = orjson.dumps(
        [0, event["pubkey"], event["created_at"], event["kind"], event["tags"], event["content"]]
    )
    if parsed is None and not isinstance(raw, dict):
        _check_no_duplicate_keys(text, event, canonical)
    event_id = hashlib.sha256(canonical).digest()
    if event_id.hex() != event["id"]:
        raise InvalidEvent("bad event id")
    # Text given as str is kept as it came; bytes are UTF-8 orjson (or the encoder) validated.
    return _event(event, raw if isinstance(raw, str) else text.decode("utf-8")), event_id


# No size limit: what a relay serves it has already accepted under limits of its own.
_NO_LIMITS = EventLimits(max_event_bytes=2**62, max_tags=2**62, max_tag_value_bytes=2**62)


def served_event(obj: object) -> Event:
    """The ``Event`` of an object a relay served (parsed from its answer): its fields checked as
    ``parse_event`` checks them, without a time window (stored events are old) or size limits;
    the id and signature are the caller's to check (``check_event_id``, ``check_signature``).
    ``raw`` is the object's compact JSON. Raises ``InvalidEvent``."""
    if not isinstance(obj, dict):
        raise InvalidEvent("event must be a JSON object")
    fields, text = _checked_dict(obj, _NO_LIMITS)
    _check_fields(fields, _NO_LIMITS)
    return _event(fields, text.decode("utf-8"))


def check_event_id(event: Event) -> bytes:
    """The 32-byte id of ``event``'s canonical serialization; raises ``InvalidEvent`` when it is
    not the id the event claims."""
    digest = hashlib.sha256(
        serialize_event(event.pubkey, event.created_at, event.kind, event.tags, event.content)
    ).digest()
    if digest.hex() != event.id:
        raise InvalidEvent("bad event id")
    return digest


def check_signature(event: Event, event_id: bytes) -> None:
    """Verify the BIP-340 signature of an event checked by ``parse_event_unverified``."""
    if not schnorr.verify_bytes(bytes.fromhex(event.pubkey), event_id, bytes.fromhex(event.sig)):
        raise InvalidEvent("bad signature")


def sign(
    secret_hex: str,
    *,
    kind: int,
    tags: Iterable[Sequence[str]],
    content: str,
    created_at: int | None = None,
) -> Event:
    """Build and sign an event; ``created_at`` defaults to the current time. Its ``raw`` text
    is the compact JSON of its NIP-01 object."""
    pubkey = schnorr.pubkey_from_secret(secret_hex)
    if created_at is None:
        created_at = int(time.time())
    tag_tuple = tuple(tuple(tag) for tag in tags)
    digest = hashlib.sha256(serialize_event(pubkey, created_at, kind, tag_tuple, content))
    event_id, sig = digest.hexdigest(), schnorr.sign(secret_hex, digest.digest())
    raw = orjson.dumps(
        {"id": event_id, "pubkey": pubkey, "created_at": created_at, "kind": kind,
         "tags": tag_tuple, "content": content, "sig": sig}
    ).decode()
    return Event(event_id, pubkey, created_at, kind, tag_tuple, content, sig, raw)


def sign_event(
    secret_hex: str,
    *,
    kind: int,
    tags: Iterable[Sequence[str]],
    content: str,
    created_at: int | None = None,
) -> dict[str, Any]:
    """``sign``'s event as its NIP-01 object: for code that builds wire JSON by hand (tests
    crafting variants of a valid event). Everything else takes the ``Event``."""
    return sign(secret_hex, kind=kind, tags=tags, content=content, created_at=created_at).to_dict()


def tag_values(event: Event, name: str) -> list[str]:
    """The first values (index 1) of every tag called ``name``, in order."""
    return [tag[1] for tag in event.tags if len(tag) > 1 and tag[0] == name]


class DuplicateTag(ValueError):
    """An event carries several tags called `name` where the protocol allows one."""

    def __init__(self, name: str) -> None:
        super().__init__(f"more than one {name} tag")
        self.name = name


def single_tag(event: Event, name: str) -> Tag | None:
    """The one tag called ``name`` (with or without a value), or ``None`` when there is none.

    Raises ``DuplicateTag`` when several are called ``name``, valued or not: with two, a verifier
    and a reader of the same event could disagree on which one counts.
    """
    found = [tag for tag in event.tags if tag[0] == name]
    if len(found) > 1:
        raise DuplicateTag(name)
    return found[0] if found else None


def single_tag_value(event: Event, name: str) -> str | None:
    """The value of the one tag called ``name``; ``None`` when it is absent or has no value.
    Raises ``DuplicateTag`` as ``single_tag`` does."""
    tag = single_tag(event, name)
    if tag is None or len(tag) < 2:
        return None
    return tag[1]


def first_tag(event: Event, name: str) -> str | None:
    """The value of the first tag called ``name`` that has a value, or ``None``."""
    for tag in event.tags:
        if len(tag) > 1 and tag[0] == name:
            return tag[1]
    return None


def has_tag(event: Event, name: str) -> bool:
    """Whether any tag is called ``name`` (with or without values, e.g. ``["private"]``)."""
    return any(tag[0] == name for tag in event.tags)


def _event_object(
    raw: bytes | bytearray | memoryview | str | dict[str, Any],
    limits: EventLimits,
    parsed: dict[str, Any] | None,
) -> tuple[dict[str, Any], bytes | bytearray]:
    """The event object, and the JSON text it was read from (a dict's compact JSON)."""
    if isinstance(raw, dict):
        return _checked_dict(raw, limits)
    if isinstance(raw, str):
        if len(raw) > limits.max_event_bytes:  # each character is at least one byte
            raise _too_large(len(raw), limits)
        try:
            raw = raw.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidEvent("lone surrogate in string") from None
    elif isinstance(raw, memoryview):
        raw = raw.tobytes()
    if len(raw) > limits.max_event_bytes:
        raise _too_large(len(raw), limits)
    if parsed is not None:
        return parsed, raw
    try:
        # Duplicate keys are ruled out later, more cheaply than a generic check can, once the
        # event's shape and canonical serialization are known (_check_no_duplicate_keys).
        parsed = loads_keeping_last_duplicate(raw)
    except StrictJSONError as exc:
        raise InvalidEvent(f"malformed JSON: {exc}") from None
    if not isinstance(parsed, dict):
        raise InvalidEvent("event must be a JSON object")
    return parsed, raw


def _checked_dict(event: dict[str, Any], limits: EventLimits) -> tuple[dict[str, Any], bytes]:
    # The size of an already parsed event is that of its compact JSON, which also proves the
    # object is JSON (no lone surrogates, no foreign types) before anything else looks at it.
    try:
        text = orjson.dumps(event)
    except orjson.JSONEncodeError:
        raise InvalidEvent("event is not valid JSON (lone surrogate or non-JSON value)") from None
    if len(text) > limits.max_event_bytes:
        raise _too_large(len(text), limits)
    return event, text


def _too_large(size: int, limits: EventLimits) -> InvalidEvent:
    return InvalidEvent(f"event too large ({size} bytes, max {limits.max_event_bytes})")


def _check_fields(event: dict[str, Any], limits: EventLimits) -> None:
    if event.keys() != EVENT_KEYS:
        _reject_keys(event)
    if not is_lower_hex(event["id"], 64):
        raise InvalidEvent("id must be 64 lowercase hex characters")
    if not is_lower_hex(event["pubkey"], 64):
        raise InvalidEvent("pubkey must be 64 lowercase hex characters")
    if not is_lower_hex(event["sig"], 128):
        raise InvalidEvent("sig must be 128 lowercase hex characters")
    if not is_int(event["created_at"]):
        raise InvalidEvent("created_at must be an integer")
    kind = event["kind"]
    if not is_int(kind):
        raise InvalidEvent("kind must be an integer")
    if not 0 <= kind <= MAX_KIND:
        raise InvalidEvent(f"kind must be between 0 and {MAX_KIND}")
    if not isinstance(event["content"], str):
        raise InvalidEvent("content must be a string")
    _check_tags(event["tags"], limits)


def _reject_keys(event: dict[str, Any]) -> None:
    missing = sorted(EVENT_KEYS - event.keys())
    if missing:
        raise InvalidEvent(f"missing field {missing[0]}")
    extra = next(key for key in event if key not in EVENT_KEYS)
    if isinstance(extra, str) and _PRINTABLE_NAME.fullmatch(extra):
        raise InvalidEvent(f"unexpected field {extra}")
    raise InvalidEvent("unexpected field")


def _check_tags(tags: object, limits: EventLimits) -> None:
    if not isinstance(tags, list):
        raise InvalidEvent("tags must be a list")
    if len(tags) > limits.max_tags:
        raise InvalidEvent(f"too many tags ({len(tags)}, max {limits.max_tags})")
    max_bytes = limits.max_tag_value_bytes
    # A UTF-8 character takes at most 4 bytes: shorter strings need no encoding to be measured.
    short = max_bytes // 4
    for tag in tags:
        if not isinstance(tag, list) or not tag:
            raise InvalidEvent("each tag must be a non-empty list of strings")
        for value in tag:
            if not isinstance(value, str):
                raise InvalidEvent("each tag must be a non-empty list of strings")
            if len(value) > short and (
                len(value) > max_bytes or len(value.encode("utf-8")) > max_bytes
            ):
                raise InvalidEvent(f"tag value too large (max {max_bytes} bytes)")


def _check_no_duplicate_keys(
    text: bytes | bytearray, event: dict[str, Any], canonical: bytes
) -> None:
    """Refuse an event whose JSON text repeated a key (orjson kept the last value).

    Fast exact path: once the fields are checked the event holds only strings, integers and
    lists, and orjson's compact output is then the shortest JSON text of it (each escape it
    writes is forced; UTF-8 is the shortest form of any other character). A text with a
    repeated pair is longer than the shortest text of what it parsed to, so equal lengths prove
    there was none. Compact clients (``JSON.stringify`` escapes the same way) take this path.

    Otherwise count colons: in valid JSON each ``:`` outside strings separates one pair; the
    text holds one object of 7 pairs whose keys, hex fields and numbers hold no colon, so every
    other ``:`` lies in a tag or the content. The canonical serialization holds exactly those
    strings and orjson never escapes ``:``, so without duplicates the text has exactly 7 colons
    more than the canonical form; each repeated pair adds at least one. A colon written as
    ``\\u003a`` would hide from the count: such text takes the exact check.
    """
    if len(text) == len(orjson.dumps(event)):
        return
    if may_hide_colons(text):
        duplicate = has_duplicate_keys_exact(text)
    else:
        duplicate = text.count(b":") != len(EVENT_KEYS) + canonical.count(b":")
    if duplicate:
        raise InvalidEvent(f"malformed JSON: {DUPLICATE_KEY}")


def _check_created_at(created_at: int, now: int, limits: EventLimits) -> None:
    if created_at > now + limits.created_at_upper:
        raise InvalidEvent("created_at too far in the future")
    if created_at < now - limits.created_at_lower:
        raise InvalidEvent("created_at too old")
