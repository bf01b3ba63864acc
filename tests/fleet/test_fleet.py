"""Fleet: three relays on loopback sharing PostgreSQL and Redis, clients spread over them, synced
through a rolling restart, an old-version writer joining and leaving, and an instance with
another relay key (PROTOCOL.md section 7). Every collection ends equal to a fresh full read, no
answer is a 5xx, WebSockets are drained (close 1001) on restart, and `artifacts.incremental` is
withdrawn from NIP-11 while the fleet is unfit and advertised again once it is fit.

The "old version" is what an old relay looks like to the database: a connection announcing
`buzzrelay/<old version>` without `stamps=1` that changes a head without stamping it. (Every
version of this relay stamps, so no real old build exists to run.)
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import psycopg
import pytest
from websockets.exceptions import ConnectionClosed

from nostr.schnorr import generate_secret, pubkey_from_secret
from tests.faults.clients import Client, Collection, WsClient, d_of, fresh_full_read
from tests.faults.deployment import RELAY_SECRET, Deployment, Relay, deployment
from tests.faults.waits import wait_until

KINDS = [45010, 45011]


@pytest.fixture(scope="module")
def dep() -> Iterator[Deployment]:
    with deployment("fleet") as created:
        created.create_community()
        yield created


class FailoverClient(Client):
    """A client of the fleet: tries its own relay first, the others when it does not answer."""

    def __init__(self, fleet: list[Relay], index: int, statuses: list[int],
                 secret: str | None = None) -> None:
        super().__init__(fleet[index].url, secret)
        self.fleet, self.index, self.statuses = fleet, index, statuses

    def post(self, path: str, payload: Any, *, authorization: str | None = None
             ) -> httpx.Response:
        for attempt in range(60):
            self.base_url = self.fleet[(self.index + attempt) % len(self.fleet)].url
            try:
                response = super().post(path, payload, authorization=authorization)
            except httpx.TransportError:
                time.sleep(0.1)
                continue
            self.statuses.append(response.status_code)
            return response
        raise AssertionError("no relay of the fleet answered")


def incremental_advertised(relay: Relay) -> bool:
    info = httpx.get(f"{relay.url}/info", timeout=10).json()
    return "artifacts.incremental" in info["supported_extensions"]


class Traffic:
    """Writers and syncing readers running in the background until stopped."""

    def __init__(self, fleet: list[Relay], statuses: list[int]) -> None:
        self.statuses = statuses
        self.owner = FailoverClient(fleet, 0, statuses)
        self.open = self.owner.create_channel(name="fleet-open")
        self.private = self.owner.create_channel(private=True, name="fleet-private")
        self.member = FailoverClient(fleet, 1, statuses)
        self.outsider = FailoverClient(fleet, 2, statuses)
        assert self.owner.put_member(self.private, self.member.pubkey)[2] is True
        self.collections = [
            Collection(self.member),
            Collection(self.outsider),
            Collection(FailoverClient(fleet, 0, statuses, self.member.secret),
                       {"#h": [self.private]}),
            Collection(FailoverClient(fleet, 2, statuses, self.owner.secret),
                       {"#h": [self.open, self.private], "#type": ["buzz.task"]}),
        ]
        self.heads: dict[str, dict[str, Any]] = {}
        self.stop = threading.Event()
        self.errors: list[BaseException] = []
        self.threads = [threading.Thread(target=self._guard, args=(f,), daemon=True)
                        for f in (self._write, self._sync)]

    def start(self) -> None:
        for thread in self.threads:
            thread.start()

    def finish(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(60)
        assert not self.errors, self.errors

    def _guard(self, body: Any) -> None:
        try:
            body()
        except BaseException as exc:  # reported by finish()
            self.errors.append(exc)

    def _write(self) -> None:
        rng = random.Random(7)
        while not self.stop.is_set():
            roll = rng.random()
            if roll < 0.05:
                # Membership churn: the member's view changes, its next round resets.
                if rng.random() < 0.5:
                    self.owner.remove_member(self.private, self.member.pubkey)
                else:
                    self.owner.put_member(self.private, self.member.pubkey)
            elif not self.heads or roll < 0.4:
                event = self.owner.artifact(rng.choice([self.open, self.private]))
                if self.owner.publish(event)[2]:
                    self.heads[d_of(event)] = event
            else:
                head = self.heads[rng.choice(list(self.heads))]
                channel = next(t[1] for t in head["tags"] if t[0] == "h")
                op = next(t[1] for t in head["tags"] if t[0] == "op")
                next_op = "restore" if op == "delete" else rng.choice(["update", "delete"])
                event = self.owner.artifact(channel, op=next_op, d=d_of(head), prev=head["id"])
                if self.owner.publish(event)[2]:
                    self.heads[d_of(head)] = event
            time.sleep(0.05)

    def _sync(self) -> None:
        while not self.stop.is_set():
            for collection in self.collections:
                collection.round()
            time.sleep(0.2)


def _drained(ws: WsClient) -> int | None:
    """Read until the relay closes the socket; its close code."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            ws.ws.recv(timeout=1)
        except TimeoutError:
            continue
        except ConnectionClosed as closed:
            return closed.rcvd.code if closed.rcvd else None
    return None


def test_fleet_keeps_every_collection_exact_through_restarts_old_writers_and_key_changes(
    dep: Deployment,
) -> None:
    fleet = [dep.start_relay() for _ in range(3)]
    statuses: list[int] = []
    traffic = Traffic(fleet, statuses)
    subscriber = generate_secret()
    # An artifact the writers never touch: the old-version writer will change it unstamped.
    legacy_channel = traffic.owner.create_channel(name="legacy")
    victim = traffic.owner.artifact(legacy_channel, title="changed by an old writer")
    assert traffic.owner.publish(victim)[2] is True
    traffic.start()
    wait_until(lambda: all(incremental_advertised(r) for r in fleet), timeout=30)

    # 1. Rolling restart, one instance at a time, WebSockets drained.
    for index, relay in enumerate(list(fleet)):
        ws = WsClient(relay.port, [subscriber])
        ws.req("live", {"kinds": KINDS, "#h": [traffic.open]})
        relay.stop()
        assert _drained(ws) == 1001
        fleet[index] = dep.start_relay(port=relay.port)
        time.sleep(1)

    # 2. An instance of an old version joins (it does not stamp), writes, and leaves.
    epoch = dep.sql("SELECT epoch FROM sync_state")[0][0]
    key_id = pubkey_from_secret(RELAY_SECRET)[:8]
    with psycopg.connect(dep.database_url, autocommit=True,
                         application_name=f"buzzrelay/0.0.9 key={key_id}") as old:
        old.execute("UPDATE artifact_heads SET deleted = true WHERE artifact_id = %s",
                    (d_of(victim),))
        wait_until(lambda: not any(incremental_advertised(r) for r in fleet), timeout=30)
        wait_until(lambda: dep.sql("SELECT epoch FROM sync_state")[0][0] > epoch, timeout=30)
        time.sleep(2)
    wait_until(lambda: all(incremental_advertised(r) for r in fleet), timeout=45)

    # 3. An instance with another relay key: unfit while it runs; its tokens mean nothing to
    # the others.
    stranger = dep.start_relay(env={"RELAY_SIGNING_KEY": generate_secret()})
    wait_until(lambda: not incremental_advertised(fleet[0]), timeout=30)
    probe = Client(stranger.url, traffic.outsider.secret)
    page = probe.query({"artifact": "current", "progress": None}).json()
    foreign = Client(fleet[0].url, traffic.outsider.secret).query(
        {"artifact": "current", "progress": page["progress"]}
    )
    assert foreign.status_code == 400 and foreign.json()["error"] == "invalid_progress"
    stranger.stop()
    wait_until(lambda: all(incremental_advertised(r) for r in fleet), timeout=45)

    traffic.finish()
    assert not [s for s in statuses if s >= 500], sorted(set(statuses))
    for collection in traffic.collections:
        collection.catch_up()
        assert collection.ids() == fresh_full_read(collection.client, collection.filter)
        assert d_of(victim) not in collection.items
    assert len(statuses) > 100
