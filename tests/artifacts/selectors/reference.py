"""A pure-Python reference of readability (PROTOCOL.md section 1), read from the tables.

The selectors decide readability in SQL; the tests compare against this independent statement of
the rule: the community allows artifacts and the type; the home channel exists, is not deleted,
is open or has the reader as an active member; the head is not a delete; the head event is not
redacted.
"""

from __future__ import annotations

from dataclasses import dataclass

from artifacts.models import ArtifactHead, Channel, ChannelMember, Community, Event


@dataclass(frozen=True)
class World:
    enabled: bool
    types: frozenset[str] | None
    # channel id -> (visibility, deleted)
    channels: dict[str, tuple[str, bool]]
    # (channel id, pubkey) of active memberships
    members: frozenset[tuple[str, str]]
    # d -> (head event id, home channel, type, deleted op, head event redacted)
    heads: dict[str, tuple[str, str, str, bool, bool]]

    def channel_readable(self, channel: str, reader: str) -> bool:
        listed = self.channels.get(channel)
        if listed is None or listed[1]:
            return False
        return listed[0] == "open" or (channel, reader) in self.members

    def readable(
        self,
        reader: str,
        *,
        channels: list[str] | None = None,
        types: list[str] | None = None,
    ) -> dict[str, str]:
        """d -> head event id of every head `reader` may read, within the filter."""
        out = {}
        for d, (event_id, home, kind, deleted, redacted) in self.heads.items():
            if not self.enabled or (self.types is not None and kind not in self.types):
                continue
            if deleted or redacted or not self.channel_readable(home, reader):
                continue
            if channels is not None and home not in channels:
                continue
            if types is not None and kind not in types:
                continue
            out[d] = event_id
        return out


def load_world(community: Community) -> World:
    community.refresh_from_db()
    channels = {
        str(row["channel_id"]): (row["visibility"], row["deleted_at"] is not None)
        for row in Channel.objects.filter(community=community).values(
            "channel_id", "visibility", "deleted_at"
        )
    }
    members = frozenset(
        (str(channel), pubkey)
        for channel, pubkey in ChannelMember.objects.filter(
            community=community, removed_at__isnull=True
        ).values_list("channel_id", "pubkey")
    )
    heads_rows = list(
        ArtifactHead.objects.filter(community=community).values_list(
            "artifact_id", "event_id", "channel_id", "artifact_type", "deleted"
        )
    )
    redacted = set(
        Event.objects.filter(
            community=community,
            event_id__in=[row[1] for row in heads_rows],
            deleted_at__isnull=False,
        ).values_list("event_id", flat=True)
    )
    heads = {
        str(d): (event_id, str(channel), kind, deleted, event_id in redacted)
        for d, event_id, channel, kind, deleted in heads_rows
    }
    return World(
        enabled=community.artifacts_enabled,
        types=frozenset(community.artifact_types) if community.artifact_types is not None else None,
        channels=channels,
        members=members,
        heads=heads,
    )
