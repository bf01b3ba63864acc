"""Channels: creation (9007), metadata and visibility (9002), deletion (9008), and the
operators' archive, unarchive and restore.

Changes to the channel listing (visibility, deletion, restore, archive, unarchive) stamp
`communities.artifact_policy_modified_at` and increment `communities.listing_version` under the
community's row lock, taken first (lock order: community, channel, members). Creation
increments `listing_version` without stamping: it changes which channels exist, so a cached
"nothing changed since the token" must not survive it, but no artifact can be affected yet.
"""

from __future__ import annotations

from uuid import UUID

from django.db import connection

from artifacts.models import Channel, ChannelMember
from artifacts.selectors.permissions import channel_access
from artifacts.services.errors import Invalid, Restricted
from artifacts.services.members import member_put
from artifacts.services.tags import channel_tag, checked_tag, text_value, visibility_flag
from artifacts.services.transactions import (
    WriteContext,
    bump_listing,
    lock_community,
    write_transaction,
)
from nostr.events import Event

MAX_NAME_CHARS = 200  # channels.name is varchar(200)
Visibility = Channel.Visibility


def channel_create(
    *,
    community_id: int,
    channel_id: UUID,
    name: str,
    visibility: str = Visibility.OPEN,
    created_by: str = "",
) -> None:
    """Create a channel; `created_by` (a pubkey, when given) becomes its owner.

    Raises `Invalid` when the id is taken, deleted channels included (ids are never reused).
    """
    if visibility not in Visibility.values:
        raise Invalid("visibility must be open or private")
    text_value(name, "name", max_chars=MAX_NAME_CHARS)
    with write_transaction(community_id=community_id) as ctx, connection.cursor() as cursor:
        lock_community(community_id)
        cursor.execute(
            "INSERT INTO channels (community_id, channel_id, name, visibility, created_by,"
            " created_at) VALUES (%s, %s, %s, %s, %s, statement_timestamp())"
            " ON CONFLICT (community_id, channel_id) DO NOTHING RETURNING id",
            [community_id, channel_id, name, visibility, created_by],
        )
        if cursor.fetchone() is None:
            raise Invalid("channel id is taken")
        bump_listing(community_id, stamp=False)
        ctx.access_changed(channel_id)
        if created_by:
            member_put(
                community_id=community_id,
                channel_id=channel_id,
                pubkey=created_by,
                role=ChannelMember.Role.OWNER,
            )


def channel_update(
    *,
    community_id: int,
    channel_id: UUID,
    name: str | None = None,
    visibility: str | None = None,
) -> list[str]:
    """Rename and/or change visibility; returns the fields that changed.

    A visibility change is a listing change (stamped, counted); a rename is not.
    """
    if visibility is not None and visibility not in Visibility.values:
        raise Invalid("visibility must be open or private")
    if name is not None:
        text_value(name, "name", max_chars=MAX_NAME_CHARS)
    with write_transaction(community_id=community_id) as ctx, connection.cursor() as cursor:
        if visibility is not None:
            lock_community(community_id)
        cursor.execute(
            "SELECT name, visibility FROM channels WHERE community_id = %s AND channel_id = %s"
            " AND deleted_at IS NULL FOR UPDATE",
            [community_id, channel_id],
        )
        row = cursor.fetchone()
        if row is None:
            raise Invalid(f"no channel {channel_id}")
        changed = []
        if name is not None and name != row[0]:
            changed.append("name")
        if visibility is not None and visibility != row[1]:
            changed.append("visibility")
        if not changed:
            return changed
        cursor.execute(
            "UPDATE channels SET name = %s, visibility = %s"
            " WHERE community_id = %s AND channel_id = %s",
            [
                name if name is not None else row[0],
                visibility if visibility is not None else row[1],
                community_id,
                channel_id,
            ],
        )
        if "visibility" in changed:
            bump_listing(community_id, stamp=True)
            ctx.access_changed(channel_id)
        return changed


def _listing_change(community_id: int, channel_id: UUID, assignment: str, condition: str) -> bool:
    with write_transaction(community_id=community_id) as ctx, connection.cursor() as cursor:
        lock_community(community_id)
        cursor.execute(
            f"UPDATE channels SET {assignment} WHERE community_id = %s AND channel_id = %s"
            f" AND {condition} RETURNING 1",
            [community_id, channel_id],
        )
        if cursor.fetchone() is None:
            cursor.execute(
                "SELECT 1 FROM channels WHERE community_id = %s AND channel_id = %s",
                [community_id, channel_id],
            )
            if cursor.fetchone() is None:
                raise Invalid(f"no channel {channel_id}")
            return False
        bump_listing(community_id, stamp=True)
        ctx.access_changed(channel_id)
        return True


def channel_delete(*, community_id: int, channel_id: UUID) -> bool:
    """Soft-delete (the channel and its artifacts become invisible); False if already deleted."""
    return _listing_change(
        community_id, channel_id, "deleted_at = statement_timestamp()", "deleted_at IS NULL"
    )


def channel_restore(*, community_id: int, channel_id: UUID) -> bool:
    """Undo a deletion (operators only); False if the channel was not deleted."""
    return _listing_change(community_id, channel_id, "deleted_at = NULL", "deleted_at IS NOT NULL")


def channel_archive(*, community_id: int, channel_id: UUID) -> bool:
    """Archive: still readable, no more writes (operators only); False if already archived."""
    return _listing_change(
        community_id, channel_id, "archived_at = statement_timestamp()", "archived_at IS NULL"
    )


def channel_unarchive(*, community_id: int, channel_id: UUID) -> bool:
    """Accept writes again (operators only); False if the channel was not archived."""
    return _listing_change(
        community_id, channel_id, "archived_at = NULL", "archived_at IS NOT NULL"
    )


def channel_create_event(*, ctx: WriteContext, event: Event, now: int) -> None:
    """Kind 9007: community admins, or anyone when the community allows open creation."""
    channel_id = channel_tag(event)
    name_tag = checked_tag(event, "name")
    assert name_tag is not None
    visibility = visibility_flag(event) or Visibility.OPEN
    actor = channel_access(
        community_id=ctx.community_id, channel_id=channel_id, pubkey=event.pubkey
    )
    if not (actor.community_admin or actor.open_channel_creation):
        raise Restricted("only community admins may create channels here")
    channel_create(
        community_id=ctx.community_id,
        channel_id=channel_id,
        name=name_tag[1],
        visibility=visibility,
        created_by=event.pubkey,
    )


def channel_update_event(*, ctx: WriteContext, event: Event, now: int) -> None:
    """Kind 9002: channel owners and admins, and community admins."""
    channel_id = channel_tag(event)
    name_tag = checked_tag(event, "name", required=False)
    visibility = visibility_flag(event)
    actor = channel_access(
        community_id=ctx.community_id, channel_id=channel_id, pubkey=event.pubkey
    )
    if not actor.channel_manager:
        raise Restricted(f"not allowed to edit channel {channel_id}")
    if actor.archived:
        raise Restricted(f"channel {channel_id} is archived")
    channel_update(
        community_id=ctx.community_id,
        channel_id=channel_id,
        name=name_tag[1] if name_tag is not None else None,
        visibility=visibility,
    )


def channel_delete_event(*, ctx: WriteContext, event: Event, now: int) -> None:
    """Kind 9008: the channel's owner, or a community admin."""
    channel_id = channel_tag(event)
    actor = channel_access(
        community_id=ctx.community_id, channel_id=channel_id, pubkey=event.pubkey
    )
    if not (actor.exists and (actor.role == ChannelMember.Role.OWNER or actor.community_admin)):
        raise Restricted(f"not allowed to delete channel {channel_id}")
    channel_delete(community_id=ctx.community_id, channel_id=channel_id)
