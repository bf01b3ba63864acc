"""PostgreSQL restarted under a serving relay: 503 JSON while it is down, recovery without
restarting the relay (PROTOCOL.md sections 3 and 9)."""

from __future__ import annotations

import httpx

from tests.faults.deployment import Deployment
from tests.faults.waits import wait_until


def test_postgres_down_is_503_json_and_the_relay_recovers_by_itself(dep: Deployment) -> None:
    relay = dep.start_relay()
    nip11 = {"Accept": "application/nostr+json"}
    assert httpx.get(f"{relay.url}/info", headers=nip11).status_code == 200
    dep.stop_postgres()
    try:
        for path in ("/info", "/readyz"):
            response = httpx.get(f"{relay.url}{path}", headers=nip11, timeout=20)
            assert response.status_code == 503, (path, response.text)
            assert response.json()["error"] in ("database_unavailable", "not_ready")
            assert response.headers["Access-Control-Allow-Origin"] == "*"
        assert httpx.get(f"{relay.url}/healthz").status_code == 200
    finally:
        dep.start_postgres()
    # The pool reconnects on its own backoff (psycopg_pool: 1, 2, 4, 8 s after the first
    # failure), so the first answer after the restart may take up to the pool's checkout
    # timeout (5 s): httpx's default 5 s would race it (it lost once in CI).
    wait_until(
        lambda: httpx.get(f"{relay.url}/info", headers=nip11, timeout=20).status_code == 200
    )
    assert httpx.get(f"{relay.url}/readyz").status_code == 200
    assert relay.process.poll() is None
