"""Community lookup by host."""

from __future__ import annotations

from artifacts.models import Community


def community_for_host(host: str) -> Community | None:
    """The community served at `host` (lowercase, no port), or None.

    One indexed lookup per request; policy fields read here are only used for routing: reads
    re-read the policy inside their own snapshot.
    """
    return Community.objects.filter(host=host.lower()).first()
