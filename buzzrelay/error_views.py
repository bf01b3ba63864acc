"""Django's error pages as the relay's JSON answers (PROTOCOL.md section 3: never an HTML page).

Django renders these itself for what no view answers: a `SuspiciousOperation` (a malformed or
disallowed Host header, a body Django refuses), an unknown path, a CSRF failure, a failure
outside the relay middleware. Each is the relay's `{"error", "message"}` body; the CORS headers
are the middleware's, or the body limit's, like every other answer.
"""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse

from relaycore.http import json_error
from relaycore.middleware import add_cors_headers, internal_error_response

__all__ = ["bad_request", "csrf_failure", "not_found", "permission_denied", "server_error"]


def _with_cors(response: HttpResponse) -> HttpResponse:
    # These answers can be rendered after RelayHttpMiddleware has run (or without it).
    add_cors_headers(response)
    return response


def bad_request(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    return _with_cors(json_error(400, "bad_request", "the request is malformed"))


def permission_denied(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    return _with_cors(json_error(403, "forbidden", "not allowed"))


def not_found(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    return _with_cors(json_error(404, "not_found", f"nothing is served at {request.path[:200]}"))


def server_error(request: HttpRequest) -> HttpResponse:
    return _with_cors(internal_error_response())


def csrf_failure(request: HttpRequest, reason: str = "") -> HttpResponse:
    return _with_cors(
        json_error(
            403, "csrf_failed",
            "CSRF verification failed (staff pages need cookies and the form's token); "
            "reload the page and try again",
        )
    )
