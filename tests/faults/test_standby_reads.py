"""Standby reads (DATABASE_REPLICA_URL): plain reads and WebSocket replay served by a hot
standby while it is fresh, by the primary when it lags, and a live subscriber misses nothing
because of lag (artifacts.selectors.standby). Rounds stay on the primary.

The standby is a real streaming replica (tests/faults/replication.py); its lag is made real
with pg_wal_replay_pause(): it keeps receiving WAL and applies none.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator

import pytest

from tests.faults.clients import Client, Collection, WsClient, d_of
from tests.faults.deployment import Deployment, Relay
from tests.faults.replication import Standby, start_standby, wait_caught_up
from tests.faults.waits import wait_until

pytestmark = pytest.mark.slow

# Generous, so that the steps between a pause and the read that must still be served by the
# standby fit in it on a busy machine; the fallback test waits it out.
MAX_LAG_MS = 3000


@pytest.fixture(scope="module")
def topology(dep: Deployment) -> Iterator[tuple[Deployment, Standby, Relay]]:
    """The fault modules' deployment with a standby of its own, for this module only."""
    # Replicated to the standby, which preloads it too: it counts the standby's statements.
    dep.sql("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
    standby = start_standby(dep, name=f"standby-reads-{time.monotonic_ns()}")
    relay = dep.start_relay(env={
        "DATABASE_REPLICA_URL": standby.url(),
        "DATABASE_REPLICA_MAX_LAG_MS": str(MAX_LAG_MS),
    })
    try:
        yield dep, standby, relay
    finally:
        relay.stop()
        standby.stop()
        shutil.rmtree(standby.server.data_dir, ignore_errors=True)


def _plain(client: Client) -> set[str]:
    response = client.query({"artifact": "current"})
    assert response.status_code == 200, response.text
    return {d_of(event) for event in response.json()}


def _relay_connections_on(standby: Standby) -> int:
    return int(standby.sql(
        "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE 'buzzrelay/%'"
    )[0][0])


def test_plain_reads_come_from_the_standby_until_it_lags_too_far(
    topology: tuple[Deployment, Standby, Relay],
) -> None:
    dep, standby, relay = topology
    alice = Client(relay.url)
    channel = alice.create_channel(name="standby-reads")
    seen = alice.artifact(channel, title="replicated")
    assert alice.publish(seen)[2] is True
    wait_caught_up(dep, standby)
    assert d_of(seen) in _plain(alice)
    assert _relay_connections_on(standby) >= 1

    standby.pause_replay()
    try:
        unseen = alice.artifact(channel, title="not replayed yet")
        assert alice.publish(unseen)[2] is True
        # Within the lag bound: the paused standby answers, without the newest write, which
        # only the standby can lack (the primary committed it before the read).
        plain = _plain(alice)
        assert d_of(seen) in plain and d_of(unseen) not in plain
        # Rounds run on the primary: the write is there (read-your-writes; a later round
        # when another transaction, the fleet registry's, held the fence back).
        collection = Collection(alice)

        def has_unseen() -> bool:
            collection.catch_up()
            return d_of(unseen) in collection.items
        wait_until(has_unseen, timeout=10, interval=0.05)
        # Past the bound, plain reads fall back to the primary.
        time.sleep(MAX_LAG_MS / 1000 + 0.5)
        assert d_of(unseen) in _plain(alice)
    finally:
        standby.resume_replay()
    wait_caught_up(dep, standby)


def test_a_live_subscriber_misses_nothing_while_the_standby_is_paused(
    topology: tuple[Deployment, Standby, Relay],
) -> None:
    dep, standby, relay = topology
    alice = Client(relay.url)
    channel = alice.create_channel(name="standby-live")
    before = alice.artifact(channel, title="before the pause")
    assert alice.publish(before)[2] is True
    wait_caught_up(dep, standby)
    ws = WsClient(relay.port, [alice.secret])
    standby.pause_replay()
    try:
        # Committed before the subscription, missing on the standby: the replay must come
        # from the primary, whatever the lag bound says (the pause is fresh).
        unreplayed = alice.artifact(channel, title="committed, not replayed")
        assert alice.publish(unreplayed)[2] is True
        messages = ws.req("live", {"kinds": [45010], "#h": [channel]})
        replayed = {d_of(m[2]) for m in messages if m[0] == "EVENT"}
        assert {d_of(before), d_of(unreplayed)} <= replayed
        assert messages[-1][0] == "EOSE"
        # Committed after the subscription: live.
        later = alice.artifact(channel, title="after the subscription")
        assert alice.publish(later)[2] is True
        live = ws.recv(timeout=10)
        assert live is not None and live[0] == "EVENT" and d_of(live[2]) == d_of(later)
    finally:
        standby.resume_replay()
        ws.close()
    wait_caught_up(dep, standby)


def test_a_replay_is_served_by_a_standby_that_has_caught_up(
    topology: tuple[Deployment, Standby, Relay],
) -> None:
    """The other side of the test above: with the standby streaming, replays go to it (the
    relay waits briefly for it to reach the subscription's position)."""
    dep, standby, relay = topology
    alice = Client(relay.url)
    channel = alice.create_channel(name="standby-replay")
    event = alice.artifact(channel, title="replayed from the standby")
    assert alice.publish(event)[2] is True
    wait_caught_up(dep, standby)
    before = _replays_on(standby)
    ws = WsClient(relay.port, [alice.secret])
    try:
        messages = ws.req("replay", {"kinds": [45010], "#h": [channel]})
        assert d_of(event) in {d_of(m[2]) for m in messages if m[0] == "EVENT"}
    finally:
        ws.close()
    assert wait_until(lambda: _replays_on(standby) > before, timeout=10)


def _replays_on(standby: Standby) -> int:
    """Replay statements the standby has run (pg_stat_statements on the standby)."""
    return int(standby.sql(
        "SELECT coalesce(sum(calls), 0) FROM pg_stat_statements"
        " WHERE query LIKE 'WITH%readable AS%FROM readable%CROSS JOIN LATERAL%artifact_heads h%'"
    )[0][0])


def test_reads_go_to_the_primary_when_the_standby_is_down(
    topology: tuple[Deployment, Standby, Relay],
) -> None:
    """Last in the module: it stops the standby."""
    _dep, standby, relay = topology
    alice = Client(relay.url)
    channel = alice.create_channel(name="standby-down")
    standby.stop()
    event = alice.artifact(channel, title="written with the standby down")
    assert alice.publish(event)[2] is True
    started = time.monotonic()
    assert d_of(event) in _plain(alice)
    ws = WsClient(relay.port, [alice.secret])
    try:
        messages = ws.req("down", {"kinds": [45010], "#h": [channel]})
        assert d_of(event) in {d_of(m[2]) for m in messages if m[0] == "EVENT"}
    finally:
        ws.close()
    assert time.monotonic() - started < 10
    assert "standby unavailable, reading from the primary" in relay.log_path.read_text(
        errors="replace")
