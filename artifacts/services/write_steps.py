"""A write's statements, written once, for two drivers: Django's connection and asyncio's.

A writer in steps form is a generator: it yields a batch of statements (a tuple of `(sql,
params)`), receives each statement's rows, decides, and yields the next batch; it returns the
batch that finishes the write, whose rows nobody reads. Every rule stays in the generator; a
driver only runs statements. Statements of one batch are independent of each other's rows, so
a driver may send them together: the asyncio driver (`artifacts.services.async_ingest`) sends
each batch as one pipeline (one round trip: PostgreSQL still runs them one after another, each
in READ COMMITTED with a snapshot of its own, so a row read after an advisory lock in the same
batch is read after the lock is granted), and the finishing batch with the COMMIT.
`run_write_steps` runs them one by one on Django's connection, inside `write_transaction`.

Every statement is prepared on the server (as `budget.execute_prepared` explains), unless
prepared statements are off for the connection (behind a transaction pooler).
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import psycopg
from django.db import connection

from relaycore.steps import Rows, Statement, drive

__all__ = ["Batch", "Rows", "Statement", "WriteSteps", "run_write_steps"]

Batch = tuple[Statement, ...]
# Yields batches, receives their rows (one list per statement), returns the finishing batch.
type WriteSteps = Generator[Batch, list[Rows], Batch]


def run_write_steps(steps: WriteSteps) -> None:
    """Run `steps` on Django's connection, in the caller's write transaction."""
    db = connection
    db.ensure_connection()
    with db.wrap_database_errors, psycopg.Cursor(db.connection) as cursor:
        finishing = drive(steps, lambda batch: [_run(cursor, statement) for statement in batch])
        for statement in finishing:
            _run(cursor, statement)


def _run(cursor: psycopg.Cursor[Any], statement: Statement) -> Rows:
    sql, params = statement
    cursor.execute(sql, params, prepare=True)
    return cursor.fetchall() if cursor.description is not None else []
