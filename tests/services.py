"""Pytest plugin (loaded with -p before Django is configured): the servers the suite runs against.

With DATABASE_URL unset the suite starts an embedded PostgreSQL under .data/test-postgres; with
REDIS_URL unset, a throwaway Redis. Set them to run against servers of your own (.ci/run does
both). Either way the tests talk to real servers: nothing is mocked.
"""

from __future__ import annotations

import atexit
import os
from pathlib import Path

from buzzrelay.embedded import EmbeddedPostgres, EmbeddedRedis, ensure_postgres, start_redis

ROOT = Path(__file__).resolve().parent.parent
# A fixed relay key: a generated one would make the deployment "not ready" (readiness item 5).
TEST_RELAY_SECRET = "5f1b6c6e2d4a7b3c9e8f0a1b2c3d4e5f60718293a4b5c6d7e8f9a0b1c2d3e4f5"

_embedded_redis: EmbeddedRedis | None = None
_embedded_postgres: EmbeddedPostgres | None = None

if not os.environ.get("DATABASE_URL"):
    _embedded_postgres = ensure_postgres(ROOT / ".data" / "test-postgres", for_tests=True)
    _embedded_postgres.create_database("buzz")
    os.environ["DATABASE_URL"] = _embedded_postgres.url("buzz")
if not os.environ.get("REDIS_URL"):
    _embedded_redis = start_redis()
    os.environ["REDIS_URL"] = _embedded_redis.url
os.environ.setdefault("RELAY_SIGNING_KEY", TEST_RELAY_SECRET)
os.environ.setdefault("HYPOTHESIS_PROFILE", "ci")


def _stop_servers() -> None:
    if _embedded_redis is not None:
        _embedded_redis.stop()
    if _embedded_postgres is not None:
        _embedded_postgres.stop()


# Registered before any test module loads, so it runs after every exit handler they register
# (atexit runs last-in first-out): their clean-ups still find the servers up.
atexit.register(_stop_servers)
