"""Renderers and content negotiation of the relay's views.

The feed's bytes are built by the selectors from the stored event JSON (never parsed again),
so the JSON renderers pass bytes through and render anything else with orjson. NIP-11's
document has its own media type, chosen by `Nip11Negotiation`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson
from rest_framework.negotiation import BaseContentNegotiation
from rest_framework.renderers import BaseRenderer
from rest_framework.request import Request

__all__ = [
    "NOSTR_JSON",
    "JSONBytesRenderer",
    "MediaRange",
    "Nip11Negotiation",
    "NostrJSONRenderer",
    "OnlyRenderer",
    "parse_accept",
]

NOSTR_JSON = "application/nostr+json"


class JSONBytesRenderer(BaseRenderer):
    media_type = "application/json"
    format = "json"
    charset = None

    def render(
        self, data: Any, accepted_media_type: str | None = None,
        renderer_context: dict[str, Any] | None = None,
    ) -> bytes:
        if isinstance(data, bytes):
            return data
        return orjson.dumps(data)


class NostrJSONRenderer(JSONBytesRenderer):
    """NIP-11's relay information document."""

    media_type = NOSTR_JSON
    format = "nostr"


@dataclass(frozen=True)
class MediaRange:
    type: str  # lowercase "type/subtype", wildcards kept
    q: float


def parse_accept(header: str | None) -> list[MediaRange]:
    """The media ranges of an Accept header with their q-values (RFC 9110 section 12.5.1).

    A range whose q-value is malformed or outside 0..1 is dropped; parameters other than q are
    ignored; type and subtype compare case-insensitively.
    """
    ranges = []
    for part in (header or "").split(","):
        media, *params = (piece.strip() for piece in part.split(";"))
        if "/" not in media:
            continue
        q = 1.0
        for param in params:
            name, _, value = param.partition("=")
            if name.strip().lower() == "q":
                try:
                    q = float(value.strip().strip('"'))
                except ValueError:
                    q = -1.0
        if 0.0 <= q <= 1.0:
            ranges.append(MediaRange(media.lower(), q))
    return ranges


class OnlyRenderer(BaseContentNegotiation):
    """The view's one renderer whatever Accept says: relay clients send all sorts, and an API
    answer is JSON (a 406 would only hide the answer they came for)."""

    def select_parser(self, request: Request, parsers: Sequence[Any]) -> Any:
        return parsers[0] if parsers else None

    def select_renderer(
        self, request: Request, renderers: Sequence[Any], format_suffix: str | None = None
    ) -> tuple[Any, str]:
        return renderers[0], renderers[0].media_type


class Nip11Negotiation(OnlyRenderer):
    """NIP-11 on `GET /`: the document when Accept *names* `application/nostr+json` with q > 0.

    Naming it is what asks for the document (NIP-11): clients that want it say so, browsers
    never do. So `application/nostr+json; q=0.9, text/html` gets the document, while wildcards
    alone (`*/*`, `application/*`) get the human page (the view's other renderer), and `q=0`
    refuses the document.
    """

    def select_renderer(
        self, request: Request, renderers: Sequence[Any], format_suffix: str | None = None
    ) -> tuple[Any, str]:
        named = {r.type for r in parse_accept(request.META.get("HTTP_ACCEPT")) if r.q > 0}
        for renderer in renderers:
            if renderer.media_type == NOSTR_JSON and NOSTR_JSON in named:
                return renderer, NOSTR_JSON
        others = [r for r in renderers if r.media_type != NOSTR_JSON] or list(renderers)
        return others[0], others[0].media_type
