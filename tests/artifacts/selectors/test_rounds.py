"""Rounds: paging, continuation candidates, the removal rule, page rules."""

from __future__ import annotations

import uuid

import pytest

from artifacts.selectors.budget import execute_prepared, read_transaction
from artifacts.selectors.fence import read_fence
from artifacts.selectors.filters import parse_filter
from artifacts.selectors.rounds import PAGE_BYTES, Page, page_steps, prepare_round
from artifacts.selectors.sync_epoch import database_identity
from tests.artifacts.selectors.reference import load_world
from tests.artifacts.selectors.replica import Replica
from tests.factories import (
    add_member,
    create_artifact,
    delete_artifact,
    make_channel,
    make_community,
    make_key,
    move_artifact,
    redact,
    restore_artifact,
    update_artifact,
    write,
)

pytestmark = pytest.mark.django_db(transaction=True)


def removed(pages: list) -> list[tuple[str, str]]:
    return [entry for page in pages for entry in page.removed]


def named(pages: list) -> set[str]:
    """Every artifact a set of pages named (as an event or a removal)."""
    out = {d for d, _ in removed(pages)}
    for page in pages:
        out |= {raw.split('["d","', 1)[1][:36] for raw in page.events}
    return out


def test_full_round_pages_by_limit_then_continuation_is_empty() -> None:
    owner, reader = make_key(), make_key()
    community = make_community()
    h = make_channel(community, owner=owner)
    created = dict(create_artifact(community, owner, h) for _ in range(11))
    replica = Replica(community, reader.pubkey)
    pages = replica.round(limit=3)
    assert [len(p.events) for p in pages][:4] == [3, 3, 3, 2]
    assert pages[0].reset and not any(p.reset for p in pages[1:])
    assert [p.more for p in pages][-1] is False
    assert replica.heads() == created
    again = replica.round(limit=3)
    assert len(again) == 1 and again[0].events == [] and again[0].removed == []
    assert not again[0].reset and not again[0].more


def test_continuation_delivers_every_kind_of_head_change_with_its_reason() -> None:
    owner, reader = make_key(), make_key()
    community = make_community()
    h = make_channel(community, owner=owner)
    d1, head1 = create_artifact(community, owner, h)
    d2, head2 = create_artifact(community, owner, h)
    replica = Replica(community, reader.pubkey)
    replica.round()

    head1 = update_artifact(community, owner, d1, h, prev=head1, title="updated")
    deleted = delete_artifact(community, owner, d2, h, prev=head2)
    d3, head3 = create_artifact(community, owner, h)
    pages = replica.round()
    assert replica.heads() == {d1: head1, d3: head3}
    assert removed(pages) == [(d2, "deleted")]

    restored = restore_artifact(community, owner, d2, h, prev=deleted)
    redact(community, owner, h, head3)
    pages = replica.round()
    assert replica.heads() == {d1: head1, d2: restored}
    assert removed(pages) == [(d3, "redacted")]

    # The redacted head is still the head: an update naming it brings the artifact back.
    revived = update_artifact(community, owner, d3, h, prev=head3)
    replica.round()
    assert replica.heads() == {d1: head1, d2: restored, d3: revived}
    assert replica.heads() == replica.fresh()


def test_removals_are_named_only_under_the_removal_rule() -> None:
    owner, reader = make_key(), make_key()
    community = make_community()
    open_h = make_channel(community, owner=owner)
    hidden = make_channel(community, owner=owner, visibility="private")
    hidden2 = make_channel(community, owner=owner, visibility="private")
    secret, secret_head = create_artifact(community, owner, hidden)
    wanderer, wanderer_head = create_artifact(community, owner, hidden)
    comer, comer_head = create_artifact(community, owner, hidden)
    leaver, leaver_head = create_artifact(community, owner, open_h)
    replica = Replica(community, reader.pubkey)
    replica.round()
    assert replica.heads() == {leaver: leaver_head}

    delete_artifact(community, owner, secret, hidden, prev=secret_head)
    move_artifact(community, owner, wanderer, hidden2, prev=wanderer_head)
    comer_head = move_artifact(community, owner, comer, open_h, prev=comer_head)
    move_artifact(community, owner, leaver, hidden, prev=leaver_head)
    pages = replica.round()
    # Deleted or moved between channels the reader cannot read: never named.
    assert named(pages) == {comer, leaver}
    assert removed(pages) == [(leaver, "moved")]
    assert replica.heads() == {comer: comer_head} == replica.fresh()


@pytest.mark.parametrize("first", ["move", "removal"])
def test_move_and_removal_from_the_source_in_either_order(first: str) -> None:
    """"d moves from A to B, then the reader is removed from A" and the other way round: either
    way the reader ends without d, and is never told about it from B."""
    owner, reader = make_key(), make_key()
    community = make_community()
    a = make_channel(community, owner=owner, visibility="private", members=[reader])
    b = make_channel(community, owner=owner, visibility="private")
    d, head = create_artifact(community, owner, a)
    replica = Replica(community, reader.pubkey)
    replica.round()
    assert d in replica.items
    steps = [
        lambda: move_artifact(community, owner, d, b, prev=head),
        lambda: write(community, owner, 9001, [["h", a], ["p", reader.pubkey]]),
    ]
    for step in steps if first == "move" else steps[::-1]:
        step()
    pages = replica.round()
    assert d not in replica.items
    assert pages[0].reset  # the reader's view lost A
    assert replica.heads() == replica.fresh() == load_world(community).readable(reader.pubkey)


def test_both_sequences_across_two_rounds() -> None:
    owner, reader = make_key(), make_key()
    community = make_community()
    a = make_channel(community, owner=owner, visibility="private", members=[reader])
    b = make_channel(community, owner=owner, visibility="private")
    d1, head1 = create_artifact(community, owner, a)
    d2, head2 = create_artifact(community, owner, a)
    replica = Replica(community, reader.pubkey)
    replica.round()
    move_artifact(community, owner, d1, b, prev=head1)
    replica.round()
    assert d1 not in replica.items and d2 in replica.items
    write(community, owner, 9001, [["h", a], ["p", reader.pubkey]])
    replica.round()
    move_artifact(community, owner, d2, b, prev=head2)
    replica.round()
    assert replica.heads() == replica.fresh() == {}


def test_filters_deliver_moves_in_and_out_and_never_name_other_types() -> None:
    owner, reader = make_key(), make_key()
    community = make_community()
    a, b = make_channel(community, owner=owner), make_channel(community, owner=owner)
    task, task_head = create_artifact(community, owner, a, type="buzz.task")
    note, note_head = create_artifact(community, owner, a, type="buzz.note")
    outside, outside_head = create_artifact(community, owner, b, type="buzz.task")
    replica = Replica(community, reader.pubkey, channels=[a], types=["buzz.task"])
    replica.round()
    assert replica.heads() == {task: task_head}

    move_artifact(community, owner, task, b, prev=task_head)
    update_artifact(community, owner, note, a, prev=note_head, type="buzz.note")
    outside_head = move_artifact(community, owner, outside, a, prev=outside_head)
    pages = replica.round()
    assert removed(pages) == [(task, "moved")]
    assert named(pages) == {task, outside}
    assert replica.heads() == {outside: outside_head} == replica.fresh()


def test_one_entry_per_artifact_per_page_and_limit_bounds_events_and_removals() -> None:
    owner, reader = make_key(), make_key()
    community = make_community()
    a, b = make_channel(community, owner=owner), make_channel(community, owner=owner)
    hidden = make_channel(community, owner=owner, visibility="private")
    d, head = create_artifact(community, owner, a)
    others = [create_artifact(community, owner, a) for _ in range(5)]
    replica = Replica(community, reader.pubkey)
    replica.round()
    for channel in (b, a, b, hidden, a):
        head = move_artifact(community, owner, d, channel, prev=head)
    for other, other_head in others[:3]:
        update_artifact(community, owner, other, a, prev=other_head)
    for other, other_head in others[3:]:
        delete_artifact(community, owner, other, a, prev=other_head)
    pages = replica.round(limit=2)
    for page in pages:
        entries = [raw.split('["d","', 1)[1][:36] for raw in page.events]
        entries += [x for x, _ in page.removed]
        assert len(entries) <= 2
        assert len(entries) == len(set(entries))
    assert replica.heads() == replica.fresh()
    big = replica.round(limit=1000)
    assert len(big) == 1 and not big[0].events and not big[0].removed


def test_a_page_stops_near_one_mebibyte() -> None:
    owner, reader = make_key(), make_key()
    community = make_community()
    h = make_channel(community, owner=owner)
    content = '{"body":"' + "x" * 60_000 + '"}'
    for _ in range(20):
        create_artifact(community, owner, h, content=content)
    replica = Replica(community, reader.pubkey)
    pages = replica.round(limit=1000)
    assert len(pages) == 2
    first = sum(len(raw) for raw in pages[0].events)
    assert PAGE_BYTES - 70_000 < first <= PAGE_BYTES
    assert pages[0].more and len(replica.items) == 20


def test_bounded_work_gives_short_pages_that_still_finish_the_round() -> None:
    owner, reader = make_key(), make_key()
    community = make_community()
    hidden = make_channel(community, owner=owner, visibility="private")
    visible = make_channel(community, owner=owner)
    for _ in range(12):
        create_artifact(community, owner, hidden)
    d, head = create_artifact(community, owner, visible)
    replica = Replica(community, reader.pubkey)
    pages = replica.round(limit=10, scan_budget=5)
    assert len(pages) >= 3
    assert all(page.more for page in pages[:-1])
    assert [p for p in pages if not p.events and p.more], "expected empty pages with more: true"
    assert replica.heads() == {d: head}


def test_grant_in_a_hidden_channel_of_another_pubkey_names_nothing() -> None:
    owner, reader, other = make_key(), make_key(), make_key()
    community = make_community()
    hidden = make_channel(community, owner=owner, visibility="private")
    d, head = create_artifact(community, owner, hidden)
    replica = Replica(community, reader.pubkey)
    replica.round()
    add_member(community, hidden, other)
    update_artifact(community, owner, d, hidden, prev=head)
    pages = replica.round()
    assert named(pages) == set() and not any(p.reset for p in pages)
    assert uuid.UUID(d)


def statements_of_next_page(replica: Replica) -> tuple[int, Page]:
    """How many statements the replica's next page runs, and the page (not applied)."""
    request = prepare_round(
        community_id=replica.community.pk,
        reader=replica.reader,
        query=parse_filter({**replica.filter, "progress": replica.token, "limit": 100}),
    )
    fence = read_fence()
    with read_transaction(repeatable_read=True) as cursor:
        steps = page_steps(
            request, fence=fence, identity=database_identity(cursor),
            ready=True, overlap=replica.overlap,
        )
        count = 0
        try:
            statement = next(steps)
            while True:
                count += 1
                statement = steps.send(execute_prepared(cursor, *statement))
        except StopIteration as done:
            return count, done.value


def test_a_continuation_with_nothing_in_its_range_skips_its_windows() -> None:
    owner, reader = make_key(), make_key()
    community = make_community()
    h = make_channel(community, owner=owner)
    d, head = create_artifact(community, owner, h)
    replica = Replica(community, reader.pubkey)
    replica.round()
    # Nothing changed since the round's T: the first statement finds no candidate.
    count, quiet = statements_of_next_page(replica)
    assert count == 1
    assert (quiet.events, quiet.removed, quiet.more, quiet.reset) == ([], [], False, False)
    # A change in the range brings both windows back, and is delivered.
    head = update_artifact(community, owner, d, h, prev=head, title="changed")
    count, page = statements_of_next_page(replica)
    assert count == 3
    assert len(page.events) == 1 and '"changed"' in page.events[0]
    # So does a move out of a channel (the moves stream), here into one the reader cannot read.
    hidden = make_channel(community, owner=owner, visibility="private", members=[owner])
    replica.round()
    move_artifact(community, owner, d, hidden, prev=head)
    count, page = statements_of_next_page(replica)
    assert count == 3 and page.removed == [(d, "moved")]
