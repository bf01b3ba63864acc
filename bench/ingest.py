"""Writes: accepted artifact writes per second through POST /event, and what verification costs.

1. Verification cost, in-process: the relay's per-event check (`nostr.events.parse_event`:
   strict JSON, shape, id, BIP-340) and NIP-98 header check, each as a ratio to a bare
   coincurve verify of the same signature (pre-decoded bytes). Target: parse_event within 1.5x.
2. Throughput, end to end: the relay served by `buzz-admin serve`'s server (uvicorn) against
   PostgreSQL and Redis, driven by an asyncio httpx client holding `--concurrency` requests in
   flight. Phase "create": each request creates a new artifact; phase "update": each updates one
   of them (compare-and-swap on its head). Every request carries its own NIP-98 header
   (signed before the phase starts), so Schnorr verification is in every figure. Rate limits
   are turned off for the run (RELAY_RATE_LIMIT_*_RATE=0). Then "move": each artifact moved to a
   second channel (a revision and a relay-signed removal marker); "update hot (CAS)": every
   writer updating one artifact, each signing the head it last saw and trying again when
   another writer's update won (the lost compare-and-swaps are counted apart); "member put":
   kind 9000 puts of new members by the channel's owner; "channel create": kind 9007 creations
   of new channels by a community admin (each takes the community's row lock: they queue on
   it, as the lock order requires). Right after the create phase, its
   floor in the same invocation ("create floor", bench/ingest_floor.py): the relay's own
   statements for an accepted create in its own pipelines (two round trips), recorded from one
   real write of the server loop's driver and replayed with each write's values, and a bare
   verify, as many writes over as many connections and processes; "relay / floor" is what
   everything else costs. Then "create served floor" (bench/served_floor.py): that same floor
   write behind uvicorn (the relay's options and workers), its values read from each request's
   body, driven by this bench's client like the relay: "relay / served floor" is what the
   relay's own code costs, the rest of the gap what serving HTTP and the client cost. Then, by
   wrk, `--wrk-rounds` alternating rounds of the relay, the served floor and the write's
   ceiling (`served_floor.write_ceiling_app`: the served floor plus what the contract requires
   of every request, NIP-98 with its claim and the event's own id and signature, its writes
   group-committed), each round beside a run of the floor: "ceiling / floor" is how far group
   commit can carry any relay that does what the contract asks on this machine.

    .venv/bin/python bench/ingest.py                   # 2,000 writes per phase, 1 and 2 workers
    .venv/bin/python bench/ingest.py --n 20000 --workers 1 2 4 --concurrency 32
    .venv/bin/python bench/ingest.py --settings shipped --workers 2 --concurrency 8 \
        --phases create --wrk-rounds 5 --wrk-seconds 5   # issue 33's /event target
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._harness import (  # noqa: E402
    BENCH_HOST,
    print_table,
    relay_env,
    services,
    setup_database,
    start_server,
)

WRITER_SECRET = "5" * 64
# "shipped": the repository's settings; "pooled": the same with psycopg's connection pool.
SETTINGS = {"shipped": "buzzrelay.settings", "pooled": "bench.ingest_settings"}
UNLIMITED = {
    "RELAY_RATE_LIMIT_ADDRESS_RATE": "0",
    "RELAY_RATE_LIMIT_PUBKEY_RATE": "0",
}


def artifact_tags(
    *, op: str, d: str, h: str, title: str, prev: str | None = None
) -> list[list[str]]:
    tags = [["ar", "1"], ["d", d], ["h", h], ["type", "buzz.task"], ["op", op], ["title", title]]
    return [*tags, ["prev", prev]] if prev else tags


def _interleaved_best(
    checks: list[tuple[str, Callable[[], Any]]], calls: int, repeats: int = 7
) -> dict[str, float]:
    """Best-of-`repeats` CPU seconds per call of each check, the checks taking turns: on a busy
    machine (shared cores) CPU time is what waiting for a core does not inflate."""
    best = {name: float("inf") for name, _ in checks}
    for _ in range(repeats):
        for name, fn in checks:
            started = time.process_time()
            fn()
            best[name] = min(best[name], (time.process_time() - started) / calls)
    return best


def verification_costs(n: int) -> list[list[object]]:
    from coincurve import PublicKeyXOnly

    from nostr.events import parse_event, parse_event_unverified, sign_event
    from nostr.jsonstrict import loads_strict
    from nostr.nip98 import make_nip98_header, verify_nip98

    now = int(time.time())
    h = str(uuid.uuid4())
    events = [
        sign_event(WRITER_SECRET, kind=45010, created_at=now,
                   tags=artifact_tags(op="create", d=str(uuid.uuid4()), h=h,
                                      title=f"Task {i}: fix the payment timeout"),
                   content='{"version":1,"status":"open","body":"' + "x" * 200 + '"}')
        for i in range(n)
    ]
    import orjson

    raws = [orjson.dumps(e) for e in events]
    decoded = [(PublicKeyXOnly(bytes.fromhex(e["pubkey"])), bytes.fromhex(e["sig"]),
                bytes.fromhex(e["id"])) for e in events]
    url = "http://127.0.0.1:8000/event"
    headers = [make_nip98_header(WRITER_SECRET, url=url, method="POST", body=raw) for raw in raws]

    def bare() -> None:
        for key, sig, msg in decoded:
            assert key.verify(sig, msg)

    def bare_from_hex() -> None:
        for e in events:
            assert PublicKeyXOnly(bytes.fromhex(e["pubkey"])).verify(
                bytes.fromhex(e["sig"]), bytes.fromhex(e["id"]))

    def relay() -> None:
        for raw in raws:
            parse_event(raw, now=now)

    def strict_json() -> None:
        for raw in raws:
            loads_strict(raw)

    def unverified() -> None:
        for raw in raws:
            parse_event_unverified(raw, now=now)

    def nip98() -> None:
        for header, raw in zip(headers, raws, strict=True):
            verify_nip98(header, url=url, method="POST", body=raw, now=now)

    checks: list[tuple[str, Callable[[], Any]]] = [
        ("bare coincurve verify (pre-decoded bytes)", bare),
        ("coincurve verify incl. hex decode + key parse", bare_from_hex),
        ("relay parse_event (the per-event check)", relay),
        ("  its checks without the signature", unverified),
        ("  its strict JSON parse alone", strict_json),
        ("relay verify_nip98 (the auth header)", nip98),
    ]
    costs = _interleaved_best(checks, n)
    base = costs[checks[0][0]]
    rows: list[list[object]] = []
    for name, _ in checks:
        rows.append([name, f"{costs[name] * 1e6:.1f}", f"{costs[name] / base:.2f}x"])
    return rows


def _sign_phase(
    op: str, url: str, h: str, artifacts: list[tuple[str, str]]
) -> list[tuple[bytes, str]]:
    import orjson

    from nostr.events import sign_event
    from nostr.nip98 import make_nip98_header

    requests = []
    for d, prev in artifacts:
        tags = artifact_tags(op=op, d=d, h=h, prev=prev if op != "create" else None,
                             title=f"{op} {d[:8]}")
        event = sign_event(WRITER_SECRET, kind=45010, tags=tags, content='{"version":1}')
        body = orjson.dumps(event)
        requests.append((body, make_nip98_header(WRITER_SECRET, url=url, method="POST", body=body)))
    return requests


def _sign_member_puts(url: str, h: str, secret: str, count: int) -> list[tuple[bytes, str]]:
    """`count` kind 9000 puts of new members into channel `h`, signed by its owner `secret`."""
    import orjson

    from nostr.events import sign_event
    from nostr.nip98 import make_nip98_header
    from nostr.schnorr import pubkey_from_secret

    requests = []
    for _ in range(count):
        member = pubkey_from_secret(uuid.uuid4().hex + uuid.uuid4().hex)
        event = sign_event(secret, kind=9000, tags=[["h", h], ["p", member, "member"]],
                           content="")
        body = orjson.dumps(event)
        requests.append((body, make_nip98_header(secret, url=url, method="POST", body=body)))
    return requests


def _sign_channel_creates(url: str, secret: str, count: int) -> list[tuple[bytes, str]]:
    """`count` kind 9007 creations of new channels, signed by the community admin `secret`."""
    import orjson

    from nostr.events import sign_event
    from nostr.nip98 import make_nip98_header

    requests = []
    for index in range(count):
        h = str(uuid.uuid4())
        event = sign_event(secret, kind=9007, tags=[["h", h], ["name", f"bench {index}"]],
                           content="")
        body = orjson.dumps(event)
        requests.append((body, make_nip98_header(secret, url=url, method="POST", body=body)))
    return requests


async def _drive_hot(url: str, h: str, d: str, head: str, attempts: int, concurrency: int
                     ) -> tuple[float, list[float], list[Any]]:
    """Compare-and-swap on one hot artifact: `concurrency` writers each sign an update of the
    head they last saw (shared between them, as clients that hear of each other's writes
    quickly), post it, and on "artifact head changed" try again with the newer head; until
    `attempts` updates were sent. Signing is inside the timed loop (the head is not known
    before), as it is for such clients."""
    import httpx
    import orjson

    from nostr.events import sign_event
    from nostr.nip98 import make_nip98_header

    shared: dict[str, Any] = {"head": head, "sent": 0}
    latencies: list[float] = []
    answers: list[Any] = []
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(limits=limits, timeout=30) as client:

        async def writer() -> None:
            while shared["sent"] < attempts:
                shared["sent"] += 1
                prev = shared["head"]
                event = sign_event(WRITER_SECRET, kind=45010, content='{"version":1}', tags=(
                    artifact_tags(op="update", d=d, h=h, prev=prev, title=f"hot {uuid.uuid4()}")))
                body = orjson.dumps(event)
                started = time.perf_counter()
                response = await client.post(url, content=body, headers={
                    "Authorization": make_nip98_header(WRITER_SECRET, url=url, method="POST",
                                                       body=body),
                    "Content-Type": "application/json"})
                latencies.append(time.perf_counter() - started)
                answer = (response.json() if response.status_code == 200
                          else [response.status_code, response.text])
                answers.append(answer)
                if answer[0] == "OK" and answer[2] is True:
                    shared["head"] = event["id"]

        started = time.perf_counter()
        await asyncio.gather(*(writer() for _ in range(concurrency)))
        elapsed = time.perf_counter() - started
    return elapsed, latencies, answers


def _row(settings: str, workers: int, phase: str, elapsed: float, latencies: list[float],
         answers: list[Any], *, expected: Callable[[Any], bool] | None = None) -> list[object]:
    """A table row: accepted (`OK true ""`) per second, latency percentiles, other answers
    (those `expected` allows, such as a lost compare-and-swap, counted apart)."""
    accepted = [a for a in answers if a[0] == "OK" and a[2] is True and a[3] == ""]
    others = [a for a in answers if a not in accepted]
    allowed = [a for a in others if expected is not None and expected(a)]
    refused = [a for a in others if a not in allowed]
    note = f"{len(allowed)} lost the CAS" if allowed else ""
    if refused:
        note = f"{note}; {refused[:3]}" if note else str(refused[:3])
    return [
        settings, workers, phase, len(answers), len(accepted), f"{len(accepted) / elapsed:.0f}",
        f"{statistics.median(latencies) * 1000:.1f}",
        f"{sorted(latencies)[int(0.99 * (len(latencies) - 1))] * 1000:.1f}",
        note or "-",
    ]


async def _drive(url: str, requests: list[tuple[bytes, str]], concurrency: int) -> tuple[
    float, list[float], list[Any]
]:
    import httpx

    queue = list(reversed(requests))
    latencies: list[float] = []
    answers: list[Any] = []
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(limits=limits, timeout=30) as client:

        async def worker() -> None:
            while queue:
                body, auth = queue.pop()
                started = time.perf_counter()
                response = await client.post(url, content=body, headers={
                    "Authorization": auth, "Content-Type": "application/json"})
                latencies.append(time.perf_counter() - started)
                answers.append(response.json() if response.status_code == 200
                               else [response.status_code, response.text])

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.perf_counter() - started
    return elapsed, latencies, answers


def floor_row(
    template: Any, *, community_id: int, n: int, workers: int, concurrency: int, h: str,
    settings: str, relay_rate: float,
) -> tuple[list[object], float]:
    """The create phase's floor (bench/ingest_floor.py), run right after it, as many writes
    over as many connections and processes; its row and writes/s."""
    from bench.ingest_floor import make_write, run_floor

    writes = [make_write(secret=WRITER_SECRET, community_id=community_id, h=h,
                         artifact_tags=artifact_tags) for _ in range(n)]
    rate, p50, p99 = run_floor(template, writes, connections=concurrency, processes=workers)
    return [settings, workers, "create floor", n, n, f"{rate:.0f}", f"{p50:.1f}", f"{p99:.1f}",
            f"relay / floor {relay_rate / rate:.3f}"], rate


def served_floor_rows(
    svc: Any, relay: Any, template: Any, *, community_id: int, n: int, workers: int,
    concurrency: int, h: str, settings: str, relay_rate: float, floor_rate: float,
    wrk_seconds: int, wrk_rounds: int,
) -> list[list[object]]:
    """The create floor behind uvicorn (bench/served_floor.py), driven by this bench's own
    client as the relay was; then creates through wrk (bench/load.py's driver, C, cheap) into
    the relay, the served floor and the write's ceiling (`served_floor.write_ceiling_app`),
    `wrk_seconds` each, alternating for `wrk_rounds` rounds, each round beside a run of the
    floor itself. What serving HTTP costs any relay here, what the contract adds to it with
    group commit, and what this bench's Python client costs, apart from what the relay's code
    costs."""
    from bench import served_floor
    from bench.load import write_run, writes

    server = served_floor.start_writes(svc, template, community_id=community_id,
                                       connections=concurrency, workers=workers)
    ceiling = served_floor.start_write_ceiling(svc, template, community_id=community_id,
                                               connections=concurrency, workers=workers)
    alone = served_floor.start_write_ceiling(svc, template, community_id=community_id,
                                             connections=concurrency, workers=workers,
                                             group_commit=False)
    try:
        url = f"{server.url}/event"
        warm = [(str(uuid.uuid4()), "") for _ in range(concurrency * workers * 2)]
        asyncio.run(_drive(url, _sign_phase("create", url, h, warm), concurrency))
        created = [(str(uuid.uuid4()), "") for _ in range(n)]
        elapsed, latencies, answers = asyncio.run(
            _drive(url, _sign_phase("create", url, h, created), concurrency))
        row = _row(settings, workers, "create served floor", elapsed, latencies, answers)
        rate = _accepted_rate(answers, elapsed)
        if row[-1] == "-":
            row[-1] = f"relay / served floor {relay_rate / rate:.3f}"
        rows = [row]
        targets = (("create (wrk)", relay), ("create served floor (wrk)", server),
                   ("create ceiling (wrk)", ceiling),
                   ("create ceiling, each write alone (wrk)", alone))
        by_wrk: dict[str, list[float]] = {name: [] for name, _ in targets}
        floors = [floor_rate]
        for round_ in range(wrk_rounds):
            if round_:
                row, again = floor_row(template, community_id=community_id, n=n,
                                       workers=workers, concurrency=concurrency, h=h,
                                       settings=settings, relay_rate=relay_rate)
                floors.append(again)
                rows.append(row)
            for name, target in targets:
                commits = _commits(svc)
                result, signed, accepted, refused = writes(
                    target, seconds=wrk_seconds, connections=concurrency,
                    expected_rps=int(rate * 4), channel=h)
                time.sleep(0.6)  # each backend reports its counts within 0.5 s of going idle
                per_write = (_commits(svc) - commits) / max(accepted, 1)
                run = write_run(result, signed, accepted, refused)
                by_wrk[name].append(run.rate)
                rows.append([settings, workers, name, result.requests, accepted,
                             f"{run.rate:.0f}", f"{run.p50_ms:.1f}", f"{run.p99_ms:.1f}",
                             f"{per_write:.2f} commits a write"
                             + (f"; {run.failed} refused" if run.failed else "")])
        floor, relay_rate_wrk, served_rate, ceiling_rate, alone_rate = (
            statistics.median(rates) for rates in (floors, *by_wrk.values()))
        rows.append([settings, workers, f"medians of {wrk_rounds} (wrk)", "-", "-", "-", "-", "-",
                     f"floor {floor:.0f}/s; relay / floor {relay_rate_wrk / floor:.3f};"
                     f" served floor / floor {served_rate / floor:.3f};"
                     f" ceiling / floor {ceiling_rate / floor:.3f};"
                     f" each write alone / floor {alone_rate / floor:.3f};"
                     f" relay / ceiling {relay_rate_wrk / ceiling_rate:.3f}"])
    finally:
        for each in (server, ceiling, alone):
            each.stop()
    return rows


def _analyze(svc: Any) -> None:
    """ANALYZE the bench database, which re-plans every session's prepared statements.

    Autovacuum is off on this machine's PostgreSQL, so nothing else ever gives the tables
    statistics. The relay's connections prepare their statements on a new database while its
    artifact tables are empty or nearly so, and PostgreSQL keeps the generic plan it made
    then: the head's locking read through `artifact_heads_replay` (the community's every
    head), or a sequential scan after an ANALYZE of a few dozen rows. As the floors' writes
    grew the channel to 60,000 heads, the relay fell from 692 to 131 writes/s in one
    invocation (docs/operations.md, "Table statistics"). Analyzed with a thousand heads, the
    plans are the unique index's, and stay so as the table grows."""
    import psycopg

    with psycopg.connect(svc.database_url, autocommit=True) as conn:
        conn.execute("ANALYZE")


def _commits(svc: Any) -> int:
    """The bench database's committed transactions so far (pg_stat_database)."""
    import psycopg

    with psycopg.connect(svc.database_url, autocommit=True) as conn:
        row = conn.execute("SELECT xact_commit FROM pg_stat_database"
                           " WHERE datname = current_database()").fetchone()
    assert row is not None
    return int(row[0])


def _accepted_rate(answers: list[Any], elapsed: float) -> float:
    """Accepted writes (`OK true`) per second."""
    return sum(1 for a in answers if a[0] == "OK" and a[2] is True) / elapsed


def _lost_cas(answer: Any) -> bool:
    return answer[0] == "OK" and answer[2] is False and "artifact head changed" in answer[3]


def throughput(
    svc: Any, *, n: int, workers: int, concurrency: int, h: str, settings: str,
    template: Any = None, community_id: int = 0, moved_to: str = "", owned: str = "",
    wrk_seconds: int = 8, wrk_rounds: int = 1, create_only: bool = False,
) -> list[list[object]]:
    """Phases, each `n` writes with `concurrency` in flight: create (then its floor), update
    (each artifact once), move (each to `moved_to`: a revision and a removal marker), update of
    one hot artifact (compare-and-swap contended by every writer), member puts into `owned`,
    channel creations (the writer is a community admin)."""
    env = {**UNLIMITED, "DJANGO_SETTINGS_MODULE": SETTINGS[settings]}
    server = start_server("uvicorn", svc, workers=workers, **env)
    url = f"{server.url}/event"
    rows: list[list[object]] = []

    def phase(name: str, requests: list[tuple[bytes, str]]) -> float:
        """Run one phase; its accepted writes per second."""
        import orjson

        elapsed, latencies, answers = asyncio.run(_drive(url, requests, concurrency))
        rows.append(_row(settings, workers, name, elapsed, latencies, answers))
        for body, _ in requests:  # every accepted artifact write is its artifact's head now
            event = orjson.loads(body)
            d = next((t[1] for t in event["tags"] if t[0] == "d"), None)
            if d is not None:
                heads[d] = event["id"]
        return _accepted_rate(answers, elapsed)

    heads: dict[str, str] = {}
    try:
        # Warm-up: connections, the community lookup, imports in every worker.
        warm = [(str(uuid.uuid4()), "") for _ in range(concurrency * workers * 2)]
        asyncio.run(_drive(url, _sign_phase("create", url, h, warm), concurrency))
        created = [(str(uuid.uuid4()), "") for _ in range(n)]
        create_rate = phase("create", _sign_phase("create", url, h, created))
        _analyze(svc)
        if template is not None:
            row, floor_rate = floor_row(
                template, community_id=community_id, n=n, workers=workers,
                concurrency=concurrency, h=h, settings=settings, relay_rate=create_rate)
            rows.append(row)
            rows += served_floor_rows(
                svc, server, template, community_id=community_id, n=n, workers=workers,
                concurrency=concurrency, h=h, settings=settings, relay_rate=create_rate,
                floor_rate=floor_rate, wrk_seconds=wrk_seconds, wrk_rounds=wrk_rounds)
        if create_only:
            return rows
        phase("update", _sign_phase("update", url, h, [(d, heads[d]) for d, _ in created]))
        if moved_to:
            phase("move", _sign_phase("move", url, moved_to,
                                      [(d, heads[d]) for d, _ in created]))
        hot, _ = created[0]
        home = moved_to or h
        elapsed, latencies, answers = asyncio.run(
            _drive_hot(url, home, hot, heads[hot], n, concurrency))
        rows.append(_row(settings, workers, "update hot (CAS)", elapsed, latencies, answers,
                         expected=_lost_cas))
        if owned:
            phase("member put", _sign_member_puts(url, owned, WRITER_SECRET, n))
        phase("channel create", _sign_channel_creates(url, WRITER_SECRET, n))
    finally:
        server.stop()
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2000, help="writes per phase")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--verify-n", type=int, default=2000)
    parser.add_argument("--skip-server", action="store_true", help="verification costs only")
    parser.add_argument("--wrk-seconds", type=int, default=8,
                        help="seconds of each wrk-driven create run (relay, served floor,"
                        " ceiling)")
    parser.add_argument("--wrk-rounds", type=int, default=1,
                        help="rounds of the wrk-driven create runs, alternating, each beside"
                        " a run of the floor; medians reported")
    parser.add_argument("--phases", choices=["all", "create"], default="all",
                        help="'create': stop after the create phase and its floors")
    parser.add_argument("--settings", nargs="+", choices=sorted(SETTINGS),
                        default=["shipped", "pooled"])
    args = parser.parse_args()

    print("Per-event verification cost (CPU us per event, best of 7)")
    print_table(["check", "us/event", "vs bare"], verification_costs(args.verify_n))
    if args.skip_server:
        return 0

    with services() as svc:
        setup_database(svc)
        os.environ.update(relay_env(svc))
        import django

        django.setup()
        from artifacts.models import Community
        from artifacts.services.channels import channel_create
        from artifacts.services.communities import community_update_policy
        from nostr.schnorr import pubkey_from_secret

        community = Community.objects.get(host=BENCH_HOST)
        # The writer creates channels in the last phase: a community admin may.
        community_update_policy(community_id=community.pk,
                                add_admin_pubkeys=[pubkey_from_secret(WRITER_SECRET)])
        h, moved_to, owned = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
        channel_create(community_id=community.pk, channel_id=h, name=f"bench {h.hex[:6]}")
        channel_create(community_id=community.pk, channel_id=moved_to,
                       name=f"bench moves {moved_to.hex[:6]}")
        channel_create(community_id=community.pk, channel_id=owned,
                       name=f"bench members {owned.hex[:6]}",
                       created_by=pubkey_from_secret(WRITER_SECRET))
        from bench.ingest_floor import record_ingest

        template = record_ingest(community=community, secret=WRITER_SECRET, h=str(h),
                                 artifact_tags=artifact_tags)
        rows: list[list[object]] = []
        for settings in args.settings:
            for workers in args.workers:
                rows += throughput(svc, n=args.n, workers=workers,
                                   concurrency=args.concurrency, h=str(h), settings=settings,
                                   template=template, community_id=community.pk,
                                   moved_to=str(moved_to), owned=str(owned),
                                   wrk_seconds=args.wrk_seconds, wrk_rounds=args.wrk_rounds,
                                   create_only=args.phases == "create")
    print()
    print(f"POST /event, {args.concurrency} requests in flight (uvicorn, NIP-98 + Schnorr each)")
    print_table(["settings", "workers", "phase", "sent", "accepted", "writes/s", "p50 ms", "p99 ms",
                 "other answers (sample)"], rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
