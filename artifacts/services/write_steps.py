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
An operator's service (`channels.channel_create`, ...) runs the same steps as the kind that does
the same, with `run_service_steps`: its steps also return what the service answers.

Every statement is prepared on the server (as `budget.execute_prepared` explains), unless
prepared statements are off for the connection (behind a transaction pooler).
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import psycopg
from django.db import connection

from relaycore.steps import Rows, Statement, drive

__all__ = [
    "Batch", "Rows", "ServiceSteps", "Statement", "WriteSteps", "run_service_steps",
    "run_write_steps",
]

Batch = tuple[Statement, ...]
# Yields batches, receives their rows (one list per statement), returns the finishing batch.
type WriteSteps = Generator[Batch, list[Rows], Batch]
# `WriteSteps` that also return what an operator's service answers (whether anything changed).
type ServiceSteps[T] = Generator[Batch, list[Rows], tuple[T, Batch]]


def run_write_steps(steps: WriteSteps) -> None:
    """Run `steps` on Django's connection, in the caller's write transaction."""
    run_service_steps(_answering_nothing(steps))


def run_service_steps[T](steps: ServiceSteps[T]) -> T:
    """`run_write_steps` for an operator's service: what `steps` answer."""
    db = connection
    db.ensure_connection()
    with db.wrap_database_errors, psycopg.Cursor(db.connection) as cursor:

        def run(batch: Batch) -> list[Rows]:
            return [_run(cursor, statement) for statement in batch]

        answer, finishing = drive(steps, run)
        run(finishing)
        return answer


def _answering_nothing(steps: WriteSteps) -> ServiceSteps[None]:
    return None, (yield from steps)


def _run(cursor: psycopg.Cursor[Any], statement: Statement) -> Rows:
    sql, params = statement
    cursor.execute(sql, params, prepare=True)
    return cursor.fetchall() if cursor.description is not None else []
