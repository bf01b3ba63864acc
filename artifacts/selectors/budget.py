"""The read budget: every read runs in one transaction under a 2 s statement timeout.

A statement past its budget raises QueryCanceled, which the HTTP middleware answers with 503
`budget_exceeded` (PROTOCOL.md section 5, work budgets).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import psycopg
from django.db import connections, transaction
from django.db.backends.utils import CursorWrapper

READ_STATEMENT_TIMEOUT_MS = 2000
# A read's session settings, local to its transaction (safe behind a transaction pooler).
# random_page_cost: a read touches a few hot index pages per row; at the default (4, a spinning
# disk's) the planner prefers a sequential scan of a small channels table once per candidate
# row, several times slower than the index lookup. No parallel workers: starting them costs more
# than the bounded, indexed work of a read.
def read_settings_sql(statement_timeout_ms: int = READ_STATEMENT_TIMEOUT_MS) -> str:
    return (
        f"SET LOCAL statement_timeout = {int(statement_timeout_ms)};"
        " SET LOCAL random_page_cost = 1.1;"
        " SET LOCAL max_parallel_workers_per_gather = 0"
    )


@contextmanager
def read_transaction(
    *,
    alias: str = "default",
    repeatable_read: bool = False,
    statement_timeout_ms: int = READ_STATEMENT_TIMEOUT_MS,
) -> Iterator[CursorWrapper]:
    """A read-only transaction (REPEATABLE READ when asked) under the read budget.

    Refuses to run inside another transaction: isolation can only be set by a transaction's
    first statement, and a page's snapshot must be its own.
    """
    connection = connections[alias]
    if connection.in_atomic_block:
        raise RuntimeError("reads run in a transaction of their own")
    isolation = "REPEATABLE READ" if repeatable_read else "READ COMMITTED"
    with transaction.atomic(using=alias), connection.cursor() as cursor:
        # None of these takes a snapshot: the caller's first query does. One round trip.
        cursor.execute(
            f"SET TRANSACTION ISOLATION LEVEL {isolation}, READ ONLY;"
            f" {read_settings_sql(statement_timeout_ms)}"
        )
        yield cursor


def execute_prepared(
    cursor: CursorWrapper, sql: str, params: Mapping[str, Any] | Sequence[Any]
) -> list[Any]:
    """Run one of the hot statements as a server-side prepared statement; its rows (none for
    a statement that returns none, as `write_steps` drivers have it).

    The round's window statements are large (five CTEs): PostgreSQL spent 0.6 ms planning each
    against 0.09 ms executing it (EXPLAIN ANALYZE, N = 10k), so planning was most of a
    no-change round's database time. The writers' per-event statements likewise: the channel
    access lookup planned in 1.07 ms and ran in 0.13 ms, the head's locking read 0.30 against
    0.04 (EXPLAIN ANALYZE of an artifact create on a loaded machine). Django's cursors bind
    parameters on the client, which sends the statement as text every time; a psycopg cursor
    with server-side binding on the same connection (so inside the page's or the write's
    transaction) prepares the statement once per connection and afterwards only binds and
    executes it (unless prepared statements are off: DATABASE_PREPARED_STATEMENTS, behind a
    transaction pooler). Errors are wrapped as Django's, so a statement timeout still becomes
    the 503 `budget_exceeded`.
    """
    db = cursor.db
    with db.wrap_database_errors, psycopg.Cursor(db.connection) as server_cursor:
        server_cursor.execute(sql, params, prepare=True)
        return server_cursor.fetchall() if server_cursor.description is not None else []
