"""The soak of bench/soak.py, about a minute long in CI (BUZZ_SOAK_SECONDS to change it)."""

from __future__ import annotations

import os

import pytest

from bench.soak import run_soak


@pytest.mark.slow
def test_soak_mixed_traffic_holds_every_criterion() -> None:
    seconds = float(os.environ.get("BUZZ_SOAK_SECONDS", "60"))
    report = run_soak(seconds, warmup=min(20.0, seconds / 3))
    assert report.ok, report.failures
    assert report.statuses.get(200, 0) > 100
    assert report.live_events > 0
