"""The HTTP rules every relay endpoint shares (PROTOCOL.md section 3).

In this order: CORS preflight answered without authentication; body size (413); community from
the host (404); then the view does authentication (401), shape (400), rate limit (429) and
budgets (503). Every answer carries the CORS headers, and no failure leaves as an HTML page: a
database that is down or a statement that ran out of budget is a 503 JSON, anything unexpected a
500 JSON without a traceback.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import psycopg
from django.conf import settings
from django.core.exceptions import BadRequest, PermissionDenied, SuspiciousOperation
from django.db import DatabaseError, OperationalError
from django.http import Http404, HttpRequest, HttpResponse
from psycopg import errors as pg_errors

from artifacts.selectors.communities import community_for_host
from buzzrelay.http import CORS_HEADERS, json_error, request_host, unknown_community_response

logger = logging.getLogger(__name__)

# Paths served for operators on any host: the staff admin, its static files and health checks.
HOST_INDEPENDENT_PREFIXES = ("/admin/", "/static/", "/healthz", "/readyz", "/metrics")


def is_statement_timeout(exc: BaseException) -> bool:
    cause = exc.__cause__ or exc
    return isinstance(cause, pg_errors.QueryCanceled | pg_errors.LockNotAvailable)


class RelayHttpMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self._handle(request)
        for name, value in CORS_HEADERS.items():
            response.headers.setdefault(name, value)
        return response

    def _handle(self, request: HttpRequest) -> HttpResponse:
        if request.method == "OPTIONS":
            return HttpResponse(status=204)
        try:
            length = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            return json_error(400, "bad_request", "Content-Length is not a number")
        if length > settings.RELAY_MAX_BODY_BYTES:
            return json_error(
                413, "payload_too_large", f"body over {settings.RELAY_MAX_BODY_BYTES} bytes"
            )
        if not request.path.startswith(HOST_INDEPENDENT_PREFIXES):
            try:
                community = community_for_host(request_host(request))
            except DatabaseError as exc:
                return database_failure_response(exc)
            if community is None:
                return unknown_community_response()
            request.community = community  # type: ignore[attr-defined]
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exc: Exception) -> HttpResponse | None:
        if isinstance(exc, DatabaseError):
            return database_failure_response(exc)
        if isinstance(exc, Http404 | PermissionDenied | BadRequest | SuspiciousOperation):
            # Django's own answers (the admin's 403 for a read-only model's add page): not errors.
            return None
        logger.exception("unhandled error on %s %s", request.method, request.path)
        return internal_error_response()


def database_failure_response(exc: BaseException) -> HttpResponse:
    """The answer to a database error, Django's or psycopg's (the /query fast path's)."""
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
