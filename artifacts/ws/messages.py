"""NIP-01/NIP-42 messages of the sync WebSocket: parsing client frames, building relay frames.

Pure code (no Django). Client input is parsed with `nostr.jsonstrict` (duplicate keys, lone
surrogates and NaN refused), and every refusal carries the answer NIP-01 prescribes: a `NOTICE`
when the message cannot be tied to a subscription or event, `CLOSED <sub>` for a refused REQ,
`OK <id> false` for a refused EVENT or AUTH. Reasons start with a standard prefix (`invalid:`,
`restricted:`, `auth-required:`, `error:`, `blocked:`, `rate-limited:`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from artifacts.ws.filters import Filter, FilterError, parse_req_filter
from nostr.events import is_lower_hex
from nostr.jsonstrict import StrictJSONError, loads_strict

__all__ = [
    "AuthMessage",
    "ClientMessage",
    "CloseMessage",
    "ClosedAnswer",
    "EventMessage",
    "NoticeAnswer",
    "OkAnswer",
    "RefusedMessage",
    "ReqMessage",
    "SyncLimits",
    "auth_challenge",
    "closed",
    "eose",
    "event_frame",
    "message_size",
    "notice",
    "ok",
    "parse_client_message",
    "subscription_prefix",
]


@dataclass(frozen=True, slots=True)
class SyncLimits:
    """Limits of one connection; the first four are those NIP-11 announces."""

    max_message_length: int = 131072
    max_subscriptions: int = 64
    max_limit: int = 1000
    max_subid_length: int = 64
    # Not a NIP-11 field: bounds the replay work one REQ can ask for.
    max_filters: int = 10


@dataclass(frozen=True, slots=True)
class EventMessage:
    # The event object as parsed with the message, not yet checked: the ingest service checks
    # it into a `nostr.events.Event` without parsing `raw` again.
    event: dict[str, Any]
    raw: str  # the event exactly as the client wrote it: what is stored and served
    event_id: str


@dataclass(frozen=True, slots=True)
class ReqMessage:
    sub_id: str
    filters: tuple[Filter, ...]


@dataclass(frozen=True, slots=True)
class CloseMessage:
    sub_id: str


@dataclass(frozen=True, slots=True)
class AuthMessage:
    event: dict[str, Any]
    event_id: str


ClientMessage = EventMessage | ReqMessage | CloseMessage | AuthMessage


@dataclass(frozen=True, slots=True)
class NoticeAnswer:
    message: str

    def frame(self) -> str:
        return notice(self.message)


@dataclass(frozen=True, slots=True)
class ClosedAnswer:
    sub_id: str
    message: str

    def frame(self) -> str:
        return closed(self.sub_id, self.message)


@dataclass(frozen=True, slots=True)
class OkAnswer:
    event_id: str
    message: str

    def frame(self) -> str:
        return ok(self.event_id, False, self.message)


class RefusedMessage(Exception):
    """A client message the relay answers with a refusal; `answer.frame()` is what to send."""

    def __init__(self, answer: NoticeAnswer | ClosedAnswer | OkAnswer) -> None:
        super().__init__(answer.message)
        self.answer = answer


def message_size(text: str) -> int:
    """Size of a text frame in UTF-8 bytes (what max_message_length counts)."""
    return len(text.encode("utf-8", "surrogatepass"))


def parse_client_message(text: str, limits: SyncLimits) -> ClientMessage:
    """One client frame; raises `RefusedMessage` carrying the answer to send.

    The frame's size is checked by the caller first: an oversized frame closes the connection.
    """
    try:
        message = loads_strict(text)
    except StrictJSONError as exc:
        raise _refused(f"invalid: message is not valid JSON ({exc})") from None
    if not isinstance(message, list) or not message or not isinstance(message[0], str):
        raise _refused("invalid: a message must be a JSON array whose first element is a verb")
    verb = message[0]
    if verb == "EVENT":
        return _event(text, message)
    if verb == "REQ":
        return _req(message, limits)
    if verb == "CLOSE":
        if len(message) != 2 or not isinstance(message[1], str):
            raise _refused('invalid: CLOSE must be ["CLOSE", <subscription id>]')
        return CloseMessage(sub_id=message[1])
    if verb == "AUTH":
        return _auth(message)
    shown = repr(verb) if len(verb) <= 16 and verb.isprintable() else "(unprintable)"
    raise _refused(f"invalid: unknown message type {shown}")


def _refused(message: str) -> RefusedMessage:
    return RefusedMessage(NoticeAnswer(message))


def _event_id_of(obj: object) -> str | None:
    if isinstance(obj, dict):
        event_id = obj.get("id")
        if is_lower_hex(event_id, 64):
            assert isinstance(event_id, str)
            return event_id
    return None


def _event(text: str, message: list[Any]) -> EventMessage:
    if len(message) != 2 or not isinstance(message[1], dict):
        raise _refused('invalid: EVENT must be ["EVENT", <event object>]')
    event_id = _event_id_of(message[1])
    if event_id is None:
        # Without a well-formed id there is nothing an OK could name.
        raise _refused("invalid: event id must be 64 lowercase hex characters")
    return EventMessage(event=message[1], raw=_event_text(text), event_id=event_id)


def _event_text(text: str) -> str:
    """The event object's text inside `["EVENT", {...}]`, byte-for-byte.

    The message is already known to be a two-element array whose first element decodes to
    "EVENT": that string holds no comma in any spelling (an escaped comma would decode to a
    comma), so the first comma is the separator, and the last `]` closes the array.
    """
    start = text.index(",") + 1
    end = text.rindex("]")
    return text[start:end].strip(" \t\r\n")


def _req(message: list[Any], limits: SyncLimits) -> ReqMessage:
    if len(message) < 2 or not isinstance(message[1], str):
        raise _refused('invalid: REQ must be ["REQ", <subscription id>, <filter>, ...]')
    sub_id: str = message[1]
    if not sub_id or len(sub_id) > limits.max_subid_length:
        raise RefusedMessage(
            ClosedAnswer(
                sub_id,
                f"invalid: subscription id must be 1 to {limits.max_subid_length} characters",
            )
        )
    raw_filters = message[2:]
    if not raw_filters:
        raise RefusedMessage(ClosedAnswer(sub_id, "invalid: REQ needs at least one filter"))
    if len(raw_filters) > limits.max_filters:
        raise RefusedMessage(
            ClosedAnswer(sub_id, f"invalid: too many filters (max {limits.max_filters})")
        )
    try:
        filters = tuple(parse_req_filter(f, max_limit=limits.max_limit) for f in raw_filters)
    except FilterError as exc:
        raise RefusedMessage(ClosedAnswer(sub_id, exc.message())) from None
    return ReqMessage(sub_id=sub_id, filters=filters)


def _auth(message: list[Any]) -> AuthMessage:
    if len(message) != 2 or not isinstance(message[1], dict):
        raise _refused('invalid: AUTH must be ["AUTH", <signed event>]')
    event_id = _event_id_of(message[1])
    if event_id is None:
        raise _refused("invalid: auth event id must be 64 lowercase hex characters")
    return AuthMessage(event=message[1], event_id=event_id)


def subscription_prefix(sub_id: str) -> str:
    """`["EVENT",<sub id>,` : the constant head of every event frame of one subscription."""
    return '["EVENT",' + orjson.dumps(sub_id).decode() + ","


def event_frame(prefix: str, raw: str) -> str:
    """An EVENT frame from a subscription's prefix and the stored event JSON (no re-encoding)."""
    return prefix + raw + "]"


def _dumps(value: list[Any]) -> str:
    return orjson.dumps(value).decode()


def notice(message: str) -> str:
    return _dumps(["NOTICE", message])


def closed(sub_id: str, message: str) -> str:
    return _dumps(["CLOSED", sub_id, message])


def ok(event_id: str, accepted: bool, message: str) -> str:
    return _dumps(["OK", event_id, accepted, message])


def eose(sub_id: str) -> str:
    return _dumps(["EOSE", sub_id])


def auth_challenge(challenge: str) -> str:
    return _dumps(["AUTH", challenge])
