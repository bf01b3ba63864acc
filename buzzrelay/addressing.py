"""Who a request came from and which public address it named: one set of rules for HTTP
requests and WebSocket handshakes (PROTOCOL.md sections 1 and 3).

`RELAY_PUBLIC_URL` wins for the scheme and host; behind a proxy listed in
`RELAY_TRUSTED_PROXIES` the `X-Forwarded-For`, `-Host` and `-Proto` headers are believed;
otherwise the peer, the Host header and the connection's own scheme. `RequestAddress` is what
the rules read, taken from a Django request or an ASGI scope, so neither kind of request has
rules of its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from ipaddress import ip_address, ip_network
from typing import Any

from django.conf import settings
from django.http import HttpRequest

__all__ = [
    "RequestAddress",
    "client_address",
    "host_without_port",
    "in_networks",
    "public_host",
    "public_netloc",
    "public_secure",
]


@dataclass(frozen=True, slots=True)
class RequestAddress:
    peer: str  # the connecting address ("" when unknown)
    secure: bool  # the connection's own scheme: https or wss
    host: str  # the Host header ("" when absent)
    server: str  # the server's own host[:port], for a request without a Host header
    forwarded_for: str
    forwarded_host: str
    forwarded_proto: str

    @classmethod
    def of_request(cls, request: HttpRequest) -> RequestAddress:
        meta = request.META
        return cls(
            peer=str(meta.get("REMOTE_ADDR", "")),
            secure=request.scheme == "https",
            host=str(meta.get("HTTP_HOST", "")),
            server=str(meta.get("SERVER_NAME", "")),
            forwarded_for=str(meta.get("HTTP_X_FORWARDED_FOR", "")),
            forwarded_host=str(meta.get("HTTP_X_FORWARDED_HOST", "")),
            forwarded_proto=str(meta.get("HTTP_X_FORWARDED_PROTO", "")),
        )

    @classmethod
    def of_scope(cls, scope: dict[str, Any]) -> RequestAddress:
        headers: dict[bytes, str] = {}
        for key, value in scope.get("headers", ()):
            # The first value of each header (latin-1, as ASGI servers deliver them).
            headers.setdefault(bytes(key).lower(), bytes(value).decode("latin-1"))
        client, server = scope.get("client"), scope.get("server")
        return cls(
            peer=str(client[0]) if client else "",
            secure=scope.get("scheme") in ("https", "wss"),
            host=headers.get(b"host", ""),
            server=f"{server[0]}:{server[1]}" if server else "",
            forwarded_for=headers.get(b"x-forwarded-for", ""),
            forwarded_host=headers.get(b"x-forwarded-host", ""),
            forwarded_proto=headers.get(b"x-forwarded-proto", ""),
        )


def _from_trusted_proxy(address: RequestAddress) -> bool:
    proxies = settings.RELAY_TRUSTED_PROXIES
    if not proxies or not address.peer:
        return False
    try:
        peer = ip_address(address.peer)
    except ValueError:
        return False
    return any(peer in ip_network(net) for net in proxies)


def _first(value: str) -> str:
    return value.split(",")[0].strip().lower()


def client_address(address: RequestAddress) -> str:
    """The client's IP: the peer, or the nearest untrusted X-Forwarded-For hop behind proxies."""
    peer = address.peer or "unknown"
    if not _from_trusted_proxy(address):
        return peer
    hops = [h.strip() for h in address.forwarded_for.split(",") if h.strip()]
    return hops[-1] if hops else peer


def in_networks(client: str, networks: tuple[str, ...]) -> bool:
    """Whether the client address `client` (client_address's answer) is in one of `networks`
    (validated CIDR strings, buzzrelay.config); an address that is no IP is in none."""
    try:
        parsed = ip_address(client)
    except ValueError:
        return False
    return any(parsed in ip_network(net) for net in networks)


def public_secure(address: RequestAddress) -> bool:
    """Whether the client reached the relay over TLS (https, wss)."""
    if settings.RELAY_PUBLIC_URL:
        return str(settings.RELAY_PUBLIC_URL).startswith("https://")
    if _from_trusted_proxy(address):
        forwarded = _first(address.forwarded_proto)
        if forwarded in ("https", "wss"):
            return True
        if forwarded in ("http", "ws"):
            return False
    return address.secure


def public_netloc(address: RequestAddress) -> str:
    """host[:port] as the client addressed the relay, lowercase ("" when nothing names one)."""
    if settings.RELAY_PUBLIC_URL:
        return str(settings.RELAY_PUBLIC_URL).split("://", 1)[1]
    if _from_trusted_proxy(address):
        forwarded = _first(address.forwarded_host)
        if forwarded:
            return forwarded
    return (address.host or address.server).lower()


def public_host(address: RequestAddress) -> str:
    """The host the client asked for, lowercase, without port: the community lookup key."""
    return host_without_port(public_netloc(address))


def host_without_port(netloc: str) -> str:
    netloc = netloc.lower()
    if netloc.startswith("["):  # IPv6 literal: [::1]:8000
        return netloc[1:].split("]", 1)[0]
    return netloc.split(":", 1)[0]
