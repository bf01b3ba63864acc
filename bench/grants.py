"""A grant of one channel: what the next round costs with incremental view changes, without them
(a reset), and beside an ordinary continuation of as many changes.

Uses bench/reads.py's seeded communities (N artifacts over N/500 channels, the reader a member of
half the private ones; seeded once, reused). For each N the reader, synced as of now, is granted
one private channel of K ~ 500 heads, and the next round is run from the finished round's token:

- opted in (`view_changes: "incremental"`): pages, rows (events + removals), whether it reset,
  milliseconds; the target is rows <= 2K + one page and no reset;
- not opted in: the reset, and its rows (the whole collection again);
- an ordinary continuation of K head changes, for comparison.

The grant is taken back afterwards (the membership row removed), so runs can repeat.

    .venv/bin/python bench/grants.py                 # N = 10k and 100k
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._harness import print_table, relay_env, services  # noqa: E402
from bench.reads import (  # noqa: E402
    PAGE_LIMIT,
    Seeded,
    age_recent_changes,
    change,
    done_token,
)

# A private channel of the seeded community the reader is no member of (i % 5 == 0, i % 10 != 0).
GRANTED = "md5('ch5')::uuid"


def _round(one: Seeded, progress: str, *, opted_in: bool) -> tuple[int, int, bool, float]:
    """(pages, rows, reset on any page, ms) of a whole round from `progress`."""
    from artifacts.selectors.filters import parse_filter

    pages = rows = 0
    reset = False
    started = time.perf_counter()
    while True:
        fields: dict[str, Any] = {"artifact": "current", "progress": progress,
                                  "limit": PAGE_LIMIT}
        if opted_in:
            fields["view_changes"] = "incremental"
        page = one.page(parse_filter(fields))
        pages += 1
        rows += len(page.events) + len(page.removed)
        reset |= page.reset
        progress = page.progress
        if not page.more:
            return pages, rows, reset, (time.perf_counter() - started) * 1000


def _synced_token(one: Seeded) -> str:
    """A finished round's token as of now (earlier changes sent back out of the overlap)."""
    from django.db import connection

    from artifacts.selectors.filters import parse_filter

    with connection.cursor() as cursor:
        at = age_recent_changes(cursor, one.community_id)
    query = parse_filter({"artifact": "current", "progress": None, "limit": PAGE_LIMIT})
    return done_token(one.community_id, one.reader, query, at)


def _grant(one: Seeded, *, granted: bool) -> int:
    """Grant (or take back) the channel; the number of its heads."""
    from django.db import connection

    with connection.cursor() as cursor:
        if granted:
            cursor.execute(
                f"INSERT INTO channel_members (community_id, channel_id, pubkey, role,"
                f" joined_at, removed_at, sync_modified_at)"
                f" VALUES (%s, {GRANTED}, %s, 'member', now(), NULL, statement_timestamp())",
                [one.community_id, one.reader],
            )
        else:
            cursor.execute(
                f"DELETE FROM channel_members WHERE community_id = %s AND channel_id = {GRANTED}"
                " AND pubkey = %s", [one.community_id, one.reader],
            )
        cursor.execute(
            f"SELECT count(*) FROM artifact_heads WHERE community_id = %s"
            f" AND channel_id = {GRANTED}", [one.community_id],
        )
        return int(cursor.fetchone()[0])


def measure(one: Seeded, runs: int) -> dict[str, Any]:
    opted, plain, ordinary = [], [], []
    k = 0
    for _ in range(runs):
        token = _synced_token(one)
        k = _grant(one, granted=True)
        try:
            opted.append(_round(one, token, opted_in=True))
            plain.append(_round(one, token, opted_in=False))
        finally:
            _grant(one, granted=False)
        token = _synced_token(one)
        from django.db import connection

        with connection.cursor() as cursor:
            change(cursor, one.community_id, one.n, k, random.Random(one.n))
        ordinary.append(_round(one, token, opted_in=True))

    def ms(results: list[tuple[int, int, bool, float]]) -> float:
        return round(statistics.median(r[3] for r in results), 1)

    return {
        "n": one.n, "k": k,
        "grant_pages": opted[-1][0], "grant_rows": opted[-1][1], "grant_reset": opted[-1][2],
        "grant_ms": ms(opted),
        "reset_pages": plain[-1][0], "reset_rows": plain[-1][1], "reset_ms": ms(plain),
        "k_pages": ordinary[-1][0], "k_rows": ordinary[-1][1], "k_ms": ms(ordinary),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    with services() as svc:
        os.environ.update(relay_env(svc))
        import django
        from django.core.management import call_command

        django.setup()
        call_command("migrate", verbosity=0)
        results = [measure(Seeded(n, reseed=False), args.runs) for n in args.n]
    print("\na grant of one channel of K heads, the next round (median ms of "
          f"{args.runs}; rows = events + removals)")
    print_table(
        ["N", "K", "grant: pages", "rows", "reset", "ms", "no opt-in: pages", "rows", "ms",
         "K changes: pages", "rows", "ms", "rows <= 2K + page"],
        [[r["n"], r["k"], r["grant_pages"], r["grant_rows"], r["grant_reset"], r["grant_ms"],
          r["reset_pages"], r["reset_rows"], r["reset_ms"], r["k_pages"], r["k_rows"],
          r["k_ms"], r["grant_rows"] <= 2 * r["k"] + PAGE_LIMIT and not r["grant_reset"]]
         for r in results],
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
