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
from dataclasses import dataclass
from uuid import UUID

from artifacts.models import Channel, ChannelMember
from artifacts.selectors.permissions import ChannelAccess, access_from_rows, access_statement
from artifacts.services.errors import Duplicate, Invalid, Restricted
from artifacts.services.members import check_put, put_statement
from artifacts.services.tags import channel_tag, checked_tag, text_value, visibility_flag
from artifacts.services.transactions import (
    LISTING_ABSENT,
    LISTING_FLIPPED,
    LISTING_LIVE,
    LISTING_SAME,
    WriteContext,
    bump_listing_statement,
    lock_community_statement,
    note_stored,
    store_statement,
    write_transaction,
)
from artifacts.services.write_steps import (
    Batch,
    Rows,
    ServiceSteps,
    Statement,
    WriteSteps,
    run_service_steps,
)
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


@dataclass(frozen=True, slots=True)
class _ListingAction:
    """A change of the channel listing that sets a column of a channel in one state: the access
    change it is (`artifacts.signals`), the column's assignment, the state it applies in, and
    how the channel was readable before it (`transactions.LISTING_*`)."""

    what: str
    assignment: str
    condition: str
    before: str


_DELETION = _ListingAction(
    DELETED, "deleted_at = statement_timestamp()", "deleted_at IS NULL", LISTING_LIVE)
_RESTORE = _ListingAction(
    RESTORED, "deleted_at = NULL", "deleted_at IS NOT NULL", LISTING_ABSENT)
_ARCHIVE = _ListingAction(
    ARCHIVED, "archived_at = statement_timestamp()", "archived_at IS NULL", LISTING_SAME)
_UNARCHIVE = _ListingAction(
    UNARCHIVED, "archived_at = NULL", "archived_at IS NOT NULL", LISTING_SAME)

# Operators' services run the kinds' steps (`run_service_steps`): each statement and rule is
# written once, in the steps below, and the operators skip only the event and its author's
# standing (an operator may do anything).


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
    if created_by:
        check_put(created_by, ChannelMember.Role.OWNER)
    with write_transaction(community_id=community_id) as ctx:
        run_service_steps(_creation(ctx, channel_id, name, visibility, created_by or None))


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
    with write_transaction(community_id=community_id) as ctx:
        return run_service_steps(_edit(ctx, channel_id, name, visibility))


def channel_delete(*, community_id: int, channel_id: UUID) -> bool:
    """Soft-delete (the channel and its artifacts become invisible); False if already deleted."""
    return _operator_listing_change(community_id, channel_id, _DELETION)


def channel_restore(*, community_id: int, channel_id: UUID) -> bool:
    """Undo a deletion (operators only); False if the channel was not deleted."""
    return _operator_listing_change(community_id, channel_id, _RESTORE)


def channel_archive(*, community_id: int, channel_id: UUID) -> bool:
    """Archive: still readable, no more writes (operators only); False if already archived."""
    return _operator_listing_change(community_id, channel_id, _ARCHIVE)


def channel_unarchive(*, community_id: int, channel_id: UUID) -> bool:
    """Accept writes again (operators only); False if the channel was not archived."""
    return _operator_listing_change(community_id, channel_id, _UNARCHIVE)


def _operator_listing_change(community_id: int, channel_id: UUID, change: _ListingAction) -> bool:
    with write_transaction(community_id=community_id) as ctx:
        return run_service_steps(_listing_change(ctx, channel_id, change))


def channel_create_steps(ctx: WriteContext, *, event: Event, now: int) -> WriteSteps:
    """Kind 9007, stored and applied in steps (`write_steps`): community admins, or anyone when
    the community allows open creation. The author becomes the channel's owner.

    Store the event and read the author's standing; then the creation (`_creation`).
    """
    channel_id = channel_tag(event)
    name_tag = checked_tag(event, "name")
    assert name_tag is not None
    visibility = visibility_flag(event) or Visibility.OPEN
    actor = yield from _standing(ctx, event, channel_id)
    if not (actor.community_admin or actor.open_channel_creation):
        raise Restricted("only community admins may create channels here")
    _check_fields(name_tag[1], visibility)
    _, finishing = yield from _creation(ctx, channel_id, name_tag[1], visibility, event.pubkey)
    return finishing


def channel_update_steps(ctx: WriteContext, *, event: Event, now: int) -> WriteSteps:
    """Kind 9002, in steps: channel owners and admins, and community admins, rename a channel
    or change its visibility (`_edit`)."""
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
    _, finishing = yield from _edit(ctx, channel_id, name, visibility)
    return finishing


def channel_delete_steps(ctx: WriteContext, *, event: Event, now: int) -> WriteSteps:
    """Kind 9008, in steps: the channel's owner, or a community admin, soft-deletes it."""
    channel_id = channel_tag(event)
    actor = yield from _standing(ctx, event, channel_id)
    if not (actor.exists and (actor.role == ChannelMember.Role.OWNER or actor.community_admin)):
        raise Restricted(f"not allowed to delete channel {channel_id}")
    _, finishing = yield from _listing_change(ctx, channel_id, _DELETION)
    return finishing


def _creation(
    ctx: WriteContext, channel_id: UUID, name: str, visibility: str, owner: str | None
) -> ServiceSteps[None]:
    """Take the community's row lock and insert the channel (taken ids are refused); finish
    with the listing count and, when there is one, the owner.

    A creation is heard live as `created` by whoever can read the channel now, its owner
    included (PROTOCOL.md section 8): the owner's membership is part of that one change, not
    a grant of its own.
    """
    community_id = ctx.community_id
    _locked, inserted = yield (
        lock_community_statement(community_id),
        _insert_statement(community_id, channel_id, name, visibility, owner or ""),
    )
    if not inserted:
        raise Invalid("channel id is taken")
    ctx.access_changed(channel_id, CREATED)
    owned: Batch = (
        (put_statement(community_id, channel_id, owner, ChannelMember.Role.OWNER),) if owner else ()
    )
    return None, (
        bump_listing_statement(
            community_id, stamp=False, channel_id=channel_id, before=LISTING_ABSENT),
        *owned,
    )


def _edit(
    ctx: WriteContext, channel_id: UUID, name: str | None, visibility: str | None
) -> ServiceSteps[list[str]]:
    """Read the channel row under its lock (after the community's, for a visibility change: a
    listing change) and change what differs; answers the fields that changed."""
    community_id = ctx.community_id
    locked: Batch = (lock_community_statement(community_id),) if visibility is not None else ()
    *_, rows = yield (*locked, (_LOCKED_SQL, [community_id, channel_id]))
    changed, update = _update(community_id, channel_id, rows, name, visibility)
    if "visibility" in changed:
        ctx.access_changed(channel_id, _made(visibility))
    return changed, update


def _listing_change(
    ctx: WriteContext, channel_id: UUID, change: _ListingAction
) -> ServiceSteps[bool]:
    """Under the community's row lock, apply `change` to the channel if it is in the state the
    change applies in, and finish with the listing count; answers whether it applied (False
    when the channel is already so; no such channel is `Invalid`)."""
    community_id = ctx.community_id
    _locked, applied, exists = yield (
        lock_community_statement(community_id),
        _listing_statement(community_id, channel_id, change.assignment, change.condition),
        (_EXISTS_SQL, [community_id, channel_id]),
    )
    if not applied:
        if not exists:
            raise Invalid(f"no channel {channel_id}")
        return False, ()  # already so (for a deletion: since the standing was read)
    ctx.access_changed(channel_id, change.what)
    return True, (bump_listing_statement(
        community_id, stamp=True, channel_id=channel_id, before=change.before),)


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
