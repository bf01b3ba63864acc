"""Django's admin app, configured with the relay's admin site (relayinfo.admin_site)."""

from django.contrib.admin.apps import AdminConfig


class BuzzAdminConfig(AdminConfig):
    # Resolved lazily on first use of `admin.site`, so every app's admin.py registers on it.
    default_site = "relayinfo.admin_site.BuzzAdminSite"
