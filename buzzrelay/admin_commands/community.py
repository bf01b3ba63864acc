"""buzz-admin community: create or update a community and its artifact policy.

Changes go through the same services as every other writer, so a policy change stamps
`communities.artifact_policy_modified_at` and counts as a listing change.
"""

from __future__ import annotations

import argparse
from typing import Any

from buzzrelay.cli import fail

HELP = "create or update a community (host, name, admins, artifact policy)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", required=True, help="the host clients connect to (no port)")
    parser.add_argument("--name", help="display name (default: the host, for a new community)")
    parser.add_argument(
        "--admin", action="extend", nargs="*", metavar="PUBKEY",
        help="community admins (hex pubkeys, repeatable); replaces the list, none clears it",
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
    return changes


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
            community = community_create(host=host, name=changes.pop("name", host), **changes)
            outcome = "created"
        else:
            changed = community_update_policy(community_id=existing.pk, **changes)
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
        ],
        title=f"community {community.host}: {outcome}",
    )
    return 0
