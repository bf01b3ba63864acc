"""ASGI middleware: every HTTP request's duration by endpoint and status, and the WebSocket
connections, as Prometheus metrics (relayinfo.metrics; summed over the workers at /metrics).

Outermost in `buzzrelay.asgi.build_application()`, so it times what a client waits for: static
files, the front door and Django alike, from the request's arrival to the last byte sent. The
endpoint label is one of a fixed set (the relay's routes, `/static/`, `/admin/`, `other`), so a
client cannot grow the label space with made-up paths.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from relayinfo.metrics import (
    WEBSOCKET_CONNECTIONS,
    WEBSOCKET_CONNECTIONS_OPENED,
    record_http_request,
)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

ROUTES = frozenset({"/", "/info", "/query", "/event", "/healthz", "/readyz", "/metrics",
                    "/openapi.json"})


def endpoint_label(path: str) -> str:
    if path in ROUTES:
        return path
    if path.startswith("/static/"):
        return "/static/"
    if path.startswith("/admin/"):
        return "/admin/"
    return "other"


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
