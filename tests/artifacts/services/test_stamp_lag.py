"""Stamp-to-commit lag: every committed write is measured; readiness reads max and p99."""

from __future__ import annotations

import time
import uuid

import pytest

from artifacts.services.channels import channel_create
from artifacts.services.stamp_lag import (
    MAX_SAMPLES_PER_FLUSH,
    flush_lag_samples,
    record_lag,
    stamp_lag_summary,
)
from artifacts.services.transactions import write_transaction
from relayinfo.models import WriterLagSample
from tests.factories import create_artifact, make_channel, make_community, make_key


def _fresh() -> None:
    flush_lag_samples()
    WriterLagSample.objects.all().delete()


@pytest.mark.django_db(transaction=True)
def test_every_committed_write_records_its_lag() -> None:
    community = make_community()
    h = make_channel(community)
    _fresh()
    for _ in range(3):
        create_artifact(community, make_key(), h)
    summary = stamp_lag_summary()
    assert summary["samples"] == 3
    assert 0 < summary["max_ms"] < 5000
    assert summary["p99_ms"] <= summary["max_ms"]


@pytest.mark.django_db(transaction=True)
def test_a_transaction_that_commits_late_shows_up() -> None:
    community = make_community()
    _fresh()
    with write_transaction(community_id=community.pk):
        channel_create(community_id=community.pk, channel_id=uuid.uuid4(), name="slow")
        time.sleep(0.3)  # the stamp is taken; the commit waits
    assert stamp_lag_summary()["max_ms"] >= 300


@pytest.mark.django_db
def test_busy_intervals_keep_the_maximum_and_a_bounded_sample() -> None:
    _fresh()
    for _ in range(999):
        record_lag(1.0)
    record_lag(900.0)
    flush_lag_samples()
    assert WriterLagSample.objects.count() == MAX_SAMPLES_PER_FLUSH
    summary = stamp_lag_summary()
    assert summary["max_ms"] == 900.0
    assert summary["samples"] == MAX_SAMPLES_PER_FLUSH


@pytest.mark.django_db
def test_summary_without_samples() -> None:
    _fresh()
    assert stamp_lag_summary() == {"max_ms": None, "p99_ms": None, "samples": 0}


@pytest.mark.django_db
def test_the_window_excludes_old_samples() -> None:
    _fresh()
    WriterLagSample.objects.create(lag_ms=50.0)
    WriterLagSample.objects.filter(lag_ms=50.0).update(
        recorded_at=WriterLagSample.objects.get().recorded_at.replace(year=2000)
    )
    record_lag(7.0)
    summary = stamp_lag_summary(window_seconds=3600)
    assert (summary["max_ms"], summary["samples"]) == (7.0, 1)
