"""`POST /query` incremental rounds on the event loop, in front of Django.

Why: a continuation round with nothing pending costs little work (two indexed statements), but
served through Django's ASGI handler it paid for the request cycle, a thread per request and
the hops between it and the event loop: 2.9 ms of relay CPU per round under load against 1.6 ms
in-process (docs/performance.md). Here a well-formed round is answered on the event loop with
asyncio clients of PostgreSQL and Redis, by the same code that decides it in Django's view:
`nostr.nip98` verifies the header, `filters.parse_query_body` and `rounds.prepare_round` read the
request, `rounds.page_steps` is the page, `render_page` the answer.

The fast path answers only what it can answer exactly as the view would (PROTOCOL.md section 3
order: body 413 (buzzrelay.body_limit, in front), community 404, address limit 429, NIP-98 401,
shape 400, pubkey limit 429, budget 503). The address limit comes first, before any signature
is verified; a request it refuses is handed to Django, which gives the 404 or the same 429
(a refusal takes no token). Every other request that is not a well-formed incremental round of
a known community, or that needs something only the synchronous path has (Redis down and the
local fallbacks, replay claims held in PostgreSQL, a readiness verdict or database identity not
yet cached in this process), is handed to Django before anything else with an effect (a replay
claim) was taken; the address token already taken is marked in the scope
(`ADDRESS_TOKEN_TAKEN`), so the view does not take a second. So a refusal is always Django's
own answer, and the fast path's answers are the pubkey 429, the replay 401, the budget and
database 503s, and the pages.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg
from django.conf import settings
from django.http import HttpResponse
from psycopg_pool import PoolTimeout

from artifacts.api.query_views import record_page, render_page
from artifacts.selectors.async_reads import begin_read, connection_pool, read_page_async
from artifacts.selectors.filters import InvalidFilter, parse_query_body
from artifacts.selectors.rounds import CommunityGone, prepare_round
from artifacts.tokens import InvalidProgress
from artifacts.ws.scope import client_address, header, public_host, public_http_url
from buzzrelay.http import CORS_HEADERS, unknown_community_response
from buzzrelay.middleware import database_failure_response, internal_error_response
from buzzrelay.nip98_auth import (
    REPLAY_MESSAGE,
    WINDOW_SECONDS,
    claim_in_redis_async,
    postgres_claims_known_absent,
    unauthorized_response,
)
from buzzrelay.ratelimit import (
    ADDRESS_TOKEN_TAKEN,
    RedisUnavailable,
    async_redis_client,
    check_pubkey,
    check_rate_async,
    rate_limited_response,
)
from nostr.nip98 import Nip98Error, verify_nip98
from relayinfo.metrics import flush_metrics, record_fast_path, record_nip98_check
from relayinfo.readiness import cached_readiness
from relayinfo.sync_epoch import cached_database_identity

__all__ = ["QueryFastPath"]

logger = logging.getLogger(__name__)

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[..., Awaitable[None]]

PATH = "/query"
# The headers Django's middleware adds to every answer (SecurityMiddleware,
# XFrameOptionsMiddleware); the relay's CORS headers are added with them.
_DJANGO_HEADERS = (
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
    (b"cross-origin-opener-policy", b"same-origin"),
)
_CORS = tuple((name.lower().encode(), value.encode()) for name, value in CORS_HEADERS.items())


class _Delegate(Exception):
    """Django answers this request (nothing with an effect was done yet)."""


class QueryFastPath:
    """ASGI middleware: serves incremental rounds on `POST /query`, the rest goes to `app`."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not _candidate(scope):
            await self.app(scope, receive, send)
            return
        body, complete = await _read_body(receive)
        if complete:
            try:
                response = await _serve(scope, body)
            except _Delegate:
                pass
            else:
                record_fast_path(answered=True)
                await _send_response(send, response)
                return
        record_fast_path(answered=False)
        await self.app(scope, _replaying(body, complete, receive), send)


def _candidate(scope: Scope) -> bool:
    if scope["type"] != "http" or not settings.RELAY_QUERY_FAST_PATH:
        return False
    # The body arrives whole and within its limit: buzzrelay.body_limit read it first.
    return scope["method"] == "POST" and scope["path"] == PATH and not scope.get("query_string")


async def _read_body(receive: Receive) -> tuple[bytes, bool]:
    """(the body read, whether it is the whole body: false after a disconnect)."""
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            # A disconnect: Django's handler sees it too when it reads.
            return b"".join(chunks), False
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks), True


def _replaying(body: bytes, complete: bool, receive: Receive) -> Receive:
    """A receive that hands Django the body already read, then the rest of the request."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": not complete}
        return await receive()

    return replay


async def _serve(scope: Scope, body: bytes) -> HttpResponse | bytes:
    """The answer to a round as Django's view would give it (a page's JSON, or a refusal);
    raises `_Delegate`."""
    url = public_http_url(scope, PATH)
    ready = cached_readiness()
    identity = cached_database_identity()
    if url is None or ready is None or identity is None:
        raise _Delegate
    try:
        redis = async_redis_client()
    except RedisUnavailable:
        raise _Delegate from None
    # PROTOCOL.md section 3: the address limit applies before any signature is verified.
    try:
        wait = await check_rate_async(
            redis, f"addr:{client_address(scope)}",
            rate=settings.RELAY_RATE_LIMIT_ADDRESS_RATE,
            burst=settings.RELAY_RATE_LIMIT_ADDRESS_BURST,
        )
    except RedisUnavailable:
        raise _Delegate from None  # nothing was taken; the synchronous path has the fallback
    if wait is not None:
        # A refusal leaves the bucket as it was, so Django answers it (its community 404 comes
        # first) by refusing again, without taking a token or verifying anything.
        raise _Delegate
    # The token is taken: if Django answers from here on, its view must not take another.
    scope[ADDRESS_TOKEN_TAKEN] = True
    # Everything pure next: any refusal among these is Django's to give.
    try:
        record_nip98_check()
        auth = verify_nip98(
            header(scope, "authorization"), url=url, method="POST", body=body or None,
            now=int(time.time()), window=WINDOW_SECONDS,
        )
        query = parse_query_body(body)
    except (Nip98Error, InvalidFilter):
        raise _Delegate from None
    if not query.incremental or not postgres_claims_known_absent():
        raise _Delegate
    pool = await connection_pool()
    try:
        async with pool.connection() as conn:
            # A delegation from here on returns the connection inside the transaction; the
            # pool rolls it back.
            read = await begin_read(conn, public_host(scope))
            if read is None:
                raise _Delegate
            try:
                rounds = prepare_round(
                    community_id=read.community_id, reader=auth.pubkey, query=query
                )
            except InvalidProgress:
                raise _Delegate from None
            try:
                fresh = await claim_in_redis_async(
                    redis, auth.event_id, expires_at=auth.created_at + WINDOW_SECONDS
                )
            except RedisUnavailable:
                # Nothing was claimed: the synchronous path claims in PostgreSQL.
                raise _Delegate from None
            if not fresh:
                return unauthorized_response(REPLAY_MESSAGE)
            # From here the event id is claimed: every outcome is answered here.
            try:
                wait = await check_rate_async(
                    redis, f"pk:{auth.pubkey}",
                    rate=settings.RELAY_RATE_LIMIT_PUBKEY_RATE,
                    burst=settings.RELAY_RATE_LIMIT_PUBKEY_BURST,
                )
            except RedisUnavailable:
                # The breaker is open now: this takes the process's local bucket, as the
                # synchronous path does while Redis is down.
                wait = check_pubkey(auth.pubkey)
            if wait is not None:
                return rate_limited_response(wait)
            page = await read_page_async(read, rounds, ready=ready, identity=identity)
    except _Delegate:
        raise
    except CommunityGone:
        return unknown_community_response()
    except (psycopg.Error, PoolTimeout) as exc:
        return database_failure_response(exc)
    except Exception:
        logger.exception("unhandled error on POST %s (fast path)", PATH)
        return internal_error_response()
    if record_page(page, flush=False):
        # The shared cache is synchronous (and may be down for its socket timeout).
        asyncio.get_running_loop().run_in_executor(None, flush_metrics)
    return render_page(page)


async def _send_response(send: Send, response: HttpResponse | bytes) -> None:
    """A page (its JSON) or a refusal (Django's response object), with Django's headers."""
    if isinstance(response, bytes):
        status, body, own = 200, response, [(b"content-type", b"application/json")]
    else:
        status, body = response.status_code, response.content
        own = [(name.lower().encode(), value.encode()) for name, value in response.items()
               if name.lower() != "content-length"]
    headers = [*own, (b"content-length", b"%d" % len(body)), *_DJANGO_HEADERS, *_CORS]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
