"""Malformed messages and every announced limit, through a real server: the right NOTICE,
CLOSED or OK false, and the connection survives wherever NIP-01 lets it."""

from __future__ import annotations

import socket
import uuid

import orjson
import pytest
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect
from websockets.typing import Origin

from tests.artifacts.ws.wsclient import NostrWs
from tests.factories import artifact_tags, make_channel, make_community, make_key, signed_event
from tests.relay_server import RelayProcess

pytestmark = pytest.mark.django_db(transaction=True)

MAX_MESSAGE_LENGTH = 131072


def _prefix(frame: list[object], verb: str, prefix: str) -> None:
    assert frame[0] == verb, frame
    assert isinstance(frame[-1], str) and frame[-1].startswith(prefix), frame


def _still_serving(ws: NostrWs, h: str) -> None:
    """The connection survived: a REQ is still answered."""
    assert ws.replay(f"alive-{uuid.uuid4().hex[:8]}", {"#h": [h]}) == []


def test_malformed_messages_get_notices_and_the_connection_survives(
    relay_server: RelayProcess,
) -> None:
    community = make_community()
    alice = make_key()
    h = make_channel(community, owner=alice)
    ws = NostrWs(relay_server.port)
    ws.auth(alice)
    for message in (
        "not json",
        '{"an": "object"}',
        "[]",
        "[1, 2]",
        '["HELLO", 1]',
        '["REQ", "dup", {"#h": [], "#h": []}]',  # duplicate key: refused by strict JSON
        '["EVENT"]',
        '["EVENT", "not an object"]',
        '["EVENT", {"id": "not hex"}]',
        '["CLOSE"]',
        '["AUTH", "not an event"]',
        '["REQ"]',
        '["REQ", 42, {}]',
    ):
        ws.send(message)
        _prefix(ws.recv(), "NOTICE", "invalid:")
    ws.send(b'["REQ", "binary", {}]')
    _prefix(ws.recv(), "NOTICE", "invalid:")
    _still_serving(ws, h)
    ws.close()


@pytest.mark.parametrize(
    ("filters", "prefix"),
    [
        ([], "invalid:"),
        ([{"search": "x"}], "invalid:"),
        ([{"#p": ["a" * 64]}], "invalid:"),
        ([{"kinds": [1]}], "blocked:"),
        # 9005 and the access hints 9000/9001/9002/9008 are served live (PROTOCOL.md section
        # 8); a kind the stream never carries, such as a channel's creation, is refused.
        ([{"kinds": [45010, 9007]}], "blocked:"),
        ([{"kinds": ["45010"]}], "invalid:"),
        ([{"#h": ["not-a-uuid"]}], "invalid:"),
        ([{"#d": ["8B4C2A4E-0000-4000-8000-000000000000"]}], "invalid:"),
        ([{"ids": ["ABC"]}], "invalid:"),
        ([{"authors": "a" * 64}], "invalid:"),
        ([{"limit": -1}], "invalid:"),
        ([{"limit": True}], "invalid:"),
        ([{"since": 1.5}], "invalid:"),
        ([{"until": -3}], "invalid:"),
        ([{"ids": ["a" * 64] * 257}], "invalid:"),
        ([{}] * 11, "invalid:"),
        (["not an object"], "invalid:"),
    ],
)
def test_bad_filters_are_closed_with_a_reason(
    relay_server: RelayProcess, filters: list[object], prefix: str
) -> None:
    community = make_community()
    alice = make_key()
    h = make_channel(community, owner=alice)
    ws = NostrWs(relay_server.port)
    ws.auth(alice)
    ws.req("bad", *filters)  # type: ignore[arg-type]
    frame = ws.recv()
    assert frame[:2] == ["CLOSED", "bad"]
    _prefix(frame, "CLOSED", prefix)
    _still_serving(ws, h)
    ws.close()


def test_subscription_ids_and_subscription_count_are_limited(relay_server: RelayProcess) -> None:
    community = make_community()
    alice = make_key()
    h = make_channel(community, owner=alice)
    ws = NostrWs(relay_server.port)
    ws.auth(alice)

    ws.req("x" * 65, {"#h": [h]})
    _prefix(ws.recv(), "CLOSED", "invalid:")
    ws.req("", {"#h": [h]})
    _prefix(ws.recv(), "CLOSED", "invalid:")
    assert ws.replay("y" * 64, {"#h": [h]}) == []  # exactly the limit: served

    for n in range(63):  # 64 open with the one above
        assert ws.replay(f"s{n}", {"#h": [h]}) == []
    ws.req("one-too-many", {"#h": [h]})
    frame = ws.recv()
    assert frame[1] == "one-too-many"
    _prefix(frame, "CLOSED", "rate-limited:")
    # Replacing an open subscription is not a new one; closing one frees a slot.
    assert ws.replay("s0", {"#h": [h]}) == []
    ws.send(["CLOSE", "s1"])
    assert ws.replay("one-more", {"#h": [h]}) == []
    ws.close()


def test_message_length_limit_closes_the_connection(relay_server: RelayProcess) -> None:
    community = make_community()
    alice = make_key()
    h = make_channel(community, owner=alice)
    ws = NostrWs(relay_server.port)
    ws.auth(alice)
    # Exactly max_message_length bytes is a message like any other (here: a bad filter).
    head = '["REQ","big",{"search":"'
    exact = head + "x" * (MAX_MESSAGE_LENGTH - len(head) - 3) + '"}]'
    assert len(exact.encode()) == MAX_MESSAGE_LENGTH
    ws.send(exact)
    _prefix(ws.recv(), "CLOSED", "invalid:")
    _still_serving(ws, h)
    # One byte more closes the connection (1009: message too big).
    ws.send(exact[:-3] + 'x"}]')
    assert ws.closed_code() == 1009


def test_events_need_an_authenticated_author(relay_server: RelayProcess) -> None:
    community = make_community()
    alice, bob = make_key(), make_key()
    h = make_channel(community, owner=alice, members=[bob])
    ws = NostrWs(relay_server.port)
    event = signed_event(alice, 45010, artifact_tags(op="create", d=str(uuid.uuid4()), h=h))
    _prefix(ws.publish(event), "OK", "auth-required:")
    ws.auth(bob)
    answer = ws.publish(event)
    assert answer[:3] == ["OK", event["id"], False]
    _prefix(answer, "OK", "restricted:")
    forged = dict(signed_event(bob, 45010, artifact_tags(op="create", d=str(uuid.uuid4()), h=h)))
    forged["content"] = "changed after signing"
    _prefix(ws.publish(forged), "OK", "invalid:")
    _prefix(ws.publish(signed_event(bob, 1, [["h", h]], "hello")), "OK", "blocked:")
    # Bob's own event is accepted, and a resubmission is a duplicate.
    own = signed_event(bob, 45010, artifact_tags(op="create", d=str(uuid.uuid4()), h=h))
    assert ws.publish(own) == ["OK", own["id"], True, ""]
    again = ws.publish(own)
    assert again[2] is True and again[3].startswith("duplicate:")
    ws.close()


def test_auth_is_checked_against_challenge_and_relay_url(relay_server: RelayProcess) -> None:
    make_community()
    alice = make_key()
    ws = NostrWs(relay_server.port)
    _prefix(ws.auth(alice, challenge="not-the-challenge"), "OK", "invalid:")
    _prefix(ws.auth(alice, relay_url="wss://elsewhere.example/"), "OK", "invalid:")
    stale = dict(
        signed_event(alice, 22242, [["relay", ws.url], ["challenge", ws.challenge]],
                     created_at=1_000_000)
    )
    ws.send(["AUTH", stale])
    _prefix(ws.recv(), "OK", "invalid:")
    assert ws.auth(alice)[2] is True
    # The port is part of the relay URL; the default port may be left out only for :80.
    assert ws.auth(alice, relay_url=ws.url.upper().replace("WS://", "ws://"))[2] is True
    ws.close()


def test_unknown_host_and_other_paths_are_refused(relay_server: RelayProcess) -> None:
    make_community()
    for host, path in (("unknown.example", "/"), ("team.example", "/other")):
        sock = socket.create_connection(("127.0.0.1", relay_server.port))
        url = f"ws://{host}:{relay_server.port}{path}"
        with pytest.raises(InvalidStatus) as refused, connect(url, sock=sock):
            pass
        assert refused.value.response.status_code == 403


def test_any_origin_is_accepted(relay_server: RelayProcess) -> None:
    make_community()
    sock = socket.create_connection(("127.0.0.1", relay_server.port))
    origin = Origin("https://anything.example")
    with connect(f"ws://team.example:{relay_server.port}/", sock=sock, origin=origin) as ws:
        assert orjson.loads(ws.recv(timeout=5))[0] == "AUTH"
