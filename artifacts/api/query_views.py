"""`POST /query` (PROTOCOL.md section 5): plain reads and incremental rounds.

Body size (413), OPTIONS and the community (404) are the middleware's. Here, in the order
PROTOCOL.md section 3 gives: the client-address limit (before any signature is verified), NIP-98
(401), the request's shape: one valid filter and, for rounds, a token of this reader, community
and filter (400), the pubkey's limit (429); the read's budget (503) is the middleware's answer to
a statement timeout. Responses are built from the stored event JSON without parsing it again.
"""

from __future__ import annotations

import orjson
from django.http import HttpRequest, HttpResponse
from django.views.decorators.csrf import csrf_exempt

from artifacts.selectors.filters import InvalidFilter, parse_query_body
from artifacts.selectors.plain_reads import plain_query
from artifacts.selectors.rounds import CommunityGone, Page, prepare_round, read_page
from artifacts.tokens import InvalidProgress
from buzzrelay.http import json_error, unknown_community_response
from buzzrelay.nip98_auth import AuthenticationFailed, authenticate_request, unauthorized_response
from buzzrelay.ratelimit import check_address, check_pubkey, rate_limited_response
from relayinfo.metrics import record_round
from relayinfo.readiness import deployment_ready


@csrf_exempt
def post_query(request: HttpRequest) -> HttpResponse:
    if request.method != "POST":
        return json_error(405, "method_not_allowed", "POST one filter", headers={"Allow": "POST"})
    if (wait := check_address(request)) is not None:
        return rate_limited_response(wait)
    try:
        reader = authenticate_request(request)
    except AuthenticationFailed as exc:
        return unauthorized_response(exc.reason)
    community_id = request.community.pk  # type: ignore[attr-defined]
    try:
        query = parse_query_body(request.body)
        rounds = (
            prepare_round(community_id=community_id, reader=reader, query=query)
            if query.incremental
            else None
        )
    except InvalidFilter as exc:
        return json_error(400, "invalid_filter", str(exc))
    except InvalidProgress as exc:
        return json_error(400, "invalid_progress", str(exc))
    if (wait := check_pubkey(reader)) is not None:
        return rate_limited_response(wait)
    if rounds is None:
        raws = plain_query(community_id=community_id, reader=reader, query=query)
        return _json(b"[" + b",".join(raw.encode() for raw in raws) + b"]")
    try:
        page = read_page(rounds, ready=deployment_ready())
    except CommunityGone:
        return unknown_community_response()
    record_page(page)
    return _json(render_page(page))


def record_page(page: Page, *, flush: bool = True) -> bool:
    """Count a served page in the round metrics (relayinfo.metrics.record_round)."""
    return record_round(
        reset=page.reset,
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
            b',"progress":',
            orjson.dumps(page.progress),
            b',"more":true' if page.more else b',"more":false',
            b',"reset":true}' if page.reset else b',"reset":false}',
        )
    )


def _json(body: bytes) -> HttpResponse:
    return HttpResponse(body, content_type="application/json")
