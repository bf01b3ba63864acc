"""buzz-admin community: create or update a community, its artifact policy and its NIP-11
relay information.

Changes go through the same services as every other writer, so a policy change stamps
`communities.artifact_policy_modified_at` and counts as a listing change (the NIP-11 fields do
not: they change no reader's view).
"""

from __future__ import annotations

import argparse
from typing import Any

from buzzrelay.cli import fail

HELP = "create or update a community (host, name, admins, artifact policy, NIP-11 information)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", required=True, help="the host clients connect to (no port)")
    parser.add_argument("--name", help="display name (default: the host, for a new community)")
    parser.add_argument(
        "--admin", action="extend", nargs="*", metavar="PUBKEY",
        help="community admins (hex pubkeys, repeatable); replaces the list, none clears it",
    )
    parser.add_argument(
        "--add-admin", action="extend", nargs="+", metavar="PUBKEY", default=[],
        help="adds admins (hex pubkeys, repeatable), keeping those the community has",
    )
    parser.add_argument("--artifacts", choices=["on", "off"], help="enable artifacts")
    parser.add_argument(
        "--artifact-types", metavar="T,...",
        help="allowed artifact types, comma-separated; 'all' allows every type",
    )
    parser.add_argument(
        "--open-channel-creation", choices=["on", "off"],
        help="whether any pubkey may create channels",
    )
    info = parser.add_argument_group(
        "relay information (NIP-11)",
        "what NIP-11 tells this host's clients; '' returns a field to the deployment's default "
        "(RELAY_INFO_<FIELD>), and a field without one is left out",
    )
    for field_name, what in INFO_ARGUMENTS.items():
        info.add_argument(f"--{field_name.replace('_', '-')}", metavar="TEXT", help=what)
    info.add_argument(
        "--max-content-length", metavar="N",
        help="limitation.max_content_length: the most characters of an event's content, "
        "enforced on every write; 'default' returns it to RELAY_INFO_MAX_CONTENT_LENGTH",
    )


INFO_ARGUMENTS = {
    "description": "a few sentences about the community",
    "contact": "the admins' address: an email address or a mailto:/https: URI",
    "icon": "URL of a square image",
    "banner": "URL of a wide image",
    "terms_of_service": "URL of the terms of service",
    "privacy_policy": "URL of the privacy policy",
    "posting_policy": "URL of the posting policy",
}


def _changes(args: argparse.Namespace) -> dict[str, Any]:
    changes: dict[str, Any] = {}
    if args.name is not None:
        changes["name"] = args.name
    if args.admin is not None:
        changes["admin_pubkeys"] = [p for p in args.admin if p.strip()]
    if args.artifacts is not None:
        changes["artifacts_enabled"] = args.artifacts == "on"
    if args.artifact_types is not None:
        types = [t.strip() for t in args.artifact_types.split(",") if t.strip()]
        changes["artifact_types"] = None if types in ([], ["all"]) else types
    if args.open_channel_creation is not None:
        changes["open_channel_creation"] = args.open_channel_creation == "on"
    info: dict[str, str | int | None] = {
        name: getattr(args, name) for name in INFO_ARGUMENTS if getattr(args, name) is not None
    }
    if args.max_content_length is not None:
        info["max_content_length"] = _content_length(args.max_content_length)
    if info:
        changes["info"] = info
    return changes


def _content_length(raw: str) -> int | None:
    if raw.strip().lower() in ("", "default"):
        return None
    if not raw.strip().isdigit():
        fail(f"--max-content-length must be a whole number of characters or 'default' "
             f"(got {raw!r})", code=2)
    return int(raw)


def _info_rows(community: Any) -> list[list[Any]]:
    """Each NIP-11 field with the value the document carries, marked when it is the default."""
    from artifacts.models import INFO_FIELDS

    effective = community.relay_info()
    rows = []
    for field_name in INFO_FIELDS:
        value = effective.get(field_name)
        own = getattr(community, field_name) not in ("", None)
        shown = None if value is None else (str(value) if own else f"{value} (default)")
        rows.append([field_name.replace("_", " "), shown])
    return rows


def run(args: argparse.Namespace) -> int:
    from artifacts.models import Community
    from artifacts.services.communities import (
        community_create,
        community_update_policy,
        normalize_host,
    )
    from artifacts.services.errors import Invalid
    from buzzrelay.admin_commands._tables import print_table

    changes = _changes(args)
    try:
        host = normalize_host(args.host)
        existing = Community.objects.filter(host=host).first()
        if existing is None:
            added = [p for p in args.add_admin if p.strip()]
            if added:
                changes["admin_pubkeys"] = [*changes.get("admin_pubkeys", []), *added]
            community = community_create(host=host, name=changes.pop("name", host), **changes)
            outcome = "created"
        else:
            changed = community_update_policy(
                community_id=existing.pk, add_admin_pubkeys=args.add_admin, **changes
            )
            outcome = f"updated: {', '.join(changed)}" if changed else "unchanged"
            community = Community.objects.get(pk=existing.pk)
    except Invalid as exc:
        fail(exc.message, code=2)
        return 2  # not reached: fail() exits
    types = ", ".join(community.artifact_types) if community.artifact_types is not None else "all"
    print_table(
        ["setting", "value"],
        [
            ["host", community.host],
            ["name", community.name],
            ["admins", "\n".join(community.admin_pubkeys) or None],
            ["artifacts", "on" if community.artifacts_enabled else "off"],
            ["artifact types", types],
            ["open channel creation", "on" if community.open_channel_creation else "off"],
            ["listing version", community.listing_version],
            ["policy stamped at", community.artifact_policy_modified_at.isoformat()],
            *_info_rows(community),
        ],
        title=f"community {community.host}: {outcome}",
    )
    return 0
