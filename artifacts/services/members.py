"""Channel membership: grant, rejoin, role change (kind 9000) and removal (kind 9001).

Every change stamps `channel_members.sync_modified_at` in its statement, from the database
clock; a put that changes nothing (already active with that role) and a removal of someone who
is not an active member stamp nothing, so they do not reset anyone's incremental reads.
"""

from __future__ import annotations

from collections.abc import Generator
from uuid import UUID

from django.db import connection

from artifacts.models import ChannelMember
from artifacts.selectors.budget import execute_prepared
from artifacts.selectors.permissions import ChannelAccess, access_from_rows, access_statement
from artifacts.services.errors import Duplicate, Invalid, Restricted
from artifacts.services.tags import channel_tag, checked_tag, pubkey_value
from artifacts.services.transactions import (
    WriteContext,
    note_stored,
    store_statement,
    write_transaction,
)
from artifacts.services.write_steps import Batch, Rows, Statement, WriteSteps
from artifacts.signals import MEMBER
from nostr.events import Event

Role = ChannelMember.Role

_PUT_SQL = (
    "INSERT INTO channel_members AS m (community_id, channel_id, pubkey, role, joined_at,"
    " removed_at, sync_modified_at)"
    " VALUES (%s, %s, %s, %s, statement_timestamp(), NULL, statement_timestamp())"
    " ON CONFLICT (community_id, channel_id, pubkey) DO UPDATE"
    " SET role = EXCLUDED.role, removed_at = NULL,"
    " sync_modified_at = EXCLUDED.sync_modified_at,"
    " joined_at = CASE WHEN m.removed_at IS NULL THEN m.joined_at"
    " ELSE EXCLUDED.joined_at END"
    " WHERE m.removed_at IS NOT NULL OR m.role <> EXCLUDED.role"
    " RETURNING 1"
)
_REMOVE_SQL = (
    "UPDATE channel_members SET removed_at = statement_timestamp(),"
    " sync_modified_at = statement_timestamp()"
    " WHERE community_id = %s AND channel_id = %s AND pubkey = %s"
    " AND removed_at IS NULL RETURNING 1"
)
# The target's active role, row-locked so the permission decision holds until commit.
_ACTIVE_ROLE_SQL = (
    "SELECT role FROM channel_members WHERE community_id = %s AND channel_id = %s"
    " AND pubkey = %s AND removed_at IS NULL FOR UPDATE"
)
_CHANNEL_SQL = (
    "SELECT 1 FROM channels WHERE community_id = %s AND channel_id = %s AND deleted_at IS NULL"
)


def member_put(*, community_id: int, channel_id: UUID, pubkey: str, role: str) -> bool:
    """Make `pubkey` an active member with `role`; False when it already was (no stamp).

    Joins the enclosing write transaction or opens one. The upsert takes the member's row lock.
    """
    check_put(pubkey, role)
    with write_transaction(community_id=community_id) as ctx, connection.cursor() as cursor:
        if not execute_prepared(cursor, *_channel_statement(community_id, channel_id)):
            raise Invalid(f"no channel {channel_id}")
        rows = execute_prepared(cursor, *put_statement(community_id, channel_id, pubkey, role))
        return _noted(ctx, channel_id, pubkey, changed=bool(rows))


def member_remove(*, community_id: int, channel_id: UUID, pubkey: str) -> bool:
    """End `pubkey`'s active membership; False when it was not an active member (no stamp)."""
    with write_transaction(community_id=community_id) as ctx, connection.cursor() as cursor:
        rows = execute_prepared(cursor, *_remove_statement(community_id, channel_id, pubkey))
        return _noted(ctx, channel_id, pubkey, changed=bool(rows))


def member_put_steps(ctx: WriteContext, *, event: Event, now: int) -> WriteSteps:
    """Kind 9000, stored and applied in steps (`write_steps`): channel owners put any role,
    channel admins put `member` (never over an owner or admin), community admins put any role.

    One batch stores the event and reads what the decision needs (the author's standing, the
    target's active role under its row lock); the next puts the member, whose answer says
    whether anything changed (a put that changes nothing stamps and announces nothing).
    """
    channel_id = channel_tag(event)
    target, role = _target(event, with_role=True)
    actor, current = yield from _decision_rows(ctx, event, channel_id, target)
    allowed = actor.community_admin or actor.role == Role.OWNER or (
        actor.role == Role.ADMIN and role == Role.MEMBER and current not in _MANAGERS
    )
    _require_manager(actor, channel_id, allowed=allowed)
    community_id = ctx.community_id
    exists, put = yield (
        _channel_statement(community_id, channel_id),
        put_statement(community_id, channel_id, target, role),
    )
    if not exists:  # deleted since the standing was read: the put is rolled back with it
        raise Invalid(f"no channel {channel_id}")
    _noted(ctx, channel_id, target, changed=bool(put))
    return ()


def member_remove_steps(ctx: WriteContext, *, event: Event, now: int) -> WriteSteps:
    """Kind 9001, in steps: channel owners and community admins remove anyone, channel admins
    anyone but an owner, and an active member may remove itself."""
    channel_id = channel_tag(event)
    target, _ = _target(event, with_role=False)
    actor, current = yield from _decision_rows(ctx, event, channel_id, target)
    allowed = (
        actor.community_admin
        or actor.role == Role.OWNER
        or (actor.role == Role.ADMIN and current != Role.OWNER)
        or (target == event.pubkey and actor.role is not None)
    )
    _require_manager(actor, channel_id, allowed=allowed)
    (removed,) = yield (_remove_statement(ctx.community_id, channel_id, target),)
    _noted(ctx, channel_id, target, changed=bool(removed))
    return ()


def _decision_rows(
    ctx: WriteContext, event: Event, channel_id: UUID, target: str
) -> Generator[Batch, list[Rows], tuple[ChannelAccess, str | None]]:
    """Store the event, then read the author's standing and the target's active role, the
    member row locked so the decision holds until commit (one batch)."""
    community_id = ctx.community_id
    stored, access, active = yield (
        store_statement(ctx, event=event, channel_id=channel_id),
        access_statement(community_id, channel_id, event.pubkey),
        (_ACTIVE_ROLE_SQL, [community_id, channel_id, target]),
    )
    if not note_stored(ctx, stored, event=event, channel_id=channel_id):
        raise Duplicate("already have this event")
    current: str | None = active[0][0] if active else None
    return access_from_rows(community_id, channel_id, access), current


def _require_manager(actor: ChannelAccess, channel_id: UUID, *, allowed: bool) -> None:
    if not (actor.exists and allowed):
        raise Restricted(f"not allowed to manage members of channel {channel_id}")
    if actor.archived:
        raise Restricted(f"channel {channel_id} is archived")


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


def check_put(pubkey: str, role: str) -> None:
    if role not in Role.values:
        raise Invalid("role must be owner, admin or member")
    pubkey_value(pubkey, "pubkey")


def _noted(ctx: WriteContext, channel_id: UUID, pubkey: str, *, changed: bool) -> bool:
    """A membership that changed changes who may read the channel: announced after commit."""
    if changed:
        ctx.access_changed(channel_id, MEMBER, pubkey=pubkey)
    return changed


def _channel_statement(community_id: int, channel_id: UUID) -> Statement:
    return _CHANNEL_SQL, [community_id, channel_id]


def put_statement(community_id: int, channel_id: UUID, pubkey: str, role: str) -> Statement:
    return _PUT_SQL, [community_id, channel_id, pubkey, role]


def _remove_statement(community_id: int, channel_id: UUID, pubkey: str) -> Statement:
    return _REMOVE_SQL, [community_id, channel_id, pubkey]
