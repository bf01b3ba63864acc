"""The WebSocket application buzzrelay/asgi.py mounts at `/` (PROTOCOL.md section 8).

No origin validation and no session or cookie middleware: Nostr clients send any Origin or none
and authenticate with NIP-42 inside the connection. The community comes from the Host header (or
the trusted forwarded host), as for HTTP; an unknown host has its upgrade refused.
"""

from __future__ import annotations

from artifacts.ws.consumer import SyncConsumer

websocket_application = SyncConsumer.as_asgi()
