"""Communities and their artifact policy (operators: Django admin and `buzz-admin community`).

A policy change (artifacts enabled, allowed types, open channel creation, the admin list)
stamps `communities.artifact_policy_modified_at` and increments `listing_version`, under the
community's row lock; a rename does neither, nor does a change of the NIP-11 relay information
(description, contact, icon, banner, the policy URLs, max_content_length: `info`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Final

from django.db import connection, transaction

from artifacts.models import INFO_FIELDS, Community
from artifacts.selectors.budget import execute_prepared
from artifacts.services.errors import Invalid
from artifacts.services.tags import pubkey_value
from artifacts.services.transactions import (
    bump_listing_statement,
    lock_community_statement,
    write_transaction,
)
from relaycore.config import info_value_problem


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


def normalize_info(info: Mapping[str, str | int | None]) -> dict[str, str | int | None]:
    """NIP-11 fields as stored: text stripped ("" or None: the deployment's default), URLs
    checked, `max_content_length` a positive whole number or None."""
    cleaned: dict[str, str | int | None] = {}
    for field_name, value in info.items():
        if field_name not in INFO_FIELDS:
            raise Invalid(f"{field_name} is not a NIP-11 field of a community")
        if field_name == "max_content_length":
            if value in (None, ""):
                cleaned[field_name] = None
            elif isinstance(value, int) and not isinstance(value, bool) and 0 < value < 2**31:
                cleaned[field_name] = value
            else:
                raise Invalid(f"max_content_length must be a positive whole number (got {value!r})")
            continue
        text = "" if value is None else str(value).strip()
        problem = info_value_problem(field_name, text) if text else None
        if problem:
            raise Invalid(f"{field_name} {problem} (got {text!r})")
        cleaned[field_name] = text
    return cleaned


def community_create(
    *,
    host: str,
    name: str,
    admin_pubkeys: Sequence[str] = (),
    artifacts_enabled: bool = True,
    artifact_types: Sequence[str] | None = None,
    open_channel_creation: bool = False,
    info: Mapping[str, str | int | None] | None = None,
) -> Community:
    """A new community (its policy stamp defaults to the insert's transaction time)."""
    host = normalize_host(host)
    relay_info = normalize_info(info or {})
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
            **relay_info,
        )


def community_update_policy(
    *,
    community_id: int,
    name: str | _Keep = KEEP,
    admin_pubkeys: Sequence[str] | _Keep = KEEP,
    add_admin_pubkeys: Sequence[str] = (),
    artifacts_enabled: bool | _Keep = KEEP,
    artifact_types: Sequence[str] | _Keep | None = KEEP,
    open_channel_creation: bool | _Keep = KEEP,
    info: Mapping[str, str | int | None] | None = None,
) -> list[str]:
    """Change a community's name, policy and NIP-11 information; returns the fields that
    changed.

    `add_admin_pubkeys` joins the admin list (after `admin_pubkeys` replaced it, when both are
    given), read under the row lock so that two concurrent additions both stay. Any policy
    change is stamped and counted once, whatever the number of fields.
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
    added = normalize_admins(add_admin_pubkeys)
    wanted.update(normalize_info(info or {}))
    read = {*wanted, "admin_pubkeys"} if added else set(wanted)
    with write_transaction(community_id=community_id) as ctx, connection.cursor() as cursor:
        execute_prepared(cursor, *lock_community_statement(community_id))
        current = Community.objects.filter(pk=community_id).values(*read, "id").first()
        if current is None:
            raise Invalid(f"no community {community_id}")
        if added:
            base = wanted.get("admin_pubkeys", current["admin_pubkeys"])
            wanted["admin_pubkeys"] = sorted({*base, *added})  # type: ignore[misc]
        changed = [field for field, value in wanted.items() if _differs(current[field], value)]
        if not changed:
            return changed
        Community.objects.filter(pk=community_id).update(**{f: wanted[f] for f in changed})
        if any(field in POLICY_FIELDS for field in changed):
            execute_prepared(cursor, *bump_listing_statement(community_id, stamp=True))
            ctx.access_changed(None)
        return changed


def _differs(current: object, wanted: object) -> bool:
    if isinstance(current, list) and isinstance(wanted, list):
        return sorted(current) != sorted(wanted)
    return current != wanted

