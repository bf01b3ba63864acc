"""The readiness page's server-side plots, drawn from what the relay records."""

from __future__ import annotations

import re
import uuid

import pytest
from django.contrib.auth.models import User
from django.test import Client

from relaycore import metrics
from relayinfo import fleet
from relayinfo.admin_plots import fleet_timeline, lag_bins, lag_plot
from relayinfo.models import FleetEpisode, RelayInstance, WriterLagSample
from tests.relayinfo.conftest import transactional

pytestmark = transactional
PAGE = "/admin/relayinfo/readiness/"
OVERLAP_MS = 120_000.0


def _counts(svg: str, css_class: str) -> list[int]:
    return [int(n) for n in re.findall(rf'class="{css_class}" data-count="(\d+)"', svg)]


def test_lag_bins_count_the_writers_samples_against_the_overlap() -> None:
    WriterLagSample.objects.bulk_create(
        [WriterLagSample(lag_ms=lag) for lag in (0.5, 3, 3, 3, 40, 200_000)]
    )
    bins = lag_bins(overlap_ms=OVERLAP_MS)
    by_range = {(b.low_ms, b.high_ms): b.count for b in bins}
    assert by_range[(0.1, 1.0)] == 1
    assert by_range[(2.5, 5.0)] == 3
    assert by_range[(25.0, 50.0)] == 1
    assert bins[-1].low_ms == OVERLAP_MS and bins[-1].count == 1  # past the overlap
    assert sum(b.count for b in bins) == 6
    svg = lag_plot(bins, overlap_ms=OVERLAP_MS)
    assert _counts(svg, "lag-bin") == [b.count for b in bins]
    assert 'class="overlap"' in svg and "overlap 120 s" in svg


def test_fleet_timeline_draws_live_and_stale_instances_and_episodes() -> None:
    fleet.register_instance(instance=uuid.uuid4())
    stale = RelayInstance.objects.create(
        instance_id=uuid.uuid4(), hostname="old-host", pid=4242, version="0.0.9", stamps=False,
        key_id="abcd1234",
    )
    RelayInstance.objects.filter(pk=stale.pk).update(last_seen_at=stale.started_at)
    FleetEpisode.objects.create(opened_epoch=1, reason="a writer that does not stamp <b>")
    svg = fleet_timeline(refresh_seconds=-1)  # every instance is stale by then
    assert 'data-pid="4242"' in svg and "old-host:4242" in svg
    assert svg.count('class="episode"') == 1
    assert "&lt;b&gt;" in svg and "<b>" not in svg  # texts are escaped
    live_svg = fleet_timeline(refresh_seconds=3600)
    assert live_svg.count('class="instance live"') == 2


def test_readiness_page_shows_the_three_plots_from_recorded_figures() -> None:
    WriterLagSample.objects.bulk_create([WriterLagSample(lag_ms=lag) for lag in (2, 2, 7)])
    metrics.record_round(reset_cause="start", full_round=True, rows=3, fence_lag_ms=1.0,
                         more=False)
    metrics.record_round(reset_cause=None, full_round=False, rows=1, fence_lag_ms=1.0,
                         more=False)
    for _ in range(2):
        metrics.record_round(reset_cause="epoch", full_round=True, rows=0, fence_lag_ms=1.0)
    fleet.register_instance(instance=uuid.uuid4())
    client = Client()
    client.force_login(User.objects.create_user("op", password="x", is_staff=True))
    page = client.get(PAGE).content.decode()
    for figure in ("plot-lag", "plot-traffic", "plot-fleet"):
        assert f'id="{figure}"><svg' in page
    assert sum(_counts(page, "lag-bin")) == 3
    totals = {name: int(total) for name, total in
              re.findall(r'class="series-([a-z_-]+)" data-total="(\d+)"', page)}
    # First rounds and resets are drawn apart, each reset cause on a line of its own; a cause
    # with no reset in the window draws none.
    assert totals["rounds"] >= 2 and totals["first"] >= 1 and totals["reset-epoch"] >= 2
    # (Other tests of this process may have recorded resets of any cause in the same window, so
    # the check is on the drawing, not on one cause's absence.)
    assert all(total > 0 for name, total in totals.items() if name.startswith("reset-"))
    assert f"resets: epoch ({totals['reset-epoch']})" in page
    assert 'class="instance live"' in page
    # Django 6's breadcrumb markup: an ordered list, the current page marked.
    assert '<ol class="breadcrumbs">' in page
    assert '<li aria-current="page">Deployment readiness' in page


@pytest.mark.parametrize("broken", [False, True])
def test_admin_index_heads_with_the_verdict_and_failing_items(broken: bool) -> None:
    from artifacts.schema import INDEXES_BY_NAME
    from tests.relayinfo.conftest import execute

    client = Client()
    client.force_login(User.objects.create_user("op", password="x", is_staff=True))
    spec = INDEXES_BY_NAME["artifact_revisions_moves"]
    if broken:
        execute(spec.drop_sql(concurrently=False))
    try:
        from relayinfo.readiness import forget_cached_readiness

        forget_cached_readiness()
        page = client.get("/admin/").content.decode()
    finally:
        if broken:
            execute(spec.create_sql(concurrently=False))
    verdict = page[page.index('id="readiness-verdict"'):page.index("</section>")]
    if broken:
        assert "Not ready." in verdict
        assert "artifact_revisions_moves: no index named artifact_revisions_moves" in verdict
    else:
        assert "Ready." in verdict and "Not ready" not in verdict
    assert PAGE in verdict
