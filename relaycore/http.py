"""HTTP helpers every endpoint shares: JSON answers, CORS, and the public address rules of
relaycore.addressing read from a Django request."""

from __future__ import annotations

from typing import Any

import orjson
from django.http import HttpRequest, HttpResponse

from relaycore import addressing
from relaycore.addressing import RequestAddress

CORS_HEADERS = {
    "Access-Control-Allow-Origin": "*",
    "Access-Control-Allow-Headers": "Authorization, Content-Type, Accept",
    "Access-Control-Allow-Methods": "GET, POST, OPTIONS",
    "Access-Control-Expose-Headers": "WWW-Authenticate, Retry-After",
    "Access-Control-Max-Age": "86400",
}


def json_response(
    payload: Any, *, status: int = 200, content_type: str = "application/json"
) -> HttpResponse:
    return HttpResponse(orjson.dumps(payload), status=status, content_type=content_type)


def json_error(
    status: int, code: str, message: str | None = None, *, headers: dict[str, str] | None = None
) -> HttpResponse:
    body: dict[str, str] = {"error": code}
    if message:
        body["message"] = message
    response = json_response(body, status=status)
    for name, value in (headers or {}).items():
        response[name] = value
    return response


def client_address(request: HttpRequest) -> str:
    """The client's IP (relaycore.addressing)."""
    return addressing.client_address(_address(request))


def request_host(request: HttpRequest) -> str:
    """The host the client asked for, lowercase, without port (the community lookup key)."""
    return addressing.public_host(_address(request))


def public_scheme(request: HttpRequest) -> str:
    return "https" if addressing.public_secure(_address(request)) else "http"


# settings.SECURE_PROXY_SSL_HEADER's key: Django reads `request.is_secure()` (HSTS, the CSRF
# Referer check, secure redirects) from it and believes it from anyone.
SCHEME_META_KEY = "HTTP_X_BUZZ_PUBLIC_SCHEME"


def settle_public_scheme(request: HttpRequest) -> None:
    """Sets the header `is_secure()` reads from the relay's own rule (X-Forwarded-Proto only from
    RELAY_TRUSTED_PROXIES, RELAY_PUBLIC_URL over both), after dropping whatever a client sent
    under that name. Dropped first: the connection's own scheme, one of the rule's inputs, is
    read through request.scheme, which would believe it. Every request passes here once: Django's
    through ConsoleMiddleware, the front door's before its view."""
    request.META.pop(SCHEME_META_KEY, None)
    request.META[SCHEME_META_KEY] = public_scheme(request)


def public_netloc(request: HttpRequest) -> str:
    """host[:port] as the client addressed the relay (RELAY_PUBLIC_URL wins when set)."""
    return addressing.public_netloc(_address(request))


def absolute_url(request: HttpRequest) -> str:
    """The absolute URL of the request as NIP-98's `u` tag must name it."""
    address = _address(request)
    scheme = "https" if addressing.public_secure(address) else "http"
    return f"{scheme}://{addressing.public_netloc(address)}{request.get_full_path()}"


def _address(request: HttpRequest) -> RequestAddress:
    """The request's address facts, read from its headers once: a relay view reads three rules
    of them per request (host, client address, URL)."""
    address: RequestAddress | None = getattr(request, "_relay_address", None)
    if address is None:
        address = RequestAddress.of_request(request)
        request._relay_address = address  # type: ignore[attr-defined]
    return address
