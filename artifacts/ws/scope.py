"""The WebSocket handshake's client address, public host and relay URL.

The rules are relaycore.addressing's, the same HTTP requests follow, read from the ASGI scope.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings

from relaycore import addressing
from relaycore.addressing import RequestAddress

__all__ = ["client_address", "public_host", "public_relay_url"]


def client_address(scope: dict[str, Any]) -> str:
    """The client's IP: the peer, or the nearest untrusted X-Forwarded-For hop behind proxies."""
    return addressing.client_address(RequestAddress.of_scope(scope))


def public_host(scope: dict[str, Any]) -> str:
    """The host the client asked for, lowercase, without port: the community lookup key."""
    return addressing.public_host(RequestAddress.of_scope(scope))


def public_relay_url(scope: dict[str, Any]) -> str:
    """The relay URL a NIP-42 AUTH event must name: ws(s)://host[:port]/ as the client saw it."""
    if settings.RELAY_PUBLIC_URL:
        # nostr.nip42 maps http -> ws and https -> wss when it normalises both sides.
        return f"{settings.RELAY_PUBLIC_URL}/"
    address = RequestAddress.of_scope(scope)
    scheme = "wss" if addressing.public_secure(address) else "ws"
    return f"{scheme}://{addressing.public_netloc(address)}/"
