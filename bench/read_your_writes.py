#!/usr/bin/env python
"""Read-your-writes: how soon after `POST /event` answers `OK` a round holds the write, and what
reading the fence afresh for every round costs.

    .venv/bin/python bench/read_your_writes.py                  # 100 tries each, N = 2,000
    .venv/bin/python bench/read_your_writes.py --tries 300 --n 10000

Against a real relay (`buzz-admin serve`, one worker) on a database of its own, seeded with N
artifacts in open channels (bench/client.py's seeding):

- **write -> round**: a writer publishes one artifact; as soon as `OK` is back the reader runs
  continuation rounds (buzzclient, signatures verified) until its collection holds the write.
  Reported: how many tries the first round already held it (the contract says all, while no
  transaction older than the write is open), and p50/p99/max milliseconds from `OK` to the end
  of the round that brought it. Once on a quiet relay, once on a busy one (`--busy` threads
  publishing updates back to back while it runs).
- **watch**: `buzz-sync --watch`'s loop (`buzzclient.watch.watch`, live hints over the
  WebSocket) with the write published every `--watch-spacing` seconds; milliseconds from `OK` to
  the page that stored the write in SQLite.
- **fence cost**: the asyncio driver's start of a page (the fence, prepared, in a round trip of
  its own; then the page's `BEGIN`, settings and community lookup in one batch) against the same
  batch without the fence, on one psycopg connection, `--fence-runs` times each, alternating;
  also the fence folded into that batch (`BEGIN; fence; COMMIT; ...`, slower: not used), and the
  fence statement alone against `SELECT 1`. The difference is what each round pays for a fresh
  fence.

Needs PostgreSQL (`--database-url`, an admin connection: the benchmark creates and drops the
database `buzz_ryw_bench`) and Redis (`--redis-url`).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import psycopg  # noqa: E402

from bench.client import HOST, Relay, prepare_database, seed  # noqa: E402
from nostr.events import Event, sign  # noqa: E402
from nostr.kinds import KIND_ARTIFACT  # noqa: E402
from nostr.schnorr import generate_secret, pubkey_from_secret  # noqa: E402

DATABASE = "buzz_ryw_bench"


def _event(author: str, h: str, title: str) -> tuple[str, Event]:
    """(d, a signed create of a new artifact d in channel h)."""
    d = str(uuid.uuid4())
    tags = [["ar", "1"], ["d", d], ["h", h], ["type", "buzz.task"], ["op", "create"],
            ["title", title]]
    return d, sign(author, kind=KIND_ARTIFACT, tags=tags, content="{}")


def _percentiles(values: list[float]) -> str:
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return f"p50 {statistics.median(ordered):6.1f}  p99 {p99:6.1f}  max {ordered[-1]:6.1f}"


def _channel_of(url: str) -> str:
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT channel_id::text FROM channels LIMIT 1").fetchone()
        assert row is not None
        return str(row[0])


def write_then_round(relay: Relay, reader: str, author: str, h: str, tries: int,
                     busy: int) -> tuple[int, list[float], list[int]]:
    """(tries whose first round held the write, ms from OK to the round that did, rounds)."""
    from buzzclient import RelayAddress, RelayHttp, Syncer

    stop = threading.Event()

    def churn() -> None:
        with RelayHttp(RelayAddress.parse(relay.url), author) as noisy:
            while not stop.is_set():
                noisy.publish(_event(author, h, "noise")[1])

    noise = [threading.Thread(target=churn, daemon=True) for _ in range(busy)]
    first, latencies, rounds = 0, [], []
    with tempfile.TemporaryDirectory() as tmp, \
            RelayHttp(RelayAddress.parse(relay.url), author) as writer, \
            Syncer(relay_url=relay.url, secret_hex=reader, db=Path(tmp) / "c.sqlite") as syncer:
        info = syncer.relay_info()
        syncer.run_round(info=info)
        for thread in noise:
            thread.start()
        try:
            for _ in range(tries):
                d, event = _event(author, h, "measured")
                accepted, message = writer.publish(event)
                ok_at = time.perf_counter()
                if not accepted:
                    raise SystemExit(f"write refused: {message}")
                for attempt in range(1, 50):
                    syncer.run_round(info=info)
                    if d in syncer.heads():
                        latencies.append((time.perf_counter() - ok_at) * 1000)
                        rounds.append(attempt)
                        first += attempt == 1
                        break
                else:
                    raise SystemExit("the write never arrived")
        finally:
            stop.set()
            for thread in noise:
                thread.join(10)
    return first, latencies, rounds


def watch_latency(relay: Relay, reader: str, author: str, h: str, tries: int,
                  spacing: float) -> list[float]:
    """Milliseconds from OK to the page that stored the write in SQLite, under --watch."""
    from buzzclient import RelayAddress, RelayHttp, Syncer
    from buzzclient.sync import Round
    from buzzclient.watch import watch

    arrived: dict[str, float] = {}
    stop = threading.Event()
    latencies = []
    with tempfile.TemporaryDirectory() as tmp, \
            RelayHttp(RelayAddress.parse(relay.url), author) as writer, \
            Syncer(relay_url=relay.url, secret_hex=reader, db=Path(tmp) / "w.sqlite") as syncer:

        def on_page(current: Round) -> None:
            now = time.perf_counter()
            for d in syncer.heads():
                arrived.setdefault(d, now)

        thread = threading.Thread(target=watch, args=(syncer,), kwargs={
            "interval": 600.0, "report": lambda _s: None, "on_error": print,
            "on_page": on_page, "stop": stop}, daemon=True)
        thread.start()
        time.sleep(3)  # the first round, then the live subscription and its round
        try:
            for _ in range(tries):
                d, event = _event(author, h, "watched")
                writer.publish(event)
                ok_at = time.perf_counter()
                deadline = ok_at + 10
                while d not in arrived and time.perf_counter() < deadline:
                    time.sleep(0.001)
                if d not in arrived:
                    raise SystemExit("a watched write never arrived")
                latencies.append((arrived[d] - ok_at) * 1000)
                time.sleep(spacing)
        finally:
            stop.set()
            thread.join(10)
    return latencies


def fence_cost(url: str, runs: int) -> dict[str, float]:
    """Microseconds (medians) of a page's start with and without the fence, alternating."""
    from artifacts.selectors.budget import read_settings_sql
    from artifacts.selectors.fence import FENCE_SQL, FENCE_STATEMENT, fence_then

    lookup = f"SELECT id FROM communities WHERE host = '{HOST}'"
    begin = (f"BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY; {read_settings_sql()}; "
             f"{lookup}")
    timings: dict[str, list[float]] = {
        "page start without fence": [], "fence, then page start (two round trips)": [],
        "one batch, the fence's SQL inline": [],
        "one batch, the fence prepared (the asyncio driver)": [],
        "SELECT 1": [], "fence alone": [],
    }
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"PREPARE {FENCE_STATEMENT} AS {FENCE_SQL}")
        cursor = conn.cursor()

        def batch(sql: str) -> None:
            cursor.execute(sql.encode())
            while cursor.nextset():
                pass

        def fenced() -> None:
            cursor.execute(FENCE_SQL, prepare=True)
            batch(begin)

        steps = {
            "page start without fence": lambda: batch(begin),
            "fence, then page start (two round trips)": fenced,
            "one batch, the fence's SQL inline": lambda: batch(fence_then(begin, prepared=False)),
            "one batch, the fence prepared (the asyncio driver)": lambda: batch(
                fence_then(begin, prepared=True)),
            "SELECT 1": lambda: cursor.execute("SELECT 1", prepare=True),
            "fence alone": lambda: cursor.execute(FENCE_SQL, prepare=True),
        }
        for run in range(runs + 50):
            for name, step in steps.items():
                started = time.perf_counter()
                step()
                if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                    # COMMIT, not ROLLBACK: after a ROLLBACK psycopg deallocates the session's
                    # prepared statements (the fence's too); the transaction is read-only.
                    conn.execute("COMMIT")
                if run >= 50:  # after a warm-up
                    timings[name].append((time.perf_counter() - started) * 1e6)
        backends = conn.execute("SELECT count(*) FROM pg_stat_activity").fetchone()
    result = {name: statistics.median(values) for name, values in timings.items()}
    result["backends"] = float(backends[0]) if backends else 0.0
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--tries", type=int, default=100)
    parser.add_argument("--busy", type=int, default=2, help="writer threads on the busy relay")
    parser.add_argument("--watch-tries", type=int, default=40)
    parser.add_argument("--watch-spacing", type=float, default=0.25)
    parser.add_argument("--fence-runs", type=int, default=2000)
    parser.add_argument("--database-url", default=os.environ.get(
        "BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres"))
    parser.add_argument("--redis-url", default=os.environ.get(
        "BENCH_REDIS_URL", "redis://127.0.0.1:6379/6"))
    args = parser.parse_args()

    author, reader = generate_secret(), generate_secret()
    url = prepare_database(args.database_url, DATABASE)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "buzzrelay.settings")
    os.environ.setdefault("RELAY_SIGNING_KEY", "11" * 32)
    try:
        seed(url, args.n, author, pubkey_from_secret(reader))
        h = _channel_of(url)
        relay = Relay(url, args.redis_url)
        try:
            # Watch first: every round re-reads the last 120 s of changes (the overlap), so
            # after the busy phase's thousands of writes its rounds would mostly measure those.
            watched = watch_latency(relay, reader, author, h, args.watch_tries,
                                    args.watch_spacing)
            quiet = write_then_round(relay, reader, author, h, args.tries, busy=0)
            busy = write_then_round(relay, reader, author, h, args.tries, busy=args.busy)
        finally:
            relay.stop()
        import django

        os.environ["DATABASE_URL"] = url
        django.setup()
        fence = fence_cost(url, args.fence_runs)
    finally:
        with psycopg.connect(args.database_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{DATABASE}" WITH (FORCE)')

    print(f"\nread-your-writes against `buzz-admin serve` (1 worker), N = {args.n:,}, "
          f"{os.cpu_count()} CPUs shared; ms from the write's OK\n")
    for name, (first, latencies, rounds) in (("quiet", quiet), (f"busy ({args.busy} writers)",
                                                                  busy)):
        print(f"  write -> round, {name:<18} first round held it {first}/{len(latencies)}; "
              f"{_percentiles(latencies)}; rounds max {max(rounds)}")
    print(f"  write -> SQLite, --watch            {_percentiles(watched)}  "
          f"({len(watched)} writes, {args.watch_spacing} s apart)")
    cost = (fence["one batch, the fence prepared (the asyncio driver)"]
            - fence["page start without fence"])
    print(f"\nfence, one psycopg connection, {int(fence['backends'])} backends in "
          f"pg_stat_activity, median of {args.fence_runs} (microseconds):")
    for name, value in fence.items():
        if name != "backends":
            print(f"  {name:<52} {value:8.1f}")
    print(f"  {'fresh fence per round, in the first batch':<52} {cost:8.1f}  (the statement "
          f"alone costs {fence['fence alone'] - fence['SELECT 1']:.1f} over SELECT 1)")
    print(f"load average during the run: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
