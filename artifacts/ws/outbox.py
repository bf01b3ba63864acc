"""A connection's outgoing frames: bounded, written by one task, never blocking the producer.

Two kinds of frames share one FIFO, so a client sees them in the order the relay produced them:

- replies (AUTH challenge, OK, EOSE, CLOSED, NOTICE, replayed events) are always queued: the
  client asked for them. If the queued bytes pass `max_bytes` the client is not reading at all;
  `put_reply` says so and the connection closes it.
- live events are dropped once `max_live` of them wait: a slow reader must not hold memory or
  delay anyone. The drops are counted, and once the queue has drained the writer sends one
  NOTICE telling the client to run an HTTP round.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable

from artifacts.ws.messages import notice

__all__ = ["Outbox"]


class Outbox:
    def __init__(self, *, max_live: int, max_bytes: int) -> None:
        self.max_live = max_live
        self.max_bytes = max_bytes
        self._queue: deque[tuple[str, bool]] = deque()
        self._ready = asyncio.Event()
        self._live = 0
        self._bytes = 0
        self.dropped = 0
        self.closed = False

    @property
    def queued_bytes(self) -> int:
        return self._bytes

    def put_reply(self, frame: str) -> bool:
        """Queue a reply; False when the client has stopped reading (queue over `max_bytes`)."""
        if self.closed:
            return True
        self._queue.append((frame, False))
        self._bytes += len(frame)
        self._ready.set()
        return self._bytes <= self.max_bytes

    def put_live(self, frame: str) -> bool:
        """Queue a live event; False (and counted) when dropped because the client is slow."""
        if self.closed:
            return False
        if self._live >= self.max_live or self._bytes + len(frame) > self.max_bytes:
            self.dropped += 1
            return False
        self._queue.append((frame, True))
        self._live += 1
        self._bytes += len(frame)
        self._ready.set()
        return True

    def drop_counted(self, count: int) -> None:
        """Count live events lost before reaching this outbox (they get the same NOTICE)."""
        self.dropped += count
        self._ready.set()

    async def run(self, send: Callable[[str], Awaitable[None]]) -> None:
        """Write frames until the connection goes (a failing `send` ends the loop)."""
        while not self.closed:
            await self._ready.wait()
            self._ready.clear()
            while self._queue:
                frame, live = self._queue.popleft()
                self._bytes -= len(frame)
                if live:
                    self._live -= 1
                await send(frame)
            if self.dropped:
                count, self.dropped = self.dropped, 0
                await send(
                    notice(
                        f"error: {count} live event(s) could not be delivered to this "
                        "connection; run an HTTP round to catch up"
                    )
                )

    async def drained(self, timeout: float) -> None:
        """Wait until every queued frame was handed to the server (at most `timeout`)."""
        deadline = asyncio.get_running_loop().time() + timeout
        while self._queue and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.01)
