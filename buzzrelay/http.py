"""HTTP helpers every endpoint shares: JSON answers, CORS, the public host and client address."""

from __future__ import annotations

from ipaddress import ip_address, ip_network
from typing import Any

import orjson
from django.conf import settings
from django.http import HttpRequest, HttpResponse

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


def unknown_community_response() -> HttpResponse:
    return json_error(404, "unknown_community", "no community is served at this host")


def _from_trusted_proxy(request: HttpRequest) -> bool:
    proxies = settings.RELAY_TRUSTED_PROXIES
    if not proxies:
        return False
    try:
        peer = ip_address(request.META.get("REMOTE_ADDR", ""))
    except ValueError:
        return False
    return any(peer in ip_network(net) for net in proxies)


def client_address(request: HttpRequest) -> str:
    """The client's IP: the peer, or the nearest untrusted X-Forwarded-For hop behind proxies."""
    peer = request.META.get("REMOTE_ADDR", "") or "unknown"
    if not _from_trusted_proxy(request):
        return peer
    hops = [h.strip() for h in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",") if h.strip()]
    return hops[-1] if hops else peer


def request_host(request: HttpRequest) -> str:
    """The host the client asked for, lowercase, without port (the community lookup key)."""
    return host_without_port(public_netloc(request))


def host_without_port(netloc: str) -> str:
    netloc = netloc.lower()
    if netloc.startswith("["):  # IPv6 literal: [::1]:8000
        return netloc[1:].split("]", 1)[0]
    return netloc.split(":", 1)[0]


def public_scheme(request: HttpRequest) -> str:
    if settings.RELAY_PUBLIC_URL:
        return settings.RELAY_PUBLIC_URL.split("://", 1)[0]
    if _from_trusted_proxy(request):
        forwarded = request.META.get("HTTP_X_FORWARDED_PROTO", "").split(",")[0].strip().lower()
        if forwarded in ("http", "https"):
            return forwarded
    return request.scheme or "http"


def public_netloc(request: HttpRequest) -> str:
    """host[:port] as the client addressed the relay (RELAY_PUBLIC_URL wins when set)."""
    if settings.RELAY_PUBLIC_URL:
        return settings.RELAY_PUBLIC_URL.split("://", 1)[1]
    if _from_trusted_proxy(request):
        forwarded = request.META.get("HTTP_X_FORWARDED_HOST", "").split(",")[0].strip()
        if forwarded:
            return forwarded.lower()
    return str(request.META.get("HTTP_HOST") or request.META.get("SERVER_NAME", "")).lower()


def absolute_url(request: HttpRequest) -> str:
    """The absolute URL of the request as NIP-98's `u` tag must name it."""
    return f"{public_scheme(request)}://{public_netloc(request)}{request.get_full_path()}"
