"""The relay's refusals and the one DRF exception handler that renders every one of them.

Every answer that is not a success is `{"error": "<code>", "message": "..."}` (PROTOCOL.md
section 3), with the headers its status needs (`WWW-Authenticate`, `Retry-After`, `Allow`).
Views and selectors raise; nothing below a view builds an error response itself.
"""

from __future__ import annotations

import logging
import math
from typing import Any

import psycopg
from django.core.exceptions import RequestDataTooBig
from django.db import DatabaseError
from django.http import Http404, HttpResponse
from psycopg_pool import PoolTimeout
from rest_framework import exceptions

from relaycore.http import json_error
from relaycore.middleware import database_failure_response, internal_error_response

__all__ = [
    "InvalidRequest",
    "PayloadTooLarge",
    "Refusal",
    "ServiceUnavailable",
    "UnknownCommunity",
    "relay_exception_handler",
]

logger = logging.getLogger(__name__)


class Refusal(exceptions.APIException):
    """A refusal with the relay's error code; `str()` of the message goes to the client."""

    status_code = 400
    code = "bad_request"

    def __init__(self, message: str, *, code: str | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.headers = headers or {}


class InvalidRequest(Refusal):
    """The request's shape (400): `invalid_filter`, `invalid_progress`, `invalid_event`."""


class UnknownCommunity(Refusal):
    status_code = 404
    code = "unknown_community"

    def __init__(self) -> None:
        super().__init__("no community is served at this host")


class PayloadTooLarge(Refusal):
    status_code = 413
    code = "payload_too_large"


class ServiceUnavailable(Refusal):
    """A budget ran out or the database is down (503, retry)."""

    status_code = 503

    def __init__(self, message: str, *, code: str, retry_after: int = 1) -> None:
        super().__init__(message, code=code, headers={"Retry-After": str(retry_after)})


def relay_exception_handler(exc: Exception, context: dict[str, Any]) -> HttpResponse:
    """REST_FRAMEWORK["EXCEPTION_HANDLER"]: every exception a relay view raises, as JSON."""
    if isinstance(exc, Refusal):
        return json_error(exc.status_code, exc.code, exc.message, headers=exc.headers)
    if isinstance(exc, exceptions.Throttled):
        seconds = max(1, math.ceil(exc.wait or 1))
        return json_error(429, "rate_limited", f"too many requests; retry in {seconds} s",
                          headers={"Retry-After": str(seconds)})
    if isinstance(exc, exceptions.AuthenticationFailed | exceptions.NotAuthenticated):
        return json_error(401, "unauthorized", str(exc.detail),
                          headers={"WWW-Authenticate": "Nostr"})
    if isinstance(exc, exceptions.MethodNotAllowed):
        view = context.get("view")
        allowed = [m for m in getattr(view, "allowed_methods", ()) if m != "OPTIONS"]
        return json_error(405, "method_not_allowed", f"this endpoint takes {', '.join(allowed)}",
                          headers={"Allow": ", ".join(allowed)})
    if isinstance(exc, RequestDataTooBig):
        return json_error(413, "payload_too_large", str(exc))
    if isinstance(exc, DatabaseError | psycopg.Error | PoolTimeout):
        return database_failure_response(exc)
    if isinstance(exc, exceptions.APIException):
        return json_error(exc.status_code, str(exc.default_code), str(exc.detail))
    if isinstance(exc, Http404):
        return json_error(404, "not_found", "no such resource")
    logger.exception("unhandled error in %s", type(context.get("view")).__name__)
    return internal_error_response()
