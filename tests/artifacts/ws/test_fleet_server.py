"""Live fan-out across instances: two relay processes sharing PostgreSQL and Redis."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from tests.artifacts.ws.wsclient import NostrWs
from tests.factories import artifact_tags, make_channel, make_community, make_key, signed_event
from tests.relay_server import RelayProcess, start_relay

pytestmark = pytest.mark.django_db(transaction=True)


def test_write_accepted_by_one_instance_reaches_a_subscriber_of_the_other(
    relay_server: RelayProcess,
) -> None:
    community = make_community()
    alice, bob = make_key(), make_key()
    h = make_channel(community, owner=alice, visibility="private", members=[bob])
    other = start_relay()
    try:
        subscriber = NostrWs(other.port)
        subscriber.auth(bob)
        assert subscriber.replay("s", {"kinds": [45010, 45011], "#h": [h]}) == []

        writer = NostrWs(relay_server.port)
        writer.auth(alice)
        for title in ("first", "second", "third"):
            tags = artifact_tags(op="create", d=str(uuid.uuid4()), h=h, title=title)
            event = signed_event(alice, 45010, tags, "{}")
            ok = writer.publish(event)
            assert ok == ["OK", event["id"], True, ""]
            assert subscriber.next_event("s")["id"] == event["id"]
        # In order, once each, and nothing else (no NOTICE of a lost delivery).
        assert subscriber.expect_quiet(1.5) == []
        writer.close()
        subscriber.close()
    finally:
        other.stop()



def test_a_lost_live_message_is_reported_with_a_notice(relay_server: RelayProcess) -> None:
    """A publisher that took a sequence number and never published (crashed, Redis hiccup):
    the subscriber learns that it missed something and should run an HTTP round."""
    from artifacts.ws.publish import community_group, next_sequence
    from tests.factories import create_artifact

    community = make_community()
    alice = make_key()
    h = make_channel(community, owner=alice)
    ws = NostrWs(relay_server.port)
    ws.auth(alice)
    assert ws.replay("s", {"#h": [h]}) == []

    asyncio.run(next_sequence(community_group(community.pk)))  # taken, never published
    _, head = create_artifact(community, alice, h)
    assert ws.next_event("s")["id"] == head
    notice = ws.recv(timeout=5)
    assert notice[0] == "NOTICE" and notice[1].startswith("error:")
    assert "HTTP round" in notice[1]
    # Reordering within the grace period is not a loss: nothing more is reported.
    _, head = create_artifact(community, alice, h)
    assert ws.next_event("s")["id"] == head
    assert ws.expect_quiet(1.5) == []
    ws.close()


def test_a_single_instance_without_redis_delivers_through_the_in_memory_layer() -> None:
    """The quickstart: no REDIS_URL, so the in-process channel layer and sequence counter."""
    community = make_community()
    alice, bob = make_key(), make_key()
    h = make_channel(community, owner=alice, members=[bob])
    relay = start_relay({"REDIS_URL": None})
    try:
        subscriber = NostrWs(relay.port)
        subscriber.auth(bob)
        assert subscriber.replay("s", {"#h": [h]}) == []
        writer = NostrWs(relay.port)
        writer.auth(alice)
        for _ in range(3):
            tags = artifact_tags(op="create", d=str(uuid.uuid4()), h=h)
            event = signed_event(alice, 45010, tags, "{}")
            assert writer.publish(event)[2] is True
            assert subscriber.next_event("s")["id"] == event["id"]
        assert subscriber.expect_quiet(1.5) == []
        writer.close()
        subscriber.close()
    finally:
        relay.stop()
