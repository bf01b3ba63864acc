"""The relay's Django admin site: Django's own, plus the staff deployment-readiness page and the
readiness verdict (with its failing items) on the index, signed in with a second factor
(relayinfo.admin_login; required with ADMIN_REQUIRE_2FA) under django-axes' limits.

Installed through `relayinfo.admin_apps.BuzzAdminConfig`, so `django.contrib.admin.site` is this
site and every app's admin.py registers on it as usual.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib import admin
from django.contrib.admin.views.decorators import staff_member_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, URLResolver, path, reverse
from django.utils.decorators import method_decorator
from django.views.decorators.cache import never_cache

from relayinfo.admin_login import StaffLoginForm, enrol_view
from relayinfo.nostr_login import nostr_login_view

ENROL_URL_NAME = "two_factor"


method_decorator_never_cache = method_decorator(never_cache)


class BuzzAdminSite(admin.AdminSite):
    site_header = "Buzz relay administration"
    site_title = "Buzz relay"
    index_title = "Relay administration"
    login_form = StaffLoginForm
    login_template = "admin/buzz_login.html"

    def has_permission(self, request: HttpRequest) -> bool:
        """Django's rule (active staff), and with ADMIN_REQUIRE_2FA a session verified by a
        second factor (django-otp's middleware sets `is_verified`)."""
        if not super().has_permission(request):
            return False
        return not settings.ADMIN_REQUIRE_2FA or bool(
            request.user.is_verified()  # type: ignore[union-attr]
        )

    @method_decorator_never_cache
    def login(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        """A staff member signed in with a password only, while ADMIN_REQUIRE_2FA asks for a
        second factor, is sent to enrol one (they have none: the form asks for the code of any
        they have)."""
        user = request.user
        if (
            request.method == "GET"
            and user.is_active and user.is_staff
            and not self.has_permission(request)
        ):
            return redirect(f"admin:{ENROL_URL_NAME}")
        context = {"require_2fa": settings.ADMIN_REQUIRE_2FA, **(extra_context or {})}
        return super().login(request, context)

    def get_urls(self) -> list[URLResolver | URLPattern]:
        from relayinfo.admin import readiness_view

        # admin_view: staff only (others are sent to the login page), never cached.
        page = path(
            "relayinfo/readiness/",
            self.admin_view(readiness_view),
            name="relayinfo_readiness",
        )
        # Active staff signed in with a password: not admin_view, which with ADMIN_REQUIRE_2FA
        # would send them back to the login page they came from.
        enrol = path(
            "two-factor/",
            never_cache(staff_member_required(enrol_view, login_url="admin:login")),
            name=ENROL_URL_NAME,
        )
        # Anyone (it signs in); POST under the CSRF middleware like the login form.
        nostr = path("nostr-login/", never_cache(nostr_login_view), name="nostr_login")
        return [page, enrol, nostr, *super().get_urls()]

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
