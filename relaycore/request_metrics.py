"""ASGI middleware: every HTTP request's duration by endpoint and status, and the WebSocket
connections, as Prometheus metrics (relaycore.metrics; summed over the workers at /metrics).

Outermost in `buzzrelay.asgi.build_application()`, so it times what a client waits for: static
files, the front door and Django alike, from the request's arrival to the last byte sent. The
endpoint label is one of a fixed set (the relay's route names, `static`, `admin`, `other`), so a
client cannot grow the label space with made-up paths.
"""

from __future__ import annotations

import time
from typing import Any

from relaycore.asgi_types import ASGIApp, Message, Receive, Scope, Send
from relaycore.metrics import (
    WEBSOCKET_CONNECTIONS,
    WEBSOCKET_CONNECTIONS_OPENED,
    record_http_request,
)

# Paths outside the URL map: WhiteNoise's static files, answered before Django (their own label
# however many files there are).
STATIC_PREFIX = "/static/"
ADMIN_PREFIX = "/admin/"


def route_names() -> dict[str, str]:
    """Every fixed path of the relay's URL map (buzzrelay/urls.py) -> its route name, e.g.
    "/query" -> "post-query". The Django admin's own pages are left out (they are all `admin`),
    and so are routes with converters or without a name (`other`)."""
    from django.urls import URLPattern, URLResolver, get_resolver

    names: dict[str, str] = {}

    def walk(patterns: list[Any], prefix: str) -> None:
        for pattern in patterns:
            route = str(pattern.pattern)
            if "<" in route or "(" in route:
                continue
            if isinstance(pattern, URLResolver):
                if pattern.namespace == "admin":
                    continue
                walk(pattern.url_patterns, prefix + route)
            elif isinstance(pattern, URLPattern) and pattern.name:
                names.setdefault("/" + prefix + route, pattern.name)

    walk(get_resolver().url_patterns, "")
    return names


class EndpointLabels:
    """The endpoint label of a request path: its route name, `static`, `admin` (the Django
    admin's pages: their URLs carry object ids) or `other` (every unknown path, so a client
    cannot grow the label space with made-up paths). The route map is read once."""

    def __init__(self) -> None:
        self._routes: dict[str, str] | None = None

    def __call__(self, path: str) -> str:
        routes = self._routes
        if routes is None:
            routes = self._routes = route_names()
        name = routes.get(path)
        if name is not None:
            return name
        if path.startswith(STATIC_PREFIX):
            return "static"
        if path.startswith(ADMIN_PREFIX):
            return "admin"
        return "other"


endpoint_label = EndpointLabels()


class RequestMetrics:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket":
            WEBSOCKET_CONNECTIONS_OPENED.inc()
            WEBSOCKET_CONNECTIONS.inc()
            try:
                await self.app(scope, receive, send)
            finally:
                WEBSOCKET_CONNECTIONS.dec()
            return
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 0
        recorded = False

        async def timed_send(message: Message) -> None:
            nonlocal status, recorded
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)
            if message["type"] == "http.response.body" and not message.get("more_body"):
                recorded = True
                record_http_request(endpoint=endpoint_label(scope["path"]), status=status,
                                    seconds=time.perf_counter() - started)

        try:
            await self.app(scope, receive, timed_send)
        finally:
            if not recorded:
                # The application failed before answering (the server sends a 500), or the
                # client went away mid-answer (the status it was sent, if any).
                record_http_request(endpoint=endpoint_label(scope["path"]), status=status or 500,
                                    seconds=time.perf_counter() - started)
