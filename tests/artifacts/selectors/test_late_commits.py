"""Late commits: a writer stamps when its transaction starts and may commit much later.

The fence (T never passes the start of a transaction still open, read before the page's
snapshot) is what delivers such writes; these tests run with the overlap at 0, so nothing else
could.
"""

from __future__ import annotations

import time
from typing import Any

import psycopg
import pytest
from django.db import connection

from tests.artifacts.selectors.held import HeldTransaction
from tests.artifacts.selectors.replica import Replica
from tests.factories import create_artifact, make_channel, make_community, make_key, update_artifact

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def world() -> dict[str, Any]:
    owner, reader = make_key(), make_key()
    community = make_community()
    h = make_channel(community, owner=owner)
    artifacts = dict(create_artifact(community, owner, h) for _ in range(4))
    replica = Replica(community, reader.pubkey)  # overlap 0
    replica.round()
    assert replica.heads() == artifacts
    return locals()


def test_writer_held_open_five_seconds_is_delivered_by_the_next_round(
    world: dict[str, Any],
) -> None:
    community, owner, h, replica = world["community"], world["owner"], world["h"], world["replica"]
    d, head = next(iter(world["artifacts"].items()))
    writer = HeldTransaction()
    started = time.monotonic()
    new_head = writer.run(lambda: update_artifact(community, owner, d, h, prev=head))
    pages = replica.round()
    assert replica.heads()[d] == head  # not committed yet: not delivered, and not lost
    assert pages[-1].fence_lag.total_seconds() >= 0
    time.sleep(max(0.0, 5 - (time.monotonic() - started)))
    writer.commit()
    replica.round()
    assert replica.heads()[d] == new_head
    assert replica.heads() == replica.fresh()


def test_commit_between_the_fence_read_and_the_snapshot_is_delivered(
    world: dict[str, Any],
) -> None:
    community, owner, h, replica = world["community"], world["owner"], world["h"], world["replica"]
    (d1, head1), (d2, head2) = list(world["artifacts"].items())[:2]
    writer = HeldTransaction()
    new1 = writer.run(lambda: update_artifact(community, owner, d1, h, prev=head1))
    new2: list[str] = []

    def inject() -> None:
        # Open across the fence read, committed before the snapshot is taken.
        writer.commit()
        # And one write that starts after the fence read and commits before the snapshot.
        new2.append(update_artifact(community, owner, d2, h, prev=head2))

    replica.page(before_snapshot=inject)
    while replica.pages[-1].more:
        replica.page()
    replica.round()
    assert replica.heads()[d1] == new1
    assert replica.heads()[d2] == new2[0]
    assert replica.heads() == replica.fresh()


def test_idle_open_transaction_holds_the_watermark_back_without_losing_anything(
    world: dict[str, Any],
) -> None:
    community, owner, h, replica = world["community"], world["owner"], world["h"], world["replica"]
    (d1, head1), (d2, head2) = list(world["artifacts"].items())[:2]
    params = connection.settings_dict
    idle = psycopg.connect(
        dbname=params["NAME"], user=params["USER"], password=params["PASSWORD"] or None,
        host=params["HOST"] or None, port=params["PORT"] or None,
    )
    try:
        idle.execute("SELECT 1")  # idle in transaction from here on
        new1 = update_artifact(community, owner, d1, h, prev=head1)
        pages = replica.round()
        assert replica.heads()[d1] == head1  # held back, not lost
        lag = pages[-1].fence_lag
        time.sleep(0.3)
        new2 = update_artifact(community, owner, d2, h, prev=head2)
        pages = replica.round()
        assert replica.heads()[d1] == head1 and replica.heads()[d2] == head2
        assert pages[-1].fence_lag > lag  # T stays at the idle transaction's start
    finally:
        idle.rollback()
        idle.close()
    replica.round()
    assert replica.heads()[d1] == new1 and replica.heads()[d2] == new2
    assert replica.heads() == replica.fresh()


@pytest.mark.parametrize("first_commit", ["lower", "higher"])
def test_equal_stamps_from_two_transactions_lose_nothing(
    world: dict[str, Any], first_commit: str
) -> None:
    community, owner, h, replica = world["community"], world["owner"], world["h"], world["replica"]
    (low, low_head), (high, high_head) = sorted(world["artifacts"].items())[:2]
    early, late = HeldTransaction(), HeldTransaction()  # `early` starts first

    def stamp_of(d: str) -> Any:
        with connection.cursor() as cursor:
            cursor.execute("SELECT modified_at FROM artifact_heads WHERE artifact_id = %s", [d])
            return cursor.fetchone()[0]

    def restamp(d: str, stamp: Any) -> None:
        # A stamp no earlier than this transaction's start, equal to the other's.
        with connection.cursor() as cursor:
            cursor.execute("UPDATE artifact_heads SET modified_at = %s WHERE artifact_id = %s",
                           [stamp, d])

    new_high = late.run(lambda: update_artifact(community, owner, high, h, prev=high_head))
    stamp = late.run(lambda: stamp_of(high))
    new_low = early.run(lambda: update_artifact(community, owner, low, h, prev=low_head))
    early.run(lambda: restamp(low, stamp))
    first, second = (early, late) if first_commit == "lower" else (late, early)
    first.commit()
    replica.round(limit=1)
    second.commit()
    replica.round(limit=1)
    assert replica.heads()[low] == new_low and replica.heads()[high] == new_high
    assert replica.heads() == replica.fresh()
