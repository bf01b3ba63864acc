"""Re-read, not re-sent (PROTOCOL.md section 5): a continuation round reads every candidate of
[W - overlap, T) but sends one stamped below W only if its row version was not yet visible to the
previous round's first page.

In normal operation (every writer stamps after BEGIN, the fence holds) the overlap then costs no
row on the wire. When a writer breaks the stamp assumptions (simulated here by SQL: a stamp set
into the past, in the same transaction as the write, or a transaction left open across a round),
the write is still delivered by the overlap, as before the rule. The overlap is 120 s throughout.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.db import connection, transaction

from artifacts.selectors.filters import parse_filter
from artifacts.selectors.round_sql import _unseen
from artifacts.selectors.rounds import Page, prepare_round
from artifacts.tokens import ProgressToken, decode_progress, encode_progress
from tests.artifacts.selectors.held import HeldTransaction
from tests.artifacts.selectors.replica import Replica
from tests.factories import (
    add_member,
    create_artifact,
    make_channel,
    make_community,
    make_key,
    move_artifact,
    redact,
    update_artifact,
)

pytestmark = pytest.mark.django_db(transaction=True)

OVERLAP = timedelta(seconds=120)


def named(pages: list[Page]) -> set[str]:
    """Every artifact the pages named, as an event or a removal."""
    out = {d for page in pages for d, _ in page.removed}
    for page in pages:
        out |= {raw.split('["d","', 1)[1][:36] for raw in page.events}
    return out


def db_now() -> datetime:
    with connection.cursor() as cursor:
        cursor.execute("SELECT clock_timestamp()")
        moment: datetime = cursor.fetchone()[0]
    return moment


def stamp_of(d: str) -> datetime:
    with connection.cursor() as cursor:
        cursor.execute("SELECT modified_at FROM artifact_heads WHERE artifact_id = %s", [d])
        moment: datetime = cursor.fetchone()[0]
    return moment


def restamp(d: str, stamp: datetime, *, revision: str | None = None) -> None:
    """A writer that stamped at some earlier moment (not after BEGIN): the head, and the revision
    it wrote when it is a move, carry `stamp`."""
    with connection.cursor() as cursor:
        cursor.execute("UPDATE artifact_heads SET modified_at = %s WHERE artifact_id = %s",
                       [stamp, d])
        if revision is not None:
            cursor.execute(
                "UPDATE artifact_revisions SET modified_at = %s WHERE event_id = %s",
                [stamp, revision],
            )


def in_the_past(write: Callable[[], Any], d: str, stamp: datetime, *, move: bool = False) -> Any:
    """`write`, then its stamps set to `stamp`, in one transaction (the write's own statements
    run in a savepoint of it, so their xmin is a subtransaction's)."""
    with transaction.atomic():
        result = write()
        restamp(d, stamp, revision=result if move else None)
    return result


@pytest.fixture
def world() -> dict[str, Any]:
    owner, reader = make_key(), make_key()
    community = make_community()
    h = make_channel(community, owner=owner)
    hidden = make_channel(community, owner=owner, visibility="private")
    artifacts = dict(create_artifact(community, owner, h) for _ in range(4))
    replica = Replica(community, reader.pubkey, overlap=OVERLAP)
    replica.round()
    assert replica.heads() == artifacts
    return locals()


def test_a_continuation_does_not_send_again_what_the_previous_round_saw(
    world: dict[str, Any],
) -> None:
    community, owner, h, replica = world["community"], world["owner"], world["h"], world["replica"]
    d, head = next(iter(world["artifacts"].items()))
    updated = update_artifact(community, owner, d, h, prev=head)
    new = dict(create_artifact(community, owner, h) for _ in range(3))
    pages = replica.round(limit=2)
    # Everything is within the overlap; only what changed since the full round travels.
    assert named(pages) == {d, *new}
    assert replica.heads()[d] == updated
    again = replica.round()
    assert named(again) == set()
    newest = update_artifact(community, owner, d, h, prev=updated)
    third = replica.round()
    assert named(third) == {d} and replica.heads()[d] == newest
    assert replica.heads() == replica.fresh()


def test_a_head_restamped_into_the_past_is_still_delivered(world: dict[str, Any]) -> None:
    community, owner, h, replica = world["community"], world["owner"], world["h"], world["replica"]
    d, head = next(iter(world["artifacts"].items()))
    before = db_now() - timedelta(seconds=30)  # below the next round's W, within the overlap
    replica.round()
    updated = in_the_past(lambda: update_artifact(community, owner, d, h, prev=head), d, before)
    assert stamp_of(d) == before
    pages = replica.round()
    assert named(pages) == {d}
    assert replica.heads()[d] == updated


@pytest.mark.parametrize("writes", ["before the round", "after the round's first page"])
def test_a_transaction_left_open_across_a_round_is_delivered(
    world: dict[str, Any], writes: str
) -> None:
    """The writer stamps into the past and stays open while a round runs: open before the round,
    it holds the fence back; with its xid assigned before the round's first snapshot or after,
    the next round finds its version unseen."""
    community, owner, h, replica = world["community"], world["owner"], world["h"], world["replica"]
    d, head = next(iter(world["artifacts"].items()))
    before = db_now() - timedelta(seconds=30)
    writer = HeldTransaction()

    def the_write() -> str:
        new = update_artifact(community, owner, d, h, prev=head)
        restamp(d, before)
        return new

    updated = writer.run(the_write) if writes == "before the round" else None
    pages = replica.page(limit=1), *replica.round(limit=1)
    assert d not in named(list(pages))
    if updated is None:
        updated = writer.run(the_write)
    writer.commit()
    pages = replica.round()
    assert replica.heads()[d] == updated
    assert replica.heads() == replica.fresh()


def test_equal_stamps_one_seen_one_not(world: dict[str, Any]) -> None:
    community, owner, h, replica = world["community"], world["owner"], world["h"], world["replica"]
    (seen, _), (late, late_head) = list(world["artifacts"].items())[:2]
    stamp = stamp_of(seen)
    replica.round()
    updated = in_the_past(
        lambda: update_artifact(community, owner, late, h, prev=late_head), late, stamp
    )
    assert stamp_of(late) == stamp_of(seen)
    pages = replica.round(limit=1)
    assert named(pages) == {late}
    assert replica.heads()[late] == updated


@pytest.mark.parametrize("where", ["readable", "hidden"])
def test_a_move_inside_the_overlap_is_delivered(world: dict[str, Any], where: str) -> None:
    community, owner, replica = world["community"], world["owner"], world["replica"]
    to = make_channel(community, owner=owner) if where == "readable" else world["hidden"]
    d, head = next(iter(world["artifacts"].items()))
    before = db_now() - timedelta(seconds=30)
    replica.round()
    moved = in_the_past(
        lambda: move_artifact(community, owner, d, to, prev=head), d, before, move=True
    )
    pages = replica.round()
    if where == "readable":
        assert replica.heads()[d] == moved
    else:
        assert [entry for page in pages for entry in page.removed] == [(d, "moved")]
        assert d not in replica.heads()
    assert replica.heads() == replica.fresh()


def test_a_redaction_inside_the_overlap_is_delivered(world: dict[str, Any]) -> None:
    community, owner, h, replica = world["community"], world["owner"], world["h"], world["replica"]
    d, head = next(iter(world["artifacts"].items()))
    before = db_now() - timedelta(seconds=30)
    replica.round()
    in_the_past(lambda: redact(community, owner, h, head), d, before)
    pages = replica.round()
    assert [entry for page in pages for entry in page.removed] == [(d, "redacted")]
    assert d not in replica.heads()


def _rewritten(replica: Replica, **changes: Any) -> None:
    """Replace the replica's token by one with `changes` (sealed under the relay's key)."""
    binding = prepare_round(
        community_id=replica.community.pk, reader=replica.reader,
        query=parse_filter({**replica.filter, "progress": None}),
    ).binding
    assert replica.token is not None
    token = decode_progress(replica.token, binding=binding)
    assert isinstance(token, ProgressToken)
    replica.token = encode_progress(token._replace(**changes), binding=binding)


@pytest.mark.parametrize("snapshot", ["unknown", "ahead of the database"])
def test_a_token_whose_snapshot_cannot_be_used_sends_every_candidate(
    world: dict[str, Any], snapshot: str
) -> None:
    """A token without the previous round's snapshot, or with one the database's xid counter has
    not reached (a restored database), sends the overlap's candidates as before the rule."""
    replica, artifacts = world["replica"], world["artifacts"]
    assert named(replica.round()) == set()
    _rewritten(replica, round_xmin=0 if snapshot == "unknown" else (1 << 40))
    pages = replica.round()
    assert named(pages) == set(artifacts)
    # The round recorded its own snapshot: the next one sends nothing again.
    assert named(replica.round()) == set()


def test_the_catch_up_of_a_gained_channel_sends_every_head() -> None:
    """A channel that joins the reader's view is not filtered: its heads were not readable
    before, whenever they were written."""
    owner, reader = make_key(), make_key()
    community = make_community()
    private = make_channel(community, owner=owner, visibility="private")
    artifacts = dict(create_artifact(community, owner, private) for _ in range(3))
    replica = Replica(community, reader.pubkey, overlap=OVERLAP, view_changes="incremental")
    replica.round()
    assert replica.heads() == {}
    add_member(community, private, reader)
    pages = replica.round()
    assert not any(page.reset for page in pages)
    assert replica.heads() == artifacts
    assert named(replica.round()) == set()


@pytest.mark.parametrize(("previous", "row_xmin", "unseen"), [
    (1_000, 1_000, True),  # the snapshot's xmin itself was running then
    (1_000, 999, False),
    ((1 << 32) - 10, 5, True),  # the row's xid is past the 32-bit wrap, the snapshot's before
    ((1 << 32) + 5, (1 << 32) - 10, False),  # the reverse: the row is older
    ((3 << 32) + 7, 7 + (1 << 31) - 1, True),  # as far ahead as the page allows the rule
])
def test_the_32_bit_comparison_is_postgresqls_modular_order(
    previous: int, row_xmin: int, unseen: bool
) -> None:
    """Row xmins are 32-bit, the snapshot's xmin an xid8: compared modulo 2^32, as PostgreSQL
    orders xids, against the snapshot's low 32 bits (the page passes them)."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {_unseen('%(row)s::text::xid')}",
                       {"row": str(row_xmin % (1 << 32)), "seen_xmin": previous & 0xFFFFFFFF})
        assert cursor.fetchone()[0] is unseen
