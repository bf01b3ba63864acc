"""Re-read, not re-sent (issue 40): what a continuation round sends under steady writes.

A busy workspace, as the issue tried it: per side, a fresh database, one writer creating
artifacts at `--rate` per second in one channel through `POST /event`, and one reader continuing
a round every `--interval` seconds (pages of 1,000) through a relay of its own that connects as
another database role, so that pg_stat_statements tells the rounds' database work apart from the
writes'. After `--seconds`, `buzz-sync --watch -v` (the real client, live hints over the
WebSocket) runs `--watch-seconds` under the same writes, its first (full) round left out.

Both sides in one run, one after the other on the same PostgreSQL and Redis, each on a database
of its own: the baseline (`--baseline REF`, default `main`, a temporary `git worktree`) and the
candidate (this tree). Printed per side: rows sent per round against the artifacts created since
the previous round's start (median over the rounds after `--steady-after` s, and the sums), the
database work of a round (statements, rows, shared buffers, execution ms: medians over the same
rounds), and the watch's rows received per second against the writes accepted per second. The
targets (issue 40) are checked on the candidate:

- rows sent per round <= 1.1x the artifacts changed since the previous round;
- a round's database execution time and buffers no worse than the baseline's (medians, within
  the machine's noise: 1.25x);
- `buzz-sync --watch`: rows received per second <= 1.2x the writes.

    .venv/bin/python bench/resend.py                      # 160 s + 60 s per side, against main
    .venv/bin/python bench/resend.py --seconds 40 --watch-seconds 20 --steady-after 30 --no-baseline
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import orjson
import psycopg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._harness import (  # noqa: E402
    VENV_BIN,
    Server,
    Services,
    _buzz_admin,
    describe_tree,
    git_worktree,
    print_table,
    relay_env,
    services,
    start_server_in,
)
from bench.ingest import WRITER_SECRET, artifact_tags  # noqa: E402
from bench.load import serve_settings  # noqa: E402
from nostr.events import sign_event  # noqa: E402
from nostr.nip98 import make_nip98_header  # noqa: E402
from nostr.schnorr import pubkey_from_secret  # noqa: E402

HOST = "127.0.0.1"
READER_SECRET = "3" * 64
READER_ROLE = "buzz_resend_reader"
PAGE_LIMIT = 1000
WRITER_CONNECTIONS = 4


def _url(base: str, *, user: str | None = None, database: str | None = None) -> str:
    parts = urlsplit(base)
    netloc = parts.netloc
    if user is not None:
        netloc = f"{user}@{netloc.rsplit('@', 1)[-1]}"
    path = f"/{database}" if database is not None else parts.path
    return urlunsplit((parts.scheme, netloc, path, parts.query, parts.fragment))


@dataclass
class Work:
    calls: int = 0
    rows: int = 0
    buffers: int = 0
    exec_ms: float = 0.0

    def minus(self, other: Work) -> Work:
        return Work(self.calls - other.calls, self.rows - other.rows,
                    self.buffers - other.buffers, self.exec_ms - other.exec_ms)


def reader_work(admin: psycopg.Connection[Any]) -> Work:
    row = admin.execute(
        """SELECT coalesce(sum(calls), 0), coalesce(sum(rows), 0),
                  coalesce(sum(shared_blks_hit + shared_blks_read), 0),
                  coalesce(sum(total_exec_time), 0)
             FROM pg_stat_statements s JOIN pg_roles r ON r.oid = s.userid
            WHERE r.rolname = %s AND s.dbid = (
                  SELECT oid FROM pg_database WHERE datname = current_database())""",
        [READER_ROLE],
    ).fetchone()
    assert row is not None
    return Work(int(row[0]), int(row[1]), int(row[2]), float(row[3]))


@dataclass
class RoundFigure:
    at: float  # seconds since the writes began
    created: int  # artifacts created since the previous round started
    rows: int  # rows sent: events + removals
    pages: int
    work: Work


@dataclass
class SideResult:
    name: str
    label: str
    rounds: list[RoundFigure] = field(default_factory=list)
    watch_rows: int = 0
    watch_writes: int = 0
    watch_seconds: float = 0.0
    writes_accepted: int = 0
    writes_refused: int = 0


class Writer(threading.Thread):
    """Pre-signed creates in one channel at `rate` per second, until stopped (the NIP-98 header
    is signed as each is sent: it is valid for 60 s only)."""

    def __init__(self, url: str, channel: str, rate: float, count: int) -> None:
        super().__init__(daemon=True)
        self.url, self.rate = f"{url}/event", rate
        self.bodies = []
        for _ in range(count):
            d = str(uuid.uuid4())
            event = sign_event(WRITER_SECRET, kind=45010, content='{"version":1}',
                               tags=artifact_tags(op="create", d=d, h=channel, title=d[:8]))
            self.bodies.append(orjson.dumps(event))
        self.stop = threading.Event()
        self.accepted = self.refused = 0

    def run(self) -> None:
        # A few connections, each taking the next write when its time comes: on a loaded
        # machine one connection's answers come too slowly to hold the rate.
        started = time.monotonic()
        queue = iter(enumerate(self.bodies))
        lock = threading.Lock()

        def send() -> None:
            import httpx

            with httpx.Client(timeout=30) as http:
                while True:
                    with lock:
                        index, body = next(queue, (-1, b""))
                    if index < 0:
                        return
                    pause = started + index / self.rate - time.monotonic()
                    if self.stop.wait(max(pause, 0)):
                        return
                    header = make_nip98_header(WRITER_SECRET, url=self.url, method="POST",
                                               body=body)
                    answer = http.post(self.url, content=body, headers={
                        "Authorization": header, "Content-Type": "application/json"})
                    ok = answer.status_code == 200 and answer.json()[2] is True
                    with lock:
                        self.accepted += ok
                        self.refused += not ok

        senders = [threading.Thread(target=send, daemon=True) for _ in range(WRITER_CONNECTIONS)]
        for sender in senders:
            sender.start()
        for sender in senders:
            sender.join()


def continue_round(http: Any, url: str, token: str | None) -> tuple[str, int, int]:
    """One whole round; (token, rows sent, pages)."""
    rows = pages = 0
    while True:
        body = orjson.dumps([{"artifact": "current", "progress": token, "limit": PAGE_LIMIT}])
        header = make_nip98_header(READER_SECRET, url=f"{url}/query", method="POST", body=body)
        response = http.post(f"{url}/query", content=body, headers={
            "Authorization": header, "Content-Type": "application/json"})
        if response.status_code != 200:
            raise RuntimeError(f"/query answered {response.status_code}: {response.text}")
        page = orjson.loads(response.content)
        rows += len(page["events"]) + len(page["removed"])
        pages += 1
        token = page["progress"]
        if not page["more"]:
            assert token is not None
            return token, rows, pages


def created(admin: psycopg.Connection[Any]) -> int:
    row = admin.execute("SELECT count(*) FROM artifact_heads").fetchone()
    assert row is not None
    return int(row[0])


_ANSWERED = re.compile(r"relay answered: ([\d,]+) events?, ([\d,]+) removals?")


def watch(server: Server, writer: Writer, seconds: float, workdir: Path) -> tuple[int, int, float]:
    """`buzz-sync --watch -v` for `seconds` after its first round: (rows received, writes
    accepted meanwhile, seconds)."""
    key = workdir / "reader.key"
    key.write_text(READER_SECRET)
    key.chmod(0o600)
    process = subprocess.Popen(
        [str(VENV_BIN / "buzz-sync"), "--relay", server.url, "--key-file", str(key),
         "--db", str(workdir / "watch.sqlite"), "--watch", "--json", "-v", "--no-verify"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )
    counting = threading.Event()
    rows = [0]
    first_round = threading.Event()

    def stdout() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            if line.startswith("{") and '"round"' in line:
                first_round.set()

    def stderr() -> None:
        assert process.stderr is not None
        for line in process.stderr:
            found = _ANSWERED.search(line)
            if found and counting.is_set():
                rows[0] += int(found.group(1).replace(",", "")) + int(
                    found.group(2).replace(",", ""))

    readers = [threading.Thread(target=stdout, daemon=True),
               threading.Thread(target=stderr, daemon=True)]
    for thread in readers:
        thread.start()
    try:
        if not first_round.wait(120):
            raise RuntimeError("buzz-sync --watch did not finish its first round")
        time.sleep(1)  # let the live subscription settle
        writes_before, began = writer.accepted, time.monotonic()
        counting.set()
        time.sleep(seconds)
        counting.clear()
        return rows[0], writer.accepted - writes_before, time.monotonic() - began
    finally:
        process.terminate()
        process.wait(15)


def run_side(svc: Services, name: str, root: Path, label: str, args: argparse.Namespace,
             workdir: Path) -> SideResult:
    database = f"buzz_resend_{name}"
    with psycopg.connect(_url(svc.database_url, database="postgres"), autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {database} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {database}")
        if conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s",
                        [READER_ROLE]).fetchone() is None:
            conn.execute(f"CREATE ROLE {READER_ROLE} LOGIN SUPERUSER")
    side = Services(_url(svc.database_url, database=database), svc.redis_url)
    env = relay_env(side)
    _buzz_admin(env, "migrate", "--build-indexes")
    _buzz_admin(env, "community", "--host", HOST, "--name", f"resend {name}", "--artifacts", "on",
                "--admin", pubkey_from_secret(WRITER_SECRET))
    admin = psycopg.connect(side.database_url, autocommit=True)
    admin.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
    settings = serve_settings(120)
    result = SideResult(name, label)
    with ExitStack() as stack:
        writes_server = start_server_in(root, "serve-tree", side, env=settings)
        stack.callback(writes_server.stop)
        reads_server = start_server_in(root, "serve-tree", side, env={
            **settings, "DATABASE_URL": _url(side.database_url, user=READER_ROLE)})
        stack.callback(reads_server.stop)
        print(f"{name}: {label}; serving {reads_server.code}", flush=True)
        channel = str(uuid.uuid4())
        event = sign_event(WRITER_SECRET, kind=9007, content="",
                           tags=[["h", channel], ["name", "busy"]])
        import httpx

        body = orjson.dumps(event)
        answer = httpx.post(f"{writes_server.url}/event", content=body, headers={
            "Authorization": make_nip98_header(WRITER_SECRET, url=f"{writes_server.url}/event",
                                               method="POST", body=body),
            "Content-Type": "application/json"})
        assert answer.status_code == 200 and answer.json()[2] is True, answer.text
        total = int(args.rate * (args.seconds + args.watch_seconds + 90))
        writer = Writer(writes_server.url, channel, args.rate, total)
        http = httpx.Client(timeout=60)
        token, _rows, _pages = continue_round(http, reads_server.url, None)  # empty: a full round
        admin.execute("SELECT pg_stat_statements_reset()")
        writer.start()
        began = time.monotonic()
        previous = created(admin)
        while time.monotonic() - began < args.seconds:
            time.sleep(max(0.0, args.interval - (time.monotonic() - began) % args.interval))
            now_created, work_before = created(admin), reader_work(admin)
            at = time.monotonic() - began
            token, rows, pages = continue_round(http, reads_server.url, token)
            result.rounds.append(RoundFigure(at, now_created - previous, rows, pages,
                                             reader_work(admin).minus(work_before)))
            previous = now_created
            print(f"  {name} {at:6.1f} s: {rows:5d} rows sent in {pages} page(s) for "
                  f"{result.rounds[-1].created} created", flush=True)
        http.close()
        result.watch_rows, result.watch_writes, result.watch_seconds = watch(
            reads_server, writer, args.watch_seconds, workdir)
        writer.stop.set()
        writer.join(30)
        result.writes_accepted, result.writes_refused = writer.accepted, writer.refused
    admin.close()
    return result


def steady(result: SideResult, after: float) -> list[RoundFigure]:
    return [r for r in result.rounds if r.at >= after] or result.rounds[-3:]


def report(results: list[SideResult], args: argparse.Namespace) -> int:
    rows: list[list[object]] = []
    for result in results:
        rounds = steady(result, args.steady_after)
        ratios = [r.rows / r.created for r in rounds if r.created]
        sent, made = sum(r.rows for r in rounds), sum(r.created for r in rounds)
        rows.append([
            result.name, len(rounds), f"{statistics.median(r.created for r in rounds):.0f}",
            f"{statistics.median(r.rows for r in rounds):.0f}",
            f"{statistics.median(ratios):.2f}" if ratios else "-",
            f"{sent / made:.2f}" if made else "-",
            f"{statistics.median(r.work.calls for r in rounds):.0f}",
            f"{statistics.median(r.work.buffers for r in rounds):.0f}",
            f"{statistics.median(r.work.exec_ms for r in rounds):.2f}",
            f"{result.watch_rows / result.watch_seconds:.1f}",
            f"{result.watch_writes / result.watch_seconds:.1f}",
            f"{result.watch_rows / max(result.watch_writes, 1):.2f}",
            f"{result.writes_accepted}/{result.writes_refused}",
        ])
    print(f"\nRounds every {args.interval:g} s under {args.rate:g} creates/s, from "
          f"{args.steady_after:g} s on (medians per round; the overlap is 120 s):")
    print_table(["side", "rounds", "created", "rows sent", "sent / created", "sum ratio",
                 "statements", "buffers", "exec ms", "watch rows/s", "writes/s",
                 "watch rows / writes", "writes ok/refused"], rows)
    candidate = results[-1]
    rounds = steady(candidate, args.steady_after)
    ratio = statistics.median(r.rows / r.created for r in rounds if r.created)
    watch_ratio = candidate.watch_rows / max(candidate.watch_writes, 1)
    checks = [("rows sent per round <= 1.1x created (median)", ratio <= 1.1, f"{ratio:.2f}"),
              ("watch rows/s <= 1.2x writes/s", watch_ratio <= 1.2, f"{watch_ratio:.2f}")]
    if len(results) == 2:
        base = steady(results[0], args.steady_after)
        for figure, attribute in (("exec ms", "exec_ms"), ("buffers", "buffers")):
            b = statistics.median(getattr(r.work, attribute) for r in base)
            c = statistics.median(getattr(r.work, attribute) for r in rounds)
            checks.append((f"a round's {figure} no worse than the baseline's (<= 1.25x)",
                           c <= 1.25 * b, f"{c / b:.2f}x" if b else "-"))
    print()
    print_table(["target", "met", "figure"], [[t, "yes" if ok else "NO", f] for t, ok, f in checks])
    return 0 if all(ok for _, ok, _ in checks) else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=160)
    parser.add_argument("--steady-after", type=float, default=150)
    parser.add_argument("--watch-seconds", type=float, default=60)
    parser.add_argument("--rate", type=float, default=40)
    parser.add_argument("--interval", type=float, default=5)
    parser.add_argument("--baseline", default="main", metavar="REF")
    parser.add_argument("--no-baseline", action="store_true")
    args = parser.parse_args()
    results = []
    with services() as svc, tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        sides = []
        if not args.no_baseline:
            tree, commit = stack.enter_context(git_worktree(args.baseline))
            sides.append(("baseline", tree, f"{args.baseline} = {commit[:10]}"))
        sides.append(("candidate", ROOT, f"{ROOT} at {describe_tree(ROOT)}"))
        for name, root, label in sides:
            workdir = Path(tmp) / name
            workdir.mkdir()
            results.append(run_side(svc, name, root, label, args, workdir))
    return report(results, args)


if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "buzzrelay.settings")
    # A background run ignores SIGINT: SIGTERM then stops it with the servers and the
    # baseline's worktree cleaned up.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    raise SystemExit(main())
