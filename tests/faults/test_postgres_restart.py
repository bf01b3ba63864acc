"""PostgreSQL down for a minute under a serving relay: 503 JSON while it is down, and the outage
ends when the database returns (PROTOCOL.md sections 3 and 9): the first 200 of every path within
2 s of PostgreSQL accepting connections, without restarting the relay.

One outage for every path: it costs its length in every CI run (twice, one per PostgreSQL).
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx
import psycopg
from websockets.exceptions import ConnectionClosed

from tests.faults.clients import Client, WsClient
from tests.faults.deployment import Deployment, Relay

# Long enough for psycopg_pool's doubling backoff (1, 2, 4 ... 32 s) to pass the bound many
# times over: uncapped, its attempt after a 60 s outage came up to 30 s after the return.
OUTAGE_SECONDS = 60
# The bound: from PostgreSQL accepting connections to each path's first 200.
RECOVERY_BOUND_SECONDS = 2.0
NIP11 = {"Accept": "application/nostr+json"}


@dataclass
class Probe:
    """Asks one path again and again, one request in flight at a time, from the moment the
    database stopped: `recovered_at` is when its first success arrived."""

    name: str
    attempt: Callable[[], bool]
    stop: threading.Event
    recovered_at: float | None = None
    failures: list[str] = field(default_factory=list)

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                succeeded = self.attempt()
            except (httpx.HTTPError, ConnectionClosed, AssertionError) as exc:
                self.failures.append(f"{type(exc).__name__}: {exc}")
                succeeded = False
            if succeeded:
                self.recovered_at = time.monotonic()
                return
            time.sleep(0.1)


def _http_probe(response: Callable[[], httpx.Response], failures: list[str]) -> bool:
    answer = response()
    if answer.status_code == 200:
        return True
    # Down is a 503 with a JSON reason, never a 500 or a traceback.
    assert answer.status_code == 503, (answer.status_code, answer.text)
    failures.append(answer.json()["error"])
    return False


def _probes(relay: Relay, client: Client, channel: str, stop: threading.Event) -> list[Probe]:
    http = httpx.Client(timeout=20)
    probes: list[Probe] = []

    def probe(name: str, attempt: Callable[[list[str]], bool]) -> None:
        failures: list[str] = []
        created = Probe(name, lambda: attempt(failures), stop, failures=failures)
        probes.append(created)

    probe("NIP-11", lambda failures: _http_probe(
        lambda: http.get(f"{relay.url}/info", headers=NIP11), failures))
    probe("/query", lambda failures: _http_probe(
        lambda: client.query({"artifact": "current", "#h": [channel]}), failures))

    probe("/event", lambda failures: _http_probe(
        lambda: client.post("/event", client.artifact(channel)), failures))
    ws = WsClient(relay.port, [client.secret])
    requests = iter(range(10**6))

    def req(failures: list[str]) -> bool:
        answers = ws.req(f"probe-{next(requests)}", {"kinds": [45010], "#h": [channel]})
        if answers[-1][0] == "EOSE":
            return True
        failures.append(str(answers[-1]))
        return False

    probe("WebSocket REQ", req)
    return probes


def _start_postgres(dep: Deployment) -> float:
    """Start PostgreSQL again; when it first accepted a connection (polled while it starts, not
    after `pg_ctl -w` returns, which may be later)."""
    accepted: list[float] = []

    def poll() -> None:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            try:
                with dep.connect(connect_timeout=1):
                    accepted.append(time.monotonic())
                    return
            except psycopg.OperationalError:
                time.sleep(0.02)

    poller = threading.Thread(target=poll)
    poller.start()
    dep.start_postgres()
    poller.join()
    assert accepted, "PostgreSQL did not come back"
    return accepted[0]


def test_an_outage_ends_when_postgres_returns(dep: Deployment) -> None:
    relay = dep.start_relay()
    writer = Client(relay.url)
    channel = writer.create_channel(name="outage")
    assert httpx.get(f"{relay.url}/info", headers=NIP11).status_code == 200
    stop = threading.Event()
    probes = _probes(relay, writer, channel, stop)
    dep.stop_postgres()
    threads = [threading.Thread(target=probe.run, name=probe.name) for probe in probes]
    try:
        for path in ("/info", "/readyz"):
            response = httpx.get(f"{relay.url}{path}", headers=NIP11, timeout=20)
            assert response.status_code == 503, (path, response.text)
            assert response.json()["error"] in ("database_unavailable", "not_ready")
            assert response.headers["Access-Control-Allow-Origin"] == "*"
        assert httpx.get(f"{relay.url}/healthz").status_code == 200
        # Every path keeps asking through the outage, as clients do: the pools keep meeting a
        # database that refuses them, which is what grew psycopg_pool's backoff.
        for thread in threads:
            thread.start()
        time.sleep(OUTAGE_SECONDS)
        assert all(probe.recovered_at is None for probe in probes), "served while down"
    finally:
        ready_at = _start_postgres(dep)
    for thread in threads:
        thread.join(timeout=30)
    stop.set()
    late = {
        probe.name: None if probe.recovered_at is None else round(probe.recovered_at - ready_at, 2)
        for probe in probes
    }
    sys.stderr.write(
        f"\npostgres down {OUTAGE_SECONDS} s: first success after it accepted connections: "
        + ", ".join(f"{name} {seconds} s" for name, seconds in late.items()) + "\n"
    )
    # Every path was refused while the database was down (503 JSON or a CLOSED), then served.
    assert all(probe.failures for probe in probes), late
    assert all(
        seconds is not None and seconds < RECOVERY_BOUND_SECONDS for seconds in late.values()
    ), late
    assert httpx.get(f"{relay.url}/readyz").status_code == 200
    assert relay.process.poll() is None
