"""GET /openapi.json (the document `relaycore.edge.openapi` generates) and its staff page.

Apart from `relaycore.edge.openapi` because drf-spectacular's views read its settings when
imported, and the settings name that module's generator.
"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from drf_spectacular.utils import extend_schema
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView
from rest_framework.request import Request
from rest_framework.response import Response

from buzzrelay.openapi_document import openapi_document
from relaycore.edge.openapi import COMMON_ERRORS, Answer, RelayAutoSchema
from relaycore.edge.renderers import JSONBytesRenderer
from relaycore.http import public_netloc, public_scheme

__all__ = ["APIDocsView", "OpenAPIView"]


class OpenAPIView(SpectacularAPIView):
    """The OpenAPI document of the HTTP API, naming the host the client addressed as its
    server."""

    authentication_classes: list[Any] = []
    permission_classes: list[Any] = []
    renderer_classes = [JSONBytesRenderer]
    schema = RelayAutoSchema()

    @extend_schema(
        summary="This document",
        auth=[],
        responses={
            200: Answer("The OpenAPI document.", {"type": "object"}),
            **COMMON_ERRORS,
        },
    )
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        django_request: HttpRequest = request._request
        server = f"{public_scheme(django_request)}://{public_netloc(django_request)}"
        return Response(openapi_document(server_url=server))


class APIDocsView(SpectacularSwaggerView):
    """Swagger UI over /openapi.json for staff (routed behind `staff_member_required`), from
    drf-spectacular-sidecar's static files: no CDN."""

    authentication_classes: list[Any] = []
    permission_classes: list[Any] = []
    url_name = "openapi"
