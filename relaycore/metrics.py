"""Metrics for operators: Prometheus at /metrics, and per-minute round traffic for the staff page.

Prometheus (prometheus_client): counters and histograms of this process, in multiprocess mode
under `buzz-admin serve` (buzzrelay/server.py sets PROMETHEUS_MULTIPROC_DIR before any worker
starts), so a scrape answered by any worker reports the sum over all of them and counters only
grow; rates are the scraper's (`rate()`), not computed here. `prometheus_exposition()` adds the
deployment's gauges (readiness, fleet, sync epoch: read from the database at scrape time) and
each worker's standard `process_*` metrics (labelled `pid`).

Round traffic for the staff page: `record_round()` runs on every incremental page, so it only
bumps in-process counts under a lock. Every few seconds (and whenever a page lands in a new
minute) the pending counts are added to per-minute buckets in the shared cache (Redis when
configured), so the staff page sees the whole fleet. Counters use atomic increments; a bucket's
maxima are read-modify-write and may lose a concurrent update from another process, which is
fine for a gauge of the worst case. When the cache is down the counts of that flush are dropped,
never the page.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from django.core.cache import cache
from prometheus_client import (
    Counter,
    Gauge,
    Histogram,
    multiprocess,
    values,
)

logger = logging.getLogger(__name__)

FLUSH_SECONDS = 5.0
# After a failed flush (the cache is down) no flush is tried for this long: a page must never
# wait on socket timeouts to count itself.
BACKOFF_SECONDS = 30.0
BUCKET_TTL_SECONDS = 2 * 3600
CACHE_KEY_PREFIX = "buzz:metrics:v1"
# Counters summed across processes; rows and fence lag are kept in integer microseconds or rows.
COUNTERS = ("pages", "resets", "rounds", "rows", "fence_sum_us")
MAXIMA = ("rows_max", "fence_max_us")
# Histogram bounds (milliseconds) of the fence lag, for Prometheus (in seconds there).
FENCE_BUCKETS_MS = (1, 5, 10, 50, 100, 500, 1000, 5000, 10000, 30000, 60000, 120000)
MULTIPROC_DIR_VARIABLE = "PROMETHEUS_MULTIPROC_DIR"

PAGES = Counter("buzz_incremental_pages", "Incremental pages served")
RESETS = Counter(
    "buzz_incremental_resets", "Incremental pages that started a full round, by cause", ["cause"]
)
ROUNDS = Counter(
    "buzz_incremental_rounds", "Incremental rounds finished (more: false), by kind", ["kind"]
)
ROWS = Counter("buzz_incremental_rows", "Events plus removals served on incremental pages")
PAGE_ROWS = Histogram(
    "buzz_incremental_page_rows", "Events plus removals per incremental page",
    buckets=(0, 1, 5, 10, 50, 100, 250, 500, 1000),
)
FENCE_LAG = Histogram(
    "buzz_fence_lag_seconds", "How far a round's T lags the database's now() (open transactions)",
    buckets=tuple(bound / 1000 for bound in FENCE_BUCKETS_MS),
)
FRONT_DOOR_REQUESTS = Counter(
    "buzz_front_door_requests", "API requests served on the event loop by the front door"
)
NIP98_CHECKS = Counter("buzz_nip98_checks", "NIP-98 headers checked, signature included")
HTTP_REQUEST_DURATION = Histogram(
    "buzz_http_request_duration_seconds",
    "HTTP requests from the first byte received to the last byte sent, by endpoint and status",
    ["endpoint", "status"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
WEBSOCKET_CONNECTIONS = Gauge(
    "buzz_websocket_connections", "Open WebSocket connections", multiprocess_mode="livesum"
)
WEBSOCKET_CONNECTIONS_OPENED = Counter(
    "buzz_websocket_connections_opened", "WebSocket connections accepted or refused"
)
WEBSOCKET_SUBSCRIPTIONS = Gauge(
    "buzz_websocket_subscriptions", "Open REQ subscriptions on the WebSocket connections",
    multiprocess_mode="livesum",
)
# The staff console's sign-ins (relayinfo.staff): failures by what was wrong (password,
# second_factor, nostr_key: a Nostr sign-in refused), and refusals of a locked-out account or
# client address: alert on a rise.
ADMIN_LOGIN_FAILURES = Counter(
    "buzz_admin_login_failures", "Staff sign-ins that failed, by what was wrong", ["reason"]
)
ADMIN_LOGIN_REFUSALS = Counter(
    "buzz_admin_login_refusals",
    "Staff sign-ins refused because the account or client address is locked out",
)
# Bound once, so both reasons are exported (at 0) before the first failure.
ADMIN_LOGIN_FAILED_PASSWORD = ADMIN_LOGIN_FAILURES.labels("password")
ADMIN_LOGIN_FAILED_SECOND_FACTOR = ADMIN_LOGIN_FAILURES.labels("second_factor")
ADMIN_LOGIN_FAILED_NOSTR_KEY = ADMIN_LOGIN_FAILURES.labels("nostr_key")
HUB_DROPS = Counter(
    "buzz_hub_drops",
    "Live events not delivered (the client is told to run an HTTP round), by cause: lost = "
    "channel-layer messages this process never received; stale = events of messages older than "
    "the hub's lag bound; slow_client = frames a connection could not queue (its outbox, or "
    "what it holds back while a REQ replays, is full)",
    ["cause"],
)

# The label values are fixed sets: each child is bound once here, so a page or a drop costs a
# tuple lookup, not prometheus_client's `.labels()` (a lock and a label validation) each time.
# Binding also makes every series appear, at 0, before its first event.
RESET_CAUSES = ("start", "retired", "epoch", "expired", "not_ready", "view")
ROUND_KINDS = ("full", "continuation")
HUB_DROP_CAUSES = ("lost", "stale", "slow_client")
_RESETS_BY_CAUSE = {cause: RESETS.labels(cause) for cause in RESET_CAUSES}
# Every per-minute name in the shared cache: the counters, the maxima, the resets by cause.
MINUTE_NAMES = (*COUNTERS, *MAXIMA, *(f"resets_{cause}" for cause in RESET_CAUSES))
_ROUNDS_BY_KIND = {kind: ROUNDS.labels(kind) for kind in ROUND_KINDS}
HUB_DROPS_LOST = HUB_DROPS.labels("lost")
HUB_DROPS_STALE = HUB_DROPS.labels("stale")
HUB_DROPS_SLOW_CLIENT = HUB_DROPS.labels("slow_client")
# (endpoint, status) -> bound child: endpoints are a fixed set (relaycore.request_metrics) and
# statuses few, so this stays small.
_HTTP_DURATION_CHILDREN: dict[tuple[str, int], Any] = {}


def multiprocess_directory() -> str | None:
    return os.environ.get(MULTIPROC_DIR_VARIABLE) or os.environ.get(
        MULTIPROC_DIR_VARIABLE.lower()
    )


if multiprocess_directory() and values.ValueClass._multiprocess:
    # A worker that exits leaves its live gauges (open WebSockets) behind otherwise. The
    # directory is passed as it is now: `buzz-admin serve` unsets the variable (and removes its
    # temporary directory) before the process exits, and the call would then fail at exit.
    atexit.register(multiprocess.mark_process_dead, os.getpid(), multiprocess_directory())


@dataclass
class _Minute:
    pages: int = 0
    resets: int = 0
    rounds: int = 0
    rows: int = 0
    fence_sum_us: int = 0
    rows_max: int = 0
    fence_max_us: int = 0
    # Resets by cause (RESET_CAUSES), so the plot tells first rounds ("start") from resets.
    reset_causes: dict[str, int] = field(default_factory=dict)


_lock = threading.Lock()
_pending: dict[int, _Minute] = {}
_last_flush = 0.0
_down_until = 0.0


def _minute(now: float) -> int:
    return int(now // 60)


def record_round(
    *, reset_cause: str | None, rows: int, fence_lag_ms: float, full_round: bool,
    more: bool | None = None, flush: bool = True,
) -> bool:
    """Count one incremental page served.

    `reset_cause`: why the page started a new full round (Page.reset_cause: start, retired,
    epoch, expired, not_ready, view), None when it did not; `full_round`: the page belongs to a
    full round (else a continuation round); `rows`: len(events) + len(removed);
    `fence_lag_ms`: how far the round's T lags the database's now() (open transactions hold it
    back); `more`: the page's `more` flag, when given a `more: false` page counts a finished round.
    `flush`: write due counts to the shared cache now; with False, return whether a flush is due
    instead (an event loop must not wait on the cache: it runs `flush_metrics` in a thread).
    """
    global _last_flush
    now = time.time()
    fence_us = max(0, int(fence_lag_ms * 1000))
    with _lock:
        bucket = _pending.setdefault(_minute(now), _Minute())
        bucket.pages += 1
        bucket.rows += rows
        bucket.rows_max = max(bucket.rows_max, rows)
        bucket.fence_sum_us += fence_us
        bucket.fence_max_us = max(bucket.fence_max_us, fence_us)
        if reset_cause is not None:
            bucket.resets += 1
            bucket.reset_causes[reset_cause] = bucket.reset_causes.get(reset_cause, 0) + 1
        if more is False:
            bucket.rounds += 1
        due = (now - _last_flush >= FLUSH_SECONDS or len(_pending) > 1) and now >= _down_until
        if due and not flush:
            # Claimed by this caller: others do not also schedule one before it runs.
            _last_flush = now
    PAGES.inc()
    ROWS.inc(rows)
    PAGE_ROWS.observe(rows)
    FENCE_LAG.observe(max(0.0, fence_lag_ms) / 1000)
    if reset_cause is not None:
        _child(_RESETS_BY_CAUSE, RESETS, reset_cause).inc()
    if more is False:
        _child(_ROUNDS_BY_KIND, ROUNDS, "full" if full_round else "continuation").inc()
    if due and flush:
        flush_metrics()
    return due


def record_front_door_request() -> None:
    FRONT_DOOR_REQUESTS.inc()


def record_nip98_check() -> None:
    """Count one NIP-98 header about to be checked (signature included)."""
    NIP98_CHECKS.inc()


def _child(bound: dict[str, Any], metric: Counter, label: str) -> Any:
    child = bound.get(label)
    return metric.labels(label) if child is None else child


def record_http_request(*, endpoint: str, status: int, seconds: float) -> None:
    key = (endpoint, status)
    child = _HTTP_DURATION_CHILDREN.get(key)
    if child is None:
        child = _HTTP_DURATION_CHILDREN[key] = HTTP_REQUEST_DURATION.labels(endpoint, str(status))
    child.observe(seconds)


def flush_metrics() -> None:
    """Add this process's pending counts to the shared per-minute buckets."""
    global _last_flush, _down_until
    with _lock:
        pending = dict(_pending)
        _pending.clear()
        _last_flush = time.time()
    for minute, bucket in sorted(pending.items()):
        try:
            _flush_bucket(minute, bucket)
        except Exception as exc:  # the cache is down: metrics are best effort, counts dropped
            logger.warning("metrics flush failed, pausing flushes: %s", exc)
            with _lock:
                _down_until = time.time() + BACKOFF_SECONDS
            return


def _key(minute: int, name: str) -> str:
    return f"{CACHE_KEY_PREFIX}:{minute}:{name}"


def _cause_key(cause: str) -> str:
    return f"resets_{cause}"


def _flush_bucket(minute: int, bucket: _Minute) -> None:
    deltas = [(name, getattr(bucket, name)) for name in COUNTERS]
    deltas += [(_cause_key(cause), count) for cause, count in bucket.reset_causes.items()]
    for name, delta in deltas:
        if delta:
            key = _key(minute, name)
            cache.add(key, 0, BUCKET_TTL_SECONDS)
            cache.incr(key, delta)
    for name in MAXIMA:
        value = getattr(bucket, name)
        if value:
            key = _key(minute, name)
            if value > int(cache.get(key) or 0):
                cache.set(key, value, BUCKET_TTL_SECONDS)


@dataclass(frozen=True)
class MinuteTraffic:
    start: datetime
    pages: int
    resets: int
    rounds: int
    rows: int
    rows_max: int
    fence_avg_ms: float | None
    fence_max_ms: float | None
    # Of `resets`, how many each cause started (RESET_CAUSES order; "start": first rounds).
    resets_by_cause: tuple[tuple[str, int], ...] = ()

    @property
    def rows_per_page(self) -> float | None:
        return self.rows / self.pages if self.pages else None

    def caused(self, cause: str) -> int:
        return dict(self.resets_by_cause).get(cause, 0)


@dataclass(frozen=True)
class RoundTraffic:
    """The fleet's incremental pages over the last `minutes`, per minute and in total."""

    minutes: int
    per_minute: tuple[MinuteTraffic, ...]  # oldest first, every minute of the window

    def _sum(self, name: str) -> int:
        return sum(int(getattr(m, name)) for m in self.per_minute)

    @property
    def pages(self) -> int:
        return self._sum("pages")

    @property
    def resets(self) -> int:
        return self._sum("resets")

    @property
    def rounds(self) -> int:
        return self._sum("rounds")

    @property
    def rows(self) -> int:
        return self._sum("rows")

    @property
    def rows_per_page(self) -> float | None:
        return self.rows / self.pages if self.pages else None

    @property
    def rows_max(self) -> int:
        return max((m.rows_max for m in self.per_minute), default=0)

    @property
    def pages_per_minute(self) -> float:
        return self.pages / self.minutes

    @property
    def rounds_per_minute(self) -> float:
        return self.rounds / self.minutes

    @property
    def resets_per_minute(self) -> float:
        return self.resets / self.minutes

    @property
    def fence_max_ms(self) -> float | None:
        values = [m.fence_max_ms for m in self.per_minute if m.fence_max_ms is not None]
        return max(values) if values else None

    @property
    def fence_avg_ms(self) -> float | None:
        pages = self.pages
        if not pages:
            return None
        total = sum((m.fence_avg_ms or 0.0) * m.pages for m in self.per_minute)
        return total / pages


def round_traffic(*, minutes: int = 60) -> RoundTraffic:
    """Read the shared buckets of the last `minutes` (this process's pending counts included)."""
    values: dict[str, Any] = {}
    now = time.time()
    now_minute = _minute(now)
    span = range(now_minute - minutes + 1, now_minute + 1)
    if now >= _down_until:
        flush_metrics()
        keys = [_key(m, name) for m in span for name in MINUTE_NAMES]
        try:
            values = cache.get_many(keys)
        except Exception as exc:
            logger.warning("metrics read failed: %s", exc)
    rows = []
    for m in span:
        def get(name: str, minute: int = m) -> int:
            return int(values.get(_key(minute, name)) or 0)

        pages = get("pages")
        rows.append(
            MinuteTraffic(
                start=datetime.fromtimestamp(m * 60, tz=UTC),
                pages=pages,
                resets=get("resets"),
                rounds=get("rounds"),
                rows=get("rows"),
                rows_max=get("rows_max"),
                fence_avg_ms=get("fence_sum_us") / 1000 / pages if pages else None,
                fence_max_ms=get("fence_max_us") / 1000 if pages else None,
                resets_by_cause=tuple(
                    (cause, get(_cause_key(cause))) for cause in RESET_CAUSES
                ),
            )
        )
    return RoundTraffic(minutes=minutes, per_minute=tuple(rows))


@dataclass(frozen=True)
class ProcessTotals:
    """This process's counters (the test suite reads them; Prometheus reads the metrics)."""

    pages: int
    resets: int
    rounds: int
    rows: int
    nip98_checks: int = 0
    front_door_requests: int = 0


def process_totals() -> ProcessTotals:
    def value(counter: Counter) -> int:
        return int(counter._value.get())

    def total(bound: dict[str, Any]) -> int:
        return sum(value(child) for child in bound.values())

    return ProcessTotals(
        value(PAGES), total(_RESETS_BY_CAUSE), total(_ROUNDS_BY_KIND), value(ROWS),
        value(NIP98_CHECKS), value(FRONT_DOOR_REQUESTS),
    )
