"""Where a quiet continuation round's relay CPU goes: the whole ASGI application in-process.

The round is the one `bench/load.py` drives with wrk (`POST /query`, NIP-98 signed, each
request its own event id, nothing pending), but sent straight into `buzzrelay.asgi.application`
on one event loop: no socket, no uvicorn, no load generator sharing the cores. So the figures
are the relay's own work per round, in CPU time of the one thread that does it (the asyncio
pool's reads run on the same loop), and the statements' server time is PostgreSQL's, not ours.

It prints CPU microseconds per round (the median of `--runs` runs of `--rounds` rounds), the
same for the round's floor (bench/round_floor.py's round, on one connection of the same loop,
interleaved with the relay's runs), so the difference is the relay's own code; the
Python calls per round, and, with `--profile`, the functions that spent the most of it
(cProfile, wall-clock: the time waiting for PostgreSQL shows as the event loop's `select`).

    .venv/bin/python bench/profile_round.py                    # CPU us/round, calls/round
    .venv/bin/python bench/profile_round.py --profile --top 30
    .venv/bin/python bench/profile_round.py --commit-ab        # the quiet page's COMMIT, A/B

`--commit-ab` alternates runs of the driver as it is (a quiet page read whole in the page's
first message: the fence, the lookup, the first statement and COMMIT, `async_reads`), runs
where it guesses no page before the lookup (the first statement and COMMIT in a second
message), and runs where it never guesses a page quiet (the COMMIT a round trip of its own),
and prints for each the relay's CPU and PostgreSQL's (the database's server processes, read
from /proc: the server must be on this machine) per round.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import os
import pstats
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._harness import print_table, relay_env, services  # noqa: E402
from bench.load import HOST, READER_SECRET, migrate_and_community, prepare  # noqa: E402
from nostr.nip98 import make_nip98_header  # noqa: E402

PORT = 8000
URL = f"http://{HOST}:{PORT}/query"


def http_scope(headers: list[tuple[bytes, bytes]], path: str = "/query") -> dict[str, Any]:
    return {
        "type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1", "method": "POST", "scheme": "http", "path": path,
        "raw_path": path.encode(), "query_string": b"", "root_path": "",
        "headers": headers, "server": (HOST, PORT), "client": ("127.0.0.1", 50000),
    }


async def post(
    app: Any, body: bytes, authorization: str, path: str = "/query"
) -> tuple[int, bytes]:
    headers = [
        (b"host", f"{HOST}:{PORT}".encode()), (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()), (b"authorization", authorization.encode()),
    ]
    sent = False
    status = 0
    chunks: list[bytes] = []

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        await asyncio.Event().wait()  # the client stays connected
        raise AssertionError

    async def send(message: dict[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
        elif message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))

    await app(http_scope(headers, path), receive, send)
    return status, b"".join(chunks)


def query_body(progress: str | None) -> bytes:
    return orjson.dumps([{"artifact": "current", "progress": progress, "limit": 1000}])


async def quiet_token(app: Any) -> str:
    """A finished round's token: the next round with it is a quiet continuation."""
    progress = None
    while True:
        body = query_body(progress)
        status, raw = await post(app, body, make_nip98_header(
            READER_SECRET, url=URL, method="POST", body=body))
        assert status == 200, raw
        page = orjson.loads(raw)
        progress = page["progress"]
        if not page["more"]:
            return str(progress)


async def rounds(app: Any, body: bytes, headers: list[str]) -> None:
    for authorization in headers:
        status, raw = await post(app, body, authorization)
        if status != 200:
            raise RuntimeError(f"/query answered {status}: {raw[:300]!r}")


class Floor:
    """The round's floor (bench/round_floor.py: the relay's recorded statements, a bare verify,
    the Redis claim) on one connection of `loop`, timed in CPU of this thread."""

    def __init__(self, loop: asyncio.AbstractEventLoop, redis_url: str) -> None:
        import redis.asyncio
        from coincurve import PublicKeyXOnly

        from bench.round_floor import connect_floor, floor_job, record_round

        self.loop = loop
        self.job = floor_job(record_round(READER_SECRET, HOST), redis_url=redis_url,
                             connections=1, seconds=0)
        self.key = PublicKeyXOnly(self.job.pubkey)
        self.conn = loop.run_until_complete(connect_floor(self.job))
        self.client = redis.asyncio.Redis.from_url(redis_url)

    def rounds(self, count: int) -> float:
        """CPU us per round of `count` floor rounds, one at a time."""
        from bench.round_floor import floor_round

        async def run() -> None:
            for _ in range(count):
                await floor_round(self.job, self.key, self.conn, self.client)

        started = time.thread_time()
        self.loop.run_until_complete(run())
        return (time.thread_time() - started) / count * 1e6

    def close(self) -> None:
        self.loop.run_until_complete(self.conn.close())
        self.loop.run_until_complete(self.client.aclose())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1000, help="artifacts the reader holds")
    parser.add_argument("--rounds", type=int, default=1000, help="rounds per run")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--save", metavar="FILE", help="write the cProfile stats to FILE")
    parser.add_argument("--loop", choices=["asyncio", "uvloop"], default="asyncio",
                        help="the event loop (the served relay runs on uvloop)")
    parser.add_argument("--commit-ab", action="store_true",
                        help="alternate the quiet page in the first message, in a second, and"
                             " its COMMIT apart")
    args = parser.parse_args()

    with services() as svc:
        migrate_and_community(svc)
        prepare(svc, args.n)
        os.environ.update(relay_env(
            svc, RELAY_RATE_LIMIT_ADDRESS_RATE="0", RELAY_RATE_LIMIT_PUBKEY_RATE="0"))
        from buzzrelay.asgi import application

        loop = new_event_loop(args.loop)
        token = loop.run_until_complete(quiet_token(application))
        body = query_body(token)

        def signed(count: int) -> list[str]:
            return [make_nip98_header(READER_SECRET, url=URL, method="POST", body=body)
                    for _ in range(count)]

        loop.run_until_complete(rounds(application, body, signed(300)))  # warm
        if args.commit_ab:
            commit_ab(loop, application, body, signed, args)
            loop.close()
            return 0
        floor = Floor(loop, svc.redis_url)
        floor.rounds(300)  # warm
        cpu: list[float] = []
        floor_cpu: list[float] = []
        for _ in range(args.runs):  # interleaved: relay, floor, relay, floor, ...
            headers = signed(args.rounds)
            started = time.thread_time()
            loop.run_until_complete(rounds(application, body, headers))
            cpu.append((time.thread_time() - started) / args.rounds * 1e6)
            floor_cpu.append(floor.rounds(args.rounds))
        floor.close()
        profiler = cProfile.Profile()
        headers = signed(args.rounds)
        profiler.enable()
        loop.run_until_complete(rounds(application, body, headers))
        profiler.disable()
        stats = pstats.Stats(profiler)
        calls = sum(entry[1] for entry in stats.stats.values())  # type: ignore[attr-defined]
        relay, bare = statistics.median(cpu), statistics.median(floor_cpu)
        print(f"quiet continuation round, in-process: {relay:.0f} us CPU"
              f" (median of {args.runs} x {args.rounds}; runs {[round(c) for c in cpu]}),"
              f" {calls / args.rounds:.0f} Python calls per round")
        print(f"its floor (bench/round_floor.py's round on one connection, same loop):"
              f" {bare:.0f} us CPU (runs {[round(c) for c in floor_cpu]});"
              f" the relay's own code {relay - bare:.0f} us a round, relay / floor CPU"
              f" {relay / bare:.2f}x")
        if args.save:
            stats.dump_stats(args.save)
        if args.profile:
            stats.sort_stats("tottime").print_stats(args.top)
            stats.sort_stats("cumulative").print_stats(args.top)
        loop.close()
    return 0


def new_event_loop(kind: str) -> asyncio.AbstractEventLoop:
    if kind == "uvloop":
        import uvloop

        return uvloop.new_event_loop()
    return asyncio.new_event_loop()


def commit_ab(loop: asyncio.AbstractEventLoop, app: Any, body: bytes, signed: Any,
              args: argparse.Namespace) -> None:
    """`--commit-ab`: relay and server CPU per quiet round, the page in the first message,
    in a second message with its COMMIT, and with its COMMIT a round trip of its own, runs
    alternated."""
    from artifacts.selectors import async_reads

    expect, remember = async_reads._expect_quiet, async_reads._remember_host
    never_quiet, remember_none = (lambda community: False), (lambda host, community: None)
    # (is a page guessed quiet, are hosts remembered: without them no guess before the lookup)
    sides: dict[str, Any] = {"first message": (expect, remember),
                             "second message": (expect, remember_none),
                             "COMMIT apart": (never_quiet, remember_none)}
    cpu: dict[str, list[tuple[float, float]]] = {side: [] for side in sides}
    for _ in range(args.runs):
        for side, (expect_quiet, remember_host) in sides.items():
            async_reads._expect_quiet = expect_quiet
            async_reads._remember_host = remember_host
            async_reads._community_at.clear()
            loop.run_until_complete(rounds(app, body, signed(1)))  # remembers the host, or not
            headers = signed(args.rounds)
            started, server = time.thread_time(), server_cpu()
            loop.run_until_complete(rounds(app, body, headers))
            cpu[side].append(((time.thread_time() - started) / args.rounds * 1e6,
                              (server_cpu() - server) / args.rounds * 1e6))
    async_reads._expect_quiet, async_reads._remember_host = expect, remember
    print(f"quiet continuation round, in-process, CPU us per round (median of {args.runs} x"
          f" {args.rounds}, sides alternated)")
    rows = [[side, f"{statistics.median(r for r, _ in runs):.0f}",
             f"{statistics.median(s for _, s in runs):.0f}",
             f"{statistics.median(r + s for r, s in runs):.0f}",
             ", ".join(f"{r:.0f}+{s:.0f}" for r, s in runs)] for side, runs in cpu.items()]
    print_table(["driver", "relay", "PostgreSQL", "both", "per run (relay+server)"], rows)


def server_cpu() -> float:
    """CPU seconds so far of this database's server processes (/proc: a local server)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pid FROM pg_stat_activity WHERE datname = current_database()")
        pids = [pid for (pid,) in cursor.fetchall()]
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except FileNotFoundError:
            continue  # ended since
        total += (int(fields[11]) + int(fields[12])) / ticks  # utime, stime
    return total


if __name__ == "__main__":
    raise SystemExit(main())
