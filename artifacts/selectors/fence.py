"""The fence: the database time below which every stamp is already committed.

T = the smaller of `now()` and the oldest `xact_start` among client backends of this database
with an open transaction (PROTOCOL.md section 5). A writer stamps with its transaction's start, so
a stamp below T belongs to a transaction that committed before T was read. The fence must be read
*before* the snapshot a page classifies by: read inside that snapshot, a writer could commit
between the snapshot and the read, be invisible to the page and already gone from
pg_stat_activity. So it runs in a statement of its own (autocommit), before the page's
transaction begins; pg_stat_activity also keeps a per-transaction copy, which a statement of its
own never reuses.

A value read less than a second ago is reused: an older T is still a valid fence later (every
stamp below it committed before it was read), so caching only makes rounds slightly shorter.
"""

from __future__ import annotations

import threading
import time
from datetime import datetime

from django.db import connections

FENCE_SQL = """
SELECT least(
    now(),
    (SELECT min(xact_start) FROM pg_stat_activity
      WHERE datname = current_database()
        AND backend_type = 'client backend'
        AND xact_start IS NOT NULL
        AND pid <> pg_backend_pid())
)
"""
CACHE_SECONDS = 1.0

_lock = threading.Lock()
_cached: dict[str, tuple[float, datetime]] = {}


def cached_fence(*, alias: str = "default", max_age: float = CACHE_SECONDS) -> datetime | None:
    """The fence read less than `max_age` seconds ago, or None."""
    with _lock:
        hit = _cached.get(alias)
    if hit is not None and time.monotonic() - hit[0] <= max_age:
        return hit[1]
    return None


def remember_fence(fence: datetime, *, read_at: float, alias: str = "default") -> None:
    """Keep a fence read (before any snapshot) at monotonic time `read_at`."""
    with _lock:
        previous = _cached.get(alias)
        # Keep the newest reading; a slower concurrent reader must not move the cache back.
        if previous is None or previous[0] <= read_at:
            _cached[alias] = (read_at, fence)


def read_fence(*, alias: str = "default", max_age: float = CACHE_SECONDS) -> datetime:
    """A fence T read before the caller's snapshot; reused for at most `max_age` seconds.

    Must be called outside any transaction (the page opens its own afterwards).
    """
    connection = connections[alias]
    if connection.in_atomic_block:
        raise RuntimeError("the fence must be read before the page's transaction begins")
    hit = cached_fence(alias=alias, max_age=max_age)
    if hit is not None:
        return hit
    now = time.monotonic()
    with connection.cursor() as cursor:
        cursor.execute(FENCE_SQL)
        fence: datetime = cursor.fetchone()[0]
    remember_fence(fence, read_at=now, alias=alias)
    return fence
