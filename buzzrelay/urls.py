"""HTTP routes. The WebSocket at `/` is routed in buzzrelay/asgi.py."""

from django.contrib import admin
from django.urls import include, path

from artifacts.openapi import openapi_view

urlpatterns = [
    path("admin/", admin.site.urls),
    path("openapi.json", openapi_view, name="openapi"),
    path("", include("relayinfo.urls")),
    path("", include("artifacts.urls")),
]
