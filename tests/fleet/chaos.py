"""A chaos run with an oracle: a seeded schedule of writes, membership changes, moves and
redactions against three relays behind the tested nginx, readers running rounds and WebSocket
subscribers throughout, and faults injected mid-run. After each fault and at the end every
collection must equal a fresh full read and the oracle's own model of what each reader may read,
built from the acknowledged writes only.

What it covers (issue 36's list): writers (create, update, delete, restore, move, redaction),
grants and removals in private channels, readers continuing rounds over raw HTTP
(tests/faults/clients.Collection) and with buzz-sync (buzzclient.Syncer: its own SQLite file,
incremental view changes, pages fetched ahead), and WebSocket subscribers; the database is a
primary with a synchronous streaming standby, Redis a master and replica under three sentinels
with a password of their own; faults, each schedule all four in a seeded order: kill -9 of one
instance (restarted on its port), a PostgreSQL restart (fast shutdown), a standby promotion (the
primary stopped `immediate`, the standby promoted, a new synchronous standby made on the dead
primary's port), and a SIGKILL of the Redis master (the sentinels promote the replica; the old
master comes back as its replica).

The oracle:
- a write is acknowledged when a relay answered it `OK true`; an answer that is not definite (a
  transport error, a 5xx) is sent again, the same signed event, until one is (`duplicate:` is
  an acknowledgement), so the model never guesses;
- every acknowledged write is kept: the owner's fresh full read equals the model (a missing
  head, or an older one, counts as a lost write);
- every collection converges: after a quiet catch-up round, each reader's collection equals a
  fresh full read with its key, and both equal the model's readable set for that key;
- subscribers converge: a write made after the last check reaches every subscriber live;
- no 5xx to a request in flight only outside the windows the faults document (one sent just
  before a fault, or answered after its window having waited out a timeout, was in flight
  inside it): from a kill until the instance is back and nginx's fail_timeout has passed, from
  PostgreSQL's stop (or the primary's crash) until 5 s after it accepts again (after a
  promotion: until 5 s after its new synchronous standby streams, which its commits wait for);
  a Redis failover documents none.

A reader's collection may be left in the middle of a round by a fault (a page answered 503): its
catch-up then finishes that round and runs one more (PROTOCOL.md section 5, "Resumed rounds"),
as any client must.

`BUZZ_CHAOS_SEED` replays one schedule: a failing run prints its seed and that command.
`bench/chaos.py` runs the long form (more seeds, longer phases) with the same runner.
"""

from __future__ import annotations

import contextlib
import random
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import redis

from buzzclient import RelayInfo, Syncer
from buzzclient.backoff import RetryPolicy
from buzzclient.errors import SyncError
from buzzrelay.embedded import redis_server_binary
from tests.deploy.nginx import (
    PUBLIC_HOST,
    PublicEndpoint,
    SniTransport,
    Tls,
    self_signed_certificate,
    start_nginx,
)
from tests.faults.clients import Collection, d_of, fresh_full_read
from tests.faults.deployment import HOST, Deployment, Relay
from tests.faults.engines import (
    RedisNode,
    _port_open,
    start_sentinel_set,
    wait_for_failover,
)
from tests.faults.replication import Standby, multi_host_url, start_standby
from tests.faults.waits import wait_until
from tests.fleet import test_behind_nginx as nginx_fleet
from tests.fleet.test_behind_nginx import (
    NGINX_FAIL_TIMEOUT,
    RELAY_ENV,
    CountingClient,
    Subscriber,
    _said,
)

RELAYS = 3
# After PostgreSQL accepts connections again, answers may still be 503 for this long (the pools
# reconnect within ~1 s; a page begun before may still fail).
POSTGRES_GRACE_SECONDS = 5.0
# The sentinels' own password (tests/faults/test_redis_sentinel.py: the relays give it to them
# in REDIS_SENTINEL_PASSWORD).
SENTINEL_PASSWORD = "chaos-sentinel"
# Retries of buzz-sync readers: short, the schedule judges convergence after each fault anyway.
SYNC_RETRY = RetryPolicy(base=0.2, cap=2.0, max_attempts=6, connect_attempts=3)


class Answers(nginx_fleet.Answers):
    """Every answer clients got through the proxy, and for each 5xx (or no answer) when its
    request went out, when the answer came and what it said. A 5xx is the fault's when its
    request was in flight at any moment of the fault's window: sent just before the fault
    began (a fast shutdown ends the statement it was running), or sent inside and answered
    after the window's end (it waited out a pool's checkout timeout). A 5xx to a request sent
    and answered outside every window is a divergence."""

    def __init__(self) -> None:
        super().__init__()
        self.server_errors_at: list[tuple[float, float, int, str]] = []
        self.unauthorized_at: list[float] = []

    def record(self, status: int, said: str = "", *, sent_at: float | None = None) -> None:
        super().record(status, said, sent_at=sent_at)
        if status >= 500 or status == 0:
            answered_at = time.monotonic()
            with self.lock:
                self.server_errors_at.append(
                    (answered_at if sent_at is None else sent_at, answered_at, status, said))
        elif status == 401:
            with self.lock:
                self.unauthorized_at.append(time.monotonic())


@dataclass
class Head:
    event: dict[str, Any]
    redacted: bool = False
    acknowledged: str = ""  # the OK's message and how many sends it took

    @property
    def op(self) -> str:
        return next(tag[1] for tag in self.event["tags"] if tag[0] == "op")

    @property
    def channel(self) -> str:
        return next(tag[1] for tag in self.event["tags"] if tag[0] == "h")


@dataclass
class Model:
    """What the acknowledged writes make readable (PROTOCOL.md section 1, "Readable")."""

    owner: str
    open_channels: set[str]
    members: dict[str, set[str]]  # private channel -> active members besides the owner
    heads: dict[str, Head] = field(default_factory=dict)

    def readable(self, pubkey: str) -> dict[str, str]:
        return {
            d: head.event["id"] for d, head in self.heads.items()
            if head.op != "delete" and not head.redacted and (
                head.channel in self.open_channels or pubkey == self.owner
                or pubkey in self.members[head.channel]
            )
        }


@dataclass
class Figures:
    schedules: int = 0
    faults: int = 0
    fault_kinds: Counter[str] = field(default_factory=Counter)
    writes_acknowledged: int = 0
    writes_lost: int = 0
    collections_checked: int = 0
    divergences: int = 0
    resends: int = 0
    rounds: int = 0
    largest_collection: int = 0
    # 401s answered while an instance was being killed: nginx passes a request the dead instance
    # had taken (its NIP-98 event already claimed) to the next one (`proxy_next_upstream ...
    # non_idempotent`), which refuses the replayed header; the client signs anew and retries.
    unauthorized_in_kills: int = 0
    answers: Counter[int] = field(default_factory=Counter)
    notes: list[str] = field(default_factory=list)

    def line(self) -> str:
        return (f"chaos: {self.schedules} schedules, {self.faults} faults injected"
                f" {dict(sorted(self.fault_kinds.items()))},"
                f" {self.writes_acknowledged} writes acknowledged ({self.resends} resent after"
                f" an answer that was not definite), {self.writes_lost} writes lost,"
                f" {self.rounds} reader rounds, {self.collections_checked} collections checked"
                f" (largest {self.largest_collection}),"
                f" {self.divergences} divergences; answers {dict(sorted(self.answers.items()))}"
                f" ({self.unauthorized_in_kills} of the 401s during a kill)")


class Fleet:
    """Three relays behind nginx on one fault deployment, for every schedule of a run: the
    database a primary with a synchronous streaming standby (the relays' DATABASE_URL names
    both, libpq's `target_session_attrs=read-write` finds the primary), Redis a master and a
    replica under three sentinels with a password of their own."""

    def __init__(self, dep: Deployment, folder: Path, stack: contextlib.ExitStack) -> None:
        self.dep = dep
        self.sentinels = start_sentinel_set(dep.root, sentinels=3, password=SENTINEL_PASSWORD)
        stack.callback(self.sentinels.stop)
        self.promotions = 0
        self.skipped: list[str] = []  # faults the fleet could not inject, and why
        self.standby: Standby = start_standby(dep, "standby-0", synchronous=True)
        stack.callback(lambda: self.standby.stop())
        self.env = {
            **RELAY_ENV,
            # Fixed for the whole run: each promotion puts the next standby on the dead
            # primary's port, so these two ports always hold the primary and its standby.
            "DATABASE_URL": multi_host_url(dep, self.standby),
            "REDIS_URL": self.sentinels.url(0),
            "REDIS_SENTINELS": self.sentinels.addresses,
            "REDIS_SENTINEL_PASSWORD": SENTINEL_PASSWORD,
        }
        self.relays = [dep.start_relay(env=self.env) for _ in range(RELAYS)]
        tls = self_signed_certificate(folder)
        proxy = start_nginx(folder, upstreams=[relay.port for relay in self.relays], tls=tls)
        stack.callback(proxy.stop)
        self.proxy = proxy
        self.public = PublicEndpoint(tls, proxy.https_port)
        self.folder = folder

    def kill_one(self, rng: random.Random) -> tuple[float, float]:
        """kill -9 of a seeded instance, restarted on its port: the window it documents."""
        index = rng.randrange(len(self.relays))
        started = time.monotonic()
        relay = self.relays[index]
        relay.kill()
        self.relays[index] = self.dep.start_relay(port=relay.port, env=self.env)
        wait_until(lambda: _ready(self.relays[index]), timeout=60)
        time.sleep(NGINX_FAIL_TIMEOUT + 1)  # nginx takes it back after fail_timeout
        return started, time.monotonic()

    def restart_postgres(self, rng: random.Random) -> tuple[float, float]:
        """Fast shutdown of the primary, 1-4 s down, started again."""
        started = time.monotonic()
        self.dep.stop_postgres()
        time.sleep(rng.uniform(1, 4))
        self.dep.start_postgres()
        return started, time.monotonic() + POSTGRES_GRACE_SECONDS

    def promote_standby(self, rng: random.Random) -> tuple[float, float]:
        """The primary crashes (immediate stop) and its synchronous standby is promoted: every
        acknowledged write was flushed there first, so none may be lost. A new synchronous
        standby of the new primary then takes the dead primary's port, for the next one."""
        started = time.monotonic()
        dead = self.dep.postgres
        dead.stop("immediate")
        self.standby.promote()
        self.dep.postgres = self.standby.server
        wait_until(lambda: not self.dep.sql("SELECT pg_is_in_recovery()")[0][0], timeout=60)
        self.promotions += 1
        self.standby = start_standby(self.dep, f"standby-{self.promotions}", synchronous=True,
                                     port=dead.port)
        # The window ends after the new standby streams, not at the promotion: the promoted
        # server carries the old primary's synchronous_standby_names (pg_basebackup copied its
        # postgresql.auto.conf), so its commits wait for a synchronous standby until one is
        # attached, and a write that waited past the relay's deadline was answered 503 inside
        # the fault (seen once in CI when the base backup was slow).
        return started, time.monotonic() + POSTGRES_GRACE_SECONDS

    def kill_redis_master(self, rng: random.Random) -> tuple[float, float]:
        """SIGKILL of the Redis master: the sentinels promote its replica, and the old master
        comes back as the new one's replica (for the next failover). Redis is on no answer's
        path (PROTOCOL.md section 5): the window is empty, a 5xx here is a divergence. Skipped
        (and counted) when the replica is not in sync first: the sentinels would have nothing
        to promote."""
        topology = self.sentinels
        try:
            wait_until(lambda: _linked(topology.replica), timeout=60, interval=0.5)
        except AssertionError:
            self.skipped.append("kill_redis_master: the replica was not in sync")
            now = time.monotonic()
            return now, now
        old = topology.master
        old.kill()
        wait_for_failover(topology, old.port, timeout=60)
        topology.master, topology.replica = topology.replica, _restart_as_replica(
            old, topology.folder, master_port=topology.replica.port)
        now = time.monotonic()
        return now, now

    def faults(self) -> list[Any]:
        return [self.kill_one, self.restart_postgres, self.promote_standby,
                self.kill_redis_master]


def _restart_as_replica(node: RedisNode, folder: Path, *, master_port: int) -> RedisNode:
    """A killed Redis node started again on its port, replicating `master_port` (the sentinels
    would reconfigure it too; named here so that it is a replica from its first second)."""
    node_dir = folder / f"node-{node.port}-{time.monotonic_ns()}"
    node_dir.mkdir()
    process = subprocess.Popen(
        [redis_server_binary(), "--port", str(node.port), "--bind", HOST, "--save", "",
         "--appendonly", "no", "--daemonize", "no", "--loglevel", "warning",
         "--dir", str(node_dir), "--replicaof", HOST, str(master_port)],
        stdout=(node_dir / "redis.log").open("ab"), stderr=subprocess.STDOUT,
    )
    wait_until(lambda: _port_open(node.port), timeout=30)
    # In sync later: the next kill waits for it (`_linked`).
    return RedisNode(process, node.port)


def _linked(node: RedisNode) -> bool:
    try:
        return node.client().info("replication").get("master_link_status") == "up"
    except redis.RedisError:
        return False


class CountingTransport(SniTransport):
    """buzz-sync's transport through the proxy: the public name in the URL, SNI and Host, the
    connection to loopback, every answer counted with the schedule's."""

    def __init__(self, tls: Tls, answers: Answers) -> None:
        super().__init__(tls)
        self.answers = answers

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        request.url = request.url.copy_with(host="127.0.0.1")
        sent_at = time.monotonic()
        try:
            response = super().handle_request(request)
        except httpx.TransportError as exc:
            self.answers.record(0, repr(exc), sent_at=sent_at)
            raise
        self.answers.record(response.status_code, _said(response), sent_at=sent_at)
        return response


class HttpReader:
    """A reader running rounds over raw HTTP (tests/faults/clients.Collection)."""

    kind = "http"

    def __init__(self, client: CountingClient, filter_: dict[str, Any]) -> None:
        self.client = client
        self.collection = Collection(client, dict(filter_))

    def round(self) -> None:
        self.collection.round()

    def catch_up(self) -> None:
        self.collection.catch_up()

    def ids(self) -> dict[str, str]:
        return self.collection.ids()


class SyncReader:
    """A reader that is buzz-sync (buzzclient.Syncer, its own SQLite file) through the proxy:
    incremental view changes on, pages fetched ahead, 503s retried with its own backoff."""

    kind = "buzz-sync"

    def __init__(self, client: CountingClient, channels: list[str], public: PublicEndpoint,
                 answers: Answers, folder: Path) -> None:
        self.client = client
        http = httpx.Client(transport=CountingTransport(public.tls, answers), timeout=15)
        self.syncer = Syncer(
            relay_url=f"https://{PUBLIC_HOST}:{public.port}", secret_hex=client.secret,
            db=folder / f"buzz-sync-{client.pubkey[:16]}.sqlite", channels=channels,
            http_client=http, retry=SYNC_RETRY)
        self.info: RelayInfo | None = None

    def _info(self) -> RelayInfo:
        if self.info is None:
            self.info = self.syncer.relay_info()
        return self.info

    def round(self) -> None:
        self.syncer.run_round(info=self._info())

    def catch_up(self) -> None:
        # A round that finished one an interrupted page left open keeps that round's T:
        # one more round, begun now (PROTOCOL.md section 5, "Resumed rounds").
        if self.syncer.run_round(info=self._info()).resumed:
            self.syncer.run_round(info=self._info())

    def ids(self) -> dict[str, str]:
        return self.syncer.heads()

    def close(self) -> None:
        self.syncer.close()


Reader = HttpReader | SyncReader
# What a reader's round may raise during a fault window: judged by the windows, not here.
ROUND_FAILURES = (AssertionError, httpx.TransportError, SyncError)


def _ready(relay: Relay) -> bool:
    try:
        return httpx.get(f"{relay.url}/readyz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


class Schedule:
    """One seeded schedule on the fleet: its own channels, readers and subscribers."""

    def __init__(self, fleet: Fleet, seed: int, figures: Figures, *, readers: int = 3,
                 sync_readers: int = 2, subscribers: int = 2, phase_seconds: float = 6.0
                 ) -> None:
        self.fleet, self.seed, self.figures = fleet, seed, figures
        self.rng = random.Random(seed)
        self.phase_seconds = phase_seconds
        self.answers = Answers()
        public = fleet.public
        self.owner = CountingClient(public, self.answers)
        self.open = self.owner.create_channel(name=f"open-{seed}")
        self.private = [self.owner.create_channel(private=True, name=f"private-{seed}-{i}")
                        for i in range(2)]
        self.model = Model(self.owner.pubkey, {self.open}, {c: set() for c in self.private})
        # Reads name this schedule's channels: the open channels of earlier schedules on the
        # same community are readable too, and are no part of this model.
        self.filter = {"#h": [self.open, *self.private]}
        self.readers: list[Reader] = [
            HttpReader(CountingClient(public, self.answers), self.filter) for _ in range(readers)]
        self.readers += [
            SyncReader(CountingClient(public, self.answers), self.filter["#h"], public,
                       self.answers, fleet.folder)
            for _ in range(sync_readers)]
        # One lock per reader: its rounds and the oracle's catch-up take turns.
        self.reading = [threading.Lock() for _ in self.readers]
        self.subscribers = [Subscriber(public, self.answers, self.owner.secret, self.open)
                            for _ in range(subscribers)]
        self.windows: list[tuple[float, float]] = []
        self.window_names: list[str] = []
        self.started = time.monotonic()
        self.kill_windows: list[tuple[float, float]] = []
        self.stop = threading.Event()
        self.pause = threading.Event()
        self.errors: list[BaseException] = []
        self.writing = threading.Lock()  # held for each whole write, resends included
        self.last_sends = ""
        self.membership_changes = 0

    # --- the schedule's actors ------------------------------------------------------------

    def _definite(self, event: dict[str, Any]) -> list[Any]:
        """Send `event` until a relay answers it definitely (200 with an OK); its OK."""
        sends: list[str] = []
        while True:
            try:
                response = self.owner.post("/event", event)
                sends.append(str(response.status_code))
                if response.status_code == 200:
                    answer: list[Any] = response.json()
                    self.last_sends = f"{answer[3]!r} after {sends}"
                    return answer
            except httpx.TransportError as exc:
                sends.append(type(exc).__name__)
            self.figures.resends += 1
            time.sleep(0.2)

    def _write(self, event: dict[str, Any]) -> bool:
        answer = self._definite(event)
        if answer[2] is not True:
            # The model said this write is valid: a refusal is a disagreement with the relay.
            self.figures.divergences += 1
            self.figures.notes.append(f"seed {self.seed}: refused {event['kind']}: {answer}")
            return False
        self.figures.writes_acknowledged += 1
        return True

    def _step(self) -> None:
        rng, model, owner = self.rng, self.model, self.owner
        channels = [self.open, *self.private]
        roll = rng.random()
        live = list(model.heads)
        if roll < 0.12:  # a grant or a removal in a private channel
            channel = rng.choice(self.private)
            reader = rng.choice(self.readers).client.pubkey
            # A content of its own: a grant (or removal) like one signed in the same second
            # would be the same event, answered `duplicate:` and applied no second time.
            self.membership_changes += 1
            note = f"change {self.membership_changes}"
            if reader in model.members[channel]:
                if self._write(owner.sign(9001, [["h", channel], ["p", reader]], note)):
                    model.members[channel].discard(reader)
            elif self._write(owner.sign(9000, [["h", channel], ["p", reader, "member"]], note)):
                model.members[channel].add(reader)
            return
        if not live or roll < 0.35:
            event = owner.artifact(rng.choice(channels), title=f"s{self.seed}")
            if self._write(event):
                model.heads[d_of(event)] = Head(event, acknowledged=self.last_sends)
            return
        d = rng.choice(live)
        head = model.heads[d]
        if head.redacted:
            op, channel = "update", head.channel
        elif head.op == "delete":
            op, channel = "restore", head.channel
        else:
            op = rng.choice(["update", "update", "delete", "move", "redact"])
            channel = rng.choice([c for c in channels if c != head.channel]) if op == "move" \
                else head.channel
        if op == "redact":
            redaction = owner.sign(9005, [["h", head.channel], ["e", head.event["id"]]])
            if self._write(redaction):
                head.redacted = True
                head.acknowledged += f"; redaction {self.last_sends}"
            return
        event = owner.artifact(channel, op=op, d=d, prev=head.event["id"], title=f"{op} {d[:4]}")
        if self._write(event):
            model.heads[d] = Head(event, acknowledged=self.last_sends)

    def _writer(self) -> None:
        while not self.stop.is_set():
            if self.pause.is_set():
                time.sleep(0.05)
                continue
            with self.writing:
                self._step()
            time.sleep(0.02)

    def _reader(self, index: int) -> None:
        reader = self.readers[index]
        while not self.stop.is_set():
            if not self.pause.is_set():
                try:
                    with self.reading[index]:
                        reader.round()
                    self.figures.rounds += 1
                except ROUND_FAILURES:
                    pass  # a 5xx or a dropped connection: counted by Answers, judged by windows
            time.sleep(0.05)

    # --- the oracle -------------------------------------------------------------------------

    def check(self, when: str) -> None:
        """Quiet the schedule, then compare every collection, a fresh read and the model."""
        self.pause.set()
        with contextlib.ExitStack() as held:
            held.enter_context(self.writing)
            for lock in self.reading:
                held.enter_context(lock)
            try:
                self._quiet(when)
                self._check(when)
            finally:
                self.pause.clear()

    def _quiet(self, when: str) -> None:
        """Wait until no transaction begun before now is open. Read-your-writes holds only then
        (PROTOCOL.md section 5: a transaction begun before a write holds the fence back, and the
        write arrives in the first round after it ends); any open that long is reported."""
        dep = self.fleet.dep
        since = dep.sql("SELECT now()")[0][0]

        def quiet() -> bool:
            return not dep.sql(
                "SELECT 1 FROM pg_stat_activity WHERE datname = current_database()"
                " AND backend_type = 'client backend' AND xact_start < %s"
                " AND pid <> pg_backend_pid()", (since,))

        try:
            wait_until(quiet, timeout=30, interval=0.1)
        except AssertionError:
            self.figures.divergences += 1
            self.figures.notes.append(f"seed {self.seed} {when}: a transaction stayed open 30 s")

    def _check(self, when: str) -> None:
        figures = self.figures
        stored = self._retrying(lambda: fresh_full_read(self.owner, self.filter))
        expected = self.model.readable(self.owner.pubkey)
        lost = [d for d, head_id in expected.items() if stored.get(d) != head_id]
        figures.writes_lost += len(lost)
        figures.collections_checked += 1
        if lost or stored != expected:
            figures.divergences += 1
            figures.notes.append(f"seed {self.seed} {when}: owner's read differs from the model:"
                                 f" {len(lost)} acknowledged heads missing or older:"
                                 f" {[self._explain(d, stored) for d in lost[:3]]}; extra:"
                                 f" {sorted(set(stored) - set(expected))[:3]}")
        # check() holds every reader's lock: no round of theirs runs meanwhile.
        for reader in self.readers:
            self._retrying(reader.catch_up)
            fresh = self._retrying(
                lambda reader=reader: fresh_full_read(reader.client, self.filter))
            model = self.model.readable(reader.client.pubkey)
            figures.collections_checked += 1
            figures.largest_collection = max(figures.largest_collection, len(fresh))
            held = reader.ids()
            if not held == fresh == model:
                figures.divergences += 1
                differ = sorted(d for d in set(held) | set(fresh) | set(model)
                                if len({held.get(d), fresh.get(d), model.get(d)}) > 1)
                figures.notes.append(
                    f"seed {self.seed} {when}: {reader.kind} reader {reader.client.pubkey[:8]}:"
                    f" collection {len(held)}, fresh read {len(fresh)}, model {len(model)};"
                    f" differing: {[self._differs(d, reader.client.pubkey, held, fresh, model)
                                    for d in differ[:3]]}")

    def _explain(self, d: str, stored: dict[str, str]) -> str:
        """A lost write as the model, the read and the primary's own table each see it."""
        head = self.model.heads[d]
        rows = self.fleet.dep.sql(
            "SELECT h.event_id, h.deleted, h.modified_at, now() FROM artifact_heads h"
            " WHERE h.artifact_id = %s", (d,))
        primary = [(str(r[0])[:8], r[1], str(r[2])[11:23], str(r[3])[11:23]) for r in rows]
        return (f"{d[:8]}: model {head.op} {head.event['id'][:8]} redacted={head.redacted}"
                f" (acknowledged: {head.acknowledged}), read {stored.get(d, '-')[:8]},"
                f" primary {primary}")

    def _differs(self, d: str, pubkey: str, held: dict[str, str], fresh: dict[str, str],
                 model: dict[str, str]) -> str:
        head = self.model.heads.get(d)
        where = "?" if head is None else (
            f"{head.op} in {'open' if head.channel == self.open else head.channel[:8]}"
            f" redacted={head.redacted} member="
            f"{pubkey in self.model.members.get(head.channel, set())}")
        return (f"{d[:8]}: collection {held.get(d, '-')[:8]}, fresh {fresh.get(d, '-')[:8]},"
                f" model {model.get(d, '-')[:8]} ({where})")

    @staticmethod
    def _retrying(read: Any) -> Any:
        """A read right after a fault may meet the tail of its window: asked again."""
        for _ in range(50):
            try:
                return read()
            except ROUND_FAILURES:
                time.sleep(0.3)
        return read()

    def subscribers_converge(self) -> None:
        final = self.owner.artifact(self.open, title=f"final {self.seed}")
        assert self._write(final)
        self.model.heads[d_of(final)] = Head(final)
        try:
            wait_until(lambda: all(d_of(final) in s.received for s in self.subscribers),
                       timeout=30)
        except AssertionError:
            self.figures.divergences += 1
            self.figures.notes.append(f"seed {self.seed}: a subscriber never got the final write")

    def outside_windows(self) -> list[str]:
        """Each 5xx outside every fault's window: when it came against the faults, and what it
        said (so that a failure tells which window it followed and by how much)."""
        return [f"{status} sent {self._placed(sent)}, answered {answered - sent:.1f} s later:"
                f" {said!r}"
                for sent, answered, status, said in self.answers.server_errors_at
                if not any(sent <= end and start <= answered for start, end in self.windows)]

    def _placed(self, at: float) -> str:
        before = [(end, name) for (start, end), name in zip(self.windows, self.window_names,
                                                            strict=True) if start <= at]
        if not before:
            return f"{at - self.started:.1f} s into the schedule, before any fault"
        end, name = max(before)
        return f"{at - end:.1f} s after {name}'s window"

    # --- the run ------------------------------------------------------------------------------

    def run(self) -> None:
        threads = [threading.Thread(target=self._guard(self._writer), daemon=True)]
        threads += [threading.Thread(target=self._guard(lambda i=i: self._reader(i)), daemon=True)
                    for i in range(len(self.readers))]
        faults = self.fleet.faults()
        self.rng.shuffle(faults)
        try:
            for subscriber in self.subscribers:
                subscriber.thread.start()
            for thread in threads:
                thread.start()
            wait_until(lambda: all(s.connects for s in self.subscribers), timeout=30)
            for fault in faults:
                time.sleep(self.phase_seconds)
                skipped = len(self.fleet.skipped)
                window = fault(self.rng)
                self.windows.append(window)
                self.window_names.append(fault.__name__)
                if fault == self.fleet.kill_one:
                    self.kill_windows.append(window)
                if len(self.fleet.skipped) == skipped:
                    self.figures.faults += 1
                    self.figures.fault_kinds[fault.__name__] += 1
                else:
                    self.figures.notes.append(f"seed {self.seed}: {self.fleet.skipped[-1]}")
                self.check(f"after {fault.__name__}")
            time.sleep(self.phase_seconds)
            self.check("at the end")
            self.subscribers_converge()
        finally:
            self.stop.set()
            for subscriber in self.subscribers:
                subscriber.stop.set()
            for thread in threads:
                thread.join(30)
            for subscriber in self.subscribers:
                subscriber.thread.join(10)
            for reader in self.readers:
                if isinstance(reader, SyncReader):
                    reader.close()
        self.figures.schedules += 1
        self.figures.answers.update(self.answers.statuses)
        self.figures.unauthorized_in_kills += sum(
            any(start <= at <= end for start, end in self.kill_windows)
            for at in self.answers.unauthorized_at)
        stray = self.outside_windows()
        if stray:
            self.figures.divergences += 1
            self.figures.notes.append(f"seed {self.seed}: {len(stray)} 5xx outside the fault"
                                      f" windows: {stray[:5]}")
        if self.errors:
            self.figures.divergences += 1
            self.figures.notes.append(f"seed {self.seed}: {self.errors[:3]}")

    def _guard(self, body: Any) -> Any:
        def run() -> None:
            try:
                body()
            except BaseException as exc:
                self.errors.append(exc)
        return run


@contextlib.contextmanager
def fleet_for(dep: Deployment, folder: Path) -> Iterator[Fleet]:
    with contextlib.ExitStack() as stack:
        yield Fleet(dep, folder, stack)
