"""Communities and their artifact policy (operators: Django admin and `buzz-admin community`).

A policy change (artifacts enabled, allowed types, open channel creation, the admin list)
stamps `communities.artifact_policy_modified_at` and increments `listing_version`, under the
community's row lock; a rename does neither.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Final

from django.db import transaction

from artifacts.models import Community
from artifacts.services.errors import Invalid
from artifacts.services.tags import pubkey_value
from artifacts.services.transactions import bump_listing, lock_community, write_transaction


class _Keep:
    """Marker for "leave this setting as it is" (None is a value: all artifact types)."""

    def __repr__(self) -> str:
        return "KEEP"


KEEP: Final = _Keep()
_HOST = re.compile(r"[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*")
_TYPE = re.compile(r"[a-z][a-z0-9_-]*(?:\.[a-z][a-z0-9_-]*)*")
POLICY_FIELDS = ("admin_pubkeys", "artifacts_enabled", "artifact_types", "open_channel_creation")


def normalize_host(host: str) -> str:
    value = host.strip().lower()
    if len(value) > 253 or not _HOST.fullmatch(value):
        raise Invalid(f"host must be a DNS name without port (got {host!r})")
    return value


def normalize_admins(pubkeys: Sequence[str]) -> list[str]:
    return sorted({pubkey_value(p.strip().lower(), "admin pubkey") for p in pubkeys})


def normalize_types(types: Sequence[str] | None) -> list[str] | None:
    if types is None:
        return None
    cleaned = sorted({t.strip() for t in types if t.strip()})
    for value in cleaned:
        if len(value) > 100 or not _TYPE.fullmatch(value):
            raise Invalid(f"artifact type {value!r} is not dot-separated lowercase components")
    return cleaned


def community_create(
    *,
    host: str,
    name: str,
    admin_pubkeys: Sequence[str] = (),
    artifacts_enabled: bool = True,
    artifact_types: Sequence[str] | None = None,
    open_channel_creation: bool = False,
) -> Community:
    """A new community (its policy stamp defaults to the insert's transaction time)."""
    host = normalize_host(host)
    with transaction.atomic():
        if Community.objects.filter(host=host).exists():
            raise Invalid(f"a community already serves {host}")
        return Community.objects.create(
            host=host,
            name=name.strip() or host,
            admin_pubkeys=normalize_admins(admin_pubkeys),
            artifacts_enabled=artifacts_enabled,
            artifact_types=normalize_types(artifact_types),
            open_channel_creation=open_channel_creation,
        )


def community_update_policy(
    *,
    community_id: int,
    name: str | _Keep = KEEP,
    admin_pubkeys: Sequence[str] | _Keep = KEEP,
    artifacts_enabled: bool | _Keep = KEEP,
    artifact_types: Sequence[str] | _Keep | None = KEEP,
    open_channel_creation: bool | _Keep = KEEP,
) -> list[str]:
    """Change a community's name and policy; returns the fields that changed.

    Any policy change is stamped and counted once, whatever the number of fields.
    """
    wanted: dict[str, object] = {}
    if not isinstance(name, _Keep):
        if not name.strip():
            raise Invalid("name must not be blank")
        wanted["name"] = name.strip()
    if not isinstance(admin_pubkeys, _Keep):
        wanted["admin_pubkeys"] = normalize_admins(admin_pubkeys)
    if not isinstance(artifacts_enabled, _Keep):
        wanted["artifacts_enabled"] = bool(artifacts_enabled)
    if not isinstance(artifact_types, _Keep):
        wanted["artifact_types"] = normalize_types(artifact_types)
    if not isinstance(open_channel_creation, _Keep):
        wanted["open_channel_creation"] = bool(open_channel_creation)
    with write_transaction(community_id=community_id) as ctx:
        lock_community(community_id)
        current = Community.objects.filter(pk=community_id).values(*wanted, "id").first()
        if current is None:
            raise Invalid(f"no community {community_id}")
        changed = [field for field, value in wanted.items() if _differs(current[field], value)]
        if not changed:
            return changed
        Community.objects.filter(pk=community_id).update(**{f: wanted[f] for f in changed})
        if any(field in POLICY_FIELDS for field in changed):
            bump_listing(community_id, stamp=True)
            ctx.access_changed(None)
        return changed


def _differs(current: object, wanted: object) -> bool:
    if isinstance(current, list) and isinstance(wanted, list):
        return sorted(current) != sorted(wanted)
    return current != wanted

