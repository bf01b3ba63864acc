"""The front door: the relay's DRF views served on the event loop, in front of Django's handler.

Measured on this 2-core machine (one uvicorn worker, docs/performance.md): a trivial view
answered 430-510 requests/s through Django's ASGI handler, against 4,400-4,900/s when the same
DRF view is called directly. Under ASGI Django runs each synchronous middleware hook on a thread
(`MiddlewareMixin.__acall__`: a hop per hook, 14 for this project's chain) and the request
signals' receivers on another; the relay's API needs none of them (no sessions, cookies or CSRF:
NIP-98 signs each request). So for the paths Django's URL configuration routes to a
`RelayAPIView`, this door builds Django's own `ASGIRequest`, awaits that very view, adds the
headers of the response middleware those views would otherwise pass through (Django's
`SecurityMiddleware` and `XFrameOptionsMiddleware` objects themselves, and the relay's CORS), and
sends the answer with Django's own `send_response`. Every other path is Django's, untouched.
Nothing here decides anything about a request: the route table, the pipeline and the headers
are each defined once, elsewhere.
"""

from __future__ import annotations

import io
from collections.abc import Awaitable, Callable
from typing import Any

from django.conf import settings
from django.core.handlers.asgi import ASGIHandler, ASGIRequest
from django.http import HttpResponse, HttpResponseBase
from django.middleware.clickjacking import XFrameOptionsMiddleware
from django.middleware.security import SecurityMiddleware
from django.urls import Resolver404, resolve

from relaycore.asgi_types import Receive
from relaycore.body_limit import BodyTooLarge, ClientDisconnected, read_body
from relaycore.edge.views import RelayAPIView
from relaycore.metrics import record_front_door_request
from relaycore.middleware import add_cors_headers

__all__ = ["FrontDoor"]



def _unused(request: Any) -> HttpResponse:  # pragma: no cover - only process_response is used
    raise AssertionError("front door middleware is used for its response headers only")


class FrontDoor:
    """ASGI: `RelayAPIView` routes on the event loop; the rest to `django_app`."""

    def __init__(self, django_app: ASGIHandler) -> None:
        self.django_app = django_app
        # The response hooks of settings.MIDDLEWARE that set headers on every answer.
        self._header_middleware = (SecurityMiddleware(_unused), XFrameOptionsMiddleware(_unused))
        self._views: dict[str, Callable[..., Awaitable[HttpResponseBase]] | None] = {}

    # Django's ASGIHandler types the scope as a dict and `send` as taking any Mapping.
    async def __call__(self, scope: dict[str, Any], receive: Receive, send: Any) -> None:
        view = self._view(scope) if scope["type"] == "http" else None
        if view is None:
            await self.django_app(scope, receive, send)
            return
        try:
            # Already read and bounded by `relaycore.body_limit`, which hands it over whole.
            body = await read_body(receive, settings.RELAY_MAX_BODY_BYTES)
        except (ClientDisconnected, BodyTooLarge):
            return  # the client left (the limit in front already answered an oversized body)
        record_front_door_request()
        request = ASGIRequest(scope, io.BytesIO(body))
        request.served_by_front_door = True  # type: ignore[attr-defined]  # views.on_server_loop
        response: Any = await view(request)
        if hasattr(response, "render") and not getattr(response, "is_rendered", True):
            response.render()
        for middleware in self._header_middleware:
            response = middleware.process_response(request, response)
        add_cors_headers(response)
        if not response.streaming and not response.has_header("Content-Length"):
            # What CommonMiddleware adds: the answer is whole, so no chunked encoding.
            response["Content-Length"] = str(len(response.content))
        if response.streaming:  # not a relay view's answer today; Django's way, whole
            await self.django_app.send_response(response, send)
            response.close()
        else:
            await _send_whole(response, send)

    def _view(self, scope: dict[str, Any]) -> Callable[..., Awaitable[HttpResponseBase]] | None:
        path: str = scope["path"]
        if path not in self._views:
            try:
                match = resolve(path)
            except Resolver404:
                found = None
            else:
                view_class = getattr(match.func, "view_class", None)
                plain = not match.args and not match.kwargs
                is_relay = isinstance(view_class, type) and issubclass(view_class, RelayAPIView)
                found = match.func if is_relay and plain else None
            if len(self._views) < 1024:  # only paths that resolve are worth remembering
                self._views[path] = found
            return found
        return self._views[path]



async def _send_whole(response: HttpResponseBase, send: Any) -> None:
    """A whole response over ASGI: what `ASGIHandler.send_response` sends for one (the headers
    as set, the cookies, the body), in one body message and without `response.close()`.

    Hand-written because measured (bench/load.py A/B, docs/performance.md): Django's send, its
    chunking generator and `close()` cost about a tenth of a round's CPU. `close()` would fire
    `request_finished`, whose receivers tend Django's database connections and caches of the
    current thread: the front door's requests open none on the loop's thread (their database
    work runs on the asyncio pool or on `run_db`'s threads, which tend their own), and its
    responses hold no resources to close (bytes, never files or iterators).
    """
    headers = [(name.encode("ascii"), value.encode("latin-1")) for name, value in response.items()]
    headers.extend(
        (b"Set-Cookie", cookie.OutputString().encode("ascii"))
        for cookie in response.cookies.values()
    )
    await send({"type": "http.response.start", "status": response.status_code, "headers": headers})
    await send({"type": "http.response.body", "body": response.content})  # type: ignore[attr-defined]
