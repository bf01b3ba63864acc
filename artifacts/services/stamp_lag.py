"""Stamp-to-commit lag of writers: measured per write, kept for the readiness page.

Incremental reads allow a writer's stamp to become visible late (the fence covers open
transactions; the overlap is margin), so operators need to see how late writers really commit.
Each committed write transaction reports the time from just after its BEGIN (every stamp is
taken later) to the end of its commit: an upper bound of its stamp-to-commit lag, measured
with the monotonic clock and without another round trip to the database.

Samples are buffered in the process and written to `writer_lag_samples` at most every
SAMPLE_FLUSH_SECONDS, by the first write that commits after the interval (one multi-row INSERT), so
a write pays nothing in between. A flush keeps every sample of a quiet interval; of a busy one
it keeps the interval's largest lag (so the maximum stays exact) plus a uniform random sample,
which keeps the table small at a thousand writes per second while p99 stays representative.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from typing import Any

import psycopg
from django.conf import settings
from django.db import DatabaseError, connection
from prometheus_client import Histogram

logger = logging.getLogger(__name__)

SAMPLE_FLUSH_SECONDS = 5.0
MAX_SAMPLES_PER_FLUSH = 200
RETENTION = "2 hours"

_lock = threading.Lock()
_pending: list[float] = []
_last_flush = time.monotonic()
_last_prune = 0.0


# For Prometheus (/metrics, relaycore.metrics): every write's lag, not only the kept samples.
STAMP_TO_COMMIT_LAG = Histogram(
    "buzz_stamp_to_commit_lag_seconds",
    "Write transactions from just after BEGIN (before any stamp) to the end of COMMIT",
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 15, 60, 120),
)


def record_lag(lag_ms: float) -> None:
    """Called after each committed write; flushes when the interval is over."""
    if note_lag(lag_ms):
        flush_lag_samples()


def note_lag(lag_ms: float) -> bool:
    """Buffer one write's lag; True when the interval is over and the caller is to flush
    (`flush_lag_samples`, or `flush_lag_samples_async` on the server loop)."""
    global _last_flush
    STAMP_TO_COMMIT_LAG.observe(max(0.0, lag_ms) / 1000)
    now = time.monotonic()
    with _lock:
        _pending.append(lag_ms)
        if now - _last_flush < SAMPLE_FLUSH_SECONDS:
            return False
        _last_flush = now
    return True


def flush_lag_samples() -> int:
    """Write the buffered samples (reduced as described above); returns the rows written."""
    samples, statements = _take_flush()
    try:
        with connection.cursor() as cursor:
            for sql, params in statements:
                cursor.execute(sql, params)
    except DatabaseError:
        _flush_failed(samples)
        return 0
    return len(samples)


async def flush_lag_samples_async(conn: psycopg.AsyncConnection[Any]) -> int:
    """`flush_lag_samples` on an idle asyncio connection (autocommit)."""
    samples, statements = _take_flush()
    try:
        for sql, params in statements:
            await conn.execute(sql, params)
    except psycopg.Error:
        _flush_failed(samples)
        return 0
    return len(samples)


def _take_flush() -> tuple[list[float], list[tuple[str, list[Any]]]]:
    """Empty the buffer: the samples kept, and the statements that store them (and once a
    minute prune the table)."""
    global _last_prune, _last_flush
    with _lock:
        samples = _pending[:]
        _pending.clear()
        _last_flush = time.monotonic()
    if not samples:
        return [], []
    if len(samples) > MAX_SAMPLES_PER_FLUSH:
        largest = max(samples)
        samples.remove(largest)
        samples = [largest, *random.sample(samples, MAX_SAMPLES_PER_FLUSH - 1)]
    instance_id = getattr(settings, "RELAY_INSTANCE_ID", None)
    statements: list[tuple[str, list[Any]]] = [(
        "INSERT INTO writer_lag_samples (instance_id, lag_ms)"
        " SELECT %s, unnest(%s::float8[])",
        [instance_id, samples],
    )]
    now = time.monotonic()
    if now - _last_prune > 60:
        _last_prune = now
        statements.append((
            "DELETE FROM writer_lag_samples WHERE recorded_at < now() - %s::interval",
            [RETENTION],
        ))
    return samples, statements


def _flush_failed(samples: list[float]) -> None:
    # Lag samples are operators' metrics: losing some must never fail a committed write.
    logger.warning("could not record %d writer lag samples", len(samples), exc_info=True)


def stamp_lag_summary(window_seconds: int = 3600) -> dict[str, Any]:
    """Max and p99 of the stamp-to-commit lag over the window (this process's buffer included).

    `{"max_ms": float | None, "p99_ms": float | None, "samples": int}`; None without samples.
    Read-only: /metrics and the staff page call it, and request handlers never write, so the
    buffer is read beside the table rather than flushed into it.
    """
    with _lock:
        pending = _pending[:]
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT max(lag_ms), percentile_cont(0.99) WITHIN GROUP (ORDER BY lag_ms), count(*)"
            " FROM (SELECT lag_ms FROM writer_lag_samples"
            "        WHERE recorded_at >= now() - make_interval(secs => %s)"
            "       UNION ALL SELECT unnest(%s::float8[])) s",
            [window_seconds, pending],
        )
        row = cursor.fetchone()
    assert row is not None
    max_ms, p99_ms, count = row
    return {
        "max_ms": float(max_ms) if max_ms is not None else None,
        "p99_ms": float(p99_ms) if p99_ms is not None else None,
        "samples": int(count),
    }
