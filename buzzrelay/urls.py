"""HTTP routes. The WebSocket at `/` is routed in buzzrelay/asgi.py."""

from django.contrib import admin
from django.urls import include, path

from buzzrelay.app_page import app_page
from buzzrelay.openapi_views import APIDocsView, OpenAPIView

urlpatterns = [
    # Staff only, under the console's rules (second factor included; others are sent to the
    # admin's login page); before the admin's own routes.
    path("admin/api/", admin.site.admin_view(APIDocsView.as_view()), name="api-docs"),
    path("admin/", admin.site.urls),
    path("openapi.json", OpenAPIView.as_view(), name="openapi"),
    path("app/", app_page, name="app"),
    path("", include("relayinfo.urls")),
    path("", include("artifacts.urls")),
]

# Django's own error pages are the relay's JSON answers too (buzzrelay.error_views).
handler400 = "buzzrelay.error_views.bad_request"
handler403 = "buzzrelay.error_views.permission_denied"
handler404 = "buzzrelay.error_views.not_found"
handler500 = "buzzrelay.error_views.server_error"
