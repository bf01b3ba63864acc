"""Signals the write path sends.

`events_committed` fires once per committed write transaction that stored events (revisions,
relay-written 45011 markers, channel and member events 9000-9008), after the commit, so a
receiver never announces something a rollback took back. Arguments:

- `community_id: int`
- `events: list[StoredEvent]`, in storage order: `event` (the `nostr.events.Event`, whose `raw`
  is the stored JSON text, as reads serve it) and `channel_id` (str or None).

The WebSocket layer uses it for live fan-out and to notice membership and visibility changes.
Receivers run on the writer's thread: they must be quick and must not raise (Django's `send`
propagates exceptions; a failing receiver would make a committed write look failed).
"""

from __future__ import annotations

from dataclasses import dataclass

from django.dispatch import Signal

from nostr.events import Event


@dataclass(frozen=True, slots=True)
class StoredEvent:
    """One event a committed write transaction stored, as `events_committed` carries it."""

    event: Event
    channel_id: str | None


# What an access change was, as `AccessChange.what` says it (PROTOCOL.md section 8): the live
# layer decides from it whose access it may have changed, and so whom to tell.
MEMBER = "member"  # a grant, rejoin, role change or removal of `pubkey`
CREATED = "created"
DELETED = "deleted"
RESTORED = "restored"
MADE_PUBLIC = "public"
MADE_PRIVATE = "private"
ARCHIVED = "archived"
UNARCHIVED = "unarchived"


@dataclass(frozen=True, slots=True)
class AccessChange:
    """One change of a channel's access a committed write made, as `access_changed` carries it:
    `event` is the stored 9000/9001/9002/9008 that made it (None for an operator's action with
    no kind, or a kind that is not a hint, 9007)."""

    channel_id: str
    what: str
    pubkey: str | None = None  # MEMBER: the member whose access changed
    event: Event | None = None


events_committed = Signal()

# Sent after the commit of every write that changed who can read what: membership (grant,
# rejoin, role change, removal), a channel's creation, visibility, deletion, restore, archive or
# unarchive (`channel_ids`: the channels, as strings), or the community's policy or admin list
# (`channel_ids=None`: the whole community). Operators' changes store no event, so this is how
# the live layer hears of them; for changes made by events it is sent alongside
# `events_committed`. Arguments: `community_id: int`, `channel_ids: list[str] | None`, and
# `changes: list[AccessChange]` (what each change was, for the subscribers' hints; empty for
# community-wide changes).
access_changed = Signal()
