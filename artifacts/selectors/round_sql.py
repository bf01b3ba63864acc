"""The statement a round's page runs for each window of a phase's candidate stream.

Each phase walks one ordered stream of candidates in bounded windows:

- FULL: heads with `modified_at < T`, on `artifact_heads_modified` in (modified_at, artifact_id)
  order; only readable heads matching the filter come out (as events).
- HEADS: heads with `modified_at` in [W - overlap, T), same index and order.
- MOVES: accepted moves with `modified_at` in [W - overlap, T), on `artifact_revisions_moves` in
  (modified_at, event_id) order, each standing for its artifact's current head. Artifacts whose
  head is itself in [W - overlap, T) were classified by the HEADS phase with the same state (any
  later change carries a stamp >= T), so they are left out.

One statement per window: the window (at most %(window)s stream rows from the cursor) is
materialized, classified by the page's snapshot, and the first %(want)s rows that name something
come back in stream order, followed by one trailer row: how many stream rows the window held and
the position of its last one. For HEADS and MOVES a candidate comes out as an event when it is
readable and matches the filter, otherwise as a removal, **but only if** its current home or the
source of one of its moves stamped at or after W - overlap is a channel P can read now within
the filter's `#h` (the removal rule): nothing else is ever named to P. Candidates whose type the
filter or the policy excludes are skipped: the reader's view (constant between resets) never let
them into its collection.

Re-read, not re-sent (PROTOCOL.md section 5): a HEADS or MOVES candidate stamped below
%(resend_from)s (W, when the page knows the previous round's first snapshot; otherwise W -
overlap, and every candidate passes) comes out only if its row version was not yet visible to that
snapshot, by `_unseen`: the head's version for a head; for a move, the move revision's or its
artifact's head's (the move stands for the head). The rows are still read and counted in the
window: the page's bounded work is the same, only what it sends shrinks.

Result columns: is_trailer (false for a hit, true for the trailer), position time, position key
(native, for ordering), position key (text), artifact id, stored event JSON (events only), removal
reason (removals only), window row count (trailer only): `WindowTrailer` names the trailer's.
"""

from __future__ import annotations

from datetime import datetime
from functools import cache
from typing import Any, NamedTuple

from artifacts.selectors.readability import channel_readable, channel_row_readable, head_shown
from artifacts.tokens import Phase


class WindowTrailer(NamedTuple):
    """The last row of a `window_sql` result: the window's last stream row and its size."""

    is_trailer: bool
    at: datetime
    pos: Any
    key: str
    artifact_id: None
    raw: None
    reason: None
    scanned: int


class CatchupTrailer(NamedTuple):
    """The last row of a `catchup_sql` result: the window's last artifact and its size."""

    is_trailer: bool
    artifact_id: Any  # uuid.UUID
    raw: None
    scanned: int


def split_trailer[T: (WindowTrailer, CatchupTrailer)](
    rows: list[Any], shape: type[T]
) -> T | None:
    """Take the trailer off a window's rows (the hits stay in `rows`), named by `shape`; None
    when the window held no stream row at all."""
    if rows and rows[-1][0] is True:
        return shape._make(rows.pop())
    return None

# Position columns of each stream, in index order.
_POSITION = {
    Phase.FULL: ("modified_at", "artifact_id"),
    Phase.HEADS: ("modified_at", "artifact_id"),
    Phase.MOVES: ("modified_at", "event_id"),
}


# A row version not yet visible to the previous round's first page, by its 32-bit `xmin`
# against the low 32 bits of that snapshot's xmin (%(seen_xmin)s, an xid8): the modular
# difference, as PostgreSQL compares xids, is below 2^31 for an xmin at or after it. Sound: a
# version that snapshot did not see belongs to a transaction running then or begun later, whose
# xid is at or above the snapshot's xmin and below the current page's xmax, and the page filters
# only while those are less than 2^31 apart (rounds.py), where the difference is exact. Anything
# else (an xid older than the snapshot's xmin but committed after it cannot exist; a very old or
# frozen row's preserved xmin may land either side) can only make a candidate travel that had
# been seen, never hold back one that had not. Subtransaction xids are above their parent's,
# so they err the same way.
def _unseen(xmin: str) -> str:
    return f"(({xmin}::text::bigint - %(seen_xmin)s::bigint) & 4294967295) < 2147483648"


# The head event of a candidate, by index, one row at a time (LATERAL): a join would let the
# planner hash a small community's whole events table for a window of a few hundred rows.
_HEAD_EVENT = """SELECT ev.raw, ev.deleted_at FROM events ev
                  WHERE ev.community_id = %(community)s AND ev.event_id = c.event_id"""


def _narrow(column: str, param: str | None, cast: str) -> str:
    return f" AND {column} = ANY(%({param})s::{cast}[])" if param else ""


def _window(phase: Phase, *, with_cursor: bool) -> str:
    """At most %(window)s rows of the phase's stream after the cursor, in stream order."""
    at, key = _POSITION[phase]
    if phase is Phase.MOVES:
        columns = "r.modified_at, r.event_id, r.artifact_id, r.xmin AS row_xmin"
        table = "artifact_revisions"
        where = "r.source_channel_id IS NOT NULL AND r.modified_at >= %(low)s"
        key_param = "%(cursor_key)s"
    else:
        columns = (
            "r.modified_at, r.artifact_id, r.event_id, r.channel_id, r.artifact_type, r.deleted"
            + (", r.xmin AS row_xmin" if phase is Phase.HEADS else "")
        )
        table = "artifact_heads"
        where = "r.modified_at >= %(low)s" if phase is Phase.HEADS else "TRUE"
        key_param = "%(cursor_key)s::uuid"
    cursor = f" AND (r.{at}, r.{key}) > (%(cursor_at)s, {key_param})" if with_cursor else ""
    return f"""SELECT {columns} FROM {table} r
             WHERE r.community_id = %(community)s AND r.modified_at < %(round_t)s
               AND {where}{cursor}
             ORDER BY r.{at}, r.{key} LIMIT %(window)s"""


@cache
def window_sql(phase: Phase, *, with_cursor: bool, has_channels: bool, has_types: bool) -> str:
    """The statement for one window of `phase`. Parameters: community, reader, round_t, low
    (W - overlap), resend_from and seen_xmin (HEADS and MOVES: re-read, not re-sent), window,
    want, cursor_at/cursor_key (with a cursor), filter_h (the filter's `#h`, when it has one)
    and types (the types both the policy and the filter allow, when either restricts them; the
    page read the policy in its snapshot and skips the walk altogether when artifacts are
    disabled)."""
    channels_param = "filter_h" if has_channels else None
    at, key = _POSITION[phase]
    if phase is Phase.MOVES:
        # Each move stands for its artifact's current head. LEFT JOIN: the window's rows are
        # counted for the trailer whatever the join finds.
        heads = f"""
            SELECT w.modified_at AS at, w.event_id AS pos, h.artifact_id, h.event_id,
                   h.channel_id, h.artifact_type, h.deleted,
                   h.modified_at >= %(low)s AND h.modified_at < %(round_t)s AS own_phase
              FROM w LEFT JOIN artifact_heads h
                ON h.community_id = %(community)s AND h.artifact_id = w.artifact_id
             WHERE w.modified_at >= %(resend_from)s OR {_unseen("w.row_xmin")}
                   OR {_unseen("h.xmin")}"""
        skip = " AND s.artifact_id IS NOT NULL AND NOT s.own_phase"
    else:
        heads = """
            SELECT w.modified_at AS at, w.artifact_id AS pos, w.artifact_id, w.event_id,
                   w.channel_id, w.artifact_type, w.deleted
              FROM w"""
        if phase is Phase.HEADS:
            heads += f"""
             WHERE w.modified_at >= %(resend_from)s OR {_unseen("w.row_xmin")}"""
        skip = ""
    # The reader's readable channels among the window's home channels: at most one lookup per
    # distinct channel of the window (never a scan of the community's channels), then a hash.
    readable_homes = f"""
            SELECT ch.channel_id FROM (SELECT DISTINCT channel_id FROM s) x
              JOIN channels ch
                ON ch.community_id = %(community)s AND ch.channel_id = x.channel_id
             WHERE {channel_row_readable("ch")}
                   {_narrow("ch.channel_id", channels_param, "uuid")}"""
    candidates = f"""
            SELECT s.at, s.pos, s.pos::text AS key, s.artifact_id, s.event_id, s.deleted,
                   s.channel_id IN (SELECT channel_id FROM rc) AS home_ok
              FROM s
             WHERE TRUE{_narrow("s.artifact_type", "types" if has_types else None, "text")}{skip}"""
    if phase is Phase.FULL:
        hits = f"""
            SELECT c.at, c.pos, c.key, c.artifact_id, e.raw, NULL::text AS reason
              FROM c CROSS JOIN LATERAL ({_HEAD_EVENT}) e
             WHERE c.home_ok AND {head_shown("c.deleted", "e.deleted_at")}
             ORDER BY c.at, c.pos LIMIT %(want)s"""
    else:
        moved_from_readable = f"""EXISTS (
                SELECT 1 FROM artifact_revisions mv
                 WHERE mv.community_id = %(community)s AND mv.artifact_id = c.artifact_id
                   AND mv.source_channel_id IS NOT NULL AND mv.modified_at >= %(low)s
                   {_narrow("mv.source_channel_id", channels_param, "uuid")}
                   AND {channel_readable("mv.source_channel_id")})"""
        hits = f"""
            SELECT c.at, c.pos, c.key, c.artifact_id,
                   CASE WHEN c.home_ok AND {head_shown("c.deleted", "e.deleted_at")}
                        THEN e.raw END AS raw,
                   CASE WHEN NOT c.home_ok THEN 'moved'
                        WHEN c.deleted THEN 'deleted'
                        WHEN e.deleted_at IS NOT NULL THEN 'redacted'
                        ELSE 'access' END AS reason
              FROM c LEFT JOIN LATERAL ({_HEAD_EVENT}) e ON TRUE
             WHERE c.home_ok OR {moved_from_readable}
             ORDER BY c.at, c.pos LIMIT %(want)s"""
    # MATERIALIZED throughout: each step is computed once, in the window's order of size, and
    # the planner cannot copy the readability test into every expression that uses it.
    return f"""
        WITH w AS MATERIALIZED ({_window(phase, with_cursor=with_cursor)}),
             s AS MATERIALIZED ({heads}),
             rc AS MATERIALIZED ({readable_homes}),
             c AS MATERIALIZED ({candidates}),
             hits AS ({hits})
        SELECT false AS is_trailer, at, pos, key, artifact_id::text, raw, reason,
               NULL::bigint AS scanned FROM hits
        UNION ALL
        SELECT true, at, pos, key, NULL, NULL, NULL, n FROM (
            SELECT w.{at} AS at, w.{key} AS pos, w.{key}::text AS key, count(*) OVER () AS n
              FROM w ORDER BY w.{at} DESC, w.{key} DESC LIMIT 1) last
        ORDER BY is_trailer, at, pos"""


@cache
def catchup_sql(*, with_cursor: bool, has_types: bool) -> str:
    """One window of the round's catch-up (PROTOCOL.md section 5) in one channel of C: at most
    %(window)s heads of channel %(cu_channel)s after artifact %(cu_key)s (with a cursor), on
    `artifact_heads_channel` in artifact order; of those, the first %(want)s that are readable
    with `modified_at` < T come back as events, then a trailer row (the window's last artifact
    and row count). The catch-up names no removals: a head it skips is left to the round's own
    scan or was never in the collection.

    Result columns: is_trailer (false for a hit, true for the trailer), artifact id (uuid),
    stored event JSON (hits only), window row count (trailer only): `CatchupTrailer` names the
    trailer's.
    """
    cursor = " AND r.artifact_id > %(cu_key)s::uuid" if with_cursor else ""
    types = _narrow("w.artifact_type", "types" if has_types else None, "text")
    return f"""
        WITH w AS MATERIALIZED (
            SELECT r.artifact_id, r.event_id, r.artifact_type, r.deleted, r.modified_at
              FROM artifact_heads r
             WHERE r.community_id = %(community)s AND r.channel_id = %(cu_channel)s::uuid{cursor}
             ORDER BY r.artifact_id LIMIT %(window)s),
             hits AS (
            SELECT w.artifact_id, e.raw
              FROM w CROSS JOIN LATERAL (
                   SELECT ev.raw, ev.deleted_at FROM events ev
                    WHERE ev.community_id = %(community)s AND ev.event_id = w.event_id) e
             WHERE w.modified_at < %(round_t)s{types}
               AND {head_shown("w.deleted", "e.deleted_at")}
               AND {channel_readable("%(cu_channel)s::uuid")}
             ORDER BY w.artifact_id LIMIT %(want)s)
        SELECT false AS is_trailer, artifact_id, raw, NULL::bigint AS scanned FROM hits
        UNION ALL
        SELECT true, artifact_id, NULL, n FROM (
            SELECT w.artifact_id, count(*) OVER () AS n
              FROM w ORDER BY w.artifact_id DESC LIMIT 1) last
        ORDER BY is_trailer, artifact_id"""
