"""Access changes while subscribed (PROTOCOL.md section 8): a subscriber who loses access stops
receiving at once; a subscription that named only that channel gets `CLOSED "restricted: ..."`;
a re-granted subscriber can subscribe again."""

from __future__ import annotations

import uuid

import pytest
from django.db import connection

from artifacts.services.channels import channel_update
from artifacts.services.members import member_remove
from tests.artifacts.ws.wsclient import NostrWs
from tests.factories import (
    add_member,
    create_artifact,
    make_channel,
    make_community,
    make_key,
    signed_event,
    update_artifact,
    write,
)
from tests.relay_server import RelayProcess

pytestmark = pytest.mark.django_db(transaction=True)


def _eose(ws: NostrWs, sub_id: str) -> None:
    frames = ws.recv_until(lambda f: f[0] in ("EOSE", "CLOSED") and f[1] == sub_id)
    assert frames[-1] == ["EOSE", sub_id], frames


def test_removed_member_is_closed_and_stops_receiving(relay_server: RelayProcess) -> None:
    community = make_community()
    alice, bob = make_key(), make_key()
    private = make_channel(community, owner=alice, visibility="private", members=[bob])
    lobby = make_channel(community, owner=alice, name="lobby")
    d, head = create_artifact(community, alice, private)
    lobby_d, lobby_head = create_artifact(community, alice, lobby)

    ws = NostrWs(relay_server.port)
    ws.auth(bob)
    assert [e["id"] for e in ws.replay("only-private", {"#h": [private]})] == [head]
    ws.req("both", {"#h": [private, lobby]})
    _eose(ws, "both")
    ws.req("lobby", {"#h": [lobby]})
    _eose(ws, "lobby")

    # Alice removes Bob over the WebSocket, as a client would.
    admin_ws = NostrWs(relay_server.port)
    admin_ws.auth(alice)
    removal = signed_event(alice, 9001, [["h", private], ["p", bob.pubkey]])
    assert admin_ws.publish(removal)[2] is True

    frames = ws.recv_until(lambda f: f[0] == "CLOSED")
    assert frames[-1][1] == "only-private" and frames[-1][2].startswith("restricted:")
    # No further events of the private channel, on either subscription; the lobby goes on.
    head = update_artifact(community, alice, d, private, prev=head)
    lobby_head = update_artifact(community, alice, lobby_d, lobby, prev=lobby_head)
    frames = ws.recv_until(lambda f: f[0] == "EVENT" and f[1] == "lobby")
    events = [f for f in frames if f[0] == "EVENT"]
    assert {f[1] for f in events} <= {"both", "lobby"}
    assert all(f[2]["id"] == lobby_head for f in events)
    assert ws.expect_quiet(0.3) == []

    # Re-granted: a new REQ replays and streams the private channel again.
    add_member(community, private, bob)
    assert [e["id"] for e in ws.replay("again", {"#h": [private]})] == [head]
    head = update_artifact(community, alice, d, private, prev=head)
    assert ws.next_event("again")["id"] == head
    ws.close()
    admin_ws.close()


def test_request_for_unreadable_channels_is_closed_without_saying_which(
    relay_server: RelayProcess,
) -> None:
    community = make_community()
    alice, mallory = make_key(), make_key()
    private = make_channel(community, owner=alice, visibility="private")
    create_artifact(community, alice, private)
    missing = str(uuid.uuid4())

    ws = NostrWs(relay_server.port)
    ws.auth(mallory)
    answers = []
    for sub_id, channel in (("private", private), ("missing", missing)):
        ws.req(sub_id, {"#h": [channel]})
        answers.append(ws.recv())
    assert answers[0] == ["CLOSED", "private", answers[0][2]]
    assert answers[0][2].startswith("restricted:")
    # The same words whether the channel is private or does not exist.
    assert answers[1] == ["CLOSED", "missing", answers[0][2]]
    # Without #h, only readable channels are replayed: nothing here.
    assert ws.replay("all", {"kinds": [45010]}) == []
    ws.close()


def test_any_authenticated_pubkey_keeps_the_channel_readable(relay_server: RelayProcess) -> None:
    community = make_community()
    alice, bob, carol = make_key(), make_key(), make_key()
    private = make_channel(community, owner=alice, visibility="private", members=[bob, carol])
    d, head = create_artifact(community, alice, private)

    ws = NostrWs(relay_server.port)
    ws.auth(bob)
    ws.auth(carol)
    assert [e["id"] for e in ws.replay("p", {"#h": [private]})] == [head]
    write(community, alice, 9001, [["h", private], ["p", bob.pubkey]])
    head = update_artifact(community, alice, d, private, prev=head)
    # Carol, authenticated on the same connection, still reads the channel.
    assert ws.next_event("p")["id"] == head
    write(community, alice, 9001, [["h", private], ["p", carol.pubkey]])
    frames = ws.recv_until(lambda f: f[0] == "CLOSED")
    assert frames[-1][1] == "p" and frames[-1][2].startswith("restricted:")
    ws.close()


def test_channel_turned_private_closes_non_members(relay_server: RelayProcess) -> None:
    community = make_community()
    alice, bob = make_key(), make_key()
    h = make_channel(community, owner=alice)
    _, head = create_artifact(community, alice, h)

    ws = NostrWs(relay_server.port)
    ws.auth(bob)
    assert [e["id"] for e in ws.replay("s", {"#h": [h]})] == [head]
    write(community, alice, 9002, [["h", h], ["private"]])
    frames = ws.recv_until(lambda f: f[0] == "CLOSED")
    assert frames[-1][1] == "s" and frames[-1][2].startswith("restricted:")
    ws.close()


def test_operator_changes_without_events_are_noticed(relay_server: RelayProcess) -> None:
    """Operators' edits store no event; the services announce them (`access_changed`)."""
    community = make_community()
    alice, bob = make_key(), make_key()
    private = make_channel(community, owner=alice, visibility="private", members=[bob])
    opened = make_channel(community, owner=alice, name="open")
    create_artifact(community, alice, private)
    create_artifact(community, alice, opened)

    ws = NostrWs(relay_server.port)
    ws.auth(bob)
    ws.replay("member", {"#h": [private]})
    ws.replay("listing", {"#h": [opened]})
    member_remove(community_id=community.pk, channel_id=uuid.UUID(private), pubkey=bob.pubkey)
    frames = ws.recv_until(lambda f: f[0] == "CLOSED", timeout=1.5)
    assert frames[-1][1] == "member" and frames[-1][2].startswith("restricted:")
    channel_update(community_id=community.pk, channel_id=uuid.UUID(opened), visibility="private")
    frames = ws.recv_until(lambda f: f[0] == "CLOSED", timeout=1.5)
    assert frames[-1][1] == "listing" and frames[-1][2].startswith("restricted:")
    ws.close()


def test_a_change_made_around_the_services_is_noticed_by_the_poll(
    relay_server: RelayProcess,
) -> None:
    """A manual fix in SQL announces nothing; each hub's poll of the community's listing and
    membership marks notices it within seconds."""
    community = make_community()
    alice, bob = make_key(), make_key()
    private = make_channel(community, owner=alice, visibility="private", members=[bob])
    create_artifact(community, alice, private)
    ws = NostrWs(relay_server.port)
    ws.auth(bob)
    ws.replay("member", {"#h": [private]})
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE channel_members SET removed_at = now(), sync_modified_at = now()"
            " WHERE community_id = %s AND pubkey = %s",
            [community.pk, bob.pubkey],
        )
    frames = ws.recv_until(lambda f: f[0] == "CLOSED", timeout=8)
    assert frames[-1][1] == "member" and frames[-1][2].startswith("restricted:")
    ws.close()
