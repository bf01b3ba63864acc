"""Group commit: the server loop's writes share transactions, one in flight at a time.

While one batch's transaction is in flight, the writes that arrive (over `POST /event` and
WebSocket EVENT alike: both come through `artifacts.services.loop_ingest`) wait for the next one,
which carries all of them (at most MAX_BATCH_EVENTS): one BEGIN and one COMMIT for the batch,
each write's statements pipelined with its neighbour's (`async_ingest.apply_batch_async`), and
each write's answer only after that COMMIT. Nothing waits on a timer: a write that finds
nothing in flight goes at once, alone (on the connection its request holds, in its own task; a
WebSocket write, which holds none, on the batcher's on the next turn of the loop); only writes
that arrive while a transaction is open wait, and only for it. So an idle relay answers a lone
write as it did before, and a busy one commits (and flushes its WAL) once per batch instead of
once per write.

The batch answers exactly as one-at-a-time application in arrival order would
(`apply_batch_async` says how), so callers cannot tell the difference but by the time it takes.

Unlike strfry's writer (one thread per process that drains a queue of verified events and
writes each batch in one LMDB transaction), this is one batcher per event loop, the writes' rules
are PostgreSQL statements that may refuse an event after reading rows (compare-and-swap, access),
so each event has its own savepoint, and several processes batch at once against one database,
their batches serialized by PostgreSQL's locks (a deadlock between two batches is one of the
database errors that sends a batch back to one-at-a-time).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any
from weakref import WeakKeyDictionary

import psycopg

from artifacts.selectors.async_reads import connection_pool, note_used
from artifacts.services.async_ingest import Outcome, Write, apply_batch_async
from artifacts.services.ingest import IngestResult, database_failure
from nostr.events import Event

__all__ = ["MAX_BATCH_EVENTS", "ConnectionSource", "GroupCommit", "group_commit"]

logger = logging.getLogger(__name__)

# A flood must not grow one transaction without limit: its locks are held, and its stamps wait
# to commit (the stamp-to-commit lag readers allow for), for as long as it runs. 64 artifact
# writes take about 65 round trips.
MAX_BATCH_EVENTS = 64

type ConnectionSource = Callable[[], AbstractAsyncContextManager[psycopg.AsyncConnection[Any]]]


@dataclass(slots=True)
class _Waiting:
    write: Write
    answer: asyncio.Future[IngestResult]


class GroupCommit:
    """The batcher of one event loop; `connection` lends the connection a run of batches uses
    (autocommit, idle, given back idle)."""

    def __init__(
        self, connection: ConnectionSource, *, max_events: int = MAX_BATCH_EVENTS
    ) -> None:
        if max_events < 1:
            raise ValueError("a batch carries at least one write")
        self._connection = connection
        self._max_events = max_events
        self._queue: deque[_Waiting] = deque()
        self._runner: asyncio.Task[None] | None = None  # held: a loop holds tasks weakly
        self._busy = False  # a lone write is in flight on its caller's connection (`_alone`)
        self.batches = 0  # batches committed or tried, for tests and benchmarks

    async def apply(
        self,
        *,
        community_id: int,
        event: Event,
        now: int,
        conn: psycopg.AsyncConnection[Any] | None = None,
        release: Callable[[], Awaitable[None]] | None = None,
    ) -> IngestResult:
        """Write `event` (checked by `ingest.check_event`) in the next batch; its answer once
        that batch committed. Cancelling the caller does not take the write out of a batch
        already running (it is then committed or refused all the same, unanswered).

        `conn`: an idle connection the caller holds (left idle). When nothing is in flight or
        waiting, the write goes at once on it, alone, in the caller's task: a lone write
        costs what it did without batching. Otherwise the write waits for the next batch, and
        `release` (which gives `conn` back) is awaited first: a pool of idle waiters could
        starve the batch of a connection."""
        loop = asyncio.get_running_loop()
        write = Write(community_id, event, now)
        if conn is not None and self._runner is None and not self._busy and not self._queue:
            return await self._alone(loop, conn, write)
        waiting = _Waiting(write, loop.create_future())
        self._queue.append(waiting)
        if self._runner is None and not self._busy:
            self._runner = loop.create_task(self._run())
        if release is not None:
            await release()
        return await waiting.answer

    async def _alone(
        self, loop: asyncio.AbstractEventLoop, conn: psycopg.AsyncConnection[Any], write: Write
    ) -> IngestResult:
        """A batch of one on the caller's connection; the writes that arrive meanwhile wait,
        and a batch for them starts once it is done."""
        self._busy = True
        try:
            self.batches += 1
            (outcome,) = await apply_batch_async(conn, [write])
        finally:
            self._busy = False
            if self._queue and self._runner is None:
                self._runner = loop.create_task(self._run())
        if isinstance(outcome, BaseException):
            raise outcome
        if outcome.failure is None:
            note_used(conn)
        return outcome

    async def _run(self) -> None:
        try:
            while self._queue:
                await self._run_with_connection()
        finally:
            self._runner = None

    async def _run_with_connection(self) -> None:
        """Batches on one connection for as long as writes keep arriving (and it is whole: a
        broken one goes back to the pool, which replaces it)."""
        batch: list[_Waiting] = []
        try:
            async with self._connection() as conn:
                while self._queue and not conn.broken:
                    batch = [self._queue.popleft()
                             for _ in range(min(len(self._queue), self._max_events))]
                    self.batches += 1
                    outcomes = await apply_batch_async(conn, [w.write for w in batch])
                    _answer(batch, outcomes)
                    batch = []
                    note_used(conn)
        except psycopg.OperationalError as exc:  # no connection to be had (PoolTimeout among them)
            if not batch:  # every write waiting waited for that connection: answered alike
                batch = list(self._queue)
                self._queue.clear()
            _answer(batch, [database_failure(w.write.event.id, exc) for w in batch])
        except Exception as exc:
            logger.exception("group commit failed")
            _answer(batch, [exc] * len(batch))
        except BaseException:  # cancelled with its loop: nobody will run what still waits
            left = [*batch, *self._queue]
            self._queue.clear()
            _answer(left, [asyncio.CancelledError()] * len(left))
            raise


def _answer(batch: list[_Waiting], outcomes: Sequence[Outcome]) -> None:
    for waiting, outcome in zip(batch, outcomes, strict=True):
        if waiting.answer.done():  # its caller went away
            continue
        if isinstance(outcome, BaseException):
            waiting.answer.set_exception(outcome)
        else:
            waiting.answer.set_result(outcome)


_committers: WeakKeyDictionary[asyncio.AbstractEventLoop, GroupCommit] = WeakKeyDictionary()


@contextlib.asynccontextmanager
async def _pooled() -> AsyncIterator[psycopg.AsyncConnection[Any]]:
    async with (await connection_pool()).connection() as conn:
        yield conn


def group_commit() -> GroupCommit:
    """This event loop's batcher, writing on the loop's pool (`async_reads.connection_pool`)."""
    loop = asyncio.get_running_loop()
    committer = _committers.get(loop)
    if committer is None:
        committer = _committers[loop] = GroupCommit(_pooled)
    return committer
