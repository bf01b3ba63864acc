"""Benchmark: the admin's heads list, page 1 against page 50 by key and page 50 by OFFSET.

Fills a community with --heads artifact heads (default 1,000,000, once: later runs reuse them),
then times the change list the staff page builds (Django's admin, in process, as a superuser):
page 1 (the floor), page 50 reached by its key (the link the page before it carries,
artifacts.admin_paging) and page 50 typed without one (`?p=50`: OFFSET 2450). Each is run
--repeat times, interleaved; prints medians and the ratio to the floor.

    .venv/bin/python bench/admin_paging.py [--heads N] [--repeat 15]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._harness import print_table, relay_env, services, setup_database

HOST = "paging.bench"
PAGE = 50
POPULATE_SQL = """
INSERT INTO communities (host, name, admin_pubkeys, artifacts_enabled, open_channel_creation,
                         listing_version, created_at)
VALUES (%(host)s, 'Paging bench', '{}', true, false, 0, now()) ON CONFLICT (host) DO NOTHING;
INSERT INTO artifact_heads (community_id, artifact_id, event_id, channel_id, artifact_type,
                            deleted, created_at, modified_at)
SELECT (SELECT id FROM communities WHERE host = %(host)s), md5('a' || g)::uuid,
       md5('e' || g) || md5('f' || g), md5('c' || mod(g, 200))::uuid, 'buzz.task', false,
       1700000000 + g, now() - make_interval(secs => g / 1000.0)
FROM generate_series(1, %(heads)s) g;
ANALYZE artifact_heads;
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--heads", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    with services() as svc:
        setup_database(svc)
        os.environ.update(relay_env(svc))
        import django

        django.setup()
        return run(args)


def run(args: argparse.Namespace) -> int:
    from django.contrib import admin
    from django.contrib.auth.models import User
    from django.db import connection
    from django.test import RequestFactory

    from artifacts.admin_paging import page_key
    from artifacts.models import ArtifactHead, Community

    community = Community.objects.filter(host=HOST).first()
    existing = ArtifactHead.objects.filter(community=community).count() if community else 0
    if existing < args.heads:
        print(f"filling {args.heads:,} heads (once) ...", flush=True)
        started = time.monotonic()
        with connection.cursor() as cursor:
            cursor.execute("DELETE FROM artifact_heads WHERE community_id IN"
                           " (SELECT id FROM communities WHERE host = %s)", [HOST])
            cursor.execute(POPULATE_SQL, {"host": HOST, "heads": args.heads})
        print(f"  {time.monotonic() - started:.0f} s", flush=True)
    community = Community.objects.get(host=HOST)
    user = User.objects.filter(is_superuser=True).first() or User.objects.create_superuser(
        "bench", password="bench")
    model_admin = admin.site._registry[ArtifactHead]
    ordering = ["-community_id", "-modified_at", "-artifact_id"]
    rows = ArtifactHead.objects.filter(community=community).order_by(*ordering)
    # The key page 49's link to page 50 carries: its last row's.
    key = page_key(rows, rows[(PAGE - 1) * model_admin.list_per_page - 1])
    base = {"community__id__exact": str(community.pk)}
    cases = {
        "page 1": base,
        f"page {PAGE} by key": {**base, "p": str(PAGE), "after": key},
        f"page {PAGE} by OFFSET": {**base, "p": str(PAGE)},
    }
    timings: dict[str, list[float]] = {name: [] for name in cases}
    shown: dict[str, list[str]] = {}
    factory = RequestFactory()
    for _ in range(args.repeat):
        for name, query in cases.items():
            request = factory.get("/admin/artifacts/artifacthead/", query)
            request.user = user
            started = time.perf_counter()
            changelist = model_admin.get_changelist_instance(request)
            timings[name].append((time.perf_counter() - started) * 1000)
            shown[name] = [str(row.artifact_id) for row in changelist.result_list]
    # The two ways to page 50 must show the same rows, or the comparison means nothing.
    assert shown[f"page {PAGE} by key"] == shown[f"page {PAGE} by OFFSET"], "pages differ"
    floor = statistics.median(timings["page 1"])
    print_table(
        ["change list", "median ms", "min ms", "x page 1"],
        [[name, f"{statistics.median(values):.1f}", f"{min(values):.1f}",
          f"{statistics.median(values) / floor:.2f}"] for name, values in timings.items()],
        title=f"Heads list, {args.heads:,} heads in the community, {args.repeat} runs each:",
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
