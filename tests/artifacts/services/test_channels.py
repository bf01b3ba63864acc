"""Kinds 9007 (create), 9002 (edit) and 9008 (delete), and the operators' channel actions."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest

from artifacts.models import Channel, ChannelMember, Community
from artifacts.services import channels as svc
from artifacts.services.errors import Invalid
from artifacts.signals import AccessChange, access_changed
from tests.factories import Key, add_member, make_channel, make_community, make_key, write


def _channel(h: str) -> Channel:
    return Channel.objects.get(channel_id=h)


def test_community_admin_creates_and_becomes_owner(db: None) -> None:
    admin = make_key()
    community = make_community(admins=[admin])
    h = str(uuid.uuid4())
    write(community, admin, 9007, [["h", h], ["name", "design"], ["private"]])
    channel = _channel(h)
    assert (channel.name, channel.visibility, channel.created_by) == (
        "design", "private", admin.pubkey)
    assert ChannelMember.objects.get(channel_id=h).role == "owner"


@pytest.mark.django_db(transaction=True)
def test_a_creation_is_one_change_whoever_makes_it() -> None:
    """9007 and the operators' creation run the same steps and are heard alike: `created`, which
    reaches the owner because it can read the channel now (PROTOCOL.md section 8), and no grant
    of the owner's besides (that would be a second hint for the same change)."""
    admin = make_key()
    community = make_community(admins=[admin])
    heard: list[list[tuple[str, str | None]]] = []

    def receiver(sender: Any, changes: list[AccessChange], **kw: Any) -> None:
        heard.append([(change.what, change.pubkey) for change in changes])

    access_changed.connect(receiver)
    try:
        by_event = str(uuid.uuid4())
        write(community, admin, 9007, [["h", by_event], ["name", "x"], ["private"]])
        by_operator = make_channel(community, owner=admin, visibility="private")
        ownerless = make_channel(community)
    finally:
        access_changed.disconnect(receiver)
    assert heard == [[("created", None)]] * 3
    for h in (by_event, by_operator):
        assert ChannelMember.objects.get(channel_id=h).role == "owner"
    assert _channel(by_operator).created_by == admin.pubkey
    assert not ChannelMember.objects.filter(channel_id=ownerless).exists()


def test_operators_creation_refuses_a_taken_id_and_a_malformed_owner(community: Community) -> None:
    h = make_channel(community)
    with pytest.raises(Invalid, match="channel id is taken"):
        make_channel(community, channel_id=h, name="again")
    with pytest.raises(Invalid, match="pubkey"):
        make_channel(community, owner="not-a-pubkey")
    assert Channel.objects.count() == 1


def test_open_creation_policy(db: None) -> None:
    anyone = make_key()
    closed = make_community("closed.example")
    result = write(closed, anyone, 9007, [["h", str(uuid.uuid4())], ["name", "x"]], expect=False)
    assert result.message == "restricted: only community admins may create channels here"
    opened = make_community("open.example", open_channel_creation=True)
    write(opened, anyone, 9007, [["h", str(uuid.uuid4())], ["name", "x"]])


def test_channel_ids_are_never_reused(db: None) -> None:
    admin = make_key()
    community = make_community(admins=[admin])
    h = make_channel(community, owner=admin)
    write(community, admin, 9008, [["h", h]])
    result = write(community, admin, 9007, [["h", h], ["name", "again"]], expect=False)
    assert result.message == "invalid: channel id is taken"


@pytest.mark.parametrize(
    "tags",
    [
        [["name", "x"]],
        [["h", "not-a-uuid"], ["name", "x"]],
        [["h", "{h}"]],
        [["h", "{h}"], ["name", "  "]],
        [["h", "{h}"], ["name", "x" * 201]],
        [["h", "{h}"], ["name", "a\u0000b"]],
        [["h", "{h}"], ["name", "x"], ["public"], ["private"]],
    ],
)
def test_malformed_creations_are_invalid(db: None, tags: list[list[str]]) -> None:
    admin = make_key()
    community = make_community(admins=[admin])
    h = str(uuid.uuid4())
    tags = [[v.replace("{h}", h) for v in tag] for tag in tags]
    assert write(community, admin, 9007, tags, expect=False).message.startswith("invalid: ")
    assert not Channel.objects.exists()


@pytest.mark.parametrize(
    ("actor_role", "allowed"),
    [("owner", True), ("admin", True), ("member", False), (None, False),
     ("community admin", True)],
)
def test_who_may_edit_a_channel(db: None, actor_role: str | None, allowed: bool) -> None:
    actor = make_key()
    community = make_community(admins=[actor] if actor_role == "community admin" else [])
    h = make_channel(community, name="old")
    if actor_role in ("owner", "admin", "member"):
        add_member(community, h, actor, role=actor_role)
    result = write(community, actor, 9002, [["h", h], ["name", "new"], ["private"]],
                   expect=allowed)
    channel = _channel(h)
    if allowed:
        assert (channel.name, channel.visibility) == ("new", "private")
    else:
        assert result.message == f"restricted: not allowed to edit channel {h}"
        assert (channel.name, channel.visibility) == ("old", "open")


@pytest.mark.parametrize(
    ("actor_role", "allowed"),
    [("owner", True), ("admin", False), ("member", False), ("community admin", True)],
)
def test_who_may_delete_a_channel(db: None, actor_role: str, allowed: bool) -> None:
    actor = make_key()
    community = make_community(admins=[actor] if actor_role == "community admin" else [])
    h = make_channel(community)
    if actor_role != "community admin":
        add_member(community, h, actor, role=actor_role)
    write(community, actor, 9008, [["h", h]], expect=allowed)
    assert (_channel(h).deleted_at is not None) == allowed


def test_a_deleted_channel_is_gone_for_every_kind(community: Community, alice: Key) -> None:
    h = make_channel(community, owner=alice)
    write(community, alice, 9008, [["h", h]])
    later = int(time.time()) - 1
    assert write(community, alice, 9008, [["h", h]], created_at=later,
                 expect=False).message == f"restricted: not allowed to delete channel {h}"
    assert write(community, alice, 9002, [["h", h], ["name", "x"]],
                 expect=False).message == f"restricted: not allowed to edit channel {h}"


def test_operator_actions_report_whether_they_changed_anything(community: Community) -> None:
    h = uuid.UUID(make_channel(community))
    args: dict[str, Any] = {"community_id": community.pk, "channel_id": h}
    assert svc.channel_archive(**args) and not svc.channel_archive(**args)
    assert svc.channel_unarchive(**args) and not svc.channel_unarchive(**args)
    assert svc.channel_delete(**args) and not svc.channel_delete(**args)
    assert svc.channel_restore(**args) and not svc.channel_restore(**args)
    assert svc.channel_update(**args, name="x", visibility="private") == ["name", "visibility"]
    assert svc.channel_update(**args, name="x") == []
    with pytest.raises(Invalid):
        svc.channel_archive(community_id=community.pk, channel_id=uuid.uuid4())
