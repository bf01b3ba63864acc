"""PROTOCOL.md section 3: the per-client-address limit applies before any signature is verified.

A flood from one address, each request with its own correctly signed NIP-98 header, against a
relay whose address bucket holds 5: on every path (the `/query` fast path, Django's `/query`
view, `/event`), exactly the 5 admitted requests have their header checked
(`buzz_nip98_checks_total` in `/metrics`); the rest are 429 without costing a verification.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest

from tests.factories import make_community, make_key, nip98_header
from tests.relay_server import HOST, RelayProcess, start_relay

pytestmark = pytest.mark.django_db(transaction=True)

BURST = 5
FLOOD = 30


@pytest.fixture(scope="module", params=["front door", "django handler"])
def relay(
    request: pytest.FixtureRequest, django_db_setup: None, django_db_blocker: Any
) -> Iterator[RelayProcess]:
    env = {"RELAY_RATE_LIMIT_ADDRESS_RATE": "0.001", "RELAY_RATE_LIMIT_ADDRESS_BURST": str(BURST)}
    if request.param == "django handler":
        env["RELAY_FRONT_DOOR"] = "false"
    with django_db_blocker.unblock():
        server = start_relay(env)
    yield server
    server.stop()


def _checks(relay: RelayProcess) -> int:
    for line in httpx.get(f"{relay.url}/metrics", timeout=10).text.splitlines():
        if line.startswith("buzz_nip98_checks_total "):
            return int(float(line.split()[1]))
    raise AssertionError("buzz_nip98_checks_total missing from /metrics")


@pytest.mark.parametrize("path", ["/query", "/event"])
def test_a_flood_from_one_address_costs_no_verification_past_the_limit(
    relay: RelayProcess, path: str
) -> None:
    make_community(HOST)
    # A fresh address bucket per case (the buckets are in the suite's Redis): the relay
    # believes no X-Forwarded-For here, so each case sends from a loopback address of its own.
    source = f"127.{random.randrange(1, 255)}.{random.randrange(1, 255)}.{random.randrange(2, 255)}"
    reader = make_key()
    body = (orjson.dumps([{"artifact": "current", "progress": None}]) if path == "/query"
            else b'{"not": "an event"}')

    def send(count: int) -> list[int]:
        statuses = []
        with httpx.Client(transport=httpx.HTTPTransport(local_address=source),
                          timeout=30) as client:
            for _ in range(count):
                header = nip98_header(reader, f"{relay.url}{path}", "POST", body)
                response = client.post(f"{relay.url}{path}", content=body,
                                       headers={"Authorization": header})
                statuses.append(response.status_code)
        return statuses

    before = _checks(relay)
    admitted = send(BURST)
    checked = _checks(relay)
    refused = send(FLOOD - BURST)
    assert 429 not in admitted, admitted
    assert checked - before >= BURST  # each admitted request had its header checked
    assert refused == [429] * (FLOOD - BURST), refused
    assert _checks(relay) == checked  # and not one refused request cost a verification
