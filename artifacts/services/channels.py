"""Channels: creation (9007), metadata and visibility (9002), deletion (9008), and the
operators' archive, unarchive and restore.

Changes to the channel listing (visibility, deletion, restore, archive, unarchive) stamp
`communities.artifact_policy_modified_at` and increment `communities.listing_version` under the
community's row lock, taken first (lock order: community, channel, members). Creation
increments `listing_version` without stamping: it changes which channels exist, so a cached
"nothing changed since the token" must not survive it, but no artifact can be affected yet.
Each increment also logs the channel and how it was readable before the change
(`artifact_listing_changes`, `transactions.bump_listing_statement`): rounds derive readers' view
changes from it instead of listing their channels.
"""

from __future__ import annotations

from collections.abc import Generator
from uuid import UUID

from django.db import connection

from artifacts.models import Channel, ChannelMember
from artifacts.selectors.budget import execute_prepared
from artifacts.selectors.permissions import ChannelAccess, access_from_rows, access_statement
from artifacts.services.errors import Duplicate, Invalid, Restricted
from artifacts.services.members import member_put, put_statement
from artifacts.services.tags import channel_tag, checked_tag, text_value, visibility_flag
from artifacts.services.transactions import (
    LISTING_ABSENT,
    LISTING_FLIPPED,
    LISTING_LIVE,
    LISTING_SAME,
    WriteContext,
    bump_listing,
    bump_listing_statement,
    lock_community,
    lock_community_statement,
    note_stored,
    store_statement,
    write_transaction,
)
from artifacts.services.write_steps import Batch, Rows, Statement, WriteSteps
from artifacts.signals import (
    ARCHIVED,
    CREATED,
    DELETED,
    MADE_PRIVATE,
    MADE_PUBLIC,
    RESTORED,
    UNARCHIVED,
)
from nostr.events import Event

MAX_NAME_CHARS = 200  # channels.name is varchar(200)
Visibility = Channel.Visibility

# The statements both the operators' services and the kinds' steps (9007, 9002, 9008) run.
_INSERT_SQL = (
    "INSERT INTO channels (community_id, channel_id, name, visibility, created_by,"
    " created_at) VALUES (%s, %s, %s, %s, %s, statement_timestamp())"
    " ON CONFLICT (community_id, channel_id) DO NOTHING RETURNING id"
)
_LOCKED_SQL = (
    "SELECT name, visibility FROM channels WHERE community_id = %s AND channel_id = %s"
    " AND deleted_at IS NULL FOR UPDATE"
)
_UPDATE_SQL = (
    "UPDATE channels SET name = %s, visibility = %s WHERE community_id = %s AND channel_id = %s"
)
_EXISTS_SQL = "SELECT 1 FROM channels WHERE community_id = %s AND channel_id = %s"
_DELETE = ("deleted_at = statement_timestamp()", "deleted_at IS NULL")


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
    _check_fields(name, visibility)
    with write_transaction(community_id=community_id) as ctx, connection.cursor() as cursor:
        lock_community(community_id)
        statement = _insert_statement(community_id, channel_id, name, visibility, created_by)
        if not execute_prepared(cursor, *statement):
            raise Invalid("channel id is taken")
        bump_listing(community_id, stamp=False, channel_id=channel_id, before=LISTING_ABSENT)
        ctx.access_changed(channel_id, CREATED)
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
    _check_fields(name, visibility)
    with write_transaction(community_id=community_id) as ctx, connection.cursor() as cursor:
        if visibility is not None:
            lock_community(community_id)
        rows = execute_prepared(cursor, _LOCKED_SQL, [community_id, channel_id])
        changed, update = _update(community_id, channel_id, rows, name, visibility)
        for statement in update:
            execute_prepared(cursor, *statement)
        if "visibility" in changed:
            ctx.access_changed(channel_id, _made(visibility))
        return changed


def _listing_change(
    community_id: int, channel_id: UUID, what: str, assignment: str, condition: str, before: str
) -> bool:
    with write_transaction(community_id=community_id) as ctx, connection.cursor() as cursor:
        lock_community(community_id)
        sql, params = _listing_statement(community_id, channel_id, assignment, condition)
        if not execute_prepared(cursor, sql, params):
            if not execute_prepared(cursor, _EXISTS_SQL, [community_id, channel_id]):
                raise Invalid(f"no channel {channel_id}")
            return False
        bump_listing(community_id, stamp=True, channel_id=channel_id, before=before)
        ctx.access_changed(channel_id, what)
        return True


def channel_delete(*, community_id: int, channel_id: UUID) -> bool:
    """Soft-delete (the channel and its artifacts become invisible); False if already deleted."""
    return _listing_change(community_id, channel_id, DELETED, *_DELETE, LISTING_LIVE)


def channel_restore(*, community_id: int, channel_id: UUID) -> bool:
    """Undo a deletion (operators only); False if the channel was not deleted."""
    return _listing_change(
        community_id, channel_id, RESTORED, "deleted_at = NULL", "deleted_at IS NOT NULL",
        LISTING_ABSENT,
    )


def channel_archive(*, community_id: int, channel_id: UUID) -> bool:
    """Archive: still readable, no more writes (operators only); False if already archived."""
    return _listing_change(
        community_id, channel_id, ARCHIVED, "archived_at = statement_timestamp()",
        "archived_at IS NULL", LISTING_SAME,
    )


def channel_unarchive(*, community_id: int, channel_id: UUID) -> bool:
    """Accept writes again (operators only); False if the channel was not archived."""
    return _listing_change(
        community_id, channel_id, UNARCHIVED, "archived_at = NULL", "archived_at IS NOT NULL",
        LISTING_SAME,
    )


def channel_create_steps(ctx: WriteContext, *, event: Event, now: int) -> WriteSteps:
    """Kind 9007, stored and applied in steps (`write_steps`): community admins, or anyone when
    the community allows open creation. The author becomes the channel's owner.

    Store the event and read the author's standing; take the community's row lock and insert
    the channel (taken ids are refused); finish with the listing count and the owner.
    """
    channel_id = channel_tag(event)
    name_tag = checked_tag(event, "name")
    assert name_tag is not None
    visibility = visibility_flag(event) or Visibility.OPEN
    actor = yield from _standing(ctx, event, channel_id)
    if not (actor.community_admin or actor.open_channel_creation):
        raise Restricted("only community admins may create channels here")
    _check_fields(name_tag[1], visibility)
    community_id = ctx.community_id
    _locked, inserted = yield (
        lock_community_statement(community_id),
        _insert_statement(community_id, channel_id, name_tag[1], visibility, event.pubkey),
    )
    if not inserted:
        raise Invalid("channel id is taken")
    ctx.access_changed(channel_id, CREATED)
    return (
        bump_listing_statement(
            community_id, stamp=False, channel_id=channel_id, before=LISTING_ABSENT),
        put_statement(community_id, channel_id, event.pubkey, ChannelMember.Role.OWNER),
    )


def channel_update_steps(ctx: WriteContext, *, event: Event, now: int) -> WriteSteps:
    """Kind 9002, in steps: channel owners and admins, and community admins, rename a channel
    or change its visibility (a listing change: the community's row lock first)."""
    channel_id = channel_tag(event)
    name_tag = checked_tag(event, "name", required=False)
    name = name_tag[1] if name_tag is not None else None
    visibility = visibility_flag(event)
    actor = yield from _standing(ctx, event, channel_id)
    if not actor.channel_manager:
        raise Restricted(f"not allowed to edit channel {channel_id}")
    if actor.archived:
        raise Restricted(f"channel {channel_id} is archived")
    _check_fields(name, visibility)
    community_id = ctx.community_id
    locked: Batch = (lock_community_statement(community_id),) if visibility is not None else ()
    *_, rows = yield (*locked, (_LOCKED_SQL, [community_id, channel_id]))
    changed, update = _update(community_id, channel_id, rows, name, visibility)
    if "visibility" in changed:
        ctx.access_changed(channel_id, _made(visibility))
    return update


def channel_delete_steps(ctx: WriteContext, *, event: Event, now: int) -> WriteSteps:
    """Kind 9008, in steps: the channel's owner, or a community admin, soft-deletes it."""
    channel_id = channel_tag(event)
    actor = yield from _standing(ctx, event, channel_id)
    if not (actor.exists and (actor.role == ChannelMember.Role.OWNER or actor.community_admin)):
        raise Restricted(f"not allowed to delete channel {channel_id}")
    community_id = ctx.community_id
    _locked, deleted, exists = yield (
        lock_community_statement(community_id),
        _listing_statement(community_id, channel_id, *_DELETE),
        (_EXISTS_SQL, [community_id, channel_id]),
    )
    if not deleted:
        if not exists:
            raise Invalid(f"no channel {channel_id}")
        return ()  # already deleted (since the standing was read): nothing to count
    ctx.access_changed(channel_id, DELETED)
    return (bump_listing_statement(
        community_id, stamp=True, channel_id=channel_id, before=LISTING_LIVE),)


def _standing(
    ctx: WriteContext, event: Event, channel_id: UUID
) -> Generator[Batch, list[Rows], ChannelAccess]:
    """Store the event and read its author's standing in the channel (one batch)."""
    stored, access = yield (
        store_statement(ctx, event=event, channel_id=channel_id),
        access_statement(ctx.community_id, channel_id, event.pubkey),
    )
    if not note_stored(ctx, stored, event=event, channel_id=channel_id):
        raise Duplicate("already have this event")
    return access_from_rows(ctx.community_id, channel_id, access)


def _made(visibility: str | None) -> str:
    """The access change a visibility change is (`artifacts.signals`)."""
    return MADE_PUBLIC if visibility == Visibility.OPEN else MADE_PRIVATE


def _check_fields(name: str | None, visibility: str | None) -> None:
    if visibility is not None and visibility not in Visibility.values:
        raise Invalid("visibility must be open or private")
    if name is not None:
        text_value(name, "name", max_chars=MAX_NAME_CHARS)


def _update(
    community_id: int, channel_id: UUID, locked: Rows, name: str | None, visibility: str | None
) -> tuple[list[str], Batch]:
    """What a rename or visibility change of the channel row `locked` (`_LOCKED_SQL`'s rows)
    changes, and the statements that change it (none when nothing changes)."""
    if not locked:
        raise Invalid(f"no channel {channel_id}")
    current_name, current_visibility = locked[0]
    changed = []
    if name is not None and name != current_name:
        changed.append("name")
    if visibility is not None and visibility != current_visibility:
        changed.append("visibility")
    if not changed:
        return changed, ()
    update: Statement = (_UPDATE_SQL, [
        name if name is not None else current_name,
        visibility if visibility is not None else current_visibility,
        community_id,
        channel_id,
    ])
    if "visibility" in changed:
        return changed, (update, bump_listing_statement(
            community_id, stamp=True, channel_id=channel_id, before=LISTING_FLIPPED))
    return changed, (update,)


def _insert_statement(
    community_id: int, channel_id: UUID, name: str, visibility: str, created_by: str
) -> Statement:
    return _INSERT_SQL, [community_id, channel_id, name, visibility, created_by]


def _listing_statement(
    community_id: int, channel_id: UUID, assignment: str, condition: str
) -> Statement:
    return (
        f"UPDATE channels SET {assignment} WHERE community_id = %s AND channel_id = %s"
        f" AND {condition} RETURNING 1",
        [community_id, channel_id],
    )
