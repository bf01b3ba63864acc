"""What a pubkey may do in a channel, as writers need to know it (PROTOCOL.md sections 1-2).

One query returns the community's policy and the pubkey's standing in one channel, read inside
the writer's transaction so the decision holds at commit time.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from django.conf import settings

from artifacts.models import Channel, ChannelMember
from artifacts.selectors.readability import channel_is_readable, type_is_allowed

# Public for the group commit, which asks it once for a run of creates that all need it
# (`async_ingest._drive_creates`).
ACCESS_SQL = """
SELECT co.artifacts_enabled, co.artifact_types, co.open_channel_creation,
       (%(pubkey)s = ANY(co.admin_pubkeys) OR %(pubkey)s = %(relay)s),
       ch.visibility, ch.archived_at IS NOT NULL, m.role
FROM communities co
LEFT JOIN channels ch
  ON ch.community_id = co.id AND ch.channel_id = %(channel)s AND ch.deleted_at IS NULL
LEFT JOIN channel_members m
  ON ch.id IS NOT NULL AND m.community_id = co.id AND m.channel_id = %(channel)s
     AND m.pubkey = %(pubkey)s AND m.removed_at IS NULL
WHERE co.id = %(community)s
"""

MANAGER_ROLES = frozenset({ChannelMember.Role.OWNER, ChannelMember.Role.ADMIN})


@dataclass(frozen=True, slots=True)
class ChannelAccess:
    """A pubkey's standing in one channel, with the community's artifact policy."""

    channel_id: UUID
    exists: bool  # the channel exists and is not deleted (deleted channels are invisible)
    visibility: str | None
    archived: bool
    role: str | None  # the pubkey's active role; None when not an active member
    community_admin: bool
    artifacts_enabled: bool
    artifact_types: tuple[str, ...] | None  # None: every type is allowed
    open_channel_creation: bool

    @property
    def readable(self) -> bool:
        """Open, or the pubkey is an active member (community admins get no read rights)."""
        return channel_is_readable(
            exists=self.exists,
            open=self.visibility == Channel.Visibility.OPEN,
            member=self.role is not None,
        )

    @property
    def writable(self) -> bool:
        return self.readable and not self.archived

    @property
    def channel_manager(self) -> bool:
        """Channel owner or admin, or community admin: manages members and metadata."""
        return self.exists and (self.role in MANAGER_ROLES or self.community_admin)

    def allows_type(self, artifact_type: str) -> bool:
        return type_is_allowed(artifact_type, self.artifact_types)


def access_statement(
    community_id: int, channel_id: UUID, pubkey: str
) -> tuple[str, dict[str, object]]:
    """The one query behind `ChannelAccess` (prepared: every write asks, and planning the
    joins cost 8x running them); `access_from_rows` reads its rows.

    The relay's own key counts as a community admin (PROTOCOL.md section 2, staff actions:
    the operators' moderation is stored as events it signs); only the relay holds it."""
    return ACCESS_SQL, {"community": community_id, "channel": channel_id, "pubkey": pubkey,
                        "relay": settings.RELAY_PUBKEY}


def access_from_rows(
    community_id: int, channel_id: UUID, rows: Sequence[Sequence[Any]]
) -> ChannelAccess:
    row = rows[0] if rows else None
    if row is None:
        raise LookupError(f"community {community_id} does not exist")
    enabled, types, open_creation, is_admin, visibility, archived, role = row
    return ChannelAccess(
        channel_id=channel_id,
        exists=visibility is not None,
        visibility=visibility,
        archived=bool(archived),
        role=role,
        community_admin=bool(is_admin),
        artifacts_enabled=enabled,
        artifact_types=tuple(types) if types is not None else None,
        open_channel_creation=open_creation,
    )
