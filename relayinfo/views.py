"""Relay information and health endpoints."""

from __future__ import annotations

from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.http import HttpRequest, HttpResponse

from buzzrelay.http import json_error, json_response


def relay_root(request: HttpRequest) -> HttpResponse:
    # Replaced by the NIP-11 document (readiness issue); until then a minimal JSON answer.
    return json_response({"name": "Buzz relay"}, content_type="application/nostr+json")


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
