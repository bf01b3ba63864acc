"""Database load and serving throughput: clients continuing rounds against clients re-reading.

The relay is served the way the README deploys it (`buzz-admin serve`: uvicorn, production
settings) against PostgreSQL and Redis on this machine. Two measurements:

**Load** (per N and churn): M simulated clients each keep a collection current once per
(simulated) minute while a writer changes `churn` of the artifacts per minute. Population
"full" runs a full round every time (what a client does without `artifacts.incremental`);
population "continuation" continues its rounds. Time is compressed: a simulated minute lasts
`--minute-seconds` real seconds and the relay's overlap is scaled with it (120 s of 60 s =
2 minutes), so each continuation round re-reads the changes of about three minutes, exactly as
it would in real time. Database work per round comes from PostgreSQL's own accounting
(pg_stat_statements of the relay's role: calls, rows, shared buffers hit/read, execution time;
the writer runs under another role and is not counted) and relay CPU from the server processes.

**Throughput**: continuation rounds with nothing pending, every request NIP-98 signed (each
with its own event id, pre-signed so the load generator stays cheap), driven by wrk, against
their **floor** run in the same invocation (after each run of the relay: `bench/round_floor.py`,
the relay's own statements for that round recorded from its driver and replayed over as many
connections by as many processes as the relay has workers, with a bare BIP-340 verify and a
Redis SET NX per round), so "relay / floor" is what the HTTP edge and the relay's Python cost;
and against the **served floor** (`bench/served_floor.py`: that same round behind uvicorn with
the relay's options and workers, answering the relay's bytes, driven by the same wrk script),
which splits it: "served / floor" is what serving HTTP costs any relay here, "relay / served"
what the relay's own code costs above it. The writes' A/B also runs the **write's ceiling**
(`served_floor.write_ceiling_app`): the served write floor plus what the contract requires of
every `POST /event`, batched by group commit, the most any relay could serve here.

    bin/bootstrap bench && .venv/bin/python bench/load.py                # N = 10k, 100k
    .venv/bin/python bench/load.py --n 1000000 --clients 4 --minutes 2
    .venv/bin/python bench/load.py --skip-load --throughput-seconds 20    # throughput only

**How to A/B** against an earlier commit, in one run: `--baseline REF` (`main~3`, a hash)
adds a detached `git worktree` of REF in a temporary directory (removed at exit) and serves it
from there (this venv's interpreter, the worktree as working directory and PYTHONPATH; each
server prints the `buzzrelay` it imported) beside the candidate: this tree, uncommitted changes
included. Same PostgreSQL, Redis, seeded community (migrated by the candidate) and settings;
wrk alternates baseline, candidate, baseline, ... for `--rounds` runs of `--throughput-seconds`
each, so noise hits both alike, over continuation rounds (`POST /query`, at each of
`--connections`), NIP-11 (`GET /info`) and pre-signed artifact creates (`POST /event`;
failed = not 200 `["OK", id, true, ...]`), the last two at the first of `--connections`. It
prints each side's runs, then the medians and candidate/baseline ratios of the medians: quote
those. `--skip-load` leaves only the A/B. `--baseline-patch FILE` applies FILE to the baseline's
worktree first: `bench/patches/9e8ea44-fence-afresh.patch` brings the old `/query` fast path (the
main before the DRF edge) to PROTOCOL.md section 5 as it stands since issue 19, the fence read
afresh for every page (it reused one for a second) with the statement today's relay runs, so the
A/B compares the two edges on one protocol.

    .venv/bin/python bench/load.py --skip-load --baseline main~1 --rounds 3
    .venv/bin/python bench/load.py --skip-load --baseline 9e8ea44 \
        --baseline-patch bench/patches/9e8ea44-fence-afresh.patch --rounds 5 --throughput-seconds 8
    .venv/bin/python bench/load.py --skip-load --baseline HEAD --throughput-seconds 5 --rounds 2
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import re
import signal
import statistics
import sys
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import psutil
import psycopg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import served_floor  # noqa: E402
from bench._harness import (  # noqa: E402
    OUT,
    Server,
    Services,
    WrkResult,
    describe_tree,
    git_worktree,
    print_table,
    relay_env,
    run_wrk,
    services,
    setup_database,
    start_server,
    start_server_in,
)
from bench.ingest import WRITER_SECRET, artifact_tags  # noqa: E402
from bench.reads import change, seed  # noqa: E402
from nostr.events import sign_event  # noqa: E402
from nostr.nip98 import make_nip98_header  # noqa: E402
from nostr.schnorr import pubkey_from_secret  # noqa: E402

HOST = "127.0.0.1"
READER_SECRET = "3" * 64
PAGE_LIMIT = 1000
WRITER_ROLE = "buzz_bench_writer"


@dataclass
class Accounting:
    calls: int = 0
    rows: int = 0
    buffers: int = 0
    exec_ms: float = 0.0
    cpu_s: float = 0.0

    def per(self, rounds: int) -> dict[str, float]:
        rounds = max(rounds, 1)
        return {
            "calls": self.calls / rounds, "rows": self.rows / rounds,
            "buffers": self.buffers / rounds, "exec_ms": self.exec_ms / rounds,
            "cpu_ms": self.cpu_s * 1000 / rounds,
        }


def _admin(database_url: str) -> psycopg.Connection[Any]:
    return psycopg.connect(database_url, autocommit=True)


def statements_snapshot(conn: psycopg.Connection[Any]) -> Accounting:
    """The relay role's totals in pg_stat_statements (the writer's role is left out)."""
    row = conn.execute(
        """
        SELECT coalesce(sum(calls), 0), coalesce(sum(rows), 0),
               coalesce(sum(shared_blks_hit + shared_blks_read), 0),
               coalesce(sum(total_exec_time), 0)
          FROM pg_stat_statements s JOIN pg_roles r ON r.oid = s.userid
         WHERE r.rolname = current_user AND s.dbid = (
               SELECT oid FROM pg_database WHERE datname = current_database())
        """
    ).fetchone()
    assert row is not None
    return Accounting(int(row[0]), int(row[1]), int(row[2]), float(row[3]))


def server_cpu(server: Server) -> float:
    try:
        parent = psutil.Process(server.process.pid)
        processes = [parent, *parent.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0.0
    total = 0.0
    for process in processes:
        try:
            times = process.cpu_times()
            total += times.user + times.system
        except psutil.NoSuchProcess:
            pass
    return total


def database_cpu() -> float:
    """CPU seconds of the PostgreSQL server's processes on this machine (every database's: the
    benchmark's is the only one busy while it runs)."""
    total = 0.0
    for process in psutil.process_iter(["name", "cpu_times"]):
        name, times = process.info["name"] or "", process.info["cpu_times"]
        if times is not None and (name == "postgres" or name.startswith("postgres:")):
            total += times.user + times.system
    return total


class CpuMeter:
    """The relay's and the database server's CPU over one run, per request served: on a
    shared, noisy machine a rate alone cannot tell a cheaper request from a quieter minute."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.relay, self.database = server_cpu(server), database_cpu()

    def per_request(self, run: Run, requests: int) -> Run:
        requests = max(requests, 1)
        run.relay_cpu_us = (server_cpu(self.server) - self.relay) * 1e6 / requests
        run.db_cpu_us = (database_cpu() - self.database) * 1e6 / requests
        return run


class Reader:
    """One simulated client: a collection (d -> event id) and its progress token."""

    def __init__(self, base_url: str, secret: str) -> None:
        import httpx

        self.base_url = base_url
        self.secret = secret
        self.http = httpx.Client(timeout=60)
        self.token: str | None = None
        self.collection: dict[str, str] = {}

    def round(self, *, full: bool) -> int:
        """One complete round; returns the number of pages."""
        progress = None if full or self.token is None else self.token
        pages = 0
        while True:
            body = orjson.dumps([{"artifact": "current", "progress": progress,
                                  "limit": PAGE_LIMIT}])
            url = f"{self.base_url}/query"
            header = make_nip98_header(self.secret, url=url, method="POST", body=body)
            response = self.http.post(url, content=body, headers={
                "Authorization": header, "Content-Type": "application/json"})
            if response.status_code != 200:
                raise RuntimeError(f"/query answered {response.status_code}: {response.text}")
            page = orjson.loads(response.content)
            pages += 1
            if page["reset"]:
                self.collection.clear()
            for event in page["events"]:
                d = next(t[1] for t in event["tags"] if t[0] == "d")
                self.collection[d] = event["id"]
            for removed in page["removed"]:
                self.collection.pop(removed["d"], None)
            progress = page["progress"]
            if not page["more"]:
                self.token = progress
                return pages


@dataclass
class PhaseResult:
    population: str
    n: int
    churn: float
    rounds: int
    pages: int
    per_round: dict[str, float]
    overruns: int
    latencies: list[float] = field(default_factory=list)


def run_population(
    *, svc: Services, server: Server, community_id: int, n: int, churn: float, full: bool,
    clients: int, minutes: int, minute_seconds: float, rng: random.Random,
) -> PhaseResult:
    readers = [Reader(server.url, READER_SECRET) for _ in range(clients)]
    with ThreadPoolExecutor(clients) as pool:  # warm-up: every client holds a finished round
        list(pool.map(lambda r: r.round(full=True), readers))
    changes_per_minute = max(1, round(n * churn))
    writer = psycopg.connect(svc.database_url, autocommit=True)
    writer.execute(f"SET ROLE {WRITER_ROLE}")
    admin = _admin(svc.database_url)
    admin.execute("SELECT pg_stat_statements_reset()")
    before, cpu_before = statements_snapshot(admin), server_cpu(server)
    pages = overruns = 0
    latencies: list[float] = []
    lock = threading.Lock()

    def one(reader: Reader, delay: float) -> None:
        nonlocal pages
        time.sleep(delay)
        begin = time.perf_counter()
        count = reader.round(full=full)
        with lock:
            pages += count
            latencies.append(time.perf_counter() - begin)

    for _ in range(minutes):
        started = time.monotonic()
        with writer.cursor() as cursor:
            change(cursor, community_id, n, changes_per_minute, rng)
        with ThreadPoolExecutor(clients) as pool:  # spread over the minute like real clients
            spacing = minute_seconds / clients
            list(pool.map(one, readers, [i * spacing for i in range(clients)]))
        spare = minute_seconds - (time.monotonic() - started)
        if spare > 0:
            time.sleep(spare)
        else:
            overruns += 1
    after, cpu_after = statements_snapshot(admin), server_cpu(server)
    writer.close()
    admin.close()
    delta = Accounting(
        after.calls - before.calls, after.rows - before.rows, after.buffers - before.buffers,
        after.exec_ms - before.exec_ms, cpu_after - cpu_before,
    )
    rounds = clients * minutes
    return PhaseResult("full" if full else "continuation", n, churn, rounds, pages,
                       delta.per(rounds), overruns, latencies)


def prepare(svc: Services, n: int) -> int:
    """Seed N artifacts for the reader; returns the community id."""
    with _admin(svc.database_url) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        exists = conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", [WRITER_ROLE])
        if exists.fetchone() is None:
            conn.execute(f"CREATE ROLE {WRITER_ROLE} SUPERUSER")
        row = conn.execute("SELECT id FROM communities WHERE host = %s", [HOST]).fetchone()
        assert row is not None, "setup_database creates the community"
        community_id = int(row[0])
        with conn.transaction(), conn.cursor() as cursor:
            seed(cursor, community_id, n, pubkey_from_secret(READER_SECRET))
        for table in ("artifact_heads", "artifact_revisions", "events", "channel_members"):
            conn.execute(f"VACUUM ANALYZE {table}")
    return community_id


def migrate_and_community(svc: Services) -> None:
    """Migrate and make sure this bench's community exists (a failing step stops the bench
    with buzz-admin's own message, `setup_database`)."""
    setup_database(svc, host=HOST, name="Bench load")


def serve_settings(overlap: int) -> dict[str, str]:
    """The relay's settings for every benchmark server: the overlap, rate limits off."""
    return {
        "ARTIFACT_SYNC_OVERLAP_SECONDS": str(overlap),
        "RELAY_RATE_LIMIT_ADDRESS_RATE": "0", "RELAY_RATE_LIMIT_PUBKEY_RATE": "0",
    }


def serve(svc: Services, *, workers: int, overlap: int, root: Path | None = None) -> Server:
    """`buzz-admin serve`; from the source tree `root` when given (A/B runs)."""
    if root is None:
        return start_server("serve", svc, workers=workers, **serve_settings(overlap))
    return start_server_in(root, "serve-tree", svc, workers=workers,
                           env=serve_settings(overlap))


WRK_SCRIPT = """
local headers = {}
for line in io.lines(os.getenv("BUZZ_HEADERS")) do headers[#headers + 1] = line end
local body = io.open(os.getenv("BUZZ_BODY")):read("*a")
local i = 0
request = function()
  i = i + 1
  -- Past the end the ids repeat: the relay refuses replays (counted as failures).
  if i > #headers then i = 1 end
  return wrk.format("POST", nil, {["Authorization"] = headers[i],
                                  ["Content-Type"] = "application/json"}, body)
end
"""


def throughput(server: Server, *, seconds: int, connections: int, expected_rps: int) -> Any:
    """Continuation rounds with nothing pending, each request signed with its own event id."""
    reader = Reader(server.url, READER_SECRET)
    reader.round(full=True)
    body = orjson.dumps([{"artifact": "current", "progress": reader.token, "limit": 100}])
    return wrk_rounds(f"{server.url}/query", body, seconds=seconds, connections=connections,
                      expected_rps=expected_rps)


def wrk_rounds(url: str, body: bytes, *, seconds: int, connections: int,
               expected_rps: int) -> Any:
    """wrk posting `body` to `url`, each request with a NIP-98 header of its own (pre-signed:
    the load generator stays cheap); (wrk's result, headers signed, seconds signing)."""
    count = expected_rps * (seconds + 2)
    with tempfile.TemporaryDirectory() as tmp:
        headers_path, body_path, script = (Path(tmp) / n for n in ("h", "b", "s.lua"))
        body_path.write_bytes(body)
        script.write_text(WRK_SCRIPT)
        begin = time.perf_counter()
        with headers_path.open("w") as out:
            for _ in range(count):
                out.write(make_nip98_header(READER_SECRET, url=url, method="POST",
                                            body=body) + "\n")
        signing = time.perf_counter() - begin
        os.environ.update(BUZZ_HEADERS=str(headers_path), BUZZ_BODY=str(body_path))
        result = run_wrk(url, seconds=seconds, connections=connections, script=script)
    return result, count, signing


# --- A/B against a baseline commit (--baseline) -------------------------------------------------

WRITES_SCRIPT = """
local headers, bodies = {}, {}
for line in io.lines(os.getenv("BUZZ_HEADERS")) do headers[#headers + 1] = line end
for line in io.lines(os.getenv("BUZZ_BODIES")) do bodies[#bodies + 1] = line end
local i = 0
local threads = {}
accepted, refused = 0, 0
setup = function(thread) threads[#threads + 1] = thread end
request = function()
  i = i + 1
  -- Past the end the events repeat: duplicates and NIP-98 replays (counted as failures).
  if i > #headers then i = 1 end
  return wrk.format("POST", nil, {["Authorization"] = headers[i],
                                  ["Content-Type"] = "application/json"}, bodies[i])
end
response = function(status, hdrs, body)
  if status == 200 and string.find(body, '^%["OK","%x+",true,') then
    accepted = accepted + 1
  else
    refused = refused + 1
  end
end
done = function(summary, latency, requests)
  local a, r = 0, 0
  for _, t in ipairs(threads) do a = a + t:get("accepted"); r = r + t:get("refused") end
  io.write(string.format("BUZZ accepted %d refused %d\\n", a, r))
end
"""
# The writes' channel: one of the open channels bench.reads.seed creates (anyone may write in an
# open channel; the writer is no member of anything).
WRITE_CHANNEL = str(uuid.UUID(hashlib.md5(b"ch1").hexdigest()))
WARM_UP_SECONDS = 2


@dataclass
class Side:
    name: str  # "baseline" or "candidate"
    label: str  # the commit (and uncommitted changes) it serves
    server: Server


@dataclass
class Run:
    rate: float  # per second: rounds, documents, accepted writes
    p50_ms: float
    p99_ms: float
    failed: int
    note: str = ""
    # CPU per request (us) of the relay's processes and of the database server's, over the run
    # (`CpuMeter`); None where not measured.
    relay_cpu_us: float | None = None
    db_cpu_us: float | None = None


def _signed_enough(result: WrkResult, signed: int) -> str:
    return "" if result.requests <= signed else (
        f"ran out of signed requests ({result.requests} sent, {signed} signed)")


def _sized(rates: list[float]) -> int:
    """Requests per second to pre-sign for: the fastest rate seen so far with a margin."""
    return int(max(rates) * 1.5) + 200


def check_quiet_continuation(server: Server) -> tuple[bytes, bytes]:
    """The A/B's rounds must be continuations with nothing pending on both sides (a side that
    is not ready for incremental reads would answer full rounds instead). Returns the round's
    request body and the relay's answer."""
    reader = Reader(server.url, READER_SECRET)
    reader.round(full=True)
    body = orjson.dumps([{"artifact": "current", "progress": reader.token, "limit": 100}])
    url = f"{server.url}/query"
    response = reader.http.post(url, content=body, headers={
        "Authorization": make_nip98_header(READER_SECRET, url=url, method="POST", body=body),
        "Content-Type": "application/json"})
    page = orjson.loads(response.content) if response.status_code == 200 else {}
    if response.status_code != 200 or page["reset"] or page["more"] or page["events"] \
            or page["removed"]:
        raise RuntimeError(f"{server.url}: a continuation round is not quiet: "
                           f"{response.status_code} {response.text[:300]}")
    return body, response.content


def check_nip11(server: Server) -> None:
    import httpx

    response = httpx.get(f"{server.url}/info", headers={"Accept": "application/nostr+json"})
    if response.status_code != 200 or "supported_nips" not in response.json():
        raise RuntimeError(f"{server.url}/info: {response.status_code} {response.text[:300]}")


def sign_writes(url: str, count: int, channel: str = WRITE_CHANNEL) -> list[tuple[bytes, str]]:
    """`count` artifact creates in `channel`, each with its NIP-98 header for `url`."""
    requests = []
    for _ in range(count):
        d = str(uuid.uuid4())
        event = sign_event(WRITER_SECRET, kind=45010, content='{"version":1}', tags=artifact_tags(
            op="create", d=d, h=channel, title=f"A/B write {d[:8]}"))
        body = orjson.dumps(event)
        requests.append(
            (body, make_nip98_header(WRITER_SECRET, url=url, method="POST", body=body)))
    return requests


def check_write(server: Server) -> None:
    import httpx

    url = f"{server.url}/event"
    ((body, header),) = sign_writes(url, 1)
    response = httpx.post(url, content=body, headers={
        "Authorization": header, "Content-Type": "application/json"})
    answer = response.json() if response.status_code == 200 else None
    if not (isinstance(answer, list) and answer[:3] == ["OK", orjson.loads(body)["id"], True]):
        raise RuntimeError(f"{url}: a write was not accepted: "
                           f"{response.status_code} {response.text[:300]}")


def heads_in_write_channel(svc: Services, community_id: int) -> int:
    """The heads in the writes' channel once the writes still in flight have landed (wrk stops
    with up to one request per connection unanswered, which the relay may yet commit): the
    count read again every 0.2 s until it stays put."""
    with _admin(svc.database_url) as conn:
        last = -1
        while True:
            row = conn.execute(
                "SELECT count(*) FROM artifact_heads WHERE community_id = %s AND channel_id = %s",
                [community_id, WRITE_CHANNEL],
            ).fetchone()
            assert row is not None
            if int(row[0]) == last:
                return last
            last = int(row[0])
            time.sleep(0.2)


def writes(server: Server, *, seconds: int, connections: int, expected_rps: int,
           channel: str = WRITE_CHANNEL) -> tuple[WrkResult, int, int, int]:
    """Pre-signed artifact creates in `channel` through wrk; (result, signed, accepted,
    refused)."""
    url = f"{server.url}/event"
    requests = sign_writes(url, expected_rps * (seconds + 2), channel)
    with tempfile.TemporaryDirectory() as tmp:
        headers_path, bodies_path, script = (Path(tmp) / n for n in ("h", "b", "s.lua"))
        headers_path.write_text("".join(f"{header}\n" for _, header in requests))
        bodies_path.write_bytes(b"".join(body + b"\n" for body, _ in requests))
        script.write_text(WRITES_SCRIPT)
        os.environ.update(BUZZ_HEADERS=str(headers_path), BUZZ_BODIES=str(bodies_path))
        result = run_wrk(url, seconds=seconds, connections=connections, script=script)
    counts = re.search(r"BUZZ accepted (\d+) refused (\d+)", result.output)
    if counts is None:
        raise RuntimeError(f"the writes' wrk script printed no counts:\n{result.output}")
    return result, len(requests), int(counts.group(1)), int(counts.group(2))


def floor_run(svc: Services, *, seconds: int, connections: int, processes: int) -> Run:
    """One run of the rounds' floor (bench/round_floor.py) in processes of its own, as many
    as the relay has workers, over the same number of connections."""
    import subprocess

    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "round_floor.py"), "--json", "--seconds",
         str(seconds), "--connections", str(connections), "--processes", str(processes),
         "--reader-secret", READER_SECRET, "--host", HOST],
        env=relay_env(svc), capture_output=True, text=True, check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"bench/round_floor.py failed:\n{done.stderr[-3000:]}")
    figures = orjson.loads(done.stdout.strip().splitlines()[-1])
    return Run(figures["rate"], figures["p50_ms"], figures["p99_ms"], 0)


def write_run(result: WrkResult, signed: int, accepted: int, refused: int) -> Run:
    """A `writes` run as a Run: accepted writes per second."""
    return Run(result.requests_per_second * accepted / max(result.requests, 1), result.p50_ms,
               result.p99_ms, refused + result.errors, _signed_enough(result, signed))


def start_served_floor(svc: Services, quiet: tuple[bytes, bytes], *, connections: int,
                       workers: int) -> Server:
    """The round floor behind uvicorn (bench/served_floor.py), answering the relay's quiet
    answer `quiet[1]`, for `served_floor_run`."""
    return served_floor.start_rounds(svc, connections=connections, workers=workers, answer=quiet[1],
                              reader_secret=READER_SECRET, host=HOST)


def served_floor_run(served: Server, quiet: tuple[bytes, bytes], *, seconds: int,
                     connections: int, rates: list[float]) -> Run:
    """One wrk run of the relay's rounds (the same script, body and signed headers) against
    the served floor."""
    result, _, _ = wrk_rounds(f"{served.url}/query", quiet[0], seconds=seconds,
                              connections=connections, expected_rps=_sized(rates))
    return Run(result.requests_per_second, result.p50_ms, result.p99_ms,
               result.non_2xx + result.errors)


def floor_row(figure: str, runs: dict[str, list[Run]], floor: list[Run],
              served: list[Run]) -> list[object]:
    rate, on_http = _median(floor, "rate"), _median(served, "rate")
    candidate = _median(runs["candidate"], "rate")
    return [
        figure, f"{rate:.0f}", f"{_median(runs['baseline'], 'rate') / rate:.3f}",
        f"{candidate / rate:.3f}",
        f"{_median(floor, 'p50_ms'):.1f} / {_median(floor, 'p99_ms'):.1f}",
        f"{on_http:.0f}", f"{on_http / rate:.3f}", f"{candidate / on_http:.3f}",
    ]


def _median(runs: list[Run], attribute: str) -> float:
    return statistics.median(getattr(run, attribute) for run in runs)


def print_runs(title: str, unit: str, sides: list[Side], runs: dict[str, list[Run]]) -> None:
    print(f"\n{title}")
    notes = any(run.note for side_runs in runs.values() for run in side_runs)
    cpu = any(run.relay_cpu_us is not None for side_runs in runs.values() for run in side_runs)
    for side in sides:
        print(f"{side.name}: {side.label}")
        print_table(["run", f"{unit}/s", "p50 ms", "p99 ms", "failed",
                     *(["relay CPU us", "database CPU us"] * cpu), *(["note"] * notes)],
                    [[i + 1, f"{run.rate:.0f}", f"{run.p50_ms:.1f}", f"{run.p99_ms:.1f}",
                      run.failed, *([f"{run.relay_cpu_us or 0:.0f}",
                                     f"{run.db_cpu_us or 0:.0f}"] * cpu),
                      *([run.note or "-"] * notes)]
                     for i, run in enumerate(runs[side.name])])


def summary_row(figure: str, runs: dict[str, list[Run]]) -> list[object]:
    base, cand = runs["baseline"], runs["candidate"]
    return [
        figure, f"{_median(base, 'rate'):.0f}", f"{_median(cand, 'rate'):.0f}",
        f"{_median(cand, 'rate') / max(_median(base, 'rate'), 1e-9):.3f}",
        f"{_median(base, 'p50_ms'):.1f} / {_median(cand, 'p50_ms'):.1f}",
        f"{_median(base, 'p99_ms'):.1f} / {_median(cand, 'p99_ms'):.1f}",
        f"{_median(cand, 'p99_ms') / max(_median(base, 'p99_ms'), 1e-9):.3f}",
        f"{sum(r.failed for r in base)} / {sum(r.failed for r in cand)}",
        _cpu_pair(base, cand, "relay_cpu_us"), _cpu_pair(base, cand, "db_cpu_us"),
    ]


def _cpu_pair(base: list[Run], cand: list[Run], attribute: str) -> str:
    """Median CPU us per request, baseline / candidate ("-" where not measured)."""
    if any(getattr(run, attribute) is None for run in (*base, *cand)):
        return "-"
    return f"{_median(base, attribute):.0f} / {_median(cand, attribute):.0f}"


def ab(
    svc: Services, *, ref: str, community_id: int, workers: int, seconds: int, rounds: int,
    connections: list[int], patch: Path | None = None,
) -> None:
    """Candidate (this tree) against a worktree of `ref` (with `patch` applied): three
    figures, runs alternating."""
    with git_worktree(ref, patch) as (tree, commit):
        sides: list[Side] = []
        patched = f" + {patch.name}" if patch is not None else ""
        try:
            for name, root, label in (
                ("baseline", tree, f"{ref} = {commit[:10]}{patched}"),
                ("candidate", ROOT, f"{ROOT} at {describe_tree(ROOT)}"),
            ):
                server = serve(svc, workers=workers, overlap=120, root=root)
                sides.append(Side(name, label, server))
                if f"from {root}/buzzrelay" not in server.code:
                    raise RuntimeError(f"{name} does not serve {root}'s code: {server.code}")
                print(f"{name}: {label}; serving {server.code}", flush=True)
            _ab_figures(svc, sides, community_id=community_id, seconds=seconds, rounds=rounds,
                        connections=connections, workers=workers)
        finally:
            for side in sides:
                side.server.stop()


def _ab_figures(
    svc: Services, sides: list[Side], *, community_id: int, seconds: int, rounds: int,
    connections: list[int], workers: int,
) -> None:
    summary: list[list[object]] = []
    floors: list[list[object]] = []
    first = connections[0]

    # 1. Continuation rounds with nothing pending. A warm-up run per side also sizes how many
    #    requests each run pre-signs.
    rates = []
    for side in sides:
        quiet = check_quiet_continuation(side.server)  # the candidate's answer, last
        result, _, _ = throughput(side.server, seconds=WARM_UP_SECONDS, connections=first,
                                  expected_rps=3000)
        rates.append(result.requests_per_second)
    served = start_served_floor(svc, quiet, connections=max(connections), workers=workers)
    try:
        for conns in connections:
            runs: dict[str, list[Run]] = {side.name: [] for side in sides}
            floor: list[Run] = []
            served_rounds: list[Run] = []
            for _ in range(rounds):
                for side in sides:
                    meter = CpuMeter(side.server)
                    result, signed, _ = throughput(side.server, seconds=seconds,
                                                   connections=conns, expected_rps=_sized(rates))
                    rates.append(result.requests_per_second)
                    runs[side.name].append(meter.per_request(Run(
                        result.requests_per_second, result.p50_ms, result.p99_ms,
                        result.non_2xx + result.errors, _signed_enough(result, signed)),
                        result.requests))
                floor.append(floor_run(svc, seconds=seconds, connections=conns,
                                       processes=workers))
                served_rounds.append(served_floor_run(served, quiet, seconds=seconds,
                                                     connections=conns, rates=rates))
            print_table(["floor run", "rounds/s", "p50 ms", "p99 ms", "served floor /s",
                         "p50 ms", "p99 ms"],
                        [[i + 1, f"{run.rate:.0f}", f"{run.p50_ms:.1f}", f"{run.p99_ms:.1f}",
                          f"{on_http.rate:.0f}", f"{on_http.p50_ms:.1f}",
                          f"{on_http.p99_ms:.1f}"]
                         for i, (run, on_http) in enumerate(zip(floor, served_rounds,
                                                                strict=True))])
            print_runs(f"A/B: POST /query continuation rounds with nothing pending, {conns} "
                       f"connections, {seconds} s per run", "rounds", sides, runs)
            summary.append(summary_row(f"/query rounds, {conns} conns", runs))
            floors.append(floor_row(f"/query rounds, {conns} conns", runs, floor,
                                    served_rounds))
    finally:
        served.stop()

    # 2. The NIP-11 document.
    runs = {side.name: [] for side in sides}
    for side in sides:
        check_nip11(side.server)
    for _ in range(rounds):
        for side in sides:
            result = run_wrk(f"{side.server.url}/info", seconds=seconds, connections=first,
                             headers={"Accept": "application/nostr+json"})
            runs[side.name].append(Run(result.requests_per_second, result.p50_ms,
                                       result.p99_ms, result.non_2xx + result.errors))
    print_runs(f"A/B: GET /info (NIP-11), {first} connections, {seconds} s per run",
               "documents", sides, runs)
    summary.append(summary_row(f"NIP-11 /info, {first} conns", runs))

    # 3. Writes, last: they change artifacts the rounds above would have to return.
    rates = []
    for side in sides:
        check_write(side.server)
        result, *_ = writes(side.server, seconds=WARM_UP_SECONDS, connections=first,
                            expected_rps=1000)
        rates.append(result.requests_per_second)
    runs = {side.name: [] for side in sides}
    served_writes: list[Run] = []
    ceiling_writes: list[Run] = []
    served = served_floor.start_writes_recorded(svc, host=HOST, channel=WRITE_CHANNEL,
                                                connections=first, workers=workers)
    ceiling = served_floor.start_writes_recorded(svc, host=HOST, channel=WRITE_CHANNEL,
                                                 connections=first, workers=workers,
                                                 factory="write_ceiling_app")
    try:
        for _ in range(rounds):
            served_writes.append(write_run(*writes(served, seconds=seconds, connections=first,
                                                    expected_rps=_sized(rates))))
            ceiling_writes.append(write_run(*writes(ceiling, seconds=seconds, connections=first,
                                                     expected_rps=_sized(rates))))
            for side in sides:
                before = heads_in_write_channel(svc, community_id)
                meter = CpuMeter(side.server)
                result, signed, accepted, refused = writes(
                    side.server, seconds=seconds, connections=first,
                    expected_rps=_sized(rates))
                run = meter.per_request(write_run(result, signed, accepted, refused),
                                        result.requests)
                stored = heads_in_write_channel(svc, community_id) - before
                rates.append(result.requests_per_second)
                # wrk stops with up to one request per connection in flight: the relay may store
                # those writes without wrk counting their answers.
                if not accepted <= stored <= accepted + first:
                    stray = f"{accepted} accepted but {stored} heads stored"
                    run.note = f"{run.note}; {stray}" if run.note else stray
                runs[side.name].append(run)
    finally:
        served.stop()
        ceiling.stop()
    print_table(["run", "served write floor /s", "p50 ms", "p99 ms", "failed",
                 "write ceiling /s", "p50 ms", "p99 ms", "failed"],
                [[i + 1, f"{run.rate:.0f}", f"{run.p50_ms:.1f}", f"{run.p99_ms:.1f}",
                  run.failed, f"{top.rate:.0f}", f"{top.p50_ms:.1f}", f"{top.p99_ms:.1f}",
                  top.failed]
                 for i, (run, top) in enumerate(zip(served_writes, ceiling_writes, strict=True))])
    print_runs(f"A/B: POST /event artifact creates (accepted writes/s), {first} connections, "
               f"{seconds} s per run", "writes", sides, runs)
    summary.append(summary_row(f"POST /event writes, {first} conns", runs))
    on_http = _median(served_writes, "rate")
    floors.append([f"POST /event writes, {first} conns", "-", "-", "-", "-", f"{on_http:.0f}",
                   "-", f"{_median(runs['candidate'], 'rate') / on_http:.3f}"])
    at_most = _median(ceiling_writes, "rate")
    floors.append([f"POST /event writes, {first} conns, against the write's ceiling", "-", "-",
                   "-", "-", f"{at_most:.0f}", "-",
                   f"{_median(runs['candidate'], 'rate') / at_most:.3f}"])

    print(f"\nA/B medians over {rounds} runs per side, alternating (baseline {sides[0].label}; "
          f"candidate {sides[1].label})")
    print_table(["figure", "baseline /s", "candidate /s", "candidate / baseline",
                 "p50 ms b / c", "p99 ms b / c", "p99 c / b", "failed b / c",
                 "relay CPU us b / c", "database CPU us b / c"], summary)
    print("\nAgainst the floor (bench/round_floor.py: the same statements, a bare verify and a"
          " Redis SET NX per round, no HTTP edge), medians of the runs interleaved above")
    print_table(["figure", "floor /s", "baseline / floor", "candidate / floor",
                 "floor p50 / p99 ms", "served floor /s", "served / floor",
                 "candidate / served"], floors)
    print("(served floor: the floor's round, or an artifact create's floor write, behind uvicorn"
          " with the relay's options and workers, driven by the same wrk script:"
          " bench/served_floor.py; the write's ceiling: that served write floor plus what the"
          " contract requires of every POST /event, NIP-98 with its claim and the event's own"
          " checks, group-committed (served_floor.write_ceiling_app); the write floor has no"
          " driver-free run here, see bench/ingest.py)")


def plot(results: list[PhaseResult]) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / "load.png"
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for metric, ax, label in (("buffers", axes[0], "shared buffers per round"),
                              ("exec_ms", axes[1], "database execution ms per round")):
        for population, colour in (("full", "#c44e52"), ("continuation", "#4c72b0")):
            for churn, style in ((0.001, "-"), (0.01, "--")):
                points = [(r.n, r.per_round[metric]) for r in results
                          if r.population == population and r.churn == churn]
                if points:
                    ax.plot(*zip(*points, strict=True), style, marker="o", color=colour,
                            label=f"{population}, churn {churn:.1%}/min")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("artifacts (N)")
        ax.set_title(label)
        ax.grid(True, which="both", alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return path


def plot_throughput(rows: list[tuple[int, Any]]) -> Path:
    """Rounds per second, p50 and p99 against concurrent connections."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / "throughput.png"
    connections = [c for c, _ in rows]
    fig, (rate, latency) = plt.subplots(1, 2, figsize=(10, 4))
    rate.plot(connections, [r.requests_per_second for _, r in rows], marker="o")
    rate.axhline(1000, color="#c44e52", linestyle="--", label="target: 1,000/s")
    rate.set_title("continuation rounds per second")
    latency.plot(connections, [r.p50_ms for _, r in rows], marker="o", label="p50")
    latency.plot(connections, [r.p99_ms for _, r in rows], marker="o", label="p99")
    latency.axhline(50, color="#c44e52", linestyle="--", label="target p99: 50 ms")
    latency.set_title("latency (ms)")
    for ax in (rate, latency):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("concurrent connections (wrk)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--churn", type=float, nargs="+", default=[0.001, 0.01],
                        help="share of the artifacts changed per minute")
    parser.add_argument("--clients", type=int, default=6)
    parser.add_argument("--minutes", type=int, default=3, help="simulated minutes per phase")
    parser.add_argument("--minute-seconds", type=float, default=6.0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--skip-load", action="store_true")
    parser.add_argument("--throughput-seconds", type=int, default=15)
    parser.add_argument("--connections", type=int, nargs="+", default=[8],
                        help="wrk connections of the throughput runs, one run each; with several "
                             "a plot of rounds/s and latency against them is written")
    parser.add_argument("--baseline", metavar="REF",
                        help="A/B: serve a git worktree of REF next to this tree and compare "
                             "/query rounds, NIP-11 and POST /event, runs alternating")
    parser.add_argument("--baseline-patch", metavar="FILE", type=Path,
                        help="A/B: apply FILE (git apply) to the baseline's worktree, e.g. "
                             "bench/patches/9e8ea44-fence-afresh.patch")
    parser.add_argument("--rounds", type=int, default=3,
                        help="A/B: runs per side of each figure (default 3)")
    args = parser.parse_args()
    if args.baseline and not args.throughput_seconds:
        parser.error("--baseline needs --throughput-seconds above 0")
    if args.baseline:
        # A terminated run still stops its servers and removes the worktree.
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    overlap = max(1, round(args.minute_seconds * 2))  # 120 s of a 60 s minute
    results: list[PhaseResult] = []
    rng = random.Random(7)
    with services() as svc:
        migrate_and_community(svc)
        seeded: dict[int, int] = {}
        if args.throughput_seconds:
            # First, on the freshly seeded community: after the load phases the last two
            # minutes of churn would still be inside every round's overlap, and the rounds would
            # no longer be "nothing pending".
            seeded[args.n[0]] = prepare(svc, args.n[0])
            if args.baseline:
                ab(svc, ref=args.baseline, community_id=seeded[args.n[0]],
                   workers=args.workers, seconds=args.throughput_seconds, rounds=args.rounds,
                   connections=args.connections, patch=args.baseline_patch)
                del seeded[args.n[0]]  # its writes added artifacts: the load phases reseed
            else:
                throughput_phase(svc, args)
        if not args.skip_load:
            for n in args.n:
                community_id = seeded.get(n) or prepare(svc, n)
                server = serve(svc, workers=args.workers, overlap=overlap)
                try:
                    for churn in args.churn:
                        for full in (True, False):
                            results.append(run_population(
                                svc=svc, server=server, community_id=community_id, n=n,
                                churn=churn, full=full, clients=args.clients,
                                minutes=args.minutes, minute_seconds=args.minute_seconds,
                                rng=rng,
                            ))
                            r = results[-1]
                            print(f"N={n} churn={churn} {r.population}: {r.per_round}",
                                  flush=True)
                finally:
                    server.stop()
            report_load(results)
    return 0


def throughput_phase(svc: Services, args: argparse.Namespace) -> None:
    """Throughput of this tree alone (no --baseline)."""
    server = serve(svc, workers=args.workers, overlap=120)
    rows: list[tuple[int, Any]] = []
    floors: list[Run] = []
    served_floors: list[Run] = []
    try:
        quiet = check_quiet_continuation(server)
        served = start_served_floor(svc, quiet, connections=max(args.connections),
                                    workers=args.workers)
        try:
            for connections in args.connections:
                result, signed, signing = throughput(
                    server, seconds=args.throughput_seconds, connections=connections,
                    expected_rps=3000,
                )
                rows.append((connections, result))
                floors.append(floor_run(svc, seconds=args.throughput_seconds,
                                        connections=connections, processes=args.workers))
                served_floors.append(served_floor_run(
                    served, quiet, seconds=args.throughput_seconds, connections=connections,
                    rates=[result.requests_per_second]))
        finally:
            served.stop()
    finally:
        server.stop()
    print(f"\nthroughput: continuation rounds with nothing pending, NIP-98 on each "
          f"request (each run pre-signs {signed} requests, {signing:.1f} s), "
          f"{args.workers} workers of buzz-admin serve; the served floor is the floor's round"
          f" behind uvicorn (bench/served_floor.py)")
    print_table(["connections", "rounds/s", "p50 ms", "p99 ms", "failed", "floor /s",
                 "relay / floor", "served floor /s", "served / floor", "relay / served"],
                [[c, f"{r.requests_per_second:.0f}", f"{r.p50_ms:.1f}",
                  f"{r.p99_ms:.1f}", r.non_2xx + r.errors, f"{f.rate:.0f}",
                  f"{r.requests_per_second / f.rate:.3f}", f"{h.rate:.0f}",
                  f"{h.rate / f.rate:.3f}", f"{r.requests_per_second / h.rate:.3f}"]
                 for (c, r), f, h in zip(rows, floors, served_floors, strict=True)])
    if len(rows) > 1:
        print(f"plot: {plot_throughput(rows)}")


def report_load(results: list[PhaseResult]) -> None:
    rows = []
    for r in results:
        p = r.per_round
        rows.append([r.n, f"{r.churn:.1%}", r.population, r.rounds, r.pages / r.rounds,
                     f"{p['calls']:.0f}", f"{p['rows']:.0f}", f"{p['buffers']:.0f}",
                     f"{p['exec_ms']:.1f}", f"{p['cpu_ms']:.1f}",
                     f"{statistics.median(r.latencies) * 1000:.0f}", r.overruns])
    print("\nper round (database figures from pg_stat_statements of the relay's role)")
    print_table(["N", "churn/min", "population", "rounds", "pages", "calls", "rows",
                 "buffers", "db exec ms", "relay cpu ms", "p50 ms", "overruns"], rows)
    ratios = []
    for full in (r for r in results if r.population == "full"):
        cont = next(r for r in results if r.population == "continuation" and r.n == full.n
                    and r.churn == full.churn)
        ratios.append([full.n, f"{full.churn:.1%}",
                       f"{full.per_round['buffers'] / max(cont.per_round['buffers'], 1):.0f}x",
                       f"{full.per_round['exec_ms'] / max(cont.per_round['exec_ms'], 1e-3):.0f}x",
                       f"{full.per_round['cpu_ms'] / max(cont.per_round['cpu_ms'], 1e-3):.0f}x",
                       f"{1 / (3 * full.churn):.0f}x"])
    print("\nfull / continuation (bound: a continuation round re-reads ~3 minutes of churn, "
          "so the ratio tends to 1 / (3 x churn))")
    print_table(["N", "churn/min", "buffers", "db exec", "relay cpu", "bound"], ratios)
    print(f"plot: {plot(results)}")


if __name__ == "__main__":
    raise SystemExit(main())
