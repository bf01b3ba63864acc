"""Relay information and health endpoints."""

from __future__ import annotations

import hmac
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

from relaycore import readiness_gate
from relaycore.addressing import in_networks
from relaycore.edge.openapi import (
    COMMON_ERRORS,
    JSON,
    Answer,
    RelayAutoSchema,
    error_answer,
    plain_view_schema,
    ref,
)
from relaycore.edge.renderers import NOSTR_JSON, Nip11Negotiation, NostrJSONRenderer
from relaycore.edge.views import RelayAPIView
from relaycore.http import (
    client_address,
    json_error,
    json_response,
    public_netloc,
    public_scheme,
)
from relayinfo.exposition import prometheus_exposition
from relayinfo.nip11 import relay_information

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
    schema = RelayAutoSchema()  # the OpenAPI operation (relaycore/edge/openapi.py)
    # `/info`: the document whatever Accept says.
    document_only = False

    def get_renderers(self) -> list[Any]:
        if self.document_only:
            return [NostrJSONRenderer()]
        return super().get_renderers()

    async def serve(self, request: Request, parsed: None) -> HttpResponseBase:
        community = request.community  # type: ignore[attr-defined]
        # Readiness only where it can change the answer (cached per process anyway).
        ready = community.artifacts_enabled and await readiness_gate.ready_on_loop()
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


@plain_view_schema(
    summary="Prometheus metrics for operators",
    auth=[],
    responses={
        200: Answer(
            "Prometheus text: HTTP, WebSocket, rounds, lags, process; readiness, fleet, epoch.",
            {"type": "string"}, media_type="text/plain",
        ),
        401: error_answer("METRICS_TOKEN is set and the bearer token is missing or wrong.",
                          "unauthorized"),
        403: error_answer("The client is outside METRICS_ALLOWED_NETWORKS (default: loopback).",
                          "forbidden"),
        **COMMON_ERRORS,
    },
)
def metrics(request: HttpRequest) -> HttpResponse:
    """Prometheus text exposition (relaycore.metrics), for scrapers allowed by `metrics_refusal`."""
    refusal = metrics_refusal(request)
    if refusal is not None:
        return refusal
    body, content_type = prometheus_exposition()
    return HttpResponse(body, content_type=content_type)


def metrics_refusal(request: HttpRequest) -> HttpResponse | None:
    """None when the request may read /metrics: it carries `Authorization: Bearer
    <METRICS_TOKEN>`, or comes from a network of METRICS_ALLOWED_NETWORKS, or (neither being
    configured) from loopback. The address is the client's, behind RELAY_TRUSTED_PROXIES."""
    token: str | None = settings.RELAY_METRICS_TOKEN
    networks: tuple[str, ...] = settings.RELAY_METRICS_NETWORKS
    if token is not None:
        scheme, _, given = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() == "bearer" and hmac.compare_digest(given.strip(), token):
            return None
    allowed = networks or (() if token is not None else LOOPBACK)
    if in_networks(client_address(request), allowed):
        return None
    if token is not None:
        return json_error(
            401, "unauthorized", "metrics need Authorization: Bearer <METRICS_TOKEN>",
            headers={"WWW-Authenticate": 'Bearer realm="metrics"'},
        )
    return json_error(403, "forbidden", "metrics answer only the networks configured in "
                      "METRICS_ALLOWED_NETWORKS (default: loopback) or METRICS_TOKEN")


LOOPBACK = ("127.0.0.0/8", "::1/128")


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
