"""The floors served over HTTP: what a relay on uvicorn pays before any code of its own.

`bench/round_floor.py` and `bench/ingest_floor.py` measure a quiet round's and an artifact
create's work driven directly (a bare BIP-340 verify, the relay's own recorded statements, and
for a round the Redis `SET NX` claim), with no HTTP at all: the floors of issue 20's targets.
Every request the relay answers also crosses the loopback, uvicorn's HTTP parser and ASGI
cycle, and the load generator, all on the same two cores. This puts exactly that in front of
each floor and nothing else: a bare ASGI application (no Django, no DRF, no NIP-98 decoding, no
token, no rendering) served by uvicorn with the relay's options
(`buzzrelay.server.uvicorn_options`) and as many workers, each worker with an asyncio pool of
its share of the connections:

- `round_app`: `round_floor.floor_round` per `POST`, answered with the relay's quiet page byte
  for byte; `bench/load.py` drives it with its rounds' wrk script beside the floor;
- `write_app`: per `POST` of an artifact create, the floor's values read from the body
  (`ingest_floor.write_of`) and `ingest_floor.floor_write`, answered `["OK", id, true, ""]`;
  `bench/ingest.py` drives it with its own client and with wrk, `bench/load.py` with wrk;
- `write_ceiling_app`: the write floor plus what the contract requires of every `POST /event`
  that the floor leaves out (the NIP-98 header checked and its id claimed in Redis, the body
  verified as an event: a second signature and both ids recomputed), its writes batched as the
  relay's group commit batches them: the most any relay serving the contract over HTTP could
  reach here. `bench/ingest.py` and `bench/load.py` drive it with the writes' wrk script.

So, in one run: served floor / floor is what serving HTTP (and the load generator) costs any
relay on this machine, relay / served floor what the relay's own code costs above that, and
ceiling / floor how far group commit can carry a relay that does what the contract asks.

    python -m bench.served_floor --save-write-job FILE --host H --channel C --connections N
                                                # the job file of `write_app` (Django set up)
                                                # and of `write_ceiling_app`
"""

from __future__ import annotations

import asyncio
import json
import os
import pickle
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._harness import OUT, Server, free_port, relay_env, wait_until_serving  # noqa: E402
from bench.ingest_floor import replay_write, send_batch  # noqa: E402
from bench.round_floor import largest_share  # noqa: E402

JOB_VARIABLE = "BUZZ_SERVED_FLOOR_JOB"
ANSWER_VARIABLE = "BUZZ_SERVED_FLOOR_ANSWER"

Scope = dict[str, Any]
# One request's work: its body, the worker's pool and Redis client, its ASGI scope; the
# answer's body.
Handler = Callable[[bytes, Any, Any, Scope], Awaitable[bytes]]


def round_app() -> Any:
    """The round floor (`uvicorn --factory bench.served_floor:round_app`), one per worker:
    `round_floor.floor_round` per `POST`, answered with the relay's quiet page."""
    from coincurve import PublicKeyXOnly

    from bench.round_floor import FloorJob, configure_floor_connection, floor_round

    job = FloorJob.loads(Path(os.environ[JOB_VARIABLE]).read_bytes())
    answer = Path(os.environ[ANSWER_VARIABLE]).read_bytes()
    key = PublicKeyXOnly(job.pubkey)

    async def one_round(body: bytes, pool: Any, client: Any, scope: Scope) -> bytes:
        async with pool.connection() as conn:
            await floor_round(job, key, conn, client)
        return answer

    async def configure(conn: Any) -> None:
        await configure_floor_connection(job, conn)

    return _served(one_round, connect=job.connect, connections=job.connections,
                   redis_url=job.redis_url, configure=configure)


def write_app() -> Any:
    """The write floor (`uvicorn --factory bench.served_floor:write_app`), one per worker:
    per `POST` of an artifact create, its values read from the body (`ingest_floor.write_of`)
    and `ingest_floor.floor_write` (a bare verify, the relay's recorded pipelines with the
    event's values), answered `["OK", id, true, ""]` as the relay answers an accepted write."""
    import django

    django.setup()  # the lock key is the relay's own function (artifact_revisions)
    import orjson

    from bench.ingest_floor import floor_write, substitute, write_of

    job = pickle.loads(Path(os.environ[JOB_VARIABLE]).read_bytes())
    template, community_id = job["template"], job["community_id"]

    async def one_write(body: bytes, pool: Any, client: Any, scope: Scope) -> bytes:
        write = write_of(orjson.loads(body), body.decode(), community_id=community_id)
        async with pool.connection() as conn:
            await floor_write(conn, write, substitute(template, write))
        return orjson.dumps(["OK", write.event_id, True, ""])

    return _served(one_write, connect=job["connect"], connections=job["connections"],
                   redis_url=None)


def write_ceiling_app() -> Any:
    """The ceiling of `POST /event` on this machine (`uvicorn --factory
    bench.served_floor:write_ceiling_app`), one per worker: the least any relay serving the
    contract over HTTP can do per write, with group commit and nothing else.

    Per request, what PROTOCOL.md sections 3 and 4 require and the served write floor leaves
    out: the NIP-98 header checked (`nostr.nip98.verify_nip98`: its URL, method, window,
    payload hash and signature), its id claimed once in Redis (`SET NX EX` through the relay's
    lean client, `relaycore.redis_pipe`, claims of one loop turn in one write), and the body
    parsed and verified as an event (`nostr.events.parse_event`: the id recomputed, then the
    signature). Then the floor's write, batched as the relay's group commit batches: a write
    that finds no transaction of its worker in flight goes at once, alone (the floor's own
    write); the writes that arrive meanwhile wait and go together in the next transaction,
    each round trip carrying every write's statements of that step (one BEGIN, one COMMIT).
    Left out, on the ceiling's side: the community lookup (the host is taken as served), the
    rate limits, each write's savepoint and every refusal path. With the job's `group_commit`
    false, every write goes alone, at once, on a connection of its own: group commit's own
    share of the ceiling."""
    import time

    import django

    django.setup()  # the lock key is the relay's own function (artifact_revisions)
    import orjson

    from bench.ingest_floor import substitute, write_of
    from nostr.events import parse_event
    from nostr.nip98 import verify_nip98
    from relaycore.redis_clients import pipelined_redis

    job = pickle.loads(Path(os.environ[JOB_VARIABLE]).read_bytes())
    template, community_id = job["template"], job["community_id"]
    batcher = _CeilingBatcher(template.batches, group_commit=job.get("group_commit", True))

    async def one_write(body: bytes, pool: Any, client: Any, scope: Scope) -> bytes:
        now = int(time.time())
        headers = dict(scope["headers"])
        url = f"http://{headers[b'host'].decode()}{scope['path']}"
        authorization = headers.get(b"authorization", b"").decode()
        auth = verify_nip98(authorization, url=url, method="POST", body=body, now=now)
        if not await pipelined_redis().set_nx(f"ceiling:{auth.event_id}", b"1", ex=120):
            raise RuntimeError("a NIP-98 event was replayed")
        event = parse_event(body, now=now)  # parsed once: the write's values are its fields
        write = write_of(event.to_dict(), event.raw, community_id=community_id)
        await batcher.write(pool, substitute(template, write))
        return orjson.dumps(["OK", event.id, True, ""])

    return _served(one_write, connect=job["connect"], connections=job["connections"],
                   redis_url=None)


class _CeilingBatcher:
    """Group commit for the ceiling: at most one transaction of this worker in flight; the
    writes that arrive meanwhile go together in the next one (at most 64, as the relay's)."""

    LIMIT = 64

    def __init__(self, batches: list[Any], *, group_commit: bool) -> None:
        first, last = batches[0], batches[-1]
        if first[0].sql != "BEGIN" or last[-1].sql != "COMMIT":
            raise RuntimeError("the recorded write is not one BEGIN ... COMMIT transaction")
        self.group_commit = group_commit
        self.waiting: list[tuple[list[Any], Any]] = []
        self.busy = False

    async def write(self, pool: Any, batches: list[Any]) -> None:
        if not self.group_commit:
            async with pool.connection() as conn:
                await replay_write(conn, batches)
            return
        if self.busy:
            done = asyncio.get_running_loop().create_future()
            self.waiting.append((batches, done))
            await done
            return
        self.busy = True
        try:
            async with pool.connection() as conn:
                await replay_write(conn, batches)
        finally:
            if self.waiting:
                asyncio.get_running_loop().create_task(self._drain(pool))
            else:
                self.busy = False

    async def _drain(self, pool: Any) -> None:
        try:
            while self.waiting:
                group, self.waiting = self.waiting[:self.LIMIT], self.waiting[self.LIMIT:]
                try:
                    async with pool.connection() as conn:
                        await _commit_together(conn, [batches for batches, _ in group])
                except BaseException as exc:
                    for _, done in group:
                        done.set_exception(exc)
                    raise
                for _, done in group:
                    done.set_result(None)
        finally:
            self.busy = False


async def _commit_together(conn: Any, writes: list[list[Any]]) -> None:
    """`writes` (each its recorded pipelines, BEGIN to COMMIT) in one transaction: step by
    step, one round trip a step carrying every write's statements of that step, one BEGIN and
    the budgets first, one COMMIT last."""
    steps = len(writes[0])
    cursor = conn.cursor()
    for step in range(steps):
        statements = []
        for batches in writes:
            batch = batches[step]
            if step == 0:
                head, batch = batch[:2], batch[2:]  # BEGIN and the budgets, once
                if batches is writes[0]:
                    statements += head
            if step == steps - 1:
                batch = batch[:-1]  # COMMIT, once
            statements += batch
        if step == steps - 1:
            statements.append(writes[0][-1][-1])
        await send_batch(cursor, statements)


def _served(handle: Handler, *, connect: dict[str, Any], connections: int,
            redis_url: str | None,
            configure: Callable[[Any], Awaitable[None]] | None = None) -> Any:
    """A bare ASGI application: `handle` per `POST` on a connection of its asyncio pool
    (`connections` of them, opened at startup, each given `configure` first), 200 with its
    bytes; any `GET` answers 200 with nothing (the harness's readiness probe)."""
    held: dict[str, Any] = {"redis": None}

    async def lifespan(receive: Any, send: Any) -> None:
        import psycopg_pool
        import redis.asyncio

        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                pool = psycopg_pool.AsyncConnectionPool(
                    kwargs={**connect, "autocommit": True}, min_size=connections,
                    max_size=connections, configure=configure, open=False)
                await pool.open(wait=True)
                held["pool"] = pool
                if redis_url:
                    held["redis"] = redis.asyncio.Redis.from_url(redis_url)
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await held["pool"].close()
                if held["redis"] is not None:
                    await held["redis"].aclose()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def application(scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await lifespan(receive, send)
            return
        chunks = []
        more = True
        while more:  # the body, whole, as any relay reads it
            message = await receive()
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        answer = b""
        if scope["method"] == "POST":
            answer = await handle(b"".join(chunks), held["pool"], held["redis"], scope)
        await send({"type": "http.response.start", "status": 200, "headers": [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(answer)).encode())]})
        await send({"type": "http.response.body", "body": answer})

    return application


def start_rounds(svc: Any, *, connections: int, workers: int, answer: bytes,
                 reader_secret: str, host: str) -> Server:
    """Record the relay's quiet round (`round_floor.py --save-job`), then serve the round
    floor on a free port with `workers` uvicorn workers sharing `connections` connections; the
    caller stops the server. `answer` is the body every request gets (the relay's quiet page)."""
    job, body = _job_file("round_app"), OUT / "served-floor-answer.json"
    body.write_bytes(answer)
    recorded = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "round_floor.py"), "--save-job", str(job),
         "--connections", str(connections), "--processes", str(workers),
         "--reader-secret", reader_secret, "--host", host],
        env=relay_env(svc), capture_output=True, text=True, check=False,
    )
    if recorded.returncode != 0:
        raise RuntimeError(f"bench/round_floor.py --save-job failed:\n{recorded.stderr[-3000:]}")
    return _start(svc, "round_app", workers=workers,
                  env={JOB_VARIABLE: str(job), ANSWER_VARIABLE: str(body)})


def start_writes(svc: Any, template: Any, *, community_id: int, connections: int,
                 workers: int) -> Server:
    """Serve the write floor of `template` (`ingest_floor.record_ingest`, Django set up in
    this process) on a free port with `workers` uvicorn workers sharing `connections`
    connections; the caller stops it."""
    job = _job_file("write_app")
    job.write_bytes(_write_job(template, community_id=community_id,
                               connections=largest_share(connections, workers)))
    return _start(svc, "write_app", workers=workers, env={JOB_VARIABLE: str(job)})


def start_write_ceiling(svc: Any, template: Any, *, community_id: int, connections: int,
                        workers: int, group_commit: bool = True) -> Server:
    """`start_writes`, serving the write's ceiling (`write_ceiling_app`) instead."""
    job = _job_file("write_ceiling_app" if group_commit else "write_ceiling_app-alone")
    job.write_bytes(_write_job(template, community_id=community_id,
                               connections=largest_share(connections, workers),
                               group_commit=group_commit))
    return _start(svc, "write_ceiling_app", workers=workers, env={JOB_VARIABLE: str(job)})


def start_writes_recorded(svc: Any, *, host: str, channel: str, connections: int,
                          workers: int, factory: str = "write_app") -> Server:
    """`start_writes` (or, with `factory="write_ceiling_app"`, `start_write_ceiling`) from a
    process without Django: the write is recorded (one artifact create by bench/ingest.py's
    writer into `channel` of the community at `host`) by this module run as a command, which
    writes the job file."""
    job = _job_file(factory)
    recorded = subprocess.run(
        [sys.executable, "-m", "bench.served_floor", "--save-write-job", str(job),
         "--host", host, "--channel", channel,
         "--connections", str(largest_share(connections, workers))],
        env=relay_env(svc), cwd=ROOT, capture_output=True, text=True, check=False,
    )
    if recorded.returncode != 0:
        raise RuntimeError(f"recording the write floor failed:\n{recorded.stderr[-3000:]}")
    return _start(svc, factory, workers=workers, env={JOB_VARIABLE: str(job)})


def _job_file(factory: str) -> Path:
    """Where `factory`'s job is written for its workers to read (bench/out, kept until the
    next run overwrites it, like the benches' other outputs)."""
    OUT.mkdir(parents=True, exist_ok=True)
    return OUT / f"served-floor-{factory}.pickle"


def _write_job(template: Any, *, community_id: int, connections: int,
               group_commit: bool = True) -> bytes:
    from relaycore.db import psycopg_connect_kwargs

    return pickle.dumps({"template": template, "community_id": community_id,
                         "connect": psycopg_connect_kwargs(), "connections": connections,
                         "group_commit": group_commit})


def _start(svc: Any, factory: str, *, workers: int, env: dict[str, str]) -> Server:
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", f"bench.served_floor:{factory}", "--factory",
         "--host", "127.0.0.1", "--port", str(port), "--workers", str(workers),
         *_uvicorn_flags(svc)],
        env={**relay_env(svc), **env, "PYTHONPATH": str(ROOT)},
        cwd=ROOT, start_new_session=True, stdout=subprocess.DEVNULL,
    )
    server = Server(process, port)
    wait_until_serving(server, f"{server.url}/healthz", f"the served floor ({factory}) did"
                       " not start")
    return server


def _uvicorn_flags(svc: Any) -> list[str]:
    """`buzzrelay.server.uvicorn_options()` as uvicorn's command-line flags (the relay's own
    options, read from its settings in a process of their own)."""
    code = (
        "import django, json; django.setup();"
        " from buzzrelay.server import uvicorn_options; print(json.dumps(uvicorn_options()))"
    )
    done = subprocess.run([sys.executable, "-c", code], env=relay_env(svc), cwd=ROOT,
                          capture_output=True, text=True, check=True)
    options = json.loads(done.stdout.strip().splitlines()[-1])
    flags = {
        "lifespan": ["--lifespan", options["lifespan"]],
        "log_level": ["--log-level", options["log_level"]],
        "ws_max_size": ["--ws-max-size", str(options["ws_max_size"])],
        "ws_per_message_deflate": ["--ws-per-message-deflate",
                                   str(options["ws_per_message_deflate"]).lower()],
        "timeout_graceful_shutdown": ["--timeout-graceful-shutdown",
                                      str(options["timeout_graceful_shutdown"])],
        "proxy_headers": [] if options["proxy_headers"] else ["--no-proxy-headers"],
        "access_log": [] if options["access_log"] else ["--no-access-log"],
        # The relay's bounded protocols and log filter (relaycore/connection_limits.py) have
        # no command-line spelling: the floor runs uvicorn's httptools and websockets-sansio,
        # which the relay's subclass, and the guard's cost is the relay's.
        "http": [],
        "ws": [],
        "log_config": [],
    }
    unknown = set(options) - set(flags)
    if unknown:  # a new relay option this bench does not pass on yet
        raise RuntimeError(f"served floor: no uvicorn flag for {sorted(unknown)}")
    return [flag for name in options for flag in flags[name]]


def main() -> int:
    import argparse

    parser = argparse.ArgumentParser(description="record the write floor's job (see above)")
    parser.add_argument("--save-write-job", metavar="FILE", required=True)
    parser.add_argument("--host", required=True)
    parser.add_argument("--channel", required=True)
    parser.add_argument("--connections", type=int, required=True, help="per worker")
    args = parser.parse_args()
    import django

    django.setup()
    from artifacts.models import Community
    from bench.ingest import WRITER_SECRET, artifact_tags
    from bench.ingest_floor import record_ingest

    community = Community.objects.get(host=args.host)
    template = record_ingest(community=community, secret=WRITER_SECRET, h=args.channel,
                             artifact_tags=artifact_tags)
    Path(args.save_write_job).write_bytes(
        _write_job(template, community_id=community.pk, connections=args.connections))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
