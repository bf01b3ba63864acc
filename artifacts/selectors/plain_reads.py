"""Plain `POST /query` reads: readable current heads or readable revisions, newest first.

Ordered by `created_at` descending, then event id ascending (PROTOCOL.md section 5), at most
`offset + limit` <= 11,000 rows per filter. Readability is decided in the statement
(artifacts.selectors.readability); each row's stored event JSON is returned as stored. A hot
standby within the lag bound may serve them (artifacts.selectors.standby).
"""

from __future__ import annotations

from typing import Any

from artifacts.selectors.filters import QueryFilter
from artifacts.selectors.readability import head_readable, in_values, revision_readable
from artifacts.selectors.standby import standby_read

# Tags with a column of their own; every other `#<name>` is matched in the event's tags.
_CURRENT_COLUMNS = {"d": ("h.artifact_id", True), "h": ("h.channel_id", True),
                    "type": ("h.artifact_type", False)}
_HISTORY_COLUMNS = {"d": ("r.artifact_id", True), "h": ("r.channel_id", True),
                    "type": ("h.artifact_type", False)}


def _tag_predicates(
    query: QueryFilter, columns: dict[str, tuple[str, bool]], params: dict[str, Any]
) -> str:
    clauses = []
    for index, (name, values) in enumerate(sorted(query.tags.items())):
        if name in columns:
            column, is_uuid = columns[name]
            params[f"tag{index}"] = list(values)
            clauses.append(in_values(column, f"tag{index}", uuid=is_uuid))
        else:
            params[f"tagname{index}"] = name
            params[f"tag{index}"] = list(values)
            clauses.append(
                "EXISTS (SELECT 1 FROM jsonb_array_elements(e.raw::jsonb -> 'tags') AS t(tag)"
                f" WHERE t.tag ->> 0 = %(tagname{index})s"
                f" AND t.tag ->> 1 = ANY(%(tag{index})s::text[]))"
            )
    return "".join(f" AND {clause}" for clause in clauses)


def plain_query(*, community_id: int, reader: str, query: QueryFilter) -> list[str]:
    """The stored JSON of the events `query` selects for `reader`, in the protocol's order."""
    params: dict[str, Any] = {
        "community": community_id,
        "reader": reader,
        "limit": query.limit,
        "offset": query.offset,
    }
    if query.artifact == "current":
        sql = f"""
            SELECT e.raw
              FROM artifact_heads h
              JOIN communities co ON co.id = h.community_id
              LEFT JOIN events e ON e.community_id = h.community_id AND e.event_id = h.event_id
             WHERE h.community_id = %(community)s AND {head_readable('h', 'e')}
                   {_tag_predicates(query, _CURRENT_COLUMNS, params)}
             ORDER BY h.created_at DESC, h.event_id ASC
             LIMIT %(limit)s OFFSET %(offset)s"""
    else:
        sql = f"""
            SELECT e.raw
              FROM artifact_revisions r
              JOIN artifact_heads h
                ON h.community_id = r.community_id AND h.artifact_id = r.artifact_id
              JOIN communities co ON co.id = r.community_id
              JOIN events e ON e.community_id = r.community_id AND e.event_id = r.event_id
             WHERE r.community_id = %(community)s AND {revision_readable('r', 'h', 'e')}
                   {_tag_predicates(query, _HISTORY_COLUMNS, params)}
             ORDER BY r.created_at DESC, r.event_id ASC
             LIMIT %(limit)s OFFSET %(offset)s"""
    # Plain reads promise no read-your-writes: a standby within the lag bound may serve them.
    with standby_read() as cursor:
        cursor.execute(sql, params)
        return [row[0] for row in cursor.fetchall()]

