"""Readability (PROTOCOL.md section 1) as SQL, so every read decides it inside one statement.

Artifact `d` is readable by P when: the community has artifacts enabled and allows `d`'s type;
`d`'s home channel exists and is not deleted; the channel is open or P is an active member; the
head is not a delete; the head event is not redacted. The fragments below are composed into the
plain reads, the rounds and the view; they expect the parameters `%(community)s` (community id)
and `%(reader)s` (P's pubkey), and the community row joined as `co`.
"""

from __future__ import annotations


def channel_readable(channel: str) -> str:
    """P can read channel `channel` (an SQL expression of type uuid) now."""
    return f"""EXISTS (
        SELECT 1 FROM channels ch
         WHERE ch.community_id = %(community)s AND ch.channel_id = {channel}
           AND ch.deleted_at IS NULL
           AND (ch.visibility = 'open' OR EXISTS (
                SELECT 1 FROM channel_members m
                 WHERE m.community_id = %(community)s AND m.channel_id = {channel}
                   AND m.pubkey = %(reader)s AND m.removed_at IS NULL)))"""


def policy_allows(artifact_type: str) -> str:
    """The community (joined as `co`) has artifacts enabled and allows `artifact_type`."""
    return (
        f"(co.artifacts_enabled AND "
        f"(co.artifact_types IS NULL OR {artifact_type} = ANY(co.artifact_types)))"
    )


def head_readable(head: str, event: str) -> str:
    """The head `head` (artifact_heads alias) with head event `event` (events alias, LEFT JOINed)
    is readable by P."""
    return (
        f"({policy_allows(f'{head}.artifact_type')} AND NOT {head}.deleted "
        f"AND {event}.deleted_at IS NULL AND {event}.raw IS NOT NULL "
        f"AND {channel_readable(f'{head}.channel_id')})"
    )


def in_values(expression: str, param: str, *, uuid: bool = False) -> str:
    cast = "::uuid[]" if uuid else "::text[]"
    return f"{expression} = ANY(%({param})s{cast})"


def readable_channels(filter_channels_param: str | None = None) -> str:
    """SELECT of the channel ids P can read now (optionally only those in a `#h` filter)."""
    narrowed = (
        f" AND c.channel_id = ANY(%({filter_channels_param})s::uuid[])"
        if filter_channels_param
        else ""
    )
    return f"""
        SELECT c.channel_id FROM channels c
         WHERE c.community_id = %(community)s AND c.deleted_at IS NULL{narrowed}
           AND (c.visibility = 'open' OR EXISTS (
                SELECT 1 FROM channel_members m
                 WHERE m.community_id = %(community)s AND m.channel_id = c.channel_id
                   AND m.pubkey = %(reader)s AND m.removed_at IS NULL))"""
