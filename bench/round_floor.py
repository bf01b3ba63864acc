"""The floor of a quiet continuation round: what the round must do, without the relay around it.

Per round: a bare BIP-340 verify (pre-decoded bytes: the NIP-98 signature's cost), a Redis
`SET NX` with a fresh key (the replay claim), and the very statements the relay's asyncio page
driver sends for that round, on an asyncio psycopg connection of its own: the batch of the
fence and the page's `BEGIN` with the community lookup, the page statement(s), `COMMIT`. The
statements are not written here: they are recorded from the relay's own driver
(`async_reads.configure_connection` once per connection, then `async_reads.begin_read` and
`read_page_async`, the reader's round continued) once, then replayed as recorded, so the floor
follows the relay's SQL as it changes, each statement in a round trip of its own: three, as
issue 33 defines the floor (the fence's batch, the first statement, `COMMIT`). The relay's
driver sends a quiet page's first statement and `COMMIT` as one message (`async_reads`): that
saving is the relay's, by design, not the floor's. Not in the floor: the HTTP and ASGI cycle,
DRF, NIP-98 decoding, the token's decrypt and re-seal, rendering: what `bench/load.py` reports
as the relay's own cost against this.

`bench/load.py` runs it as a side beside the relays (`--floor`), interleaved with their runs:
`--processes` processes (the relay's worker count) share `--connections` connections.

    .venv/bin/python bench/round_floor.py --seconds 5 --connections 8   # DATABASE_URL, REDIS_URL
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import pickle
import statistics
import sys
import time
import uuid
from dataclasses import dataclass, replace
from pathlib import Path
from queue import Empty
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "buzzrelay.settings")


@dataclass(frozen=True)
class Recorded:
    query: Any  # str, bytes or a psycopg sql object, as the driver sent it
    params: Any
    prepare: bool | None
    # Sent once per connection, when it is opened (the pool's `configure`), not every round.
    session: bool = False


def record_round(reader_secret: str, host: str) -> list[Recorded]:
    """The statements one quiet continuation page of the reader's round sends, in order, as the
    relay's asyncio driver sends them (a full round first gives the continuation's token)."""
    import django

    django.setup()
    import orjson
    import psycopg

    from artifacts.selectors import async_reads
    from artifacts.selectors.filters import parse_query_body
    from artifacts.selectors.rounds import Page, prepare_round
    from artifacts.selectors.sync_epoch import database_identity
    from nostr.schnorr import pubkey_from_secret
    from relaycore.db import psycopg_connect_kwargs

    identity = database_identity()  # Django's ORM, before any event loop runs
    reader = pubkey_from_secret(reader_secret)
    recorded: list[Recorded] = []
    recording = False
    session = False
    cursor_execute = psycopg.AsyncCursor.execute
    expect_quiet = async_reads._expect_quiet

    async def record(self: Any, query: Any, params: Any = None, *,
                     prepare: bool | None = None, **kw: Any) -> Any:
        if recording or session:
            recorded.append(Recorded(query, params, prepare, session=session))
        return await cursor_execute(self, query, params, prepare=prepare, **kw)

    async def page(conn: Any, progress: str | None) -> Page:
        read, community = await async_reads.begin_read(conn, host)
        assert community is not None, f"no community at {host}"
        query = parse_query_body(orjson.dumps(
            [{"artifact": "current", "progress": progress, "limit": 1000}]))
        request = prepare_round(community_id=community.pk, reader=reader, query=query)
        return await async_reads.read_page_async(read, request, ready=True, identity=identity)

    async def rounds() -> None:
        nonlocal recording, session
        conn = await psycopg.AsyncConnection.connect(**psycopg_connect_kwargs(), autocommit=True)
        psycopg.AsyncCursor.execute = record  # type: ignore[method-assign]
        try:
            session = True  # what the relay's pool gives each new connection
            await async_reads.configure_connection(conn)
            session = False
            progress = None
            while True:  # a full round, then the continuation to record
                done = await page(conn, progress)
                progress = done.progress
                if not done.more:
                    break
            recording = True
            # Issue 33's floor: the first statement and COMMIT each a round trip of its own
            # (the relay's driver may send both in one message: not the floor's doing).
            async_reads._expect_quiet = lambda community_id: False  # type: ignore[assignment]
            quiet = await page(conn, progress)
            assert not (quiet.reset or quiet.more or quiet.events or quiet.removed), \
                "the floor's round must be a quiet continuation"
        finally:
            async_reads._expect_quiet = expect_quiet  # type: ignore[method-assign]
            psycopg.AsyncCursor.execute = cursor_execute  # type: ignore[method-assign]
            await conn.close()

    asyncio.run(rounds())
    if not any(not statement.session for statement in recorded):
        raise RuntimeError("the relay's page driver sent no statement")
    return recorded


@dataclass(frozen=True)
class FloorJob:
    statements: list[Recorded]
    connect: dict[str, Any]
    redis_url: str
    pubkey: bytes
    message: bytes
    signature: bytes
    connections: int
    seconds: float

    def dumps(self) -> bytes:
        """Pickled as plain values: the classes of a process run as a script are `__main__`'s,
        which another process cannot import."""
        fields = {**self.__dict__, "statements": [
            (s.query, s.params, s.prepare, s.session) for s in self.statements]}
        return pickle.dumps(fields)

    @classmethod
    def loads(cls, data: bytes) -> FloorJob:
        fields = pickle.loads(data)
        fields["statements"] = [Recorded(*statement) for statement in fields["statements"]]
        return cls(**fields)


async def floor_round(job: FloorJob, key: Any, conn: Any, client: Any) -> None:
    """One round of the floor on `conn` (an autocommit asyncio psycopg connection) and `client`
    (asyncio Redis): the verify with `key` (coincurve's `PublicKeyXOnly` of `job.pubkey`), the
    claim, the recorded statements with every result read (`conn` was configured by
    `configure_floor_connection`)."""
    assert key.verify(job.signature, job.message)
    assert await client.set(f"floor:{uuid.uuid4().hex}", b"1", nx=True, ex=60)
    await _replay(conn, [statement for statement in job.statements if not statement.session])


async def configure_floor_connection(job: FloorJob, conn: Any) -> None:
    """What the relay's pool runs on each new connection (`async_reads.configure_connection`),
    as recorded."""
    await _replay(conn, [statement for statement in job.statements if statement.session])


async def connect_floor(job: FloorJob) -> Any:
    """A new autocommit asyncio connection for the floor's rounds, configured as the relay's."""
    import psycopg

    conn = await psycopg.AsyncConnection.connect(**job.connect, autocommit=True)
    await configure_floor_connection(job, conn)
    return conn


async def _replay(conn: Any, statements: list[Recorded]) -> None:
    cursor = conn.cursor()
    for statement in statements:
        await cursor.execute(statement.query, statement.params, prepare=statement.prepare)
        while True:  # every result of a multi-statement batch, as the driver reads
            if cursor.description is not None:
                await cursor.fetchall()
            if not cursor.nextset():
                break


def _floor_process(job: FloorJob, out: Any) -> None:
    """One process's share of the floor: `job.connections` concurrent loops for `seconds`."""
    import redis.asyncio
    from coincurve import PublicKeyXOnly

    key = PublicKeyXOnly(job.pubkey)

    async def loop_on(conn: Any, client: Any, deadline: float, latencies: list[float]) -> None:
        while (started := time.perf_counter()) < deadline:
            await floor_round(job, key, conn, client)
            latencies.append(time.perf_counter() - started)

    async def main() -> list[float]:
        client = redis.asyncio.Redis.from_url(job.redis_url)
        conns = [await connect_floor(job) for _ in range(job.connections)]
        latencies: list[float] = []
        deadline = time.perf_counter() + job.seconds
        await asyncio.gather(*(loop_on(c, client, deadline, latencies) for c in conns))
        for conn in conns:
            await conn.close()
        await client.aclose()
        return latencies

    out.put(asyncio.run(main()))


def floor_job(statements: list[Recorded], *, redis_url: str, connections: int,
              seconds: float) -> FloorJob:
    """The floor's work for one process: its statements, a pre-signed NIP-98-sized signature
    to verify, `connections` connections (and `seconds` of rounds, when it drives itself)."""
    from nostr.events import compute_event_id
    from nostr.schnorr import pubkey_from_secret, sign
    from relaycore.db import psycopg_connect_kwargs

    secret = "4" * 64
    pubkey = pubkey_from_secret(secret)
    digest = bytes.fromhex(compute_event_id(pubkey, int(time.time()), 27235, [], ""))
    signature = bytes.fromhex(sign(secret, digest))
    return FloorJob(statements, psycopg_connect_kwargs(), redis_url, bytes.fromhex(pubkey),
                    digest, signature, connections, seconds)


def largest_share(connections: int, processes: int) -> int:
    """The most connections one of `processes` processes holds when they share `connections`
    as `run_floor` shares them."""
    return -(-connections // processes)


def run_floor(statements: list[Recorded], *, redis_url: str, seconds: float, connections: int,
              processes: int) -> tuple[float, float, float]:
    """(rounds/s, p50 ms, p99 ms) of the floor over `connections` connections shared by
    `processes` processes."""
    job = floor_job(statements, redis_url=redis_url, connections=connections, seconds=seconds)
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    shares = [connections // processes + (i < connections % processes)
              for i in range(processes)]
    workers = [
        context.Process(target=_floor_process, args=(replace(job, connections=share), queue))
        for share in shares if share
    ]
    for worker in workers:
        worker.start()
    latencies = [latency for share in _results(queue, workers) for latency in share]
    for worker in workers:
        worker.join()
    latencies.sort()
    p99 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))]
    return len(latencies) / seconds, statistics.median(latencies) * 1000, p99 * 1000


def _results(queue: Any, workers: list[Any]) -> list[list[float]]:
    """Each process's latencies; raises when one exits without them (e.g. PostgreSQL refused
    its connections: "too many clients" on a shared machine), instead of waiting for ever."""
    results: list[list[float]] = []
    while len(results) < len(workers):
        try:
            results.append(queue.get(timeout=1))
        except Empty:
            if any(worker.exitcode not in (None, 0) for worker in workers):
                raise RuntimeError("a floor process failed (its traceback is above)") from None
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reader-secret", default="3" * 64)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--seconds", type=float, default=5)
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--json", action="store_true", help="one JSON line, for bench/load.py")
    parser.add_argument("--save-job", metavar="FILE",
                        help="record, then write one process's job to FILE (pickle) for"
                             " bench/served_floor.py, and run nothing")
    args = parser.parse_args()
    statements = record_round(args.reader_secret, args.host)
    if args.save_job:
        job = floor_job(statements, redis_url=os.environ["REDIS_URL"],
                        connections=largest_share(args.connections, args.processes), seconds=0)
        Path(args.save_job).write_bytes(job.dumps())
        return 0
    rate, p50, p99 = run_floor(statements, redis_url=os.environ["REDIS_URL"],
                               seconds=args.seconds, connections=args.connections,
                               processes=args.processes)
    if args.json:
        print(json.dumps({"rate": rate, "p50_ms": p50, "p99_ms": p99,
                          "statements": len(statements)}))
        return 0
    print(f"floor: {len(statements)} statements per round; {rate:.0f} rounds/s, p50 {p50:.2f}"
          f" ms, p99 {p99:.2f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
