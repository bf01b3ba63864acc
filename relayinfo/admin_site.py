"""The relay's Django admin site: Django's own, plus the staff deployment-readiness page and the
readiness verdict (with its failing items) on the index.

Installed through `relayinfo.admin_apps.BuzzAdminConfig`, so `django.contrib.admin.site` is this
site and every app's admin.py registers on it as usual.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest
from django.template.response import TemplateResponse
from django.urls import URLPattern, URLResolver, path, reverse


class BuzzAdminSite(admin.AdminSite):
    site_header = "Buzz relay administration"
    site_title = "Buzz relay"
    index_title = "Relay administration"

    def get_urls(self) -> list[URLResolver | URLPattern]:
        from relayinfo.admin import readiness_view

        # admin_view: staff only (others are sent to the login page), never cached.
        page = path(
            "relayinfo/readiness/",
            self.admin_view(readiness_view),
            name="relayinfo_readiness",
        )
        return [page, *super().get_urls()]

    def index(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> TemplateResponse:
        """Django's index, headed by the verdict every surface shows (the serving process's,
        cached for a few seconds like NIP-11's: the index is visited often)."""
        from relayinfo.readiness import evaluate_readiness

        context = {"readiness": evaluate_readiness(), **(extra_context or {})}
        return super().index(request, extra_context=context)

    def get_app_list(self, request: HttpRequest, app_label: str | None = None) -> list[Any]:
        """Django's list, with the readiness page first under "Relay deployment"."""
        apps = super().get_app_list(request, app_label)
        if app_label not in (None, "relayinfo"):
            return apps
        entry = {
            "name": "Deployment readiness",
            "object_name": "Readiness",
            "perms": {"view": True},
            "admin_url": reverse("admin:relayinfo_readiness", current_app=self.name),
            "add_url": None,
            "view_only": True,
        }
        for app in apps:
            if app["app_label"] == "relayinfo":
                app["models"].insert(0, entry)
                return apps
        apps.append(
            {
                "name": "Relay deployment",
                "app_label": "relayinfo",
                "app_url": entry["admin_url"],
                "has_module_perms": True,
                "models": [entry],
            }
        )
        return apps
