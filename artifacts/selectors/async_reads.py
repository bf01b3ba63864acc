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

Such a page may go further still, into the page's first message itself (`begin_read` with a
`guess`, `guess_round`): the request's community guessed from its host (the community last
served there), its reader from the auth header's key, both before either is checked, so the
one message reads the fence, begins the transaction, looks the community up, runs the first
statement and commits. The guessed page is answered only when the lookup in the same snapshot
names the guessed community and authentication then names the guessed reader; otherwise it is
dropped unread, and the page is read as if no guess had been made. (A guessed round whose page
may not be quiet is not read early, but its decoded token is still the request's once both are
confirmed: the token is decoded once either way.)
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
from artifacts.selectors.filters import InvalidFilter, parse_query_body
from artifacts.selectors.rounds import (
    FIRST_STATEMENT_PARAMS,
    CommunityGone,
    Page,
    PageSteps,
    RoundRequest,
    finds_pending,
    first_statement,
    may_be_quiet,
    page_steps,
    prepare_round,
)
from artifacts.selectors.sync_epoch import connection_identity
from artifacts.tokens import InvalidProgress, ProgressToken
from relaycore import readiness_gate
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
    "guess_round",
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
    """A page's transaction, begun on `cursor`'s connection after its fence was read. `guess`:
    the request's round as `begin_read` was given it, once the lookup named its community;
    `answered`: its page, when the first message read it whole (whose COMMIT then ended the
    transaction)."""

    cursor: psycopg.AsyncCursor[Any]
    fence: datetime
    guess: RoundRequest | None = None
    answered: Page | None = None


async def begin_read(
    conn: psycopg.AsyncConnection[Any], host: str, *, guess: RoundRequest | None = None,
    ready: bool | None = None, overlap: timedelta | None = None,
) -> tuple[OpenRead, Community | None]:
    """Read the fence, then begin the page's transaction and look up the community served at
    `host` (lowercase, no port) in it: one round trip, a simple-protocol batch with the host
    quoted as a literal (`fence.fence_then`: the fence in a transaction of its own, read afresh
    for every page, then the page's). The community is None when none is served there; the
    caller then ends the transaction (`end_read`).

    The lookup (`communities.lookup_statement`, the same as every other driver's) takes the
    page's snapshot, which the page then classifies by: it runs after the fence was read, as
    the fence requires.

    `guess` (`guess_round`): the request's round, guessed; `OpenRead.guess` once the lookup
    names its community. Its page, when it may be quiet, is read in the same message
    (the module's docstring); `OpenRead.answered` holds it when it was quiet. A guess whose
    statement fails (its read budget, say) is dropped: the batch is sent again without it, so
    the lookup's answer (a 404 first) never waits on a guess.
    `ready` and `overlap` are the guessed page's (as `read_page_async`'s): the readiness gate's
    verdict and the setting's unless given.
    """
    host = host.lower()
    if overlap is None:
        overlap = _overlap()
    prepared = fence_prepared()
    batch = _batch_for_host(prepared, host)
    identity = ""
    sent = (guess is not None and prepared and may_be_quiet(guess)
            and _expect_quiet(guess.community_id))
    if sent:
        assert guess is not None
        if ready is None:
            ready = await readiness_gate.ready_on_loop()
        identity = await connection_identity(conn)
        batch += b"; " + _guess_message(guess, overlap).encode()
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
    except psycopg.Error:
        if not sent:
            raise
        await roll_back(conn)
        return await begin_read(conn, host)
    results = []
    while True:  # the fence's rows, the lookup's, the guess's; BEGIN, COMMIT and SET have none
        # Asked of the result's status, not `cursor.description`: that builds a Column object
        # for every column of the result each time it is read (19 a page; profile_round).
        if cursor.pgresult is not None and cursor.pgresult.status == ExecStatus.TUPLES_OK:
            results.append(await cursor.fetchall())
        if not cursor.nextset():
            break
    fence: datetime = results[0][0][0]
    found = results[1]
    community = community_from_row(found[0]) if found else None
    _remember_host(host, community)
    read = OpenRead(cursor, fence)
    if guess is not None and community is not None and community.pk == guess.community_id:
        answered = None
        if sent:
            assert ready is not None
            steps = page_steps(guess, fence=fence, identity=identity, ready=ready,
                               overlap=overlap)
            answered = _guessed_page(steps, results[2])
            if answered is None:
                _note_not_quiet(guess.community_id, overlap)
        read = OpenRead(cursor, fence, guess, answered)
    return read, community


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
    if read.answered is not None and request is read.guess:
        return await _served(cursor, read.answered)
    if overlap is None:
        overlap = _overlap()
    if cursor.connection.info.transaction_status == TransactionStatus.IDLE:
        # The first message's guess committed its transaction: the page gets one of its own
        # (the fence, read before both, holds for it too).
        await cursor.execute(_BEGIN)

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
    return await _served(cursor, page)


async def _served(cursor: psycopg.AsyncCursor[Any], page: Page) -> Page:
    """`page`, its transaction over, once what it must store is stored."""
    if page.store is not None:
        # The sets the token names by digest, stored before the token is handed out (the
        # connection is in autocommit: one statement, one transaction).
        await cursor.execute(page.store[0], page.store[1])
    note_used(cursor.connection)
    return page


def _overlap() -> timedelta:
    return timedelta(seconds=settings.ARTIFACT_SYNC_OVERLAP_SECONDS)


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
    reader's key (hex; checked again here to be 64 ASCII letters or digits, so nothing in it
    can end the literal), two aware datetimes."""
    low: datetime = params["pending_low"]
    t: datetime = params["pending_t"]
    return _execute_quiet(int(params["community"]), params["reader"], low.isoformat(),
                          t.isoformat())


def _execute_quiet(community: int, reader: str, low: str, t: str) -> str:
    if not _is_key_text(reader):
        raise ValueError(f"not a public key: {reader!r}")
    return f"EXECUTE {QUIET_PAGE_STATEMENT}({community}, '{reader}', '{low}', '{t}'); COMMIT"


def _is_key_text(text: str) -> bool:
    return len(text) == 64 and text.isalnum() and text.isascii()


def guess_round(host: str, body: bytes, reader: str | None) -> RoundRequest | None:
    """The round an incremental `/query` request at `host` would read, guessed before anything
    about it is checked (`begin_read`'s `guess`): the community last served at the host,
    `reader` the key its auth header names (`nostr.nip98.claimed_pubkey`), its token decoded
    for both. None where it cannot be (a host not served lately, no key, a body or token that
    does not parse: the request's own checks then answer it). Only the caller's checks that
    follow (the lookup, authentication) make the guess the request's round."""
    community_id = _community_at.get(host.lower())
    if community_id is None or reader is None or not _is_key_text(reader):
        return None
    try:
        query = parse_query_body(body)
        if not query.incremental:
            return None
        request = prepare_round(community_id=community_id, reader=reader, query=query)
    except (InvalidFilter, InvalidProgress):
        return None
    return request


def _guess_message(guess: RoundRequest, overlap: timedelta) -> str:
    """The guessed page's first statement and COMMIT, for the end of the first message. The
    fence is not known when the message is written, so the pending range is asked up to
    infinity rather than up to it: no candidate in the wider range is none in the page's, and
    a candidate in it sends the page to be read the plain way (`_guessed_page`)."""
    decoded = guess.decoded
    assert isinstance(decoded, ProgressToken)
    low = decoded.round_t - overlap
    return _execute_quiet(guess.community_id, guess.reader, low.isoformat(), "infinity")


def _guessed_page(steps: PageSteps, rows: Rows) -> Page | None:
    """The page `steps` reads when the guess's first statement, `rows`, answers it alone."""
    next(steps)
    if finds_pending(rows):
        steps.close()  # a candidate up to infinity, perhaps not before the fence
        return None
    try:
        steps.send(rows)
    except StopIteration as done:
        page: Page = done.value
        return page
    except CommunityGone:
        return None
    steps.close()
    return None


# Hosts and the community last served at each (`guess_round`), a guess checked by every
# page it is used for. Bounded: past COMMUNITY_GUESSES_MAX hosts it starts over.
COMMUNITY_GUESSES_MAX = 256
_community_at: dict[str, int] = {}


def _remember_host(host: str, community: Community | None) -> None:
    if community is None:
        _community_at.pop(host, None)
        return
    if len(_community_at) >= COMMUNITY_GUESSES_MAX and host not in _community_at:
        _community_at.clear()
    _community_at[host] = community.pk


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
