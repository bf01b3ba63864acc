"""Whom an access change concerns (artifacts/ws/hints.py): a hint never names a channel the
connection could not read before the change or after it, and reaches everyone whose own
access it changed; and the change survives the channel layer's form intact."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from artifacts import signals
from artifacts.selectors.replay import ChannelState
from artifacts.ws.filters import LiveEvent
from artifacts.ws.hints import changed_notice, concerns
from artifacts.ws.publish import LiveChange, LiveMessage

H = "8b4c2a4e-0000-4000-8000-000000000001"
ME, OTHER = "a" * 64, "b" * 64


def _state(*, exists: bool, open_: bool, members: frozenset[str]) -> ChannelState:
    return ChannelState(channel_id=H, exists=exists, open=open_, members=members)


def _readable(exists: bool, open_: bool, member: bool) -> bool:
    return exists and (open_ or member)


@given(open_=st.booleans(), member=st.booleans())
def test_a_hint_concerns_exactly_those_who_could_read_before_or_can_after(
    open_: bool, member: bool
) -> None:
    """Each channel-wide change, from the state after it: told iff readable before or after."""
    members = frozenset({ME} if member else {OTHER})
    # (what, state after the change, readable before, readable after), for this connection.
    cases = [
        (signals.DELETED, _state(exists=False, open_=open_, members=members),
         _readable(True, open_, member), False),
        (signals.RESTORED, _state(exists=True, open_=open_, members=members),
         False, _readable(True, open_, member)),
        (signals.MADE_PUBLIC, _state(exists=True, open_=True, members=members), member, True),
        (signals.MADE_PRIVATE, _state(exists=True, open_=False, members=members), True, member),
        (signals.CREATED, _state(exists=True, open_=open_, members=members),
         False, _readable(True, open_, member)),
        (signals.ARCHIVED, _state(exists=True, open_=open_, members=members),
         _readable(True, open_, member), _readable(True, open_, member)),
        (signals.UNARCHIVED, _state(exists=True, open_=open_, members=members),
         _readable(True, open_, member), _readable(True, open_, member)),
    ]
    for what, state, before, after in cases:
        told = concerns(LiveChange(H, what), state, {ME})
        assert told == (before or after), (what, open_, member)


@pytest.mark.parametrize(("member", "told"), [(ME, True), (OTHER, False), (None, False)])
def test_a_membership_change_concerns_the_member_only(member: str | None, told: bool) -> None:
    assert concerns(LiveChange(H, signals.MEMBER, member), None, {ME, "c" * 64}) is told


def test_an_unknown_change_is_told_to_nobody() -> None:
    state = _state(exists=True, open_=True, members=frozenset())
    assert concerns(LiveChange(H, "renamed"), state, {ME}) is False


def test_the_notice_names_the_channel_and_the_change() -> None:
    assert changed_notice(LiveChange(H, signals.DELETED)) == f"changed: {H} deleted: run a round"


def test_changes_cross_the_channel_layer_intact() -> None:
    event = LiveEvent(id="e" * 64, pubkey=ME, kind=9001, created_at=7, channel_id=H,
                      artifact_id="", artifact_type=None, raw='{"kind":9001}')
    message = LiveMessage(1, access=[H], seq=3, changes=[
        LiveChange(H, signals.MEMBER, OTHER, event), LiveChange(H, signals.ARCHIVED)])
    back = LiveMessage.from_layer(message.to_layer())
    assert back is not None and back.changes == message.changes
    # From an instance of an older version (no `changes` key): no hints, the rest as sent.
    old = message.to_layer()
    del old["changes"]
    back = LiveMessage.from_layer(old)
    assert back is not None and back.changes == [] and back.access == [H]
