"""Staff actions are events (PROTOCOL.md section 2): signed by the relay's key, which counts as
a community admin for them, stored and applied by the writer a person's event goes through;
a no-op stores nothing, and the writer's rules (an archived channel takes no writes) hold."""

from __future__ import annotations

import time
import uuid

import pytest
from django.conf import settings

from artifacts.models import ArtifactHead, Channel, ChannelMember, Community, Event
from artifacts.services.channels import channel_archive
from artifacts.services.staff_actions import (
    StaffActionRefused,
    staff_channel_delete,
    staff_channel_update,
    staff_member_put,
    staff_member_remove,
    staff_redact,
)
from nostr.events import parse_event
from tests.factories import create_artifact, make_channel, make_community, make_key

pytestmark = pytest.mark.django_db


def _stored(event_id: str) -> Event:
    """The stored row of a staff action's event, its JSON verified as a client would."""
    row = Event.objects.get(event_id=event_id)
    parse_event(row.raw, now=int(time.time()))  # id and BIP-340 signature check out
    assert row.pubkey == settings.RELAY_PUBKEY
    return row


@pytest.fixture
def community() -> Community:
    return make_community()


def test_a_redaction_is_a_relay_signed_9005_and_a_second_one_stores_nothing(
    community: Community,
) -> None:
    alice = make_key()
    h = make_channel(community, owner=alice)
    d, head = create_artifact(community, alice, h)
    stamp = ArtifactHead.objects.get(artifact_id=d).modified_at
    event = staff_redact(community_id=community.pk, event_id=head)
    assert event is not None and event.kind == 9005
    row = _stored(event.id)
    assert str(row.channel_id) == h and ["e", head] in [list(t) for t in event.tags]
    assert Event.objects.get(event_id=head).deleted_at is not None
    assert ArtifactHead.objects.get(artifact_id=d).modified_at > stamp  # stamped like a 9005
    assert staff_redact(community_id=community.pk, event_id=head) is None
    assert Event.objects.filter(kind=9005).count() == 1


def test_member_actions_are_9000_and_9001_and_repeat_within_a_second(
    community: Community,
) -> None:
    h = make_channel(community, owner=make_key(), visibility="private")
    bob = make_key().pubkey
    channel_id = uuid.UUID(h)
    made = [
        staff_member_put(community_id=community.pk, channel_id=channel_id, pubkey=bob,
                         role="admin"),
        staff_member_remove(community_id=community.pk, channel_id=channel_id, pubkey=bob),
        # The same put again in the same second would sign the same event: it is signed a
        # second later, so it is stored and applied, not taken for a duplicate.
        staff_member_put(community_id=community.pk, channel_id=channel_id, pubkey=bob,
                         role="admin"),
        staff_member_remove(community_id=community.pk, channel_id=channel_id, pubkey=bob),
    ]
    assert [e.kind for e in made if e is not None] == [9000, 9001, 9000, 9001]
    assert len({_stored(e.id).event_id for e in made if e is not None}) == 4
    member = ChannelMember.objects.get(channel_id=channel_id, pubkey=bob)
    assert member.removed_at is not None and member.role == "admin"
    assert staff_member_remove(community_id=community.pk, channel_id=channel_id,
                               pubkey=bob) is None


def test_a_channel_edit_names_only_what_changes(community: Community) -> None:
    h = make_channel(community, owner=make_key(), name="general")
    channel_id = uuid.UUID(h)
    changed, event = staff_channel_update(community_id=community.pk, channel_id=channel_id,
                                          name="general", visibility="private")
    assert changed == ["visibility"] and event is not None
    _stored(event.id)
    assert [list(t) for t in event.tags] == [["h", h], ["private"]]
    assert Channel.objects.get(channel_id=channel_id).visibility == "private"
    assert staff_channel_update(community_id=community.pk, channel_id=channel_id,
                                name="general", visibility="private") == ([], None)


def test_a_channel_deletion_is_a_9008_once(community: Community) -> None:
    h = make_channel(community, owner=make_key())
    event = staff_channel_delete(community_id=community.pk, channel_id=uuid.UUID(h))
    assert event is not None and _stored(event.id).kind == 9008
    assert Channel.objects.get(channel_id=h).deleted_at is not None
    assert staff_channel_delete(community_id=community.pk, channel_id=uuid.UUID(h)) is None


def test_the_writers_rules_hold_for_the_relay_too(community: Community) -> None:
    alice = make_key()
    h = make_channel(community, owner=alice)
    _, head = create_artifact(community, alice, h)
    channel_archive(community_id=community.pk, channel_id=uuid.UUID(h))
    with pytest.raises(StaffActionRefused, match=r"^restricted: .*archived"):
        staff_redact(community_id=community.pk, event_id=head)
    # Refused: nothing stored, nothing redacted.
    assert not Event.objects.filter(kind=9005).exists()
    assert Event.objects.get(event_id=head).deleted_at is None
