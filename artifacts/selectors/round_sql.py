"""The statements a round's pages run, one pair per phase.

Each phase walks one ordered stream of candidates in bounded steps:

- FULL: heads with `modified_at < T`, on `artifact_heads_modified` in (modified_at, artifact_id)
  order; only readable heads matching the filter come out (as events).
- HEADS: heads with `modified_at` in [W - overlap, T), same index and order.
- MOVES: accepted moves with `modified_at` in [W - overlap, T), on `artifact_revisions_moves` in
  (modified_at, event_id) order, each standing for its artifact's current head. Artifacts whose
  head is itself in [W - overlap, T) were classified by the HEADS phase with the same state (any
  later change carries a stamp >= T), so they are left out.

The *hits* statement scans at most `budget` stream rows (inner LIMIT), classifies them by the
snapshot of the page and returns the first `want` that name something, lazily: PostgreSQL stops
the scan once `want` rows came out. For HEADS and MOVES a candidate comes out as an event when it
is readable and matches the filter, otherwise as a removal, **but only if** its current home or
the source of one of its moves stamped at or after W - overlap is a channel P can read now within
the filter's `#h` (the removal rule): nothing else is ever named to P. Candidates whose type the
filter or the policy excludes are skipped: the reader's view (constant between resets) never let
them into its collection.

The *boundary* statement (index-only) says how far the scan got and whether the stream ended,
for pages that come out short.
"""

from __future__ import annotations

from dataclasses import dataclass

from artifacts.selectors.readability import channel_readable, head_readable, policy_allows
from artifacts.tokens import Phase


@dataclass(frozen=True, slots=True)
class PhaseSql:
    hits: str
    boundary: str


def _narrow(column: str, param: str | None, cast: str) -> str:
    return f" AND {column} = ANY(%({param})s::{cast}[])" if param else ""


# Position columns of each stream, in index order.
_POSITION = {
    Phase.FULL: ("modified_at", "artifact_id"),
    Phase.HEADS: ("modified_at", "artifact_id"),
    Phase.MOVES: ("modified_at", "event_id"),
}


def _stream(phase: Phase, *, with_cursor: bool, columns: str) -> str:
    """The phase's stream as a subquery scanning at most %(budget)s rows from the cursor."""
    at, key = _POSITION[phase]
    if phase is Phase.MOVES:
        table = "artifact_revisions r"
        alias = "r"
        where = "r.source_channel_id IS NOT NULL AND r.modified_at >= %(low)s"
        key_param = "%(cursor_key)s"
    else:
        table = "artifact_heads r"
        alias = "r"
        where = "r.modified_at >= %(low)s" if phase is Phase.HEADS else "TRUE"
        key_param = "%(cursor_key)s::uuid"
    cursor = (
        f" AND ({alias}.{at}, {alias}.{key}) > (%(cursor_at)s, {key_param})" if with_cursor else ""
    )
    return f"""SELECT {columns}
              FROM {table}
             WHERE {alias}.community_id = %(community)s AND {alias}.modified_at < %(round_t)s
               AND {where}{cursor}
             ORDER BY {alias}.{at}, {alias}.{key} LIMIT %(budget)s"""


def phase_sql(phase: Phase, *, with_cursor: bool, has_channels: bool, has_types: bool) -> PhaseSql:
    """The hits and boundary statements of `phase`. Parameters: community, reader, round_t,
    low (W - overlap), budget, want, cursor_at/cursor_key (with a cursor), filter_h/filter_type
    (when the filter has them)."""
    channels_param = "filter_h" if has_channels else None
    types_param = "filter_type" if has_types else None
    at, key = _POSITION[phase]
    order = f"s.{at}, s.{key}"
    if phase is Phase.MOVES:
        stream = _stream(
            phase, with_cursor=with_cursor, columns="r.modified_at, r.event_id, r.artifact_id"
        )
        head_join = (
            "JOIN artifact_heads h"
            " ON h.community_id = %(community)s AND h.artifact_id = s.artifact_id"
        )
        head, key_text = "h", "s.event_id"
    else:
        stream = _stream(
            phase,
            with_cursor=with_cursor,
            columns="r.modified_at, r.artifact_id, r.event_id, r.channel_id, r.artifact_type, "
            "r.deleted",
        )
        head_join, head, key_text = "", "s", "s.artifact_id::text"
    common_from = f"""
          FROM ({stream}) s
          {head_join}
          JOIN communities co ON co.id = %(community)s
          LEFT JOIN events e ON e.community_id = %(community)s AND e.event_id = {head}.event_id"""
    home_in_filter = _narrow(f"{head}.channel_id", channels_param, "uuid")
    type_in_filter = _narrow(f"{head}.artifact_type", types_param, "text")

    if phase is Phase.FULL:
        hits = f"""
        SELECT s.modified_at, {key_text}, s.artifact_id::text, e.raw, NULL::text
          {common_from}
         WHERE {head_readable(head, "e")}{home_in_filter}{type_in_filter}
         ORDER BY {order}
         LIMIT %(want)s"""
    else:
        moved_from_readable = f"""EXISTS (
            SELECT 1 FROM artifact_revisions mv
             WHERE mv.community_id = %(community)s AND mv.artifact_id = {head}.artifact_id
               AND mv.source_channel_id IS NOT NULL AND mv.modified_at >= %(low)s
               {_narrow("mv.source_channel_id", channels_param, "uuid")}
               AND {channel_readable("mv.source_channel_id")})"""
        skip_own_heads = (
            f" AND NOT ({head}.modified_at >= %(low)s AND {head}.modified_at < %(round_t)s)"
            if phase is Phase.MOVES
            else ""
        )
        hits = f"""
        SELECT s.modified_at, {key_text}, {head}.artifact_id::text,
               CASE WHEN k.home_ok AND NOT {head}.deleted AND e.deleted_at IS NULL
                    THEN e.raw END,
               CASE WHEN NOT k.home_ok THEN 'moved'
                    WHEN {head}.deleted THEN 'deleted'
                    WHEN e.deleted_at IS NOT NULL THEN 'redacted'
                    ELSE 'access' END
          {common_from}
          CROSS JOIN LATERAL (
                SELECT {channel_readable(f"{head}.channel_id")}{home_in_filter} AS home_ok) k
         WHERE {policy_allows(f"{head}.artifact_type")}{type_in_filter}{skip_own_heads}
           AND (k.home_ok OR {moved_from_readable})
         ORDER BY {order}
         LIMIT %(want)s"""

    positions = _stream(phase, with_cursor=with_cursor, columns=f"r.{at}, r.{key}")
    boundary = f"""
        WITH s AS MATERIALIZED ({positions})
        SELECT (SELECT count(*) FROM s), s.{at}, s.{key}::text
          FROM s ORDER BY s.{at} DESC, s.{key} DESC LIMIT 1"""
    return PhaseSql(hits=hits, boundary=boundary)
