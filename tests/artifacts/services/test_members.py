"""Kinds 9000 (put member) and 9001 (remove member): who may, and what they do."""

from __future__ import annotations

import time
import uuid

import pytest

from artifacts.models import ChannelMember, Community
from artifacts.services.channels import channel_archive
from artifacts.services.errors import Invalid
from artifacts.services.members import member_put
from tests.factories import Key, add_member, make_channel, make_community, make_key, write

_clock = iter(range(1, 10_000))


def _put(community: Community, who: Key, h: str, target: Key, role: str | None = None,
         expect: bool | None = True) -> str:
    p = ["p", target.pubkey] + ([role] if role else [])
    return write(community, who, 9000, [["h", h], p], created_at=int(time.time()) - next(_clock),
                 expect=expect).message


def _remove(community: Community, who: Key, h: str, target: Key,
            expect: bool | None = True) -> str:
    return write(community, who, 9001, [["h", h], ["p", target.pubkey]],
                 created_at=int(time.time()) - next(_clock), expect=expect).message


def _role(h: str, who: Key) -> str | None:
    row = ChannelMember.objects.filter(channel_id=h, pubkey=who.pubkey, removed_at__isnull=True)
    return row.values_list("role", flat=True).first()


@pytest.mark.parametrize("visibility", ["open", "private"])
@pytest.mark.parametrize(
    ("actor_role", "role", "allowed"),
    [
        ("owner", "member", True),
        ("owner", "admin", True),
        ("owner", "owner", True),
        ("admin", "member", True),
        ("admin", "admin", False),
        ("admin", "owner", False),
        ("member", "member", False),
        (None, "member", False),
        ("community admin", "owner", True),
    ],
)
def test_who_may_put_which_role(
    db: None, visibility: str, actor_role: str | None, role: str, allowed: bool
) -> None:
    actor, target, owner = make_key(), make_key(), make_key()
    community = make_community(admins=[actor] if actor_role == "community admin" else [])
    h = make_channel(community, owner=owner, visibility=visibility)
    if actor_role in ("owner", "admin", "member"):
        add_member(community, h, actor, role=actor_role)
    message = _put(community, actor, h, target, role, expect=allowed)
    if allowed:
        assert _role(h, target) == role
    else:
        assert message == f"restricted: not allowed to manage members of channel {h}"
        assert _role(h, target) is None


def test_a_channel_admin_cannot_demote_an_owner_or_admin(
    community: Community, alice: Key, bob: Key, carol: Key
) -> None:
    h = make_channel(community, owner=alice)
    add_member(community, h, bob, role="admin")
    add_member(community, h, carol, role="admin")
    _put(community, bob, h, alice, "member", expect=False)
    _put(community, bob, h, carol, "member", expect=False)
    assert (_role(h, alice), _role(h, carol)) == ("owner", "admin")


def test_missing_and_private_channels_refuse_alike(
    community: Community, alice: Key, bob: Key
) -> None:
    private = make_channel(community, owner=alice, visibility="private")
    missing = str(uuid.uuid4())
    answers = {_put(community, bob, h, bob, expect=False).replace(h, "<h>")
               for h in (private, missing)}
    answers |= {_remove(community, bob, h, alice, expect=False).replace(h, "<h>")
                for h in (private, missing)}
    assert answers == {"restricted: not allowed to manage members of channel <h>"}


def test_grant_remove_rejoin_and_role_change(
    community: Community, alice: Key, bob: Key
) -> None:
    h = make_channel(community, owner=alice, visibility="private")
    _put(community, alice, h, bob)
    assert _role(h, bob) == "member"
    _remove(community, alice, h, bob)
    assert _role(h, bob) is None
    assert ChannelMember.objects.get(channel_id=h, pubkey=bob.pubkey).removed_at is not None
    _put(community, alice, h, bob, "admin")
    assert _role(h, bob) == "admin"


@pytest.mark.parametrize(
    ("actor_role", "target_role", "allowed"),
    [
        ("owner", "owner", True),
        ("owner", "admin", True),
        ("admin", "member", True),
        ("admin", "admin", True),
        ("admin", "owner", False),
        ("member", "member", False),
        ("community admin", "owner", True),
    ],
)
def test_who_may_remove_whom(
    db: None, actor_role: str, target_role: str, allowed: bool
) -> None:
    actor, target = make_key(), make_key()
    community = make_community(admins=[actor] if actor_role == "community admin" else [])
    h = make_channel(community, visibility="private")
    if actor_role != "community admin":
        add_member(community, h, actor, role=actor_role)
    add_member(community, h, target, role=target_role)
    _remove(community, actor, h, target, expect=allowed)
    assert (_role(h, target) is None) == allowed


def test_a_member_may_remove_itself_but_not_others(
    community: Community, alice: Key, bob: Key, carol: Key
) -> None:
    h = make_channel(community, owner=alice, visibility="private", members=[bob, carol])
    _remove(community, bob, h, carol, expect=False)
    _remove(community, bob, h, bob)
    assert _role(h, bob) is None and _role(h, carol) == "member"


def test_removing_a_non_member_is_accepted_and_changes_nothing(
    community: Community, alice: Key, bob: Key
) -> None:
    h = make_channel(community, owner=alice)
    assert _remove(community, alice, h, bob) == ""
    assert not ChannelMember.objects.filter(pubkey=bob.pubkey).exists()


def test_archived_channels_refuse_membership_changes(
    community: Community, alice: Key, bob: Key
) -> None:
    h = make_channel(community, owner=alice)
    channel_archive(community_id=community.pk, channel_id=uuid.UUID(h))
    assert _put(community, alice, h, bob, expect=False) == f"restricted: channel {h} is archived"


@pytest.mark.parametrize(
    "p_tag",
    [["p", "ABC"], ["p", "a" * 64, "superuser"], ["p"]],
)
def test_malformed_p_tags_are_invalid(community: Community, alice: Key, p_tag: list[str]) -> None:
    h = make_channel(community, owner=alice)
    result = write(community, alice, 9000, [["h", h], p_tag], expect=False)
    assert result.message.startswith("invalid: ")


def test_member_put_refuses_unknown_channels_and_roles(community: Community, alice: Key) -> None:
    with pytest.raises(Invalid):
        member_put(community_id=community.pk, channel_id=uuid.uuid4(), pubkey=alice.pubkey,
                   role="member")
    h = make_channel(community)
    with pytest.raises(Invalid):
        member_put(community_id=community.pk, channel_id=uuid.UUID(h), pubkey=alice.pubkey,
                   role="boss")
