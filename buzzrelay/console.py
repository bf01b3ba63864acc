"""The staff console's exposure, decided before any of Django's middleware runs.

- The public scheme: Django reads `request.is_secure()` (HSTS, the CSRF Referer check, secure
  redirects) from SECURE_PROXY_SSL_HEADER, a header it believes from anyone. The relay believes
  X-Forwarded-Proto only from RELAY_TRUSTED_PROXIES, and RELAY_PUBLIC_URL wins over both
  (relaycore.addressing.public_secure), so this middleware sets that header from the relay's rule
  on every request, after dropping whatever a client sent under the same name.
- ADMIN_ALLOWED_NETWORKS: outside them `/admin/` answers the relay's ordinary 404, as if there
  were no console, before a session is read or a login form rendered.

Cost: about 20 us a request (RequestFactory, this 2-core machine); the address facts it reads
are cached on the request, where the relay's own views read them again for nothing. The API's
hot paths (the front door) do not pass through Django's middleware at all.
"""

from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.utils.deprecation import MiddlewareMixin

from buzzrelay.error_views import not_found
from relaycore.addressing import in_networks
from relaycore.http import client_address, settle_public_scheme

CONSOLE_PREFIX = "/admin/"
ANY_ADDRESS = ("0.0.0.0/0", "::/0")


def client_ip(request: HttpRequest) -> str | None:
    """AXES_CLIENT_IP_CALLABLE: the relay's client address (relaycore.http.client_address, the
    one rule), or None when there is none to count (axes stores it in an inet column)."""
    address = client_address(request)
    return address if in_networks(address, ANY_ADDRESS) else None


class ConsoleMiddleware(MiddlewareMixin):
    def process_request(self, request: HttpRequest) -> HttpResponse | None:
        settle_public_scheme(request)
        networks: tuple[str, ...] = settings.ADMIN_ALLOWED_NETWORKS
        if (
            networks
            and request.path_info.startswith(CONSOLE_PREFIX)
            and not in_networks(client_address(request), networks)
        ):
            return not_found(request, None)
        return None
