"""Draining WebSocket connections when the serving process is told to stop.

uvicorn answers SIGTERM/SIGINT by closing every socket with 1012 at once. The relay first gives
each connection a moment to flush what it queued and closes it with 1001 ("going away"), so a
client knows the instance is leaving and reconnects elsewhere; then uvicorn's own handler runs
and shuts the server down as usual. uvicorn installs its handlers with `signal.signal` before
it loads the application, so chaining them here, from the event loop's (main) thread, the first
time a connection opens, keeps its behaviour (including a second signal forcing the exit).

The listener stays open during the drain, so a client reconnecting may reach this instance
again: its handshake is accepted and closed with 1001 at once (`draining()`), and the drain
waits for handshakes under way, which uvicorn's shutdown would otherwise answer with a 500.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import threading
import weakref
from collections.abc import Awaitable
from types import FrameType
from typing import Any, Protocol

__all__ = [
    "DRAIN_SECONDS",
    "Drainable",
    "draining",
    "handshake_done",
    "handshake_started",
    "register",
    "unregister",
]

logger = logging.getLogger(__name__)

DRAIN_SECONDS = 2.0
_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class Drainable(Protocol):
    def going_away(self) -> Awaitable[None]: ...


_connections: weakref.WeakSet[Any] = weakref.WeakSet()
# Connections whose handshake is being decided (the consumer's connect): uvicorn's shutdown
# answers those 500, so the drain waits for them to be accepted or refused first.
_handshakes: weakref.WeakSet[Any] = weakref.WeakSet()
_installed_for: asyncio.AbstractEventLoop | None = None
_drain_started = False


def register(connection: Drainable) -> None:
    _connections.add(connection)
    _install(asyncio.get_running_loop())


def handshake_started(connection: object) -> None:
    _handshakes.add(connection)
    _install(asyncio.get_running_loop())


def handshake_done(connection: object) -> None:
    _handshakes.discard(connection)


def draining() -> bool:
    """The process was told to stop and is closing its connections: new ones go elsewhere."""
    return _drain_started


def unregister(connection: Drainable) -> None:
    _connections.discard(connection)


def _install(loop: asyncio.AbstractEventLoop) -> None:
    global _installed_for
    if _installed_for is loop or threading.current_thread() is not threading.main_thread():
        return
    _installed_for = loop
    for sig in _SIGNALS:
        previous = signal.getsignal(sig)

        def handler(
            signum: int, frame: FrameType | None, previous: Any = previous
        ) -> None:
            _on_signal(loop, previous, signum, frame)

        signal.signal(sig, handler)


def _on_signal(
    loop: asyncio.AbstractEventLoop, previous: Any, signum: int, frame: FrameType | None
) -> None:
    global _drain_started
    if _drain_started or loop.is_closed() or not (_connections or _handshakes):
        _chain(previous, signum, frame)
        return
    _drain_started = True
    loop.call_soon_threadsafe(
        lambda: loop.create_task(_drain_then_chain(previous, signum, frame))
    )


async def _drain_then_chain(previous: Any, signum: int, frame: FrameType | None) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + DRAIN_SECONDS
    connections = list(_connections)
    logger.info("closing %d WebSocket connection(s): going away", len(connections))
    if connections:
        await asyncio.wait(
            [asyncio.ensure_future(c.going_away()) for c in connections], timeout=DRAIN_SECONDS
        )
    # Handshakes under way (the listener is still open during the drain) are closed with 1001
    # by the consumer once it sees `draining()`; then uvicorn's shutdown finds none to answer 500.
    while _handshakes and loop.time() < deadline:
        await asyncio.sleep(0.01)
    _chain(previous, signum, frame)


def _chain(previous: Any, signum: int, frame: FrameType | None) -> None:
    if callable(previous):
        previous(signum, frame)
    elif previous == signal.SIG_DFL:
        signal.signal(signum, signal.SIG_DFL)
        signal.raise_signal(signum)
