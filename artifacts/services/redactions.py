"""Redaction (kind 9005): hide a stored event without changing which revision is current.

Redacting a 45010 revision stamps the revision (`artifact_revisions.modified_at`) and, when it
is its artifact's head, the head (`artifact_heads.modified_at`): the head stays the head but is
no longer readable, so readers must find it. Relay markers (45011) are never redacted, and a
redaction never writes one.
"""

from __future__ import annotations

from django.db import connection

from artifacts.selectors.budget import execute_prepared
from artifacts.selectors.permissions import access_from_rows, access_statement
from artifacts.services.errors import Duplicate, Invalid, Restricted
from artifacts.services.tags import channel_tag, checked_tag, event_id_value
from artifacts.services.transactions import (
    WriteContext,
    note_stored,
    store_statement,
    write_transaction,
)
from artifacts.services.write_steps import Batch, Statement, WriteSteps
from nostr.events import Event
from nostr.kinds import CHANNEL_KINDS, KIND_ARTIFACT

REDACTABLE_KINDS = frozenset({KIND_ARTIFACT, *CHANNEL_KINDS})

_TARGET_SQL = (
    "SELECT pubkey, kind FROM events WHERE community_id = %s AND event_id = %s"
    " AND channel_id = %s"
)
_REDACT_SQL = (
    "UPDATE events SET deleted_at = statement_timestamp()"
    " WHERE community_id = %s AND event_id = %s AND deleted_at IS NULL RETURNING kind"
)
_STAMP_REVISION_SQL = (
    "UPDATE artifact_revisions SET modified_at = statement_timestamp()"
    " WHERE community_id = %s AND event_id = %s"
)
_STAMP_HEAD_SQL = (
    "UPDATE artifact_heads SET modified_at = statement_timestamp()"
    " WHERE community_id = %s AND event_id = %s"
)


def event_redact(*, community_id: int, event_id: str) -> bool:
    """Redact a stored event; False when it was already redacted (nothing is stamped again).

    Lock order: the event's row, then the head's row (an artifact writer holding the head waits
    for nothing this takes, so the two cannot deadlock).
    """
    with write_transaction(community_id=community_id), connection.cursor() as cursor:
        rows = execute_prepared(cursor, *_redact_statement(community_id, event_id))
        for statement in _stamps_after(rows, community_id, event_id):
            execute_prepared(cursor, *statement)
        return bool(rows)


def event_redact_steps(ctx: WriteContext, *, event: Event, now: int) -> WriteSteps:
    """Kind 9005 by the redacted event's author, a channel owner/admin or a community admin,
    stored and applied in steps (`write_steps`): one batch stores it and reads the author's
    standing and the target; the next redacts the target; an artifact revision's stamps finish.

    Until the author is known to see the channel (readable, community admin, or author of the
    target), every refusal reads the same, whether the channel or event exists or not.
    """
    channel_id = channel_tag(event)
    e_tag = checked_tag(event, "e")
    assert e_tag is not None
    target_id = event_id_value(e_tag[1], "e")
    pubkey = event.pubkey
    community_id = ctx.community_id
    stored, access, found = yield (
        store_statement(ctx, event=event, channel_id=channel_id),
        access_statement(community_id, channel_id, pubkey),
        (_TARGET_SQL, [community_id, target_id, channel_id]),
    )
    if not note_stored(ctx, stored, event=event, channel_id=channel_id):
        raise Duplicate("already have this event")
    actor = access_from_rows(community_id, channel_id, access)
    target = found[0] if found else None
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
    (redacted,) = yield (_redact_statement(community_id, target_id),)
    return _stamps_after(redacted, community_id, target_id)


def _redact_statement(community_id: int, event_id: str) -> Statement:
    return _REDACT_SQL, [community_id, event_id]


def _stamps_after(redacted: list[tuple[object, ...]], community_id: int, event_id: str) -> Batch:
    """What a redaction stamps besides the event: a revision, and its head when it is the head
    (the head stays the head but is no longer readable, so readers must find it). Nothing when
    the event was already redacted."""
    if not redacted or redacted[0][0] != KIND_ARTIFACT:
        return ()
    return (
        (_STAMP_REVISION_SQL, [community_id, event_id]),
        (_STAMP_HEAD_SQL, [community_id, event_id]),
    )
