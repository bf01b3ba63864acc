"""The WebSocket handshake's public host and relay URL, by the same rules as HTTP.

buzzrelay.http reads these from a Django request; a WebSocket has only its ASGI scope, so the
rules are repeated here for the scope: RELAY_PUBLIC_URL wins; behind a trusted proxy the
X-Forwarded-Host/-Proto headers are believed; otherwise the Host header and the scope's scheme.
"""

from __future__ import annotations

from ipaddress import ip_address, ip_network
from typing import Any

from django.conf import settings

from buzzrelay.http import host_without_port

__all__ = ["client_address", "header", "public_host", "public_http_url", "public_relay_url"]


def header(scope: dict[str, Any], name: str) -> str | None:
    """The first value of a request header (latin-1, as ASGI servers deliver them)."""
    wanted = name.lower().encode("latin-1")
    for key, value in scope.get("headers", ()):
        if key.lower() == wanted:
            return bytes(value).decode("latin-1")
    return None


def _from_trusted_proxy(scope: dict[str, Any]) -> bool:
    proxies = settings.RELAY_TRUSTED_PROXIES
    client = scope.get("client")
    if not proxies or not client:
        return False
    try:
        peer = ip_address(client[0])
    except ValueError:
        return False
    return any(peer in ip_network(net) for net in proxies)


def _forwarded(scope: dict[str, Any], name: str) -> str | None:
    if not _from_trusted_proxy(scope):
        return None
    value = (header(scope, name) or "").split(",")[0].strip().lower()
    return value or None


def _public_netloc(scope: dict[str, Any]) -> str:
    if settings.RELAY_PUBLIC_URL:
        return str(settings.RELAY_PUBLIC_URL).split("://", 1)[1]
    forwarded = _forwarded(scope, "x-forwarded-host")
    if forwarded:
        return forwarded
    host = header(scope, "host")
    if host:
        return host.lower()
    server = scope.get("server")
    return f"{server[0]}:{server[1]}" if server else ""


def public_host(scope: dict[str, Any]) -> str:
    """The host the client asked for, lowercase, without port: the community lookup key."""
    return host_without_port(_public_netloc(scope))


def public_relay_url(scope: dict[str, Any]) -> str:
    """The relay URL a NIP-42 AUTH event must name: ws(s)://host[:port]/ as the client saw it."""
    if settings.RELAY_PUBLIC_URL:
        # nostr.nip42 maps http -> ws and https -> wss when it normalises both sides.
        return f"{settings.RELAY_PUBLIC_URL}/"
    scheme = "wss" if scope.get("scheme") == "wss" else "ws"
    forwarded = _forwarded(scope, "x-forwarded-proto")
    if forwarded in ("https", "wss"):
        scheme = "wss"
    elif forwarded in ("http", "ws"):
        scheme = "ws"
    return f"{scheme}://{_public_netloc(scope)}/"


def public_http_url(scope: dict[str, Any], path: str) -> str | None:
    """The absolute URL of an HTTP request to `path` as NIP-98's `u` tag must name it (the rules
    of buzzrelay.http.absolute_url), or None when the request names no host (Django would fall
    back to the server's name, which this scope-only reading does not guess)."""
    if settings.RELAY_PUBLIC_URL:
        return f"{settings.RELAY_PUBLIC_URL}{path}"
    scheme = str(scope.get("scheme") or "http")
    forwarded_proto = _forwarded(scope, "x-forwarded-proto")
    if forwarded_proto in ("http", "https"):
        scheme = forwarded_proto
    netloc = _forwarded(scope, "x-forwarded-host") or (header(scope, "host") or "").lower()
    return f"{scheme}://{netloc}{path}" if netloc else None


def client_address(scope: dict[str, Any]) -> str:
    """The client's IP: the peer, or the nearest untrusted X-Forwarded-For hop behind proxies."""
    client = scope.get("client")
    peer = str(client[0]) if client else "unknown"
    if not _from_trusted_proxy(scope):
        return peer
    hops = [h.strip() for h in (header(scope, "x-forwarded-for") or "").split(",") if h.strip()]
    return hops[-1] if hops else peer
