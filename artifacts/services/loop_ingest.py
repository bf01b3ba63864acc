"""An ingest from the server's event loop, as both entry points run it (`POST /event`, WebSocket
EVENT): the checks on the loop, the write on the loop's asyncio pool (`async_ingest`): no
database thread on the write path. With group commit on (RELAY_GROUP_COMMIT), the write joins
the loop's next batch (`group_commit`): writes arriving while one transaction is in flight share
the next."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Collection
from typing import Any

import psycopg
from django.conf import settings

from artifacts.models import Community
from artifacts.selectors.async_reads import connection_pool, note_used
from artifacts.services.async_ingest import apply_event_async
from artifacts.services.group_commit import group_commit
from artifacts.services.ingest import IngestResult, check_event, database_failure
from nostr.events import Event

__all__ = ["ingest_on_loop"]


async def ingest_on_loop(
    *,
    community: Community,
    raw: bytes | str,
    authenticated_pubkeys: Collection[str],
    parsed: dict[str, Any] | None = None,
    conn: psycopg.AsyncConnection[Any] | None = None,
    release: Callable[[], Awaitable[None]] | None = None,
) -> IngestResult:
    """`ingest.ingest_event` from the loop. `conn`, when given, is an idle connection of the
    loop's pool the caller holds (left idle), else one is taken from the pool. With group
    commit, a write that finds nothing in flight goes at once on `conn`; one that must wait
    for the next batch awaits `release` (which gives `conn` back) first
    (`GroupCommit.apply`)."""
    now = int(time.time())
    checked = check_event(
        community=community, raw=raw, authenticated_pubkeys=authenticated_pubkeys, now=now,
        parsed=parsed,
    )
    if isinstance(checked, IngestResult):
        return checked
    if settings.RELAY_GROUP_COMMIT:
        return await group_commit().apply(
            community_id=community.pk, event=checked, now=now, conn=conn, release=release)
    if conn is not None:
        return await _write(conn, community, checked, now)
    try:
        async with (await connection_pool()).connection() as pooled:
            return await _write(pooled, community, checked, now)
    except psycopg.OperationalError as exc:  # no connection to be had (PoolTimeout among them)
        return database_failure(checked.id, exc)


async def _write(
    conn: psycopg.AsyncConnection[Any], community: Community, event: Event, now: int
) -> IngestResult:
    result = await apply_event_async(conn, community_id=community.pk, event=event, now=now)
    if result.failure is None:
        note_used(conn)
    return result
