"""What one client can make a relay worker hold (issue 37), read from /proc of the server.

Each scenario runs against a fresh one-worker server (so one scenario's memory does not hide
in another's), sampling the server process's RSS every 50 ms:

- header: one connection sends `GET /healthz` and then 25 MiB of header lines, never ending
  the head. Figures: bytes the server took, its answer, RSS growth (peak - start).
- ping: a WebSocket handshake, then 150 MiB of pings; the client never reads. Figures: bytes
  the server took, RSS growth, seconds until the server dropped the connection (or "open").
- replay: a channel of 840 heads of ~60 KB (~48 MiB); 8 authenticated connections REQ it
  (`limit` 1000) and never read, for 5 s; then they close. Figures: RSS growth at the peak and
  5 s after they closed; then one reading client replays it: events received, EOSE, seconds.
- rps (`--scenarios rps`, needs wrk): NIP-11 requests per second, the cost of each server's
  request parsing (h11 against httptools and the relay's bounds).

The servers under comparison (`--sides`):
- `candidate`: this tree's `buzz-admin serve` (buzzrelay/server.py's options);
- `baseline`: `buzz-admin serve` from a `git worktree` of `--baseline` (default main);
- `h11`: uvicorn's own options only, `--http h11 --h11-max-incomplete-event-size 16384`
  (this tree's application);
- `ws-websockets`: uvicorn's legacy `websockets` WebSocket implementation (ping scenario;
  wsproto, the other one, is not among the relay's requirements).

Targets (issue 37): replay growth < 200 MiB and back near the start after close, the reader
gets every event and EOSE; header and ping growth < 50 MiB each, the connection closed.

    .venv/bin/python bench/connection_bounds.py                  # candidate and baseline
    .venv/bin/python bench/connection_bounds.py --sides candidate,h11,ws-websockets
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._harness import (  # noqa: E402
    BENCH_HOST,
    VENV_BIN,
    Server,
    Services,
    free_port,
    git_worktree,
    print_table,
    relay_env,
    services,
    setup_database,
    start_server_in,
    wait_until_serving,
)

MIB = 1024 * 1024
HEADS = 840
CONTENT = "x" * 60_000
CLIENTS = 8
SECRET = "3" * 64
CHANNEL = str(uuid.UUID(int=0x37))
UNLIMITED = {"RELAY_RATE_LIMIT_ADDRESS_RATE": "0", "RELAY_RATE_LIMIT_PUBKEY_RATE": "0"}

UVICORN_VARIANTS = {
    "h11": ["--http", "h11", "--h11-max-incomplete-event-size", "16384"],
    "ws-websockets": ["--ws", "websockets"],
}


def rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


@contextmanager
def sampling(pid: int) -> Iterator[dict[str, int]]:
    """The process's RSS at the start and its peak while the block runs."""
    figures = {"start": rss(pid), "peak": 0}
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            figures["peak"] = max(figures["peak"], rss(pid))
            time.sleep(0.05)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        yield figures
    finally:
        stop.set()
        thread.join()
        figures["peak"] = max(figures["peak"], rss(pid))


def mib(value: float) -> str:
    return f"{value / MIB:+.0f}"


def flood(sock: socket.socket, chunk: bytes, total: int, stall: float = 5.0) -> int:
    """Send up to `total` bytes; stop when a send waits `stall` s or the server closes."""
    sock.settimeout(stall)
    sent = 0
    try:
        while sent < total:
            sent += sock.send(chunk)
    except (TimeoutError, BrokenPipeError, ConnectionResetError):
        pass
    return sent


def dropped_within(sock: socket.socket, chunk: bytes, seconds: float) -> float | None:
    """Seconds until sending fails (the server dropped us), without ever reading."""
    started = time.monotonic()
    sock.settimeout(1)
    while time.monotonic() - started < seconds:
        try:
            sock.send(chunk)
        except TimeoutError:
            continue
        except OSError:
            return time.monotonic() - started
        time.sleep(0.2)
    return None


def header_flood(server: Server) -> list[str]:
    with sampling(server.process.pid) as figures:
        sock = socket.create_connection(("127.0.0.1", server.port))
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        sent = flood(sock, b"X-Flood: 1\r\n" * 5000, 25 * MIB)
        sock.settimeout(2)
        try:
            answer = sock.recv(200).split(b"\r\n")[0].decode() or "closed, no answer"
        except (TimeoutError, ConnectionResetError):
            answer = "no answer"
        sock.close()
    return [f"{sent / MIB:.1f} MiB", answer, mib(figures["peak"] - figures["start"])]


def ws_handshake(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16384)
    sock.sendall(f"GET / HTTP/1.1\r\nHost: {BENCH_HOST}\r\nUpgrade: websocket\r\n"
                 "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                 "Sec-WebSocket-Version: 13\r\n\r\n".encode())
    head = sock.recv(4096)
    if not head.startswith(b"HTTP/1.1 101"):
        raise RuntimeError(f"handshake refused: {head[:100]!r}")
    return sock


def ping_flood(server: Server, wait_close: float) -> list[str]:
    mask = b"\x01\x02\x03\x04"
    payload = bytes(b ^ mask[i % 4] for i, b in enumerate(b"p" * 125))
    pings = (bytes([0x89, 0x80 | 125]) + mask + payload) * 4000
    with sampling(server.process.pid) as figures:
        sock = ws_handshake(server.port)
        started = time.monotonic()
        sent = flood(sock, pings, 150 * MIB)
        left = wait_close - (time.monotonic() - started)
        dropped = dropped_within(sock, pings, max(left, 1))
        sock.close()
    closed = (f"after {wait_close - left + dropped:.0f} s" if dropped is not None
              else f"open after {wait_close:.0f} s")
    return [f"{sent / MIB:.1f} MiB", closed, mib(figures["peak"] - figures["start"])]


def seed_channel(svc: Services) -> None:
    """HEADS open-channel heads of ~60 KB with fast SQL (the replay serves stored JSON as is)."""
    import psycopg

    with psycopg.connect(svc.database_url, autocommit=True) as conn:
        row = conn.execute("SELECT id FROM communities WHERE host = %s", [BENCH_HOST]).fetchone()
        assert row is not None
        community = row[0]
        if conn.execute("SELECT count(*) FROM artifact_heads WHERE community_id = %s AND "
                        "channel_id = %s", [community, CHANNEL]).fetchone() == (HEADS,):
            return
        for table in ("artifact_heads", "artifact_revisions", "events", "channels"):
            conn.execute(f"DELETE FROM {table} WHERE community_id = %s AND channel_id = %s",
                         [community, CHANNEL])
        conn.execute("INSERT INTO channels (community_id, channel_id, name, visibility, "
                     "created_by, created_at) VALUES (%s, %s, 'bounds', 'open', '', now())",
                     [community, CHANNEL])
        params = {"c": community, "h": uuid.UUID(CHANNEL), "ht": CHANNEL, "n": HEADS,
                  "content": CONTENT}
        conn.execute("""
            CREATE TEMP TABLE seed_rows AS
            SELECT i, md5('bounds-a' || i)::uuid AS d,
                   md5('bounds-e' || i) || md5('bounds-f' || i) AS eid,
                   1700000000 + i / 10 AS created_at
              FROM generate_series(1, %(n)s) i""", params)
        conn.execute("""
            INSERT INTO events (community_id, event_id, pubkey, kind, created_at, channel_id,
                                raw, received_at)
            SELECT %(c)s, eid, repeat('ab', 32), 45010, created_at, %(h)s::uuid,
                   json_build_object('id', eid, 'pubkey', repeat('ab', 32),
                     'created_at', created_at, 'kind', 45010,
                     'tags', json_build_array(json_build_array('ar', '1'),
                        json_build_array('d', d::text), json_build_array('h', %(ht)s::text),
                        json_build_array('type', 'buzz.task'), json_build_array('op', 'create'),
                        json_build_array('title', 'bounds ' || i)),
                     'content', %(content)s::text, 'sig', repeat('cd', 64))::text, now()
              FROM seed_rows""", params)
        conn.execute("""
            INSERT INTO artifact_revisions (community_id, event_id, artifact_id, channel_id, op,
                                            prev_event_id, created_at, source_channel_id,
                                            modified_at)
            SELECT %(c)s, eid, d, %(h)s::uuid, 'create', NULL, created_at, NULL, now()
              FROM seed_rows""", params)
        conn.execute("""
            INSERT INTO artifact_heads (community_id, artifact_id, event_id, channel_id,
                                        artifact_type, root, deleted, created_at, modified_at)
            SELECT %(c)s, d, eid, %(h)s::uuid, 'buzz.task', NULL, false, created_at, now()
              FROM seed_rows""", params)


def subscriber(port: int, *, reading: bool) -> Any:
    import orjson
    from websockets.sync.client import connect

    from nostr.nip42 import make_auth_event

    sock = socket.create_connection(("127.0.0.1", port))
    if not reading:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16384)
    url = f"ws://{BENCH_HOST}:{port}/"
    ws = connect(url, sock=sock, max_size=2**24, max_queue=1 if not reading else 16,
                 compression=None)
    challenge = orjson.loads(ws.recv(timeout=10))[1]
    ws.send(orjson.dumps(["AUTH", make_auth_event(SECRET, challenge=challenge,
                                                  relay_url=url)]).decode())
    assert orjson.loads(ws.recv(timeout=10))[2] is True
    ws.send(orjson.dumps(["REQ", "r", {"kinds": [45010], "#h": [CHANNEL], "limit": 1000}])
            .decode())
    return ws


def replay(server: Server) -> list[str]:
    import orjson

    with sampling(server.process.pid) as figures:
        clients = [subscriber(server.port, reading=False) for _ in range(CLIENTS)]
        time.sleep(5)
    peak = figures["peak"] - figures["start"]
    for ws in clients:
        ws.close_socket()
    time.sleep(5)
    after = rss(server.process.pid) - figures["start"]
    started = time.monotonic()
    events, end = 0, "no EOSE"
    try:
        ws = subscriber(server.port, reading=True)
        while True:
            frame = orjson.loads(ws.recv(timeout=30))
            if frame[0] == "EVENT":
                events += 1
            elif frame[0] in ("EOSE", "CLOSED"):
                end = frame[0]
                break
        ws.close()
    except Exception as exc:  # the relay closed it: say how
        end = f"{type(exc).__name__}: {str(exc)[:60]}"
    return [mib(peak), mib(after), f"{events}/{HEADS}", end,
            f"{time.monotonic() - started:.1f} s"]


def throughput(server: Server, runs: int = 3) -> list[str]:
    """NIP-11 (`GET /info`: a request head parsed, one cached lookup) with wrk: what each
    server's HTTP parsing costs on the cheapest real answer. Median of `runs` 5 s runs."""
    import statistics

    from bench._harness import run_wrk

    headers = {"Host": BENCH_HOST, "Accept": "application/nostr+json"}
    run_wrk(f"{server.url}/info", seconds=2, connections=16, headers=headers)  # warm-up
    results = [run_wrk(f"{server.url}/info", seconds=5, connections=16, headers=headers)
               for _ in range(runs)]
    return [f"{statistics.median(r.requests_per_second for r in results):.0f}",
            f"{statistics.median(r.p50_ms for r in results):.2f}",
            str(sum(r.non_2xx + r.errors for r in results))]


def start_uvicorn(svc: Services, options: list[str]) -> Server:
    """This tree's application under uvicorn's own command line with `options`."""
    import subprocess

    port = free_port()
    process = subprocess.Popen(
        [str(VENV_BIN / "uvicorn"), "buzzrelay.asgi:application", "--host", "127.0.0.1",
         "--port", str(port), "--lifespan", "on", "--log-level", "warning", "--no-access-log",
         "--ws-max-size", "131072", "--ws-per-message-deflate", "false", *options],
        env=relay_env(svc, **UNLIMITED), cwd=ROOT, start_new_session=True,
        stdout=subprocess.DEVNULL,
    )
    server = Server(process, port)
    wait_until_serving(server, f"{server.url}/healthz", f"uvicorn {options} did not start")
    return server


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sides", default="candidate,baseline")
    parser.add_argument("--baseline", default="main")
    parser.add_argument("--scenarios", default="header,ping,replay")
    parser.add_argument("--wait-close", type=float, default=45.0,
                        help="seconds to wait for the server to drop a ping flooder")
    args = parser.parse_args()
    sides = args.sides.split(",")
    scenarios = args.scenarios.split(",")

    rows: dict[str, list[list[str]]] = {s: [] for s in scenarios}
    with services() as svc:
        setup_database(svc)
        if "replay" in scenarios:
            seed_channel(svc)
        with git_worktree(args.baseline) if "baseline" in sides else _nothing() as baseline:
            for side in sides:
                starts: dict[str, Callable[[], Server]] = {
                    "candidate": lambda: start_server_in(
                        ROOT, "serve-tree", svc, env=dict(UNLIMITED)),
                    "baseline": lambda: start_server_in(
                        baseline[0], "serve-tree", svc, env=dict(UNLIMITED)),
                }
                for scenario in scenarios:
                    if side.startswith("ws-") and scenario != "ping":
                        continue
                    server = (starts[side]() if side in starts
                              else start_uvicorn(svc, UVICORN_VARIANTS[side]))
                    try:
                        if scenario == "header":
                            rows[scenario].append([side, *header_flood(server)])
                        elif scenario == "ping":
                            rows[scenario].append([side, *ping_flood(server, args.wait_close)])
                        elif scenario == "rps":
                            rows[scenario].append([side, *throughput(server)])
                        else:
                            rows[scenario].append([side, *replay(server)])
                    finally:
                        server.stop()
                    print(f"{side} {scenario}: {rows[scenario][-1][1:]}", flush=True)
    headings = {
        "header": ["side", "taken of 25 MiB", "answer", "RSS MiB"],
        "ping": ["side", "taken of 150 MiB", "dropped", "RSS MiB"],
        "rps": ["side", "NIP-11 requests/s (median of 3)", "p50 ms", "failed"],
        "replay": ["side", f"RSS MiB, {CLIENTS} non-readers", "RSS MiB 5 s after close",
                   "reader events", "reader end", "reader time"],
    }
    for scenario in scenarios:
        print(f"\n{scenario}")
        print_table(headings[scenario], rows[scenario])
    return 0


@contextmanager
def _nothing() -> Iterator[tuple[Path, str]]:
    yield ROOT, ""


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
