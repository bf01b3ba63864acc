"""Incremental pages on asyncio connections: the HTTP edge's driver of `page_steps`.

The same page as `rounds.read_page` (the statements come from `rounds.page_steps`, written once):
the fence is read afresh before the snapshot (in a transaction of its own, at the head of the
page's first round trip: `fence.fence_then`), the page runs in
one REPEATABLE READ, read-only transaction under the read budget, and its statements are
prepared on the server. The connections come from a pool of their own per process and event
loop, opened on first use, named like the relay's other connections (readiness item 4 reads the
name).

A page that may be quiet (`rounds.may_be_quiet`: the next continuation round, which most polls
of a quiet community are) sends its first statement and COMMIT as one simple-protocol message:
the statement prepared in the session (`QUIET_PAGE_STATEMENT`), its values written into the
message. When the first statement's rows say the page needs more, its snapshot is gone, and the
page is read again from the start in a new one: exactly a page served a moment later (the
fence was read before both snapshots), at the cost of a round trip and the first statement
again. So a community whose continuations lately needed more is read the plain way for the
overlap's length, the time a write keeps its continuations busy (`_expect_quiet`).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import cache, lru_cache
from typing import Any
from weakref import WeakKeyDictionary

import psycopg
from django.conf import settings
from psycopg import sql
from psycopg.pq import ExecStatus, TransactionStatus
from psycopg_pool import AsyncConnectionPool

from artifacts.models import Community
from artifacts.selectors.budget import read_settings_sql
from artifacts.selectors.communities import (
    community_for_host_async,
    community_from_row,
    lookup_statement,
)
from artifacts.selectors.fence import fence_then, prepare_fence
from artifacts.selectors.rounds import (
    FIRST_STATEMENT_PARAMS,
    Page,
    PageSteps,
    RoundRequest,
    first_statement,
    may_be_quiet,
    page_steps,
)
from relaycore.db import (
    RECENT_SECONDS,
    pool_options,
    prepare_in_session,
    psycopg_connect_kwargs,
    server_spoke_while_idle,
)
from relaycore.steps import Rows, Statement, drive_async

__all__ = [
    "OpenRead",
    "ReadConnection",
    "begin_read",
    "configure_connection",
    "connection_pool",
    "end_read",
    "lookup_community",
    "note_used",
    "prepare_session",
    "read_page_async",
    "roll_back",
]

_pools: WeakKeyDictionary[asyncio.AbstractEventLoop, AsyncConnectionPool] = WeakKeyDictionary()
# When each pooled connection last finished a page: one used that recently is not checked again.
_last_used: WeakKeyDictionary[psycopg.AsyncConnection[Any], float] = WeakKeyDictionary()

_BEGIN = f"BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY; {read_settings_sql()}"
_HOST = "%(host)s"


def fence_prepared() -> bool:
    """Whether the pool's sessions hold the fence as a prepared statement: not when prepared
    statements are off, nor behind a transaction pooler (a session's names do not follow a
    transaction to another server connection)."""
    config = settings.CONFIG
    return config.database_prepared_statements and config.database_pooler != "transaction"


@cache
def _fence_begin_and_lookup(prepared: bool) -> str:
    return fence_then(f"{_BEGIN}; {lookup_statement()}", prepared=prepared)


@lru_cache(maxsize=256)
def _batch_for_host(prepared: bool, host: str) -> bytes:
    """`begin_read`'s batch for `host`, composed by string, the host quoted by psycopg
    (`sql.SQL.format` cost 10% of a round's CPU in a profile: it builds a tree of objects for
    every request), and remembered: a relay serves a few hosts, and quoting one again for every
    round cost 2% of it (`bench/profile_round.py`). Bounded: the Host header is the client's."""
    return _fence_begin_and_lookup(prepared).replace(_HOST, sql.quote(host)).encode()


class ReadConnection(psycopg.AsyncConnection[Any]):
    """A connection of the read pool. It serves one request at a time, so it keeps one cursor
    for the pages it serves (`page_cursor`): a new psycopg cursor copies the connection's
    adapter map, and a page's was built and freed again every round (docs/performance.md,
    "Quiet rounds, a fourth pass")."""

    _page_cursor: psycopg.AsyncCursor[Any] | None = None

    def page_cursor(self) -> psycopg.AsyncCursor[Any]:
        cursor = self._page_cursor
        if cursor is None or cursor.closed:
            cursor = self._page_cursor = self.cursor()
        return cursor


def _cursor_for_page(conn: psycopg.AsyncConnection[Any]) -> psycopg.AsyncCursor[Any]:
    """The read pool's kept cursor; a cursor of its own for a connection from elsewhere (the
    tests', `bench/round_floor.py`'s recording)."""
    return conn.page_cursor() if isinstance(conn, ReadConnection) else conn.cursor()


# A page's first statement prepared by name in each session of the pool, with its parameters
# (rounds.FIRST_STATEMENT_PARAMS) in order, for the quiet page's one message.
QUIET_PAGE_STATEMENT = "buzz_quiet_page"
_QUIET_PAGE_TYPES = ("bigint", "text", "timestamptz", "timestamptz")


@cache
def _quiet_page_definition() -> str:
    statement = first_statement()
    for position, name in enumerate(FIRST_STATEMENT_PARAMS, start=1):
        statement = statement.replace(f"%({name})s", f"${position}")
    return f"({', '.join(_QUIET_PAGE_TYPES)}) AS {statement}"


async def prepare_session(
    conn: psycopg.AsyncConnection[Any], *, unless_prepared: bool = False
) -> None:
    """Prepare the session's statements (the fence, the quiet page's first statement), outside
    any transaction; with `unless_prepared`, only those the session does not hold."""
    await prepare_fence(conn, unless_prepared=unless_prepared)
    await prepare_in_session(conn, QUIET_PAGE_STATEMENT, _quiet_page_definition(),
                             unless_prepared=unless_prepared)


async def configure_connection(conn: psycopg.AsyncConnection[Any]) -> None:
    """What each new connection of the pool gets before its first use (bench/round_floor.py
    gives its own connections the same)."""
    if fence_prepared():
        await prepare_session(conn)


async def connection_pool() -> AsyncConnectionPool:
    """This event loop's pool (at most DATABASE_POOL_SIZE connections), opened on first use."""
    loop = asyncio.get_running_loop()
    pool = _pools.get(loop)
    if pool is None:
        pool = AsyncConnectionPool(
            connection_class=ReadConnection,
            kwargs={**psycopg_connect_kwargs(), "autocommit": True},
            # Django's pool's sizes, timeouts and reconnection bound (one definition).
            **pool_options(),
            check=_check_unless_recently_used,
            configure=configure_connection,
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
    `host` (lowercase, no port) in it: one round trip, a simple-protocol batch with the host
    quoted as a literal (`fence.fence_then`: the fence in a transaction of its own, read afresh
    for every page, then the page's). The community is None when none is served there; the
    caller then ends the transaction (`end_read`).

    The lookup (`communities.lookup_statement`, the same as every other driver's) takes the
    page's snapshot, which the page then classifies by: it runs after the fence was read, as
    the fence requires.
    """
    prepared = fence_prepared()
    batch = _batch_for_host(prepared, host.lower())
    cursor = _cursor_for_page(conn)
    try:
        await cursor.execute(batch)
    except psycopg.errors.InvalidSqlStatementName:
        if not prepared:
            raise
        # The session lost the fence since it was configured (`roll_back` says how): the
        # batch failed at the fence, before the page's transaction began.
        await roll_back(conn)
        await cursor.execute(batch)
    rows = []
    while True:  # the fence's row first, the lookup's last; BEGIN, COMMIT and SET have none
        # Asked of the result's status, not `cursor.description`: that builds a Column object
        # for every column of the result each time it is read (19 a page; profile_round).
        if cursor.pgresult is not None and cursor.pgresult.status == ExecStatus.TUPLES_OK:
            rows.append(await cursor.fetchone())
        if not cursor.nextset():
            break
    fence_row, found = rows[0], rows[-1]
    assert fence_row is not None
    community = community_from_row(found) if found is not None else None
    return OpenRead(cursor, fence_row[0]), community


async def roll_back(conn: psycopg.AsyncConnection[Any]) -> None:
    """ROLLBACK the connection's transaction, keeping the session as `configure_connection`
    left it: after a ROLLBACK psycopg deallocates every statement the session prepared (it
    cannot tell whether the transaction created what they refer to), the fence's among them,
    when psycopg had prepared any of its own (and the quiet page's)."""
    await conn.rollback()
    if fence_prepared():
        await prepare_session(conn, unless_prepared=True)


async def end_read(conn: psycopg.AsyncConnection[Any]) -> None:
    """End the page's transaction if it is still open (a plain read does not use it; a refusal
    after `begin_read` leaves it), with COMMIT rather than ROLLBACK: it is read-only, so both
    end it alike, but after a ROLLBACK psycopg deallocates every statement the session had
    prepared (the pool rolls back what is returned open), and the next pages on the connection
    would plan theirs again (0.6 ms each) and prepare the fence again. A failed transaction is
    left to the pool, which rolls it back."""
    if conn.info.transaction_status == TransactionStatus.INTRANS:
        await conn.commit()


async def read_page_async(
    read: OpenRead,
    request: RoundRequest,
    *,
    ready: bool,
    identity: str,
    overlap: timedelta | None = None,
) -> Page:
    """One page of `request`'s round in the transaction `read` began; commits it (a page that
    may be quiet, in its first statement's message: the module's docstring). `overlap`: the
    setting's unless given (as `rounds.read_page`'s).

    Raises psycopg's errors: QueryCanceled past the read budget, OperationalError when the
    database is unavailable. A failed page leaves its transaction open; the pool rolls it back
    when the connection is returned.
    """
    cursor = read.cursor
    if overlap is None:
        overlap = timedelta(seconds=settings.ARTIFACT_SYNC_OVERLAP_SECONDS)

    def steps() -> PageSteps:
        return page_steps(request, fence=read.fence, identity=identity, ready=ready,
                          overlap=overlap)

    if not may_be_quiet(request) or not fence_prepared():
        page, _ = await _plain_page(cursor, steps())
    elif not _expect_quiet(request.community_id):
        page, statements = await _plain_page(cursor, steps())
        if statements > 1:
            _note_not_quiet(request.community_id, overlap)
    elif (quiet := await _quiet_page(cursor, steps())) is not None:
        page = quiet
    else:
        _note_not_quiet(request.community_id, overlap)
        await cursor.execute(_BEGIN)  # the page again, in a new snapshot
        page, _ = await _plain_page(cursor, steps())
    if page.store is not None:
        # The sets the token names by digest, stored before the token is handed out (the
        # connection is in autocommit: one statement, one transaction).
        await cursor.execute(page.store[0], page.store[1])
    note_used(cursor.connection)
    return page


async def _plain_page(cursor: psycopg.AsyncCursor[Any], steps: PageSteps) -> tuple[Page, int]:
    """The page, each statement a round trip, then COMMIT: (the page, its statements)."""
    statements = 0

    async def run(statement: Statement) -> Rows:
        nonlocal statements
        statements += 1
        await cursor.execute(statement[0], statement[1], prepare=True)
        return await cursor.fetchall()

    page = await drive_async(steps, run)
    await cursor.execute("COMMIT")
    return page, statements


async def _quiet_page(cursor: psycopg.AsyncCursor[Any], steps: PageSteps) -> Page | None:
    """The page's first statement and COMMIT in one simple-protocol message: the page when it
    needed nothing more, else None (the transaction is over, and the page must start again).
    A session that lost its prepared statements (a ROLLBACK on it, see `roll_back`) prepares
    them again, and the page starts again."""
    _sql, params = next(steps)
    assert isinstance(params, dict)
    try:
        await cursor.execute(_quiet_message(params))
    except psycopg.errors.InvalidSqlStatementName:
        await roll_back(cursor.connection)
        steps.close()
        return None
    rows = await cursor.fetchall()
    cursor.nextset()  # COMMIT's
    try:
        steps.send(rows)
    except StopIteration as done:
        page: Page = done.value
        return page
    steps.close()
    return None


def _quiet_message(params: dict[str, Any]) -> str:
    """`EXECUTE` of the session's first statement with `params` written as literals, then
    COMMIT. The values are the relay's own, not a client's text: the community's id, the
    authenticated reader's key (hex; checked again here to be 64 ASCII letters or digits, so
    nothing in it can end the literal), two aware datetimes."""
    community, reader = int(params["community"]), params["reader"]
    low: datetime = params["pending_low"]
    t: datetime = params["pending_t"]
    if len(reader) != 64 or not reader.isalnum() or not reader.isascii():
        raise ValueError(f"not a public key: {reader!r}")
    return (f"EXECUTE {QUIET_PAGE_STATEMENT}({community}, '{reader}',"
            f" '{low.isoformat()}', '{t.isoformat()}'); COMMIT")


# Communities whose continuation pages lately needed more than their first statement, with the
# monotonic time until which their pages are read the plain way (one guess per community, not
# per reader: a write within the overlap keeps every continuation of its community busy). A
# wrong guess either way costs time, never a different page. Bounded: past NOT_QUIET_MAX
# entries the guesses start over.
NOT_QUIET_MAX = 10_000
_not_quiet_until: dict[int, float] = {}


def _expect_quiet(community_id: int) -> bool:
    until = _not_quiet_until.get(community_id)
    return until is None or until <= time.monotonic()


def _note_not_quiet(community_id: int, overlap: timedelta) -> None:
    if len(_not_quiet_until) >= NOT_QUIET_MAX and community_id not in _not_quiet_until:
        _not_quiet_until.clear()
    _not_quiet_until[community_id] = time.monotonic() + max(overlap.total_seconds(), 1.0)
