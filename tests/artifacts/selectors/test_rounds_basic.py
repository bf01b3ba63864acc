from __future__ import annotations

import pytest

from tests.artifacts.selectors.replica import Replica
from tests.factories import (
    create_artifact,
    delete_artifact,
    make_channel,
    make_community,
    make_key,
    move_artifact,
    update_artifact,
)

pytestmark = pytest.mark.django_db(transaction=True)


def test_full_round_then_continuation_delivers_changes() -> None:
    community = make_community()
    alice, bob = make_key(), make_key()
    open_h = make_channel(community, owner=alice)
    private_h = make_channel(community, owner=alice, visibility="private")
    d1, head1 = create_artifact(community, alice, open_h)
    d2, _ = create_artifact(community, alice, private_h)

    replica = Replica(community, bob.pubkey)
    pages = replica.round(limit=10)
    assert pages[0].reset
    assert replica.heads() == {d1: head1}

    head1b = update_artifact(community, alice, d1, open_h, prev=head1, title="renamed")
    pages = replica.round(limit=10)
    assert not pages[0].reset
    assert replica.heads() == {d1: head1b}

    delete_artifact(community, alice, d1, open_h, prev=head1b)
    pages = replica.round(limit=10)
    assert replica.heads() == {}
    assert pages[-1].removed == [(d1, "deleted")] or any(
        (d1, "deleted") in p.removed for p in pages
    )


def test_move_to_unreadable_channel_removes_as_moved() -> None:
    community = make_community()
    alice, bob = make_key(), make_key()
    open_h = make_channel(community, owner=alice)
    private_h = make_channel(community, owner=alice, visibility="private")
    d, head = create_artifact(community, alice, open_h)
    replica = Replica(community, bob.pubkey)
    replica.round()
    assert d in replica.items
    move_artifact(community, alice, d, private_h, prev=head)
    pages = replica.round()
    assert replica.heads() == {}
    assert [(d, "moved")] == [entry for p in pages for entry in p.removed]
    assert replica.heads() == replica.fresh()
