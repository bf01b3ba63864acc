"""deploy/nginx/buzz.conf in front of `buzz-admin serve`, both real (tests/deploy/nginx.py):
over TLS (a certificate made here) an incremental round with NIP-98 and NIP-11 answer through
the proxy, a WebSocket upgrades and gets its AUTH, OK and EOSE, plain HTTP is redirected, and
the relay builds its own
URLs (the NIP-98 `u` tag, the NIP-42 relay URL) from X-Forwarded-Proto and -Host. The client's
address reaches the relay through X-Forwarded-For only when the proxy is in
RELAY_TRUSTED_PROXIES, and a forged header changes nothing: seen through the per-address rate
limit, which counts each address the relay believes in a bucket of its own.
"""

from __future__ import annotations

import os
import random
import socket
import ssl
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import redis

from artifacts.models import Community
from nostr.nip42 import make_auth_event
from relaycore.ratelimit import KEY_PREFIX as RATE_LIMIT_PREFIX
from tests.deploy.nginx import (
    PUBLIC_HOST,
    NginxProcess,
    PublicEndpoint,
    Tls,
    in_front_of,
)
from tests.faults.clients import Collection
from tests.relay_server import RelayProcess, start_relay

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

# The per-address bucket of the relay: BURST requests, then 429 (it refills very slowly).
BURST = 4


@dataclass
class Stack:
    relay: RelayProcess
    proxy: NginxProcess
    tls: Tls

    @property
    def public(self) -> PublicEndpoint:
        return PublicEndpoint(self.tls, self.proxy.https_port)


def _addresses() -> Iterator[str]:
    """Fresh loopback addresses (the rate limit's buckets outlive a test in Redis)."""
    prefix = f"127.{random.randrange(1, 255)}.{random.randrange(1, 255)}"
    for host in range(2, 250):
        yield f"{prefix}.{host}"


@pytest.fixture
def public_community() -> Community:
    return Community.objects.create(host=PUBLIC_HOST, name="Public", artifacts_enabled=True)


def _stack(tmp_path: Path, *, trusted: bool) -> Iterator[Stack]:
    # The buckets outlive a relay in Redis (this suite's database): the untrusted relay's
    # only address, the proxy's, must start full.
    with redis.Redis.from_url(os.environ["REDIS_URL"]) as client:
        stale = list(client.scan_iter(f"{RATE_LIMIT_PREFIX}*"))
        if stale:
            client.delete(*stale)
    relay = start_relay({
        "RELAY_TRUSTED_PROXIES": "127.0.0.1" if trusted else None,
        "RELAY_RATE_LIMIT_ADDRESS_RATE": "0.001",
        "RELAY_RATE_LIMIT_ADDRESS_BURST": str(BURST),
    })
    try:
        with in_front_of(relay, tmp_path) as (proxy, tls):
            yield Stack(relay, proxy, tls)
    finally:
        relay.log_path.unlink()


@pytest.fixture
def trusted(public_community: Community, tmp_path: Path) -> Iterator[Stack]:
    yield from _stack(tmp_path, trusted=True)


@pytest.fixture
def untrusted(public_community: Community, tmp_path: Path) -> Iterator[Stack]:
    yield from _stack(tmp_path, trusted=False)


def _unsigned_queries(http: httpx.Client, count: int, **headers: str) -> list[int]:
    """Statuses of `count` unsigned POST /query: 401 until the address's bucket is empty, then
    429 (the address limit comes before any signature)."""
    return [
        http.post("/query", content=b"[{}]", headers={"Content-Type": "application/json",
                                                       **headers}).status_code
        for _ in range(count)
    ]


def _recv(ws: Any) -> list[Any]:
    message: list[Any] = orjson.loads(ws.recv(timeout=10))
    return message


def test_through_a_trusted_proxy(trusted: Stack) -> None:
    addresses = _addresses()

    # NIP-11 and an incremental round, NIP-98 signed over https://relay.example.com:<port>:
    # the relay rebuilds that URL from X-Forwarded-Proto and X-Forwarded-Host.
    with trusted.public.http(next(addresses)) as http:
        info = http.get("/", headers={"Accept": "application/nostr+json"})
        assert info.status_code == 200, (info.text, trusted.proxy.log())
        assert info.json()["name"] == "Public"
        assert "artifacts" in info.json()
        assert http.get("/metrics").status_code == 404  # not through the proxy
    reader = Collection(trusted.public.signed_client(next(addresses)), keep_pages=True)
    reader.round()
    assert reader.pages[0]["reset"] is True and reader.pages[-1]["more"] is False
    reader.round()  # a continuation round: the token from the proxied round is good
    assert reader.resets == 1

    # The WebSocket through the proxy: upgrade, AUTH with the wss:// URL the client used.
    secret = reader.client.secret
    with trusted.public.websocket(next(addresses)) as ws:
        challenge = _recv(ws)
        assert challenge[0] == "AUTH"
        event = make_auth_event(secret, challenge=challenge[1],
                                relay_url=f"wss://{trusted.public.netloc}/")
        ws.send(orjson.dumps(["AUTH", event]).decode())
        assert _recv(ws) == ["OK", event["id"], True, ""]
        ws.send('["REQ", "s", {"kinds": [45010]}]')
        assert _recv(ws) == ["EOSE", "s"]

    # Each client address has its own bucket: the relay sees the address nginx saw.
    first, second = next(addresses), next(addresses)
    with trusted.public.http(first) as http:
        assert _unsigned_queries(http, BURST + 1) == [401] * BURST + [429]
        # Claiming to be someone else does not refill it: nginx appends the real address.
        assert _unsigned_queries(http, 1, **{"X-Forwarded-For": second}) == [429]
    with trusted.public.http(second) as http:
        assert _unsigned_queries(http, 1) == [401]

    # Plain HTTP only redirects; the certificate is checked against the public host.
    response = httpx.get(f"http://127.0.0.1:{trusted.proxy.http_port}/info",
                         headers={"Host": PUBLIC_HOST})
    assert response.status_code == 301
    assert response.headers["Location"] == f"https://{PUBLIC_HOST}/info"
    context = trusted.tls.client_context()
    with (socket.create_connection(("127.0.0.1", trusted.proxy.https_port), timeout=5) as sock,
          pytest.raises(ssl.SSLCertVerificationError)):
        context.wrap_socket(sock, server_hostname="other.example.com")


def test_through_an_untrusted_proxy(untrusted: Stack) -> None:
    addresses = _addresses()
    # The relay does not believe X-Forwarded-Proto: to it the request came over http, so a
    # NIP-98 header signed for https://... names another URL.
    response = untrusted.public.signed_client(next(addresses)).query({"kinds": [45010]})
    assert response.status_code == 401, response.text
    assert "u tag does not match the request URL" in response.json()["message"]
    # Forwarded headers are ignored: every client is the proxy's address, in one bucket (the
    # request above took one token of it).
    first, second = next(addresses), next(addresses)
    with untrusted.public.http(first) as http:
        assert _unsigned_queries(http, BURST) == [401] * (BURST - 1) + [429]
    with untrusted.public.http(second) as http:
        assert _unsigned_queries(http, 1) == [429]
