"""The body of a relay request, as bytes: events and filters are hashed and stored as sent."""

from __future__ import annotations

from typing import IO, Any

from django.conf import settings
from rest_framework.parsers import BaseParser
from rest_framework.request import Request

from relaycore.edge.exceptions import PayloadTooLarge

__all__ = ["BoundedBytesParser", "request_body"]


class BoundedBytesParser(BaseParser):
    """Any media type; the body's exact bytes, read up to `RELAY_MAX_BODY_BYTES`.

    `relaycore.body_limit` already bounds every body in front of the relay; this bound holds
    wherever the view is reached without it (Django's own handler, the test client).
    """

    media_type = "*/*"

    def parse(
        self, stream: IO[bytes], media_type: str | None = None,
        parser_context: dict[str, Any] | None = None,
    ) -> bytes:
        limit: int = settings.RELAY_MAX_BODY_BYTES
        body = stream.read(limit + 1)
        if len(body) > limit:
            raise PayloadTooLarge(f"body over {limit} bytes")
        return body


def request_body(request: Request) -> bytes:
    """The request body's exact bytes, for the NIP-98 payload hash and for the view.

    Served by the front door, the body came whole and bounded (`relaycore.body_limit` read it)
    and the door hands it over as it is (`relay_body`): DRF's parsing (negotiation, stream,
    parser) would only copy it. Elsewhere DRF parses once and keeps the result; for a request
    that names no Content-Type it runs no parser, and the body is then Django's own, bounded by
    DATA_UPLOAD_MAX_MEMORY_SIZE (the same limit).
    """
    body: bytes | None = getattr(request._request, "relay_body", None)
    if body is not None:
        return body
    data = request.data
    return data if isinstance(data, bytes) else bytes(request._request.body)
