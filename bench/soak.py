"""Soak: a bounded run of mixed writes, incremental rounds and WebSocket subscribers on loopback.

Starts its own deployment (embedded PostgreSQL and Redis, `--relays` `buzz-admin serve`
instances; tests/faults/deployment.py), runs for `--seconds`, samples every relay's memory and
the database's relay connections once a second, and judges (issue 9):

- zero 5xx answers;
- relay memory (RSS) growth under 10% from the end of the warm-up (a fifth of the run, at most
  two minutes) to the end;
- relay database connections stable: no upward trend after warm-up (the mean of the last third
  of the samples at most 1.25 times the mean of the first third, plus 10);
- every collection converged: after a quiet final round, equal to a fresh full read;
- every WebSocket subscriber still live at the end (a last event reaches each of them).

    .venv/bin/python bench/soak.py --seconds 60        # what CI runs (tests/fleet/test_soak.py)
    .venv/bin/python bench/soak.py --seconds 600       # the report's run (docs/reliability.md)

Prints the figures and exits 1 when a criterion fails. Rate limits are lifted for the run.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
import psutil  # noqa: E402

from tests.faults.clients import (  # noqa: E402
    Client,
    Collection,
    WsClient,
    d_of,
    fresh_full_read,
)
from tests.faults.deployment import Deployment, Relay, deployment  # noqa: E402

KINDS = [45010, 45011]
UNLIMITED = {
    "RELAY_RATE_LIMIT_ADDRESS_RATE": "0",
    "RELAY_RATE_LIMIT_PUBKEY_RATE": "0",
}


@dataclass
class SoakReport:
    seconds: float
    relays: int
    requests: int = 0
    writes: int = 0
    rounds: int = 0
    resets: int = 0
    live_events: int = 0
    statuses: dict[int, int] = field(default_factory=dict)
    rss_mb_after_warmup: list[float] = field(default_factory=list)
    rss_mb_end: list[float] = field(default_factory=list)
    rss_growth_pct: float = 0.0
    db_connections_first_third_mean: float = 0.0
    db_connections_last_third_mean: float = 0.0
    db_connections_min: int = 0
    db_connections_max: int = 0
    collections: int = 0
    converged: int = 0
    subscribers_live: int = 0
    subscribers: int = 0
    write_latency_ms_p50: float = 0.0
    write_latency_ms_p99: float = 0.0
    round_latency_ms_p50: float = 0.0
    round_latency_ms_p99: float = 0.0
    failures: list[str] = field(default_factory=list)
    # (seconds since start, relay connections, total relay RSS in MiB), every 5 s.
    samples: list[tuple[int, int, float]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failures


class CountingClient(Client):
    """Counts answers by status and spreads requests over the relays."""

    def __init__(self, relays: list[Relay], index: int, counter: Counter[int],
                 lock: threading.Lock, secret: str | None = None) -> None:
        super().__init__(relays[index % len(relays)].url, secret)
        self.counter, self.lock = counter, lock

    def post(self, path: str, payload: Any, *, authorization: str | None = None
             ) -> httpx.Response:
        response = super().post(path, payload, authorization=authorization)
        with self.lock:
            self.counter[response.status_code] += 1
        return response


def _percentile(values: list[float], pct: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * pct / 100))]


def run_soak(seconds: float, *, relays: int = 2, writers: int = 3, readers: int = 4,
             subscribers: int = 4, warmup: float | None = None) -> SoakReport:
    """Run the soak for `seconds` on a deployment of its own; the report says what held."""
    warmup = warmup if warmup is not None else min(120.0, max(10.0, seconds / 5))
    report = SoakReport(seconds=seconds, relays=relays)
    with deployment("soak") as dep:
        dep.create_community()
        fleet = [dep.start_relay(env=UNLIMITED) for _ in range(relays)]
        _soak(dep, fleet, report, seconds=seconds, warmup=warmup, writers=writers,
              readers=readers, subscribers=subscribers)
    return report


def _soak(dep: Deployment, fleet: list[Relay], report: SoakReport, *, seconds: float,
          warmup: float, writers: int, readers: int, subscribers: int) -> None:
    counter: Counter[int] = Counter()
    lock = threading.Lock()
    owner = CountingClient(fleet, 0, counter, lock)
    channels = [owner.create_channel(name=f"soak-{i}") for i in range(3)]
    private = owner.create_channel(private=True, name="soak-private")
    channels.append(private)
    reader_clients = [CountingClient(fleet, i, counter, lock) for i in range(readers)]
    for reader in reader_clients[::2]:
        owner.put_member(private, reader.pubkey)
    collections = [
        Collection(reader, {} if i % 2 else {"#h": [*channels[:2], private]})
        for i, reader in enumerate(reader_clients)
    ]
    stop = threading.Event()
    errors: list[BaseException] = []
    write_ms: list[float] = []
    round_ms: list[float] = []
    live = Counter[int]()

    def guard(body: Any, *args: Any) -> None:
        try:
            body(*args)
        except BaseException as exc:  # reported below
            errors.append(exc)
            stop.set()

    def write_loop(index: int) -> None:
        rng = random.Random(index)
        client = CountingClient(fleet, index, counter, lock, owner.secret)
        heads: dict[str, dict[str, Any]] = {}
        while not stop.is_set():
            if heads and rng.random() < 0.6:
                head = heads[rng.choice(list(heads))]
                channel = next(t[1] for t in head["tags"] if t[0] == "h")
                op = next(t[1] for t in head["tags"] if t[0] == "op")
                choice = "restore" if op == "delete" else rng.choice(["update"] * 4 + ["delete"])
                event = client.artifact(channel, op=choice, d=d_of(head), prev=head["id"],
                                        content="x" * rng.randint(0, 2000))
            else:
                event = client.artifact(rng.choice(channels), content="y" * rng.randint(0, 500))
            started = time.monotonic()
            answer = client.post("/event", event).json()
            write_ms.append((time.monotonic() - started) * 1000)
            if answer[2] is True:
                heads[d_of(event)] = event
            time.sleep(0.02)

    def sync_loop(collection: Collection) -> None:
        while not stop.is_set():
            started = time.monotonic()
            collection.round()
            round_ms.append((time.monotonic() - started) * 1000)
            time.sleep(0.3)

    def subscribe_loop(index: int, ws: WsClient) -> None:
        while not stop.is_set():
            message = ws.recv(timeout=0.5)
            if message is not None and message[0] == "EVENT":
                live[index] += 1

    sockets = []
    for index in range(subscribers):
        relay = fleet[index % len(fleet)]
        ws = WsClient(relay.port, [reader_clients[index % len(reader_clients)].secret])
        ws.req("live", {"kinds": KINDS, "#h": channels[:2]})
        sockets.append(ws)
    threads = [threading.Thread(target=guard, args=(write_loop, i), daemon=True)
               for i in range(writers)]
    threads += [threading.Thread(target=guard, args=(sync_loop, c), daemon=True)
                for c in collections]
    threads += [threading.Thread(target=guard, args=(subscribe_loop, i, ws), daemon=True)
                for i, ws in enumerate(sockets)]
    processes = [psutil.Process(relay.pid) for relay in fleet]
    for thread in threads:
        thread.start()

    started = time.monotonic()
    connections: list[tuple[float, int]] = []
    rss_warm: list[float] | None = None
    while time.monotonic() - started < seconds and not stop.is_set():
        elapsed = time.monotonic() - started
        connections.append((elapsed, _relay_connections(dep)))
        if len(connections) % 5 == 1:
            report.samples.append((int(elapsed), connections[-1][1],
                                   round(sum(_rss_mb(p) for p in processes), 1)))
        if rss_warm is None and elapsed >= warmup:
            rss_warm = [_rss_mb(p) for p in processes]
        time.sleep(1)
    stop.set()
    for thread in threads:
        thread.join(60)
    report.rss_mb_end = [_rss_mb(p) for p in processes]
    report.rss_mb_after_warmup = rss_warm or report.rss_mb_end
    report.rss_growth_pct = round(max(
        (end - warm) / warm * 100
        for warm, end in zip(report.rss_mb_after_warmup, report.rss_mb_end, strict=True)
    ), 1)
    after = [n for t, n in connections if t >= warmup] or [0]
    third = max(1, len(after) // 3)
    report.db_connections_first_third_mean = round(statistics.mean(after[:third]), 1)
    report.db_connections_last_third_mean = round(statistics.mean(after[-third:]), 1)
    report.db_connections_min, report.db_connections_max = min(after), max(after)

    # Every subscriber still hears the live stream: one more event reaches each.
    last = owner.artifact(channels[0], title="last")
    owner.publish(last)
    report.subscribers = len(sockets)
    for ws in sockets:
        report.subscribers_live += _hears(ws, last["id"])
        ws.close()
    for collection in collections:
        collection.catch_up()
        report.converged += collection.ids() == fresh_full_read(collection.client,
                                                                collection.filter)
    report.collections = len(collections)
    report.resets = sum(c.resets for c in collections)
    report.statuses = dict(sorted(counter.items()))
    report.requests = sum(counter.values())
    report.writes = len(write_ms)
    report.rounds = len(round_ms)
    report.live_events = sum(live.values())
    report.write_latency_ms_p50 = round(statistics.median(write_ms), 1) if write_ms else 0.0
    report.write_latency_ms_p99 = round(_percentile(write_ms, 99), 1)
    report.round_latency_ms_p50 = round(statistics.median(round_ms), 1) if round_ms else 0.0
    report.round_latency_ms_p99 = round(_percentile(round_ms, 99), 1)
    _judge(report, errors)


def _judge(report: SoakReport, errors: list[BaseException]) -> None:
    failures = report.failures
    failures += [f"client error: {type(e).__name__}: {e}"[:300] for e in errors]
    server_errors = {s: n for s, n in report.statuses.items() if s >= 500}
    if server_errors:
        failures.append(f"5xx answers: {server_errors}")
    if report.rss_growth_pct >= 10:
        failures.append(f"relay memory grew {report.rss_growth_pct:.1f}% after warm-up")
    if report.db_connections_last_third_mean > 1.25 * report.db_connections_first_third_mean + 10:
        failures.append(
            "relay database connections grew: mean"
            f" {report.db_connections_first_third_mean} after warm-up,"
            f" {report.db_connections_last_third_mean} at the end"
        )
    if report.converged != report.collections:
        failures.append(f"{report.collections - report.converged} collections diverged")
    if report.subscribers_live != report.subscribers:
        failures.append(f"{report.subscribers - report.subscribers_live} subscribers went deaf")
    if report.writes == 0 or report.rounds == 0:
        failures.append("no traffic ran")


def _relay_connections(dep: Deployment) -> int:
    return int(dep.sql(
        "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE 'buzzrelay/%%'"
    )[0][0])


def _rss_mb(process: psutil.Process) -> float:
    """RSS of a relay and its children (uvicorn may fork workers)."""
    total = process.memory_info().rss
    for child in process.children(recursive=True):
        total += child.memory_info().rss
    return round(total / 2**20, 1)


def _hears(ws: WsClient, event_id: str) -> bool:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        message = ws.recv(timeout=1)
        if message and message[0] == "EVENT" and message[2]["id"] == event_id:
            return True
    return False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--relays", type=int, default=2)
    parser.add_argument("--writers", type=int, default=3)
    parser.add_argument("--readers", type=int, default=4)
    parser.add_argument("--subscribers", type=int, default=4)
    parser.add_argument("--json", type=Path, help="also write the report as JSON here")
    args = parser.parse_args(argv)
    report = run_soak(args.seconds, relays=args.relays, writers=args.writers,
                      readers=args.readers, subscribers=args.subscribers)
    figures = asdict(report)
    for key, value in figures.items():
        if key != "samples":
            print(f"{key:28} {value}")
    print("samples (s, relay db connections, relay RSS MiB):", figures["samples"])
    print("PASS" if report.ok else "FAIL")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
