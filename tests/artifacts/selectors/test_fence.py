"""The fence T (PROTOCOL.md section 5): the smaller of now() and the oldest transaction start
among the client sessions of this database, read before the page's snapshot."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import psycopg
import pytest
from django.db import connection, transaction

from artifacts.selectors import async_reads
from artifacts.selectors.fence import FENCE_SQL, read_fence
from relaycore.db import psycopg_connect_kwargs

pytestmark = pytest.mark.django_db(transaction=True)

# The contract's words as pg_stat_activity puts them: FENCE_SQL must agree with this.
REFERENCE_SQL = """
SELECT least(now(), (SELECT min(xact_start) FROM pg_stat_activity
                      WHERE datname = current_database() AND backend_type = 'client backend'
                        AND xact_start IS NOT NULL AND pid <> pg_backend_pid()))
"""


@pytest.fixture
def session() -> Iterator[psycopg.Connection]:
    with psycopg.connect(**psycopg_connect_kwargs()) as conn:
        yield conn


def transaction_start(session: psycopg.Connection) -> datetime:
    """Open a transaction on `session` (not in autocommit) and answer its start."""
    row = session.execute("SELECT now()").fetchone()
    assert row is not None
    started: datetime = row[0]
    return started


def both_forms() -> tuple[datetime, datetime]:
    """FENCE_SQL and the reference, in one transaction (one now(), one activity snapshot)."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(f"SELECT ({FENCE_SQL}), ({REFERENCE_SQL})")
        ours, reference = cursor.fetchone()
    return ours, reference


def test_an_open_transaction_holds_the_fence_at_its_start(session: psycopg.Connection) -> None:
    started = transaction_start(session)
    assert read_fence() == started
    ours, reference = both_forms()
    assert ours == reference == started
    session.commit()
    assert read_fence() > started
    ours, reference = both_forms()
    assert ours == reference  # nobody else's transaction: both are now()


def test_an_idle_session_and_another_databases_transaction_do_not_hold_it(
    session: psycopg.Connection,
) -> None:
    session.autocommit = True
    session.execute("SELECT 1")  # idle, no transaction
    kwargs = {**psycopg_connect_kwargs(), "dbname": "postgres"}
    with psycopg.connect(**kwargs) as elsewhere:
        elsewhere.execute("SELECT 1")  # a transaction open in another database
        with connection.cursor() as cursor:
            cursor.execute("SELECT now()")
            before = cursor.fetchone()[0]
        assert read_fence() >= before
        ours, reference = both_forms()
        assert ours == reference


def test_the_server_processes_are_not_client_sessions() -> None:
    """The form's test for a client session (a client port) picks exactly the client backends
    among this database's sessions, as pg_stat_activity classifies them."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT backend_type, client_port IS NOT NULL FROM pg_stat_activity"
        )
        rows = cursor.fetchall()
    assert any(kind != "client backend" for kind, _ in rows)  # the server's own are there
    for kind, has_port in rows:
        if kind != "walsender":
            assert has_port == (kind == "client backend"), kind


@pytest.mark.parametrize("prepared", [True, False], ids=["prepared", "inline"])
def test_the_asyncio_page_reads_it_ahead_of_its_own_transaction(
    session: psycopg.Connection, monkeypatch: pytest.MonkeyPatch, prepared: bool
) -> None:
    """`begin_read`'s one round trip: the fence (the session's prepared statement, or the SQL
    itself behind a transaction pooler) in a transaction of its own, then the page's
    REPEATABLE READ, read-only transaction, still open."""
    monkeypatch.setattr(async_reads, "fence_prepared", lambda: prepared)
    started = transaction_start(session)

    async def page_start() -> tuple[datetime, datetime, list[Any]]:
        async with await psycopg.AsyncConnection.connect(
            **psycopg_connect_kwargs(), autocommit=True
        ) as conn:
            await async_reads.configure_connection(conn)
            read, community = await async_reads.begin_read(conn, "nowhere.example")
            assert community is None
            cursor = await conn.execute(
                "SELECT now(), current_setting('transaction_isolation'),"
                " current_setting('transaction_read_only')"
            )
            row = await cursor.fetchone()
            assert row is not None
            await async_reads.end_read(conn)
            return read.fence, row[0], list(row[1:])

    fence, page_began, page_settings = asyncio.run(page_start())
    assert fence == started
    assert page_began > started
    assert page_settings == ["repeatable read", "on"]
    session.rollback()
