"""The HTTP edge's asyncio pool (artifacts/selectors/async_reads.py): lookups on the loop."""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import timedelta
from typing import Any

import orjson
import psycopg
import pytest
from django.utils import timezone
from psycopg.pq import TransactionStatus
from psycopg_pool import AsyncConnectionPool

from artifacts.models import ChannelSet
from artifacts.selectors import async_reads
from artifacts.selectors.async_reads import connection_pool, lookup_community
from artifacts.selectors.fence import FENCE_STATEMENT
from artifacts.selectors.filters import parse_filter
from artifacts.selectors.rounds import prepare_round
from artifacts.selectors.sync_epoch import connection_identity
from artifacts.tokens import MAX_PRIVATE_CHANNELS
from relaycore.db import psycopg_connect_kwargs
from tests.artifacts.selectors.replica import Replica
from tests.factories import (
    Key,
    add_member,
    create_artifact,
    make_channel,
    make_community,
    make_key,
)

pytestmark = pytest.mark.django_db(transaction=True)


def test_lookups_in_steady_use_skip_the_pools_round_trip_check(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A lookup-only request (`POST /event`, NIP-11) counts as using its connection, like a
    page: in steady use the pool's check (a round trip of its own) is skipped."""
    community = make_community("lookups.example")
    checks: list[Any] = []
    real_check = AsyncConnectionPool.check_connection

    async def counted_check(conn: Any) -> None:
        checks.append(conn)
        await real_check(conn)

    monkeypatch.setattr(async_reads.AsyncConnectionPool, "check_connection", counted_check)

    async def lookups() -> list[int | None]:
        try:
            found = []
            for host in ["lookups.example", "LOOKUPS.example", "elsewhere.example"] * 4:
                served = await lookup_community(host)
                found.append(served.pk if served is not None else None)
            return found
        finally:
            await (await connection_pool()).close()

    found = asyncio.run(lookups())
    assert found == [community.pk, community.pk, None] * 4
    # A connection is checked when it is new to the pool, not again for every lookup.
    assert len(checks) == len({id(conn) for conn in checks}) < len(found), len(checks)


async def prepared_names(conn: psycopg.AsyncConnection[Any]) -> set[str]:
    cursor = await conn.execute("SELECT name FROM pg_prepared_statements")
    return {name for (name,) in await cursor.fetchall()}


def test_the_fence_survives_pages_and_is_prepared_again_after_a_rollback(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A page ends with COMMIT (`end_read`), which keeps the session's prepared statements;
    after a ROLLBACK psycopg deallocates them all, and the next page prepares the fence again
    instead of failing."""
    monkeypatch.setattr(async_reads, "fence_prepared", lambda: True)
    community = make_community("fenced.example")

    async def pages() -> None:
        async with await psycopg.AsyncConnection.connect(
            **psycopg_connect_kwargs(), autocommit=True
        ) as conn:
            await async_reads.configure_connection(conn)
            await conn.execute("SELECT 1", prepare=True)  # psycopg prepares one of its own
            for _ in range(3):
                read, found = await async_reads.begin_read(conn, "FENCED.example")
                assert found is not None and found.pk == community.pk
                await async_reads.end_read(conn)
                assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
                assert FENCE_STATEMENT in await prepared_names(conn)
            # A refused write's rollback, as psycopg performs it: everything is deallocated.
            await conn.execute("BEGIN")
            await conn.rollback()
            assert FENCE_STATEMENT not in await prepared_names(conn)
            read, found = await async_reads.begin_read(conn, "fenced.example")
            assert found is not None and found.pk == community.pk
            assert read.fence is not None
            await async_reads.end_read(conn)
            assert FENCE_STATEMENT in await prepared_names(conn)
            # `roll_back` ends a transaction and keeps the session as configured.
            await conn.execute("BEGIN")
            await async_reads.roll_back(conn)
            assert FENCE_STATEMENT in await prepared_names(conn)

    asyncio.run(pages())


def test_both_pools_share_one_definition_and_a_short_reconnection_series() -> None:
    """The asyncio pool takes Django's pool parameters, the reconnection bound among them: a
    series of reconnection attempts that psycopg_pool kept doubling for 5 minutes ends after
    seconds (tests/faults/test_postgres_restart.py measures the outage's end)."""
    from django.conf import settings
    from django.db import connections

    async def opened() -> AsyncConnectionPool:
        pool = await connection_pool()
        await pool.close()
        return pool

    pool = asyncio.run(opened())
    # Django's PostgreSQL backend builds its psycopg_pool from OPTIONS["pool"].
    django_pool = getattr(connections["default"], "pool", None)
    assert django_pool is not None
    for parameter in ("reconnect_timeout", "timeout", "max_idle"):
        assert getattr(pool, parameter) == getattr(django_pool, parameter), parameter
    assert (pool.min_size, pool.max_size) == (django_pool.min_size, django_pool.max_size)
    assert pool.reconnect_timeout == settings.POOL_RECONNECT_SECONDS < 10


def test_an_async_page_stores_the_sets_its_token_names_before_handing_it_out() -> None:
    """A reader with more private channels than a token carries: the HTTP edge's driver stores
    the set after the page's transaction, and the next page (on any instance) reads it back."""
    owner, reader = make_key(), make_key()
    community = make_community("wide.example")
    for _ in range(MAX_PRIVATE_CHANNELS + 2):
        make_channel(community, owner=owner, visibility="private", members=[reader])

    async def page(progress: str | None) -> Any:
        query = parse_filter({"artifact": "current", "progress": progress,
                              "view_changes": "incremental"})
        request = prepare_round(community_id=community.pk, reader=reader.pubkey, query=query)
        async with await psycopg.AsyncConnection.connect(
            **psycopg_connect_kwargs(), autocommit=True
        ) as conn:
            await async_reads.configure_connection(conn)
            read, _found = await async_reads.begin_read(conn, "wide.example")
            identity = await connection_identity(conn)
            return await async_reads.read_page_async(read, request, ready=True,
                                                     identity=identity)

    first = asyncio.run(page(None))
    assert first.store is not None and not first.more
    assert ChannelSet.objects.filter(community_id=community.pk).count() == 1
    add_member(community, make_channel(community, owner=owner, visibility="private"), reader)
    second = asyncio.run(page(first.progress))
    assert not second.reset and second.store is not None  # a new set: stored in turn
    assert ChannelSet.objects.filter(community_id=community.pk).count() == 2


def test_the_read_pools_connections_keep_one_cursor_for_their_pages() -> None:
    """A read pool connection serves one page at a time: its pages share one cursor (a new one
    copies the connection's adapter map), a closed one is replaced, and a connection from
    elsewhere gets a cursor of its own per page. The pages read alike either way."""
    owner, reader = make_key(), make_key()
    community = make_community("kept.example")
    make_channel(community, owner=owner, members=[reader])

    async def page(conn: psycopg.AsyncConnection[Any], progress: str | None) -> Any:
        query = parse_filter({"artifact": "current", "progress": progress})
        request = prepare_round(community_id=community.pk, reader=reader.pubkey, query=query)
        read, found = await async_reads.begin_read(conn, "kept.example")
        assert found is not None and found.pk == community.pk
        identity = await connection_identity(conn)
        served = await async_reads.read_page_async(read, request, ready=True, identity=identity)
        return read.cursor, served

    async def pages() -> None:
        pool = await connection_pool()
        try:
            async with pool.connection() as conn:
                assert isinstance(conn, async_reads.ReadConnection)
                cursor, first = await page(conn, None)
                again, second = await page(conn, first.progress)
                assert again is cursor and not second.reset and not second.more
                await cursor.close()
                replaced, third = await page(conn, second.progress)
                assert replaced is not cursor and not replaced.closed
                assert (third.events, third.reset, third.more) == ([], False, False)
        finally:
            await pool.close()
        async with await psycopg.AsyncConnection.connect(
            **psycopg_connect_kwargs(), autocommit=True
        ) as plain:
            await async_reads.configure_connection(plain)
            one, first = await page(plain, None)
            other, _second = await page(plain, first.progress)
            assert one is not other

    asyncio.run(pages())


def a_reader_of_one_artifact(
    host: str, driver: str, monkeypatch: pytest.MonkeyPatch
) -> tuple[Any, Key, str, Replica]:
    """A community at `host` with one artifact in a channel, and a replica of its one member
    reading with `driver`, no community guessed busy yet: (community, owner, channel,
    replica)."""
    monkeypatch.setattr(async_reads, "_not_quiet_until", {})
    owner, reader = make_key(), make_key()
    community = make_community(host)
    h = make_channel(community, owner=owner, members=[reader])
    create_artifact(community, owner, h)
    return community, owner, h, Replica(community, reader.pubkey, driver=driver)


def recording_statements(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, TransactionStatus]]:
    """Every statement the asyncio cursors send from here on, with the transaction status it
    was sent in."""
    statements: list[tuple[str, TransactionStatus]] = []
    real_execute = psycopg.AsyncCursor.execute

    async def recorded(self: Any, query: Any, params: Any = None, **kw: Any) -> Any:
        text = query.decode() if isinstance(query, bytes) else str(query)
        statements.append((text, self.connection.info.transaction_status))
        return await real_execute(self, query, params, **kw)

    monkeypatch.setattr(psycopg.AsyncCursor, "execute", recorded)
    return statements


def read_again(statements: list[tuple[str, TransactionStatus]]) -> None:
    """`statements` read a page again from the start: a new REPEATABLE READ transaction, every
    statement of the page in it, COMMIT last."""
    assert statements[0][0].startswith("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY")
    again = statements[1:]
    assert len(again) > 2 and again[-1][0] == "COMMIT"
    assert all(status == TransactionStatus.INTRANS for _, status in again)


def test_a_quiet_continuation_commits_in_its_first_statements_message_and_a_busy_one_reads_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A continuation page guessed quiet sends its first statement (prepared in the session)
    and COMMIT as one message, and ends with its transaction over. One that needed more (a
    write landed in its range) is read again from its first statement in one new REPEATABLE
    READ transaction and delivers the write; its community's next pages are read the plain way
    (a COMMIT of their own)."""
    community, owner, h, replica = a_reader_of_one_artifact("guess.example", "async",
                                                            monkeypatch)
    statements = recording_statements(monkeypatch)
    try:
        replica.round()  # a full round: not a guess
        assert not any(query.startswith("EXECUTE buzz_quiet_page") for query, _ in statements)
        del statements[:]
        quiet = replica.page()
        assert not quiet.events and not quiet.more and not quiet.reset
        assert len(statements) == 2  # begin_read's batch, then the page's one message
        assert statements[1][0].startswith(f"EXECUTE {async_reads.QUIET_PAGE_STATEMENT}(")
        assert statements[1][0].endswith("; COMMIT")
        assert replica._conn is not None
        assert replica._conn.info.transaction_status == TransactionStatus.IDLE

        _d, head = create_artifact(community, owner, h)
        del statements[:]
        busy = replica.page()
        assert [orjson.loads(raw)["id"] for raw in busy.events] == [head]
        assert statements[1][0].startswith("EXECUTE buzz_quiet_page")
        read_again(statements[2:])
        assert community.pk in async_reads._not_quiet_until

        del statements[:]
        assert not replica.page().events  # busy lately: the plain way, COMMIT on its own
        assert statements[-1][0] == "COMMIT" and len(statements) == 3
    finally:
        monkeypatch.undo()
        replica.close()


def test_a_quiet_page_prepares_its_statement_again_after_a_rollback(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """After a ROLLBACK psycopg deallocates every statement of the session, the quiet page's
    among them: the next quiet page prepares it again and is answered alike."""
    monkeypatch.setattr(async_reads, "_not_quiet_until", {})
    owner, reader = make_key(), make_key()
    community = make_community("again.example")
    make_channel(community, owner=owner, members=[reader])
    replica = Replica(community, reader.pubkey, driver="async")
    try:
        replica.round()
        first = replica.page()
        assert replica._loop is not None and replica._conn is not None
        conn = replica._conn
        replica._loop.run_until_complete(conn.execute("DEALLOCATE ALL"))
        assert async_reads.QUIET_PAGE_STATEMENT not in replica._loop.run_until_complete(
            prepared_names(conn))
        again = replica.page()
        assert (again.events, again.removed, again.more, again.reset) == (
            first.events, first.removed, first.more, first.reset) == ([], [], False, False)
        assert async_reads.QUIET_PAGE_STATEMENT in replica._loop.run_until_complete(
            prepared_names(conn))
    finally:
        replica.close()


def test_the_guesses_of_busy_communities_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """A process remembers at most NOT_QUIET_MAX busy communities: past it the guesses start
    over (a wrong guess costs time, never a different page)."""
    monkeypatch.setattr(async_reads, "_not_quiet_until", {})
    monkeypatch.setattr(async_reads, "NOT_QUIET_MAX", 3)
    for community_id in range(10):
        async_reads._note_not_quiet(community_id, timedelta(seconds=120))
        assert len(async_reads._not_quiet_until) <= 3
        assert not async_reads._expect_quiet(community_id)
    assert async_reads._expect_quiet(0)  # forgotten: guessed quiet again
    async_reads._note_not_quiet(9, timedelta(0))  # at least a second, even without an overlap
    assert not async_reads._expect_quiet(9)


def test_the_quiet_pages_message_takes_only_a_public_key_for_the_reader() -> None:
    """The values are written into the message: the reader must be 64 ASCII letters or digits
    (it is the authenticated key, hex; checked again where it becomes SQL)."""
    params = {"community": 7, "reader": "ab" * 32, "pending_low": timezone.now(),
              "pending_t": timezone.now()}
    message = async_reads._quiet_message(params)
    assert message.startswith(f"EXECUTE buzz_quiet_page(7, '{'ab' * 32}', '")
    for reader in ["ab" * 31 + "'x", "ab" * 32 + "a", "é" * 64, "' OR 1=1; --" + "a" * 52]:
        with pytest.raises(ValueError, match="not a public key"):
            async_reads._quiet_message({**params, "reader": reader})


def test_a_guessed_quiet_page_is_read_in_the_first_message_and_a_busy_one_reads_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A continuation guessed quiet (`guess_round`: the community last served at the
    host, the reader the auth header names) is read whole in the page's first message: the
    fence, BEGIN, the lookup, its first statement up to infinity, COMMIT. One that found a
    candidate is read again in a new snapshot and delivers the write; its community's next
    continuations are not guessed while it is busy."""
    community, owner, h, replica = a_reader_of_one_artifact("early.example", "guess",
                                                            monkeypatch)
    statements = recording_statements(monkeypatch)
    try:
        replica.round()  # a full round: nothing to guess, but the host is remembered now
        assert not any("EXECUTE buzz_quiet_page" in query for query, _ in statements)
        assert async_reads._community_at["early.example"] == community.pk
        del statements[:]
        quiet = replica.page()
        assert not quiet.events and not quiet.more and not quiet.reset
        assert len(statements) == 1, statements  # one message: the whole page
        message = statements[0][0]
        assert message.index("EXECUTE buzz_fence") < message.index("BEGIN ISOLATION LEVEL")
        assert message.endswith(", 'infinity'); COMMIT")
        assert f"EXECUTE {async_reads.QUIET_PAGE_STATEMENT}({community.pk}, " in message
        assert replica._conn is not None
        assert replica._conn.info.transaction_status == TransactionStatus.IDLE

        _d, head = create_artifact(community, owner, h)
        del statements[:]
        busy = replica.page()
        assert [orjson.loads(raw)["id"] for raw in busy.events] == [head]
        assert "EXECUTE buzz_quiet_page" in statements[0][0]
        read_again(statements[1:])
        assert community.pk in async_reads._not_quiet_until

        del statements[:]
        assert not replica.page().events  # busy lately: not guessed, the plain way
        assert not any("EXECUTE buzz_quiet_page" in query for query, _ in statements)
        assert statements[-1][0] == "COMMIT"
    finally:
        monkeypatch.undo()
        replica.close()


def finished_round(community: Any, reader: str) -> Any:
    """A request continuing `reader`'s finished round in `community` (its first page's)."""
    replica = Replica(community, reader)
    replica.round()
    query = parse_filter({"artifact": "current", "progress": replica.token})
    return prepare_round(community_id=community.pk, reader=reader, query=query)


def test_a_guess_the_lookup_does_not_confirm_is_dropped_unread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The host now serves another community (or none): the guess's page is not answered, and
    the lookup's answer is the host's community as without a guess; a page read after it gets
    a transaction of its own."""
    monkeypatch.setattr(async_reads, "_not_quiet_until", {})
    owner, reader = make_key(), make_key()
    first = make_community("moved.example")
    make_channel(first, owner=owner, members=[reader])
    guess = finished_round(first, reader.pubkey)
    first.host = "old.moved.example"
    first.save(update_fields=["host"])
    second = make_community("moved.example")
    make_channel(second, owner=owner, members=[reader])
    second_round = finished_round(second, reader.pubkey)

    async def begin(host: str) -> tuple[Any, Any, Any]:
        async with await psycopg.AsyncConnection.connect(
            **psycopg_connect_kwargs(), autocommit=True
        ) as conn:
            await async_reads.configure_connection(conn)
            read, found = await async_reads.begin_read(conn, host, guess=guess, ready=True)
            status = conn.info.transaction_status
            page = None
            if found is not None:
                identity = await connection_identity(conn)
                page = await async_reads.read_page_async(read, second_round, ready=True,
                                                         identity=identity)
            return read, found, (status, page)

    read, found, (status, page) = asyncio.run(begin("moved.example"))
    assert found is not None and found.pk == second.pk
    assert read.guess is None and read.answered is None
    assert status == TransactionStatus.IDLE  # the guess's COMMIT ended it
    assert page is not None and not page.reset and not page.more and not page.events
    read, found, _ = asyncio.run(begin("nowhere.moved.example"))
    assert found is None and read.answered is None
    assert "nowhere.moved.example" not in async_reads._community_at


def test_a_failing_guess_is_sent_again_without_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """A guess whose statement fails in the first message (here a community id out of range)
    costs the message, not the request: the batch goes again without it, and the lookup
    answers."""
    monkeypatch.setattr(async_reads, "_not_quiet_until", {})
    owner, reader = make_key(), make_key()
    community = make_community("failing.example")
    make_channel(community, owner=owner, members=[reader])
    guess = dataclasses.replace(finished_round(community, reader.pubkey), community_id=2**63)

    async def begin() -> tuple[Any, Any, TransactionStatus]:
        async with await psycopg.AsyncConnection.connect(
            **psycopg_connect_kwargs(), autocommit=True
        ) as conn:
            await async_reads.configure_connection(conn)
            read, found = await async_reads.begin_read(conn, "failing.example", guess=guess,
                                                       ready=True)
            status = conn.info.transaction_status
            await async_reads.end_read(conn)
            names = await prepared_names(conn)
            assert {FENCE_STATEMENT, async_reads.QUIET_PAGE_STATEMENT} <= names
            return read, found, status

    read, found, status = asyncio.run(begin())
    assert found is not None and found.pk == community.pk
    assert read.answered is None and read.guess is None
    assert status == TransactionStatus.INTRANS  # the page's transaction, as without a guess


def test_a_round_is_guessed_where_it_can_be(monkeypatch: pytest.MonkeyPatch) -> None:
    """`guess_round` decodes an incremental request's token for the community last served at
    the host and the key given; nothing at a host not served lately, for a request that is
    not incremental or does not parse, for another reader's token or for no key."""
    monkeypatch.setattr(async_reads, "_community_at", {})
    owner, reader, other = make_key(), make_key(), make_key()
    community = make_community("guessed.example")
    make_channel(community, owner=owner, members=[reader])
    token = Replica(community, reader.pubkey)
    token.round()
    body = orjson.dumps([{"artifact": "current", "progress": token.token}])
    guess = async_reads.guess_round
    assert guess("guessed.example", body, reader.pubkey) is None  # never served there
    async_reads._remember_host("guessed.example", community)
    made = guess("GUESSED.example", body, reader.pubkey)
    assert made is not None and made.community_id == community.pk
    assert made.reader == reader.pubkey and made.decoded is not None
    first_page = guess("guessed.example",
                       orjson.dumps([{"artifact": "current", "progress": None}]), reader.pubkey)
    assert first_page is not None and first_page.decoded is None
    plain = orjson.dumps([{"artifact": "current", "limit": 5}])
    for refused_body in [plain, b"[{", b"{}",
                         orjson.dumps([{"artifact": "current", "progress": "AAAA"}])]:
        assert guess("guessed.example", refused_body, reader.pubkey) is None, refused_body
    assert guess("guessed.example", body, other.pubkey) is None  # the token is not theirs
    for not_a_key in [None, "", "ab" * 31 + "'x", reader.pubkey.upper() + "g"]:
        assert guess("guessed.example", body, not_a_key) is None


def test_a_round_whose_page_may_not_be_quiet_is_guessed_but_not_read_early(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A round's first page cannot be quiet: its guess adds nothing to the first message, but
    once the lookup confirms the community it is the request's round (its token decoded once),
    read in the transaction the message began."""
    monkeypatch.setattr(async_reads, "_community_at", {})
    owner, reader = make_key(), make_key()
    community = make_community("first.example")
    make_channel(community, owner=owner, members=[reader])
    async_reads._remember_host("first.example", community)
    guess = async_reads.guess_round(
        "first.example", orjson.dumps([{"artifact": "current", "progress": None}]),
        reader.pubkey)
    assert guess is not None
    statements = recording_statements(monkeypatch)

    async def first_page() -> tuple[Any, Any, TransactionStatus]:
        async with await psycopg.AsyncConnection.connect(
            **psycopg_connect_kwargs(), autocommit=True
        ) as conn:
            await async_reads.configure_connection(conn)
            del statements[:]
            read, found = await async_reads.begin_read(conn, "first.example", guess=guess,
                                                       ready=True)
            assert found is not None and found.pk == community.pk
            status = conn.info.transaction_status
            identity = await connection_identity(conn)
            page = await async_reads.read_page_async(read, guess, ready=True,
                                                     identity=identity)
            return read, page, status

    read, page, status = asyncio.run(first_page())
    assert read.guess is guess and read.answered is None
    assert status == TransactionStatus.INTRANS
    assert "EXECUTE buzz_quiet_page" not in statements[0][0]
    assert page.reset and page.reset_reason == "start" and not page.more


def test_the_hosts_remembered_for_guesses_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """At most COMMUNITY_GUESSES_MAX hosts (the Host header is the client's, but only hosts a
    community was found at are remembered), then it starts over."""
    monkeypatch.setattr(async_reads, "_community_at", {})
    monkeypatch.setattr(async_reads, "COMMUNITY_GUESSES_MAX", 3)
    community = make_community("bounded.example")
    for i in range(10):
        async_reads._remember_host(f"h{i}.example", community)
        assert len(async_reads._community_at) <= 3
    assert async_reads._community_at["h9.example"] == community.pk
    async_reads._remember_host("h9.example", None)
    assert "h9.example" not in async_reads._community_at
