"""The drain hands over to uvicorn's shutdown only once no WebSocket handshake is under way
(uvicorn would answer it 500), and no later than DRAIN_SECONDS after the signal. In process:
the drain coroutine is driven directly, with the handler it chains to recorded."""

from __future__ import annotations

import asyncio
import signal

from artifacts.ws import shutdown


class Handshake:
    """Stands for a consumer whose connect() is running."""


def test_the_drain_waits_for_handshakes_under_way() -> None:
    async def scenario() -> None:
        chained: list[int] = []
        handshake = Handshake()
        shutdown.handshake_started(handshake)
        try:
            drain = asyncio.create_task(shutdown._drain_then_chain(
                lambda signum, frame: chained.append(signum), signal.SIGTERM, None
            ))
            await asyncio.sleep(0.2)
            assert chained == [] and not drain.done()
            shutdown.handshake_done(handshake)  # accepted and closed with 1001, or refused
            await asyncio.wait_for(drain, 1)
            assert chained == [signal.SIGTERM]
        finally:
            shutdown.handshake_done(handshake)

    asyncio.run(scenario())


def test_a_handshake_that_never_ends_delays_the_shutdown_at_most_the_drain() -> None:
    async def scenario() -> None:
        chained: list[int] = []
        handshake = Handshake()
        shutdown.handshake_started(handshake)
        try:
            loop = asyncio.get_running_loop()
            started = loop.time()
            await shutdown._drain_then_chain(
                lambda signum, frame: chained.append(signum), signal.SIGTERM, None
            )
            assert chained == [signal.SIGTERM]
            waited = loop.time() - started
            assert shutdown.DRAIN_SECONDS - 0.1 <= waited < shutdown.DRAIN_SECONDS + 1
        finally:
            shutdown.handshake_done(handshake)

    asyncio.run(scenario())
