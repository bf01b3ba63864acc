"""Where a WebSocket EVENT's relay CPU goes, and a REQ replay's time: the sync WebSocket driven
in-process through the whole ASGI application (`buzzrelay.asgi.application`), no socket, no
uvicorn, no client library.

EVENT: `--connections` fake connections (each NIP-42-authenticated with bench/ingest.py's
writer) send pre-signed artifact creates back to back, each waiting for its OK, as
bench/peer.py's EVENT rounds do; CPU per accepted event is read per thread from /proc
(bench/profile_write.py's split: the server loop, database threads, the publisher thread), so
it holds on a busy machine. REQ: `--stored` creates are stored in a channel of their own, then
`--replays` REQs of limit 500 (bench/peer.py's filter) on one connection, each timed from the
REQ to its EOSE, with the loop's CPU per replay.

    .venv/bin/python bench/profile_ws.py                        # CPU ms per WS EVENT, replay ms
    .venv/bin/python bench/profile_ws.py --profile --top 40     # and where (cProfile)
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import pstats
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._harness import BENCH_HOST, print_table  # noqa: E402
from bench.ingest import WRITER_SECRET, artifact_tags  # noqa: E402
from bench.profile_write import cpu_by_thread, in_process_relay  # noqa: E402

PORT = 8000
READER_SECRET = "6" * 64
REPLAY_LIMIT = 500


class FakeSocket:
    """One WebSocket connection into the ASGI application: frames in through `receive`, frames
    out collected by `send` (OKs resolve the futures waiting for them)."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.frames: asyncio.Queue[str] = asyncio.Queue()
        self.accepted = asyncio.get_running_loop().create_future()
        self.task: asyncio.Task[None] | None = None

    async def open(self, secret: str) -> None:
        import orjson

        from nostr.nip42 import make_auth_event

        scope = {
            "type": "websocket", "asgi": {"version": "3.0", "spec_version": "2.3"},
            "scheme": "ws", "http_version": "1.1", "path": "/", "raw_path": b"/",
            "query_string": b"", "root_path": "",
            "headers": [(b"host", f"{BENCH_HOST}:{PORT}".encode())],
            "client": ("127.0.0.1", 50000), "server": (BENCH_HOST, PORT), "subprotocols": [],
        }
        self.task = asyncio.ensure_future(self.app(scope, self._receive, self._send))
        await self.inbox.put({"type": "websocket.connect"})
        await self.accepted
        challenge = orjson.loads(await self.frames.get())
        assert challenge[0] == "AUTH", challenge
        auth = make_auth_event(secret, challenge=challenge[1],
                               relay_url=f"ws://{BENCH_HOST}:{PORT}/")
        self.send_text(orjson.dumps(["AUTH", auth]).decode())
        answer = orjson.loads(await self.frames.get())
        assert answer[0] == "OK" and answer[2] is True, answer

    def send_text(self, text: str) -> None:
        self.inbox.put_nowait({"type": "websocket.receive", "text": text})

    async def close(self) -> None:
        await self.inbox.put({"type": "websocket.disconnect", "code": 1000})
        if self.task is not None:
            await asyncio.wait([self.task], timeout=5)

    async def _receive(self) -> dict[str, Any]:
        return await self.inbox.get()

    async def _send(self, message: dict[str, Any]) -> None:
        if message["type"] == "websocket.accept":
            self.accepted.set_result(None)
        elif message["type"] == "websocket.send":
            self.frames.put_nowait(message["text"])
        elif message["type"] == "websocket.close" and not self.accepted.done():
            self.accepted.set_exception(RuntimeError(f"handshake refused: {message}"))


def event_frames(n: int, h: str) -> list[tuple[str, str]]:
    from nostr.events import sign

    frames = []
    for i in range(n):
        tags = artifact_tags(op="create", d=str(uuid.uuid4()), h=h, title=f"bench {i}")
        event = sign(WRITER_SECRET, kind=45010, tags=tags, content='{"version":1}')
        frames.append((event.id, f'["EVENT",{event.raw}]'))
    return frames


async def publish(app: Any, frames: list[tuple[str, str]], connections: int) -> None:
    """Each connection sends its share of `frames`, one at a time, each waiting for its OK."""
    sockets = [FakeSocket(app) for _ in range(connections)]
    for sock in sockets:
        await sock.open(WRITER_SECRET)

    async def lane(sock: FakeSocket, mine: list[tuple[str, str]]) -> None:
        for event_id, frame in mine:
            sock.send_text(frame)
            answer = await sock.frames.get()
            if f'"{event_id}",true' not in answer:
                raise RuntimeError(f"EVENT answered {answer[:300]}")

    await asyncio.gather(*(lane(s, frames[i::connections]) for i, s in enumerate(sockets)))
    for sock in sockets:
        await sock.close()


async def replays(app: Any, h: str, n: int) -> list[float]:
    import orjson

    sock = FakeSocket(app)
    await sock.open(READER_SECRET)
    flt = {"kinds": [45010, 45011], "#h": [h], "limit": REPLAY_LIMIT}
    times = []
    for i in range(n):
        sub = f"r{i}"
        count = 0
        started = time.perf_counter()
        sock.send_text(orjson.dumps(["REQ", sub, flt]).decode())
        while True:
            message = await sock.frames.get()
            if message.startswith('["EVENT"'):
                count += 1
                continue
            answer = orjson.loads(message)
            if answer[0] == "EOSE":
                break
            raise RuntimeError(f"REQ answered {answer}")
        times.append((time.perf_counter() - started) * 1000)
        assert count == REPLAY_LIMIT, count
        sock.send_text(orjson.dumps(["CLOSE", sub]).decode())
    await sock.close()
    return times


def _settle(loop: asyncio.AbstractEventLoop) -> None:
    from artifacts.ws.publish import finish_publishing

    loop.run_until_complete(finish_publishing(timeout=30.0))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2000, help="events per EVENT run")
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--stored", type=int, default=10_000)
    parser.add_argument("--replays", type=int, default=50, help="REQs per replay run (0: none)")
    parser.add_argument("--profile", action="store_true", help="cProfile one more EVENT run")
    parser.add_argument("--profile-replay", action="store_true",
                        help="cProfile one more replay run")
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--wall", action="store_true",
                        help="profile wall time (default: the loop thread's CPU time)")
    parser.add_argument("--save", metavar="FILE", help="write the cProfile stats to FILE")
    args = parser.parse_args()

    with in_process_relay("profile ws") as (community, h, application):
        from artifacts.services.channels import channel_create

        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        loop.run_until_complete(publish(application, event_frames(200, h), args.connections))
        _settle(loop)

        replay_h = ""
        if args.replays:
            replay_h = str(uuid.uuid4())
            channel_create(community_id=community.pk, channel_id=uuid.UUID(replay_h),
                           name="profile ws replay")
            loop.run_until_complete(publish(application, event_frames(args.stored, replay_h),
                                            args.connections))
            _settle(loop)
            from django.db import connection

            with connection.cursor() as cursor:
                cursor.execute("ANALYZE")

        cpu_runs: list[dict[str, float]] = []
        walls: list[float] = []
        replay_times: list[float] = []
        replay_cpu: list[float] = []
        for _ in range(args.runs):
            frames = event_frames(args.n, h)
            before = cpu_by_thread()
            started = time.perf_counter()
            loop.run_until_complete(publish(application, frames, args.connections))
            walls.append(time.perf_counter() - started)
            _settle(loop)
            after = cpu_by_thread()
            cpu_runs.append({g: (after[g] - before.get(g, 0.0)) / args.n * 1000 for g in after})
            if args.replays:
                before_cpu = time.thread_time()
                replay_times += loop.run_until_complete(
                    replays(application, replay_h, args.replays))
                replay_cpu.append((time.thread_time() - before_cpu) / args.replays * 1000)

        profiler = None
        if args.profile or args.profile_replay:
            # CPU time by default: waiting (the database, a busy machine) is not the relay's cost.
            profiler = (cProfile.Profile() if args.wall
                        else cProfile.Profile(time.thread_time))  # type: ignore[arg-type]
            frames = event_frames(args.n, h)
            profiler.enable()
            if args.profile:
                loop.run_until_complete(publish(application, frames, args.connections))
                _settle(loop)
            if args.profile_replay:
                loop.run_until_complete(replays(application, replay_h, args.replays))
            profiler.disable()
        loop.close()

    groups = sorted({g for run in cpu_runs for g in run},
                    key=lambda g: -statistics.median(run.get(g, 0.0) for run in cpu_runs))
    rows: list[list[object]] = [
        [g, f"{statistics.median(run.get(g, 0.0) for run in cpu_runs):.3f}"] for g in groups
    ]
    total = statistics.median(sum(run.values()) for run in cpu_runs)
    rows.append(["relay, all threads", f"{total:.3f}"])
    print(f"WebSocket EVENT artifact creates, in-process, {args.connections} connections:"
          f" CPU ms per accepted event (median of {args.runs} x {args.n});"
          f" events/s per run: {', '.join(f'{args.n / w:.0f}' for w in walls)}")
    print_table(["where", "CPU ms/event"], rows)
    if replay_times:
        ordered = sorted(replay_times)
        p99 = ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]
        print(f"REQ replay limit {REPLAY_LIMIT} of {args.stored} stored, {len(ordered)} REQs:"
              f" p50 {statistics.median(ordered):.2f} ms, p99 {p99:.2f} ms, max"
              f" {ordered[-1]:.2f} ms; server-loop CPU {statistics.median(replay_cpu):.2f} ms"
              " a replay (the fake client's included)")
    if profiler is not None:
        stats = pstats.Stats(profiler)
        if args.save:
            stats.dump_stats(args.save)
        stats.sort_stats("tottime").print_stats(args.top)
        stats.sort_stats("cumulative").print_stats(args.top)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
