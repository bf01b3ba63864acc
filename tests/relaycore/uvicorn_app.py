"""An ASGI application served by uvicorn in the test's own event loop, with a protocol class of
the test's choosing (the relay's WebSocket protocol, or a subclass that watches it)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any


@contextlib.asynccontextmanager
async def serving(app: Any, ws_protocol: Any) -> AsyncIterator[int]:
    """`app` served on 127.0.0.1 (its port yielded) until the block ends."""
    import uvicorn

    from buzzrelay.embedded import free_port

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(
        app, host="127.0.0.1", port=port, ws=ws_protocol, lifespan="off", log_level="warning",
        loop="asyncio"))
    task = asyncio.create_task(server.serve())
    try:
        for _ in range(100):
            if server.started:
                break
            await asyncio.sleep(0.05)
        yield port
    finally:
        server.should_exit = True
        await task
