"""WebSocket sync: delivery latency from an accepted write to its subscribers, and sustained
accepted writes per second with the subscribers connected.

One relay (`buzz-admin serve`: uvicorn; rate limits off) against PostgreSQL and Redis.
For each subscriber count N (default 100 and 1,000), `--procs` client processes open N
WebSockets between them; each authenticates (NIP-42) and subscribes to one channel
(`limit: 0`: no replay, live only). Then, over separate writer connections:

1. latency: `--events` artifact creations, one at a time at `--rate` per second. Latency is the
   subscriber's receive time minus the event's `received_at` (the database's stamp when the
   relay stored it; the same machine's clock), over every (event, subscriber) pair: p50, p99,
   max, and the share delivered;
2. load: `--writers` connections write back to back for `--seconds`: accepted writes per second,
   the share of them every subscriber received, and NOTICEs (lost deliveries) seen.

Target (issue 6): p99 under 50 ms at 1,000 subscribers. On a shared 2-core machine the clients,
the relay, PostgreSQL and Redis compete for the same cores: the figures are an upper bound.

    .venv/bin/python bench/ws.py                          # N = 100 and 1,000
    .venv/bin/python bench/ws.py --subscribers 5000 --procs 4 --events 300
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._harness import (  # noqa: E402
    BENCH_HOST,
    VENV_BIN,
    Server,
    free_port,
    print_table,
    relay_env,
    services,
    setup_database,
)

READER_SECRET = "6" * 64
WRITER_SECRET = "5" * 64
UNLIMITED = {
    "RELAY_RATE_LIMIT_ADDRESS_RATE": "0",
    "RELAY_RATE_LIMIT_PUBKEY_RATE": "0",
}
LATENCY_TAG = '["phase","latency"]'


# --- subscriber processes ------------------------------------------------------------------


async def _subscriber_main(port: int, count: int, channel: str, out: Path) -> None:
    import orjson
    from websockets.asyncio.client import connect

    from nostr.nip42 import make_auth_event

    url = f"ws://{BENCH_HOST}:{port}/"
    received: dict[str, list[float]] = {}
    load_counts = [0]
    notices: list[str] = []
    ready = asyncio.Event()
    opened = [0]

    async def one(index: int) -> None:
        async with connect(url, max_size=2**22, open_timeout=60, ping_interval=None) as ws:
            challenge = orjson.loads(await ws.recv())[1]
            auth = make_auth_event(READER_SECRET, challenge=challenge, relay_url=url)
            await ws.send(orjson.dumps(["AUTH", auth]).decode())
            assert orjson.loads(await ws.recv())[2] is True
            await ws.send(orjson.dumps(
                ["REQ", "s", {"kinds": [45010], "#h": [channel], "limit": 0}]
            ).decode())
            assert orjson.loads(await ws.recv())[0] == "EOSE"
            opened[0] += 1
            if opened[0] == count:
                ready.set()
            async for frame in ws:
                now = time.time()
                assert isinstance(frame, str)
                if frame.startswith('["EVENT"'):
                    if LATENCY_TAG in frame:
                        event_id = frame[frame.index('"id":"') + 6:][:64]
                        received.setdefault(event_id, []).append(now)
                    else:
                        load_counts[0] += 1
                elif frame.startswith('["NOTICE"'):
                    notices.append(frame)

    tasks = []
    for index in range(count):
        tasks.append(asyncio.create_task(one(index)))
        if index % 50 == 49:  # stay under the listen backlog while the relay authenticates
            await asyncio.sleep(0.05)
    done_waiting = asyncio.create_task(ready.wait())
    failed = asyncio.create_task(_first_failure(tasks))
    await asyncio.wait([done_waiting, failed], return_when=asyncio.FIRST_COMPLETED)
    if failed.done() and failed.result() is not None:
        raise failed.result()  # type: ignore[misc]
    print("ready", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    out.write_text(json.dumps({"received": received, "load": load_counts[0], "notices": notices}))
    for task in tasks:
        task.cancel()


async def _first_failure(tasks: list[asyncio.Task[None]]) -> BaseException | None:
    for finished in asyncio.as_completed(tasks):
        try:
            await finished
        except asyncio.CancelledError:
            return None
        except BaseException as exc:
            return exc
    return None


# --- the writer -------------------------------------------------------------------------


def _event(h: str, phase: str) -> dict[str, Any]:
    from nostr.events import sign_event

    tags = [["ar", "1"], ["d", str(uuid.uuid4())], ["h", h], ["type", "buzz.task"],
            ["op", "create"], ["title", "bench"], ["phase", phase]]
    return sign_event(WRITER_SECRET, kind=45010, tags=tags, content='{"version":1}')


async def _writer(port: int) -> Any:
    import orjson
    from websockets.asyncio.client import connect

    from nostr.nip42 import make_auth_event

    url = f"ws://{BENCH_HOST}:{port}/"
    ws = await connect(url, max_size=2**22, ping_interval=None)
    challenge = orjson.loads(await ws.recv())[1]
    await ws.send(orjson.dumps(["AUTH", make_auth_event(WRITER_SECRET, challenge=challenge,
                                                        relay_url=url)]).decode())
    assert orjson.loads(await ws.recv())[2] is True
    return ws


async def _publish(ws: Any, event: dict[str, Any]) -> bool:
    import orjson

    await ws.send(orjson.dumps(["EVENT", event]).decode())
    while True:
        answer = orjson.loads(await ws.recv())
        if answer[0] == "OK" and answer[1] == event["id"]:
            return bool(answer[2]) and answer[3] == ""


async def _latency_phase(port: int, h: str, events: int, rate: float) -> list[str]:
    ws = await _writer(port)
    ids = []
    for _ in range(events):
        started = time.monotonic()
        event = _event(h, "latency")
        assert await _publish(ws, event)
        ids.append(event["id"])
        await asyncio.sleep(max(0.0, 1 / rate - (time.monotonic() - started)))
    await ws.close()
    return ids


async def _load_phase(port: int, h: str, writers: int, seconds: float) -> int:
    connections = [await _writer(port) for _ in range(writers)]
    deadline = time.monotonic() + seconds
    accepted = [0]

    async def write_until(ws: Any) -> None:
        while time.monotonic() < deadline:
            if await _publish(ws, _event(h, "load")):
                accepted[0] += 1

    await asyncio.gather(*(write_until(ws) for ws in connections))
    for ws in connections:
        await ws.close()
    return accepted[0]


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def run(port: int, *, subscribers: int, procs: int, events: int, rate: float,
        writers: int, seconds: float) -> list[object]:
    from django.db import connection

    from artifacts.models import Community
    from artifacts.services.channels import channel_create

    community = Community.objects.get(host=BENCH_HOST)
    h = uuid.uuid4()
    channel_create(community_id=community.pk, channel_id=h, name=f"bench ws {h.hex[:6]}")

    outs = [Path(tempfile.mkstemp(prefix="bench-ws-", suffix=".json")[1]) for _ in range(procs)]
    shares = [subscribers // procs + (1 if i < subscribers % procs else 0) for i in range(procs)]
    clients = [
        subprocess.Popen(
            [sys.executable, __file__, "--subscriber", "--port", str(port), "--count",
             str(share), "--channel", str(h), "--out", str(out)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT,
        )
        for share, out in zip(shares, outs, strict=True)
    ]
    connect_started = time.monotonic()
    for client in clients:
        assert client.stdout is not None
        line = client.stdout.readline()
        if line.strip() != "ready":
            raise RuntimeError(f"a subscriber process failed (exit {client.wait()})")
    connect_seconds = time.monotonic() - connect_started

    ids = asyncio.run(_latency_phase(port, str(h), events, rate))
    load_started = time.monotonic()
    accepted = asyncio.run(_load_phase(port, str(h), writers, seconds))
    load_rate = accepted / (time.monotonic() - load_started)
    time.sleep(2.0)  # let the last deliveries land
    for client in clients:
        assert client.stdin is not None
        client.stdin.write("stop\n")
        client.stdin.flush()
        client.wait(60)

    results = [json.loads(out.read_text()) for out in outs]
    for out in outs:
        out.unlink()
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT event_id, extract(epoch FROM received_at)::float8 FROM events"
            " WHERE community_id = %s AND event_id = ANY(%s)",
            [community.pk, ids],
        )
        stored = dict(cursor.fetchall())
    latencies = [
        (t - stored[event_id]) * 1000
        for result in results
        for event_id, times in result["received"].items()
        if event_id in stored
        for t in times
    ]
    load_received = sum(r["load"] for r in results)
    notices = sum(len(r["notices"]) for r in results)
    return [
        subscribers, f"{connect_seconds:.1f}",
        f"{_percentile(latencies, 0.5):.1f}", f"{_percentile(latencies, 0.99):.1f}",
        f"{max(latencies, default=float('nan')):.1f}",
        f"{len(latencies) / (len(ids) * subscribers):.4f}",
        f"{load_rate:.0f}",
        f"{load_received / max(1, accepted * subscribers):.4f}",
        notices,
    ]


def start_serve(svc: Any, workers: int) -> Server:
    """`buzz-admin serve`, exactly as deployed (its uvicorn options included)."""
    import httpx

    port = free_port()
    process = subprocess.Popen(
        [str(VENV_BIN / "buzz-admin"), "serve", "--host", "127.0.0.1", "--port", str(port),
         "--workers", str(workers)],
        env=relay_env(svc, **UNLIMITED), cwd=ROOT, start_new_session=True,
        stdout=subprocess.DEVNULL,
    )
    server = Server(process, port)
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(f"{server.url}/healthz", timeout=1).status_code == 200:
                return server
        except httpx.HTTPError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            server.stop()
            raise RuntimeError("buzz-admin serve did not start")
        time.sleep(0.2)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--subscribers", type=int, nargs="+", default=[100, 1000])
    parser.add_argument("--procs", type=int, default=2, help="subscriber client processes")
    parser.add_argument("--events", type=int, default=100, help="latency-phase writes")
    parser.add_argument("--rate", type=float, default=20.0, help="latency-phase writes/s")
    parser.add_argument("--writers", type=int, default=4, help="load-phase writer connections")
    parser.add_argument("--seconds", type=float, default=5.0, help="load-phase duration")
    parser.add_argument("--workers", type=int, default=1, help="relay worker processes")
    # Subscriber process mode (internal).
    parser.add_argument("--subscriber", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--count", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--channel", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.subscriber:
        asyncio.run(_subscriber_main(args.port, args.count, args.channel, args.out))
        return 0

    rows: list[list[object]] = []
    with services() as svc:
        setup_database(svc)
        os.environ.update(relay_env(svc))
        import django

        django.setup()
        server = start_serve(svc, args.workers)
        try:
            for n in args.subscribers:
                rows.append(run(server.port, subscribers=n, procs=args.procs,
                                events=args.events, rate=args.rate, writers=args.writers,
                                seconds=args.seconds))
        finally:
            server.stop()
    print(f"WebSocket sync, buzz-admin serve x{args.workers}, {args.procs} client processes;"
          " latency = subscriber receive - the relay's stored stamp, per (event, subscriber)")
    print_table(
        ["subscribers", "connect s", "p50 ms", "p99 ms", "max ms", "delivered",
         "writes/s (load)", "load delivered", "NOTICEs"],
        rows,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
