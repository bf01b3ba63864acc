"""Relay information and health endpoints."""

from __future__ import annotations

from django.conf import settings
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils.cache import patch_cache_control, patch_vary_headers

from buzzrelay.http import json_error, json_response, public_netloc, public_scheme
from relayinfo.metrics import prometheus_exposition
from relayinfo.nip11 import NOSTR_JSON, relay_information, wants_relay_information
from relayinfo.readiness import deployment_ready


def relay_root(request: HttpRequest) -> HttpResponse:
    """NIP-11 for the host's community (`/info`, or `/` asked with its media type), else a page."""
    if request.method not in ("GET", "HEAD"):
        return json_error(405, "method_not_allowed", "GET the relay information document")
    community = request.community  # type: ignore[attr-defined]
    # Readiness is only consulted where it can change the answer (cached per process anyway).
    ready = community.artifacts_enabled and deployment_ready()
    if request.path == "/info" or wants_relay_information(request.headers.get("Accept")):
        document = relay_information(community=community, ready=ready)
        response = json_response(document, content_type=NOSTR_JSON)
    else:
        scheme = "wss" if public_scheme(request) == "https" else "ws"
        response = render(
            request,
            "relayinfo/home.html",
            {
                "community": community,
                "websocket_url": f"{scheme}://{public_netloc(request)}/",
                "incremental": ready,
                "version": settings.RELAY_VERSION,
                "software": settings.RELAY_SOFTWARE_URL,
            },
        )
    # The answer depends on Accept and on readiness, which changes: caches must ask again.
    patch_vary_headers(response, ["Accept"])
    patch_cache_control(response, no_cache=True)
    return response


def metrics(request: HttpRequest) -> HttpResponse:
    """Prometheus text exposition: readiness, sync epoch, fleet, round traffic, lags."""
    return HttpResponse(
        prometheus_exposition(), content_type="text/plain; version=0.0.4; charset=utf-8"
    )


def healthz(request: HttpRequest) -> HttpResponse:
    """The process is up and answering (no dependency is checked: that is /readyz)."""
    return json_response({"status": "ok"})


def readyz(request: HttpRequest) -> HttpResponse:
    """The database answers and every migration is applied."""
    try:
        executor = MigrationExecutor(connection)
        pending = executor.migration_plan(executor.loader.graph.leaf_nodes())
    except Exception as exc:  # any failure to reach or read the database is "not ready"
        return json_error(503, "not_ready", f"database unreachable: {type(exc).__name__}")
    if pending:
        names = ", ".join(f"{m.app_label}.{m.name}" for m, _ in pending[:5])
        return json_error(503, "not_ready", f"{len(pending)} migrations not applied: {names}")
    return json_response({"status": "ready"})
