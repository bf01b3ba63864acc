"""The sync WebSocket through a real server process: connect, AUTH, REQ, replay, EOSE, live,
CLOSE (PROTOCOL.md section 8)."""

from __future__ import annotations

import pytest

from tests.artifacts.ws.wsclient import NostrWs
from tests.factories import (
    create_artifact,
    delete_artifact,
    make_channel,
    make_community,
    make_key,
    move_artifact,
    update_artifact,
)
from tests.relay_server import RelayProcess

pytestmark = pytest.mark.django_db(transaction=True)


def test_replay_then_eose_then_live_then_close(relay_server: RelayProcess) -> None:
    community = make_community()
    alice = make_key()
    h = make_channel(community, owner=alice)
    elsewhere = make_channel(community, owner=alice, name="elsewhere")
    d1, head1 = create_artifact(community, alice, h, title="one")
    head1 = update_artifact(community, alice, d1, h, prev=head1, title="one, edited")
    d2, head2 = create_artifact(community, alice, h, title="two")
    tombstone = delete_artifact(community, alice, d2, h, prev=head2)
    d3, head3 = create_artifact(community, alice, h, title="three")
    moved = move_artifact(community, alice, d3, elsewhere, prev=head3)

    ws = NostrWs(relay_server.port)
    ws.req("early", {"kinds": [45010], "#h": [h]})
    answer = ws.recv()
    assert answer[:2] == ["CLOSED", "early"] and answer[2].startswith("auth-required:")

    assert ws.auth(alice)[2] is True
    replayed = ws.replay("s1", {"kinds": [45010, 45011], "#h": [h]})
    by_id = {e["id"]: e for e in replayed}
    # Current heads of the channel, the delete tombstone included, and the marker the move
    # left in the source channel; not d3's move revision (its home is now `elsewhere`).
    assert head1 in by_id and tombstone in by_id and moved not in by_id
    markers = [e for e in replayed if e["kind"] == 45011]
    assert len(markers) == 1 and ["d", d3] in markers[0]["tags"]
    assert ["prev", head3] in markers[0]["tags"]
    assert len(replayed) == 3
    created = [e["created_at"] for e in replayed]
    assert created == sorted(created, reverse=True)

    # Live: a new revision in the channel arrives; one in another channel does not.
    d4, head4 = create_artifact(community, alice, h, title="four")
    live = ws.next_event("s1")
    assert live["id"] == head4 and ["d", d4] in live["tags"]

    # CLOSE has no answer: the EOSE of a REQ sent after it shows the relay has handled it
    # (a connection's messages are handled in order) before the next writes are made.
    ws.send(["CLOSE", "s1"])
    ws.req("s2", {"kinds": [45010], "#h": [elsewhere]})
    assert ws.recv_until(lambda f: f[0] == "EOSE")[-1] == ["EOSE", "s2"]
    update_artifact(community, alice, d4, h, prev=head4, title="four, edited")
    head_elsewhere = update_artifact(community, alice, d3, elsewhere, prev=moved, title="3'")
    # s2's event comes after s1's would have: nothing for the closed s1 arrived before it.
    frames = ws.recv_until(lambda f: f[0] == "EVENT" and f[1] == "s2")
    assert [f for f in frames if f[1] == "s1"] == []
    assert frames[-1][2]["id"] == head_elsewhere
    ws.close()


def test_filters_select_what_is_replayed_and_streamed(relay_server: RelayProcess) -> None:
    community = make_community()
    alice, bob = make_key(), make_key()
    h = make_channel(community, owner=alice, members=[bob])
    d1, head1 = create_artifact(community, alice, h)
    d2, head2 = create_artifact(community, bob, h)

    ws = NostrWs(relay_server.port)
    ws.auth(bob)
    assert [e["id"] for e in ws.replay("by-d", {"#h": [h], "#d": [d1]})] == [head1]
    assert [e["id"] for e in ws.replay("by-author", {"authors": [bob.pubkey]})] == [head2]
    assert [e["id"] for e in ws.replay("by-id", {"ids": [head1, "0" * 64]})] == [head1]
    assert len(ws.replay("limit", {"#h": [h], "limit": 1})) == 1
    assert ws.replay("zero", {"#h": [h], "limit": 0}) == []
    assert ws.replay("markers-only", {"kinds": [45011], "#h": [h]}) == []
    # Several filters: their union, each event once.
    both = ws.replay("union", {"#d": [d1]}, {"authors": [alice.pubkey]}, {"#d": [d2]})
    assert sorted(e["id"] for e in both) == sorted([head1, head2])

    # Live events are matched against every predicate.
    ws.req("live-d2", {"#d": [d2]})
    ws.recv_until(lambda f: f[0] == "EOSE")
    update_artifact(community, alice, d1, h, prev=head1)
    new_head2 = update_artifact(community, bob, d2, h, prev=head2)
    frames = ws.recv_until(lambda f: f[0] == "EVENT" and f[1] == "live-d2")
    assert frames[-1][2]["id"] == new_head2
    assert all(f[2]["id"] != new_head2 or f[1] != "by-d" for f in frames if f[0] == "EVENT")
    ws.close()
