"""Kind 9005: who may redact what; redaction never moves heads and never writes a marker."""

from __future__ import annotations

import uuid

import pytest

from artifacts.models import ArtifactHead, Community, Event
from tests.factories import (
    Key,
    add_member,
    create_artifact,
    make_channel,
    make_community,
    make_key,
    move_artifact,
    write,
)


def _redacted(event_id: str) -> bool:
    return Event.objects.get(event_id=event_id).deleted_at is not None


@pytest.mark.parametrize(
    ("actor", "allowed"),
    [("author", True), ("owner", True), ("channel admin", True), ("member", False),
     ("community admin", True)],
)
def test_who_may_redact_a_revision(db: None, actor: str, allowed: bool) -> None:
    author, owner, admin, member, community_admin = (make_key() for _ in range(5))
    community = make_community(admins=[community_admin])
    h = make_channel(community, owner=owner, visibility="private", members=[author, member])
    add_member(community, h, admin, role="admin")
    d, head = create_artifact(community, author, h)
    who = {"author": author, "owner": owner, "channel admin": admin, "member": member,
           "community admin": community_admin}[actor]
    result = write(community, who, 9005, [["h", h], ["e", head]], expect=allowed)
    assert _redacted(head) == allowed
    if not allowed:
        assert result.message == (
            "restricted: only the author, a channel owner or admin may redact this event")
    # The head stays the head either way.
    assert ArtifactHead.objects.get(artifact_id=d).event_id == head
    assert not Event.objects.filter(kind=45011).exists()


def test_an_outsider_learns_nothing_about_private_channels_or_their_events(
    community: Community, alice: Key, bob: Key
) -> None:
    h = make_channel(community, owner=alice, visibility="private")
    _, head = create_artifact(community, alice, h)
    missing_channel = str(uuid.uuid4())
    answers = {
        write(community, bob, 9005, [["h", channel], ["e", event]], expect=False)
        .message.replace(channel, "<h>")
        for channel, event in [(h, head), (h, "0" * 64), (missing_channel, head)]
    }
    assert answers == {"restricted: cannot redact events in channel <h>"}
    assert not _redacted(head)


def test_an_author_who_left_may_still_redact_its_own_event(
    community: Community, alice: Key, bob: Key
) -> None:
    h = make_channel(community, owner=alice, visibility="private", members=[bob])
    _, head = create_artifact(community, bob, h)
    write(community, bob, 9001, [["h", h], ["p", bob.pubkey]])
    write(community, bob, 9005, [["h", h], ["e", head]])
    assert _redacted(head)


def test_markers_cannot_be_redacted_and_events_must_be_in_the_named_channel(
    community: Community, alice: Key
) -> None:
    source, target = make_channel(community, owner=alice), make_channel(community, owner=alice)
    d, head = create_artifact(community, alice, source)
    move_artifact(community, alice, d, target, prev=head)
    marker = Event.objects.get(kind=45011).event_id
    result = write(community, alice, 9005, [["h", source], ["e", marker]], expect=False)
    assert result.message == (
        "invalid: only artifact revisions and channel events (9000-9008) can be redacted")
    result = write(community, alice, 9005, [["h", target], ["e", head]], expect=False)
    assert result.message == f"invalid: no event {head} in channel {target}"


def test_channel_events_can_be_redacted_without_undoing_them(
    community: Community, alice: Key, bob: Key
) -> None:
    h = make_channel(community, owner=alice)
    grant = write(community, alice, 9000, [["h", h], ["p", bob.pubkey]]).event_id
    write(community, alice, 9005, [["h", h], ["e", grant]])
    assert _redacted(grant)
    from artifacts.models import ChannelMember

    assert ChannelMember.objects.get(pubkey=bob.pubkey).removed_at is None


def test_redacting_twice_is_accepted_and_stamps_once(community: Community, alice: Key) -> None:
    h = make_channel(community, owner=alice)
    d, head = create_artifact(community, alice, h)
    write(community, alice, 9005, [["h", h], ["e", head]])
    stamp = ArtifactHead.objects.get(artifact_id=d).modified_at
    again = write(community, alice, 9005, [["h", h], ["e", head], ["reason", "again"]])
    assert again.message == ""
    assert ArtifactHead.objects.get(artifact_id=d).modified_at == stamp
