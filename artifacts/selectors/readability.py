"""Readability (PROTOCOL.md section 1): the one definition, in SQL and in Python.

Artifact `d` is readable by P when: the community has artifacts enabled and allows `d`'s type;
`d`'s home channel exists and is not deleted; the channel is open or P is an active member; the
head is not a delete; the head event is not redacted. A revision (history) is readable when its
own channel is readable now, the policy allows the artifact's type, and it is not redacted.

Every read decides readability inside its own statement, so the SQL fragments below are composed
into the plain reads, history, the rounds, the view and the WebSocket replay; they expect the
parameter `%(community)s` (community id) and, for the readers, `%(reader)s` (P's pubkey, `READER`)
or `%(pubkeys)s` (a connection's authenticated pubkeys, `ANY_READER`: a channel is readable to a
WebSocket connection when it is readable to any of them, PROTOCOL.md section 8).

The functions at the end state the same rule over plain values. The writers' permission checks
(`permissions.ChannelAccess`) and the live stream (`replay.ChannelState`, `replay.CommunityPolicy`)
decide with them, and the tests hold every read path to them.
"""

from __future__ import annotations

from collections.abc import Collection

# Who reads: one pubkey (HTTP reads) or any of a connection's pubkeys (WebSocket replay).
READER = "= %(reader)s"
ANY_READER = "= ANY(%(pubkeys)s::text[])"


# --- SQL ------------------------------------------------------------------------------------


def channel_row_readable(ch: str, *, readers: str = READER, channel: str | None = None) -> str:
    """The `channels` row aliased `ch` (of the community) is readable by the readers now.

    The membership test is a correlated EXISTS on (community_id, channel_id, pubkey), which the
    planner answers from channel_members' indexes, or hashes once per statement for a reader's
    memberships: never a scan of the community's members. `channel` names the expression the
    row was looked up by (equal to `{ch}.channel_id`): correlating the membership test with it
    rather than with the row lets the planner keep hashing the channels (same plans as before
    this was one function).
    """
    member_channel = channel or f"{ch}.channel_id"
    return f"""({ch}.deleted_at IS NULL
           AND ({ch}.visibility = 'open' OR EXISTS (
                SELECT 1 FROM channel_members m
                 WHERE m.community_id = %(community)s AND m.channel_id = {member_channel}
                   AND m.pubkey {readers} AND m.removed_at IS NULL)))"""


def channel_readable(channel: str, *, readers: str = READER) -> str:
    """P can read channel `channel` (an SQL expression of type uuid) now."""
    return f"""EXISTS (
        SELECT 1 FROM channels ch
         WHERE ch.community_id = %(community)s AND ch.channel_id = {channel}
           AND {channel_row_readable("ch", readers=readers, channel=channel)})"""


def readable_channels(
    filter_channels_param: str | None = None, *, readers: str = READER, also_from: str = ""
) -> str:
    """SELECT of the channel ids P can read now (optionally only those in a `#h` filter).

    `also_from` joins more relations (", policy") so that a caller can make the whole set empty
    with a condition of its own."""
    narrowed = (
        f" AND c.channel_id = ANY(%({filter_channels_param})s::uuid[])"
        if filter_channels_param
        else ""
    )
    return f"""
        SELECT c.channel_id FROM channels c{also_from}
         WHERE c.community_id = %(community)s{narrowed}
           AND {channel_row_readable("c", readers=readers)}"""


def type_allowed(artifact_type: str, allowed_types: str) -> str:
    """`artifact_type` is among `allowed_types` (an SQL text[]; NULL: every type)."""
    return f"({allowed_types} IS NULL OR {artifact_type} = ANY({allowed_types}))"


def policy_allows_sql(artifact_type: str) -> str:
    """The community (joined as `co`) has artifacts enabled and allows `artifact_type`."""
    return f"(co.artifacts_enabled AND {type_allowed(artifact_type, 'co.artifact_types')})"


def head_shown(deleted: str, redacted_at: str) -> str:
    """A head whose `deleted` flag and head event's `deleted_at` (redaction) are these is neither
    a delete nor redacted."""
    return f"(NOT {deleted} AND {redacted_at} IS NULL)"


def head_readable(head: str, event: str) -> str:
    """The head `head` (artifact_heads alias) with head event `event` (events alias, LEFT JOINed)
    is readable by P."""
    return (
        f"({policy_allows_sql(f'{head}.artifact_type')} "
        f"AND {head_shown(f'{head}.deleted', f'{event}.deleted_at')} AND {event}.raw IS NOT NULL "
        f"AND {channel_readable(f'{head}.channel_id')})"
    )


def revision_readable(revision: str, head: str, event: str) -> str:
    """The revision `revision` (artifact_revisions alias) of the artifact whose head is `head`
    (its type is immutable, so the head's says it), stored as `event` (events alias), is
    readable by P: its own channel now, not its artifact's current home."""
    return (
        f"({event}.deleted_at IS NULL AND {policy_allows_sql(f'{head}.artifact_type')} "
        f"AND {channel_readable(f'{revision}.channel_id')})"
    )


def in_values(expression: str, param: str, *, uuid: bool = False) -> str:
    cast = "::uuid[]" if uuid else "::text[]"
    return f"{expression} = ANY(%({param})s{cast})"


# --- Python ---------------------------------------------------------------------------------


def channel_is_readable(*, exists: bool, open: bool, member: bool) -> bool:
    """A channel that `exists` (and is not deleted), `open` or not, is readable by a reader who
    is (`member`) or is not an active member of it; for a WebSocket connection, `member` when
    any of its pubkeys is. Community admins get no read rights from being admins."""
    return exists and (open or member)


def type_is_allowed(artifact_type: str | None, allowed_types: Collection[str] | None) -> bool:
    """`artifact_type` is among `allowed_types` (None: every type, even an unknown one)."""
    return allowed_types is None or (artifact_type is not None and artifact_type in allowed_types)


def policy_allows_type(
    artifact_type: str | None, *, enabled: bool, allowed_types: Collection[str] | None
) -> bool:
    """The community's policy (artifacts `enabled`, `allowed_types`) serves `artifact_type`."""
    return enabled and type_is_allowed(artifact_type, allowed_types)


def head_is_readable(
    *, policy_allows: bool, channel_readable: bool, deleted: bool, redacted: bool
) -> bool:
    """A head is readable when its policy and home channel allow it and it is neither a delete
    nor redacted (a redacted head stays the head; an update on it makes it readable again)."""
    return policy_allows and channel_readable and not deleted and not redacted


def revision_is_readable(*, policy_allows: bool, channel_readable: bool, redacted: bool) -> bool:
    """A revision (history) is readable when the policy allows its artifact's type, its own
    channel is readable now, and it is not redacted."""
    return policy_allows and channel_readable and not redacted
