"""Who a request came from and which public address it named: one set of rules for HTTP
requests and WebSocket handshakes (PROTOCOL.md sections 1 and 3).

`RELAY_PUBLIC_URL` wins for the scheme and host; behind a proxy listed in
`RELAY_TRUSTED_PROXIES` the `X-Forwarded-For`, `-Host` and `-Proto` headers are believed;
otherwise the peer, the Host header and the connection's own scheme. `RequestAddress` is what
the rules read, taken from a Django request or an ASGI scope, so neither kind of request has
rules of its own.

Every host the relay reads (Host, a trusted X-Forwarded-Host) goes through `parse_host`, the one
parser: a request whose host it refuses (user info, a port that is no number in 1-65535, two
Host lines) is answered 400 on every path before any view (`host_error`, asked by
relaycore.connection_limits.HostCheck), and names no community anywhere.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from ipaddress import ip_address, ip_network
from typing import Any

from django.conf import settings
from django.http import HttpRequest
from django.http.request import split_domain_port

__all__ = [
    "HostError",
    "RequestAddress",
    "client_address",
    "host_error",
    "host_header_error",
    "host_without_port",
    "in_networks",
    "parse_host",
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
    host_lines: int = 1  # Host header lines (Django joins repeated ones with commas)

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
    def of_scope(cls, scope: Mapping[str, Any]) -> RequestAddress:
        headers: dict[bytes, str] = {}
        host_lines = 0
        for key, value in scope.get("headers", ()):
            # The first value of each header (latin-1, as ASGI servers deliver them).
            name = bytes(key).lower()
            host_lines += name == b"host"
            headers.setdefault(name, bytes(value).decode("latin-1"))
        client, server = scope.get("client"), scope.get("server")
        return cls(
            peer=str(client[0]) if client else "",
            secure=scope.get("scheme") in ("https", "wss"),
            host=headers.get(b"host", ""),
            server=f"{server[0]}:{server[1]}" if server else "",
            forwarded_for=headers.get(b"x-forwarded-for", ""),
            forwarded_host=headers.get(b"x-forwarded-host", ""),
            forwarded_proto=headers.get(b"x-forwarded-proto", ""),
            host_lines=host_lines,
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
    (validated CIDR strings, relaycore.config); an address that is no IP is in none."""
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


class HostError(ValueError):
    """A Host (or trusted X-Forwarded-Host) that names no host: the client's mistake (400)."""


@lru_cache(maxsize=1024)  # every request parses its Host, and a relay serves few hosts
def parse_host(value: str) -> tuple[str, int | None]:
    """(host, port) of a Host header value, lowercase: RFC 9110 section 7.2's
    `uri-host [":" port]` in Django's own host syntax (`split_domain_port`: a DNS name, IPv4, or
    a bracketed IPv6 literal) with a port of at most five digits in 1-65535.

    Raises HostError for anything else: user info (`host@evil`), a port that is no number or
    out of range, an empty port, a list of hosts (`a,b`: repeated Host lines as Django joins
    them), spaces.
    """
    domain, port = split_domain_port(value)
    if not domain or (port and (len(port) > 5 or not 0 < int(port) <= 65535)):
        raise HostError(f"the Host header is not a host[:port]: {value[:100]!r}")
    return domain, int(port) if port else None


def host_error(address: RequestAddress) -> str | None:
    """Why the request's host is refused (400), or None. RELAY_PUBLIC_URL does not excuse a bad
    Host: the header is the client's, and a refused one is refused everywhere alike."""
    if problem := host_header_error(address.host_lines, address.host):
        return problem
    if _from_trusted_proxy(address) and (forwarded := _first(address.forwarded_host)):
        try:
            parse_host(forwarded)
        except HostError as exc:
            return str(exc)
    return None


def host_header_error(lines: int, host: str) -> str | None:
    """Why `lines` Host header lines, the first `host`, are refused (400), or None."""
    if lines > 1:
        return "the request has more than one Host header"
    try:
        if host:
            parse_host(host)
    except HostError as exc:
        return str(exc)
    return None


def public_netloc(address: RequestAddress) -> str:
    """host[:port] as the client addressed the relay, lowercase ("" when nothing names one, or
    what names it is no host: `host_error`)."""
    if settings.RELAY_PUBLIC_URL:
        return str(settings.RELAY_PUBLIC_URL).split("://", 1)[1]
    if _from_trusted_proxy(address):
        forwarded = _first(address.forwarded_host)
        if forwarded:
            return _netloc(forwarded)
    if address.host_lines > 1:
        return ""
    return _netloc(address.host or address.server)


def _netloc(value: str) -> str:
    try:
        host, port = parse_host(value)
    except HostError:
        return ""
    return host if port is None else f"{host}:{port}"


def public_host(address: RequestAddress) -> str:
    """The host the client asked for, lowercase, without port: the community lookup key."""
    return host_without_port(public_netloc(address))


def host_without_port(netloc: str) -> str:
    """The host of a valid host[:port] (an IPv6 literal without its brackets); "" otherwise."""
    try:
        host, _ = parse_host(netloc)
    except HostError:
        return ""
    return host[1:-1] if host.startswith("[") else host
