"""What every answer Django renders shares (PROTOCOL.md section 3): CORS, and JSON failures.

The relay's API views (`relaycore.edge`) run their own pipeline: community, limits, NIP-98 and
every refusal. Here: a CORS preflight is answered without authentication, every answer carries
the CORS headers, and no failure leaves as an HTML page: a database that is down or a statement
that ran out of budget is a 503 JSON, anything unexpected a 500 JSON without a traceback. The
body's size is bounded before Django sees the request (`relaycore.body_limit`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import psycopg
from django.core.exceptions import BadRequest, PermissionDenied, SuspiciousOperation
from django.db import DatabaseError, OperationalError
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseBase

from relaycore.db import is_statement_timeout
from relaycore.http import CORS_HEADERS, json_error

logger = logging.getLogger(__name__)

def add_cors_headers(response: HttpResponseBase) -> HttpResponseBase:
    """The CORS headers every answer of the relay carries (kept where a view set its own)."""
    for name, value in CORS_HEADERS.items():
        response.headers.setdefault(name, value)
    return response


class RelayHttpMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        if request.method == "OPTIONS":
            return add_cors_headers(HttpResponse(status=204))
        return add_cors_headers(self.get_response(request))

    def process_exception(self, request: HttpRequest, exc: Exception) -> HttpResponse | None:
        if isinstance(exc, DatabaseError):
            return database_failure_response(exc)
        if isinstance(exc, Http404 | PermissionDenied | BadRequest | SuspiciousOperation):
            # Django's own answers (the admin's 403 for a read-only model's add page): not errors.
            return None
        logger.exception("unhandled error on %s %s", request.method, request.path)
        return internal_error_response()


def database_failure_response(exc: BaseException) -> HttpResponse:
    """The answer to a database error, Django's or psycopg's (the edge's asyncio pool)."""
    if is_statement_timeout(exc):
        return json_error(
            503, "budget_exceeded", "the request ran past its work budget; retry later",
            headers={"Retry-After": "1"},
        )
    if isinstance(exc, OperationalError | psycopg.OperationalError):
        # psycopg_pool's PoolTimeout is a psycopg OperationalError.
        logger.warning("database unavailable: %s", exc)
        return json_error(
            503, "database_unavailable", "the relay's database is unavailable; retry later",
            headers={"Retry-After": "2"},
        )
    logger.exception("database error")
    return internal_error_response()


def internal_error_response() -> HttpResponse:
    return json_error(500, "internal_error", "the relay failed to answer; it was logged")
