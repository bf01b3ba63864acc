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
from django.core.signals import setting_changed
from django.http import HttpResponse, HttpResponseBase
from django.middleware.clickjacking import XFrameOptionsMiddleware
from django.middleware.security import SecurityMiddleware
from django.urls import Resolver404, resolve

from relaycore.asgi_types import Receive
from relaycore.body_limit import BodyTooLarge, ClientDisconnected, read_body
from relaycore.edge.views import RelayAPIView
from relaycore.http import settle_public_scheme
from relaycore.metrics import record_front_door_request
from relaycore.middleware import add_cors_headers

__all__ = ["FrontDoor"]


def _unused(request: Any) -> HttpResponse:  # pragma: no cover - only process_response is used
    raise AssertionError("front door middleware is used for its response headers only")


class _Probe:
    """What the header middleware reads of a request: whether it came over https (HSTS)."""

    def __init__(self, secure: bool) -> None:
        self._secure = secure

    def is_secure(self) -> bool:
        return self._secure


# A header as sent: (lowercase name, (name, value) encoded for ASGI).
_Encoded = tuple[str, tuple[bytes, bytes]]


class FrontDoor:
    """ASGI: `RelayAPIView` routes on the event loop; the rest to `django_app`."""

    def __init__(self, django_app: ASGIHandler) -> None:
        self.django_app = django_app
        # The response hooks of settings.MIDDLEWARE that set headers on every answer.
        self._header_middleware = (SecurityMiddleware(_unused), XFrameOptionsMiddleware(_unused))
        self._views: dict[str, Callable[..., Awaitable[HttpResponseBase]] | None] = {}
        # What those hooks and the CORS rule add to an answer, encoded, for a plain and for an
        # https request (the same tuple when they agree: HSTS off).
        self._fixed: tuple[tuple[_Encoded, ...], tuple[_Encoded, ...]] | None = None
        setting_changed.connect(self._settings_changed, weak=True)

    def _settings_changed(self, **kwargs: Any) -> None:
        self._fixed = None  # X_FRAME_OPTIONS is read per answer: learn the headers again

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
        # Django's middleware, which this path skips, would have: HSTS and the views' NIP-98 `u`
        # read the scheme, and a client's own X-Buzz-Public-Scheme must not decide it.
        settle_public_scheme(request)
        request.served_by_front_door = True  # type: ignore[attr-defined]  # views.on_server_loop
        request.relay_body = body  # type: ignore[attr-defined]  # parsers.request_body
        response: Any = await view(request)
        if hasattr(response, "render") and not getattr(response, "is_rendered", True):
            response.render()
        if response.streaming or getattr(response, "xframe_options_exempt", False):
            # Not a relay view's answer today: through the hooks themselves, Django's way.
            await self._send_through_middleware(request, response, send)
            return
        await _send_whole(response, self._fixed_headers(request), send)

    def _fixed_headers(self, request: ASGIRequest) -> tuple[_Encoded, ...]:
        """The headers the response middleware and `add_cors_headers` add to an answer that
        has none of them, learned once by running those very hooks on an empty answer (so
        their policy stays defined in one place) and encoded once. Each is set only where the
        answer has no header of that name (Django's hooks and the CORS rule alike), so a
        request only checks its own answer's few names against them (`_send_whole`)."""
        fixed = self._fixed
        if fixed is None:
            plain, secure = (self._learn(secure) for secure in (False, True))
            fixed = self._fixed = (plain, plain if secure == plain else secure)
        plain, secure = fixed
        # Asked only where the answer depends on it (HSTS on).
        return secure if secure is not plain and request.is_secure() else plain

    def _learn(self, secure: bool) -> tuple[_Encoded, ...]:
        probe = HttpResponse()
        before = set(probe.headers)
        request = _Probe(secure)
        for middleware in self._header_middleware:
            probe = middleware.process_response(request, probe)  # type: ignore[arg-type]
        add_cors_headers(probe)
        return tuple(
            (name.lower(), (name.encode("ascii"), value.encode("latin-1")))
            for name, value in probe.items() if name not in before
        )

    async def _send_through_middleware(
        self, request: ASGIRequest, response: Any, send: Any
    ) -> None:
        for middleware in self._header_middleware:
            response = middleware.process_response(request, response)
        add_cors_headers(response)
        if not response.streaming:
            if not response.has_header("Content-Length"):
                response["Content-Length"] = str(len(response.content))
            await _send_whole(response, (), send)
            return
        await self.django_app.send_response(response, send)
        response.close()

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


async def _send_whole(
    response: HttpResponseBase, fixed: tuple[_Encoded, ...], send: Any
) -> None:
    """A whole response over ASGI: what `ASGIHandler.send_response` sends for one (the headers
    as set, then each of `fixed` the answer has no header of that name for, `Content-Length`,
    the cookies, the body), in one body message and without `response.close()`.

    Hand-written because measured (bench/load.py A/B, docs/performance.md): Django's send, its
    chunking generator and `close()` cost about a tenth of a round's CPU. `close()` would fire
    `request_finished`, whose receivers tend Django's database connections and caches of the
    current thread: the front door's requests open none on the loop's thread (their database
    work runs on the asyncio pool or on `run_db`'s threads, which tend their own), and its
    responses hold no resources to close (bytes, never files or iterators).
    """
    own = response.headers
    headers = [(name.encode("ascii"), value.encode("latin-1")) for name, value in own.items()]
    headers.extend(encoded for name, encoded in fixed if name not in own)
    content: bytes = response.content  # type: ignore[attr-defined]
    if "Content-Length" not in own:
        # What CommonMiddleware adds: the answer is whole, so no chunked encoding.
        headers.append((b"Content-Length", b"%d" % len(content)))
    headers.extend(
        (b"Set-Cookie", cookie.OutputString().encode("ascii"))
        for cookie in response.cookies.values()
    )
    await send({"type": "http.response.start", "status": response.status_code, "headers": headers})
    await send({"type": "http.response.body", "body": content})
