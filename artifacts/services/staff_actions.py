"""Staff actions as events (PROTOCOL.md section 2, "Staff actions").

The operators' moderation (the admin console; `buzz-admin` would call the same functions) that
has an event kind is stored as that event, signed by the relay's key (NIP-11 `pubkey`), which
counts as a community admin for it (`artifacts.selectors.permissions.access_statement`). Each
action signs its event and hands it to `ingest.apply_event`, the writer a person's event goes
through: so it is checked by the same rules, stamped, kept, and announced live like the same
event from a person (and a later batching of that writer batches these too).

Each action first reads whether it would change anything, so a no-op (a member already removed,
an event already redacted) stores no event, as the services it replaces stamped nothing.

`buzz-admin` has no moderation command today (its commands are the runbook's and the
community's policy, which no kind carries); archive, unarchive and restore have no kind either:
their services announce the commit (`access_changed`), which tells the subscribers concerned.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from uuid import UUID

from django.conf import settings

from artifacts.models import Channel, ChannelMember
from artifacts.models import Event as EventRow
from artifacts.services.errors import Invalid, WriteRefused
from artifacts.services.ingest import apply_event
from artifacts.services.members import check_put
from nostr.events import Event, sign
from nostr.kinds import (
    KIND_DELETE_CHANNEL,
    KIND_EDIT_CHANNEL,
    KIND_PUT_MEMBER,
    KIND_REDACTION,
    KIND_REMOVE_MEMBER,
)

__all__ = [
    "StaffActionRefused",
    "staff_channel_delete",
    "staff_channel_update",
    "staff_member_put",
    "staff_member_remove",
    "staff_redact",
]

# Two identical actions in one second (remove, re-add, remove) would sign identical events, and
# the second would be a duplicate that changes nothing: it is signed a second later instead.
_ATTEMPTS = 5


class StaffActionRefused(WriteRefused):
    """The writer refused the action's event; `message` is its `OK` message (with prefix)."""

    @property
    def ok_message(self) -> str:
        return self.message


def _apply(community_id: int, kind: int, tags: Sequence[Sequence[str]]) -> Event:
    """Sign the relay's event and apply it as `ingest.apply_event` does a person's; the stored
    event, or `StaffActionRefused` with the writer's answer."""
    now = int(time.time())
    for attempt in range(_ATTEMPTS):
        event = sign(settings.RELAY_SIGNING_SECRET, kind=kind, tags=tags, content="",
                     created_at=now + attempt)
        result = apply_event(community_id=community_id, event=event, now=now)
        if not result.accepted:
            raise StaffActionRefused(result.message)
        if not result.message.startswith("duplicate:"):
            return event
    raise StaffActionRefused("error: the same action was just made; retry")


def staff_redact(*, community_id: int, event_id: str) -> Event | None:
    """Redact a stored event with a relay-signed 9005; None when it was already redacted."""
    row = (
        EventRow.objects.filter(community_id=community_id, event_id=event_id)
        .values_list("channel_id", "deleted_at")
        .first()
    )
    if row is None or row[0] is None:
        raise Invalid(f"no event {event_id} in a channel of this community")
    channel_id, redacted_at = row
    if redacted_at is not None:
        return None
    return _apply(community_id, KIND_REDACTION, [["h", str(channel_id)], ["e", event_id]])


def staff_member_put(
    *, community_id: int, channel_id: UUID, pubkey: str, role: str
) -> Event | None:
    """Grant, rejoin or change a role with a relay-signed 9000; None when `pubkey` already was
    an active member with `role`."""
    check_put(pubkey, role)
    if ChannelMember.objects.filter(
        community_id=community_id, channel_id=channel_id, pubkey=pubkey, role=role,
        removed_at__isnull=True,
    ).exists():
        return None
    return _apply(community_id, KIND_PUT_MEMBER, [["h", str(channel_id)], ["p", pubkey, role]])


def staff_member_remove(*, community_id: int, channel_id: UUID, pubkey: str) -> Event | None:
    """Remove a member with a relay-signed 9001; None when it was not an active member."""
    if not ChannelMember.objects.filter(
        community_id=community_id, channel_id=channel_id, pubkey=pubkey, removed_at__isnull=True
    ).exists():
        return None
    return _apply(community_id, KIND_REMOVE_MEMBER, [["h", str(channel_id)], ["p", pubkey]])


def staff_channel_update(
    *, community_id: int, channel_id: UUID, name: str | None = None,
    visibility: str | None = None,
) -> tuple[list[str], Event | None]:
    """Rename and/or change visibility with a relay-signed 9002 naming only what changes; the
    fields that change and the event (none when nothing changes)."""
    current = (
        Channel.objects.filter(community_id=community_id, channel_id=channel_id,
                               deleted_at__isnull=True)
        .values_list("name", "visibility")
        .first()
    )
    if current is None:
        raise Invalid(f"no channel {channel_id}")
    tags: list[list[str]] = [["h", str(channel_id)]]
    changed = []
    if name is not None and name != current[0]:
        tags.append(["name", name])
        changed.append("name")
    if visibility is not None and visibility != current[1]:
        tags.append(["public" if visibility == Channel.Visibility.OPEN else "private"])
        changed.append("visibility")
    if not changed:
        return [], None
    return changed, _apply(community_id, KIND_EDIT_CHANNEL, tags)


def staff_channel_delete(*, community_id: int, channel_id: UUID) -> Event | None:
    """Delete a channel with a relay-signed 9008; None when it was already deleted."""
    found = Channel.objects.filter(community_id=community_id, channel_id=channel_id).values_list(
        "deleted_at", flat=True
    )
    if not found.exists():
        raise Invalid(f"no channel {channel_id}")
    if found.first() is not None:
        return None
    return _apply(community_id, KIND_DELETE_CHANNEL, [["h", str(channel_id)]])
