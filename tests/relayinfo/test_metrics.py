"""Round metrics: in-process counts flushed to the shared cache per minute, and /metrics."""

from __future__ import annotations

import time
from typing import Any

import pytest
from django.core.cache import cache
from django.test import Client

from artifacts.models import Community
from relaycore import metrics
from tests.relayinfo.conftest import transactional


def _page(reset_cause: str | None, **kwargs: Any) -> bool:
    """Count one page of a full round."""
    return metrics.record_round(reset_cause=reset_cause, full_round=True, **kwargs)


@pytest.fixture(autouse=True)
def _empty_buckets() -> None:
    metrics.flush_metrics()
    now = metrics._minute(time.time())
    names = metrics.MINUTE_NAMES
    cache.delete_many([metrics._key(m, name) for m in range(now - 70, now + 2) for name in names])


def test_pages_resets_rounds_rows_and_fence_lag_are_counted() -> None:
    before = metrics.process_totals()
    _page("start", rows=100, fence_lag_ms=4.0, more=True)
    _page(None, rows=40, fence_lag_ms=250.0, more=True)
    _page(None, rows=10, fence_lag_ms=1.5, more=False)
    traffic = metrics.round_traffic(minutes=60)
    assert len(traffic.per_minute) == 60
    assert (traffic.pages, traffic.resets, traffic.rounds, traffic.rows) == (3, 1, 1, 150)
    assert traffic.rows_per_page == pytest.approx(50.0)
    assert traffic.rows_max == 100
    assert traffic.fence_max_ms == pytest.approx(250.0)
    assert traffic.fence_avg_ms == pytest.approx((4.0 + 250.0 + 1.5) / 3)
    assert traffic.pages_per_minute == pytest.approx(3 / 60)
    after = metrics.process_totals()
    assert after.pages - before.pages == 3
    assert after.resets - before.resets == 1
    assert after.rounds - before.rounds == 1
    assert after.rows - before.rows == 150


def _sample(name: str, **labels: str) -> float:
    from prometheus_client import REGISTRY

    value = REGISTRY.get_sample_value(name, labels)
    return 0.0 if value is None else value


def test_fence_lag_and_rows_per_page_are_histograms() -> None:
    fence = {bound: _sample("buzz_fence_lag_seconds_bucket", le=bound)
             for bound in ("0.001", "0.005", "0.1", "0.5")}
    rows = {bound: _sample("buzz_incremental_page_rows_bucket", le=bound)
            for bound in ("10.0", "50.0", "100.0")}
    _page("start", rows=100, fence_lag_ms=4.0, more=True)
    _page(None, rows=40, fence_lag_ms=250.0, more=True)
    _page(None, rows=10, fence_lag_ms=1.5, more=False)
    # Cumulative buckets: 1.5 ms fits every bucket from 5 ms, 250 ms only those from 500 ms.
    grew = {bound: _sample("buzz_fence_lag_seconds_bucket", le=bound) - before
            for bound, before in fence.items()}
    assert grew == {"0.001": 0, "0.005": 2, "0.1": 2, "0.5": 3}
    grew = {bound: _sample("buzz_incremental_page_rows_bucket", le=bound) - before
            for bound, before in rows.items()}
    assert grew == {"10.0": 1, "50.0": 2, "100.0": 3}


def test_counts_of_every_process_add_up_in_the_shared_buckets() -> None:
    _page(None, rows=7, fence_lag_ms=1.0)
    metrics.flush_metrics()
    # Another process flushing into the same minute (its own counts, same keys).
    minute = metrics._minute(time.time())
    metrics._flush_bucket(minute, metrics._Minute(pages=2, rows=5, rows_max=3, fence_max_us=9000))
    traffic = metrics.round_traffic(minutes=5)
    assert (traffic.pages, traffic.rows, traffic.rows_max) == (3, 12, 7)
    assert traffic.fence_max_ms == pytest.approx(9.0)


@transactional
def test_metrics_endpoint_is_prometheus_text_on_any_host(community: Community) -> None:
    _page("start", rows=3, fence_lag_ms=2.0, more=False)
    response = Client().get("/metrics", HTTP_HOST="10.0.0.7:9100")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain; version=0.0.4")
    text = response.content.decode()
    lines = text.splitlines()
    assert "buzz_deployment_ready 1.0" in lines
    assert 'buzz_readiness_check{check="indexes",item="3"} 1.0' in lines
    assert any(line.startswith("buzz_sync_epoch ") for line in lines)
    assert any(line.startswith("buzz_incremental_pages_total ") for line in lines)
    assert 'buzz_fence_lag_seconds_bucket{le="+Inf"}' in text
    assert "buzz_stamp_to_commit_lag_seconds_bucket" in text
    assert any(line.startswith("process_resident_memory_bytes ") for line in lines)
    # Rates are the scraper's: no per-minute gauges computed by the relay.
    assert "per_minute" not in text
    # Every metric has its HELP and TYPE, and every sample line is `name{labels} number`.
    families = {line.split()[2] for line in lines if line.startswith("# TYPE ")}
    helped = {line.split()[2] for line in lines if line.startswith("# HELP ")}
    assert families == helped
    for line in lines:
        if not line.startswith("#"):
            float(line.rsplit(" ", 1)[1])
            name = line.split("{")[0].split(" ")[0]
            assert any(name == f or name.startswith(f + "_") for f in families), name


@transactional
@pytest.mark.parametrize(
    ("token", "networks", "address", "authorization", "status"),
    [
        (None, (), "127.0.0.1", None, 200),  # neither configured: loopback only
        (None, (), "10.1.2.3", None, 403),
        (None, ("10.0.0.0/8",), "10.1.2.3", None, 200),
        (None, ("10.0.0.0/8",), "127.0.0.1", None, 403),
        ("s3cret-token-for-metrics", (), "10.1.2.3", "Bearer s3cret-token-for-metrics", 200),
        ("s3cret-token-for-metrics", (), "127.0.0.1", None, 401),
        ("s3cret-token-for-metrics", (), "10.1.2.3", "Bearer wrong-token-for-metrics", 401),
        ("s3cret-token-for-metrics", ("10.0.0.0/8",), "10.1.2.3", None, 200),
    ],
)
def test_metrics_need_the_token_or_an_allowed_network(
    community: Community, settings: object, token: str | None, networks: tuple[str, ...],
    address: str, authorization: str | None, status: int,
) -> None:
    settings.RELAY_METRICS_TOKEN = token  # type: ignore[attr-defined]
    settings.RELAY_METRICS_NETWORKS = networks  # type: ignore[attr-defined]
    environ: dict[str, Any] = {"REMOTE_ADDR": address}
    if authorization:
        environ["HTTP_AUTHORIZATION"] = authorization
    response = Client(**environ).get("/metrics")
    assert response.status_code == status, response.content
    if status == 401:
        assert response.json()["error"] == "unauthorized"
        assert response["WWW-Authenticate"] == 'Bearer realm="metrics"'
    if status == 403:
        assert response.json()["error"] == "forbidden"


DEAD_REDIS = {
    "default": {
        "BACKEND": "django_redis.cache.RedisCache",
        "LOCATION": "redis://127.0.0.1:1/0",
        "OPTIONS": {"SOCKET_CONNECT_TIMEOUT": 0.5, "SOCKET_TIMEOUT": 0.5},
    }
}


def test_pages_never_wait_on_a_cache_that_is_down() -> None:
    from django.test import override_settings

    with override_settings(CACHES=DEAD_REDIS):
        _page(None, rows=1, fence_lag_ms=1.0)
        metrics.flush_metrics()  # fails, and pauses flushing
        started = time.perf_counter()
        for _ in range(1000):
            _page(None, rows=1, fence_lag_ms=1.0)
        assert time.perf_counter() - started < 0.5
        assert metrics.round_traffic(minutes=5).pages == 0  # nothing readable, no error
    metrics._down_until = 0.0
    metrics.flush_metrics()
    assert metrics.round_traffic(minutes=5).pages >= 1000
