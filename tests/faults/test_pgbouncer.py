"""The serving relay behind Debian's PgBouncer (issue 18): transaction pooling and session pooling.

Under transaction pooling a client's statements share server connections with every other
client's, so nothing of a session follows it: prepared statements (off: DATABASE_POOLER=
transaction; PgBouncer 1.18 does not track them), session settings and session advisory locks
(the readiness evaluation and the schema's lock run on DATABASE_DIRECT_URL). PgBouncer's pool
here is smaller than the relay's pools, so server connections really are shared.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import psutil
import psycopg
import pytest

from buzzrelay.admin_commands._pg import MIGRATION_LOCK_KEY
from tests.faults.clients import Client, Collection, WsClient, d_of, fresh_full_read
from tests.faults.deployment import ROOT, Deployment, Relay
from tests.faults.engines import PgBouncer, start_pgbouncer
from tests.faults.waits import wait_until

pytestmark = pytest.mark.slow

SERVER_CONNECTIONS = 3


@pytest.fixture(scope="module")
def transaction_bouncer(dep: Deployment) -> Iterator[PgBouncer]:
    bouncer = start_pgbouncer(dep.root, postgres_port=dep.postgres.port,
                              pool_mode="transaction", pool_size=SERVER_CONNECTIONS)
    yield bouncer
    bouncer.stop()


def _pooled_env(bouncer: PgBouncer, dep: Deployment) -> dict[str, str | None]:
    return {
        "DATABASE_URL": bouncer.url(dep.database),
        "DATABASE_POOLER": "transaction",
        "DATABASE_DIRECT_URL": dep.database_url,
        # More client connections than PgBouncer has server connections.
        "DATABASE_POOL_SIZE": "8",
    }


@pytest.fixture(scope="module")
def pooled_relay(dep: Deployment, transaction_bouncer: PgBouncer) -> Iterator[Relay]:
    relay = dep.start_relay(env=_pooled_env(transaction_bouncer, dep))
    yield relay
    relay.stop()


def _item_4_passes(relay: Relay) -> bool:
    metrics = Client(relay.url).get("/metrics").text
    lines = [line for line in metrics.splitlines()
             if line.startswith("buzz_readiness_check{") and 'item="4"' in line]
    return bool(lines) and all(line.endswith(" 1.0") for line in lines)


def _writes_and_rounds(relay: Relay, *, writers: int, each: int) -> dict[str, Any]:
    """`writers` threads, each writing `each` artifacts and running a round after each write;
    then, alone, writes each followed at once by a round, which must include it (the fence,
    PROTOCOL.md section 5: with no other transaction open, nothing holds T back). Collects
    what was refused."""
    owner = Client(relay.url)
    channel = owner.create_channel(name="pooled")
    problems: list[str] = []
    written: list[str] = []
    collections: list[Collection] = []
    lock = threading.Lock()

    def work() -> None:
        client = Client(relay.url, owner.secret)  # one HTTP connection per thread
        collection = Collection(client, {"#h": [channel]})
        with lock:
            collections.append(collection)
        for _ in range(each):
            event = client.artifact(channel, title="through the pooler")
            answer = client.publish(event)
            with lock:
                if answer[2] is True:
                    written.append(d_of(event))
                else:
                    problems.append(f"write refused: {answer}")
            try:
                collection.round()
            except AssertionError as exc:
                with lock:
                    problems.append(f"round failed: {exc}")

    started = time.monotonic()
    threads = [threading.Thread(target=work) for _ in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    seconds = time.monotonic() - started
    # Concurrent writers hold each other's rounds' fence back; once they are done, a round of
    # each collection holds everything.
    for collection in collections:
        collection.catch_up()
        missing = set(written) - set(collection.items)
        if missing:
            problems.append(f"{len(missing)} writes missing after the writers finished")
    fence = Collection(owner, {"#h": [channel]})
    fence.catch_up()
    for _ in range(3):
        event = owner.artifact(channel, title="read your writes")
        assert owner.publish(event)[2] is True
        written.append(d_of(event))
        fence.catch_up()
        if d_of(event) not in fence.items:
            problems.append(f"a round right after a write missed it: {d_of(event)}")
    return {"channel": channel, "owner": owner, "problems": problems, "written": written,
            "seconds": seconds}


def test_rounds_writes_and_the_fence_through_transaction_pooling(
    dep: Deployment, pooled_relay: Relay, transaction_bouncer: PgBouncer
) -> None:
    outcome = _writes_and_rounds(pooled_relay, writers=4, each=6)
    assert outcome["problems"] == [], outcome["problems"]
    assert len(outcome["written"]) == 24 + 3
    # A fresh full read holds every write, and nothing else.
    full = fresh_full_read(outcome["owner"], {"#h": [outcome["channel"]]})
    assert set(full) == set(outcome["written"])
    # WebSocket replay (REQ up to EOSE) reads through the pooler too.
    ws = WsClient(pooled_relay.port, [outcome["owner"].secret])
    try:
        replayed = ws.req("replay", {"kinds": [45010], "#h": [outcome["channel"]], "limit": 500})
    finally:
        ws.close()
    assert replayed[-1][0] == "EOSE", replayed[-1]
    assert {d_of(m[2]) for m in replayed if m[0] == "EVENT"} == set(outcome["written"])
    sys.stderr.write(
        f"\ntransaction pooling: 24 writes and 24 rounds in {outcome['seconds']:.1f} s,"
        f" {len(outcome['problems'])} refused\n"
    )
    # Readiness item 4: the server connections carry the relay's application_name (PgBouncer
    # sets each client's on the server connection it lends), and the evaluation itself runs
    # on a direct session.
    assert wait_until(lambda: _item_4_passes(pooled_relay), timeout=30, interval=1)
    names = {row[0] for row in dep.sql(
        "SELECT application_name FROM pg_stat_activity WHERE datname = current_database()"
        " AND application_name LIKE 'buzzrelay/%%'")}
    assert names and all("stamps=1 key=" in name for name in names), names


def test_no_session_setting_is_left_on_a_shared_server_connection(
    dep: Deployment, pooled_relay: Relay, transaction_bouncer: PgBouncer
) -> None:
    # Let the relay evaluate readiness (the fleet refresher, NIP-11, rounds) a few times.
    Collection(Client(pooled_relay.url)).round()
    Client(pooled_relay.url).get("/metrics")
    time.sleep(2)
    # One transaction on each of PgBouncer's server connections at once: each sees the server's
    # defaults, not a timeout some relay session set and left behind.
    clients = [psycopg.connect(transaction_bouncer.url(dep.database), prepare_threshold=None)
               for _ in range(SERVER_CONNECTIONS)]
    try:
        seen = []
        for conn in clients:
            row = conn.execute(
                "SELECT current_setting('statement_timeout'), current_setting('lock_timeout'),"
                " pg_backend_pid()").fetchone()
            assert row is not None
            seen.append(row)
        assert len({row[2] for row in seen}) == SERVER_CONNECTIONS  # all of them
        assert {(row[0], row[1]) for row in seen} == {("0", "0")}, seen
    finally:
        for conn in clients:
            conn.close()


def _admin(env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "buzzrelay.cli", *args], cwd=ROOT, env=env,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )


def _pgbouncer_ports(bouncer: PgBouncer, postgres_port: int) -> set[int]:
    """The local ports of PgBouncer's server connections to PostgreSQL."""
    return {
        conn.laddr.port for conn in psutil.Process(bouncer.process.pid).net_connections("tcp")
        if conn.raddr and conn.raddr.port == postgres_port
    }


def test_migrate_holds_the_schema_lock_on_the_direct_url_and_refuses_without_one(
    dep: Deployment, transaction_bouncer: PgBouncer
) -> None:
    pooled = _pooled_env(transaction_bouncer, dep)
    without_direct = _admin(dep.env(**{**pooled, "DATABASE_DIRECT_URL": None}), "migrate")
    output, _ = without_direct.communicate(timeout=60)
    assert without_direct.returncode == 2, output
    assert "DATABASE_POOLER=transaction needs DATABASE_DIRECT_URL" in output

    with dep.connect() as holder:
        holder.execute("SELECT pg_advisory_lock(%s)", [MIGRATION_LOCK_KEY])
        migrate = _admin(dep.env(**pooled), "migrate")
        try:
            waiter = wait_until(lambda: dep.sql(
                "SELECT a.application_name, a.client_port FROM pg_locks l"
                " JOIN pg_stat_activity a ON a.pid = l.pid"
                " WHERE l.locktype = 'advisory' AND NOT l.granted"
                " AND l.classid = %s AND l.objid = %s",
                [MIGRATION_LOCK_KEY >> 32, MIGRATION_LOCK_KEY & 0xFFFFFFFF]), timeout=60)
            name, client_port = waiter[0]
            assert name.endswith("migration lock"), name
            # Its own session on PostgreSQL, not one of PgBouncer's server connections.
            assert client_port not in _pgbouncer_ports(transaction_bouncer, dep.postgres.port)
        finally:
            holder.execute("SELECT pg_advisory_unlock(%s)", [MIGRATION_LOCK_KEY])
        output, _ = migrate.communicate(timeout=120)
    assert migrate.returncode == 0, output
    assert "got the migration lock" in output


def test_session_pooling_works_as_a_direct_connection(dep: Deployment) -> None:
    bouncer = start_pgbouncer(dep.root, postgres_port=dep.postgres.port,
                              pool_mode="session", pool_size=20)
    relay = None
    try:
        # Session pooling keeps every client's session: prepared statements stay on.
        env: dict[str, str | None] = {"DATABASE_URL": bouncer.url(dep.database),
                                      "DATABASE_POOLER": "session", "DATABASE_POOL_SIZE": "4"}
        relay = dep.start_relay(env=env)
        outcome = _writes_and_rounds(relay, writers=2, each=4)
        assert outcome["problems"] == [], outcome["problems"]
        full = fresh_full_read(outcome["owner"], {"#h": [outcome["channel"]]})
        assert set(full) == set(outcome["written"]) and len(full) == 8 + 3
        assert wait_until(lambda: _item_4_passes(relay), timeout=30, interval=1)
        migrate = _admin(dep.env(**env), "migrate")
        output, _ = migrate.communicate(timeout=120)
        assert migrate.returncode == 0, output
    finally:
        if relay is not None:
            relay.stop()
        bouncer.stop()
