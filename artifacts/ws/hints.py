"""Whom a channel's access change concerns, and the NOTICE that tells it (PROTOCOL.md section 8).

Every change a round would deliver is heard live: a change of a subscriber's own access within
its subscription's channels reaches it as a hint (the stored 9000/9001/9002/9008 when its REQ
names that kind, else a CLOSED or a NOTICE starting `changed:`), so its client runs a round.

A hint must never tell a subscriber about a channel it could not read before the change and
cannot read after it: that would reveal a private channel's existence and activity. So a change
concerns a connection only when the channel was readable to one of its pubkeys before or is
after, decided from the channel's state after the change (`ChannelState`, deleted channels
included) and what the change was (`artifacts.signals.AccessChange.what`).
"""

from __future__ import annotations

from collections.abc import Collection

from artifacts.selectors.replay import ChannelState
from artifacts.signals import (
    ARCHIVED,
    CREATED,
    DELETED,
    MADE_PRIVATE,
    MADE_PUBLIC,
    MEMBER,
    RESTORED,
    UNARCHIVED,
)
from artifacts.ws.publish import LiveChange

__all__ = ["changed_notice", "concerns"]


def concerns(change: LiveChange, state: ChannelState | None, pubkeys: Collection[str]) -> bool:
    """Whether `change` may have changed what `pubkeys` can read of its channel (or, for an
    archive or unarchive, what a round tells them of it), given the channel's `state` after
    the change (None: not looked up, which only a membership change needs no state for)."""
    what = change.what
    if what == MEMBER:
        # Another member's grant or removal is not this subscriber's to hear.
        return change.pubkey is not None and change.pubkey in pubkeys
    if state is None:
        return False
    if what == DELETED:
        return state.readable_if_listed(pubkeys)  # who could read it until the deletion
    if what in (MADE_PUBLIC, MADE_PRIVATE):
        # Open on one side of the change: everyone could read it before, or can now.
        return state.exists
    if what in (RESTORED, CREATED, ARCHIVED, UNARCHIVED):
        return state.readable_by_any(pubkeys)
    return False  # a change this version does not know: the re-check alone applies


def changed_notice(change: LiveChange) -> str:
    """The NOTICE text: `changed: <channel id> <what>` (docs/protocol.md)."""
    return f"changed: {change.channel_id} {change.what}: run a round"
