"""Where an accepted write's relay CPU goes: `POST /event` through the whole ASGI application
in-process, thread by thread, against its floor's CPU in the same run.

The write is the one `bench/ingest.py` drives (an artifact create in one open channel, its own
pre-signed event and NIP-98 header, rate limits off), sent one at a time straight into
`buzzrelay.asgi.application` on one event loop: no socket, no uvicorn, no load generator. Each
thread's CPU time is read from /proc for the run, so the work is split where it runs:

- the server loop (the edge: ASGI, DRF, the community lookup on the asyncio pool, NIP-98 and
  its replay claim in Redis, the hop to a database thread and back, rendering);
- the database threads (`run_db`: strict parsing, the signature, the write transaction through
  Django's connection, the after-commit signal);
- the live publisher (numbering and publishing the commit to the channel layer).

The floor (bench/ingest_floor.py: a bare verify and the relay's own recorded pipelines over
psycopg, committed) runs the same number of writes, one at a time on one connection, in the
same invocation; its CPU is all on the loop that drives it. CPU time is what waiting for a core
does not inflate, so the split holds on a busy machine; the median of `--runs` runs is printed.

    .venv/bin/python bench/profile_write.py                 # CPU ms per write, by thread
    .venv/bin/python bench/profile_write.py --profile --top 40
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import os
import pstats
import statistics
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._harness import BENCH_HOST, print_table, relay_env, services, setup_database  # noqa: E402
from bench.ingest import UNLIMITED, WRITER_SECRET, _sign_phase, artifact_tags  # noqa: E402
from bench.profile_round import PORT, post  # noqa: E402

URL = f"http://{BENCH_HOST}:{PORT}/event"
TICKS = os.sysconf("SC_CLK_TCK")


def thread_group(name: str) -> str:
    if name == "MainThread":
        return "server loop"
    if name.startswith("buzz-db"):
        return "database threads"
    if name == "buzz-live-publish":
        return "live publisher"
    return "other threads"


def cpu_by_thread() -> dict[str, float]:
    """CPU seconds so far of this process's threads, summed by `thread_group`."""
    names = {thread.native_id: thread.name for thread in threading.enumerate()}
    spent: dict[str, float] = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except FileNotFoundError:  # the thread ended meanwhile
            continue
        group = thread_group(names.get(int(tid), ""))
        spent[group] = spent.get(group, 0.0) + (int(fields[11]) + int(fields[12])) / TICKS
    return spent


async def writes(app: Any, requests: list[tuple[bytes, str]], concurrency: int = 1) -> None:
    """`requests` in `concurrency` lanes at once, each lane one request after another."""

    async def lane(requests: list[tuple[bytes, str]]) -> None:
        for body, authorization in requests:
            status, raw = await post(app, body, authorization, path="/event")
            if status != 200 or b',true,""]' not in raw:
                raise RuntimeError(f"/event answered {status}: {raw[:300]!r}")

    await asyncio.gather(*(lane(requests[i::concurrency]) for i in range(concurrency)))


def relay_run(loop: asyncio.AbstractEventLoop, app: Any, requests: list[tuple[bytes, str]],
              concurrency: int = 1) -> dict[str, float]:
    """CPU ms per write by thread group for one run of `requests` (and "wall ms" a write)."""
    from artifacts.ws.publish import finish_publishing

    before = cpu_by_thread()
    started = time.perf_counter()
    loop.run_until_complete(writes(app, requests, concurrency))
    wall = (time.perf_counter() - started) / len(requests) * 1000
    # The loop's publisher sends what the last writes handed it while the loop runs, so it
    # must finish before the loop stops for the floor: an INCR left pending past its timeout
    # opens the Redis breaker, and the next run's replay claims go to PostgreSQL. (A fixed
    # sleep was not always long enough on a busy machine.)
    loop.run_until_complete(finish_publishing(timeout=30.0))
    after = cpu_by_thread()
    n = len(requests)
    spent = {group: (after[group] - before.get(group, 0.0)) / n * 1000 for group in after}
    return {**spent, WALL: wall}


WALL = "wall ms"  # not a thread: the run's wall time a write (writes/s = 1000 / it)


def floor_run(h: str, community_id: int, template: Any, n: int) -> float:
    """CPU ms per write of the floor, `n` writes one at a time on one connection."""
    import psycopg

    from bench.ingest_floor import floor_write, make_write, substitute
    from relaycore.db import psycopg_connect_kwargs

    prepared = []
    for _ in range(n):
        write = make_write(secret=WRITER_SECRET, community_id=community_id, h=h,
                           artifact_tags=artifact_tags)
        prepared.append((write, substitute(template, write)))

    async def main() -> float:
        connect = psycopg_connect_kwargs()
        conn = await psycopg.AsyncConnection.connect(**connect, autocommit=True)
        try:
            started = time.thread_time()
            for write, batches in prepared:
                await floor_write(conn, write, batches)
            return (time.thread_time() - started) / n * 1000
        finally:
            await conn.close()

    return asyncio.run(main())


@contextlib.contextmanager
def in_process_relay(channel_name: str) -> Iterator[tuple[Any, str, Any]]:
    """The services up, the database set up, the relay's settings (no rate limits) in the
    environment and Django set up: the bench community, the id of a new channel in it named
    `channel_name`, and the ASGI application, for a profile run in this process."""
    with services() as svc:
        setup_database(svc)
        os.environ.update(relay_env(svc, **UNLIMITED))
        import django

        django.setup()
        from artifacts.models import Community
        from artifacts.services.channels import channel_create
        from buzzrelay.asgi import application

        community = Community.objects.get(host=BENCH_HOST)
        h = str(uuid.uuid4())
        channel_create(community_id=community.pk, channel_id=uuid.UUID(h), name=channel_name)
        yield community, h, application


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1000, help="writes per run")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--profile", action="store_true",
                        help="cProfile one more run (every thread; wall-clock times)")
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--save", metavar="FILE", help="write the cProfile stats to FILE")
    parser.add_argument("--concurrency", type=int, default=1,
                        help="writes in flight at once (group commit batches only those)")
    parser.add_argument("--group-commit-ab", action="store_true",
                        help="alternate runs with RELAY_GROUP_COMMIT off and on, same process")
    args = parser.parse_args()

    with in_process_relay("profile") as (community, h, application):
        from bench.ingest_floor import record_ingest

        template = record_ingest(community=community, secret=WRITER_SECRET, h=h,
                                 artifact_tags=artifact_tags)

        def signed(n: int) -> list[tuple[bytes, str]]:
            return _sign_phase("create", URL, h, [(str(uuid.uuid4()), "") for _ in range(n)])

        loop = asyncio.new_event_loop()
        loop.run_until_complete(writes(application, signed(300)))  # warm: pools, imports
        if args.group_commit_ab:
            return group_commit_ab(loop, application, signed, args, h, community.pk, template)
        runs: list[dict[str, float]] = []
        floors: list[float] = []
        for _ in range(args.runs):  # interleaved: relay, floor, relay, floor, ...
            runs.append(relay_run(loop, application, signed(args.n)))
            floors.append(floor_run(h, community.pk, template, args.n))
        profiler = cProfile.Profile()
        requests = signed(args.n)
        profiler.enable()
        loop.run_until_complete(writes(application, requests))
        profiler.disable()
        loop.close()

    groups = sorted({group for run in runs for group in run if group != WALL},
                    key=lambda g: -statistics.median(run.get(g, 0.0) for run in runs))
    totals = [sum(v for group, v in run.items() if group != WALL) for run in runs]
    floor = statistics.median(floors)
    rows: list[list[object]] = [
        [group, f"{statistics.median(run.get(group, 0.0) for run in runs):.3f}"]
        for group in groups
    ]
    rows.append(["relay, all threads", f"{statistics.median(totals):.3f}"])
    rows.append(["floor (verify + the pipelines, psycopg)", f"{floor:.3f}"])
    stats = pstats.Stats(profiler)
    calls = sum(entry[1] for entry in stats.stats.values())  # type: ignore[attr-defined]
    print(f"POST /event artifact create, in-process, one at a time: CPU ms per write"
          f" (median of {args.runs} x {args.n}, relay and floor interleaved)")
    print_table(["where", "CPU ms/write"], rows)
    print(f"relay / floor CPU: {statistics.median(totals) / floor:.1f}x;"
          f" {calls / args.n:.0f} Python calls per write (every thread)")
    if args.save:
        stats.dump_stats(args.save)
    if args.profile:
        stats.sort_stats("tottime").print_stats(args.top)
        stats.sort_stats("cumulative").print_stats(args.top)
    return 0


def group_commit_ab(loop: asyncio.AbstractEventLoop, app: Any, signed: Any,
                    args: argparse.Namespace, h: str, community_id: int, template: Any) -> int:
    """`--group-commit-ab`: runs alternating off, on, floor, in this process (the setting is
    read on every write), `--concurrency` writes in flight."""
    from django.conf import settings

    sides: dict[str, list[dict[str, float]]] = {"off": [], "on": []}
    floors: list[float] = []
    for _ in range(args.runs):
        for side in sides:
            settings.RELAY_GROUP_COMMIT = side == "on"
            sides[side].append(relay_run(loop, app, signed(args.n), args.concurrency))
        floors.append(floor_run(h, community_id, template, args.n))
    loop.close()
    floor = statistics.median(floors)
    rows: list[list[object]] = []
    for side, runs in sides.items():
        cpu = statistics.median(sum(v for k, v in run.items() if k != WALL) for run in runs)
        wall = statistics.median(run[WALL] for run in runs)
        rows.append([f"group commit {side}", f"{cpu:.3f}", f"{cpu / floor:.2f}",
                     f"{1000 / wall:.0f}", ", ".join(f"{1000 / run[WALL]:.0f}" for run in runs)])
    rows.append(["floor (one at a time, one connection)", f"{floor:.3f}", "1.00", "-", "-"])
    print(f"POST /event artifact creates, in-process, {args.concurrency} in flight: medians of"
          f" {args.runs} x {args.n}, off / on / floor interleaved")
    print_table(["relay", "CPU ms/write", "/ floor CPU", "writes/s", "per run"], rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
