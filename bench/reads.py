"""Incremental reads: what a continuation round costs as the collection grows, against a full round.

Seeds one community per N (default 10k and 100k; add 1000000 for the big run) with N artifacts
over N/500 channels (one in five private; the reader is a member of half the private ones) with
fast SQL, once: later runs reuse a community of the right size (`--reseed` to start over). Then
measures in-process, against the database directly, interleaving the communities run by run so
that load from elsewhere on the machine falls on every N alike:

- a continuation round after k = 10 and k = 1,000 head changes: latency p50/p99 over `--runs`
  rounds from the same token, and the shared buffers its statements touch
  (EXPLAIN (ANALYZE, BUFFERS) of each statement the page runs);
- a full round of the whole collection (pages of 1,000) and its cost as a ratio to a k = 10
  continuation round;
- one 500-event page end to end (selector + rendering, and through the Django view with NIP-98)
  against the floor: the same rows fetched with psycopg and rendered with orjson.

Targets (issue 4): the k = 10 round at N = 1M within 1.3x of N = 10k; full round / k = 10
continuation >= 50x at N = 100k; the 500-event page within 3x of the floor.

    .venv/bin/python bench/reads.py                      # N = 10k and 100k
    .venv/bin/python bench/reads.py --n 1000000 --runs 30

**How to A/B** against an earlier commit, in one run: `--baseline REF` (a hash, `main~3`)
checks REF out in a temporary `git worktree` (bench/_harness.py), seeds once, then runs both
sides `--rounds` times, each going first every other time: each run is a fresh process of this
script importing the relay from its side's tree (`--worker-tree`), measuring the continuation
rounds and the 500-event page as above on the same database. It prints each side's runs, then
the medians and candidate/baseline ratios of the medians: quote those.

    .venv/bin/python bench/reads.py --baseline 6aa4179^1 --rounds 3 --runs 15
"""

from __future__ import annotations

import argparse
import importlib
import os
import random
import statistics
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path
from types import ModuleType
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parent.parent
WORKER_FLAG = "--worker-tree"
# An A/B worker imports the relay from its side's tree; everything else from this one.
_WORKER_TREE = sys.argv[sys.argv.index(WORKER_FLAG) + 1] if WORKER_FLAG in sys.argv else None
sys.path.insert(0, _WORKER_TREE or str(ROOT))
if _WORKER_TREE is None:
    from bench._harness import OUT, git_worktree, print_table, relay_env, services

HOST = "bench-reads.example"
READER_SECRET = "3" * 64
CHANNELS_PER_ARTIFACT = 500
PAGE_LIMIT = 1000


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 2)


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def seed(cursor: Any, community_id: int, n: int, reader: str) -> None:
    """N artifacts with their create revisions and stored events; 1% moved once; stamps spread
    over the 30 days before yesterday (outside any overlap window)."""
    channels = max(20, n // CHANNELS_PER_ARTIFACT)
    for table in ("events", "artifact_heads", "artifact_revisions", "channel_members", "channels"):
        cursor.execute(f"DELETE FROM {table} WHERE community_id = %s", [community_id])
    cursor.execute(
        """
        INSERT INTO channels (community_id, channel_id, name, visibility, created_by, created_at)
        SELECT %(c)s, md5('ch' || i)::uuid, 'channel ' || i,
               CASE WHEN i %% 5 = 0 THEN 'private' ELSE 'open' END, '', now()
          FROM generate_series(1, %(channels)s) i
        """,
        {"c": community_id, "channels": channels},
    )
    # The reader is a member of half the private channels; 50 other pubkeys of many channels.
    cursor.execute(
        """
        INSERT INTO channel_members (community_id, channel_id, pubkey, role, joined_at,
                                     removed_at, sync_modified_at)
        SELECT %(c)s, md5('ch' || i)::uuid, %(reader)s, 'member', now(), NULL::timestamptz,
               now() - interval '40 days'
          FROM generate_series(1, %(channels)s) i WHERE i %% 10 = 0
        UNION ALL
        SELECT %(c)s, md5('ch' || i)::uuid, md5('member' || m) || md5('pk' || m), 'member',
               now(), NULL, now() - interval '40 days'
          FROM generate_series(1, %(channels)s) i, generate_series(1, 50) m
         WHERE (i + m) %% 7 = 0
        """,
        {"c": community_id, "channels": channels, "reader": reader},
    )
    cursor.execute(
        """
        CREATE TEMP TABLE seed_rows ON COMMIT DROP AS
        SELECT i,
               md5('a' || i)::uuid AS d,
               md5('e' || i) || md5('f' || i) AS eid,
               md5('ch' || (1 + i %% %(channels)s))::uuid AS h,
               md5('ch' || (1 + (i + 1) %% %(channels)s))::uuid AS source,
               1700000000 + i AS created_at,
               now() - interval '1 day' - (i::float / %(n)s) * interval '30 days' AS stamp,
               i %% 100 = 0 AS moved
          FROM generate_series(1, %(n)s) i
        """,
        {"n": n, "channels": channels},
    )
    cursor.execute(
        """
        INSERT INTO events (community_id, event_id, pubkey, kind, created_at, channel_id, raw,
                            received_at)
        SELECT %(c)s, eid, repeat('ab', 32), 45010, created_at, h,
               json_build_object(
                 'id', eid, 'pubkey', repeat('ab', 32), 'created_at', created_at,
                 'kind', 45010,
                 'tags', json_build_array(
                     json_build_array('ar', '1'), json_build_array('d', d::text),
                     json_build_array('h', h::text), json_build_array('type', 'buzz.task'),
                     json_build_array('op', CASE WHEN moved THEN 'move' ELSE 'create' END),
                     json_build_array('title', 'Task number ' || i)),
                 'content', '{"body":"' || repeat('lorem ipsum ', 30) || '"}',
                 'sig', repeat('cd', 64))::text,
               now()
          FROM seed_rows
        """,
        {"c": community_id},
    )
    cursor.execute(
        """
        INSERT INTO artifact_revisions (community_id, event_id, artifact_id, channel_id, op,
                                        prev_event_id, created_at, source_channel_id,
                                        modified_at)
        SELECT %(c)s, eid, d, h, CASE WHEN moved THEN 'move' ELSE 'create' END, NULL,
               created_at, CASE WHEN moved THEN source END, stamp
          FROM seed_rows
        """,
        {"c": community_id},
    )
    cursor.execute(
        """
        INSERT INTO artifact_heads (community_id, artifact_id, event_id, channel_id,
                                    artifact_type, root, deleted, created_at, modified_at)
        SELECT %(c)s, d, eid, h, 'buzz.task', NULL, false, created_at, stamp FROM seed_rows
        """,
        {"c": community_id},
    )


def age_recent_changes(cursor: Any, community_id: int) -> Any:
    """Send the community's changes of the last day back among the seeded stamps (two days
    old), out of any round's overlap; returns the database's now() after it."""
    for table in ("artifact_heads", "artifact_revisions"):
        cursor.execute(
            f"UPDATE {table} SET modified_at = now() - interval '2 days'"
            " WHERE community_id = %s AND modified_at > now() - interval '1 day'",
            [community_id],
        )
    cursor.execute("SELECT now()")
    return cursor.fetchone()[0]


def change(cursor: Any, community_id: int, n: int, k: int, rng: random.Random) -> None:
    """k head changes as a writer stamps them (a tenth of them moves)."""
    picks = rng.sample(range(1, n + 1), k)
    cursor.execute(
        """
        UPDATE artifact_heads SET modified_at = statement_timestamp()
         WHERE community_id = %(c)s AND artifact_id = ANY(
               SELECT md5('a' || i)::uuid FROM unnest(%(picks)s::int[]) i)
        """,
        {"c": community_id, "picks": picks},
    )
    cursor.execute(
        """
        UPDATE artifact_revisions SET modified_at = statement_timestamp(),
               source_channel_id = md5('ch1')::uuid
         WHERE community_id = %(c)s AND event_id = ANY(
               SELECT md5('e' || i) || md5('f' || i) FROM unnest(%(picks)s::int[]) i)
        """,
        {"c": community_id, "picks": picks[: max(1, k // 10)]},
    )


def _sync_epoch() -> ModuleType:
    """Where the sync epoch's reads live: artifacts' selectors since issue 15, relayinfo before
    (an A/B baseline may predate the move)."""
    try:
        return importlib.import_module("artifacts.selectors.sync_epoch")
    except ImportError:
        return importlib.import_module("relayinfo.sync_epoch")


def done_token(community_id: int, reader: str, query: Any, at: Any) -> str:
    """A finished round's token with T = `at`, as the page that finished it would seal it."""
    from artifacts.selectors.budget import read_transaction
    from artifacts.selectors.reader_view import (
        private_from_row,
        private_statement,
        probe_view,
        summary_digest,
    )
    from artifacts.tokens import (
        MAX_PRIVATE_CHANNELS,
        Phase,
        ProgressToken,
        database_tag,
        encode_progress,
        token_binding,
    )

    with read_transaction(repeatable_read=True) as cursor:
        epoch, identity = _sync_epoch().current_sync_state(cursor)
        probe = probe_view(cursor, community_id=community_id, reader=reader)
        cursor.execute(*private_statement(community_id=community_id, reader=reader,
                                          channels=None))
        private = private_from_row(cursor.fetchone())
        cursor.execute("SELECT artifacts_enabled, artifact_types FROM communities WHERE id = %s",
                       [community_id])
        enabled, allowed = cursor.fetchone()
        digest = summary_digest(enabled, allowed, None)
    token = ProgressToken(
        phase=Phase.DONE, epoch=epoch, database=database_tag(identity), round_t=at,
        watermark=at, cursor_at=at, cursor_key=b"", view_digest=digest, view_t=at,
        view_fingerprint=probe.fingerprint, issued_at=at, listing_version=probe.listing,
        # More than a token carries inline would be stored; this bench changes no view.
        view_private=private if len(private) <= MAX_PRIVATE_CHANNELS else None,
    )
    binding = token_binding(
        community_id=community_id, reader=reader, filter_digest=query.canonical_digest()
    )
    return encode_progress(token, binding=binding)


def explain_buffers(community_id: int, reader: str, at: Any, overlap: timedelta) -> int:
    """Shared buffers (hit + read) of the statements a k-change continuation page runs: the
    fence, the page's state, and one window of each phase."""
    import orjson
    from django.db import connection

    from artifacts.selectors.fence import FENCE_SQL
    from artifacts.selectors.reader_view import PROBE_COLUMNS, PROBE_FROM
    from artifacts.selectors.round_sql import window_sql
    from artifacts.tokens import Phase

    params = {
        "community": community_id, "reader": reader, "round_t": None, "low": at - overlap,
        # Every candidate passes (the k changes were not seen by a previous round).
        "resend_from": at - overlap, "seen_xmin": 0,
        "window": PAGE_LIMIT + PAGE_LIMIT // 4 + 16, "want": PAGE_LIMIT, "cursor_at": None,
        "cursor_key": None,
    }
    total = 0
    with connection.cursor() as cursor:
        cursor.execute("SELECT now()")
        params["round_t"] = cursor.fetchone()[0]
        statements: list[tuple[str, dict[str, Any]]] = [
            (FENCE_SQL, {}),
            (f"SELECT now(), {_sync_epoch().EPOCH_SQL}, {PROBE_COLUMNS} FROM {PROBE_FROM}",
             params),
        ]
        for phase in (Phase.HEADS, Phase.MOVES):
            sql = window_sql(phase, with_cursor=False, has_channels=False, has_types=False)
            statements.append((sql, params))
        for sql, values in statements:
            cursor.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + sql, values)
            raw = cursor.fetchone()[0]
            plan = (orjson.loads(raw) if isinstance(raw, str) else raw)[0]
            total += _buffers(plan["Plan"]) + _buffers(plan.get("Planning", {}))
    return total


def _buffers(node: dict[str, Any]) -> int:
    return int(node.get("Shared Hit Blocks", 0)) + int(node.get("Shared Read Blocks", 0))


class Seeded:
    """One seeded community of N artifacts (seeded once; reused by later runs)."""

    def __init__(self, n: int, reseed: bool) -> None:
        from django.db import connection

        from artifacts.models import ArtifactHead, Community
        from artifacts.services.communities import community_create
        from nostr.schnorr import pubkey_from_secret

        self.n = n
        self.reader = pubkey_from_secret(READER_SECRET)
        self.host = f"n{n}.{HOST}"
        community = Community.objects.filter(host=self.host).first()
        if community is None:
            community = community_create(host=self.host, name=f"Bench reads {n}")
        self.community_id = community.pk
        self.seed_s = 0.0
        if reseed or ArtifactHead.objects.filter(community=community).count() != n:
            started = time.perf_counter()
            with connection.cursor() as cursor:
                cursor.execute("BEGIN")
                seed(cursor, community.pk, n, self.reader)
                cursor.execute("COMMIT")
                for table in ("artifact_heads", "artifact_revisions", "events",
                              "channel_members", "channels"):
                    cursor.execute(f"VACUUM ANALYZE {table}")
            self.seed_s = round(time.perf_counter() - started, 1)

    def page(self, query: Any) -> Any:
        """One page (its fence read afresh, as the relay's are)."""
        from artifacts.selectors.rounds import prepare_round, read_page

        request = prepare_round(community_id=self.community_id, reader=self.reader, query=query)
        return read_page(request, ready=True, overlap=OVERLAP)

    def round(self, progress: str | None, limit: int = PAGE_LIMIT) -> tuple[int, int, Any]:
        """A whole round from `progress`: (pages, entries, last page)."""
        from artifacts.selectors.filters import parse_filter

        pages = entries = 0
        while True:
            page = self.page(parse_filter(
                {"artifact": "current", "progress": progress, "limit": limit}))
            pages += 1
            entries += len(page.events) + len(page.removed)
            progress = page.progress
            if not page.more:
                return pages, entries, page


OVERLAP = timedelta(seconds=120)


def continuation(seeded: list[Seeded], k: int, runs: int) -> dict[int, dict[str, Any]]:
    """k changes in each community, then `runs` continuation rounds from a token made just
    before them, interleaved across the communities so load on the machine hits all alike."""
    from django.db import connection

    from artifacts.selectors.filters import parse_filter

    tokens, watermarks = {}, {}
    for one in seeded:
        with connection.cursor() as cursor:
            # Changes of an earlier run (or of the k = 10 step) would fall in the overlap: send
            # them back among the seeded stamps, so the round sees exactly this step's k.
            watermarks[one.n] = age_recent_changes(cursor, one.community_id)
            change(cursor, one.community_id, one.n, k, random.Random(one.n + k))
        query = parse_filter({"artifact": "current", "progress": None, "limit": PAGE_LIMIT})
        tokens[one.n] = done_token(one.community_id, one.reader, query, watermarks[one.n])
    timings: dict[int, list[float]] = {one.n: [] for one in seeded}
    entries = {}
    for _ in range(runs):
        for one in seeded:
            begin = time.perf_counter()
            _pages, entries[one.n], last = one.round(tokens[one.n])
            timings[one.n].append(time.perf_counter() - begin)
            assert not last.reset, "the continuation round reset"
    return {
        one.n: {
            f"k{k}_p50_ms": _ms(statistics.median(timings[one.n])),
            f"k{k}_p99_ms": _ms(_percentile(timings[one.n], 0.99)),
            f"k{k}_rows": entries[one.n],
            f"k{k}_buffers": explain_buffers(one.community_id, one.reader,
                                             watermarks[one.n], OVERLAP),
        }
        for one in seeded
    }


def full_round(one: Seeded) -> dict[str, Any]:
    begin = time.perf_counter()
    pages, entries, _ = one.round(None)
    return {"full_ms": _ms(time.perf_counter() - begin), "full_pages": pages,
            "full_events": entries}


def page500(one: Seeded, runs: int) -> dict[str, Any]:
    """One 500-event page in the middle of a full round: ours (selector + rendering, and the
    whole view with NIP-98) against the floor (the same rows with psycopg and orjson)."""
    import orjson
    from django.test import Client

    from artifacts.api.views import render_page
    from artifacts.selectors.filters import parse_filter
    from nostr.nip98 import make_nip98_header

    middle = one.page(parse_filter({"artifact": "current", "progress": None, "limit": 500}))
    query = parse_filter({"artifact": "current", "progress": middle.progress, "limit": 500})
    payload = orjson.dumps([{"artifact": "current", "progress": middle.progress, "limit": 500}])
    ours, view, floor = [], [], []
    client = Client()
    for _ in range(runs):
        begin = time.perf_counter()
        page = one.page(query)
        body = render_page(page)
        ours.append(time.perf_counter() - begin)
        assert len(page.events) == 500 and body
        header = make_nip98_header(
            READER_SECRET, url=f"http://{one.host}/query", method="POST", body=payload
        )
        begin = time.perf_counter()
        response = client.post("/query", data=payload, content_type="application/json",
                               HTTP_AUTHORIZATION=header, HTTP_HOST=one.host)
        view.append(time.perf_counter() - begin)
        assert response.status_code == 200, response.content[:200]
        floor.append(_floor(one.community_id))
    return {
        "page500_ms": _ms(statistics.median(ours)),
        "page500_view_ms": _ms(statistics.median(view)),
        "floor500_ms": _ms(statistics.median(floor)),
        "page500_over_floor": round(statistics.median(ours) / statistics.median(floor), 2),
    }


def _dict(query: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"artifact": query.artifact, "limit": query.limit}
    out.update({f"#{name}": list(values) for name, values in query.tags.items()})
    return out


def _floor(community_id: int) -> float:
    """The same 500 rows with psycopg (one statement, no readability) and orjson, under the
    planner settings a page uses (no parallel workers, hot-cache page costs)."""
    import orjson
    from django.db import connection

    raw_connection = connection.connection
    with raw_connection.cursor() as cursor:
        cursor.execute("SET random_page_cost = 1.1; SET max_parallel_workers_per_gather = 0")
    begin = time.perf_counter()
    with raw_connection.cursor() as cursor:
        cursor.execute(
            "SELECT e.raw FROM (SELECT event_id FROM artifact_heads WHERE community_id = %s"
            " ORDER BY modified_at, artifact_id LIMIT 500) h CROSS JOIN LATERAL"
            " (SELECT raw FROM events WHERE community_id = %s AND event_id = h.event_id) e",
            [community_id, community_id],
        )
        rows = cursor.fetchall()
    orjson.dumps({"events": [orjson.Fragment(raw) for (raw,) in rows]})
    return time.perf_counter() - begin


def plot(results: list[dict[str, Any]]) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / "reads.png"
    ns = [r["n"] for r in results]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for key, label in (("k10_p50_ms", "continuation k=10 p50"),
                       ("k10_p99_ms", "continuation k=10 p99"),
                       ("k1000_p50_ms", "continuation k=1000 p50"),
                       ("page500_ms", "500-event page"),
                       ("floor500_ms", "500-row floor (psycopg+orjson)")):
        ax.plot(ns, [r[key] for r in results], marker="o", label=label)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("artifacts in the community (N)")
    ax.set_ylabel("milliseconds")
    ax.set_title("Incremental reads: cost per round against collection size")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return path


# --- A/B against a baseline commit (--baseline) -------------------------------------------------

AB_FIGURES = (
    ("k10_p50_ms", "k=10 continuation p50 ms"),
    ("k10_p99_ms", "k=10 continuation p99 ms"),
    ("k1000_p50_ms", "k=1000 continuation p50 ms"),
    ("page500_ms", "500-event page ms"),
    ("page500_view_ms", "500-event page through the view ms"),
    ("k10_buffers", "k=10 shared buffers"),
)


def worker(ns: list[int], runs: int) -> int:
    """One A/B run of the tree on sys.path: the figures of every N, as one JSON line."""
    import django

    django.setup()
    seeded = [Seeded(n, reseed=False) for n in ns]
    results: dict[int, dict[str, Any]] = {one.n: {} for one in seeded}
    for k in (10, 1000):
        for n, figures in continuation(seeded, k, runs).items():
            results[n].update(figures)
    for one in seeded:
        results[one.n].update(page500(one, runs))
    print(orjson.dumps({str(n): figures for n, figures in results.items()}).decode())
    return 0


def ab(env: dict[str, str], *, ref: str, ns: list[int], runs: int, rounds: int) -> None:
    """Alternate baseline and candidate runs (fresh processes, one database) and print the
    medians and their ratios."""
    with git_worktree(ref) as (tree, commit):
        sides = [("baseline", tree, f"{ref} = {commit[:10]}"), ("candidate", ROOT, "this tree")]
        figures: dict[str, list[dict[str, Any]]] = {name: [] for name, _, _ in sides}
        for number in range(rounds):
            # Each side goes first every other run: what one run leaves behind (the stamps it
            # moved, warmed caches) falls on both alike.
            for name, side_tree, _ in sides if number % 2 == 0 else sides[::-1]:
                done = subprocess.run(
                    [sys.executable, str(Path(__file__).resolve()), WORKER_FLAG, str(side_tree),
                     "--runs", str(runs), "--n", *map(str, ns)],
                    env=env, capture_output=True, text=True,
                )
                if done.returncode != 0:
                    raise SystemExit(f"{name} run failed:\n{done.stderr[-3000:]}")
                figures[name].append(orjson.loads(done.stdout.strip().splitlines()[-1]))
                print(f"run {number + 1} {name}: {figures[name][-1]}", flush=True)
    print(f"\nA/B medians over {rounds} runs per side of {runs} rounds each, alternating "
          f"(baseline {sides[0][2]}; candidate {sides[1][2]})")
    rows = []
    for n in ns:
        for key, label in AB_FIGURES:
            base = statistics.median(run[str(n)][key] for run in figures["baseline"])
            cand = statistics.median(run[str(n)][key] for run in figures["candidate"])
            rows.append([n, label, base, cand, f"{cand / base:.2f}x" if base else "-"])
    print_table(["N", "figure", "baseline", "candidate", "candidate / baseline"], rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--runs", type=int, default=50, help="rounds timed per figure")
    parser.add_argument("--full-round-n", type=int, default=100_000,
                        help="measure the full round at this N only (it is slow at 1M)")
    parser.add_argument("--reseed", action="store_true",
                        help="seed again even when a community of that size exists")
    parser.add_argument("--baseline", metavar="REF",
                        help="A/B: alternate runs of REF's relay and this tree's (see above)")
    parser.add_argument("--rounds", type=int, default=3, help="A/B runs per side")
    parser.add_argument(WORKER_FLAG, metavar="TREE", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if _WORKER_TREE is not None:
        return worker(args.n, args.runs)

    with services() as svc:
        env = relay_env(svc, RELAY_RATE_LIMIT_ADDRESS_RATE="0", RELAY_RATE_LIMIT_PUBKEY_RATE="0")
        os.environ.update(env)
        import django
        from django.core.management import call_command

        django.setup()
        # An empty database builds the sync indexes inside the migrations themselves.
        call_command("migrate", verbosity=0)
        seeded = [Seeded(n, args.reseed) for n in args.n]
        if args.baseline:
            ab(env, ref=args.baseline, ns=args.n, runs=args.runs, rounds=args.rounds)
            return 0
        results = {one.n: {"n": one.n, "seed_s": one.seed_s} for one in seeded}
        for k in (10, 1000):
            for n, figures in continuation(seeded, k, args.runs).items():
                results[n].update(figures)
        for one in seeded:
            if one.n == args.full_round_n:
                results[one.n].update(full_round(one))
                results[one.n]["full_over_k10"] = round(
                    results[one.n]["full_ms"] / results[one.n]["k10_p50_ms"], 1)
            results[one.n].update(page500(one, args.runs))
            print(results[one.n], flush=True)
        ordered = [results[n] for n in args.n]

    headers = ["N", "k=10 p50", "k=10 p99", "k=10 buf", "k=1000 p50", "k=1000 p99",
               "k=1000 buf", "full round", "full/k10", "500 page", "500 view", "floor",
               "page/floor"]
    rows = []
    for r in ordered:
        rows.append([
            r["n"], r["k10_p50_ms"], r["k10_p99_ms"], r["k10_buffers"], r["k1000_p50_ms"],
            r["k1000_p99_ms"], r["k1000_buffers"],
            f"{r['full_ms']} ms/{r['full_pages']} p" if "full_ms" in r else "-",
            r.get("full_over_k10", "-"), r["page500_ms"], r["page500_view_ms"],
            r["floor500_ms"], r["page500_over_floor"],
        ])
    print("\ntimes in ms; buf = shared buffers touched by the page's statements")
    print_table(headers, rows)
    if len(ordered) > 1:
        first, last = ordered[0], ordered[-1]
        print(f"\nk=10 continuation p50 at N={last['n']} / N={first['n']}: "
              f"{last['k10_p50_ms'] / first['k10_p50_ms']:.2f}x (target <= 1.3x at 1M vs 10k)")
    print(f"plot: {plot(ordered)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
