"""Relay information and health endpoints."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.http import HttpRequest, HttpResponse, HttpResponseBase
from django.utils.cache import patch_cache_control, patch_vary_headers
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.renderers import TemplateHTMLRenderer
from rest_framework.request import Request
from rest_framework.response import Response

from artifacts.ws.dbcall import run_db
from buzzrelay.edge.openapi import (
    COMMON_ERRORS,
    JSON,
    Answer,
    RelayAutoSchema,
    error_answer,
    plain_view_schema,
    ref,
)
from buzzrelay.edge.renderers import NOSTR_JSON, Nip11Negotiation, NostrJSONRenderer
from buzzrelay.edge.views import RelayAPIView
from buzzrelay.http import json_error, json_response, public_netloc, public_scheme
from relayinfo.metrics import prometheus_exposition
from relayinfo.nip11 import relay_information
from relayinfo.readiness import cached_readiness, deployment_ready

_NIP11_OK = (
    "The NIP-11 document (on `/`, unless Accept names `application/nostr+json`: the relay's"
    " HTML page)."
)


@extend_schema(
    methods=["GET"],
    summary="Relay information document (NIP-11)",
    description=(
        "The NIP-11 document of the request host's community: `/info` always, `/` when"
        " `Accept` names `application/nostr+json` (q-values honoured; otherwise `/` answers"
        " an HTML page). `artifacts.incremental` is advertised only while the deployment is"
        " ready (PROTOCOL.md section 7) and the community has artifacts enabled. The"
        " WebSocket at `/` (NIP-01, NIP-42) is not described here."
    ),
    parameters=[
        OpenApiParameter(
            "Accept", str, OpenApiParameter.HEADER, required=False,
            enum=[NOSTR_JSON, f"{NOSTR_JSON}, {JSON}", "text/html", "*/*"],
        )
    ],
    # The 2xx media types listed are those of the route's renderers (`/info`: the document).
    responses={
        (200, NOSTR_JSON): Answer(_NIP11_OK, ref("RelayInformation"), media_type=NOSTR_JSON),
        (200, "text/html"): Answer(_NIP11_OK, {"type": "string"}, media_type="text/html"),
        405: error_answer("Only GET and HEAD.", "method_not_allowed"),
    },
)
class RelayInfoView(RelayAPIView):
    """NIP-11 for the host's community: on `/` when Accept names `application/nostr+json`
    (`Nip11Negotiation`), else a short page for people; always the document on `/info`."""

    authenticated = False
    authentication_classes: list[Any] = []
    http_method_names = ["get", "head", "options"]
    renderer_classes = [NostrJSONRenderer, TemplateHTMLRenderer]
    content_negotiation_class = Nip11Negotiation
    template_name = "relayinfo/home.html"
    schema = RelayAutoSchema()  # the OpenAPI operation (buzzrelay/edge/openapi.py)
    # `/info`: the document whatever Accept says.
    document_only = False

    def get_renderers(self) -> list[Any]:
        if self.document_only:
            return [NostrJSONRenderer()]
        return super().get_renderers()

    async def serve(self, request: Request, parsed: None) -> HttpResponseBase:
        community = request.community  # type: ignore[attr-defined]
        # Readiness only where it can change the answer (cached per process anyway).
        ready = community.artifacts_enabled and await _deployment_ready()
        if request.accepted_media_type == NOSTR_JSON:
            response = Response(relay_information(community=community, ready=ready))
        else:
            django_request = request._request
            scheme = "wss" if public_scheme(django_request) == "https" else "ws"
            response = Response({
                "community": community,
                "websocket_url": f"{scheme}://{public_netloc(django_request)}/",
                "incremental": ready,
                "version": settings.RELAY_VERSION,
                "software": settings.RELAY_SOFTWARE_URL,
            })
        # The answer depends on Accept and on readiness, which changes: caches must ask again.
        patch_vary_headers(response, ["Accept"])
        patch_cache_control(response, no_cache=True)
        return response


async def _deployment_ready() -> bool:
    cached = cached_readiness()
    return cached if cached is not None else await run_db(deployment_ready)


@plain_view_schema(
    summary="Prometheus metrics for operators",
    auth=[],
    responses={
        200: Answer(
            "Readiness, sync epoch, fleet, rounds, resets, lags.", {"type": "string"},
            media_type="text/plain",
        ),
        **COMMON_ERRORS,
    },
)
def metrics(request: HttpRequest) -> HttpResponse:
    """Prometheus text exposition: readiness, sync epoch, fleet, round traffic, lags."""
    return HttpResponse(
        prometheus_exposition(), content_type="text/plain; version=0.0.4; charset=utf-8"
    )


@plain_view_schema(
    summary="The process is up",
    auth=[],
    responses={
        200: Answer(
            "Up.",
            {"type": "object", "required": ["status"], "properties": {"status": {"const": "ok"}}},
        ),
    },
)
def healthz(request: HttpRequest) -> HttpResponse:
    """The process is up and answering (no dependency is checked: that is /readyz)."""
    return json_response({"status": "ok"})


@plain_view_schema(
    summary="The database answers and every migration is applied",
    auth=[],
    responses={
        200: Answer(
            "Ready.",
            {
                "type": "object",
                "required": ["status"],
                "properties": {"status": {"const": "ready"}},
            },
        ),
        503: error_answer("Not ready: the message says why.", "not_ready"),
    },
)
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
