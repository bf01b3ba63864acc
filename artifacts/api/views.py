"""`POST /query` (PROTOCOL.md section 5) and `POST /event` (section 4) as DRF views.

The pipeline (community, limits, NIP-98, the order of refusals) is `RelayAPIView`'s; each view
reads its request and makes one call. Feed pages are built from the stored event JSON, joined as
bytes, never parsed or serialized again (a DRF serializer costs ~40 us per row).
"""

from __future__ import annotations

import contextlib
from typing import Any

import orjson
import psycopg
from django.http import HttpResponse, HttpResponseBase
from drf_spectacular.utils import extend_schema
from psycopg_pool import AsyncConnectionPool
from rest_framework.request import Request

from artifacts.models import Community
from artifacts.selectors.async_reads import (
    OpenRead,
    begin_read,
    connection_pool,
    end_read,
    guess_round,
    note_used,
    read_page_async,
)
from artifacts.selectors.communities import community_for_host_async
from artifacts.selectors.filters import InvalidFilter, QueryFilter, parse_query_body
from artifacts.selectors.plain_reads import plain_query
from artifacts.selectors.rounds import CommunityGone, Page, RoundRequest, prepare_round, read_page
from artifacts.selectors.sync_epoch import connection_identity
from artifacts.services.ingest import ingest_event
from artifacts.services.loop_ingest import ingest_on_loop
from artifacts.tokens import InvalidProgress
from nostr.nip98 import claimed_pubkey
from relaycore import readiness_gate
from relaycore.dbthreads import run_db
from relaycore.edge.exceptions import InvalidRequest, ServiceUnavailable, UnknownCommunity
from relaycore.edge.openapi import JSON, Answer, RelayAutoSchema, error_answer, ref
from relaycore.edge.parsers import request_body
from relaycore.edge.views import RelayAPIView
from relaycore.metrics import flush_metrics, record_round

__all__ = ["EventView", "QueryView", "record_page", "render_page"]


@extend_schema(
    methods=["POST"],
    summary="Read artifacts: plain or incremental",
    request={
        JSON: {
            "type": "array",
            "minItems": 1,
            "maxItems": 1,
            "items": {"oneOf": [ref("PlainFilter"), ref("IncrementalFilter")]},
        }
    },
    responses={
        200: Answer(
            "Plain mode: the readable events. Incremental mode: one page.",
            {
                "oneOf": [
                    {"type": "array", "items": ref("Event"), "maxItems": 1000},
                    ref("IncrementalPage"),
                ]
            },
        ),
        400: error_answer(
            "The filter is malformed or out of range, or the progress token is not this"
            " reader's, community's or filter's.",
            "invalid_filter", "invalid_progress", "bad_request",
        ),
    },
)
class QueryView(RelayAPIView):
    """One filter: a plain read (a JSON array of events) or one page of a round."""

    http_method_names = ["post", "options"]
    schema = RelayAutoSchema()  # the OpenAPI operation (relaycore/edge/openapi.py)
    # On the server loop, the community lookup begins the page's transaction (one round trip
    # for both, as a round costs few): the connection is kept until the request is answered.
    _pool: AsyncConnectionPool | None = None
    _conn: psycopg.AsyncConnection[Any] | None = None
    _read: OpenRead | None = None

    async def community_on_loop(self, host: str) -> Community | None:
        self._pool = await connection_pool()
        self._conn = await self._pool.getconn()
        # The request's round, guessed before the community and the reader are known
        # (async_reads): a quiet continuation's page is read in the same round trip, and
        # `parse` takes the guess (its token decoded once) only if both hold.
        request = self.request
        guess = guess_round(host, request_body(request), claimed_pubkey(
            request._request.META.get("HTTP_AUTHORIZATION")))
        self._read, community = await begin_read(self._conn, host, guess=guess)
        return community

    async def release(self) -> None:
        # A failed page's transaction is rolled back by the pool.
        if self._pool is not None and self._conn is not None:
            try:
                with contextlib.suppress(psycopg.Error):  # a broken one: the pool replaces it
                    await end_read(self._conn)  # a refusal's: begun, never used
            finally:
                await self._pool.putconn(self._conn)
                self._conn = None

    def parse(self, request: Request) -> tuple[QueryFilter, RoundRequest | None]:
        community_id = request.community.pk  # type: ignore[attr-defined]
        guess = self._read.guess if self._read is not None else None
        if (guess is not None and guess.community_id == community_id
                and guess.reader == request.user.pubkey):
            return guess.query, guess  # the body, community and reader it was made of
        try:
            query = parse_query_body(request_body(request))
            if not query.incremental:
                return query, None
            return query, prepare_round(
                community_id=community_id, reader=request.user.pubkey, query=query
            )
        except InvalidFilter as exc:
            raise InvalidRequest(str(exc), code="invalid_filter") from None
        except InvalidProgress as exc:
            raise InvalidRequest(str(exc), code="invalid_progress") from None

    async def serve(
        self, request: Request, parsed: tuple[QueryFilter, RoundRequest | None]
    ) -> HttpResponseBase:
        query, rounds = parsed
        if rounds is None:
            if self._conn is not None:
                await end_read(self._conn)  # a plain read: the page's transaction is not used
            raws = await run_db(
                plain_query, community_id=request.community.pk,  # type: ignore[attr-defined]
                reader=request.user.pubkey, query=query,
            )
            return _json(b"[" + b",".join(raw.encode() for raw in raws) + b"]")
        try:
            if self._read is not None:
                page = await _read_page_on_loop(self._read, rounds)
            else:
                page = await run_db(_counted_page, rounds)
        except CommunityGone:
            raise UnknownCommunity from None
        return _json(render_page(page))


@extend_schema(
    methods=["POST"],
    summary="Publish one signed event",
    request={JSON: ref("Event")},
    responses={
        200: Answer(
            "The event was judged; `accepted` says whether it was stored.", ref("OkAnswer")
        ),
        400: error_answer("The body is not an event object.", "invalid_event", "bad_request"),
    },
)
class EventView(RelayAPIView):
    """One signed event in, the NIP-01 `OK` triple out (refusals of the event are `OK false`)."""

    http_method_names = ["post", "options"]
    schema = RelayAutoSchema()  # the OpenAPI operation (relaycore/edge/openapi.py)
    # On the server loop the connection of the community lookup is kept for the write (one
    # checkout per request) until the request is answered.
    _pool: AsyncConnectionPool | None = None
    _conn: psycopg.AsyncConnection[Any] | None = None

    async def community_on_loop(self, host: str) -> Community | None:
        self._pool = await connection_pool()
        self._conn = await self._pool.getconn()
        community = await community_for_host_async(self._conn, host)
        note_used(self._conn)
        return community

    async def release(self) -> None:
        if self._pool is not None and self._conn is not None:
            await self._pool.putconn(self._conn)
            self._conn = None

    def parse(self, request: Request) -> bytes:
        body = request_body(request)
        # Only "is this an object at all": everything else about the event (duplicate keys,
        # field types, signature) is the ingest's to answer as `OK false "invalid: ..."`.
        try:
            is_object = isinstance(orjson.loads(body), dict)
        except orjson.JSONDecodeError:
            is_object = False
        if not is_object:
            raise InvalidRequest("the body must be one event as a JSON object",
                                 code="invalid_event")
        return body

    async def serve(self, request: Request, parsed: bytes) -> HttpResponseBase:
        community = request.community  # type: ignore[attr-defined]
        pubkeys = (request.user.pubkey,)
        if self._conn is not None:
            # With group commit, a write that must wait for the next batch gives the
            # connection back first (`release`): it would only sit idle meanwhile.
            result = await ingest_on_loop(
                community=community, raw=parsed, authenticated_pubkeys=pubkeys, conn=self._conn,
                release=self.release,
            )
        else:
            result = await run_db(
                ingest_event, community=community, raw=parsed, authenticated_pubkeys=pubkeys
            )
        if result.failure is not None:
            raise ServiceUnavailable(result.message, code=result.failure)
        return _json(orjson.dumps(result.as_ok()))


def _counted_page(rounds: RoundRequest) -> Page:
    """One page, counted in the round metrics (on a database thread: both are synchronous)."""
    page = read_page(rounds, ready=readiness_gate.ready())
    record_page(page)
    return page


async def _read_page_on_loop(read: OpenRead, rounds: RoundRequest) -> Page:
    """The same page in the transaction `begin_read` opened on the server loop's asyncio pool
    (`async_reads`): no thread hop. Readiness is cached per process (when it is not, it is read
    on a database thread); the database identity per connection, as its server's."""
    ready = await readiness_gate.ready_on_loop()
    identity = await connection_identity(read.cursor.connection)
    page = await read_page_async(read, rounds, ready=ready, identity=identity)
    if record_page(page, flush=False):
        # The shared cache is synchronous (and may be down for its socket timeout).
        await run_db(flush_metrics)
    return page


def record_page(page: Page, *, flush: bool = True) -> bool:
    """Count a served page in the round metrics (relaycore.metrics.record_round)."""
    return record_round(
        reset_cause=page.reset_reason,
        full_round=page.full_round,
        rows=len(page.events) + len(page.removed),
        fence_lag_ms=page.fence_lag.total_seconds() * 1000,
        more=page.more,
        flush=flush,
    )


def render_page(page: Page) -> bytes:
    """The page's JSON; events are the stored bytes, joined, never parsed again."""
    return b"".join(
        (
            b'{"events":[',
            b",".join(raw.encode() for raw in page.events),
            b'],"removed":',
            orjson.dumps([{"d": d, "reason": reason} for d, reason in page.removed]),
            _removed_channels(page),
            b',"progress":',
            orjson.dumps(page.progress),
            b',"more":true' if page.more else b',"more":false',
            b',"reset":true}' if page.reset else b',"reset":false}',
        )
    )


def _removed_channels(page: Page) -> bytes:
    """`,"removed_channels":[...]`, only when an incremental view change lost channels."""
    if not page.removed_channels:
        return b""
    return b',"removed_channels":' + orjson.dumps(page.removed_channels)


def _json(body: bytes) -> HttpResponse:
    return HttpResponse(body, content_type="application/json")


