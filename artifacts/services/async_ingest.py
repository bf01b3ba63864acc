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

`apply_batch_async` is the group commit's driver (`group_commit`): several events in one
transaction, each under a savepoint of its own, with exactly the answers and effects of applying
them one at a time in their order.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

import psycopg

from artifacts.selectors.async_reads import roll_back
from artifacts.selectors.permissions import ACCESS_SQL
from artifacts.services.artifact_revisions import Op, parse_envelope
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
from nostr.kinds import KIND_ARTIFACT
from relaycore.steps import drive_async

__all__ = ["Write", "apply_batch_async", "apply_event_async"]

logger = logging.getLogger(__name__)

_BEGIN: Statement = ("BEGIN", ())
_COMMIT: Statement = ("COMMIT", ())
# One savepoint name, set before each write of a batch and released after it: these savepoints
# never nest, so a refusal rolls back exactly its own write's statements. (A run of independent
# creates nests one per write: `_drive_creates`.)
_SAVEPOINT: Statement = ("SAVEPOINT buzz_write", ())
_RELEASE: Statement = ("RELEASE SAVEPOINT buzz_write", ())
_ROLLBACK_TO = "ROLLBACK TO SAVEPOINT "
_ROLLBACK: Statement = ("ROLLBACK", ())
_SAVEPOINTS = ("SAVEPOINT ", "RELEASE SAVEPOINT ", _ROLLBACK_TO)


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
            if sql.startswith(_ROLLBACK_TO) or sql == _ROLLBACK[0]:
                await _execute_unwatched(cursor, sql)
            elif not sql.startswith(_SAVEPOINTS):
                await cursor.execute(sql, params, prepare=True)
            else:  # named per write: not worth a prepared statement each
                await cursor.execute(sql, params, prepare=False)
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


@dataclass(frozen=True, slots=True)
class Write:
    """One checked event (`ingest.check_event`) waiting for its write transaction."""

    community_id: int
    event: Event
    now: int


# What a batch answers for each of its writes: its result, or the exception its write raised
# (a bug, not a refusal or a database error: those are results).
type Outcome = IngestResult | BaseException


async def apply_batch_async(
    conn: psycopg.AsyncConnection[Any], writes: Sequence[Write]
) -> list[Outcome]:
    """`apply_event_async` for each of `writes`, in one transaction on `conn` (autocommit,
    idle; left idle): each write's answer only after the COMMIT.

    Each write runs under a savepoint of its own, after the previous write ended (its finishing
    statements ride in the pipeline of the next write's first batch, with the savepoint's
    release), so a write sees exactly what the writes before it left, as if each had committed:
    a refusal, a lost compare-and-swap or a duplicate rolls back to its savepoint and touches no
    other write (a run of independent creates shares one savepoint and drives again what a
    refusal rolled back with it: `_drive_creates`). Stamps are `statement_timestamp()`s of the
    batch's own statements, after its BEGIN, as the fence requires. A database error anywhere
    (a lock or statement budget, a deadlock with another process's batch, a constraint) rolls
    the whole batch back, and its writes are applied again one at a time, in order, each in its
    own transaction: the errors are then answered exactly as without batching. A lone write is
    `apply_event_async` itself.
    """
    if len(writes) == 1:
        (write,) = writes
        return [await _one(conn, write)]
    try:
        results, committed = await _drive_batch(conn, writes)
    except Exception as exc:
        await _roll_back_unless_broken(conn)
        if not isinstance(exc, psycopg.Error):
            logger.exception("a batch of %d writes failed; applying them one at a time",
                             len(writes))
        return [await _one(conn, write) for write in writes]
    flush_due = False
    for ctx, event in committed:
        try:
            flush_due = announce_commit(ctx) or flush_due
        except Exception:
            logger.exception("announcing the commit of %s failed", event.id)
    if flush_due:
        await flush_lag_samples_async(conn)
    return list(results)


async def _one(conn: psycopg.AsyncConnection[Any], write: Write) -> Outcome:
    try:
        return await apply_event_async(
            conn, community_id=write.community_id, event=write.event, now=write.now
        )
    except Exception as exc:
        return exc


async def _drive_batch(
    conn: psycopg.AsyncConnection[Any], writes: Sequence[Write]
) -> tuple[list[IngestResult], list[tuple[WriteContext, Event]]]:
    """Run `writes` in one transaction and commit it; their results and the contexts of the
    accepted ones (to announce after the commit, in order). Raises on any database error,
    leaving the transaction to the caller to roll back."""
    batch = _GroupTransaction(time.monotonic(), [None] * len(writes), (_BEGIN, budget_statement()))
    at = 0
    bound = len(writes)  # how far the next run of creates may reach (`_drive_creates`)
    while at < len(writes):
        run = min(_independent_creates(writes, at), bound - at)
        if run > 1:
            decided, redo = await _drive_creates(conn, batch, writes, at, run)
            at += decided
            bound = at + redo if redo else len(writes)
        else:
            await _drive_one(conn, batch, writes[at], at)
            at += 1
            bound = len(writes)
    await _pipeline(conn, (*_without_trailing_releases(batch.pending), _COMMIT))
    results = [result for result in batch.results if result is not None]
    assert len(results) == len(writes)
    return results, batch.committed


def _without_trailing_releases(pending: Batch) -> Batch:
    """`pending` less the savepoint releases at its end: COMMIT releases every savepoint, so a
    release just before it is a statement (and a round of the driver's work) for nothing."""
    end = len(pending)
    while end and pending[end - 1][0].startswith("RELEASE SAVEPOINT "):
        end -= 1
    return pending[:end]


@dataclass(slots=True)
class _GroupTransaction:
    started: float
    results: list[IngestResult | None]
    # Statements still to send ahead of the next write's first batch: the BEGIN at first, then
    # what ends the writes before (their finishing batches and releases, or rollbacks).
    pending: Batch
    committed: list[tuple[WriteContext, Event]] = field(default_factory=list)

    def accept(self, index: int, ctx: WriteContext, event: Event) -> None:
        self.results[index] = IngestResult(event.id, True, "")
        self.committed.append((ctx, event))


async def _drive_one(
    conn: psycopg.AsyncConnection[Any], batch: _GroupTransaction, write: Write, index: int
) -> None:
    """One write under a savepoint of its own, its first batch behind what `batch.pending`
    holds; leaves what ends it in `batch.pending`."""
    event = write.event
    ctx = WriteContext(community_id=write.community_id, started=batch.started)
    steps = STEPS_HANDLERS[event.kind](ctx=ctx, event=event, now=write.now)
    try:
        statements = next(steps)  # what needs no database (the envelope) is refused before it
    except WriteRefused as exc:
        batch.results[index] = refusal(event.id, exc)
        return
    sent = await _pipeline(conn, (*batch.pending, _SAVEPOINT, *statements))
    rows = sent[len(batch.pending) + 1:]
    batch.pending = ()
    try:
        while True:
            statements = steps.send(rows)
            rows = await _pipeline(conn, statements)
    except StopIteration as done:
        batch.pending = (*done.value, _RELEASE)
        batch.accept(index, ctx, event)
    except WriteRefused as exc:
        batch.pending = ((_ROLLBACK_TO + "buzz_write", ()), _RELEASE)
        batch.results[index] = refusal(event.id, exc)


def _independent_creates(writes: Sequence[Write], start: int) -> int:
    """How many writes from `start` on are artifact creates of distinct artifacts and events:
    none reads what another writes (a create reads its own event's row, its author's standing
    and its own artifact's head, and writes only its event, revision and head), so their first
    batches may all run before any of them finishes."""
    artifacts: set[UUID] = set()
    events: set[str] = set()
    for write in writes[start:]:
        event = write.event
        if event.kind != KIND_ARTIFACT or event.id in events:
            break
        try:
            envelope = parse_envelope(event)
        except WriteRefused:
            break
        if envelope.op != Op.CREATE or envelope.artifact_id in artifacts:
            break
        artifacts.add(envelope.artifact_id)
        events.add(event.id)
    return len(events)


# The savepoint a run of independent creates runs behind (`_drive_creates`).
_SAVEPOINT_RUN: Statement = ("SAVEPOINT buzz_creates", ())
_ROLLBACK_TO_RUN: Statement = (_ROLLBACK_TO + "buzz_creates", ())
_RELEASE_RUN: Statement = ("RELEASE SAVEPOINT buzz_creates", ())


async def _drive_creates(
    conn: psycopg.AsyncConnection[Any], batch: _GroupTransaction, writes: Sequence[Write],
    start: int, count: int,
) -> tuple[int, int]:
    """`count` independent creates (`_independent_creates`) from `start`, behind one savepoint:
    every first batch in one pipeline, then every finishing batch in the next. Returns how
    many writes were decided, and how many to drive again as a shorter run (0: none).

    A statement two creates both ask for in their first batches (the author's standing in a
    channel: `access_statement`) is sent once and its rows given to each: a create writes none
    of the rows it reads, and the statement runs after every create of the run arrived, so
    each gets what it would have read running alone at that moment.

    A refusal rolls the whole run back to its savepoint. A refused first create is answered
    (nothing of the run came before it) and the creates after it are driven again. A refused
    later create is not answered yet: the creates before it are driven again as a run of their
    own (the second number returned), then it and the ones after it, so it is refused on its
    own, by the same rows (or by what another transaction changed meanwhile, as it could have
    before it arrived). Refusals are the rare case; the common one pays one savepoint for the
    run instead of one a create, and none when nothing accepted came before the run in the
    batch (two workers' batches are mostly one run of two creates): a refusal then rolls the
    whole transaction back and begins it again, which takes nothing else back."""
    whole = not batch.committed  # the transaction holds nothing a ROLLBACK would lose
    statements: list[Statement] = list(batch.pending)
    if not whole:
        statements.append(_SAVEPOINT_RUN)
    shared: dict[tuple[str, Any], int] = {}  # a shared read -> its place in `statements`
    started = []
    for write in writes[start:start + count]:
        ctx = WriteContext(community_id=write.community_id, started=batch.started)
        steps = STEPS_HANDLERS[write.event.kind](ctx=ctx, event=write.event, now=write.now)
        first = next(steps)  # the envelope parsed in `_independent_creates`: not refused here
        places = []
        for statement in first:
            key = _shared_key(statement)
            if key is not None and key in shared:
                places.append(shared[key])
                continue
            if key is not None:
                shared[key] = len(statements)
            places.append(len(statements))
            statements.append(statement)
        started.append((ctx, steps, places))
    rows = await _pipeline(conn, tuple(statements))
    finishing: list[Statement] = []
    for position, (ctx, steps, places) in enumerate(started):
        event = writes[start + position].event
        try:
            steps.send([rows[place] for place in places])
        except StopIteration as done:
            finishing.extend(done.value)
            batch.accept(start + position, ctx, event)
            continue
        except WriteRefused as exc:
            batch.committed = batch.committed[:len(batch.committed) - position]
            for earlier in range(start, start + position):
                batch.results[earlier] = None
            batch.pending = ((_ROLLBACK, _BEGIN, budget_statement()) if whole
                             else (_ROLLBACK_TO_RUN, _RELEASE_RUN))
            if position == 0:
                batch.results[start] = refusal(event.id, exc)
                return 1, 0
            return 0, position
        raise RuntimeError(f"the create {event.id} asked for a second batch")
    batch.pending = tuple(finishing) if whole else (*finishing, _RELEASE_RUN)
    return count, 0


def _shared_key(statement: Statement) -> tuple[str, Any] | None:
    """What identifies `statement` among a run's first batches when it is a read the run's
    creates may share (`_drive_creates`), else None."""
    sql, params = statement
    if sql is not ACCESS_SQL:
        return None
    assert isinstance(params, dict)
    return sql, tuple(sorted(params.items()))


async def _execute_unwatched(cursor: psycopg.AsyncCursor[Any], sql: str) -> None:
    """Send a ROLLBACK TO SAVEPOINT (or a batch's ROLLBACK) unprepared, and out of sight of
    psycopg's cache of prepared statements: on a "ROLLBACK" command tag psycopg deallocates
    every statement the session prepared (the fence's and the writes' own), which neither calls
    for (prepared statements are not transactional, and a write never changes the schema)."""
    conn = cursor.connection
    threshold = conn.prepare_threshold
    conn.prepare_threshold = None
    try:
        await cursor.execute(sql, prepare=False)
    finally:
        conn.prepare_threshold = threshold
