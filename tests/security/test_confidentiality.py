"""Confidentiality sweep: no read path shows a reader what it may not read (PROTOCOL.md 1, 5, 8).

One world on a real relay: Alice owns a private channel P (members Alice and Dave) holding
artifacts X and Z; Bob reads the same community but is in no private channel; community B is
served by the same relay. For every read path (plain, history, rounds, WebSocket replay and live,
write answers, NIP-11), through Bob's own requests, another reader's token, and a Host header
naming another community, the raw bytes Bob receives must contain none of P's secrets: its id
and name, the ids and event ids of its artifacts, their titles and contents, and Dave's pubkey.
Each check also has a positive control (Bob does receive what he may read), so an empty answer
cannot pass for a confidential one.
"""

from __future__ import annotations

import secrets
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson
import pytest

from nostr.nip98 import make_nip98_header
from tests.faults.clients import Client, Collection, WsClient, d_of
from tests.faults.deployment import Deployment, Relay

A_HOST = "a.test"
B_HOST = "b.test"
KINDS = [45010, 45011]


@dataclass
class World:
    relay: Relay
    alice: Client
    bob: Client
    dave: Client
    open_channel: str
    private: str
    y: dict[str, Any]
    x: dict[str, Any]
    z: dict[str, Any]
    secrets: set[str] = field(default_factory=set)

    def assert_clean(self, text: str | bytes, *, allowed: frozenset[str] | set[str] = frozenset()
                     ) -> None:
        """`text` (anything Bob received) names none of the private channel's secrets."""
        if isinstance(text, bytes):
            text = text.decode("utf-8", "replace")
        lowered = text.lower()
        leaked = {s for s in self.secrets - allowed if s.lower() in lowered}
        assert not leaked, f"leaked {leaked} in {text[:500]}"


def _ok(answer: list[Any]) -> None:
    assert answer[0] == "OK" and answer[2] is True, answer


@pytest.fixture(scope="module")
def world(dep: Deployment, relay: Relay) -> World:
    dep.create_community(A_HOST, name="Community A", open_channel_creation=True)
    dep.create_community(B_HOST, name="Community B", open_channel_creation=True)
    alice = Client(relay.url, host=A_HOST)
    bob = Client(relay.url, host=A_HOST)
    dave = Client(relay.url, host=A_HOST)
    private_name = f"secret-plans-{secrets.token_hex(4)}"
    open_channel = alice.create_channel(name="lobby")
    private = alice.create_channel(private=True, name=private_name)
    other_private = alice.create_channel(private=True, name=f"hidden-{secrets.token_hex(4)}")
    _ok(alice.put_member(private, dave.pubkey))
    y = alice.artifact(open_channel, title="public note")
    _ok(alice.publish(y))
    x1 = alice.artifact(
        private, title=f"title-{secrets.token_hex(4)}", content=secrets.token_hex(8)
    )
    _ok(alice.publish(x1))
    x = alice.artifact(private, op="update", d=d_of(x1), prev=x1["id"],
                       title=f"title-{secrets.token_hex(4)}", content=secrets.token_hex(8))
    _ok(alice.publish(x))
    z1 = alice.artifact(other_private, title=f"title-{secrets.token_hex(4)}")
    _ok(alice.publish(z1))
    z = alice.artifact(private, op="move", d=d_of(z1), prev=z1["id"], title="moved")
    _ok(alice.publish(z))
    # Community B: Bob's own note there must never show on A's host and the other way round.
    world = World(relay, alice, bob, dave, open_channel, private, y, x, z)
    world.secrets = {
        private, private_name, other_private, d_of(x), d_of(z), dave.pubkey,
        *(e["id"] for e in (x1, x, z1, z)),
        *(tag[1] for e in (x1, x, z1) for tag in e["tags"] if tag[0] == "title"),
        *(e["content"] for e in (x1, x) if e["content"]),
    }
    return world


def test_plain_and_history_reads_show_nothing_private(world: World) -> None:
    bob = world.bob
    everything = bob.query({"artifact": "current"})
    assert everything.status_code == 200
    assert world.y["id"] in everything.text  # positive control
    world.assert_clean(everything.text)
    for filter_ in (
        {"artifact": "current", "#h": [world.private]},
        {"artifact": "current", "#h": [world.private, world.open_channel]},
        {"artifact": "current", "#d": [d_of(world.x), d_of(world.z)]},
        {"artifact": "current", "#type": ["buzz.task"], "limit": 1000},
        {"artifact": "history", "#d": [d_of(world.x), d_of(world.z), d_of(world.y)]},
    ):
        response = bob.query(filter_)
        assert response.status_code in (200, 400), response.text
        world.assert_clean(response.text)
    history = bob.query({"artifact": "history", "#d": [d_of(world.y)]})
    assert world.y["id"] in history.text
    # Dave, a member, does read P: the secrets are real and the sweep is not vacuous.
    assert world.x["id"] in world.dave.query({"artifact": "current", "#h": [world.private]}).text


def test_rounds_show_nothing_private_even_as_p_changes(world: World) -> None:
    alice, bob = world.alice, world.bob
    plain = Collection(bob, keep_pages=True)
    scoped = Collection(bob, {"#h": [world.open_channel, world.private]}, keep_pages=True)
    for collection in (plain, scoped):
        collection.catch_up()
        assert d_of(world.y) in collection.items
    # Changes inside P of every kind: update, delete, a move between private channels, a
    # member removed; and one visible change as a positive control.
    x2 = alice.artifact(world.private, op="update", d=d_of(world.x), prev=world.x["id"])
    _ok(alice.publish(x2))
    _ok(alice.publish(alice.artifact(world.private, op="delete", d=d_of(x2), prev=x2["id"])))
    temp = alice.create_channel(private=True, name=f"temp-{secrets.token_hex(4)}")
    world.secrets |= {temp, x2["id"]}
    w = alice.artifact(world.private, title="w")
    _ok(alice.publish(w))
    _ok(alice.publish(alice.artifact(temp, op="move", d=d_of(w), prev=w["id"], title="w")))
    world.secrets |= {d_of(w), w["id"]}
    y2 = alice.artifact(world.open_channel, op="update", d=d_of(world.y), prev=world.y["id"])
    _ok(alice.publish(y2))
    world.y = y2
    for collection in (plain, scoped):
        collection.catch_up()
        assert collection.items[d_of(y2)]["id"] == y2["id"]
        for page in collection.pages:
            world.assert_clean(repr(page))


def test_another_readers_token_is_refused_and_reveals_nothing(world: World) -> None:
    dave_round = Collection(world.dave, {"#h": [world.private]})
    dave_round.catch_up()
    assert dave_round.items  # Dave reads P
    for filter_ in ({"#h": [world.private]}, {}):
        token = dave_round.progress if filter_ else _token_of(world.dave, {})
        response = world.bob.query({"artifact": "current", **filter_, "progress": token})
        assert response.status_code == 400, response.text
        assert response.json()["error"] == "invalid_progress"
        world.assert_clean(response.text)


def _token_of(client: Client, filter_: dict[str, Any]) -> str:
    collection = Collection(client, filter_)
    collection.round()
    assert collection.progress is not None
    return collection.progress


def test_host_of_another_community_shows_nothing_of_this_one(world: World) -> None:
    alice_on_b = world.alice.with_host(B_HOST)
    bob_on_b = world.bob.with_host(B_HOST)
    b_channel = bob_on_b.create_channel(name="b-lobby")
    b_note = bob_on_b.artifact(b_channel, title="b note")
    _ok(bob_on_b.publish(b_note))
    public_a = {world.open_channel, d_of(world.y), world.y["id"]}
    for reader in (alice_on_b, bob_on_b):
        for filter_ in (
            {"artifact": "current"},
            {"artifact": "current", "#h": [world.private, world.open_channel]},
            {"artifact": "history", "#d": [d_of(world.x), d_of(world.y)]},
            {"artifact": "current", "progress": None},
        ):
            response = reader.query(filter_)
            assert response.status_code == 200, response.text
            world.assert_clean(response.text)
            assert not any(s in response.text for s in public_a), response.text
    assert b_note["id"] in bob_on_b.query({"artifact": "current"}).text  # positive control
    # A's token at B's host, and a NIP-98 header signed for A's host sent to B's.
    token = _token_of(world.alice, {})
    response = alice_on_b.query({"artifact": "current", "progress": token})
    assert response.status_code == 400 and response.json()["error"] == "invalid_progress"
    world.assert_clean(response.text)
    body = b'[{"artifact":"current"}]'
    header = make_nip98_header(world.alice.secret, url=world.alice.signed_url("/query"),
                               method="POST", body=body)
    response = alice_on_b.post("/query", body, authorization=header)
    assert response.status_code == 401
    world.assert_clean(response.text)
    b_secrets = {b_channel, b_note["id"], d_of(b_note)}
    assert not any(s in world.bob.query({"artifact": "current"}).text for s in b_secrets)


def test_websocket_replay_shows_nothing_private(world: World) -> None:
    ws = WsClient(world.relay.port, [world.bob.secret], host=A_HOST)
    try:
        # Bob names P himself, so its id may come back; nothing else of it may.
        only_private = ws.req("p", {"kinds": KINDS, "#h": [world.private]})
        both = ws.req("both", {"kinds": KINDS, "#h": [world.open_channel, world.private]})
        everything = ws.req("all", {"kinds": KINDS, "#d": [d_of(world.x), d_of(world.z)]})
        for messages in (only_private, both, everything):
            world.assert_clean(repr(messages), allowed={world.private})
        assert any(m[0] == "EVENT" and m[2]["id"] == world.y["id"] for m in both)
    finally:
        ws.close()
    dave_ws = WsClient(world.relay.port, [world.dave.secret], host=A_HOST)
    try:
        replay = dave_ws.req("p", {"kinds": KINDS, "#h": [world.private]})
        assert any(m[0] == "EVENT" and d_of(m[2]) == d_of(world.z) for m in replay)
    finally:
        dave_ws.close()


def test_websocket_live_stream_shows_nothing_private(world: World) -> None:
    alice = world.alice
    ws = WsClient(world.relay.port, [world.bob.secret], host=A_HOST)
    dave_ws = WsClient(world.relay.port, [world.dave.secret], host=A_HOST)
    other_ws = WsClient(world.relay.port, [world.bob.secret], host=B_HOST)
    try:
        ws.req("live", {"kinds": KINDS, "#h": [world.open_channel, world.private]})
        other_ws.req("live", {"kinds": KINDS, "#h": [world.open_channel, world.private]})
        dave_ws.req("p", {"kinds": KINDS, "#h": [world.private]})
        secret_note = alice.artifact(world.private, title=f"live-{secrets.token_hex(4)}")
        world.secrets |= {secret_note["id"], d_of(secret_note)}
        _ok(alice.publish(secret_note))
        # Dave, a member, gets it live: the stream works.
        assert _wait_event(dave_ws, secret_note["id"])
        public_note = alice.artifact(world.open_channel, title="live public")
        _ok(alice.publish(public_note))
        received = _drain_until(ws, public_note["id"])
        world.assert_clean(received, allowed={world.private})
        world.assert_clean(_drain(other_ws, 1.0), allowed={world.private})
        # Dave loses access: his subscription that named only P is closed, and nothing of P
        # reaches him afterwards.
        _ok(alice.remove_member(world.private, world.dave.pubkey))
        later = alice.artifact(world.private, title=f"after-{secrets.token_hex(4)}")
        _ok(alice.publish(later))
        after_removal = _drain(dave_ws, 2.0)
        assert later["id"] not in after_removal and d_of(later) not in after_removal
        assert '"CLOSED"' in after_removal, after_removal
    finally:
        for socket_ in (ws, dave_ws, other_ws):
            socket_.close()
        _ok(alice.put_member(world.private, world.dave.pubkey))


def _wait_event(ws: WsClient, event_id: str, timeout: float = 10) -> bool:
    return event_id in _drain_until(ws, event_id, timeout)


def _drain_until(ws: WsClient, needle: str, timeout: float = 10) -> str:
    seen = []
    deadline = time.monotonic() + timeout
    while (left := deadline - time.monotonic()) > 0:
        text = ws.recv_text(left)
        if text is None:
            break
        seen.append(text)
        if needle in text:
            break
    joined = "\n".join(seen)
    assert needle in joined, f"{needle} never arrived: {joined[:500]}"
    return joined


def _drain(ws: WsClient, quiet: float) -> str:
    seen = []
    while (text := ws.recv_text(quiet)) is not None:
        seen.append(text)
    return "\n".join(seen)


def test_write_answers_reveal_nothing_private(world: World) -> None:
    bob, x = world.bob, world.x
    unknown_channel = str(uuid.uuid4())
    fake_prev = secrets.token_hex(32)
    attempts = [
        bob.artifact(world.private, title="intrude"),
        bob.artifact(world.private, op="update", d=d_of(x), prev=x["id"]),
        bob.artifact(world.open_channel, op="move", d=d_of(x), prev=x["id"], title="steal"),
        bob.artifact(world.private, op="delete", d=d_of(x), prev=x["id"]),
        bob.artifact(world.open_channel, d=d_of(x), title="squat"),
        bob.sign(9000, [["h", world.private], ["p", bob.pubkey]]),
        bob.sign(9001, [["h", world.private], ["p", world.dave.pubkey]]),
        bob.sign(9002, [["h", world.private], ["name", "renamed"]]),
        bob.sign(9005, [["h", world.private], ["e", x["id"]]]),
        bob.sign(9008, [["h", world.private]]),
    ]
    # Bob wrote the ids in these events himself: only what he did not send may not come back.
    for event in attempts:
        answer = bob.publish(event)
        assert answer[2] is False, answer
        mentioned = {value for tag in event["tags"] for value in tag[1:]}
        world.assert_clean(orjson_text(answer), allowed=mentioned | {event["id"]})
    # A private artifact and a non-existent one get the same answer: no existence oracle
    # beyond the unguessable UUID itself.
    for make in (
        lambda d, prev: bob.artifact(world.open_channel, op="update", d=d, prev=prev),
        lambda d, prev: bob.artifact(world.open_channel, op="move", d=d, prev=prev),
    ):
        real = bob.publish(make(d_of(x), fake_prev))
        fake = bob.publish(make(str(uuid.uuid4()), fake_prev))
        assert real[2:] == fake[2:], (real, fake)
    real = bob.publish(bob.sign(9000, [["h", world.private], ["p", bob.pubkey]]))
    fake = bob.publish(bob.sign(9000, [["h", unknown_channel], ["p", bob.pubkey]]))
    assert real[2] is False and fake[2] is False
    assert real[3].replace(world.private, "<h>") == fake[3].replace(unknown_channel, "<h>")


def orjson_text(value: Any) -> str:
    return orjson.dumps(value).decode()


@pytest.mark.parametrize("path", ["/", "/info"])
def test_nip11_names_no_channel_artifact_or_member(world: World, path: str) -> None:
    for host in (A_HOST, B_HOST):
        response = httpx.get(
            f"{world.relay.url}{path}",
            headers={"Accept": "application/nostr+json", "Host": f"{host}:{world.relay.port}"},
        )
        assert response.status_code == 200
        world.assert_clean(response.text)
        assert world.open_channel not in response.text
