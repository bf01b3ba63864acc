"""The relay against a peer relay, nostr-relay 1.14 from PyPI, in one run: WebSocket EVENT
throughput, POST /event throughput, and REQ replay time.

The peer is installed by this bench into a scratch virtualenv (`bench/out/peer-venv`, reused
when present; nothing of its code is in the repository) and served by its own `serve` command
(gunicorn with uvicorn workers) with a generated config: its SQLAlchemy storage on PostgreSQL
(asyncpg), a database of its own dropped and recreated every run, as many worker processes as
the relay, authentication off, no rate limiter, its default validators (size, signature,
created_at, hellthread) and `num_concurrent_adds` raised from 2 (its SQLite default) to the
connection count. The relay runs as bench/ws.py runs it (`buzz-admin serve`, rate limits off),
its database recreated too, on the same PostgreSQL server; Redis is `--redis-url` (db 9).

One client implementation (the `websockets` library, asyncio, no compression) drives both:

1. REQ replay: 10,000 events are stored in each relay through its WebSocket (the peer: kind-1
   notes; the relay: artifact creates in one open channel), then `--replays` REQs with limit
   500, one after another on one connection per block, the relays alternating in `--rounds`
   blocks, each timed from sending the REQ to receiving its EOSE (every replay must return
   500 events).
   The relay's REQ is a client's replay of a channel (buzz-sync's kinds, with `#h`:
   `{"kinds": [45010, 45011], "#h": [channel]}`), by another key after NIP-42 AUTH; the
   peer's `{"kinds": [1]}`. Both databases are ANALYZEd after the load (the machine's server
   runs without autovacuum).
2. EVENT: `--connections` connections each send pre-signed events back to back, each waiting
   for its OK, for `--seconds`; rounds alternate peer / relay WS / relay POST /event. Only
   `OK true` counts as accepted; refusals are counted apart with their messages. The relay's
   connections authenticate (NIP-42) first and publish artifact creates (bench/ingest.py's
   tags); POST /event is bench/ingest.py's own driver (NIP-98 per request) at the same
   concurrency, so "WebSocket EVENT at least as fast as /event" is measured in the same run.
   Each server hands a connection to one of its worker processes for good; the bench re-opens
   connections until each worker holds its share (`--no-spread`: the kernel's draw) and shows
   the split. The servers' logs are kept (bench/out/peer-serve.log, peer-buzz-serve.log) and
   the warnings each logged during each phase are counted; so are each database's
   transactions (read-only ones included) and rows written per accepted event
   (pg_stat_database).

Targets (issue 20): relay WS EVENT/s >= 1.5x the peer's at 8 connections and >= its own
/event; replay p50 <= the peer's and p99 < 35 ms. Relay CPU per accepted event (server process
tree, user + system) is shown for both relays: the client, PostgreSQL and Redis share the same
two cores, so rates are upper-bounded by the machine; ratios within the run are the figures.

    .venv/bin/python bench/peer.py                         # 20 s rounds, 2 rounds, 200 replays
    .venv/bin/python bench/peer.py --quick                 # smoke run: 3 s rounds, 20 replays
"""

from __future__ import annotations

import argparse
import asyncio
import glob
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._harness import (  # noqa: E402
    BENCH_HOST,
    OUT,
    Server,
    free_port,
    print_table,
    relay_env,
    services,
    setup_database,
    start_server,
    start_server_in,
    wait_until_serving,
)
from bench.ingest import UNLIMITED, WRITER_SECRET, _drive, _sign_phase, artifact_tags  # noqa: E402

PEER_PACKAGES = ["nostr-relay==1.14", "asyncpg"]
PEER_VENV = OUT / "peer-venv"
PEER_DATABASE = "bench_peer_nostr_relay"
RELAY_DATABASE = "bench_peer_buzz"
READER_SECRET = "6" * 64
PEER_WRITER_SECRET = "4" * 64
STORED = 10_000
REPLAY_LIMIT = 500
PEER_LOG = OUT / "peer-serve.log"
RELAY_LOG = OUT / "peer-buzz-serve.log"


# --- the peer: install, configure, serve ---------------------------------------------------


def peer_python() -> str:
    """An interpreter for the peer's venv: a pyenv 3.12 (what nostr-relay 1.14 was run with),
    else the one this venv was made from."""
    found = sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.12*/bin/python3.12")))
    base = getattr(sys, "_base_executable", sys.executable)
    return found[-1] if found else (shutil.which("python3.12") or base)


def ensure_peer_venv(python: str) -> Path:
    """The scratch venv holding nostr-relay 1.14 and asyncpg; created once, then reused."""
    marker = PEER_VENV / "installed.txt"
    if marker.exists() and marker.read_text().strip() == " ".join(PEER_PACKAGES):
        return PEER_VENV
    print(f"installing {' '.join(PEER_PACKAGES)} into {PEER_VENV} ({python})", flush=True)
    shutil.rmtree(PEER_VENV, ignore_errors=True)
    subprocess.run([python, "-m", "venv", str(PEER_VENV)], check=True)
    subprocess.run(
        [str(PEER_VENV / "bin" / "pip"), "install", "--quiet", *PEER_PACKAGES],
        check=True,
        stderr=subprocess.DEVNULL,
    )
    marker.write_text(" ".join(PEER_PACKAGES))
    return PEER_VENV


def database_url_named(url: str, name: str, *, scheme: str | None = None) -> str:
    parts = urlsplit(url)
    return urlunsplit((scheme or parts.scheme, parts.netloc, f"/{name}", "", ""))


def recreate_database(url: str) -> None:
    """Drop and create the database `url` names, through the server's `postgres` database."""
    import psycopg

    name = urlsplit(url).path.lstrip("/")
    with psycopg.connect(database_url_named(url, "postgres"), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')


PEER_CONFIG = """\
relay_name: bench peer
storage:
  sqlalchemy.url: {url}
  num_concurrent_reqs: 10
  num_concurrent_adds: {adds}
  validators:
    - nostr_relay.validators.is_not_too_large
    - nostr_relay.validators.is_signed
    - nostr_relay.validators.is_recent
    - nostr_relay.validators.is_not_hellthread
verification:
  nip05_verification: disabled
gunicorn:
  bind: 127.0.0.1:{port}
  workers: {workers}
  loglevel: warning
  reload: false
authentication:
  enabled: false
message_timeout: 1800
subscription_limit: 32
max_limit: 6000
hellthread_limit: 100
logging:
  version: 1
  root:
    level: WARNING
"""


@contextmanager
def stderr_to(path: Path) -> Iterator[None]:
    """This process's stderr goes to `path` meanwhile, so a server started inside inherits it
    (bench._harness.start_server leaves a server's stderr to its parent's)."""
    saved = os.dup(2)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    sys.stderr.flush()
    os.dup2(fd, 2)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        os.close(fd)


def warnings_in(path: Path) -> list[str]:
    """The warning and error lines a server has logged so far."""
    text = path.read_text(errors="replace") if path.exists() else ""
    return [
        line
        for line in text.splitlines()
        if "WARNING" in line or "ERROR" in line or "Traceback" in line
    ]


def database_counters(database_url: str) -> tuple[int, int]:
    """Committed transactions and rows written (inserted + updated + deleted) so far in the
    database, from PostgreSQL's own accounting (pg_stat_database)."""
    import psycopg

    name = urlsplit(database_url).path.lstrip("/")
    with psycopg.connect(database_url_named(database_url, "postgres")) as conn:
        row = conn.execute(
            "SELECT xact_commit, tup_inserted + tup_updated + tup_deleted"
            " FROM pg_stat_database WHERE datname = %s",
            [name],
        ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


@contextmanager
def observing(relay: Relay, into: dict[str, Any]) -> Iterator[None]:
    """`into`: how many warning lines the relay logged meanwhile (and the first), and the
    commits and rows written in its database."""
    before = len(warnings_in(relay.log))
    commits, rows = database_counters(relay.database_url)
    yield
    time.sleep(1.2)  # backends flush their statistics after a second idle
    commits_after, rows_after = database_counters(relay.database_url)
    new = warnings_in(relay.log)[before:]
    into["warnings"] = len(new)
    into["warning_sample"] = new[0][:200] if new else ""
    into["db_commits"], into["db_rows_written"] = commits_after - commits, rows_after - rows


def start_peer(venv: Path, database_url: str, *, workers: int, adds: int) -> Server:
    """nostr-relay's own `serve` (it runs its alembic migrations first) on a free port."""
    recreate_database(database_url)
    port = free_port()
    config = OUT / "peer-config.yaml"
    url = database_url_named(database_url, urlsplit(database_url).path.lstrip("/"),
                             scheme="postgresql+asyncpg")
    config.write_text(PEER_CONFIG.format(url=url, port=port, workers=workers, adds=adds))
    log = PEER_LOG.open("wb")
    process = subprocess.Popen(
        [str(venv / "bin" / "nostr-relay"), "-c", str(config), "serve"],
        cwd=OUT,
        start_new_session=True,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    server = Server(process, port)
    wait_until_serving(server, server.url, f"nostr-relay did not start: see {PEER_LOG}",
                       headers={"Accept": "application/nostr+json"})
    return server


# --- the one client ------------------------------------------------------------------------


@dataclass
class Relay:
    name: str
    server: Server
    # NIP-42 AUTH with these keys first (the relay: the writer for EVENT, another key for the
    # replays); None: no auth (the peer).
    writer: str | None
    reader: str | None
    kind: int
    log: Path  # the server's stderr: its warnings are counted per phase
    database_url: str
    channel: str = ""  # the relay's open channel the EVENT rounds write to
    replay_channel: str = ""

    @property
    def ws_url(self) -> str:
        return f"ws://{BENCH_HOST}:{self.server.port}/"

    def frames(self, n: int, *, channel: str = "") -> list[tuple[str, str]]:
        """`n` pre-signed EVENT frames: (event id, frame text)."""
        from nostr.events import sign

        frames = []
        for i in range(n):
            if self.kind == 1:
                event = sign(
                    PEER_WRITER_SECRET,
                    kind=1,
                    tags=[],
                    content=f"bench note {i} {uuid.uuid4().hex}",
                )
            else:
                tags = artifact_tags(
                    op="create", d=str(uuid.uuid4()), h=channel or self.channel, title=f"bench {i}"
                )
                event = sign(WRITER_SECRET, kind=self.kind, tags=tags, content='{"version":1}')
            frames.append((event.id, f'["EVENT",{event.raw}]'))
        return frames


async def _open(url: str, secret: str | None) -> Any:
    import orjson
    from websockets.asyncio.client import connect

    from nostr.nip42 import make_auth_event

    ws = await connect(url, compression=None, max_size=2**24, ping_interval=None, open_timeout=30)
    if secret is not None:
        challenge = orjson.loads(await ws.recv())
        assert challenge[0] == "AUTH", challenge
        auth = make_auth_event(secret, challenge=challenge[1], relay_url=url)
        await ws.send(orjson.dumps(["AUTH", auth]).decode())
        answer = orjson.loads(await ws.recv())
        if answer[0] != "OK" or answer[2] is not True:
            raise RuntimeError(f"AUTH refused by {url}: {answer}")
    return ws


@dataclass
class Burst:
    accepted: int = 0
    elapsed: float = 0.0
    latencies_ms: list[float] = field(default_factory=list)
    refused: Counter[str] = field(default_factory=Counter)
    other_frames: Counter[str] = field(default_factory=Counter)
    exhausted: bool = False
    warnings: int = 0
    warning_sample: str = ""
    per_worker: list[int] = field(default_factory=list)


async def _open_spread(
    url: str, secret: str | None, n: int, server: Server, workers: int
) -> tuple[list[Any], list[int]]:
    """`n` connections, re-opened until no worker process holds more than its share.

    Both servers hand each accepted connection to one worker process for its lifetime, and
    which one is the kernel's draw: 8 connections came out 4+4, 2+6 and 1+7 in trials, and a
    worker holding 7 of them bounds the round by one process. Spreading them the same way for
    both relays takes that draw out of the comparison. Returns the connections and how many
    each worker holds."""
    share = math.ceil(n / workers)
    sockets = [await _open(url, secret) for _ in range(n)]
    per_worker: Counter[int | None] = Counter()
    for _ in range(100):
        owners = connection_owners(server)
        per_worker = Counter(owners.get(ws.local_address[1]) for ws in sockets)
        crowded = {pid for pid, count in per_worker.items() if count > share or pid is None}
        if not crowded:
            break
        victim = next(ws for ws in sockets if owners.get(ws.local_address[1]) in crowded)
        sockets.remove(victim)
        await victim.close()
        sockets.append(await _open(url, secret))
    return sockets, sorted(per_worker.values())


async def _publish(
    url: str,
    secret: str | None,
    frames: list[tuple[str, str]],
    *,
    connections: int,
    seconds: float | None,
    spread: tuple[Server, int] | None = None,
) -> Burst:
    """Each connection sends the next pre-signed event and waits for its OK, back to back,
    until `seconds` pass (None: until the frames run out). `spread`: (server, workers), see
    _open_spread."""
    import orjson

    if spread is None:
        sockets = [await _open(url, secret) for _ in range(connections)]
        per_worker: list[int] = []
    else:
        sockets, per_worker = await _open_spread(url, secret, connections, *spread)
    pending = iter(frames)
    burst = Burst(per_worker=per_worker)
    started = time.perf_counter()
    deadline = None if seconds is None else started + seconds

    async def one(ws: Any) -> None:
        for event_id, frame in pending:
            sent = time.perf_counter()
            await ws.send(frame)
            while True:
                answer = orjson.loads(await ws.recv())
                if answer[0] == "OK" and answer[1] == event_id:
                    break
                burst.other_frames[str(answer[:2])[:100]] += 1
            now = time.perf_counter()
            burst.latencies_ms.append((now - sent) * 1000)
            if answer[2] is True:
                burst.accepted += 1
            else:
                burst.refused[str(answer[3])[:120]] += 1
            if deadline is not None and now >= deadline:
                return
        if deadline is not None:
            burst.exhausted = True

    await asyncio.gather(*(one(ws) for ws in sockets))
    burst.elapsed = time.perf_counter() - started
    for ws in sockets:
        await ws.close()
    return burst


async def _replays(
    url: str, secret: str | None, flt: dict[str, Any], n: int
) -> tuple[list[float], list[int], float]:
    """`n` REQs on one connection, one after another: ms from REQ to EOSE, events per replay,
    and the client's own CPU seconds over them."""
    import orjson

    ws = await _open(url, secret)
    times: list[float] = []
    counts: list[int] = []
    cpu = time.process_time()
    for i in range(n):
        sub = f"r{i}"
        marker = f'"{sub}"'
        count = 0
        started = time.perf_counter()
        await ws.send(orjson.dumps(["REQ", sub, flt]).decode())
        while True:
            message = await ws.recv()
            # Counted without parsing each event (that would add the client's JSON cost).
            if message.startswith('["EVENT"'):
                if marker in message[:40]:
                    count += 1
                continue
            answer = orjson.loads(message)
            if answer[0] == "EOSE" and answer[1] == sub:
                break
            if answer[0] == "CLOSED":
                raise RuntimeError(f"REQ refused by {url}: {answer}")
        times.append((time.perf_counter() - started) * 1000)
        counts.append(count)
        await ws.send(orjson.dumps(["CLOSE", sub]).decode())
    cpu = time.process_time() - cpu
    await ws.close()
    return times, counts, cpu


# --- measurements --------------------------------------------------------------------------


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def connection_owners(server: Server) -> dict[int, int]:
    """Client port -> the pid of the server process holding that connection."""
    import psutil

    root = psutil.Process(server.process.pid)
    owners = {}
    for proc in [root, *root.children(recursive=True)]:
        for c in proc.net_connections("tcp"):
            established = c.status == psutil.CONN_ESTABLISHED
            if established and c.laddr and c.raddr and c.laddr.port == server.port:
                owners[c.raddr.port] = proc.pid
    return owners


def _cpu_seconds(server: Server) -> float:
    """User + system seconds of a server's process tree (the master and its workers)."""
    import psutil

    root = psutil.Process(server.process.pid)
    total = 0.0
    for proc in [root, *root.children(recursive=True)]:
        try:
            times = proc.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += times.user + times.system
    return total


def _database_cpu_seconds(database_url: str) -> dict[int, float]:
    """User + system seconds of each PostgreSQL backend connected to this database, by pid, on a
    local server (their process titles name the database): the database's share of a relay's
    cost."""
    import psutil

    name = f" {urlsplit(database_url).path.lstrip('/')} "
    seconds = {}
    for proc in psutil.process_iter(["name"]):
        try:
            if proc.info["name"] != "postgres" or name not in " ".join(proc.cmdline()) + " ":
                continue
            times = proc.cpu_times()
        except psutil.Error:
            continue
        seconds[proc.pid] = times.user + times.system
    return seconds


def _backends_used(before: dict[int, float], after: dict[int, float]) -> float:
    """CPU seconds the backends alive at the end used since `before` (a backend that started
    meanwhile, all of its own; one that ended meanwhile is not seen: the peer's pool replaces
    its connections at one worker, so its figure is a lower bound there)."""
    return sum(used - before.get(pid, 0.0) for pid, used in after.items())


@dataclass
class _Machine:
    """CPU seconds at one moment: the whole machine's busy time, a relay's server tree, its
    database's backends and this client process, to tell what else ran during a round."""

    busy: float
    server: float
    database: dict[int, float]
    client: float

    @classmethod
    def now(cls, relay: Relay) -> _Machine:
        import psutil

        times = psutil.cpu_times()
        own = psutil.Process().cpu_times()
        return cls(times.user + times.nice + times.system + times.irq + times.softirq
                   + getattr(times, "steal", 0.0), _cpu_seconds(relay.server),
                   _database_cpu_seconds(relay.database_url), own.user + own.system)


@dataclass
class EventRound:
    relay: str
    transport: str
    round: int
    sent: int
    accepted: int
    seconds: float
    rate: float
    p50_ms: float
    p99_ms: float
    relay_cpu_ms_per_accepted: float
    refused: dict[str, int]
    other_frames: dict[str, int]
    exhausted: bool
    warnings: int = 0
    warning_sample: str = ""
    per_worker: list[int] = field(default_factory=list)
    db_commits: int = 0
    db_rows_written: int = 0
    # The relay's database backends' CPU per accepted event, and the cores the rest of the
    # machine used meanwhile (other sessions, Redis): both relays share two cores with the
    # database and the client, so a round's rate is bounded by the CPU the whole machine spends
    # per event and moved by what else runs (docs/performance.md, "WebSocket EVENT at two
    # workers each").
    db_cpu_ms_per_accepted: float = float("nan")
    elsewhere_cores: float = float("nan")


def ws_round(
    relay: Relay,
    number: int,
    *,
    connections: int,
    seconds: float,
    presign: int,
    spread: tuple[Server, int] | None,
) -> EventRound:
    frames = relay.frames(presign)
    logged: dict[str, Any] = {}
    before, started = _Machine.now(relay), time.monotonic()
    with observing(relay, logged):
        burst = asyncio.run(
            _publish(
                relay.ws_url,
                relay.writer,
                frames,
                connections=connections,
                seconds=seconds,
                spread=spread,
            )
        )
        after, elapsed = _Machine.now(relay), time.monotonic() - started
    cpu = after.server - before.server
    database = _backends_used(before.database, after.database)
    elsewhere = (after.busy - before.busy) - cpu - database - (after.client - before.client)
    return EventRound(
        db_cpu_ms_per_accepted=database * 1000 / max(1, burst.accepted),
        elsewhere_cores=elsewhere / elapsed,
        **logged,
        per_worker=burst.per_worker,
        relay=relay.name,
        transport="WS EVENT",
        round=number,
        sent=len(burst.latencies_ms),
        accepted=burst.accepted,
        seconds=burst.elapsed,
        rate=burst.accepted / burst.elapsed,
        p50_ms=_percentile(burst.latencies_ms, 0.5),
        p99_ms=_percentile(burst.latencies_ms, 0.99),
        relay_cpu_ms_per_accepted=cpu * 1000 / max(1, burst.accepted),
        refused=dict(burst.refused),
        other_frames=dict(burst.other_frames),
        exhausted=burst.exhausted,
    )


def http_round(relay: Relay, number: int, *, connections: int, n: int) -> EventRound:
    """bench/ingest.py's POST /event driver: `n` creates, `connections` requests in flight."""
    url = f"{relay.server.url}/event"
    requests = _sign_phase(
        "create", url, relay.channel, [(str(uuid.uuid4()), "") for _ in range(n)]
    )
    logged: dict[str, Any] = {}
    cpu = _cpu_seconds(relay.server)
    with observing(relay, logged):
        elapsed, latencies, answers = asyncio.run(_drive(url, requests, connections))
    cpu = _cpu_seconds(relay.server) - cpu
    accepted = [a for a in answers if a[0] == "OK" and a[2] is True]
    refused = Counter(str(a[3] if a[0] == "OK" else a)[:120] for a in answers if a not in accepted)
    ms = [t * 1000 for t in latencies]
    return EventRound(
        **logged,
        relay=relay.name,
        transport="POST /event",
        round=number,
        sent=len(answers),
        accepted=len(accepted),
        seconds=elapsed,
        rate=len(accepted) / elapsed,
        p50_ms=_percentile(ms, 0.5),
        p99_ms=_percentile(ms, 0.99),
        relay_cpu_ms_per_accepted=cpu * 1000 / max(1, len(accepted)),
        refused=dict(refused),
        other_frames={},
        exhausted=False,
    )


def store_events(relay: Relay, *, connections: int, spread: tuple[Server, int] | None) -> Burst:
    """The replay's 10,000 events, through the relay's own WebSocket."""
    frames = relay.frames(STORED, channel=relay.replay_channel)
    logged: dict[str, Any] = {}
    with observing(relay, logged):
        burst = asyncio.run(
            _publish(
                relay.ws_url,
                relay.writer,
                frames,
                connections=connections,
                seconds=None,
                spread=spread,
            )
        )
    burst.warnings, burst.warning_sample = logged["warnings"], logged["warning_sample"]
    if burst.accepted != STORED:
        raise RuntimeError(
            f"{relay.name}: stored {burst.accepted} of {STORED} events; "
            f"refusals {dict(burst.refused)}"
        )
    return burst


def replay_filter(relay: Relay) -> dict[str, Any]:
    """The peer: its notes. The relay: a client's replay of one channel (buzz-sync's kinds,
    artifacts and removal markers, with `#h`)."""
    from nostr.kinds import SYNC_KINDS

    if relay.kind == 1:
        return {"kinds": [1], "limit": REPLAY_LIMIT}
    return {"kinds": list(SYNC_KINDS), "#h": [relay.replay_channel], "limit": REPLAY_LIMIT}


def analyze(database_url: str) -> None:
    """ANALYZE after the load: the machine's server runs without autovacuum, so neither
    relay's tables would otherwise have statistics (and both plans depend on them)."""
    import psycopg

    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("ANALYZE")


@dataclass
class Replays:
    relay: str
    filter: dict[str, Any]
    replays: int = 0
    times_ms: list[float] = field(default_factory=list)
    counts: Counter[int] = field(default_factory=Counter)
    client_cpu_s: float = 0.0
    relay_cpu_s: float = 0.0
    warnings: int = 0


def replay_block(relay: Relay, into: Replays, n: int) -> None:
    logged: dict[str, Any] = {}
    cpu = _cpu_seconds(relay.server)
    with observing(relay, logged):
        times, counts, client_cpu = asyncio.run(
            _replays(relay.ws_url, relay.reader, into.filter, n)
        )
    into.relay_cpu_s += _cpu_seconds(relay.server) - cpu
    into.warnings += logged["warnings"]
    into.replays += n
    into.times_ms += times
    into.counts.update(counts)
    into.client_cpu_s += client_cpu


# --- the run -------------------------------------------------------------------------------


def _refusals(r: EventRound) -> str:
    text = f"{sum(r.refused.values())}: {r.refused}"[:100] if r.refused else "-"
    return text + (" (pre-signed events ran out)" if r.exhausted else "")


def _rate(rounds: list[EventRound], relay: str, transport: str) -> float:
    """Accepted events per second over every round of one kind (total / total time)."""
    chosen = [r for r in rounds if r.relay == relay and r.transport == transport]
    return sum(r.accepted for r in chosen) / sum(r.seconds for r in chosen)


@dataclass
class Measured:
    """What a run measured, for the report and peer.json."""

    server_version: str
    peer: Relay
    buzz: Relay
    rounds: list[EventRound]
    loads: dict[str, Burst]
    replays: dict[str, Replays]


def main() -> int:
    args = _arguments()
    load_before = os.getloadavg()
    python = args.peer_python or peer_python()
    venv = ensure_peer_venv(python)
    peer_version = _peer_versions(venv)
    recreate_database(args.database_url)
    os.environ["DATABASE_URL"], os.environ["REDIS_URL"] = args.database_url, args.redis_url
    measured = _measure(args, venv)
    load_after = os.getloadavg()
    _report(args, measured, load_before, load_after)
    targets, rates = _targets(measured)
    _write_figures(args, measured, peer_version, targets, rates, load_before, load_after)
    return 0


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=20.0, help="per EVENT round")
    parser.add_argument("--rounds", type=int, default=2, help="rounds per relay, alternated")
    parser.add_argument("--replays", type=int, default=200, help="REQ replays per relay")
    parser.add_argument("--workers", type=int, default=2, help="worker processes, each relay")
    parser.add_argument(
        "--http-rate",
        type=float,
        default=200.0,
        help="POST /event creates per round = --seconds x this",
    )
    parser.add_argument(
        "--quick", action="store_true", help="smoke run: --seconds 3 --replays 20 --rounds 1"
    )
    parser.add_argument("--peer-python", default=None, help="interpreter for the peer's venv")
    parser.add_argument(
        "--database-url",
        default=os.environ.get(
            "DATABASE_URL", f"postgres://postgres@127.0.0.1:5432/{RELAY_DATABASE}"
        ),
        help="the relay's database (recreated); the peer's is beside it on the same server",
    )
    parser.add_argument(
        "--redis-url", default=os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/9")
    )
    parser.add_argument(
        "--peer-database", default=PEER_DATABASE,
        help="the peer's database (recreated), beside the relay's: a name of its own per "
        "session when several run benchmarks on one server",
    )
    parser.add_argument(
        "--relay-tree", type=Path, default=None,
        help="serve the relay from this source tree (an A/B: a git worktree of the baseline, "
        "driven by this tree's bench); default this tree",
    )
    parser.add_argument(
        "--spread",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="re-open connections until each worker holds its share (see _open_spread)",
    )
    args = parser.parse_args()
    if args.quick:
        args.seconds, args.replays, args.rounds = 3.0, 20, 1
    return args



def _peer_versions(venv: Path) -> list[str]:
    """The versions of nostr-relay, SQLAlchemy, asyncpg, uvicorn and Python in the peer's venv."""
    return subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-c",
            "import sys, importlib.metadata as m; print(m.version('nostr-relay'),"
            " m.version('sqlalchemy'), m.version('asyncpg'), m.version('uvicorn'),"
            " sys.version.split()[0])",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()


def _measure(args: argparse.Namespace, venv: Path) -> Measured:
    """Both relays on the same PostgreSQL: stored events, replays, then EVENT rounds."""
    with services() as svc:
        channels, server_version = _bench_channels(svc)
        peer, buzz = _start_relays(args, svc, venv, channels)
        relays = [peer, buzz]
        rounds: list[EventRound] = []
        loads: dict[str, Burst] = {}
        replays = {r.name: Replays(r.name, replay_filter(r)) for r in relays}
        try:
            # 1. Replay first, while each relay stores exactly the 10,000 events loaded here.
            _store_and_replay(args, relays, loads, replays)
            # 2. EVENT rounds, alternated.
            _event_rounds(args, relays, buzz, rounds)
        finally:
            peer.server.stop()
            buzz.server.stop()
    return Measured(server_version, peer, buzz, rounds, loads, replays)


def _bench_channels(svc: Any) -> tuple[dict[str, uuid.UUID], str]:
    """The relay's database set up, its two channels (events, replay), PostgreSQL's version."""
    setup_database(svc)
    os.environ.update(relay_env(svc))
    import django

    django.setup()
    from django.db import connection

    from artifacts.models import Community
    from artifacts.services.channels import channel_create

    community = Community.objects.get(host=BENCH_HOST)
    channels = {}
    for purpose in ("events", "replay"):
        channels[purpose] = uuid.uuid4()
        channel_create(
            community_id=community.pk,
            channel_id=channels[purpose],
            name=f"bench peer {purpose}",
        )
    with connection.cursor() as cursor:
        cursor.execute("SHOW server_version")
        server_version = cursor.fetchone()[0]
    connection.close()
    return channels, server_version


def _start_relays(
    args: argparse.Namespace, svc: Any, venv: Path, channels: dict[str, uuid.UUID]
) -> tuple[Relay, Relay]:
    """(the peer, buzz), each serving with `args.workers` workers."""
    peer_db = database_url_named(svc.database_url, args.peer_database)
    peer = Relay(
        "nostr-relay 1.14",
        start_peer(venv, peer_db, workers=args.workers, adds=args.connections),
        writer=None,
        reader=None,
        kind=1,
        log=PEER_LOG,
        database_url=peer_db,
    )
    try:
        with stderr_to(RELAY_LOG):
            if args.relay_tree is None:
                relay_server = start_server("serve", svc, workers=args.workers, **UNLIMITED)
            else:
                relay_server = start_server_in(args.relay_tree.resolve(), "serve-tree", svc,
                                               workers=args.workers, env=dict(UNLIMITED))
                print(f"relay: {relay_server.code}", flush=True)
    except BaseException:
        peer.server.stop()
        raise
    buzz = Relay(
        "buzz",
        relay_server,
        writer=WRITER_SECRET,
        reader=READER_SECRET,
        kind=45010,
        log=RELAY_LOG,
        database_url=svc.database_url,
        channel=str(channels["events"]),
        replay_channel=str(channels["replay"]),
    )
    return peer, buzz


def _spread(args: argparse.Namespace, relay: Relay) -> tuple[Server, int] | None:
    return (relay.server, args.workers) if args.spread else None


def _store_and_replay(
    args: argparse.Namespace,
    relays: list[Relay],
    loads: dict[str, Burst],
    replays: dict[str, Replays],
) -> None:
    """Store the events each relay replays, then REQ replays in blocks, alternated."""
    for relay in relays:
        loads[relay.name] = store_events(
            relay, connections=args.connections, spread=_spread(args, relay)
        )
        print(
            f"{relay.name}: stored {STORED} events in {loads[relay.name].elapsed:.1f} s"
            f" ({STORED / loads[relay.name].elapsed:.0f}/s);"
            f" {loads[relay.name].warnings} warnings logged meanwhile",
            flush=True,
        )
    for relay in relays:
        analyze(relay.database_url)
    for relay in relays:  # warm-up, not counted
        asyncio.run(_replays(relay.ws_url, relay.reader, replays[relay.name].filter, 5))
    block = math.ceil(args.replays / args.rounds)
    for _ in range(args.rounds):
        for relay in relays:
            replay_block(
                relay,
                replays[relay.name],
                min(block, args.replays - replays[relay.name].replays),
            )


def _event_rounds(
    args: argparse.Namespace, relays: list[Relay], buzz: Relay, rounds: list[EventRound]
) -> None:
    """EVENT rounds over the WebSocket, alternated, each followed by buzz's POST /event round;
    pre-signed with room over the best rate seen."""
    best = {r.name: 1200.0 for r in relays}
    for number in range(1, args.rounds + 1):
        for relay in relays:
            presign = math.ceil(args.seconds * max(1200.0, 1.5 * best[relay.name]))
            result = ws_round(
                relay,
                number,
                connections=args.connections,
                seconds=args.seconds,
                presign=presign,
                spread=_spread(args, relay),
            )
            best[relay.name] = max(best[relay.name], result.rate)
            rounds.append(result)
            print(f"round {number} {relay.name} WS: {result.rate:.0f} accepted/s", flush=True)
        result = http_round(
            buzz,
            number,
            connections=args.connections,
            n=math.ceil(args.seconds * args.http_rate),
        )
        rounds.append(result)
        print(f"round {number} buzz POST /event: {result.rate:.0f} accepted/s", flush=True)


def _report(
    args: argparse.Namespace,
    measured: Measured,
    load_before: tuple[float, float, float],
    load_after: tuple[float, float, float],
) -> None:
    server_version, rounds, loads, replays = (
        measured.server_version, measured.rounds, measured.loads, measured.replays
    )
    print()
    print(
        "machine load average (1, 5, 15 min) at the start "
        + ", ".join(f"{x:.1f}" for x in load_before)
        + "; at the end "
        + ", ".join(f"{x:.1f}" for x in load_after)
    )
    print(
        f"EVENT: {args.connections} connections, each sending pre-signed events back to back"
        f" and waiting for its OK, {args.seconds:g} s a round, rounds alternated; PostgreSQL"
        f" {server_version}, both relays x{args.workers} worker processes"
    )
    print_table(
        [
            "relay",
            "transport",
            "round",
            "sent",
            "accepted",
            "accepted/s",
            "p50 ms",
            "p99 ms",
            "relay CPU ms/event",
            "db CPU ms/event",
            "elsewhere cores",
            "db xacts/event",
            "db rows/event",
            "refused",
            "relay warnings",
            "conns per worker",
        ],
        [
            [
                r.relay,
                r.transport,
                r.round,
                r.sent,
                r.accepted,
                f"{r.rate:.0f}",
                f"{r.p50_ms:.1f}",
                f"{r.p99_ms:.1f}",
                f"{r.relay_cpu_ms_per_accepted:.2f}",
                f"{r.db_cpu_ms_per_accepted:.2f}",
                f"{r.elsewhere_cores:.2f}",
                f"{r.db_commits / max(1, r.accepted):.2f}",
                f"{r.db_rows_written / max(1, r.accepted):.2f}",
                _refusals(r),
                r.warnings,
                "+".join(map(str, r.per_worker)) or "-",
            ]
            for r in rounds
        ],
    )
    print()
    print(
        f"REQ replay: limit {REPLAY_LIMIT} over {STORED:,} stored events, one connection,"
        " REQ -> EOSE, blocks alternated"
    )
    replay_rows = []
    for rep in replays.values():
        replay_rows.append(
            [
                rep.relay,
                json.dumps(rep.filter)[:60],
                rep.replays,
                ", ".join(f"{n} x{c}" for n, c in sorted(rep.counts.items())),
                f"{_percentile(rep.times_ms, 0.5):.1f}",
                f"{_percentile(rep.times_ms, 0.99):.1f}",
                f"{max(rep.times_ms):.1f}",
                f"{rep.client_cpu_s * 1000 / rep.replays:.1f}",
                f"{rep.relay_cpu_s * 1000 / rep.replays:.1f}",
                rep.warnings,
            ]
        )
    print_table(
        [
            "relay",
            "filter",
            "replays",
            "events each",
            "p50 ms",
            "p99 ms",
            "max ms",
            "client CPU ms",
            "relay CPU ms",
            "relay warnings",
        ],
        replay_rows,
    )
    samples = [(f"store {name}", b.warnings, b.warning_sample) for name, b in loads.items()]
    samples += [
        (f"{r.relay} {r.transport} round {r.round}", r.warnings, r.warning_sample) for r in rounds
    ]
    if any(count for _, count, _ in samples):
        print()
        print(
            f"Warnings the servers logged ({PEER_LOG.name}, {RELAY_LOG.name}), first of each phase:"
        )
        for phase, count, sample in samples:
            if count:
                print(f"  {phase}: {count}, e.g. {sample}")



def _targets(measured: Measured) -> tuple[list[list[Any]], dict[str, float]]:
    """Issue 20's targets, printed; (the targets, the rates they were read from)."""
    rounds, replays, peer, buzz = measured.rounds, measured.replays, measured.peer, measured.buzz
    peer_ws = _rate(rounds, peer.name, "WS EVENT")
    buzz_ws = _rate(rounds, buzz.name, "WS EVENT")
    buzz_http = _rate(rounds, buzz.name, "POST /event")
    peer_rep, buzz_rep = replays[peer.name], replays[buzz.name]
    peer_p50, buzz_p50 = _percentile(peer_rep.times_ms, 0.5), _percentile(buzz_rep.times_ms, 0.5)
    peer_p99, buzz_p99 = _percentile(peer_rep.times_ms, 0.99), _percentile(buzz_rep.times_ms, 0.99)
    replays_ok = all(set(rep.counts) == {REPLAY_LIMIT} for rep in replays.values())
    targets = [
        [
            "relay WS EVENT/s / peer EVENT/s",
            f"{buzz_ws:.0f} / {peer_ws:.0f}",
            f"{buzz_ws / peer_ws:.2f}",
            ">= 1.5",
            buzz_ws >= 1.5 * peer_ws,
        ],
        [
            "relay WS EVENT/s / relay POST /event/s",
            f"{buzz_ws:.0f} / {buzz_http:.0f}",
            f"{buzz_ws / buzz_http:.2f}",
            ">= 1.0",
            buzz_ws >= buzz_http,
        ],
        [
            "replay p50: relay / peer",
            f"{buzz_p50:.1f} / {peer_p50:.1f} ms",
            f"{buzz_p50 / peer_p50:.2f}",
            "<= 1.0",
            buzz_p50 <= peer_p50,
        ],
        [
            "replay p99: relay (peer)",
            f"{buzz_p99:.1f} ({peer_p99:.1f}) ms",
            "",
            "< 35 ms",
            buzz_p99 < 35.0,
        ],
        ["every replay returned 500 events", "", "", "", replays_ok],
    ]
    print()
    print("Targets (issue 20)")
    print_table(
        ["figure", "values", "ratio", "target", "met"],
        [[*t[:4], "yes" if t[4] else "NO"] for t in targets],
    )

    return targets, {"peer_ws": peer_ws, "relay_ws": buzz_ws, "relay_http": buzz_http}


def _write_figures(
    args: argparse.Namespace,
    measured: Measured,
    peer_version: list[str],
    targets: list[list[Any]],
    rates: dict[str, float],
    load_before: tuple[float, float, float],
    load_after: tuple[float, float, float],
) -> None:
    server_version, rounds, loads, replays = (
        measured.server_version, measured.rounds, measured.loads, measured.replays
    )
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "peer.json").write_text(
        json.dumps(
            {
                "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "args": {k: str(v) if isinstance(v, Path) else v
                         for k, v in vars(args).items() if k != "database_url"},
                "postgresql": server_version,
                "load_average": {"start": load_before, "end": load_after},
                "peer": dict(
                    zip(
                        ["nostr-relay", "sqlalchemy", "asyncpg", "uvicorn", "python"],
                        peer_version,
                        strict=False,
                    )
                )
                | {"workers": args.workers, "num_concurrent_adds": args.connections},
                "stored": {
                    name: {
                        "seconds": b.elapsed,
                        "accepted": b.accepted,
                        "p50_ms": _percentile(b.latencies_ms, 0.5),
                        "p99_ms": _percentile(b.latencies_ms, 0.99),
                        "warnings": b.warnings,
                        "warning_sample": b.warning_sample,
                    }
                    for name, b in loads.items()
                },
                "event_rounds": [asdict(r) for r in rounds],
                "replays": {
                    rep.relay: {
                        "filter": rep.filter,
                        "replays": rep.replays,
                        "counts": dict(rep.counts),
                        "p50_ms": _percentile(rep.times_ms, 0.5),
                        "p99_ms": _percentile(rep.times_ms, 0.99),
                        "max_ms": max(rep.times_ms),
                        "mean_ms": statistics.fmean(rep.times_ms),
                        "client_cpu_ms_per_replay": rep.client_cpu_s * 1000 / rep.replays,
                        "relay_cpu_ms_per_replay": rep.relay_cpu_s * 1000 / rep.replays,
                        "warnings": rep.warnings,
                    }
                    for rep in replays.values()
                },
                "rates": rates,
                "targets": {t[0]: bool(t[4]) for t in targets},
            },
            indent=2,
        )
    )
    print(f"\nfigures written to {OUT / 'peer.json'}")


if __name__ == "__main__":
    sys.exit(main())
