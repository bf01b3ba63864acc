"""Work budgets: a read or write that cannot finish in its budget answers 503 `budget_exceeded`
(PROTOCOL.md section 5) with `Retry-After`, holds nothing, and the relay serves on afterwards."""

from __future__ import annotations

import time

import httpx
import pytest

from tests.faults.clients import Client, d_of
from tests.faults.deployment import Deployment


def _assert_budget_exceeded(response: httpx.Response) -> None:
    assert response.status_code == 503, response.text
    assert response.json()["error"] == "budget_exceeded"
    assert int(response.headers["Retry-After"]) >= 1
    assert response.headers["Access-Control-Allow-Origin"] == "*"


def test_write_blocked_past_its_budget_is_503_and_leaves_nothing(dep: Deployment) -> None:
    relay = dep.start_relay()
    alice = Client(relay.url)
    channel = alice.create_channel(name="budgets")
    created = alice.artifact(channel, title="v1")
    assert alice.publish(created)[2] is True
    update = alice.artifact(channel, op="update", d=d_of(created), prev=created["id"])
    with dep.connect(autocommit=False) as holder:
        holder.execute(
            "SELECT 1 FROM artifact_heads WHERE artifact_id = %s FOR UPDATE", (d_of(created),)
        )
        started = time.monotonic()
        response = alice.post("/event", update)
        elapsed = time.monotonic() - started
        holder.rollback()
    _assert_budget_exceeded(response)
    assert elapsed < 8, elapsed  # the 5 s write budget, not the client's patience
    assert not dep.sql("SELECT 1 FROM events WHERE event_id = %s", (update["id"],))
    # Nothing was held: the same write goes through once the blocker is gone.
    assert alice.publish(update)[2] is True


@pytest.mark.parametrize("mode", ["plain", "incremental"])
def test_reads_blocked_past_their_budget_are_503(dep: Deployment, mode: str) -> None:
    relay = dep.start_relay()
    bob = Client(relay.url, timeout=10)
    channel = bob.create_channel(name="reads")
    assert bob.publish(bob.artifact(channel))[2] is True
    filter_: dict[str, object] = {"artifact": "current", "#h": [channel]}
    if mode == "incremental":
        filter_["progress"] = None
    # Readiness is cached for a few seconds per process: let it expire, so the request below
    # does all the work a request can do.
    time.sleep(3)
    with dep.connect(autocommit=False) as holder:
        holder.execute("LOCK TABLE artifact_heads IN ACCESS EXCLUSIVE MODE")
        started = time.monotonic()
        try:
            response = bob.query(filter_)
        finally:
            holder.rollback()
        _assert_budget_exceeded(response)
        assert time.monotonic() - started < 6
    assert bob.query(filter_).status_code == 200
    # No backend of the relay is left waiting or idle in a transaction.
    assert not dep.sql(
        "SELECT 1 FROM pg_stat_activity WHERE application_name LIKE 'buzzrelay/%%'"
        " AND (state LIKE 'idle in transaction%%' OR wait_event_type = 'Lock')"
    )
