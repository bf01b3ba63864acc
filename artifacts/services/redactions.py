"""Redaction (kind 9005): hide a stored event without changing which revision is current.

Redacting a 45010 revision stamps the revision (`artifact_revisions.modified_at`) and, when it
is its artifact's head, the head (`artifact_heads.modified_at`): the head stays the head but is
no longer readable, so readers must find it. Relay markers (45011) are never redacted, and a
redaction never writes one.
"""

from __future__ import annotations

from django.db import connection

from artifacts.selectors.permissions import channel_access
from artifacts.services.errors import Invalid, Restricted
from artifacts.services.tags import channel_tag, checked_tag, event_id_value
from artifacts.services.transactions import WriteContext, write_transaction
from nostr.events import Event
from nostr.kinds import CHANNEL_KINDS, KIND_ARTIFACT

REDACTABLE_KINDS = frozenset({KIND_ARTIFACT, *CHANNEL_KINDS})


def event_redact(*, community_id: int, event_id: str) -> bool:
    """Redact a stored event; False when it was already redacted (nothing is stamped again).

    Lock order: the event's row, then the head's row (an artifact writer holding the head waits
    for nothing this takes, so the two cannot deadlock).
    """
    with write_transaction(community_id=community_id), connection.cursor() as cursor:
        cursor.execute(
            "UPDATE events SET deleted_at = statement_timestamp()"
            " WHERE community_id = %s AND event_id = %s AND deleted_at IS NULL RETURNING kind",
            [community_id, event_id],
        )
        row = cursor.fetchone()
        if row is None:
            return False
        if row[0] == KIND_ARTIFACT:
            cursor.execute(
                "UPDATE artifact_revisions SET modified_at = statement_timestamp()"
                " WHERE community_id = %s AND event_id = %s",
                [community_id, event_id],
            )
            cursor.execute(
                "UPDATE artifact_heads SET modified_at = statement_timestamp()"
                " WHERE community_id = %s AND event_id = %s",
                [community_id, event_id],
            )
        return True


def event_redact_event(*, ctx: WriteContext, event: Event, now: int) -> None:
    """Kind 9005 by the redacted event's author, a channel owner/admin or a community admin.

    Until the author is known to see the channel (readable, community admin, or author of the
    target), every refusal reads the same, whether the channel or event exists or not.
    """
    channel_id = channel_tag(event)
    e_tag = checked_tag(event, "e")
    assert e_tag is not None
    target_id = event_id_value(e_tag[1], "e")
    pubkey = event.pubkey
    actor = channel_access(community_id=ctx.community_id, channel_id=channel_id, pubkey=pubkey)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pubkey, kind FROM events WHERE community_id = %s AND event_id = %s"
            " AND channel_id = %s",
            [ctx.community_id, target_id, channel_id],
        )
        target = cursor.fetchone()
    is_author = target is not None and target[0] == pubkey
    if not actor.exists or not (actor.readable or actor.community_admin or is_author):
        raise Restricted(f"cannot redact events in channel {channel_id}")
    if target is None:
        raise Invalid(f"no event {target_id} in channel {channel_id}")
    if target[1] not in REDACTABLE_KINDS:
        raise Invalid("only artifact revisions and channel events (9000-9008) can be redacted")
    if not (is_author or actor.channel_manager):
        raise Restricted("only the author, a channel owner or admin may redact this event")
    if actor.archived:
        raise Restricted(f"channel {channel_id} is archived")
    event_redact(community_id=ctx.community_id, event_id=target_id)
