"""`POST /event` (PROTOCOL.md section 4): one signed event in, the NIP-01 `OK` triple out.

Body size (413), OPTIONS and the community (404) are the middleware's. Here, in the order
PROTOCOL.md section 3 gives: the client-address limit (before any signature is verified),
NIP-98 (401), the body is an event object (400), the pubkey's limit (429), then ingest; a write
that ran out of budget or found the database down is 503.
"""

from __future__ import annotations

import orjson
from django.http import HttpRequest, HttpResponse
from django.views.decorators.csrf import csrf_exempt

from artifacts.services.ingest import ingest_event
from buzzrelay.http import json_error, json_response
from buzzrelay.nip98_auth import AuthenticationFailed, authenticate_request, unauthorized_response
from buzzrelay.ratelimit import check_address, check_pubkey, rate_limited_response


@csrf_exempt
def post_event(request: HttpRequest) -> HttpResponse:
    if request.method != "POST":
        return json_error(405, "method_not_allowed", "POST one event", headers={"Allow": "POST"})
    if (wait := check_address(request)) is not None:
        return rate_limited_response(wait)
    try:
        pubkey = authenticate_request(request)
    except AuthenticationFailed as exc:
        return unauthorized_response(exc.reason)
    if not _is_json_object(request.body):
        return json_error(400, "invalid_event", "the body must be one event as a JSON object")
    if (wait := check_pubkey(pubkey)) is not None:
        return rate_limited_response(wait)
    result = ingest_event(
        community=request.community,  # type: ignore[attr-defined]
        raw=request.body,
        authenticated_pubkeys=(pubkey,),
    )
    if result.failure is not None:
        return json_error(503, result.failure, result.message, headers={"Retry-After": "1"})
    return json_response(result.as_ok())


def _is_json_object(body: bytes) -> bool:
    # Only "is this an object at all": everything else about the event (duplicate keys, field
    # types, signature) is the ingest's to answer as `OK false "invalid: ..."`.
    try:
        return isinstance(orjson.loads(body), dict)
    except orjson.JSONDecodeError:
        return False
