"""The NIP-11 relay information document (PROTOCOL.md section 6) and Accept negotiation.

Every `limitation` value comes from the setting its enforcing code reads (buzzrelay/settings.py),
so the document never announces a limit the relay does not hold to.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.conf import settings

from artifacts.models import Community

NOSTR_JSON = "application/nostr+json"
SUPPORTED_NIPS = (1, 11, 42, 98)
SYNC_KINDS = (45010, 45011)


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


def wants_relay_information(header: str | None) -> bool:
    """True when Accept names application/nostr+json with a q-value above 0.

    Naming it is what asks for the document (NIP-11): clients that want it say so, browsers
    never do. So `application/nostr+json; q=0.9, text/html` gets the document, while wildcards
    alone (`*/*`, `application/*`) get the human page, and `q=0` refuses the document.
    """
    return any(r.type == NOSTR_JSON and r.q > 0 for r in parse_accept(header))


def limitation() -> dict[str, Any]:
    events = settings.RELAY_EVENT_LIMITS
    return {
        "max_message_length": settings.RELAY_MAX_MESSAGE_LENGTH,
        "max_subscriptions": settings.RELAY_MAX_SUBSCRIPTIONS,
        "max_limit": settings.RELAY_MAX_LIMIT,
        "max_subid_length": settings.RELAY_MAX_SUBID_LENGTH,
        "max_event_tags": events.max_tags,
        # Every read and every write needs an authenticated pubkey (NIP-98 or NIP-42), and
        # writes are checked against channel membership: fixed behaviour, not settings.
        "auth_required": True,
        "restricted_writes": True,
        "created_at_lower_limit": events.created_at_lower,
        "created_at_upper_limit": events.created_at_upper,
    }


def relay_information(*, community: Community, ready: bool) -> dict[str, Any]:
    """The document for `community`'s host. `ready`: the deployment passes section 7."""
    extensions: list[str] = []
    artifacts: dict[str, Any] = {}
    if ready and community.artifacts_enabled:
        extensions.append("artifacts.incremental")
        artifacts["incremental"] = {
            "endpoint": "/query",
            "overlap_seconds": settings.ARTIFACT_SYNC_OVERLAP_SECONDS,
            "max_limit": settings.RELAY_MAX_LIMIT,
        }
    if settings.RELAY_WEBSOCKET_SYNC:
        extensions.append("artifacts.sync")
        artifacts["sync"] = {"endpoint": "/", "kinds": list(SYNC_KINDS)}
    return {
        "name": community.name or settings.RELAY_NAME,
        "description": settings.RELAY_DESCRIPTION,
        "pubkey": settings.RELAY_PUBKEY,
        "self": settings.RELAY_PUBKEY,
        "software": settings.RELAY_SOFTWARE_URL,
        "version": settings.RELAY_VERSION,
        "supported_nips": list(SUPPORTED_NIPS),
        "supported_extensions": extensions,
        "artifacts": artifacts,
        "limitation": limitation(),
    }
