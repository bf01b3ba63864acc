"""WebSocket sync: delivery latency from an accepted write to its subscribers, and sustained
accepted writes per second with the subscribers connected.

Two relay instances (`buzz-admin serve`: uvicorn; rate limits off) share PostgreSQL and Redis:
subscribers connect to one, writers to the other, so every delivery crosses instances through
the channel layer. For each subscriber count N (default 100 and 1,000), `--procs` client
processes open N WebSockets between them; each authenticates (NIP-42) and subscribes to one
channel (`limit: 0`: no replay, live only). Then:

1. latency: `--events` artifact creations, one at a time at `--rate` per second. Latency is the
   subscriber's receive time minus the time the writer received the relay's OK (the relay
   answers OK after the commit was published to the channel layer: that is acceptance), over
   every (event, subscriber) pair: p50, p99, max, and the share delivered. A second figure
   starts from the event's `received_at` (the database's stamp when the relay inserted it), so
   it adds the write transaction itself. One machine, one clock;
2. load: `--writers` connections write back to back for `--seconds`: accepted writes per second,
   the share of them every subscriber received, and NOTICEs (lost deliveries) seen.

Target (issue 6): p99 under 50 ms at 1,000 subscribers. On a shared 2-core machine the clients,
the relay, PostgreSQL and Redis compete for the same cores: the latencies are an upper bound.
The subscribers' relay's CPU time per delivered frame (latency phase, all its work included)
is the figure that does not depend on what else the machine runs.

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
    Server,
    print_table,
    relay_env,
    services,
    setup_database,
    start_server,
)

READER_SECRET = "6" * 64
WRITER_SECRET = "5" * 64
UNLIMITED = {
    "RELAY_RATE_LIMIT_ADDRESS_RATE": "0",
    "RELAY_RATE_LIMIT_PUBKEY_RATE": "0",
}
LATENCY_TAG = '["phase","latency"]'


# --- subscriber processes ------------------------------------------------------------------


class LeanSubscriber(asyncio.Protocol):
    """A minimal WebSocket client (RFC 6455 frames by hand) for the subscriber side.

    A general client library costs tens of microseconds per received frame; a thousand of them
    in two processes would measure the clients, not the relay. This one only finds an event's
    id in the raw frame bytes and timestamps it; control frames are answered (pings).
    """

    def __init__(self, key: str, on_frame: Any) -> None:
        self.key = key
        self.on_frame = on_frame
        self.buffer = bytearray()
        self.handshaken = asyncio.get_running_loop().create_future()
        self.transport: Any = None

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def send_text(self, text: str) -> None:
        payload = text.encode()
        mask = os.urandom(4)
        length = len(payload)
        if length < 126:
            header = bytes([0x81, 0x80 | length])
        elif length < 65536:
            header = bytes([0x81, 0x80 | 126]) + length.to_bytes(2, "big")
        else:
            header = bytes([0x81, 0x80 | 127]) + length.to_bytes(8, "big")
        repeated = (mask * (length // 4 + 1))[:length]
        masked = (int.from_bytes(payload, "big") ^ int.from_bytes(repeated, "big")).to_bytes(
            length, "big"
        )
        self.transport.write(header + mask + masked)

    def _control(self, opcode: int, payload: bytes) -> None:
        if opcode == 0x9:  # ping: answer with a masked pong
            mask = os.urandom(4)
            masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
            self.transport.write(bytes([0x8A, 0x80 | len(payload)]) + mask + masked)

    def data_received(self, data: bytes) -> None:
        buffer = self.buffer
        buffer += data
        if not self.handshaken.done():
            end = buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            status = bytes(buffer[:12])
            del buffer[: end + 4]
            if b" 101" not in status:
                self.handshaken.set_exception(RuntimeError(f"upgrade refused: {status!r}"))
                return
            self.handshaken.set_result(None)
        now = time.time()
        while len(buffer) >= 2:
            opcode = buffer[0] & 0x0F
            length = buffer[1] & 0x7F
            offset = 2
            if length == 126:
                if len(buffer) < 4:
                    return
                length = int.from_bytes(buffer[2:4], "big")
                offset = 4
            elif length == 127:
                if len(buffer) < 10:
                    return
                length = int.from_bytes(buffer[2:10], "big")
                offset = 10
            if len(buffer) < offset + length:
                return
            payload = bytes(buffer[offset: offset + length])
            del buffer[: offset + length]
            if opcode == 0x1:
                self.on_frame(payload, now)
            else:
                self._control(opcode, payload)


async def _subscriber_main(port: int, count: int, channel: str, out: Path) -> None:
    import base64

    import orjson

    from nostr.nip42 import make_auth_event

    url = f"ws://{BENCH_HOST}:{port}/"
    loop = asyncio.get_running_loop()
    received: dict[str, list[float]] = {}
    load_counts = [0]
    notices: list[str] = []
    last_frame = [time.time()]
    latency_tag = LATENCY_TAG.encode()

    async def one() -> None:
        replies: asyncio.Queue[bytes] = asyncio.Queue()
        live = [False]

        def on_frame(payload: bytes, now: float) -> None:
            last_frame[0] = now
            if not live[0]:
                replies.put_nowait(payload)
            elif payload.startswith(b'["EVENT"'):
                if latency_tag in payload:
                    start = payload.index(b'"id":"') + 6
                    received.setdefault(payload[start: start + 64].decode(), []).append(now)
                else:
                    load_counts[0] += 1
            elif payload.startswith(b'["NOTICE"'):
                notices.append(payload.decode())

        key = base64.b64encode(os.urandom(16)).decode()
        _, protocol = await loop.create_connection(
            lambda: LeanSubscriber(key, on_frame), "127.0.0.1", port
        )
        protocol.transport.write(
            f"GET / HTTP/1.1\r\nHost: {BENCH_HOST}:{port}\r\nUpgrade: websocket\r\n"
            f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
            "Sec-WebSocket-Version: 13\r\n\r\n".encode()
        )
        await protocol.handshaken
        challenge = orjson.loads(await replies.get())[1]
        auth = make_auth_event(READER_SECRET, challenge=challenge, relay_url=url)
        protocol.send_text(orjson.dumps(["AUTH", auth]).decode())
        assert orjson.loads(await replies.get())[2] is True
        live[0] = True  # the EOSE comes next; live frames after it are counted as they arrive
        protocol.send_text(orjson.dumps(
            ["REQ", "s", {"kinds": [45010], "#h": [channel], "limit": 0}]
        ).decode())

    for start in range(0, count, 50):  # stay under the listen backlog while the relay auths
        await asyncio.gather(*(one() for _ in range(min(50, count - start))))
    await asyncio.sleep(0.5)  # the last EOSEs
    print("ready", flush=True)
    await loop.run_in_executor(None, sys.stdin.readline)
    # Let the relay finish what it still has queued: stop once nothing arrived for 2 s.
    deadline = time.time() + 120
    while time.time() - last_frame[0] < 2.0 and time.time() < deadline:
        await asyncio.sleep(0.2)
    out.write_text(json.dumps({"received": received, "load": load_counts[0], "notices": notices}))


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


async def _latency_phase(port: int, h: str, events: int, rate: float) -> dict[str, float]:
    """Writes one at a time; the time each write's OK (acceptance) reached the writer."""
    ws = await _writer(port)
    accepted: dict[str, float] = {}
    for _ in range(events):
        started = time.monotonic()
        event = _event(h, "latency")
        assert await _publish(ws, event)
        accepted[event["id"]] = time.time()
        await asyncio.sleep(max(0.0, 1 / rate - (time.monotonic() - started)))
    await ws.close()
    return accepted


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


def _process_tree(port: int) -> list[Any]:
    """The relay process serving `port` and its workers."""
    import psutil

    for proc in psutil.process_iter(["cmdline"]):
        cmdline = proc.info["cmdline"] or []
        if "serve" in cmdline and str(port) in cmdline:
            return [proc, *proc.children(recursive=True)]
    raise RuntimeError(f"no relay process serves port {port}")


def _cpu_seconds(processes: list[Any]) -> float:
    total = 0.0
    for proc in processes:
        times = proc.cpu_times()
        total += times.user + times.system
    return total


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def run(port: int, write_port: int, *, subscribers: int, procs: int, events: int, rate: float,
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

    relay = _process_tree(port)
    cpu_before = _cpu_seconds(relay)
    accepted_at = asyncio.run(_latency_phase(write_port, str(h), events, rate))
    cpu_latency_phase = _cpu_seconds(relay) - cpu_before
    ids = list(accepted_at)
    load_started = time.monotonic()
    accepted = asyncio.run(_load_phase(write_port, str(h), writers, seconds))
    load_rate = accepted / (time.monotonic() - load_started)
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
    after_ok = [
        (t - accepted_at[event_id]) * 1000
        for result in results
        for event_id, times in result["received"].items()
        if event_id in accepted_at
        for t in times
    ]
    after_stored = [
        (t - stored[event_id]) * 1000
        for result in results
        for event_id, times in result["received"].items()
        if event_id in stored
        for t in times
    ]
    load_received = sum(r["load"] for r in results)
    notices = sum(len(r["notices"]) for r in results)
    frames = max(1, len(after_ok))
    return [
        subscribers, f"{connect_seconds:.1f}",
        f"{cpu_latency_phase / frames * 1e6:.0f}",
        f"{_percentile(after_ok, 0.5):.1f}", f"{_percentile(after_ok, 0.99):.1f}",
        f"{max(after_ok, default=float('nan')):.1f}",
        f"{_percentile(after_stored, 0.5):.1f}", f"{_percentile(after_stored, 0.99):.1f}",
        f"{len(after_ok) / (len(ids) * subscribers):.4f}",
        f"{load_rate:.0f}",
        f"{load_received / max(1, accepted * subscribers):.4f}",
        notices,
    ]


def start_serve(svc: Any, workers: int) -> Server:
    """`buzz-admin serve`, exactly as deployed (its uvicorn options included)."""
    return start_server("serve", svc, workers=workers, **UNLIMITED)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--subscribers", type=int, nargs="+", default=[100, 1000])
    parser.add_argument("--procs", type=int, default=2, help="subscriber client processes")
    parser.add_argument("--events", type=int, default=50, help="latency-phase writes")
    parser.add_argument("--rate", type=float, default=5.0, help="latency-phase writes/s")
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
        # Subscribers on one instance, writers on another: the writer's OK is then not queued
        # behind the fan-out it causes, and the delivery crosses instances as in a fleet.
        server = start_serve(svc, args.workers)
        write_server = start_serve(svc, 1)
        try:
            for n in args.subscribers:
                rows.append(run(server.port, write_server.port, subscribers=n,
                                procs=args.procs, events=args.events, rate=args.rate,
                                writers=args.writers, seconds=args.seconds))
        finally:
            server.stop()
            write_server.stop()
    print(f"WebSocket sync, subscribers' instance: buzz-admin serve x{args.workers},"
          f" {args.procs} client processes; writers on a second instance."
          " Latency per (event, subscriber): receive time - the time the writer got OK (the"
          " relay answers OK once the commit is published); 'stored': - the event's stored"
          " stamp (adds the write's own transaction)")
    print_table(
        ["subscribers", "connect s", "relay CPU us/frame", "p50 ms", "p99 ms", "max ms",
         "stored p50",
         "stored p99", "delivered",
         "writes/s (load)", "load delivered", "NOTICEs"],
        rows,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
