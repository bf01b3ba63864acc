"""The chaos run's divergences after a PostgreSQL restart, made deterministic.

The long run (docs/reliability.md section 12) found reader collections that differed from a fresh
full read right after the restart. The cause was the oracle's client, not the relay: a reader's
page failed while the database was down, in the middle of a multi-page round (a full round after
a reset), so its collection held a token that resumes that round; the check then ran one round,
which finished the resumed round under its first page's T, older than the changes acknowledged
since. PROTOCOL.md section 5 ("Resumed rounds") says a client runs one more round after
finishing a resumed round before it counts its collection as current; `Collection.catch_up` now
does. Here the same sequence, step by step: a page applied, PostgreSQL restarted under the next
page, changes acknowledged after the restart, then the catch-up.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.faults.clients import Client, Collection, d_of, fresh_full_read
from tests.faults.deployment import deployment

pytestmark = pytest.mark.slow


def _acknowledged(client: Client, event: dict[str, Any]) -> None:
    """Send until a definite answer (the database may still be coming back)."""
    for _ in range(100):
        try:
            response = client.post("/event", event)
        except httpx.TransportError:
            response = None
        if response is not None and response.status_code == 200:
            assert response.json()[2] is True, response.text
            return
        time.sleep(0.2)
    raise AssertionError("the write was never acknowledged")


def test_a_round_resumed_across_a_postgres_restart_is_followed_by_one_more(
    tmp_path: Path,
) -> None:
    with deployment("resumed") as dep:
        dep.create_community()
        relay = dep.start_relay()
        owner = Client(relay.url)
        channel = owner.create_channel(name="resumed")
        events = [owner.artifact(channel, title=f"a{i}") for i in range(6)]
        for event in events:
            _acknowledged(owner, event)
        # Pages of two: the full round takes three pages.
        collection = Collection(owner, {"#h": [channel], "limit": 2})
        with pytest.raises(AssertionError, match="round did not finish"):
            collection.round(max_pages=1)
        assert len(collection.items) == 2
        delivered, gone = collection.items.values()

        dep.stop_postgres()
        # The next page fails while the database is down: the round stays interrupted.
        with pytest.raises((AssertionError, httpx.TransportError)):
            collection.round()
        dep.start_postgres()

        # Changes acknowledged after the restart, all stamped after the round's T: an update of
        # an artifact the interrupted round delivered, the deletion of the other, a new artifact.
        update = owner.artifact(channel, op="update", d=d_of(delivered), prev=delivered["id"],
                                title="after the restart")
        _acknowledged(owner, update)
        _acknowledged(owner, owner.artifact(channel, op="delete", d=d_of(gone), prev=gone["id"]))
        created = owner.artifact(channel, title="created after the restart")
        _acknowledged(owner, created)

        collection.catch_up(retry_unavailable=True)
        fresh = fresh_full_read(owner, {"#h": [channel]})
        assert fresh[d_of(update)] == update["id"] and d_of(gone) not in fresh
        assert collection.ids() == fresh
