"""Incremental pages on asyncio connections: the HTTP edge's driver of `page_steps`.

The same page as `rounds.read_page` (the statements come from `rounds.page_steps`, written once):
the fence is read afresh before the snapshot (a statement of its own), the page runs in
one REPEATABLE READ, read-only transaction under the read budget, and its statements are
prepared on the server. The connections come from a pool of their own per process and event
loop, opened on first use, named like the relay's other connections (readiness item 4 reads the
name).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from typing import Any
from weakref import WeakKeyDictionary

import psycopg
from django.conf import settings
from psycopg import sql
from psycopg_pool import AsyncConnectionPool

from artifacts.db import psycopg_connect_kwargs, server_spoke_while_idle
from artifacts.models import Community
from artifacts.selectors.budget import read_settings_sql
from artifacts.selectors.communities import (
    community_for_host_async,
    community_from_row,
    lookup_statement,
)
from artifacts.selectors.fence import read_fence_async
from artifacts.selectors.rounds import Page, RoundRequest, page_steps

__all__ = [
    "OpenRead",
    "begin_read",
    "connection_pool",
    "lookup_community",
    "note_used",
    "read_page_async",
]

_pools: WeakKeyDictionary[asyncio.AbstractEventLoop, AsyncConnectionPool] = WeakKeyDictionary()
# When each pooled connection last finished a page: one used that recently is not checked again.
_last_used: WeakKeyDictionary[psycopg.AsyncConnection[Any], float] = WeakKeyDictionary()
RECENT_SECONDS = 2.0

_BEGIN = f"BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY; {read_settings_sql()}"
_HOST = "%(host)s"


@cache
def _begin_and_lookup() -> str:
    return f"{_BEGIN}; {lookup_statement()}"


async def connection_pool() -> AsyncConnectionPool:
    """This event loop's pool (at most DATABASE_POOL_SIZE connections), opened on first use."""
    loop = asyncio.get_running_loop()
    pool = _pools.get(loop)
    if pool is None:
        pool = AsyncConnectionPool(
            kwargs={**psycopg_connect_kwargs(), "autocommit": True},
            min_size=1,
            max_size=settings.CONFIG.database_pool_size,
            timeout=5,
            max_idle=300,
            check=_check_unless_recently_used,
            open=False,
            name="buzz-fast-reads",
        )
        _pools[loop] = pool
        await pool.open(wait=False)
    return pool


async def _check_unless_recently_used(conn: psycopg.AsyncConnection[Any]) -> None:
    """The pool's check on checkout (a round trip), skipped for a connection that finished a
    page in the last RECENT_SECONDS (under load every connection has) unless the server has
    spoken on it since: a restarted PostgreSQL says so on every session it ends, and the check
    then finds the connection broken and the pool replaces it before the page, not after a
    503."""
    recently_used = time.monotonic() - _last_used.get(conn, -RECENT_SECONDS) < RECENT_SECONDS
    if recently_used and not server_spoke_while_idle(conn):
        return
    await AsyncConnectionPool.check_connection(conn)


async def lookup_community(host: str) -> Community | None:
    """The community served at `host`, on this loop's pool: one round trip. The connection
    counts as recently used afterwards, like a page's: without that, every lookup-only request
    (`POST /event`, NIP-11) paid the pool's check, a second round trip, on checkout."""
    pool = await connection_pool()
    async with pool.connection() as conn:
        community = await community_for_host_async(conn, host)
        note_used(conn)
    return community


def note_used(conn: psycopg.AsyncConnection[Any]) -> None:
    """`conn` just finished its work: the pool need not check it on its next checkout."""
    _last_used[conn] = time.monotonic()


@dataclass(frozen=True, slots=True)
class OpenRead:
    """A page's transaction, begun on `cursor`'s connection after its fence was read."""

    cursor: psycopg.AsyncCursor[Any]
    fence: datetime


async def begin_read(
    conn: psycopg.AsyncConnection[Any], host: str
) -> tuple[OpenRead, Community | None]:
    """Read the fence, then begin the page's transaction and look up the community served at
    `host` (lowercase, no port) in it: two round trips (the fence, read afresh for every page;
    then one simple-protocol batch, the host quoted as a literal). The community is None when
    none is served there; the caller then rolls back (returning the connection to the pool
    does).

    The lookup (`communities.lookup_statement`, the same as every other driver's) takes the
    page's snapshot, which the page then classifies by: it runs after the fence was read, as
    the fence requires.
    """
    fence = await read_fence_async(conn)
    cursor = conn.cursor()
    # Composed by string, the host quoted by psycopg: `sql.SQL.format` cost 10% of a round's
    # CPU in a profile (it builds a tree of objects for every request).
    await cursor.execute(_begin_and_lookup().replace(_HOST, sql.quote(host.lower())).encode())
    while cursor.nextset():  # BEGIN and the settings come first; the lookup's rows are last
        pass
    row = await cursor.fetchone()
    return OpenRead(cursor, fence), (community_from_row(row) if row is not None else None)


async def read_page_async(
    read: OpenRead, request: RoundRequest, *, ready: bool, identity: str
) -> Page:
    """One page of `request`'s round in the transaction `read` began; commits it.

    Raises psycopg's errors: QueryCanceled past the read budget, OperationalError when the
    database is unavailable. A failed page leaves its transaction open; the pool rolls it back
    when the connection is returned.
    """
    cursor = read.cursor
    steps = page_steps(request, fence=read.fence, identity=identity, ready=ready)
    try:
        statement = next(steps)
        while True:
            await cursor.execute(statement[0], statement[1], prepare=True)
            statement = steps.send(await cursor.fetchall())
    except StopIteration as done:
        page: Page = done.value
    await cursor.execute("COMMIT")
    note_used(cursor.connection)
    return page
