"""Failover: the primary crashes under writers and syncing clients, its streaming standby is
promoted, and the relay follows by itself through libpq's multi-host URL
(`target_session_attrs=read-write`), with nothing in any collection that the new primary lacks.

The promoted standby keeps the old primary's system identifier and database oid, but it starts a
new timeline, which every progress token binds (artifacts.selectors.sync_epoch): a token issued
on the old timeline resets on the new one, so no round continues past writes the old primary
acknowledged and the standby never received. With a synchronous standby no acknowledged write
is lost at all. The outage figures (docs/reliability.md) are printed by each test.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

import httpx
import pytest

from tests.faults.clients import Client, Collection, d_of, fresh_full_read
from tests.faults.deployment import Deployment, deployment
from tests.faults.replication import Standby, multi_host_url, start_standby, wait_caught_up
from tests.faults.waits import wait_until

pytestmark = pytest.mark.slow


@pytest.fixture
def pair() -> Iterator[Deployment]:
    """A fresh primary per test: a failover leaves it dead."""
    with deployment("failover") as created:
        created.create_community()
        yield created


@dataclass
class Load:
    """A writer publishing artifacts and a syncing client running rounds, in threads, noting
    every answer: what was acknowledged, when, and how many answers were 503s."""

    writer: Client
    syncer: Collection
    channel: str
    acknowledged: list[tuple[float, str]] = field(default_factory=list)
    write_503: int = 0
    round_503: int = 0
    rounds_done: int = 0
    other: list[tuple[int, str]] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    threads: list[threading.Thread] = field(default_factory=list)

    def start(self) -> None:
        self.threads = [threading.Thread(target=self._write, daemon=True),
                        threading.Thread(target=self._sync, daemon=True)]
        for thread in self.threads:
            thread.start()

    def finish(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(30)

    def _write(self) -> None:
        while not self.stop.is_set():
            event = self.writer.artifact(self.channel, title="load")
            try:
                response = self.writer.post("/event", event)
            except httpx.HTTPError:
                continue
            if response.status_code == 200 and response.json()[2] is True:
                self.acknowledged.append((time.monotonic(), d_of(event)))
            elif response.status_code == 503:
                self.write_503 += 1
            else:
                self.other.append((response.status_code, response.text))
            time.sleep(0.02)

    def _sync(self) -> None:
        while not self.stop.is_set():
            try:
                self.syncer.round()
                self.rounds_done += 1
            except AssertionError as exc:  # a page answered something else than 200
                status, text = exc.args[0]
                if status == 503:
                    self.round_503 += 1
                else:
                    self.other.append((status, text))
            time.sleep(0.05)

    def outage_seconds(self, crash_at: float) -> float:
        """The longest time without an acknowledged write from just before the crash on (a
        write in flight at the crash may still be acknowledged by the dying primary)."""
        times = sorted(at for at, _ in self.acknowledged if at > crash_at - 1.0)
        return max(later - earlier for earlier, later in pairwise(times))


def _crash_and_promote(dep: Deployment, standby: Standby) -> tuple[float, float]:
    """(when the crash began, when the promotion was done)."""
    crash_at = time.monotonic()
    dep.postgres.stop("immediate")  # SIGQUIT to the postmaster: no shutdown checkpoint
    standby.promote()
    return crash_at, time.monotonic()


def _converged(collections: list[Collection], resets_before: list[int]) -> None:
    for collection, before in zip(collections, resets_before, strict=True):
        collection.catch_up(retry_unavailable=True)
        assert collection.resets > before, "a token of the old timeline must reset"
        collection.catch_up()
        assert collection.ids() == fresh_full_read(collection.client, collection.filter)


def _timeline(url_sql: Any) -> int:
    return int(url_sql("SELECT timeline_id FROM pg_control_checkpoint()")[0][0])


def test_failover_resets_every_client_and_none_holds_a_lost_write(pair: Deployment) -> None:
    dep = pair
    standby = start_standby(dep)
    relay = dep.start_relay(env={"DATABASE_URL": multi_host_url(dep, standby)})
    alice = Client(relay.url)
    bob = Client(relay.url)
    channel = alice.create_channel(name="failover")
    private = alice.create_channel(private=True, name="failover-private")
    assert alice.put_member(private, bob.pubkey)[2] is True
    kept = [alice.artifact(channel, title=f"kept {i}") for i in range(3)]
    for event in kept:
        assert alice.publish(event)[2] is True
    collections = [Collection(alice), Collection(bob, {"#h": [channel, private]}),
                   Collection(alice, {"#type": ["buzz.task"]})]
    for collection in collections:
        collection.catch_up()
    wait_caught_up(dep, standby)
    load = Load(Client(relay.url), Collection(bob), channel)
    load.start()
    time.sleep(1.0)

    # The standby stops receiving: what the primary acknowledges from now on, clients apply and
    # the promoted standby will never have (asynchronous replication's window, made wide).
    standby.stop_receiving(dep)
    lost = alice.artifact(private, title="lost")
    assert alice.publish(lost)[2] is True
    gone = alice.artifact(channel, op="delete", d=d_of(kept[0]), prev=kept[0]["id"])
    assert alice.publish(gone)[2] is True
    for collection in collections:
        # The writer's transactions may hold a round's fence below these two writes (the
        # read-your-writes exception, PROTOCOL.md section 5): they arrive in a later round.
        def applied(collection: Collection = collection) -> bool:
            collection.catch_up()
            return d_of(lost) in collection.items and d_of(kept[0]) not in collection.items
        wait_until(applied, timeout=20, interval=0.05)
    resets_before = [collection.resets for collection in [*collections, load.syncer]]
    time.sleep(0.5)

    crash_at, promoted_at = _crash_and_promote(dep, standby)
    assert _timeline(standby.sql) == 2 or standby.sql(
        "SELECT substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8)")[0][0] == "00000002"
    wait_until(lambda: any(at > crash_at for at, _ in load.acknowledged), timeout=40)
    time.sleep(1.0)
    load.finish()

    assert load.other == [], "every answer is a 200 or a documented 503"
    outage = load.outage_seconds(crash_at)
    print(f"\nasync failover: {outage:.2f} s without an acknowledged write; "
          f"{load.write_503} writes and {load.round_503} rounds answered 503; "
          f"{load.rounds_done} rounds finished")
    assert outage < 30

    _converged([*collections, load.syncer], resets_before)
    for collection in collections:
        assert d_of(lost) not in collection.items  # the standby never had it
        assert d_of(kept[0]) in collection.items  # its deletion was lost with it
    # The writes asynchronous replication lost were acknowledged by the old primary; every
    # write acknowledged once the standby was promoted is on it.
    present = set(fresh_full_read(load.writer))
    assert {d for at, d in load.acknowledged if at > promoted_at} <= present
    assert {d for at, d in load.acknowledged if at < crash_at} - present, "nothing was lost?"
    log = relay.log_path.read_text(errors="replace")
    assert "database identity changed" in log and "/2 (system identifier" in log
    # Writes after the failover flow normally, on the new timeline.
    after = alice.artifact(channel, title="after failover")
    assert alice.publish(after)[2] is True
    for collection in collections[:2]:
        collection.catch_up()
        assert d_of(after) in collection.items
        assert collection.ids() == fresh_full_read(collection.client, collection.filter)


def test_a_synchronous_standby_keeps_every_acknowledged_write(pair: Deployment) -> None:
    """With `synchronous_standby_names` naming the standby (and `synchronous_commit` on, the
    default), the primary acknowledges a commit only once the standby has flushed it: every
    acknowledged write survives the promotion. With the standby unreachable, a write waits
    instead of being acknowledged, and after the failover it is not there."""
    dep = pair
    standby = start_standby(dep, synchronous=True)
    relay = dep.start_relay(env={"DATABASE_URL": multi_host_url(dep, standby)})
    alice = Client(relay.url)
    channel = alice.create_channel(name="sync-failover")
    acknowledged = []
    for index in range(20):
        event = alice.artifact(channel, title=f"acknowledged {index}")
        assert alice.publish(event)[2] is True
        acknowledged.append(d_of(event))
    collections = [Collection(alice), Collection(alice, {"#h": [channel]})]
    for collection in collections:
        collection.catch_up()
    resets_before = [collection.resets for collection in collections]

    standby.stop_receiving(dep)
    waiting = alice.artifact(channel, title="waits for the standby")
    impatient = Client(relay.url, alice.secret, timeout=3)
    with pytest.raises(httpx.ReadTimeout):
        impatient.post("/event", waiting)  # its commit waits for a standby that is gone
    crash_at, promoted_at = _crash_and_promote(dep, standby)
    wait_until(lambda: alice.query({"artifact": "current"}).status_code == 200, timeout=40)
    print(f"\nsync failover: first round answered {time.monotonic() - crash_at:.2f} s after "
          f"the crash ({promoted_at - crash_at:.2f} s to stop and promote)")

    present = set(fresh_full_read(alice))
    assert set(acknowledged) <= present
    assert d_of(waiting) not in present
    _converged(collections, resets_before)
