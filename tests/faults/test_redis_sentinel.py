"""Redis behind Debian's Redis Sentinel, and a failover under traffic (issue 18).

A master, its replica and three sentinels that ask for a password of their own; two relays
configured with the sentinels (REDIS_SENTINELS, REDIS_URL naming the master), one given the
sentinels' password in REDIS_SENTINEL_PASSWORD, the other in REDIS_SENTINELS' URL form. The
master is killed: the sentinels promote the replica, and the channel layer, the rate limiter,
the replay claims and the cache follow it. Meanwhile writes are accepted (Redis is not on a
write's path: live fan-out pauses, PROTOCOL.md section 5) and live delivery across the relays
resumes after the failover.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from urllib.parse import quote

import orjson
import pytest
import redis

from nostr.nip98 import make_nip98_header
from tests.faults.clients import Client, WsClient, d_of
from tests.faults.deployment import HOST, Deployment, Relay
from tests.faults.engines import SentinelSet, start_sentinel_set, wait_for_failover
from tests.faults.waits import wait_until

pytestmark = pytest.mark.slow

KINDS = [45010, 45011]


# A sentinel's password is not the master's (the master here asks for none): the relays must
# give it to the sentinels, and only to them.
SENTINEL_PASSWORD = "sentinel@s3cret"


@pytest.fixture(scope="module")
def topology(dep: Deployment) -> Iterator[SentinelSet]:
    started = start_sentinel_set(dep.root, sentinels=3, password=SENTINEL_PASSWORD)
    yield started
    started.stop()


@pytest.fixture(scope="module")
def relays(dep: Deployment, topology: SentinelSet) -> Iterator[tuple[Relay, Relay]]:
    first = dep.start_relay(env={"REDIS_URL": topology.url(0),
                                 "REDIS_SENTINELS": topology.addresses,
                                 "REDIS_SENTINEL_PASSWORD": SENTINEL_PASSWORD})
    in_url = f":{quote(SENTINEL_PASSWORD, safe='')}@{topology.addresses}"
    second = dep.start_relay(env={"REDIS_URL": topology.url(0), "REDIS_SENTINELS": in_url})
    yield first, second
    first.stop()
    second.stop()


def _subscribe(ws: WsClient, channel: str) -> bool:
    answers = ws.req("live", {"kinds": KINDS, "#h": [channel]})
    return answers[-1][0] == "EOSE"


def _arrives(ws: WsClient, event_id: str, channel: str, timeout: float) -> bool:
    """The event reaches `ws` within `timeout`; a subscription the relay closed while it
    counted Redis as down (CLOSED "error:") is opened again."""
    deadline = time.monotonic() + timeout
    while (left := deadline - time.monotonic()) > 0:
        message = ws.recv(left)
        if message is None:
            return False
        if message[0] == "EVENT" and message[2]["id"] == event_id:
            return True
        if message[0] == "CLOSED":
            _subscribe(ws, channel)
    return False


def _publish_and_see(writer: Client, ws: WsClient, channel: str) -> bool:
    event = writer.artifact(channel, title="live")
    assert writer.publish(event)[2] is True
    return _arrives(ws, event["id"], channel, timeout=2)


def _replay_is_refused(client: Client) -> bool:
    raw = orjson.dumps([{"artifact": "current", "limit": 1}])
    header = make_nip98_header(client.secret, url=client.signed_url("/query"), method="POST",
                               body=raw)
    first = client.post("/query", raw, authorization=header)
    again = client.post("/query", raw, authorization=header)
    return first.status_code == 200 and again.status_code == 401


def test_the_relays_follow_a_sentinel_failover(
    dep: Deployment, topology: SentinelSet, relays: tuple[Relay, Relay]
) -> None:
    first, second = relays
    writer = Client(second.url)
    channel = writer.create_channel(name="sentinel")
    ws = WsClient(first.port, [Client(first.url).secret])
    old_master = topology.master
    try:
        # The sentinels refuse a client without their password.
        anonymous = redis.Redis(host=HOST, port=topology.sentinels[0].port, socket_timeout=2)
        with pytest.raises(redis.AuthenticationError):
            anonymous.execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", topology.master_name)
        assert _subscribe(ws, channel)
        assert wait_until(lambda: _publish_and_see(writer, ws, channel), timeout=20, interval=0.5)
        # Everything is on the master: the buckets, the claims, the live sequence numbers.
        assert _replay_is_refused(writer)
        keys = {str(key).split(":")[1] for key in old_master.client().keys("buzz*")}
        assert {"rl", "nip98"} <= keys, keys

        # Writers keep writing while the master dies and the sentinels promote the replica.
        refused: list[object] = []
        accepted: list[str] = []
        stop = threading.Event()

        def keep_writing() -> None:
            client = Client(second.url, writer.secret)
            while not stop.is_set():
                event = client.artifact(channel, title="during the failover")
                answer = client.publish(event)
                (accepted.append(d_of(event)) if answer[2] is True else refused.append(answer))
                time.sleep(0.05)

        thread = threading.Thread(target=keep_writing)
        thread.start()
        try:
            time.sleep(0.5)
            killed_at = time.monotonic()
            old_port = old_master.port
            old_master.kill()
            promoted_after = wait_for_failover(topology, old_port)
            assert topology.master_port() == topology.replica.port
            # Live delivery across the relays resumes on the new master.
            wait_until(lambda: _publish_and_see(writer, ws, channel), timeout=40, interval=0.2)
            delivered_after = time.monotonic() - killed_at
        finally:
            stop.set()
            thread.join(30)
        assert refused == [], refused[:3]
        assert len(accepted) > 10
        sys.stderr.write(
            f"\nsentinel failover: promoted {promoted_after:.1f} s after the master was killed,"
            f" live delivery again after {delivered_after:.1f} s; {len(accepted)} writes"
            f" accepted meanwhile, {len(refused)} refused\n"
        )
        # Every write made meanwhile is stored: a fresh read holds them all.
        plain = writer.query({"artifact": "current", "#h": [channel], "limit": 1000})
        assert plain.status_code == 200
        assert set(accepted) <= {d_of(event) for event in plain.json()}

        # The buckets and claims are on the new master now (each relay's breaker lets it try
        # Redis again a few seconds after a failure).
        new_master = topology.replica.client()
        new_master.delete(*new_master.keys("buzz:nip98:*") or ["none"])
        assert wait_until(lambda: _replay_is_refused(writer) and new_master.keys("buzz:nip98:*"),
                          timeout=20, interval=0.5)
        assert new_master.keys("buzz:rl:*")
    finally:
        ws.close()
