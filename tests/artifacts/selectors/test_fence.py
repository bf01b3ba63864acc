"""The fence T (PROTOCOL.md section 5): the smaller of now() and the oldest transaction start
among the client sessions of this database, read in a statement of its own."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import datetime

import psycopg
import pytest
from django.db import connection, transaction

from artifacts.db import psycopg_connect_kwargs
from artifacts.selectors.fence import FENCE_SQL, read_fence, read_fence_async

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


def test_the_asyncio_read_is_the_same_statement(session: psycopg.Connection) -> None:
    started = transaction_start(session)

    async def fence() -> datetime:
        async with await psycopg.AsyncConnection.connect(
            **psycopg_connect_kwargs(), autocommit=True
        ) as conn:
            return await read_fence_async(conn)

    assert asyncio.run(fence()) == started
    session.rollback()
