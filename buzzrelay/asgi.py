"""ASGI entry: HTTP to Django (NIP-11 on `/` included), the WebSocket at `/` to the relay consumer.

`build_application()` is the one factory of the relay's application, and `application` the one
it built: `buzz-admin serve` runs it (buzzrelay/server.py), and through serve's code so do the
quickstart and the test suite's relay servers. Only their environments differ.

Nostr clients send any Origin or none, and authenticate with NIP-42, never cookies: so no
origin validation and no session middleware on the WebSocket.
"""

from __future__ import annotations

import os
import sys
from typing import Any

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "buzzrelay.settings")

from relaycore.config import ConfigError, load_config

try:
    load_config()
except ConfigError as exc:
    sys.stderr.write(f"configuration error: {exc}\n")
    sys.exit(2)

from django.core.asgi import get_asgi_application

django_application = get_asgi_application()

from channels.routing import ProtocolTypeRouter  # noqa: E402

from artifacts.ws.publish import publishing_finished_at_shutdown  # noqa: E402
from artifacts.ws.routing import websocket_application  # noqa: E402
from buzzrelay.static_files import StaticFiles  # noqa: E402
from relaycore.body_limit import RequestBodyLimit  # noqa: E402
from relaycore.connection_limits import HostCheck  # noqa: E402
from relaycore.edge.front_door import FrontDoor  # noqa: E402
from relaycore.request_metrics import RequestMetrics  # noqa: E402
from relayinfo.fleet import fleet_lifecycle  # noqa: E402


def relay_http(django_app: Any = django_application) -> Any:
    """The relay's HTTP stack around a Django application: every body read within its limit
    first; then the relay's DRF views (/query, /event, NIP-11) on the event loop through the
    front door; everything else is Django's."""
    from django.conf import settings

    return RequestBodyLimit(FrontDoor(django_app) if settings.RELAY_FRONT_DOOR else django_app)


def build_application() -> Any:
    """The relay's ASGI application.

    Every request and handshake first has its Host checked (`HostCheck`: 400 for a Host that
    is no host[:port], on every path). HTTP: the staff pages' static files first (WhiteNoise's
    index, buzzrelay.static_files), then
    the relay's HTTP stack (`relay_http`); the WebSocket at `/` to the sync consumer. Around
    both, `RequestMetrics` times every request and counts the WebSockets (Prometheus), and
    `fleet_lifecycle` registers the process in the fleet registry (readiness item 4) when
    the server starts it (ASGI lifespan) and deregisters it on shutdown, once the live
    publisher of the server loop has sent what the last writes committed on it announced.
    """
    return publishing_finished_at_shutdown(fleet_lifecycle(
        RequestMetrics(
            HostCheck(ProtocolTypeRouter({
                "http": StaticFiles(relay_http()),
                "websocket": websocket_application,
            }))
        )
    ))


application = build_application()
