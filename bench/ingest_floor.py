"""The floor of an accepted write: what `POST /event` must do, without the relay around it.

Per write: a bare BIP-340 verify of the event's signature (pre-decoded bytes), then the very
statements the relay's ingest sends for an artifact create, in the pipelines it sends them in
(BEGIN to COMMIT, two round trips), committed. The statements are not written here: one write
of the server loop's driver (`artifacts.services.async_ingest.apply_event_async`) is recorded
pipeline by pipeline as it sends them, and each floor write replays that recording with its
own event's values put in place of the recorded one's (event id, artifact id, created_at, the
stored text, the artifact's advisory-lock key), so the floor follows the relay's SQL and its
round trips as they change, and its writes contend exactly as the relay's would (distinct
artifacts, distinct locks). Not in the floor: the HTTP and ASGI cycle, DRF, NIP-98, the
community lookup, strict JSON parsing, the after-commit publish: what `bench/ingest.py`
reports against it.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import statistics
import time
import uuid
from dataclasses import dataclass
from typing import Any

Params = list[Any] | dict[str, Any] | None


@dataclass(frozen=True)
class Write:
    """One pre-signed artifact create, as the floor needs it."""

    event_id: str
    created_at: int
    artifact_id: uuid.UUID
    raw: str
    pubkey: bytes
    digest: bytes
    signature: bytes
    lock_key: int


@dataclass(frozen=True)
class Statement:
    sql: str
    params: Params


# One pipeline's statements (one round trip), in order.
Batch = list[Statement]


@dataclass(frozen=True)
class Template:
    """The pipelines of one recorded write, and the write whose values they hold."""

    batches: list[Batch]
    write: Write


def make_write(*, secret: str, community_id: int, h: str, artifact_tags: Any) -> Write:
    import orjson

    from nostr.events import sign_event

    d = uuid.uuid4()
    event = sign_event(secret, kind=45010, content='{"version":1}', tags=artifact_tags(
        op="create", d=str(d), h=h, title=f"floor {d.hex[:8]}"))
    return write_of(event, orjson.dumps(event).decode(), community_id=community_id)


def write_of(event: dict[str, Any], raw: str, *, community_id: int) -> Write:
    """The floor's values of a signed artifact create (`event`, whose JSON text is `raw`)."""
    from artifacts.services.artifact_revisions import artifact_lock_key

    d = uuid.UUID(next(tag[1] for tag in event["tags"] if tag[0] == "d"))
    return Write(
        event_id=event["id"], created_at=event["created_at"], artifact_id=d, raw=raw,
        pubkey=bytes.fromhex(event["pubkey"]), digest=bytes.fromhex(event["id"]),
        signature=bytes.fromhex(event["sig"]), lock_key=artifact_lock_key(community_id, d),
    )


def record_ingest(*, community: Any, secret: str, h: str, artifact_tags: Any) -> Template:
    """Run one real write of the server loop's driver (Django set up, in this process, on an
    event loop of its own) and record each pipeline it sends."""
    import psycopg

    from artifacts.services import async_ingest
    from artifacts.services.ingest import check_event
    from nostr.events import Event
    from nostr.schnorr import pubkey_from_secret
    from relaycore.db import psycopg_connect_kwargs

    write = make_write(secret=secret, community_id=community.pk, h=h,
                       artifact_tags=artifact_tags)
    batches: list[Batch] = []
    send = async_ingest._pipeline

    async def recorder(conn: Any, batch: Any) -> Any:
        batches.append([Statement(sql, list(params) if isinstance(params, tuple) else params)
                        for sql, params in batch])
        return await send(conn, batch)

    async def one_write() -> Any:
        now = int(time.time())
        checked = check_event(community=community, raw=write.raw.encode(),
                              authenticated_pubkeys=(pubkey_from_secret(secret),), now=now)
        assert isinstance(checked, Event), checked
        conn = await psycopg.AsyncConnection.connect(**psycopg_connect_kwargs(), autocommit=True)
        try:
            return await async_ingest.apply_event_async(
                conn, community_id=community.pk, event=checked, now=now)
        finally:
            await conn.close()

    async_ingest._pipeline = recorder  # type: ignore[assignment]
    try:
        result = asyncio.run(one_write())
    finally:
        async_ingest._pipeline = send
    if not (result.accepted and result.message == ""):
        raise RuntimeError(f"the recorded ingest was not accepted: {result.message}")
    return Template(batches, write)


def substitute(template: Template, write: Write) -> list[Batch]:
    """The template's pipelines with `write`'s values in place of the recorded write's."""
    old = template.write
    swap: dict[Any, Any] = {
        old.event_id: write.event_id, old.created_at: write.created_at,
        old.artifact_id: write.artifact_id, str(old.artifact_id): str(write.artifact_id),
        old.raw: write.raw, old.lock_key: write.lock_key,
    }

    def one(value: Any) -> Any:
        if isinstance(value, bool) or value is None:
            return value
        return swap.get(value, value)

    def put_in(statement: Statement) -> Statement:
        params = statement.params
        if isinstance(params, dict):
            params = {key: one(value) for key, value in params.items()}
        elif params is not None:
            params = [one(value) for value in params]
        return Statement(statement.sql, params)

    return [[put_in(statement) for statement in batch] for batch in template.batches]


@dataclass(frozen=True)
class _Job:
    connect: dict[str, Any]
    prepare_threshold: int | None
    writes: list[tuple[Write, list[Batch]]]
    connections: int


async def floor_write(conn: Any, write: Write, batches: list[Batch]) -> None:
    """One floor write: a bare verify, then the recorded pipelines (BEGIN to COMMIT), each one
    round trip, every statement prepared on the server as the relay's driver sends it."""
    from coincurve import PublicKeyXOnly

    assert PublicKeyXOnly(write.pubkey).verify(write.signature, write.digest)
    await replay_write(conn, batches)


async def replay_write(conn: Any, batches: list[Batch]) -> None:
    """A write's recorded pipelines (BEGIN to COMMIT), each one round trip."""
    cursor = conn.cursor()
    for batch in batches:
        await send_batch(cursor, batch)


async def send_batch(cursor: Any, batch: Batch) -> None:
    """`batch` in one pipeline (one round trip) on `cursor`'s connection, every statement
    prepared on the server as the relay's driver sends it."""
    async with cursor.connection.pipeline():
        for statement in batch:
            await cursor.execute(statement.sql, statement.params, prepare=True)


def _floor_process(job: _Job, out: Any) -> None:
    import psycopg

    async def main() -> tuple[float, list[float]]:
        queue = list(reversed(job.writes))
        latencies: list[float] = []
        conns = [await psycopg.AsyncConnection.connect(
            **job.connect, autocommit=True, prepare_threshold=job.prepare_threshold)
            for _ in range(job.connections)]

        async def loop_on(conn: Any) -> None:
            while queue:
                write, statements = queue.pop()
                started = time.perf_counter()
                await floor_write(conn, write, statements)
                latencies.append(time.perf_counter() - started)

        started = time.perf_counter()
        await asyncio.gather(*(loop_on(conn) for conn in conns))
        elapsed = time.perf_counter() - started
        for conn in conns:
            await conn.close()
        return elapsed, latencies

    out.put(asyncio.run(main()))


def run_floor(template: Template, writes: list[Write], *, connections: int,
              processes: int) -> tuple[float, float, float]:
    """(writes/s, p50 ms, p99 ms): `writes` through the floor over `connections` connections
    shared by `processes` processes (the relay's worker count)."""
    from relaycore.db import psycopg_connect_kwargs

    connect = psycopg_connect_kwargs()
    prepare_threshold = connect.pop("prepare_threshold")  # as the relay's connections have it
    shares = [connections // processes + (i < connections % processes)
              for i in range(processes)]
    shares = [share for share in shares if share]
    prepared = [(write, substitute(template, write)) for write in writes]
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    workers = [
        context.Process(target=_floor_process, args=(
            _Job(connect, prepare_threshold, prepared[i::len(shares)], share), queue))
        for i, share in enumerate(shares)
    ]
    for worker in workers:
        worker.start()
    results = [queue.get() for _ in workers]
    for worker in workers:
        worker.join()
    elapsed = max(seconds for seconds, _ in results)
    latencies = sorted(latency for _, each in results for latency in each)
    p99 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))]
    return len(latencies) / elapsed, statistics.median(latencies) * 1000, p99 * 1000
