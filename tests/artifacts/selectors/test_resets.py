"""When a page resets the reader (starts a new full round) and when it must not."""

from __future__ import annotations

import time
import uuid
from datetime import timedelta
from typing import Any

import pytest
from django.conf import settings

from artifacts.selectors.filters import parse_filter
from artifacts.selectors.rounds import prepare_round
from artifacts.services.channels import channel_archive, channel_restore
from artifacts.services.communities import community_update_policy
from artifacts.services.sync_epoch import bump_epoch
from artifacts.tokens import InvalidProgress
from tests.artifacts.selectors.replica import Replica
from tests.factories import (
    add_member,
    create_artifact,
    make_channel,
    make_community,
    make_key,
    write,
)

pytestmark = pytest.mark.django_db(transaction=True)


def synced(community: Any, reader: Any, **kwargs: Any) -> Replica:
    replica = Replica(community, reader.pubkey, **kwargs)
    replica.round()
    return replica


def next_resets(replica: Replica) -> bool:
    page = replica.page()
    while page.more:  # finish the round so the collection can be compared
        replica.page()
    return page.reset


@pytest.fixture
def world() -> dict[str, Any]:
    owner, reader, other, admin = make_key(), make_key(), make_key(), make_key()
    community = make_community(admins=[admin])
    readable = make_channel(community, owner=owner)
    joined = make_channel(community, owner=owner, visibility="private", members=[reader])
    hidden = make_channel(community, owner=owner, visibility="private")
    for channel in (readable, joined, hidden):
        create_artifact(community, owner, channel)
    return locals()


def test_first_page_resets(world: dict[str, Any]) -> None:
    replica = Replica(world["community"], world["reader"].pubkey)
    assert replica.page().reset


def test_visibility_change_of_a_readable_channel_resets(world: dict[str, Any]) -> None:
    replica = synced(world["community"], world["reader"])
    write(world["community"], world["owner"], 9002, [["h", world["readable"]], ["private"]])
    assert next_resets(replica)
    assert replica.heads() == replica.fresh()
    assert len(replica.items) == 1  # only the joined channel's artifact is left


def test_listing_changes_that_leave_the_view_alone_do_not_reset(world: dict[str, Any]) -> None:
    replica = synced(world["community"], world["reader"])
    community, owner = world["community"], world["owner"]
    # The reader is a member: private -> public -> private changes nothing it can read.
    write(community, owner, 9002, [["h", world["joined"]], ["public"]])
    assert not next_resets(replica)
    write(community, owner, 9002, [["h", world["joined"]], ["private"]])
    assert not next_resets(replica)
    # A channel the reader cannot read: deleted, restored, archived.
    write(community, owner, 9008, [["h", world["hidden"]]])
    assert not next_resets(replica)
    channel_restore(community_id=community.pk, channel_id=uuid.UUID(world["hidden"]))
    channel_archive(community_id=community.pk, channel_id=uuid.UUID(world["readable"]))
    assert not next_resets(replica)
    # The admin list and someone else's membership.
    community_update_policy(community_id=community.pk, admin_pubkeys=[world["other"].pubkey])
    add_member(community, world["hidden"], world["other"])
    assert not next_resets(replica)
    assert replica.heads() == replica.fresh()


def test_visibility_change_outside_the_filter_does_not_reset(world: dict[str, Any]) -> None:
    replica = synced(world["community"], world["reader"], channels=[world["joined"]])
    write(world["community"], world["owner"], 9002, [["h", world["readable"]], ["private"]])
    write(world["community"], world["owner"], 9002, [["h", world["hidden"]], ["public"]])
    assert not next_resets(replica)
    assert replica.heads() == replica.fresh()


def test_unreadable_channel_becoming_public_resets(world: dict[str, Any]) -> None:
    replica = synced(world["community"], world["reader"])
    write(world["community"], world["owner"], 9002, [["h", world["hidden"]], ["public"]])
    assert next_resets(replica)
    assert len(replica.items) == 3 and replica.heads() == replica.fresh()


def test_own_removal_grant_and_rejoin_reset(world: dict[str, Any]) -> None:
    community, owner, reader = world["community"], world["owner"], world["reader"]
    replica = synced(community, reader)
    write(community, reader, 9001, [["h", world["joined"]], ["p", reader.pubkey]])
    assert next_resets(replica)
    assert len(replica.items) == 1
    add_member(community, world["joined"], reader)  # rejoin
    assert next_resets(replica)
    add_member(community, world["hidden"], reader)  # grant
    assert next_resets(replica)
    assert len(replica.items) == 3 and replica.heads() == replica.fresh()
    # A role change leaves the view alone (it is recomputed, and equal).
    write(community, owner, 9000, [["h", world["hidden"]], ["p", reader.pubkey, "admin"]])
    assert not next_resets(replica)


def test_new_open_channel_is_a_view_change(world: dict[str, Any]) -> None:
    replica = synced(world["community"], world["reader"])
    make_channel(world["community"], owner=world["owner"])
    assert next_resets(replica)


def test_policy_changes_reset_when_they_touch_the_view(world: dict[str, Any]) -> None:
    community = world["community"]
    replica = synced(community, world["reader"])
    community_update_policy(community_id=community.pk, artifact_types=["buzz.note"])
    assert next_resets(replica)
    assert replica.items == {}
    community_update_policy(community_id=community.pk, artifacts_enabled=False)
    assert next_resets(replica)
    community_update_policy(
        community_id=community.pk, artifacts_enabled=True, artifact_types=None
    )
    assert next_resets(replica)
    assert len(replica.items) == 2
    # A filter on buzz.task sees no change when buzz.note is allowed or not.
    typed = synced(community, world["reader"], types=["buzz.task"])
    community_update_policy(community_id=community.pk, artifact_types=["buzz.task"])
    assert not next_resets(typed)


def test_epoch_bump_resets_mid_round_and_between_rounds(world: dict[str, Any]) -> None:
    replica = synced(world["community"], world["reader"])
    bump_epoch(reason="test")
    assert next_resets(replica)
    replica.token = None
    first = replica.page(limit=1)
    assert first.reset and first.more
    assert not replica.page(limit=1).reset
    bump_epoch(reason="test")
    page = replica.page(limit=1)
    assert page.reset and page.reset_reason == "epoch"


def test_token_of_a_retired_key_resets(world: dict[str, Any], settings: Any) -> None:
    replica = synced(world["community"], world["reader"])
    old = settings.RELAY_SIGNING_SECRET
    settings.RELAY_SIGNING_SECRET = "44" * 32
    settings.RELAY_PREVIOUS_SIGNING_SECRETS = (old,)
    page = replica.page()
    assert page.reset and page.reset_reason == "retired"
    assert not replica.page().reset
    settings.RELAY_PREVIOUS_SIGNING_SECRETS = ()
    replica.token = None
    replica.round()


def test_token_of_an_unknown_key_is_refused(world: dict[str, Any], settings: Any) -> None:
    replica = synced(world["community"], world["reader"])
    settings.RELAY_SIGNING_SECRET = "55" * 32
    with pytest.raises(InvalidProgress):
        replica.page()


def test_token_past_its_maximum_age_resets(world: dict[str, Any]) -> None:
    replica = synced(world["community"], world["reader"])
    assert not replica.page(token_max_age=timedelta(seconds=60)).reset
    time.sleep(1.2)
    page = replica.page(token_max_age=timedelta(seconds=1))
    assert page.reset and page.reset_reason == "expired"


def test_not_ready_makes_every_round_a_full_round(world: dict[str, Any]) -> None:
    replica = synced(world["community"], world["reader"])
    page = replica.page(ready=False)
    assert page.reset and page.reset_reason == "not_ready"
    # A full round in progress continues; the next round is full again.
    replica.token = None
    first = replica.page(limit=1, ready=False)
    second = replica.page(limit=1, ready=False)
    assert first.reset and not second.reset
    replica.round(ready=False)
    assert replica.page(ready=False).reset
    assert replica.heads() == replica.fresh()


def test_foreign_tokens_are_refused(world: dict[str, Any]) -> None:
    community, reader, other = world["community"], world["reader"], world["other"]
    replica = synced(community, reader)
    token = replica.token

    def request(pubkey: str, **fields: Any) -> None:
        query = parse_filter({"artifact": "current", "progress": token, **fields})
        prepare_round(community_id=community.pk, reader=pubkey, query=query)

    request(reader.pubkey)
    request(reader.pubkey, limit=7)  # the limit is not bound
    with pytest.raises(InvalidProgress):
        request(other.pubkey)
    with pytest.raises(InvalidProgress):
        request(reader.pubkey, **{"#h": [world["readable"]]})
    other_community = make_community(host="other.example")
    with pytest.raises(InvalidProgress):
        prepare_round(
            community_id=other_community.pk,
            reader=reader.pubkey,
            query=parse_filter({"artifact": "current", "progress": token}),
        )
    assert settings.RELAY_SIGNING_SECRET
