"""A connection's outgoing frames: bounded, sent in order, never blocking the producer.

Two kinds of frames share one FIFO, so a client sees them in the order the relay produced them:

- replies (AUTH challenge, OK, EOSE, CLOSED, NOTICE, replayed events) are always queued: the
  client asked for them. If the queued bytes pass `max_bytes` the client is not reading at all;
  `put_reply` says so and the connection closes it.
- live events are dropped once `max_live` of them wait: a slow reader must not hold memory or
  delay anyone. The drops are counted, and once the queue has drained the outbox sends one
  NOTICE telling the client to run an HTTP round (at most one per `NOTICE_INTERVAL` seconds:
  losses during an overload are summed, not announced one by one).

A REQ's replay is not queued at once: `below` lets the replay wait until the client has read
the previous page (artifacts.ws.consumer), so a replay of any size holds at most a page beyond
that mark. A client that reads nothing at all is dropped by the server (the stall limit of
relaycore.connection_limits), which closes the outbox and wakes the replay.

Sending is eager: when nothing is queued, `put_*` starts the drain as an eager task, which runs
synchronously until the server's send would wait (its socket buffer is full). For a client that
keeps up, a live event goes out inside the hub's fan-out loop with no task switch; only a slow
client leaves a drain task waiting, and only its own queue grows.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable

from artifacts.ws.messages import notice
from relaycore.metrics import HUB_DROPS_SLOW_CLIENT

__all__ = ["Outbox"]

logger = logging.getLogger(__name__)

SendFrame = Callable[[str], Awaitable[None]]

NOTICE_INTERVAL = 2.0


class Outbox:
    def __init__(self, send: SendFrame, *, max_live: int, max_bytes: int) -> None:
        self.send = send
        self.max_live = max_live
        self.max_bytes = max_bytes
        self._queue: deque[tuple[str, bool]] = deque()
        self._live = 0
        self._bytes = 0
        self._drain: asyncio.Task[None] | None = None
        self._notice_at = 0.0  # loop time before which no other loss NOTICE is sent
        self._notice_timer: asyncio.TimerHandle | None = None
        self.dropped = 0
        self.closed = False
        # The replay waiting in `below`: its mark and the future the drain resolves.
        self._room_mark = 0
        self._room: asyncio.Future[None] | None = None

    @property
    def queued_bytes(self) -> int:
        return self._bytes

    @property
    def idle(self) -> bool:
        """Nothing queued and nothing being sent."""
        return self._drain is None

    def put_reply(self, frame: str) -> bool:
        """Queue a reply; False when the client has stopped reading (queue over `max_bytes`)."""
        if self.closed:
            return True
        self._queue.append((frame, False))
        self._bytes += len(frame)
        self._kick()
        return self._bytes <= self.max_bytes

    def put_replies(self, frames: list[str]) -> bool:
        """Queue several replies at once (a replay's page), in order: `put_reply` for each, but
        one drain for all of them. Started per frame, a drain is a task per frame while the
        client keeps up (each one sends its frame and ends): 500 tasks a 500-event replay,
        measured as the outbox's own largest cost of a replay (bench/profile_ws.py)."""
        if self.closed or not frames:
            return True
        self._queue.extend((frame, False) for frame in frames)
        self._bytes += sum(map(len, frames))
        self._kick()
        return self._bytes <= self.max_bytes

    def put_live(self, frame: str) -> bool:
        """Queue a live event; False (and counted) when dropped because the client is slow."""
        if self.closed:
            return False
        if self._live >= self.max_live or self._bytes + len(frame) > self.max_bytes:
            self.dropped += 1
            HUB_DROPS_SLOW_CLIENT.inc()
            return False
        self._queue.append((frame, True))
        self._live += 1
        self._bytes += len(frame)
        self._kick()
        return True

    def drop_counted(self, count: int) -> None:
        """Count live events lost before reaching this outbox (they get the same NOTICE)."""
        if self.closed:
            return
        self.dropped += count
        self._kick()

    async def below(self, mark: int) -> bool:
        """Wait until at most `mark` bytes are queued; False once the outbox is closed."""
        while not self.closed and self._bytes > mark:
            self._room_mark = mark
            self._room = asyncio.get_running_loop().create_future()
            try:
                await self._room
            finally:
                self._room = None
        return not self.closed

    def _wake(self) -> None:
        if self._room is not None and not self._room.done():
            self._room.set_result(None)

    def close(self) -> None:
        self.closed = True
        self._queue.clear()
        self._bytes = 0
        self._wake()
        if self._drain is not None:
            self._drain.cancel()
        if self._notice_timer is not None:
            self._notice_timer.cancel()

    def _kick(self) -> None:
        if self._drain is None:
            loop = asyncio.get_running_loop()
            task = asyncio.Task(self._run(), loop=loop, eager_start=True)
            if not task.done():
                self._drain = task

    async def _run(self) -> None:
        try:
            while not self.closed:
                if self._queue:
                    frame, live = self._queue.popleft()
                    self._bytes -= len(frame)
                    if live:
                        self._live -= 1
                    if self._room is not None and self._bytes <= self._room_mark:
                        self._wake()
                    await self.send(frame)
                elif self.dropped:
                    now = asyncio.get_running_loop().time()
                    if now < self._notice_at:
                        self._notice_later(self._notice_at - now)
                        break
                    count, self.dropped = self.dropped, 0
                    self._notice_at = now + NOTICE_INTERVAL
                    await self.send(
                        notice(
                            f"error: {count} live event(s) could not be delivered to this "
                            "connection; run an HTTP round to catch up"
                        )
                    )
                else:
                    break
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the socket went away under us
            logger.debug("WebSocket send failed: %s", exc)
            self.closed = True
            self._queue.clear()
            self._bytes = 0
            self._wake()
        finally:
            self._drain = None

    def _notice_later(self, delay: float) -> None:
        if self._notice_timer is None:

            def fire() -> None:
                self._notice_timer = None
                if not self.closed:
                    self._kick()

            self._notice_timer = asyncio.get_running_loop().call_later(delay, fire)

    async def drained(self, timeout: float) -> None:
        """Wait until every queued frame was handed to the server (at most `timeout`)."""
        deadline = asyncio.get_running_loop().time() + timeout
        while not self.idle and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.01)
