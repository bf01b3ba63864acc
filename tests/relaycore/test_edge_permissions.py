"""`RelayAPIView` runs DRF's permission classes after authentication, as DRF's own `initial`
does: a relay view that names `permission_classes` is protected by them, never silently open."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from asgiref.sync import async_to_sync
from django.http import HttpResponse, HttpResponseBase
from django.test import RequestFactory
from rest_framework.permissions import BasePermission
from rest_framework.request import Request

from relaycore.edge.views import RelayAPIView
from tests.factories import make_community

pytestmark = pytest.mark.django_db(transaction=True)
HOST = "team.example"


class StaffOnly(BasePermission):
    message = "staff only"

    def has_permission(self, request: Request, view: Any) -> bool:
        return request.headers.get("X-Staff") == "yes"


class PublicDocumentForStaff(RelayAPIView):
    """A public (unauthenticated) relay view that still names a permission class."""

    authenticated = False
    # No authenticator: DRF answers a refused anonymous request 403 (with one, 401).
    authentication_classes = []
    http_method_names = ["get", "options"]
    permission_classes = [StaffOnly]

    async def serve(self, request: Request, parsed: Any) -> HttpResponseBase:
        return HttpResponse(b"served", content_type="text/plain")


def call(headers: dict[str, str] | None = None) -> HttpResponse:
    request = RequestFactory().get("/doc", headers={"Host": HOST, **(headers or {})})
    view = PublicDocumentForStaff.as_view()
    response = async_to_sync(view)(request)
    assert isinstance(response, HttpResponse)
    return response


def test_a_view_with_a_permission_class_refuses_what_it_does_not_permit() -> None:
    make_community(HOST)
    refused = call()
    assert refused.status_code == 403
    assert orjson.loads(refused.content)["message"] == "staff only"


def test_a_view_with_a_permission_class_serves_what_it_permits() -> None:
    make_community(HOST)
    served = call({"X-Staff": "yes"})
    assert served.status_code == 200
    assert served.content == b"served"
