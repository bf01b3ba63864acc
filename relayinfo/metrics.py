"""Round metrics for operators: pages, resets, rounds, rows per page, fence lag.

`record_round()` runs on every incremental page, so it only bumps in-process counters under a
lock. Every few seconds (and whenever a page lands in a new minute) the pending counts are added
to per-minute buckets in the shared cache (Redis when configured), so the staff page and
/metrics see the whole fleet. Counters use atomic increments; a bucket's maxima are read-modify-
write and may lose a concurrent update from another process, which is fine for a gauge of the
worst case. When the cache is down the counts of that flush are dropped, never the page.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from django.core.cache import cache

from artifacts.selectors.sync_epoch import current_sync_state
from artifacts.services.stamp_lag import stamp_lag_summary
from relayinfo.readiness import evaluate_readiness

logger = logging.getLogger(__name__)

FLUSH_SECONDS = 5.0
# After a failed flush (the cache is down) no flush is tried for this long: a page must never
# wait on socket timeouts to count itself.
BACKOFF_SECONDS = 30.0
BUCKET_TTL_SECONDS = 2 * 3600
KEY_PREFIX = "buzz:metrics:v1"
# Counters summed across processes; rows and fence lag are kept in integer microseconds or rows.
COUNTERS = ("pages", "resets", "rounds", "rows", "fence_sum_us")
MAXIMA = ("rows_max", "fence_max_us")
# Histogram bounds (milliseconds) of the process's fence lag, for Prometheus.
FENCE_BUCKETS_MS = (1, 5, 10, 50, 100, 500, 1000, 5000, 10000, 30000, 60000, 120000)


@dataclass
class _Minute:
    pages: int = 0
    resets: int = 0
    rounds: int = 0
    rows: int = 0
    fence_sum_us: int = 0
    rows_max: int = 0
    fence_max_us: int = 0


@dataclass
class _Totals:
    """Monotonic counters of this process since it started (Prometheus counters)."""

    pages: int = 0
    resets: int = 0
    rounds: int = 0
    rows: int = 0
    fence_sum_ms: float = 0.0
    fence_buckets: list[int] = field(default_factory=lambda: [0] * len(FENCE_BUCKETS_MS))
    # NIP-98 headers checked (each may cost a BIP-340 verification): requests refused by the
    # address limit never get here (PROTOCOL.md section 3).
    nip98_checks: int = 0
    # Requests the front door served (buzzrelay.edge.front_door), the rest being Django's.
    front_door_requests: int = 0


_lock = threading.Lock()
_pending: dict[int, _Minute] = {}
_totals = _Totals()
_last_flush = 0.0
_down_until = 0.0


def _minute(now: float) -> int:
    return int(now // 60)


def record_round(
    *, reset: bool, rows: int, fence_lag_ms: float, more: bool | None = None, flush: bool = True
) -> bool:
    """Count one incremental page served.

    `reset`: the page started a new full round; `rows`: len(events) + len(removed);
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
        _totals.pages += 1
        _totals.rows += rows
        _totals.fence_sum_ms += fence_lag_ms
        for index, bound in enumerate(FENCE_BUCKETS_MS):
            if fence_lag_ms <= bound:
                _totals.fence_buckets[index] += 1
        if reset:
            bucket.resets += 1
            _totals.resets += 1
        if more is False:
            bucket.rounds += 1
            _totals.rounds += 1
        due = (now - _last_flush >= FLUSH_SECONDS or len(_pending) > 1) and now >= _down_until
        if due and not flush:
            # Claimed by this caller: others do not also schedule one before it runs.
            _last_flush = now
    if due and flush:
        flush_metrics()
    return due


def record_front_door_request() -> None:
    with _lock:
        _totals.front_door_requests += 1


def record_nip98_check() -> None:
    """Count one NIP-98 header about to be checked (signature included)."""
    with _lock:
        _totals.nip98_checks += 1


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
    return f"{KEY_PREFIX}:{minute}:{name}"


def _flush_bucket(minute: int, bucket: _Minute) -> None:
    for name in COUNTERS:
        delta = getattr(bucket, name)
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

    @property
    def rows_per_page(self) -> float | None:
        return self.rows / self.pages if self.pages else None


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
        keys = [_key(m, name) for m in span for name in (*COUNTERS, *MAXIMA)]
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
            )
        )
    return RoundTraffic(minutes=minutes, per_minute=tuple(rows))


@dataclass(frozen=True)
class ProcessTotals:
    pages: int
    resets: int
    rounds: int
    rows: int
    fence_sum_ms: float
    fence_buckets: tuple[tuple[float, int], ...]  # (upper bound ms, cumulative count)
    nip98_checks: int = 0
    front_door_requests: int = 0


def process_totals() -> ProcessTotals:
    with _lock:
        # record_round counts each page in every bucket whose bound it fits: already cumulative.
        buckets = tuple(zip(map(float, FENCE_BUCKETS_MS), _totals.fence_buckets, strict=True))
        return ProcessTotals(
            _totals.pages, _totals.resets, _totals.rounds, _totals.rows, _totals.fence_sum_ms,
            buckets, _totals.nip98_checks, _totals.front_door_requests,
        )


def stamp_lag(window_seconds: int = 3600) -> dict[str, float | int | None] | None:
    """The writers' stamp-to-commit lag over the window: {max_ms, p99_ms, samples}, or None."""
    try:
        return dict(stamp_lag_summary(window_seconds=window_seconds))
    except Exception as exc:
        logger.warning("stamp lag unavailable: %s", exc)
        return None


def _line(out: list[str], name: str, value: float | int | None, labels: str = "") -> None:
    if value is not None:
        out.append(f"{name}{{{labels}}} {value}" if labels else f"{name} {value}")


def _help(out: list[str], name: str, kind: str, text: str) -> None:
    out.append(f"# HELP {name} {text}")
    out.append(f"# TYPE {name} {kind}")


def prometheus_exposition() -> str:
    """Prometheus text format: this process's counters, and the deployment's shared gauges."""
    out: list[str] = []
    report = evaluate_readiness()
    _help(out, "buzz_deployment_ready", "gauge", "1 while PROTOCOL.md section 7 holds")
    _line(out, "buzz_deployment_ready", int(report.ready))
    _help(out, "buzz_readiness_check", "gauge", "1 per passing readiness item")
    for check in report.checks:
        _line(out, "buzz_readiness_check", int(check.passed),
              f'item="{check.item}",check="{check.id}"')
    if report.fleet is not None:
        _help(out, "buzz_fleet_live_instances", "gauge", "registered instances seen recently")
        _line(out, "buzz_fleet_live_instances", len(report.fleet.live_instances))
        _help(out, "buzz_fleet_relay_connections", "gauge", "buzzrelay/ database connections")
        _line(out, "buzz_fleet_relay_connections", len(report.fleet.connections))
    try:
        epoch, _identity = current_sync_state()
    except Exception:
        epoch = None
    _help(out, "buzz_sync_epoch", "gauge", "the database's sync epoch")
    _line(out, "buzz_sync_epoch", epoch)

    totals = process_totals()
    for name, value, text in (
        ("buzz_incremental_pages_total", totals.pages, "incremental pages served"),
        ("buzz_incremental_resets_total", totals.resets, "pages that started a full round"),
        ("buzz_incremental_rounds_total", totals.rounds, "rounds finished (more: false)"),
        ("buzz_incremental_rows_total", totals.rows, "events plus removals served"),
    ):
        _help(out, name, "counter", f"{text} by this process")
        _line(out, name, value)
    _help(out, "buzz_front_door_requests_total", "counter",
          "API requests served on the event loop by the front door (this process)")
    _line(out, "buzz_front_door_requests_total", totals.front_door_requests)
    _help(out, "buzz_nip98_checks_total", "counter",
          "NIP-98 headers checked, signature included (this process)")
    _line(out, "buzz_nip98_checks_total", totals.nip98_checks)
    _help(out, "buzz_fence_lag_milliseconds", "histogram", "round T behind now() (this process)")
    for bound, count in totals.fence_buckets:
        _line(out, "buzz_fence_lag_milliseconds_bucket", count, f'le="{bound:g}"')
    _line(out, "buzz_fence_lag_milliseconds_bucket", totals.pages, 'le="+Inf"')
    _line(out, "buzz_fence_lag_milliseconds_sum", round(totals.fence_sum_ms, 3))
    _line(out, "buzz_fence_lag_milliseconds_count", totals.pages)

    traffic = round_traffic(minutes=60)
    gauges: tuple[tuple[str, float | None, str], ...] = (
        ("buzz_fleet_pages_per_minute", traffic.pages_per_minute, "incremental pages"),
        ("buzz_fleet_rounds_per_minute", traffic.rounds_per_minute, "finished rounds"),
        ("buzz_fleet_resets_per_minute", traffic.resets_per_minute, "full-round starts"),
        ("buzz_fleet_rows_per_page", traffic.rows_per_page, "rows per page"),
        ("buzz_fleet_fence_lag_max_milliseconds", traffic.fence_max_ms, "worst fence lag"),
    )
    for name, gauge, text in gauges:
        _help(out, name, "gauge", f"{text}, whole fleet, last hour")
        _line(out, name, None if gauge is None else round(gauge, 3))
    lag = stamp_lag()
    if lag is not None:
        _help(out, "buzz_stamp_lag_milliseconds", "gauge", "stamp-to-commit lag, last hour")
        _line(out, "buzz_stamp_lag_milliseconds", lag.get("max_ms"), 'stat="max"')
        _line(out, "buzz_stamp_lag_milliseconds", lag.get("p99_ms"), 'stat="p99"')
        _line(out, "buzz_stamp_lag_samples", lag.get("samples"))
    return "\n".join(out) + "\n"
