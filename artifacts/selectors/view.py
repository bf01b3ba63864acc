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
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import orjson
from django.db.backends.utils import CursorWrapper

from artifacts.selectors.readability import readable_channels
from artifacts.tokens import MAX_VIEW_CHANNELS

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


@dataclass(frozen=True, slots=True)
class View:
    """P's view as one page computed it."""

    digest: bytes
    # What of the view is not channels (enablement and the allowed types within the filter),
    # as it enters the digest.
    summary: bytes
    # V: the readable channels within the filter (sorted 16-byte ids), or None when there are
    # more than MAX_VIEW_CHANNELS (a token cannot carry them).
    channels: tuple[bytes, ...] | None

    def digest_with(self, channels: tuple[bytes, ...]) -> bytes:
        """The digest this view would have with channel set `channels`: equal to an older
        view's digest exactly when only the channels changed since that view."""
        return _digest(self.summary, _channel_hash(channels))


def view_digest_statement(
    *, community_id: int, reader: str, channels: tuple[str, ...] | None
) -> tuple[str, dict[str, Any]]:
    """The statement whose one row `view_from_row` turns into the view."""
    params: dict[str, Any] = {"community": community_id, "reader": reader}
    if channels is not None:
        params["filter_h"] = list(channels)
    sql = f"""
        SELECT co.artifacts_enabled, co.artifact_types, v.hash,
               CASE WHEN v.n <= {MAX_VIEW_CHANNELS} THEN v.ids END
          FROM communities co,
               LATERAL (SELECT sha256(convert_to(coalesce(
                                  string_agg(r.channel_id::text, ',' ORDER BY r.channel_id), ''),
                                  'UTF8')) AS hash,
                               count(*) AS n,
                               coalesce(array_agg(r.channel_id ORDER BY r.channel_id),
                                        '{{}}'::uuid[]) AS ids
                          FROM ({readable_channels("filter_h" if channels is not None else None)}) r
                       ) v
         WHERE co.id = %(community)s
        """
    return sql, params


def view_from_row(row: tuple[Any, ...], *, types: tuple[str, ...] | None) -> View:
    enabled, allowed, channel_hash, ids = row
    if allowed is None:
        view_types: list[str] | None = None if types is None else list(types)
    else:
        view_types = sorted(set(allowed) & set(types) if types is not None else set(allowed))
    summary = orjson.dumps({"enabled": enabled, "types": view_types})
    channels = None if ids is None else tuple(channel.bytes for channel in ids)
    return View(_digest(summary, bytes(channel_hash)), summary, channels)


def view_digest_from_row(row: tuple[Any, ...], *, types: tuple[str, ...] | None) -> bytes:
    return view_from_row(row, types=types).digest


def _channel_hash(channels: tuple[bytes, ...]) -> bytes:
    """sha256 of the channel ids as text, comma-separated, sorted: what the statement hashes."""
    text = ",".join(str(uuid.UUID(bytes=channel)) for channel in sorted(channels))
    return hashlib.sha256(text.encode()).digest()


def _digest(summary: bytes, channel_hash: bytes) -> bytes:
    return hashlib.sha256(b"buzz view v1\0" + summary + channel_hash).digest()[:DIGEST_BYTES]


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
