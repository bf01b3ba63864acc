"""The NIP-11 relay information document (PROTOCOL.md section 6).

Its media type is chosen by `relaycore.edge.renderers.Nip11Negotiation`.

Every `limitation` value comes from the setting its enforcing code reads (buzzrelay/settings.py),
so the document never announces a limit the relay does not hold to; `max_content_length` is the
community's (`Community.content_limit()`, which ingest enforces). The descriptive fields (name,
description, contact, icon, banner, terms_of_service, privacy_policy, posting_policy) are the
community's own, else the deployment's RELAY_INFO_* defaults; one neither sets is left out.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings

from artifacts.models import Community
from artifacts.selectors.filters import VIEW_CHANGES
from nostr.kinds import SYNC_KINDS

SUPPORTED_NIPS = (1, 11, 42, 98)


def limitation(community: Community) -> dict[str, Any]:
    events = settings.RELAY_EVENT_LIMITS
    content_limit = community.content_limit()  # enforced by artifacts.services.ingest
    return {
        **({"max_content_length": content_limit} if content_limit is not None else {}),
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
            # The filter's `view_changes` values served (PROTOCOL.md section 5).
            "view_changes": list(VIEW_CHANGES),
        }
    if settings.RELAY_WEBSOCKET_SYNC:
        extensions.append("artifacts.sync")
        artifacts["sync"] = {"endpoint": "/", "kinds": list(SYNC_KINDS)}
    info = community.relay_info()  # the community's own fields, else the environment's
    info.pop("max_content_length", None)  # a limitation, below
    return {
        "name": community.name or settings.RELAY_NAME,
        **info,
        "pubkey": settings.RELAY_PUBKEY,
        "self": settings.RELAY_PUBKEY,
        "software": settings.RELAY_SOFTWARE_URL,
        "version": settings.RELAY_VERSION,
        "supported_nips": list(SUPPORTED_NIPS),
        "supported_extensions": extensions,
        "artifacts": artifacts,
        "limitation": limitation(community),
    }
