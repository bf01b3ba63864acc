"""Channel membership: grant, rejoin, role change (kind 9000) and removal (kind 9001).

Every change stamps `channel_members.sync_modified_at` in its statement, from the database
clock; a put that changes nothing (already active with that role) and a removal of someone who
is not an active member stamp nothing, so they do not reset anyone's incremental reads.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from django.db import connection

from artifacts.models import ChannelMember
from artifacts.selectors.permissions import channel_access
from artifacts.services.errors import Invalid, Restricted
from artifacts.services.tags import channel_tag, checked_tag, pubkey_value
from artifacts.services.transactions import WriteContext, write_transaction
from nostr.events import Event

Role = ChannelMember.Role


def member_put(*, community_id: int, channel_id: UUID, pubkey: str, role: str) -> bool:
    """Make `pubkey` an active member with `role`; False when it already was (no stamp).

    Joins the enclosing write transaction or opens one. The upsert takes the member's row lock.
    """
    if role not in Role.values:
        raise Invalid("role must be owner, admin or member")
    pubkey_value(pubkey, "pubkey")
    with write_transaction(community_id=community_id) as ctx, connection.cursor() as cursor:
        _require_channel(cursor, community_id, channel_id)
        cursor.execute(
            "INSERT INTO channel_members AS m (community_id, channel_id, pubkey, role, joined_at,"
            " removed_at, sync_modified_at)"
            " VALUES (%s, %s, %s, %s, statement_timestamp(), NULL, statement_timestamp())"
            " ON CONFLICT (community_id, channel_id, pubkey) DO UPDATE"
            " SET role = EXCLUDED.role, removed_at = NULL,"
            " sync_modified_at = EXCLUDED.sync_modified_at,"
            " joined_at = CASE WHEN m.removed_at IS NULL THEN m.joined_at"
            " ELSE EXCLUDED.joined_at END"
            " WHERE m.removed_at IS NOT NULL OR m.role <> EXCLUDED.role"
            " RETURNING 1",
            [community_id, channel_id, pubkey, role],
        )
        changed = cursor.fetchone() is not None
        if changed:
            ctx.access_changed(channel_id)
        return changed


def member_remove(*, community_id: int, channel_id: UUID, pubkey: str) -> bool:
    """End `pubkey`'s active membership; False when it was not an active member (no stamp)."""
    with write_transaction(community_id=community_id) as ctx, connection.cursor() as cursor:
        cursor.execute(
            "UPDATE channel_members SET removed_at = statement_timestamp(),"
            " sync_modified_at = statement_timestamp()"
            " WHERE community_id = %s AND channel_id = %s AND pubkey = %s"
            " AND removed_at IS NULL RETURNING 1",
            [community_id, channel_id, pubkey],
        )
        changed = cursor.fetchone() is not None
        if changed:
            ctx.access_changed(channel_id)
        return changed


def member_put_event(*, ctx: WriteContext, event: Event, now: int) -> None:
    """Kind 9000: channel owners put any role, channel admins put `member` (never over an
    owner or admin), community admins put any role."""
    channel_id = channel_tag(event)
    target, role = _target(event, with_role=True)
    actor = channel_access(
        community_id=ctx.community_id, channel_id=channel_id, pubkey=event.pubkey
    )
    current = _active_role(ctx.community_id, channel_id, target)
    allowed = actor.exists and (
        actor.community_admin
        or actor.role == Role.OWNER
        or (actor.role == Role.ADMIN and role == Role.MEMBER and current not in _MANAGERS)
    )
    if not allowed:
        raise Restricted(f"not allowed to manage members of channel {channel_id}")
    if actor.archived:
        raise Restricted(f"channel {channel_id} is archived")
    member_put(community_id=ctx.community_id, channel_id=channel_id, pubkey=target, role=role)


def member_remove_event(*, ctx: WriteContext, event: Event, now: int) -> None:
    """Kind 9001: channel owners and community admins remove anyone, channel admins anyone but
    an owner, and an active member may remove itself."""
    channel_id = channel_tag(event)
    target, _ = _target(event, with_role=False)
    actor = channel_access(
        community_id=ctx.community_id, channel_id=channel_id, pubkey=event.pubkey
    )
    current = _active_role(ctx.community_id, channel_id, target)
    allowed = actor.exists and (
        actor.community_admin
        or actor.role == Role.OWNER
        or (actor.role == Role.ADMIN and current != Role.OWNER)
        or (target == event.pubkey and actor.role is not None)
    )
    if not allowed:
        raise Restricted(f"not allowed to manage members of channel {channel_id}")
    if actor.archived:
        raise Restricted(f"channel {channel_id} is archived")
    member_remove(community_id=ctx.community_id, channel_id=channel_id, pubkey=target)


_MANAGERS = (Role.OWNER, Role.ADMIN)


def _target(event: Event, *, with_role: bool) -> tuple[str, str]:
    tag = checked_tag(event, "p")
    assert tag is not None
    pubkey = pubkey_value(tag[1], "p")
    role = Role.MEMBER.value
    if with_role and len(tag) > 2 and tag[2] != "":
        role = tag[2]
        if role not in Role.values:
            raise Invalid("role must be owner, admin or member")
    return pubkey, role


def _active_role(community_id: int, channel_id: UUID, pubkey: str) -> str | None:
    """The target's active role, row-locked so the permission decision holds until commit."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT role FROM channel_members WHERE community_id = %s AND channel_id = %s"
            " AND pubkey = %s AND removed_at IS NULL FOR UPDATE",
            [community_id, channel_id, pubkey],
        )
        row = cursor.fetchone()
    return row[0] if row is not None else None


def _require_channel(cursor: Any, community_id: int, channel_id: UUID) -> None:
    cursor.execute(
        "SELECT 1 FROM channels WHERE community_id = %s AND channel_id = %s AND deleted_at IS NULL",
        [community_id, channel_id],
    )
    if cursor.fetchone() is None:
        raise Invalid(f"no channel {channel_id}")
