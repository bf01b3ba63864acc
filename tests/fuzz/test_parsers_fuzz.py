"""Hypothesis fuzzing of the parsers that read untrusted input, beyond the owners' own tests:
progress tokens (artifacts.tokens: random field values and random alterations; tests/artifacts/
test_tokens.py covers garbage, bindings and retired keys) and WebSocket client messages
(artifacts.ws.messages).

NIP-98 (`nostr.nip98.verify_nip98`) and event parsing (`nostr.events.parse_event`) are fuzzed
for "only their own error" in tests/nostr; here they get what is not covered there: a validly
signed header or event altered in any single character is never accepted as something else.
"""

from __future__ import annotations

import base64
import hashlib
import string
from datetime import UTC, datetime
from typing import Any

import orjson
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from artifacts.tokens import (
    InvalidProgress,
    Phase,
    ProgressToken,
    RetiredToken,
    decode_progress,
    encode_progress,
    token_binding,
)
from artifacts.ws.messages import (
    AuthMessage,
    CloseMessage,
    EventMessage,
    RefusedMessage,
    ReqMessage,
    SyncLimits,
    closed,
    event_frame,
    notice,
    parse_client_message,
    subscription_prefix,
)
from nostr.events import InvalidEvent, parse_event, sign_event
from nostr.nip98 import Nip98Error, make_nip98_header, verify_nip98
from nostr.schnorr import generate_secret

SECRET = "11" * 32
OTHER_SECRET = "22" * 32
BINDING = token_binding(community_id=1, reader="ab" * 32, filter_digest=b"\0" * 32)
B64URL = string.ascii_letters + string.digits + "-_"

# --- progress tokens --------------------------------------------------------------------------

_moments = st.datetimes(
    min_value=datetime(2000, 1, 1), max_value=datetime(2200, 1, 1), timezones=st.just(UTC)
)
# Through a function taking the fields given: `builds` would infer strategies for a named
# tuple's fields that have defaults too (the view part, whose values must be consistent); they
# keep their defaults here.
_tokens = st.builds(
    lambda **fields: ProgressToken(**fields),
    phase=st.sampled_from(list(Phase)),
    epoch=st.integers(0, 2**63 - 1),
    database=st.binary(min_size=8, max_size=8),
    round_t=_moments,
    watermark=_moments,
    cursor_at=_moments,
    cursor_key=st.binary(max_size=32),
    view_digest=st.binary(min_size=16, max_size=16),
    view_t=_moments,
    view_fingerprint=st.binary(min_size=8, max_size=8),
    issued_at=_moments,
)


def _decode(text: str, binding: bytes = BINDING, previous: tuple[str, ...] = ()
            ) -> ProgressToken | RetiredToken:
    return decode_progress(text, binding=binding, secret=SECRET, previous_secrets=previous)


@settings(max_examples=300)
@given(token=_tokens)
def test_token_round_trips_exactly(token: ProgressToken) -> None:
    assert _decode(encode_progress(token, binding=BINDING, secret=SECRET)) == token


@settings(max_examples=300)
@given(
    token=_tokens,
    position=st.integers(min_value=0),
    replacement=st.sampled_from(B64URL),
    tail=st.text(alphabet=B64URL, max_size=4),
    cut=st.integers(0, 8),
)
def test_any_altered_token_is_invalid_progress(
    token: ProgressToken, position: int, replacement: str, tail: str, cut: int
) -> None:
    text = encode_progress(token, binding=BINDING, secret=SECRET)
    index = position % len(text)
    assume(text[index] != replacement)
    variants = [text[:index] + replacement + text[index + 1:], text + tail if tail else None,
                text[: len(text) - cut] if cut else None]
    for variant in filter(None, variants):
        try:
            _decode(variant)
        except InvalidProgress:
            continue
        raise AssertionError(f"altered token accepted: {variant}")


# --- WebSocket client messages ----------------------------------------------------------------

_scalars = st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(
    max_size=20
)
_json = st.recursive(
    _scalars,
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12,
)
_filter_keys = st.sampled_from(
    ["ids", "authors", "kinds", "#h", "#d", "#e", "since", "until", "limit", "search", "#"]
)
_filter_values = (
    _json
    | st.lists(st.sampled_from([45010, 45011, 1, -1, 2**40, "45010", 1.5, True]), max_size=4)
    | st.lists(st.uuids().map(str) | st.text(max_size=70), max_size=4)
    | st.integers(-5, 5000)
)
_filters = st.dictionaries(_filter_keys, _filter_values, max_size=5)
_messages = (
    st.tuples(st.sampled_from(["REQ"]), st.text(max_size=80), st.lists(_filters, max_size=12))
    .map(lambda t: [t[0], t[1], *t[2]])
    | st.lists(_json, max_size=4).flatmap(
        lambda rest: st.sampled_from(["EVENT", "REQ", "CLOSE", "AUTH", "COUNT", ""]).map(
            lambda verb: [verb, *rest]
        )
    )
    | _json
)
LIMITS = SyncLimits()


def _parse(text: str) -> Any:
    try:
        return parse_client_message(text, LIMITS)
    except RefusedMessage as refused:
        frame = orjson.loads(refused.answer.frame())
        assert frame[0] in ("NOTICE", "CLOSED", "OK"), frame
        return refused


@settings(max_examples=250)
@given(message=_messages)
def test_any_message_parses_or_is_refused_with_an_answer(message: Any) -> None:
    try:
        text = orjson.dumps(message).decode()
    except orjson.JSONEncodeError:  # integers beyond 64 bits: send them as text
        text = str(message)
    parsed = _parse(text)
    if isinstance(parsed, ReqMessage):
        assert 1 <= len(parsed.sub_id) <= LIMITS.max_subid_length
        assert 1 <= len(parsed.filters) <= LIMITS.max_filters
        assert all(f.limit <= LIMITS.max_limit for f in parsed.filters)
        assert all(f.kinds <= {45010, 45011} for f in parsed.filters)
    elif isinstance(parsed, EventMessage | AuthMessage):
        assert isinstance(message, list) and parsed.event == message[1]
    elif isinstance(parsed, CloseMessage):
        assert parsed.sub_id == message[1]


@settings(max_examples=500)
@given(text=st.text(max_size=300) | st.binary(max_size=300).map(lambda b: b.decode("latin-1")))
def test_any_text_parses_or_is_refused_with_an_answer(text: str) -> None:
    _parse(text)


_spaces = st.text(alphabet=" \t\r\n", max_size=3)


@settings(max_examples=400)
@given(
    content=st.text(max_size=60),
    tags=st.lists(st.lists(st.text(max_size=12), min_size=1, max_size=3), max_size=4),
    verb=st.sampled_from(['"EVENT"', '"\\u0045VENT"', '"EV\\u0045NT"', '"\\u0045\\u0056ENT"']),
    gaps=st.lists(_spaces, min_size=4, max_size=4),
)
def test_event_text_is_the_event_exactly_as_sent(
    content: str, tags: list[list[str]], verb: str, gaps: list[str]
) -> None:
    """The relay stores the event's own bytes: whatever spacing or escapes surround it."""
    event = sign_event(SECRET, kind=45010, tags=tags, content=content, created_at=1_700_000_000)
    event_text = orjson.dumps(event).decode()
    text = f"{gaps[0]}[{gaps[1]}{verb}{gaps[2]},{event_text}{gaps[3]}]"
    parsed = parse_client_message(text, LIMITS)
    assert isinstance(parsed, EventMessage)
    assert parsed.raw == event_text
    assert parse_event(parsed.raw, now=1_700_000_000).to_dict() == event


@settings(max_examples=300)
@given(sub_id=st.text(max_size=64), message=st.text(max_size=100))
def test_relay_frames_are_json_whatever_the_text(sub_id: str, message: str) -> None:
    event = sign_event(SECRET, kind=45010, tags=[], content=message, created_at=1_700_000_000)
    frame = event_frame(subscription_prefix(sub_id), orjson.dumps(event).decode())
    assert orjson.loads(frame) == ["EVENT", sub_id, event]
    assert orjson.loads(closed(sub_id, message)) == ["CLOSED", sub_id, message]
    assert orjson.loads(notice(message)) == ["NOTICE", message]


# --- NIP-98 and events: altered signed input is never accepted as something else ---------------

NOW = 1_700_000_000
URL = "https://relay.example/query"
_AUTHOR = generate_secret()


@settings(max_examples=300)
@given(position=st.integers(min_value=0), replacement=st.characters(codec="ascii"))
def test_altered_nip98_header_is_refused_or_unchanged(position: int, replacement: str) -> None:
    body = b'[{"artifact":"current"}]'
    header = make_nip98_header(_AUTHOR, url=URL, method="POST", body=body)
    index = position % len(header)
    altered = header[:index] + replacement + header[index + 1:]
    assume(altered != header)
    original = verify_nip98(header, url=URL, method="POST", body=body, now=_created(header))
    try:
        auth = verify_nip98(altered, url=URL, method="POST", body=body, now=_created(header))
    except Nip98Error:
        return
    # Base64 has spellings that decode to the same bytes (padding, URL-safe alphabet, spaces
    # after the scheme): those may pass, but only as the very same signed event.
    assert auth == original


def _created(header: str) -> int:
    event = orjson.loads(base64.b64decode(header.split(" ", 1)[1]))
    return int(event["created_at"])


@settings(max_examples=300)
@given(position=st.integers(min_value=0), replacement=st.characters(codec="utf-8"))
def test_altered_event_json_is_refused_or_the_same_event(position: int, replacement: str) -> None:
    event = sign_event(_AUTHOR, kind=45010, tags=[["d", "x"], ["h", "y"]], content="hello",
                       created_at=NOW)
    text = orjson.dumps(event).decode()
    index = position % len(text)
    altered = text[:index] + replacement + text[index + 1:]
    assume(altered != text)
    try:
        parsed = parse_event(altered, now=NOW)
    except InvalidEvent:
        return
    # Only a JSON-insignificant change (whitespace) can survive, and then it is the same event.
    assert parsed == event, (altered, hashlib.sha256(altered.encode()).hexdigest())
