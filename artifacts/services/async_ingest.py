"""The ingest's write transaction on an asyncio connection: the server loop's driver of the
writers in steps form (`write_steps`).

The same write as `ingest.apply_event` (the rules and statements are the kind's
`STEPS_HANDLERS` generator, written once), under the same budgets, stamps and locks, announced
after its commit in the same way (`transactions.announce_commit`). Only the driving differs:
each batch is one pipeline, the first with the BEGIN and the budgets, the finishing one with the
COMMIT, so an artifact write takes two round trips and a channel or membership change three
(the synchronous driver takes one per statement, eight for an artifact create, on a database
thread the loop would hand the write to and wait for: docs/performance.md). Every kind the relay
accepts is written here when the write comes in on the server loop.
"""

from __future__ import annotations

import contextlib
import logging
import time
from typing import Any

import psycopg

from artifacts.selectors.async_reads import roll_back
from artifacts.services.errors import WriteRefused
from artifacts.services.ingest import (
    STEPS_HANDLERS,
    IngestResult,
    database_failure,
    refusal,
)
from artifacts.services.stamp_lag import flush_lag_samples_async
from artifacts.services.transactions import WriteContext, announce_commit, budget_statement
from artifacts.services.write_steps import Batch, Rows, Statement, WriteSteps
from nostr.events import Event
from relaycore.steps import drive_async

__all__ = ["apply_event_async"]

logger = logging.getLogger(__name__)

_BEGIN: Statement = ("BEGIN", ())
_COMMIT: Statement = ("COMMIT", ())


async def apply_event_async(
    conn: psycopg.AsyncConnection[Any], *, community_id: int, event: Event, now: int
) -> IngestResult:
    """`ingest.apply_event` on `conn` (autocommit, idle), for an event `check_event` passed.

    Leaves `conn` idle: a refused or failed write is rolled back before this returns.
    """
    ctx = WriteContext(community_id=community_id, started=time.monotonic())
    steps = STEPS_HANDLERS[event.kind](ctx=ctx, event=event, now=now)
    try:
        await _apply_steps(conn, steps, ctx)
    except (WriteRefused, psycopg.Error) as exc:
        await _roll_back_unless_broken(conn)
        if isinstance(exc, WriteRefused):
            return refusal(event.id, exc)
        return database_failure(event.id, exc)
    except Exception:
        await _roll_back_unless_broken(conn)
        raise
    try:
        flush_due = announce_commit(ctx)
    except Exception:
        # As `write_transaction`'s robust on_commit: the write is committed whatever a
        # receiver does.
        logger.exception("announcing the commit of %s failed", event.id)
    else:
        if flush_due:
            await flush_lag_samples_async(conn)
    return IngestResult(event.id, True, "")


async def _apply_steps(
    conn: psycopg.AsyncConnection[Any], steps: WriteSteps, ctx: WriteContext
) -> None:
    begun = False

    async def run(batch: Batch) -> list[Rows]:
        # The first batch goes with BEGIN, so what needs no database (the envelope) is refused
        # before BEGIN is sent.
        nonlocal begun
        if begun:
            return await _pipeline(conn, batch)
        begun = True
        # Restarted just before BEGIN is sent (`write_transaction`'s starts just after it):
        # every stamp is taken later, so either bounds the stamp-to-commit lag from above.
        ctx.started = time.monotonic()
        return (await _pipeline(conn, (_BEGIN, budget_statement(), *batch)))[2:]

    finishing = await drive_async(steps, run)
    await _pipeline(conn, (*finishing, _COMMIT))


async def _pipeline(conn: psycopg.AsyncConnection[Any], batch: Batch) -> list[Rows]:
    """Each statement's rows, `batch` sent as one pipeline (one round trip)."""
    async with conn.pipeline():
        cursors = []
        for sql, params in batch:
            cursor = conn.cursor()
            await cursor.execute(sql, params, prepare=True)
            cursors.append(cursor)
    # Leaving the pipeline block synced it: every result is in.
    return [
        await cursor.fetchall() if cursor.description is not None else [] for cursor in cursors
    ]


async def _roll_back_unless_broken(conn: psycopg.AsyncConnection[Any]) -> None:
    """End the failed or refused transaction (nothing to do when none began or the connection
    broke: the pool replaces a broken one), keeping the session as the pool configured it."""
    if not conn.closed:
        with contextlib.suppress(psycopg.OperationalError):
            await roll_back(conn)
