"""A reader's view, the cheap test that it cannot have changed, and its changes, found from what
changed rather than by listing the reader's channels.

The view (PROTOCOL.md section 5) is the set V of channels P can read within the filter, whether
artifacts are enabled, and the allowed types within the filter. A token carries the digest of
what is not channels (`summary_digest`) and a reference from which V is recovered exactly
whatever its size (docs/protocol.md, "Wide views"): the community's `listing_version` v0 seen by
the snapshot S that computed it, the fence T0 of that page, and the private channels P could read
in S (Pi). V = the channels open and not deleted at version v0, plus Pi.

A page skips every view statement when the probe proves nothing it depends on changed since:

- the community's `listing_version` is unchanged: every listing or policy change, and every
  channel creation, increments it under the community's row lock, so equal values mean no such
  change committed in between (no timestamp comparison, so no storm of recomputations after a
  listing change either);
- P's membership rows are as many as then, and none has `sync_modified_at` at or after the fence
  T0 of the page that computed the view (minus the overlap). Any membership change that page did
  not see committed after its fence was read, so it carries a stamp >= T0: comparing with T0,
  never with one remembered stamp value, stays exact when two transactions share a stamp.

Otherwise the page derives the change (`derive_statement`, `derive_view`) from the channels that
can have changed, X: those of the listing changes after v0 (`artifact_listing_changes`, written
by the statement that increments the version, so S saw exactly the rows up to v0; the first row
after v0 of a channel says how it was readable in S), and those of P's memberships stamped at or
after T0 - overlap. A channel outside X reads exactly as in S. For each channel of X: in V_token
when it was open in S, or private and in Pi (or, for a membership not stamped since, P is a
member now); in V_page when readable now. So the page costs the channels that changed, not P's
channel list. V cannot be recovered (the page then resets, which is always correct) when a
version after v0 has no log row (a writer that does not log it, or collected rows: tokens older
than ARTIFACT_SYNC_TOKEN_MAX_AGE reset anyway), the log table is missing, or a private channel
whose membership changed needs a Pi that cannot be read (its stored set is missing).

A Pi or catch-up set larger than a token carries inline is stored in `artifact_sync_channel_sets`
by its digest (content-addressed: equal sets share a row), written after the page's read-only
transaction (`store_sets_statement`, run by the page's driver before it hands out the token).
"""

from __future__ import annotations

import hashlib
from collections.abc import Generator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
from django.db.backends.utils import CursorWrapper

from artifacts.tokens import MAX_CATCHUP_CHANNELS, MAX_PRIVATE_CHANNELS, ProgressToken
from relaycore.steps import Rows, Statement

DIGEST_BYTES = 16
_ORIGIN = datetime(1970, 1, 1, tzinfo=UTC)

# One statement a page needs run in its snapshot (SQL, parameters); the driver sends back its
# rows (artifacts.selectors.rounds.page_steps).


@dataclass(frozen=True, slots=True)
class ViewProbe:
    fingerprint: bytes
    # The community's listing version in this snapshot.
    listing: int
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
    return ViewProbe(fingerprint=fingerprint, listing=listing, latest_stamp=latest_member)


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


def summary_digest(
    enabled: bool, allowed: list[str] | None, types: tuple[str, ...] | None
) -> bytes:
    """The digest of what of P's view is not channels: enablement and the allowed types within
    the filter's `#type` (`types`), under the community's policy (`allowed`: None, every type)."""
    if allowed is None:
        view_types: list[str] | None = None if types is None else sorted(set(types))
    else:
        view_types = sorted(set(allowed) & set(types) if types is not None else set(allowed))
    summary = orjson.dumps({"enabled": enabled, "types": view_types})
    return hashlib.sha256(b"buzz view v2\0" + summary).digest()[:DIGEST_BYTES]


def private_statement(
    *, community_id: int, reader: str, channels: tuple[str, ...] | None
) -> tuple[str, dict[str, Any]]:
    """Pi: the private, undeleted channels P is an active member of, within the filter's `#h`;
    one row (their ids in order). P's memberships on channel_members_sync, each channel by its
    key: the reader's memberships, never the community's channels."""
    params: dict[str, Any] = {"community": community_id, "reader": reader}
    narrowed = ""
    if channels is not None:
        params["filter_h"] = list(channels)
        narrowed = " AND ch.channel_id = ANY(%(filter_h)s::uuid[])"
    sql = f"""
        SELECT array_agg(p.channel_id ORDER BY p.channel_id)
          FROM (SELECT ch.channel_id FROM channel_members m
                  JOIN channels ch
                    ON ch.community_id = m.community_id AND ch.channel_id = m.channel_id
                 WHERE m.community_id = %(community)s AND m.pubkey = %(reader)s
                   AND m.removed_at IS NULL AND ch.deleted_at IS NULL
                   AND ch.visibility <> 'open'{narrowed}) p"""
    return sql, params


def private_from_row(row: tuple[Any, ...]) -> tuple[bytes, ...]:
    """Pi (sorted 16-byte ids)."""
    return tuple(channel.bytes for channel in row[0] or ())


# How a channel is readable, as `artifact_listing_changes.readable_before` says it.
NOBODY, OPEN, MEMBERS = 0, 1, 2


def derive_statement(
    *,
    community_id: int,
    reader: str,
    channels: tuple[str, ...] | None,
    since_version: int,
    version: int,
    members_since: datetime,
) -> tuple[str, dict[str, Any]]:
    """The channels X that can have changed in P's view since a view computed at listing
    version `since_version` (this snapshot has `version`) under a fence whose overlap starts at
    `members_since`; one row per channel of X within the filter's `#h`, then one trailer row.

    Columns: is_trailer (false for a channel, true for the trailer), channel id,
    readable_before (the first log row after `since_version`; NULL: its listing did not change),
    how it is readable now, whether P is an active member now, whether P's membership was stamped
    at or after `members_since`; the trailer's last column (`log_rows`) counts the log rows of
    the versions in range (all of them must be there). Index range scans only: the log's
    (community_id, listing_version) and
    channel_members_sync; then one lookup per channel of X.
    """
    params: dict[str, Any] = {
        "community": community_id, "reader": reader, "v0": since_version, "v1": version,
        "members_since": members_since,
    }
    narrowed = ""
    if channels is not None:
        params["filter_h"] = list(channels)
        narrowed = " WHERE x.channel_id = ANY(%(filter_h)s::uuid[])"
    sql = f"""
        WITH log AS MATERIALIZED (
            SELECT channel_id, readable_before, listing_version FROM artifact_listing_changes
             WHERE community_id = %(community)s
               AND listing_version > %(v0)s AND listing_version <= %(v1)s),
        lc AS (SELECT DISTINCT ON (channel_id) channel_id, readable_before FROM log
                WHERE channel_id IS NOT NULL ORDER BY channel_id, listing_version),
        mc AS (SELECT channel_id FROM channel_members
                WHERE community_id = %(community)s AND pubkey = %(reader)s
                  AND sync_modified_at >= %(members_since)s),
        x AS (SELECT channel_id FROM lc UNION SELECT channel_id FROM mc)
        SELECT false AS is_trailer, x.channel_id, lc.readable_before,
               CASE WHEN ch.channel_id IS NULL OR ch.deleted_at IS NOT NULL THEN {NOBODY}
                    WHEN ch.visibility = 'open' THEN {OPEN} ELSE {MEMBERS} END,
               EXISTS (SELECT 1 FROM channel_members m
                        WHERE m.community_id = %(community)s AND m.channel_id = x.channel_id
                          AND m.pubkey = %(reader)s AND m.removed_at IS NULL),
               x.channel_id IN (SELECT channel_id FROM mc),
               NULL::bigint AS log_rows
          FROM x LEFT JOIN lc ON lc.channel_id = x.channel_id
          LEFT JOIN channels ch
            ON ch.community_id = %(community)s AND ch.channel_id = x.channel_id{narrowed}
        UNION ALL
        SELECT true, NULL, NULL, NULL, NULL, NULL, count(*) FROM log"""
    return sql, params


@dataclass(frozen=True, slots=True)
class ViewChange:
    """What a page found about P's channels since the token's view."""

    # V is recovered exactly; when False the rest means nothing and the page resets.
    recoverable: bool
    lost: list[bytes]
    gained: list[bytes]
    # Pi of this page, when derived from the token's (None: recompute it, or not carried).
    private: tuple[bytes, ...] | None


UNRECOVERABLE = ViewChange(False, [], [], None)


def derive_view(
    rows: list[Any], *, private: tuple[bytes, ...] | None, versions: int
) -> ViewChange:
    """The channels lost and gained since the token's view, from `derive_statement`'s rows;
    `private`: the token's Pi; `versions`: how many listing versions the range holds."""
    *channels, (is_trailer, *_nothing, log_rows) = rows
    if is_trailer is not True or log_rows != versions:
        return UNRECOVERABLE  # a version without its log row: the change is unknown
    token_private = frozenset(private or ())
    lost, gained = [], []
    page_private = set(token_private)
    for _is_trailer, channel_id, before, now, member, recent, _log_rows in channels:
        channel = channel_id.bytes
        if before is None:
            before = now  # its listing did not change since the token's view
        if before == OPEN:
            was = True
        elif before == MEMBERS:
            if recent and private is None:
                return UNRECOVERABLE  # P's membership changed; Pi was not carried
            # A membership not stamped since is as it was in S.
            was = channel in token_private if private is not None else member
        else:
            was = False
        readable = now == OPEN or (now == MEMBERS and member)
        if was and not readable:
            lost.append(channel)
        elif readable and not was:
            gained.append(channel)
        page_private.discard(channel)
        if now == MEMBERS and member:
            page_private.add(channel)
    carried = tuple(sorted(page_private)) if private is not None else None
    return ViewChange(True, sorted(lost), sorted(gained), carried)


# --- Channel sets too large for a token (artifact_sync_channel_sets) ---------------------------


def pack_channels(channels: frozenset[bytes] | tuple[bytes, ...]) -> bytes:
    return b"".join(sorted(channels))


def unpack_channels(packed: bytes) -> tuple[bytes, ...]:
    return tuple(packed[i : i + 16] for i in range(0, len(packed), 16))


def set_digest(packed: bytes) -> bytes:
    """The key of a stored set: content-addressed, so equal sets share one row."""
    return hashlib.sha256(b"buzz channel set\0" + packed).digest()[:DIGEST_BYTES]


def load_sets_statement(community_id: int, digests: list[bytes]) -> tuple[str, dict[str, Any]]:
    """The stored sets named by a token (by the unique (community_id, digest) index)."""
    return (
        "SELECT digest, channels FROM artifact_sync_channel_sets"
        " WHERE community_id = %(community)s AND digest = ANY(%(digests)s::bytea[])",
        {"community": community_id, "digests": digests},
    )


# Rows a store collects at most: each page that stores sets takes the oldest few untouched for
# twice the longest a token lives, so the table needs no periodic job.
COLLECT_BATCH = 16
_STORE_SQL = """
WITH collected AS (
    DELETE FROM artifact_sync_channel_sets WHERE id IN (
        SELECT id FROM artifact_sync_channel_sets
         WHERE touched_at < now() - make_interval(secs => %(keep)s)
           AND NOT (community_id = %(community)s AND digest = ANY(%(digests)s::bytea[]))
         ORDER BY touched_at LIMIT %(collect)s))
INSERT INTO artifact_sync_channel_sets (community_id, digest, channels, touched_at)
SELECT %(community)s, d, c, now() FROM unnest(%(digests)s::bytea[], %(sets)s::bytea[]) s(d, c)
    ON CONFLICT (community_id, digest) DO UPDATE SET touched_at = now()"""


def store_sets_statement(
    community_id: int, stash: list[tuple[bytes, bytes]], *, token_max_age: int
) -> tuple[str, dict[str, Any]]:
    """Store (or refresh) the sets a page's token names, in a transaction of its own after the
    page's read transaction (a page reads in a read-only snapshot), before the token is handed
    out; and collect up to COLLECT_BATCH rows no live token can name: a page refreshes the rows
    its token names once they are older than half ARTIFACT_SYNC_TOKEN_MAX_AGE, and a token
    older than that resets, so rows untouched for twice as long are unreachable."""
    return _STORE_SQL, {
        "community": community_id,
        "digests": [digest for digest, _ in stash],
        "sets": [packed for _, packed in stash],
        "keep": 2 * token_max_age,
        "collect": COLLECT_BATCH,
    }


# --- The view's steps in a page (driven by artifacts.selectors.rounds.page_steps) ---------------


def private_channels(
    *, community_id: int, reader: str, channels: tuple[str, ...] | None
) -> Generator[Statement, Rows, tuple[bytes, ...]]:
    """Pi, computed from P's memberships (a full round's start, or a token without it)."""
    rows = yield private_statement(community_id=community_id, reader=reader, channels=channels)
    return private_from_row(rows[0])


def derive_change(
    token: ProgressToken,
    *,
    community_id: int,
    reader: str,
    channels: tuple[str, ...] | None,
    listing: int,
    overlap: timedelta,
) -> Generator[Statement, Rows, ViewChange]:
    """The channels lost and gained since the token's view, in a snapshot at listing version
    `listing` (the log table exists)."""
    if listing < token.listing_version:
        return UNRECOVERABLE
    rows = yield derive_statement(
        community_id=community_id,
        reader=reader,
        channels=channels,
        since_version=token.listing_version,
        version=listing,
        members_since=token.view_t - overlap,
    )
    return derive_view(rows, private=token.view_private, versions=listing - token.listing_version)


def load_sets(
    token: ProgressToken, *, community_id: int, has_store: bool
) -> Generator[Statement, Rows, tuple[ProgressToken, frozenset[bytes], bool]]:
    """The token with the stored sets it names read back in (`artifact_sync_channel_sets`),
    the digests found, and whether the catch-up set was found (a private set not found is
    taken as not carried: a change that needs it resets)."""
    digests = [ref for ref in (token.private_ref, token.catchup_ref) if ref]
    if not digests:
        return token, frozenset(), True
    found: dict[bytes, bytes] = {}
    if has_store:
        rows = yield load_sets_statement(community_id, digests)
        found = {bytes(digest): bytes(packed) for digest, packed in rows}
    if token.private_ref:
        packed = found.get(token.private_ref)
        token = token._replace(private_ref=b"",
                               view_private=None if packed is None else unpack_channels(packed))
    complete = True
    if token.catchup_ref:
        packed = found.get(token.catchup_ref)
        complete = packed is not None
        token = token._replace(catchup_ref=b"",
                               catchup=frozenset(unpack_channels(packed or b"")))
    return token, frozenset(found), complete


def seal_sets(
    token: ProgressToken,
    *,
    community_id: int,
    now: datetime,
    has_store: bool,
    loaded: frozenset[bytes],
    token_max_age: timedelta,
) -> tuple[ProgressToken, Statement | None]:
    """The token as it is sealed: a set larger than a token carries inline is named by its
    digest, and the statement that stores it (or refreshes its row, once older than half the
    longest a token lives) when that is needed, else None. The caller resets rather than seal a
    catch-up set too large for a token when there is no store."""
    stash: dict[bytes, bytes] = {}
    private = token.view_private
    if private is not None and len(private) > MAX_PRIVATE_CHANNELS:
        if has_store:
            packed = pack_channels(private)
            stash[set_digest(packed)] = packed
            token = token._replace(view_private=(), private_ref=set_digest(packed))
        else:
            token = token._replace(view_private=None)
    if len(token.catchup) > MAX_CATCHUP_CHANNELS:
        packed = pack_channels(token.catchup)
        stash[set_digest(packed)] = packed
        token = token._replace(catchup=frozenset(), catchup_ref=set_digest(packed))
    if not stash:
        return (token if token.stored_at == _ORIGIN else token._replace(stored_at=_ORIGIN)), None
    if set(stash) <= loaded and now - token.stored_at <= token_max_age / 2:
        return token, None
    return token._replace(stored_at=now), store_sets_statement(
        community_id, list(stash.items()), token_max_age=int(token_max_age.total_seconds()))
