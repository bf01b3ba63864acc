"""Incremental reads: what a continuation round costs as the collection grows, against a full round.

Seeds N artifacts (default 10k and 100k; `--n 1000000` for the big run) over N/500 channels (one
in five private) with fast SQL, then measures in-process, against the database directly:

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
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._harness import OUT, print_table, relay_env, services  # noqa: E402

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


def done_token(community_id: int, reader: str, query: Any, at: Any) -> str:
    """A finished round's token with T = `at`, as the page that finished it would seal it."""
    from artifacts.selectors.budget import read_transaction
    from artifacts.selectors.view import compute_view_digest, probe_view
    from artifacts.tokens import Phase, ProgressToken, database_tag, encode_progress, token_binding
    from relayinfo.sync_epoch import current_sync_state

    with read_transaction(repeatable_read=True) as cursor:
        epoch, identity = current_sync_state(cursor)
        probe = probe_view(cursor, community_id=community_id, reader=reader)
        digest = compute_view_digest(
            cursor, community_id=community_id, reader=reader, channels=None, types=None
        )
    token = ProgressToken(
        phase=Phase.DONE, epoch=epoch, database=database_tag(identity), round_t=at,
        watermark=at, cursor_at=at, cursor_key=b"", view_digest=digest, view_t=at,
        view_fingerprint=probe.fingerprint, issued_at=at,
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
    from artifacts.selectors.round_sql import window_sql
    from artifacts.selectors.view import PROBE_COLUMNS, PROBE_FROM
    from artifacts.tokens import Phase
    from relayinfo.sync_epoch import EPOCH_SQL

    params = {
        "community": community_id, "reader": reader, "round_t": None, "low": at - overlap,
        "window": PAGE_LIMIT + PAGE_LIMIT // 4 + 16, "want": PAGE_LIMIT, "cursor_at": None,
        "cursor_key": None,
    }
    total = 0
    with connection.cursor() as cursor:
        cursor.execute("SELECT now()")
        params["round_t"] = cursor.fetchone()[0]
        statements: list[tuple[str, dict[str, Any]]] = [
            (FENCE_SQL, {}),
            (f"SELECT now(), {EPOCH_SQL}, {PROBE_COLUMNS} FROM {PROBE_FROM}", params),
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


def measure(n: int, runs: int, full_round: bool) -> dict[str, Any]:
    from django.db import connection
    from django.test import Client

    import orjson

    from artifacts.api.query_views import render_page
    from artifacts.models import Community
    from artifacts.selectors.filters import parse_filter
    from artifacts.selectors.rounds import prepare_round, read_page
    from nostr.nip98 import make_nip98_header
    from nostr.schnorr import pubkey_from_secret

    reader = pubkey_from_secret(READER_SECRET)
    community = Community.objects.get(host=HOST)
    rng = random.Random(n)
    started = time.perf_counter()
    with connection.cursor() as cursor:
        cursor.execute("BEGIN")
        seed(cursor, community.pk, n, reader)
        cursor.execute("COMMIT")
        cursor.execute("VACUUM ANALYZE artifact_heads")
        cursor.execute("VACUUM ANALYZE artifact_revisions")
        cursor.execute("VACUUM ANALYZE events")
        cursor.execute("VACUUM ANALYZE channel_members")
        cursor.execute("VACUUM ANALYZE channels")
    result: dict[str, Any] = {"n": n, "seed_s": round(time.perf_counter() - started, 1)}
    overlap = timedelta(seconds=120)

    def run_page(query: Any, fence_max_age: float = 0) -> Any:
        # Rounds read a fresh fence (the worst case); the 500-event page below reuses one as
        # the relay does within a second.
        request = prepare_round(community_id=community.pk, reader=reader, query=query)
        return read_page(request, ready=True, overlap=overlap, fence_max_age=fence_max_age)

    for k in (10, 1000):
        with connection.cursor() as cursor:
            cursor.execute("SELECT now()")
            watermark = cursor.fetchone()[0]
            change(cursor, community.pk, n, k, rng)
        query = parse_filter({"artifact": "current", "progress": None, "limit": PAGE_LIMIT})
        token = done_token(community.pk, reader, query, watermark)
        query = parse_filter({"artifact": "current", "progress": token, "limit": PAGE_LIMIT})
        timings, rows = [], 0
        for _ in range(runs):
            begin = time.perf_counter()
            page = run_page(query)
            pages = 1
            while page.more:  # a round may take more than one page; none does here
                page = run_page(parse_filter({**_dict(query), "progress": page.progress}))
                pages += 1
            timings.append(time.perf_counter() - begin)
            assert not page.reset, "the continuation round reset"
            rows = len(page.events) + len(page.removed)
        result[f"k{k}_p50_ms"] = _ms(statistics.median(timings))
        result[f"k{k}_p99_ms"] = _ms(_percentile(timings, 0.99))
        result[f"k{k}_rows"] = rows
        result[f"k{k}_buffers"] = explain_buffers(community.pk, reader, watermark, overlap)

    if full_round:
        begin = time.perf_counter()
        query = parse_filter({"artifact": "current", "progress": None, "limit": PAGE_LIMIT})
        pages = events = 0
        while True:
            page = run_page(query)
            pages += 1
            events += len(page.events)
            if not page.more:
                break
            query = parse_filter({"artifact": "current", "progress": page.progress,
                                  "limit": PAGE_LIMIT})
        full = time.perf_counter() - begin
        result["full_ms"] = _ms(full)
        result["full_pages"] = pages
        result["full_events"] = events
        result["full_over_k10"] = round(full * 1000 / result["k10_p50_ms"], 1)

    # One 500-event page in the middle of a full round: ours (selector + rendering; and the
    # whole view with NIP-98) against the floor.
    start = run_page(parse_filter({"artifact": "current", "progress": None, "limit": 500}))
    middle = start.progress
    query = parse_filter({"artifact": "current", "progress": middle, "limit": 500})
    ours, view, floor = [], [], []
    client = Client()
    for _ in range(runs):
        begin = time.perf_counter()
        page = run_page(query, fence_max_age=1.0)
        body = render_page(page)
        ours.append(time.perf_counter() - begin)
        assert len(page.events) == 500 and body
        payload = orjson.dumps([{"artifact": "current", "progress": middle, "limit": 500}])
        header = make_nip98_header(
            READER_SECRET, url=f"http://{HOST}/query", method="POST", body=payload
        )
        begin = time.perf_counter()
        response = client.post("/query", data=payload, content_type="application/json",
                               HTTP_AUTHORIZATION=header, HTTP_HOST=HOST)
        view.append(time.perf_counter() - begin)
        assert response.status_code == 200, response.content[:200]
        floor.append(_floor(community.pk))
    result["page500_ms"] = _ms(statistics.median(ours))
    result["page500_view_ms"] = _ms(statistics.median(view))
    result["floor500_ms"] = _ms(statistics.median(floor))
    result["page500_over_floor"] = round(statistics.median(ours) / statistics.median(floor), 2)
    return result


def _dict(query: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"artifact": query.artifact, "limit": query.limit}
    out.update({f"#{name}": list(values) for name, values in query.tags.items()})
    return out


def _floor(community_id: int) -> float:
    """The same 500 rows with psycopg (one statement, no readability) and orjson."""
    import orjson
    from django.db import connection

    raw_connection = connection.connection
    begin = time.perf_counter()
    with raw_connection.cursor() as cursor:
        cursor.execute(
            "SELECT e.raw FROM artifact_heads h JOIN events e"
            " ON e.community_id = h.community_id AND e.event_id = h.event_id"
            " WHERE h.community_id = %s ORDER BY h.modified_at, h.artifact_id LIMIT 500",
            [community_id],
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--runs", type=int, default=50, help="rounds timed per figure")
    parser.add_argument("--full-round-n", type=int, default=100_000,
                        help="measure the full round at this N only (it is slow at 1M)")
    args = parser.parse_args()

    with services() as svc:
        env = relay_env(svc, RELAY_RATE_LIMIT_ADDRESS_RATE="0", RELAY_RATE_LIMIT_PUBKEY_RATE="0")
        os.environ.update(env)
        import django
        from django.core.management import call_command

        django.setup()
        # An empty database builds the sync indexes inside the migrations themselves.
        call_command("migrate", verbosity=0)
        from artifacts.models import Community
        from artifacts.services.communities import community_create

        if not Community.objects.filter(host=HOST).exists():
            community_create(host=HOST, name="Bench reads")
        results = []
        for n in args.n:
            results.append(measure(n, args.runs, full_round=n == args.full_round_n))
            print(results[-1], flush=True)

    headers = ["N", "k=10 p50", "k=10 p99", "k=10 buf", "k=1000 p50", "k=1000 p99",
               "k=1000 buf", "full round", "full/k10", "500 page", "500 view", "floor",
               "page/floor"]
    rows = []
    for r in results:
        rows.append([
            r["n"], r["k10_p50_ms"], r["k10_p99_ms"], r["k10_buffers"], r["k1000_p50_ms"],
            r["k1000_p99_ms"], r["k1000_buffers"],
            f"{r['full_ms']} ms/{r['full_pages']} p" if "full_ms" in r else "-",
            r.get("full_over_k10", "-"), r["page500_ms"], r["page500_view_ms"],
            r["floor500_ms"], r["page500_over_floor"],
        ])
    print("\ntimes in ms; buf = shared buffers touched by the page's statements")
    print_table(headers, rows)
    if len(results) > 1:
        first, last = results[0], results[-1]
        print(f"\nk=10 continuation p50 at N={last['n']} / N={first['n']}: "
              f"{last['k10_p50_ms'] / first['k10_p50_ms']:.2f}x (target <= 1.3x at 1M vs 10k)")
    print(f"plot: {plot(results)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
