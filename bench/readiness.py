"""What readiness costs: one uncached evaluation of PROTOCOL.md section 7, the cached verdict,
and a NIP-11 request, in-process against a migrated database.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/buzz_ready .venv/bin/python bench/readiness.py

The database must be migrated (manage.py migrate). Prints mean, p50 and p99 per operation.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def measure(label: str, operation: Callable[[], object], n: int) -> None:
    operation()  # warm: connection, caches
    samples = []
    for _ in range(n):
        start = time.perf_counter()
        operation()
        samples.append((time.perf_counter() - start) * 1000)
    samples.sort()
    p99 = samples[min(len(samples) - 1, int(len(samples) * 0.99))]
    print(
        f"{label:<44} n={n:<6} mean {statistics.fmean(samples):8.3f} ms  "
        f"p50 {samples[len(samples) // 2]:8.3f} ms  p99 {p99:8.3f} ms"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=200, help="repetitions per operation")
    args = parser.parse_args()
    if not os.environ.get("DATABASE_URL"):
        sys.exit("set DATABASE_URL to a migrated database")
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "buzzrelay.settings")
    os.environ.setdefault("RELAY_SIGNING_KEY", "7c0ffee0" * 8)
    import django

    django.setup()
    from django.db import connection, transaction
    from django.test import Client

    from artifacts.models import Community
    from relayinfo.readiness import (
        deployment_ready,
        evaluate_readiness,
        inspect_deployment,
        separate_connection,
    )

    Community.objects.get_or_create(host="bench.example", defaults={"name": "Bench"})
    client = Client()

    def separate() -> None:
        with separate_connection() as conn:
            inspect_deployment(conn, local_key_generated=False)

    def inside_transaction() -> None:
        with transaction.atomic():
            evaluate_readiness(use_cache=False)

    report = evaluate_readiness(use_cache=False)
    print(f"deployment ready: {report.ready}; failing: {[c.id for c in report.failing]}")
    measure("evaluate_readiness(use_cache=False)", lambda: evaluate_readiness(use_cache=False),
            args.n)
    measure("  inspect_deployment(django connection)",
            lambda: inspect_deployment(connection, local_key_generated=False), args.n)
    measure("  same on a fresh connection (in a transaction)", inside_transaction,
            max(10, args.n // 4))
    measure("  fresh connection only: connect + inspect", separate, max(10, args.n // 4))
    measure("deployment_ready() cached", deployment_ready, args.n * 50)
    measure(
        "GET / NIP-11 (cached verdict)",
        lambda: client.get("/", HTTP_HOST="bench.example", HTTP_ACCEPT="application/nostr+json"),
        args.n,
    )
    measure("GET / human page", lambda: client.get("/", HTTP_HOST="bench.example"), args.n)
    return 0


if __name__ == "__main__":
    sys.exit(main())
