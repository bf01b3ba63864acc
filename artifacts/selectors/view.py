"""A reader's view and the cheap test that it cannot have changed.

The view (PROTOCOL.md section 5) is the set of channels P can read within the filter, whether
artifacts are enabled, and the allowed types within the filter. A token carries its digest; a page
whose view differs resets the reader, because a channel (or type) entering the view brings
artifacts whose stamps are older than the watermark and no continuation round would find them.

Recomputing the view lists P's readable channels, which grows with the community. A page skips it
when the probe proves nothing it depends on changed since the view was computed:

- the community's `listing_version` is unchanged: every listing or policy change, and every
  channel creation, increments it under the community's row lock, so equal values mean no such
  change committed in between (no timestamp comparison, so no storm of recomputations after a
  listing change either);
- P's membership rows are as many as then, and none has `sync_modified_at` at or after the fence
  T of the page that computed the view (minus the overlap). Any membership change that page did
  not see committed after its fence was read, so it carries a stamp >= T: comparing with T, never
  with one remembered stamp value, stays exact when two transactions share a stamp.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import orjson
from django.db.backends.utils import CursorWrapper

from artifacts.selectors.readability import readable_channels

DIGEST_BYTES = 16


@dataclass(frozen=True, slots=True)
class ViewProbe:
    fingerprint: bytes
    # The newest stamp of P's memberships (None: P never was a member of any channel).
    latest_stamp: datetime | None


# P's memberships: index-only on channel_members_sync (community_id, pubkey, sync_modified_at,
# channel_id). Composable: rounds read it in their page's first statement.
PROBE_COLUMNS = "co.listing_version, m.n, m.latest"
PROBE_FROM = """communities co,
       LATERAL (SELECT count(*) AS n, max(sync_modified_at) AS latest
                  FROM channel_members
                 WHERE community_id = co.id AND pubkey = %(reader)s) m
 WHERE co.id = %(community)s"""


def probe_from_row(listing: int, members: int, latest_member: datetime | None) -> ViewProbe:
    fingerprint = hashlib.sha256(b"%d/%d" % (listing, members)).digest()[:8]
    return ViewProbe(fingerprint=fingerprint, latest_stamp=latest_member)


def probe_view(cursor: CursorWrapper, *, community_id: int, reader: str) -> ViewProbe:
    cursor.execute(
        f"SELECT {PROBE_COLUMNS} FROM {PROBE_FROM}",
        {"community": community_id, "reader": reader},
    )
    return probe_from_row(*cursor.fetchone())


def view_unchanged(
    probe: ViewProbe, *, fingerprint: bytes, computed_under: datetime, overlap: timedelta
) -> bool:
    """True when the view computed under fence `computed_under` provably still holds."""
    return probe.fingerprint == fingerprint and (
        probe.latest_stamp is None or probe.latest_stamp < computed_under - overlap
    )


def view_digest_statement(
    *, community_id: int, reader: str, channels: tuple[str, ...] | None
) -> tuple[str, dict[str, Any]]:
    """The statement whose one row `view_digest_from_row` turns into the view's digest."""
    params: dict[str, Any] = {"community": community_id, "reader": reader}
    if channels is not None:
        params["filter_h"] = list(channels)
    sql = f"""
        SELECT co.artifacts_enabled, co.artifact_types,
               (SELECT sha256(convert_to(coalesce(
                           string_agg(v.channel_id::text, ',' ORDER BY v.channel_id), ''), 'UTF8'))
                  FROM ({readable_channels("filter_h" if channels is not None else None)}) v)
          FROM communities co WHERE co.id = %(community)s
        """
    return sql, params


def view_digest_from_row(row: tuple[Any, ...], *, types: tuple[str, ...] | None) -> bytes:
    enabled, allowed, channel_hash = row
    if allowed is None:
        view_types: list[str] | None = None if types is None else list(types)
    else:
        view_types = sorted(set(allowed) & set(types) if types is not None else set(allowed))
    summary = orjson.dumps({"enabled": enabled, "types": view_types})
    return hashlib.sha256(b"buzz view v1\0" + summary + bytes(channel_hash)).digest()[:DIGEST_BYTES]


def compute_view_digest(
    cursor: CursorWrapper,
    *,
    community_id: int,
    reader: str,
    channels: tuple[str, ...] | None,
    types: tuple[str, ...] | None,
) -> bytes:
    """The digest of P's view within the filter (`#h` channels, `#type` types), in this snapshot."""
    sql, params = view_digest_statement(community_id=community_id, reader=reader, channels=channels)
    cursor.execute(sql, params)
    return view_digest_from_row(cursor.fetchone(), types=types)
