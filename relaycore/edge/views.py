"""`RelayAPIView`: the relay's DRF view, with PROTOCOL.md section 3's order written once.

A relay view says how to read its request (`parse`, the 400s) and what to do with it (`serve`,
one call into a selector or service); the base class runs the rest, in the contract's order:
preflight, method, body (413), community (404), address limit (429, before any signature),
NIP-98 (401), DRF's permission classes (403; none on the relay's own views), `parse` (400),
pubkey limit (429), `serve` (503 budgets). It is an async view:
Django and the front door both await `as_view()`'s function (`respond`) on an event loop, and
authentication and throttles await Redis instead of blocking it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.http import HttpRequest, HttpResponse, HttpResponseBase
from rest_framework import exceptions
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.throttling import BaseThrottle
from rest_framework.views import APIView

from relaycore.dbthreads import run_db
from relaycore.edge.exceptions import UnknownCommunity
from relaycore.edge.nip98 import Nip98Authentication
from relaycore.edge.parsers import BoundedBytesParser, request_body
from relaycore.edge.renderers import JSONBytesRenderer, OnlyRenderer
from relaycore.edge.throttling import AddressRateThrottle, BucketThrottle, PubkeyRateThrottle
from relaycore.http import request_host

__all__ = ["CommunityLookup", "RelayAPIView", "on_server_loop", "use_community_lookup"]


@dataclass(frozen=True)
class CommunityLookup:
    """How the community served at a host is found (None: no community there): `on_thread`
    with the synchronous driver on a database thread, `on_loop` on the server loop's asyncio
    pool. Communities are the artifacts app's; it hands its lookup to the edge when Django
    starts (`artifacts.apps`), so the edge, on the ground floor, imports no app."""

    on_thread: Callable[[str], Any]
    on_loop: Callable[[str], Awaitable[Any]]


_community_lookup: CommunityLookup | None = None


def use_community_lookup(lookup: CommunityLookup) -> None:
    global _community_lookup
    _community_lookup = lookup


def _lookup() -> CommunityLookup:
    if _community_lookup is None:
        raise ImproperlyConfigured(
            "no community lookup: artifacts (which gives it) is not in INSTALLED_APPS"
        )
    return _community_lookup


def on_server_loop(request: Request) -> bool:
    """Whether the view runs on the server's own event loop (reached through the front door).

    There the process's asyncio PostgreSQL pool lives, and reads run on it without leaving the
    loop. Reached through Django's handler instead (RELAY_FRONT_DOOR=false, the test client), an
    async view runs in an event loop of its own per request (`async_to_sync`), so it takes the
    synchronous drivers of the same statements on the database threads.
    """
    return bool(getattr(request._request, "served_by_front_door", False))


class RelayAPIView(APIView):
    view_is_async = True
    authentication_classes = [Nip98Authentication]
    # The two limits run at their own places in the order (see `pipeline`), not DRF's.
    throttle_classes: list[type[BaseThrottle]] = []
    # Checked by `pipeline` right after authentication, as DRF's `initial` would: a subclass that
    # names permission classes is protected by them (none of the relay's own views needs one).
    permission_classes: list[Any] = []
    parser_classes = [BoundedBytesParser]
    renderer_classes = [JSONBytesRenderer]
    content_negotiation_class = OnlyRenderer
    # NIP-98 and both limits; False for public documents (NIP-11).
    authenticated = True

    def parse(self, request: Request) -> Any:
        """The request's shape (raise `InvalidRequest` for a 400); what `serve` takes."""
        return None

    async def serve(self, request: Request, parsed: Any) -> HttpResponseBase:
        raise NotImplementedError

    @property
    def allowed_methods(self) -> list[str]:
        return [method.upper() for method in self.http_method_names]

    @classmethod
    def as_view(cls, **initkwargs: Any) -> Callable[..., Coroutine[Any, Any, HttpResponseBase]]:
        """The view function Django's URL configuration and the front door call: a coroutine
        function that awaits `respond`, the relay's entry point.

        DRF's `as_view` still runs (its checks; `cls`, `initkwargs`, `view_class` and the CSRF
        exemption that URL introspection and the schema read are copied from its answer), but
        its function calls `dispatch`, which Django's stubs type as synchronous: an async view
        written as `async def dispatch` is an override the types cannot state. Calling
        `respond` directly also spares a request `csrf_exempt`'s coroutine wrapper.
        """
        drf_view = super().as_view(**initkwargs)

        async def view(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
            self = cls(**initkwargs)
            self.setup(request, *args, **kwargs)
            return await self.respond(request, *args, **kwargs)

        view.__dict__.update(
            (name, value) for name, value in drf_view.__dict__.items() if name != "__wrapped__"
        )
        view.__name__ = view.__qualname__ = drf_view.__name__
        view.__doc__ = cls.__doc__
        view.__module__ = cls.__module__
        return view

    def dispatch(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        """DRF's synchronous dispatch would skip the relay's order (and cannot await NIP-98):
        a relay view is only reached through `as_view`, which awaits `respond`."""
        raise TypeError(f"{type(self).__name__} is served by as_view(), which awaits respond()")

    async def respond(
        self, request: HttpRequest, *args: Any, **kwargs: Any
    ) -> HttpResponseBase:
        """DRF's dispatch (initialize, handle, exception handler, finalize) with `pipeline`
        awaited in place of the synchronous `initial` and handler."""
        self.args = args
        self.kwargs = kwargs
        drf_request = self.initialize_request(request, *args, **kwargs)
        self.request = drf_request
        self.headers = self.default_response_headers
        self.format_kwarg = None  # no format suffixes in the relay's routes
        try:
            response = await self.pipeline(drf_request)
        except Exception as exc:
            response = self.handle_exception(exc)
        finally:
            await self.release()
        self.response = self.finalize_response(drf_request, response, *args, **kwargs)
        if isinstance(self.response, Response):
            self.response.render()  # now: what Django's handler (or the front door) would do
        self._break_cycles(drf_request, self.response)
        return self.response

    @staticmethod
    def _break_cycles(request: Request, response: HttpResponseBase) -> None:
        """Drop the contexts in which DRF's request and rendered response hold themselves and
        this view: reference cycles that left every request's objects (the view, both
        requests, the response, a round's cursor) to the cyclic garbage collector, which then
        ran ten times as often (docs/performance.md). The body is parsed and the response
        rendered by now; nothing reads either context again."""
        request.parser_context.clear()
        if isinstance(response, Response):
            response.renderer_context = {}

    async def pipeline(self, request: Request) -> HttpResponseBase:
        """PROTOCOL.md section 3 (the body's 413 came first, in `relaycore.body_limit`)."""
        if request.method == "OPTIONS":
            return HttpResponse(status=204)  # CORS preflight: no authentication
        if (request.method or "").lower() not in self.http_method_names:
            raise exceptions.MethodNotAllowed(request.method)
        # 413 first: reading the body through the parser bounds it (behind `body_limit` it is
        # already whole and bounded; reached through Django's own handler, it is not).
        request_body(request)
        request.accepted_renderer, request.accepted_media_type = (
            self.perform_content_negotiation(request)
        )
        request.community = await self.community(request)  # type: ignore[attr-defined]
        if self.authenticated:
            await self.throttle(request, AddressRateThrottle())
            await self.authenticate(request)
        else:
            # DRF's anonymous request, so a permission class reading `request.user` does not
            # start DRF's synchronous authentication with the relay's coroutine authenticator.
            request._not_authenticated()
        self.check_permissions(request)
        parsed = self.parse(request)
        if self.authenticated:
            await self.throttle(request, PubkeyRateThrottle())
        return await self.serve(request, parsed)

    async def community(self, request: Request) -> Any:
        """The community served at the request's host (404 otherwise), read on every request:
        a host may be given to another community at any time."""
        host = request_host(request._request)
        if on_server_loop(request):
            community = await self.community_on_loop(host)
        else:
            community = await run_db(_lookup().on_thread, host)
        if community is None:
            raise UnknownCommunity
        return community

    async def community_on_loop(self, host: str) -> Any:
        """The lookup on the server loop's asyncio pool (a view may fold it into its work)."""
        return await _lookup().on_loop(host)

    async def release(self) -> None:
        """Give back what `community_on_loop` kept for the request (nothing by default)."""

    async def authenticate(self, request: Request) -> None:
        """DRF's authentication, each authenticator awaited (`authenticate_async`, as the
        relay's NIP-98 is) or called: the first that answers is the request's."""
        for authenticator in request.authenticators:
            if hasattr(authenticator, "authenticate_async"):
                found = await authenticator.authenticate_async(request)
            else:
                found = authenticator.authenticate(request)
            if found is not None:
                request._authenticator = authenticator
                request.user, request.auth = found
                return
        request._not_authenticated()

    async def throttle(self, request: Request, throttle: BucketThrottle) -> None:
        if not await throttle.allow_request_async(request, self):
            self.throttled(request, throttle.wait())
