"""Staff admin for the deployment: the readiness page, and read-only views of relayinfo's tables.

The page (admin/relayinfo/readiness/, wired in relayinfo.admin_site) shows the verdict every
other surface shows (relayinfo.readiness), evaluated afresh, with the details behind it.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib import admin
from django.db import connection
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse

from relaycore.admin import ReadOnlyAdmin
from relaycore.metrics import round_traffic
from relayinfo.admin_plots import fleet_timeline, lag_bins, lag_plot, traffic_plot
from relayinfo.exposition import stamp_lag
from relayinfo.models import (
    AuthReplayClaim,
    FleetEpisode,
    RelayInstance,
    SyncState,
    WriterLagSample,
)
from relayinfo.readiness import AREAS, evaluate_readiness


def _current_fence_lag_ms() -> float | None:
    """How far a round's T would lag now(): the age of the oldest open transaction."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT EXTRACT(EPOCH FROM now() - min(xact_start)) * 1000
            FROM pg_stat_activity
            WHERE datname = current_database() AND backend_type = 'client backend'
              AND xact_start IS NOT NULL AND pid <> pg_backend_pid()
            """
        )
        row = cursor.fetchone()
    return float(row[0]) if row and row[0] is not None else None


def readiness_context() -> dict[str, Any]:
    """Everything the page shows; a function of its own so the page's test can call it too."""
    report = evaluate_readiness(use_cache=False)
    state = SyncState.objects.filter(pk=1).first()
    traffic = round_traffic(minutes=60)
    try:
        fence_now = _current_fence_lag_ms()
    except Exception:
        fence_now = None
    overlap_ms = settings.ARTIFACT_SYNC_OVERLAP_SECONDS * 1000
    return {
        "report": report,
        "areas": [
            (name, report.area_passed(items), [report.item(i) for i in items])
            for name, items in AREAS
        ],
        "sync_state": state,
        "episodes": FleetEpisode.objects.order_by("-id")[:10],
        "stamp_lag": stamp_lag(3600),
        "fence_now_ms": fence_now,
        "overlap_seconds": settings.ARTIFACT_SYNC_OVERLAP_SECONDS,
        "overlap_ms": settings.ARTIFACT_SYNC_OVERLAP_SECONDS * 1000,
        "traffic": traffic,
        "recent_minutes": [m for m in traffic.per_minute[-15:]][::-1],
        "refresh_seconds": settings.RELAY_FLEET_REFRESH_SECONDS,
        "plots": {
            "lag": lag_plot(lag_bins(overlap_ms=overlap_ms), overlap_ms=overlap_ms),
            "traffic": traffic_plot(traffic.per_minute),
            "fleet": fleet_timeline(refresh_seconds=settings.RELAY_FLEET_REFRESH_SECONDS),
        },
    }


def readiness_view(request: HttpRequest) -> HttpResponse:
    context = {
        **admin.site.each_context(request),
        "title": "Deployment readiness",
        **readiness_context(),
    }
    return TemplateResponse(request, "admin/relayinfo/readiness.html", context)


@admin.register(SyncState)
class SyncStateAdmin(ReadOnlyAdmin):
    list_display = ("epoch", "bumped_at", "reason")


@admin.register(RelayInstance)
class RelayInstanceAdmin(ReadOnlyAdmin):
    list_display = (
        "hostname", "pid", "version", "stamps", "key_id", "key_generated", "started_at",
        "last_seen_at",
    )
    ordering = ("-last_seen_at",)


@admin.register(FleetEpisode)
class FleetEpisodeAdmin(ReadOnlyAdmin):
    list_display = ("id", "opened_at", "opened_epoch", "closed_at", "closed_epoch", "reason")
    ordering = ("-id",)


@admin.register(WriterLagSample)
class WriterLagSampleAdmin(ReadOnlyAdmin):
    list_display = ("recorded_at", "instance_id", "lag_ms")
    ordering = ("-recorded_at",)


@admin.register(AuthReplayClaim)
class AuthReplayClaimAdmin(ReadOnlyAdmin):
    list_display = ("event_id", "expires_at")
    ordering = ("-expires_at",)
