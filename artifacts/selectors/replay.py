"""Reads of the sync WebSocket: REQ replay and the channel access the live stream checks.

Readability is PROTOCOL.md section 1 with one difference section 8 makes: the replay serves
current heads *including* delete tombstones (a client must learn that `d` was deleted), and the
removal markers (kind 45011) stored in readable channels. A connection may have authenticated
several pubkeys; a channel is readable to it when it is open or ANY of them is an active member
(the union: a subscription is served what any of its pubkeys may read).

Every query is one statement, so one snapshot decides channels, policy and rows together.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from django.db import connection

from artifacts.selectors.readability import (
    ANY_READER,
    channel_is_readable,
    policy_allows_type,
    readable_channels,
    type_allowed,
)
from artifacts.selectors.standby import standby_read
from nostr.kinds import KIND_ARTIFACT, KIND_REMOVAL_MARKER

__all__ = [
    "ChannelState",
    "CommunityPolicy",
    "ReplayRow",
    "channel_states",
    "community_policy",
    "replay_events",
]

ReplayRow = tuple[int, str, str]  # (created_at, event_id, raw)

# The readable channels (limited to `#h` when given) under the community's policy: no row at all
# while artifacts are disabled, because `policy` is then empty.
def _readable(channels: bool) -> str:
    return f"""
policy AS (
    SELECT artifact_types FROM communities WHERE id = %(community)s AND artifacts_enabled
),
readable AS ({readable_channels("channels" if channels else None, readers=ANY_READER,
                                also_from=", policy")}
)"""


# Current heads, delete tombstones included; a redacted head event is never served.
# Per readable channel (LATERAL), that channel's heads newest first, joined to their events, up
# to the limit; the channels' pages are then merged (ORDER BY ... LIMIT of the union). With
# artifact_heads_replay (community_id, channel_id, created_at DESC, event_id) each channel's page
# is an ordered index scan that stops after `limit` heads with a readable event; without it (not
# built yet) each channel's heads are sorted before their events are joined. The policy is
# joined outside the channels' pages: inside, its filter's guessed selectivity talked the
# planner into sorting the whole channel (EXPLAIN ANALYZE, 500 of a 10,000-artifact channel:
# 4.5 ms with the index and this shape, 37-62 ms for every head joined first).
_HEADS = f"""
SELECT page.created_at, page.event_id, page.raw
FROM readable
JOIN policy ON TRUE
CROSS JOIN LATERAL (
    SELECT h.created_at, h.event_id, e.raw
    FROM (
        SELECT h.community_id, h.created_at, h.event_id, h.artifact_type
        FROM artifact_heads h
        WHERE h.community_id = %(community)s AND h.channel_id = readable.channel_id
          {{head_predicates}}
        ORDER BY h.created_at DESC, h.event_id
    ) h
    JOIN events e ON e.community_id = h.community_id AND e.event_id = h.event_id
    WHERE e.deleted_at IS NULL
      AND {type_allowed("h.artifact_type", "policy.artifact_types")}
      {{predicates}}
    ORDER BY h.created_at DESC, h.event_id
    LIMIT %(limit)s
) page
ORDER BY page.created_at DESC, page.event_id
LIMIT %(limit)s"""

# Removal markers stored in readable channels. Their `d` is read from the stored JSON (markers
# are few: one per move); the type of `d` (immutable) comes from its head.
# Uses events_channel_kind (community_id, channel_id, kind, created_at).
_MARKER_D = (
    "(SELECT t->>1 FROM jsonb_array_elements(e.raw::jsonb->'tags') t "
    "WHERE t->>0 = 'd' LIMIT 1)"
)
_MARKERS = f"""
SELECT e.created_at, e.event_id, e.raw
FROM events e
JOIN policy ON TRUE
WHERE e.community_id = %(community)s AND e.kind = {KIND_REMOVAL_MARKER}
  AND e.channel_id IN (SELECT channel_id FROM readable)
  AND e.deleted_at IS NULL
  AND (policy.artifact_types IS NULL OR EXISTS (
        SELECT 1 FROM artifact_heads th
        WHERE th.community_id = e.community_id AND th.artifact_id::text = {_MARKER_D}
          AND th.artifact_type = ANY(policy.artifact_types)))
  {{predicates}}
ORDER BY e.created_at DESC, e.event_id
LIMIT %(limit)s"""


def replay_events(
    *,
    community_id: int,
    pubkeys: Collection[str],
    kinds: Collection[int],
    ids: Collection[str] | None = None,
    authors: Collection[str] | None = None,
    channels: Collection[str] | None = None,
    artifacts: Collection[str] | None = None,
    since: int | None = None,
    until: int | None = None,
    limit: int,
    after: tuple[int, str] | None = None,
    caught_up_to: str | None = None,
) -> list[ReplayRow]:
    """The stored events one NIP-01 filter replays, newest first (`created_at` desc, id asc).

    `None` for a predicate means absent; an empty collection matches nothing. `after` is the
    last row of the previous page (its `created_at` and id): the replay is read page by page as
    the connection drains (artifacts.ws.consumer), each page starting below the one before in
    that order (keyset pagination, so a page costs the same however deep it is). The replay runs
    beside a live subscription registered before it: a standby serves it only once it has
    replayed `caught_up_to` (the primary's position read after the subscription was registered,
    artifacts.selectors.standby.primary_position), so nothing falls between the two.
    """
    statement = replay_statement(
        community_id=community_id, pubkeys=pubkeys, kinds=kinds, ids=ids, authors=authors,
        channels=channels, artifacts=artifacts, since=since, until=until, limit=limit,
        after=after,
    )
    if statement is None:
        return []
    sql, params = statement
    # Under the read budget (2 s), like every read.
    with standby_read(beside_live=True, caught_up_to=caught_up_to) as cursor:
        cursor.execute(sql, params)
        return [(int(created_at), event_id, raw) for created_at, event_id, raw in cursor]


def replay_statement(
    *,
    community_id: int,
    pubkeys: Collection[str],
    kinds: Collection[int],
    ids: Collection[str] | None,
    authors: Collection[str] | None,
    channels: Collection[str] | None,
    artifacts: Collection[str] | None,
    since: int | None,
    until: int | None,
    limit: int,
    after: tuple[int, str] | None = None,
) -> tuple[str, dict[str, Any]] | None:
    """`replay_events`' one statement and its parameters; None when nothing can match."""
    if limit <= 0 or any(v is not None and not v for v in (ids, authors, channels, artifacts)):
        return None
    params: dict[str, Any] = {
        "community": community_id,
        "pubkeys": sorted(pubkeys),
        "limit": limit,
    }
    if channels is not None:
        params["channels"] = [UUID(c) for c in channels]
    common: list[str] = []
    if ids is not None:
        params["ids"] = sorted(ids)
        common.append("AND e.event_id = ANY(%(ids)s::text[])")
    if authors is not None:
        params["authors"] = sorted(authors)
        common.append("AND e.pubkey = ANY(%(authors)s::text[])")
    if since is not None:
        params["since"] = since
        common.append("AND e.created_at >= %(since)s")
    if until is not None:
        params["until"] = until
        common.append("AND e.created_at <= %(until)s")
    head_predicates: list[str] = []  # on the heads, before their events are joined
    marker_predicates = list(common)
    if after is not None:
        # Past the previous page in the replay's order (created_at desc, event_id asc).
        params["after_at"], params["after_id"] = after
        for alias, predicates in (("h", head_predicates), ("e", marker_predicates)):
            predicates.append(
                f"AND ({alias}.created_at < %(after_at)s OR ({alias}.created_at = %(after_at)s"
                f" AND {alias}.event_id > %(after_id)s))"
            )
    if artifacts is not None:
        params["artifacts"] = [UUID(a) for a in artifacts]
        params["artifact_texts"] = sorted(artifacts)
        head_predicates.append("AND h.artifact_id = ANY(%(artifacts)s::uuid[])")
        marker_predicates.append(f"AND {_MARKER_D} = ANY(%(artifact_texts)s::text[])")
    branches = []
    if KIND_ARTIFACT in kinds:
        branches.append(_HEADS.format(head_predicates="\n          ".join(head_predicates),
                                      predicates="\n      ".join(common)))
    if KIND_REMOVAL_MARKER in kinds:
        branches.append(_MARKERS.format(predicates="\n  ".join(marker_predicates)))
    if not branches:
        return None
    union = " UNION ALL ".join(f"({branch})" for branch in branches)
    sql = (
        "WITH "
        + _readable(channels is not None)
        + f"\nSELECT * FROM ({union}) AS replay ORDER BY 1 DESC, 2 LIMIT %(limit)s"
    )
    return sql, params


@dataclass(frozen=True, slots=True)
class ChannelState:
    """What the live stream needs to decide one channel's readability for any pubkey."""

    channel_id: str
    exists: bool  # exists and is not deleted
    open: bool  # of a deleted channel too: its visibility when it was deleted
    members: frozenset[str]  # active members (only loaded for private channels)

    def readable_by_any(self, pubkeys: Collection[str]) -> bool:
        return channel_is_readable(
            exists=self.exists, open=self.open, member=any(p in self.members for p in pubkeys)
        )

    def readable_if_listed(self, pubkeys: Collection[str]) -> bool:
        """Readable but for a deletion: who could read a channel until it was deleted, or can
        since it was restored."""
        return channel_is_readable(
            exists=True, open=self.open, member=any(p in self.members for p in pubkeys)
        )


@dataclass(frozen=True, slots=True)
class CommunityPolicy:
    exists: bool
    artifacts_enabled: bool
    artifact_types: frozenset[str] | None  # None: every type is allowed

    def allows(self, artifact_type: str | None) -> bool:
        return policy_allows_type(
            artifact_type, enabled=self.artifacts_enabled, allowed_types=self.artifact_types
        )


# Deleted channels too (not `exists`): who could read one until its deletion decides who hears
# of the deletion (PROTOCOL.md section 8).
_CHANNEL_STATES = """
SELECT c.channel_id::text, c.visibility,
       CASE WHEN c.visibility = 'open' THEN NULL ELSE ARRAY(
           SELECT m.pubkey FROM channel_members m
           WHERE m.community_id = c.community_id AND m.channel_id = c.channel_id
             AND m.removed_at IS NULL) END,
       c.deleted_at IS NULL
FROM channels c
WHERE c.community_id = %(community)s AND c.channel_id = ANY(%(channels)s::uuid[])
"""


def channel_states(*, community_id: int, channel_ids: Collection[str]) -> dict[str, ChannelState]:
    """The state of each named channel; a missing or deleted channel is `exists=False` (a
    deleted one keeps its visibility and members)."""
    states = {
        cid: ChannelState(channel_id=cid, exists=False, open=False, members=frozenset())
        for cid in channel_ids
    }
    if not states:
        return states
    with connection.cursor() as cursor:
        cursor.execute(
            _CHANNEL_STATES,
            {"community": community_id, "channels": [UUID(c) for c in channel_ids]},
        )
        for channel_id, visibility, members, live in cursor:
            states[channel_id] = ChannelState(
                channel_id=channel_id,
                exists=live,
                open=visibility == "open",
                members=frozenset(members or ()),
            )
    return states


def community_policy(*, community_id: int) -> CommunityPolicy:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT artifacts_enabled, artifact_types FROM communities WHERE id = %s",
            [community_id],
        )
        row = cursor.fetchone()
    if row is None:
        return CommunityPolicy(exists=False, artifacts_enabled=False, artifact_types=None)
    enabled, types = row
    return CommunityPolicy(
        exists=True,
        artifacts_enabled=bool(enabled),
        artifact_types=frozenset(types) if types is not None else None,
    )


# What the hubs poll to notice access changes nobody announced: the listing counter every
# listing and policy change increments, the policy itself, and the membership's marks.
# channel_members_sync (community_id, pubkey, sync_modified_at, channel_id) serves the two
# aggregates with an index-only scan of the community's members.
_ACCESS_MARKS = """
SELECT c.id, c.listing_version, c.artifacts_enabled, c.artifact_types,
       (SELECT max(m.sync_modified_at) FROM channel_members m WHERE m.community_id = c.id),
       (SELECT count(*) FROM channel_members m WHERE m.community_id = c.id)
FROM communities c WHERE c.id = ANY(%s)
"""


def access_marks(*, community_ids: Collection[int]) -> dict[int, tuple[object, ...]]:
    """Per community, values that change whenever its listing, policy or membership does."""
    with connection.cursor() as cursor:
        cursor.execute(_ACCESS_MARKS, [list(community_ids)])
        return {int(row[0]): tuple(row[1:]) for row in cursor}
