#!/usr/bin/env python
"""Client benchmark: a full round of N artifacts into SQLite, and continuation rounds with 10
changes, end to end against a real relay (`buzz-admin serve` on a database of its own).

    .venv/bin/python bench/client.py                 # N = 2,000 and 10,000
    .venv/bin/python bench/client.py --n 10000 100000

For each N: a fresh PostgreSQL database is migrated and seeded with N real signed artifacts
(fast COPY into events, artifact_revisions and artifact_heads, the rows the writers would have
left), a relay is started on it, and

- the full round runs in a child process (`buzz-sync` code, page limit 1000, ids and signatures
  verified, and again without verification), reporting seconds, items/s and the child's peak
  RSS (its RSS just before the round, i.e. the interpreter and imports, shown separately, so
  the growth is what the round itself costs; it should stay flat as N grows);
- `--changes` artifacts are updated through `POST /event` (NIP-98 signed) and a continuation
  round is timed, `--repeat` times (median and max in milliseconds, NIP-11 discovery included).

Needs PostgreSQL (DATABASE_URL's server; default postgres://postgres@127.0.0.1:5432) and Redis.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from multiprocessing import Pool
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
import orjson  # noqa: E402
import psycopg  # noqa: E402

from buzzrelay.embedded import free_port  # noqa: E402
from nostr.events import sign, sign_event  # noqa: E402
from nostr.schnorr import generate_secret, pubkey_from_secret  # noqa: E402

RELAY_SECRET = "6a1b6c6e2d4a7b3c9e8f0a1b2c3d4e5f60718293a4b5c6d7e8f9a0b1c2d3e4f5"
HOST = "127.0.0.1"
CHANNELS = 20

# The round runs in a child so its memory is its own. Peak RSS is the kernel's high-water mark
# of the child's address space (VmHWM): ru_maxrss would carry over the parent's size through
# fork and exec.
CHILD = """
import json, sys, time
from buzzclient import Syncer

def hwm_kib():
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))

relay, secret, db, verify = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] == "1"
before = hwm_kib()
with Syncer(relay_url=relay, secret_hex=secret, db=db, verify=verify) as syncer:
    started, cpu = time.perf_counter(), time.process_time()
    summary = syncer.run_round()
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    stored = syncer.store.db.execute("SELECT count(*) FROM collection_artifacts").fetchone()[0]
print(json.dumps({"seconds": seconds, "cpu_seconds": cpu, "relay_seconds": summary.relay_seconds,
                  "items": summary.items, "pages": summary.pages, "kind": summary.kind,
                  "stored": stored, "rss_before_kib": before, "rss_peak_kib": hwm_kib()}))
"""


def _sign(job: tuple[str, list[tuple[str, str, int]]]) -> list[dict[str, Any]]:
    secret, items = job
    return [
        sign_event(
            secret,
            kind=45010,
            tags=[["ar", "1"], ["d", d], ["h", h], ["type", "buzz.task"], ["op", "create"],
                  ["title", f"Task {i}"]],
            content=orjson.dumps({"version": 1, "body": f"artifact number {i} " * 4}).decode(),
            created_at=int(time.time()) - 3 * 86400 + i,
        )
        for d, h, i in items
    ]


def sign_all(secret: str, n: int, channels: list[str]) -> list[dict[str, Any]]:
    items = [(str(uuid.uuid4()), channels[i % len(channels)], i) for i in range(n)]
    chunk = 2000
    jobs = [(secret, items[i : i + chunk]) for i in range(0, n, chunk)]
    with Pool(processes=os.cpu_count() or 2) as pool:
        return [event for part in pool.map(_sign, jobs) for event in part]


def prepare_database(admin_url: str, name: str) -> str:
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    url = admin_url.rsplit("/", 1)[0] + f"/{name}"
    env = {**os.environ, "DATABASE_URL": url, "RELAY_SIGNING_KEY": RELAY_SECRET}
    subprocess.run([sys.executable, "-m", "buzzrelay.cli", "migrate"], cwd=ROOT, env=env,
                   check=True, capture_output=True)
    return url


def seed(url: str, n: int, author: str, reader_pubkey: str) -> None:
    """N artifacts in CHANNELS open channels, as the writers would have stored them."""
    channels = [str(uuid.uuid4()) for _ in range(CHANNELS)]
    events = sign_all(author, n, channels)
    base = datetime.now(UTC) - timedelta(days=1)
    with psycopg.connect(url) as conn:
        community_id = conn.execute(
            "INSERT INTO communities (host, name, admin_pubkeys, artifacts_enabled,"
            " open_channel_creation, listing_version) VALUES (%s, 'bench', %s, true, false, 1)"
            " RETURNING id",
            [HOST, [reader_pubkey]],
        ).fetchone()[0]  # type: ignore[index]
        for h in channels:
            conn.execute(
                "INSERT INTO channels (community_id, channel_id, name, visibility, created_by)"
                " VALUES (%s, %s, %s, 'open', %s)",
                [community_id, h, f"channel {h[:8]}", pubkey_from_secret(author)],
            )
        with conn.cursor() as cur:
            with cur.copy(
                "COPY events (community_id, event_id, pubkey, kind, created_at, channel_id, raw)"
                " FROM STDIN"
            ) as copy:
                for event in events:
                    copy.write_row([community_id, event["id"], event["pubkey"], 45010,
                                    event["created_at"], event["tags"][2][1],
                                    orjson.dumps(event).decode()])
            with cur.copy(
                "COPY artifact_revisions (community_id, event_id, artifact_id, channel_id, op,"
                " created_at, modified_at) FROM STDIN"
            ) as copy:
                for i, event in enumerate(events):
                    copy.write_row([community_id, event["id"], event["tags"][1][1],
                                    event["tags"][2][1], "create", event["created_at"],
                                    base + timedelta(milliseconds=i)])
            with cur.copy(
                "COPY artifact_heads (community_id, artifact_id, event_id, channel_id,"
                " artifact_type, deleted, created_at, modified_at) FROM STDIN"
            ) as copy:
                for i, event in enumerate(events):
                    copy.write_row([community_id, event["tags"][1][1], event["id"],
                                    event["tags"][2][1], "buzz.task", False,
                                    event["created_at"], base + timedelta(milliseconds=i)])
        conn.commit()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")


class Relay:
    def __init__(self, url: str, redis_url: str) -> None:
        self.port = free_port()
        self.url = f"http://{HOST}:{self.port}"
        env = {**os.environ, "DATABASE_URL": url, "REDIS_URL": redis_url,
               "RELAY_SIGNING_KEY": RELAY_SECRET, "RELAY_RATE_LIMIT_PUBKEY_RATE": "0",
               "RELAY_RATE_LIMIT_ADDRESS_RATE": "0"}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "buzzrelay.cli", "serve", "--host", HOST,
             "--port", str(self.port)],
            cwd=ROOT, env=env,
        )
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("relay did not start")
            time.sleep(0.2)

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(20)


def full_round(relay: Relay, reader: str, verify: bool) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        child = subprocess.Popen(
            [sys.executable, "-c", CHILD, relay.url, reader, str(Path(tmp) / "c.sqlite"),
             "1" if verify else "0"],
            cwd=ROOT, stdout=subprocess.PIPE, text=True,
        )
        assert child.stdout is not None
        out = child.stdout.read()
        if child.wait() != 0:
            raise SystemExit(f"client round failed (status {child.returncode})")
        result: dict[str, Any] = json.loads(out)
        return result


def continuation_rounds(
    relay: Relay, reader: str, author: str, changes: int, repeat: int
) -> tuple[list[float], list[float], list[float]]:
    """Milliseconds per continuation round: pages only, their relay share, NIP-11 discovery."""
    from buzzclient import RelayAddress, RelayHttp, Syncer

    timings, relay_ms, nip11_ms = [], [], []
    with tempfile.TemporaryDirectory() as tmp, \
            RelayHttp(RelayAddress.parse(relay.url), author) as writer, \
            Syncer(relay_url=relay.url, secret_hex=reader, db=Path(tmp) / "c.sqlite") as syncer:
        syncer.run_round()
        for _ in range(repeat):
            for event in list(syncer.artifacts().values())[:changes]:
                tags = [list(t) for t in event.tags if t[0] not in ("op", "prev", "title")]
                tags += [["op", "update"], ["prev", event.id], ["title", "changed"]]
                update = sign(author, kind=45010, tags=tags, content=event.content)
                accepted, message = writer.publish(update)
                if not accepted:
                    raise SystemExit(f"update refused: {message}")
            started = time.perf_counter()
            info = syncer.relay_info()
            discovered = time.perf_counter()
            summary = syncer.run_round(info=info)
            timings.append((time.perf_counter() - discovered) * 1000)
            nip11_ms.append((discovered - started) * 1000)
            relay_ms.append(summary.relay_seconds * 1000)
            if summary.kind != "continuation" or summary.updated != changes:
                raise SystemExit(f"expected a continuation with {changes} updates: {summary}")
    return timings, relay_ms, nip11_ms


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, nargs="+", default=[2000, 10000])
    parser.add_argument("--changes", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--database-url", default=os.environ.get(
        "BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres"))
    parser.add_argument("--redis-url", default=os.environ.get(
        "BENCH_REDIS_URL", "redis://127.0.0.1:6379/6"))
    parser.add_argument("--no-unverified", action="store_true",
                        help="skip the extra full round without signature checks")
    parser.add_argument("--keep", action="store_true",
                        help="keep the seeded database (buzz_client_bench) afterwards")
    args = parser.parse_args()

    author, reader = generate_secret(), generate_secret()
    rows = []
    for n in args.n:
        started = time.perf_counter()
        url = prepare_database(args.database_url, "buzz_client_bench")
        seed(url, n, author, pubkey_from_secret(reader))
        print(f"N={n:,}: seeded in {time.perf_counter() - started:.1f} s", file=sys.stderr)
        relay = Relay(url, args.redis_url)
        try:
            verified = full_round(relay, reader, verify=True)
            assert verified["stored"] == n and verified["kind"] == "full", verified
            plain = None if args.no_unverified else full_round(relay, reader, verify=False)
            conts = continuation_rounds(relay, reader, author, args.changes, args.repeat)
        finally:
            relay.stop()
        rows.append((n, verified, plain, conts))
    if not args.keep:
        with psycopg.connect(args.database_url, autocommit=True) as conn:
            conn.execute('DROP DATABASE IF EXISTS "buzz_client_bench" WITH (FORCE)')

    med = statistics.median
    print(f"\nbuzz-sync client, end to end against `buzz-admin serve` (page limit 1000, "
          f"{CHANNELS} channels, {os.cpu_count()} CPUs shared); times in s unless noted\n")
    print(f"{'N':>9} | {'full round':>10} | {'relay share':>11} | {'client CPU':>10} | "
          f"{'items/s':>8} | "
          f"{'no-verify':>9} | {'peak RSS MiB':>12} | {'before round':>12} | "
          f"{f'k={args.changes} ms p50':>11} | {'max':>6} | {'relay ms':>8} | {'NIP-11 ms':>9}")
    print("-" * 145)
    for n, verified, plain, (timings, relay_ms, nip11_ms) in rows:
        print(f"{n:>9,} | {verified['seconds']:>10.2f} | {verified['relay_seconds']:>11.2f} | "
              f"{verified['cpu_seconds']:>10.2f} | "
              f"{n / verified['seconds']:>8,.0f} | "
              f"{(plain['seconds'] if plain else float('nan')):>9.2f} | "
              f"{verified['rss_peak_kib'] / 1024:>12.1f} | "
              f"{verified['rss_before_kib'] / 1024:>12.1f} | "
              f"{med(timings):>11.1f} | {max(timings):>6.1f} | {med(relay_ms):>8.1f} | "
              f"{med(nip11_ms):>9.1f}")
    print("\nfull round: one child process, ids and signatures verified (no-verify: without); "
          "relay share: time spent waiting for /query answers; client CPU: the child's CPU "
          "time in the round;\npeak RSS: the child's high-water resident size (VmHWM), "
          "'before round' the same after imports.\nk-change continuation: pages only (NIP-11 "
          "discovery timed separately), median and max of the repeats.")
    print(f"load average during the run: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
