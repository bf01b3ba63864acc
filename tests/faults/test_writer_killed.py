"""A writer killed mid-transaction leaves nothing behind: no partial stamps, no orphan heads.

The relay process is SIGKILLed while its write transaction is provably open (its backend waits
on a head row this test holds locked, after the event row was already inserted); then again at
random moments under concurrent write traffic. Afterwards the database holds only whole writes.
"""

from __future__ import annotations

import contextlib
import random
import threading
import time
from typing import Any

import httpx

from tests.faults.clients import Client, d_of
from tests.faults.deployment import Deployment
from tests.faults.waits import wait_until

# Every head names a stored revision and event of the same artifact and channel; every
# artifact revision has its event row; every stored 45010 event was accepted as a revision.
# A half-applied write breaks one of these.
INVARIANTS = {
    "head without its revision": """
        SELECT h.artifact_id FROM artifact_heads h
        LEFT JOIN artifact_revisions r
          ON r.community_id = h.community_id AND r.event_id = h.event_id
         AND r.artifact_id = h.artifact_id AND r.channel_id = h.channel_id
        WHERE r.id IS NULL""",
    "head without its event": """
        SELECT h.artifact_id FROM artifact_heads h
        LEFT JOIN events e ON e.community_id = h.community_id AND e.event_id = h.event_id
        WHERE e.id IS NULL""",
    "revision without its event": """
        SELECT r.event_id FROM artifact_revisions r
        LEFT JOIN events e ON e.community_id = r.community_id AND e.event_id = r.event_id
        WHERE e.id IS NULL""",
    "45010 event that is no revision": """
        SELECT e.event_id FROM events e
        LEFT JOIN artifact_revisions r
          ON r.community_id = e.community_id AND r.event_id = e.event_id
        WHERE e.kind = 45010 AND r.id IS NULL""",
    "revision with no head": """
        SELECT r.artifact_id FROM artifact_revisions r
        LEFT JOIN artifact_heads h
          ON h.community_id = r.community_id AND h.artifact_id = r.artifact_id
        WHERE h.id IS NULL""",
    "head stamped before its revision": """
        SELECT h.artifact_id FROM artifact_heads h
        JOIN artifact_revisions r ON r.community_id = h.community_id AND r.event_id = h.event_id
        WHERE h.modified_at < r.modified_at""",
}


def assert_whole(dep: Deployment) -> None:
    broken = {name: rows for name, query in INVARIANTS.items() if (rows := dep.sql(query))}
    assert not broken, broken


def _head(dep: Deployment, d: str) -> tuple[Any, ...]:
    return dep.sql(
        "SELECT event_id, modified_at, channel_id, deleted FROM artifact_heads"
        " WHERE artifact_id = %s", (d,),
    )[0]


def test_writer_killed_while_its_transaction_is_open(dep: Deployment) -> None:
    relay = dep.start_relay()
    alice = Client(relay.url)
    channel = alice.create_channel(name="kill")
    created = alice.artifact(channel, title="v1")
    assert alice.publish(created)[2] is True
    d = d_of(created)
    before = _head(dep, d)
    update = alice.artifact(channel, op="update", d=d, prev=created["id"], title="v2")

    with dep.connect(autocommit=False) as holder:
        holder.execute("SELECT 1 FROM artifact_heads WHERE artifact_id = %s FOR UPDATE", (d,))
        sender = threading.Thread(target=_post_quietly, args=(alice, update), daemon=True)
        sender.start()
        # The writer's backend is inside its transaction, blocked on our row lock.
        wait_until(lambda: dep.sql(
            "SELECT pid FROM pg_stat_activity WHERE application_name LIKE 'buzzrelay/%%'"
            " AND wait_event_type = 'Lock' AND xact_start IS NOT NULL"
        ), timeout=2.5, interval=0.05)
        relay.kill()
        holder.rollback()
    sender.join(10)

    # The backend of the killed writer finds its client gone and rolls back.
    wait_until(lambda: not dep.sql(
        "SELECT pid FROM pg_stat_activity WHERE application_name LIKE 'buzzrelay/%%'"
        " AND xact_start IS NOT NULL"
    ), timeout=20)
    assert _head(dep, d) == before
    assert not dep.sql("SELECT 1 FROM events WHERE event_id = %s", (update["id"],))
    assert not dep.sql("SELECT 1 FROM artifact_revisions WHERE event_id = %s", (update["id"],))
    assert_whole(dep)
    # The same event, sent again to a new instance, is a fresh write, not a duplicate.
    again = Client(dep.start_relay().url, alice.secret).publish(update)
    assert again[2] is True and not again[3].startswith("duplicate"), again
    assert _head(dep, d)[0] == update["id"]
    assert _head(dep, d)[1] > before[1]


def _post_quietly(client: Client, event: dict[str, Any]) -> None:
    # The relay dies under this request: that is the point.
    with contextlib.suppress(httpx.HTTPError):
        client.post("/event", event)


def test_writers_killed_at_random_under_load_leave_whole_writes(dep: Deployment) -> None:
    rng = random.Random(9)
    relay = dep.start_relay()
    writers = [Client(relay.url) for _ in range(4)]
    channel = writers[0].create_channel(name="load")
    heads: dict[str, str] = {}
    lock = threading.Lock()
    for _ in range(3):
        stop = threading.Event()
        threads = [
            threading.Thread(target=_write_loop, args=(w, channel, heads, lock, stop), daemon=True)
            for w in writers
        ]
        for thread in threads:
            thread.start()
        time.sleep(rng.uniform(0.5, 1.5))
        relay.kill()
        stop.set()
        for thread in threads:
            thread.join(20)
        relay = dep.start_relay()
        for writer in writers:
            writer.base_url = relay.url
        wait_until(lambda: not dep.sql(
            "SELECT 1 FROM pg_stat_activity WHERE application_name LIKE 'buzzrelay/%%'"
            " AND state LIKE 'idle in transaction%%'"
        ), timeout=20)
        assert_whole(dep)
    assert dep.sql("SELECT count(*) FROM artifact_revisions")[0][0] > 10


def _write_loop(client: Client, channel: str, heads: dict[str, str], lock: threading.Lock,
                stop: threading.Event) -> None:
    """Create and update artifacts until stopped or the relay dies under us."""
    while not stop.is_set():
        with lock:
            known = list(heads.items())
        try:
            if known and random.random() < 0.6:
                d, prev = random.choice(known)
                event = client.artifact(channel, op="update", d=d, prev=prev, title="u")
            else:
                event = client.artifact(channel, title="c")
            answer = client.post("/event", event).json()
        except (httpx.HTTPError, ValueError):
            return
        if isinstance(answer, list) and answer[2] is True:
            with lock:
                heads[d_of(event)] = event["id"]
