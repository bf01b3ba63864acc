"""Client message parsing (pure): what each malformed message is answered with, the event text
passed on byte-for-byte, filters parsed and clamped as NIP-01 and NIP-11 say."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from artifacts.ws.filters import Filter, LiveEvent
from artifacts.ws.filters import parse_req_filter as parse_filter
from artifacts.ws.messages import (
    AuthMessage,
    ClosedAnswer,
    CloseMessage,
    EventMessage,
    NoticeAnswer,
    RefusedMessage,
    ReqMessage,
    SyncLimits,
    closed,
    event_frame,
    parse_client_message,
    subscription_prefix,
)
from nostr.events import sign_event
from nostr.schnorr import generate_secret

LIMITS = SyncLimits()
H = "6f1c2a4e-1b2c-4d3e-8f40-123456789abc"
D = "0a1b2c3d-4e5f-4a6b-8c7d-0e1f2a3b4c5d"


def _event() -> dict[str, object]:
    return sign_event(
        generate_secret(), kind=45010, tags=[["d", D], ["h", H]], content='{"a": "b , ]"}'
    )


@pytest.mark.parametrize("spacing", ["", " ", "\n\t ", "\r\n"])
def test_event_text_is_passed_on_exactly_as_written(spacing: str) -> None:
    event = _event()
    # Key order and spacing of the client's own text survive (the ingest stores it).
    text = orjson.dumps({k: event[k] for k in reversed(list(event))}).decode()
    text = text.replace(",", ", ")
    message = f'[{spacing}"EVENT"{spacing},{spacing}{text}{spacing}]'
    parsed = parse_client_message(message, LIMITS)
    assert isinstance(parsed, EventMessage)
    assert parsed.raw == text and parsed.event_id == event["id"]
    escaped = parse_client_message('["\\u0045VENT",' + text + "]", LIMITS)
    assert isinstance(escaped, EventMessage) and escaped.raw == text


def test_messages_of_each_verb() -> None:
    req = parse_client_message(f'["REQ","s",{{"#h":["{H}"]}},{{"kinds":[45011]}}]', LIMITS)
    assert isinstance(req, ReqMessage) and req.sub_id == "s" and len(req.filters) == 2
    assert req.filters[0].channels == {H} and req.filters[1].kinds == {45011}
    assert parse_client_message('["CLOSE","s"]', LIMITS) == CloseMessage("s")
    auth = parse_client_message(orjson.dumps(["AUTH", _event()]).decode(), LIMITS)
    assert isinstance(auth, AuthMessage)


@pytest.mark.parametrize(
    ("message", "answer"),
    [
        ("nope", NoticeAnswer),
        ("{}", NoticeAnswer),
        ('["COUNT","s",{}]', NoticeAnswer),
        ('["REQ",{}]', NoticeAnswer),
        ('["REQ","s"]', ClosedAnswer),
        ('["REQ","s",{"kinds":[1]}]', ClosedAnswer),
        ('["REQ","' + "s" * 65 + '",{}]', ClosedAnswer),
        ('["EVENT",{"id":"x"}]', NoticeAnswer),
        ('["EVENT",{}, {}]', NoticeAnswer),
        ('["CLOSE","a","b"]', NoticeAnswer),
        ('["AUTH",{"id":1}]', NoticeAnswer),
        ('["REQ","s",{"limit":1,"limit":2}]', NoticeAnswer),  # duplicate key
    ],
)
def test_refusals_carry_the_nip01_answer(message: str, answer: type) -> None:
    with pytest.raises(RefusedMessage) as refused:
        parse_client_message(message, LIMITS)
    assert isinstance(refused.value.answer, answer)
    frame = orjson.loads(refused.value.answer.frame())
    prefix = frame[-1].split(":")[0]
    assert prefix in {"invalid", "blocked", "restricted", "auth-required", "error", "rate-limited"}


def test_limit_is_clamped_to_max_limit_and_defaults_to_it() -> None:
    assert parse_filter({"limit": 5000}, max_limit=1000).limit == 1000
    assert parse_filter({"limit": 7}, max_limit=1000).limit == 7
    assert parse_filter({}, max_limit=1000).limit == 1000
    assert parse_filter({"limit": 0}, max_limit=1000).limit == 0


def test_frames_are_built_without_re_encoding_the_event() -> None:
    raw = '{"id":"x",  "content":"\\u00e9"}'
    frame = event_frame(subscription_prefix('sub "1"'), raw)
    assert frame == '["EVENT","sub \\"1\\"",' + raw + "]"
    assert orjson.loads(closed("s", "restricted: no")) == ["CLOSED", "s", "restricted: no"]


hex64 = st.text("0123456789abcdef", min_size=64, max_size=64)
uuids = st.uuids().map(str)


@given(
    event=st.builds(
        LiveEvent,
        id=hex64,
        pubkey=hex64,
        kind=st.sampled_from([45010, 45011]),
        created_at=st.integers(0, 2**40),
        channel_id=uuids,
        artifact_id=uuids,
        artifact_type=st.none(),
        raw=st.just("{}"),
    ),
    data=st.data(),
)
def test_a_filter_built_from_an_event_matches_it_and_each_changed_predicate_does_not(
    event: LiveEvent, data: st.DataObject
) -> None:
    exact: dict[str, object] = {
        "ids": [event.id],
        "authors": [event.pubkey],
        "kinds": [event.kind],
        "#h": [event.channel_id],
        "#d": [event.artifact_id],
        "since": event.created_at,
        "until": event.created_at,
    }
    assert parse_filter(exact, max_limit=10).matches(event)
    assert Filter().matches(event)
    key = data.draw(st.sampled_from(sorted(exact)))
    other = dict(exact)
    if key in ("since",):
        other[key] = event.created_at + 1
    elif key == "until":
        other[key] = event.created_at - 1 if event.created_at else None
    elif key == "kinds":
        other[key] = [90021 - event.kind]  # the other sync kind
    else:
        taken = exact[key]
        assert isinstance(taken, list)
        values = uuids if key in ("#h", "#d") else hex64
        other[key] = [data.draw(values.filter(lambda v: v not in taken))]
    if other[key] is None:
        return
    assert not parse_filter(other, max_limit=10).matches(event)
