"""HTTP routes. The WebSocket at `/` is routed in buzzrelay/asgi.py."""

from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("", include("relayinfo.urls")),
    path("", include("artifacts.urls")),
]
