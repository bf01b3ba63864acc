"""Running the synchronous ORM and services from the WebSocket's event loop.

Channels' `database_sync_to_async` is thread-sensitive: every call of every connection in the
process would queue on ONE thread. Replays, ingests and access loads are independent, so they
run on a small pool of their own instead; each thread keeps its Django connection (closed when
stale, like a request's), so at most `WS_DB_THREADS` connections per process serve the sockets.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import wraps

from asgiref.sync import sync_to_async
from django.db import close_old_connections

__all__ = ["WS_DB_THREADS", "run_db"]

WS_DB_THREADS = 8

_executor: ThreadPoolExecutor | None = None


def _pool() -> ThreadPoolExecutor:
    global _executor
    if _executor is None:
        _executor = ThreadPoolExecutor(max_workers=WS_DB_THREADS, thread_name_prefix="buzz-ws-db")
    return _executor


def _with_connection[**P, R](fn: Callable[P, R]) -> Callable[P, R]:
    @wraps(fn)
    def call(*args: P.args, **kwargs: P.kwargs) -> R:
        close_old_connections()
        try:
            return fn(*args, **kwargs)
        finally:
            close_old_connections()

    return call


async def run_db[**P, R](fn: Callable[P, R], /, *args: P.args, **kwargs: P.kwargs) -> R:
    """`fn(*args, **kwargs)` on the WebSocket database pool."""
    call = sync_to_async(_with_connection(fn), thread_sensitive=False, executor=_pool())
    return await call(*args, **kwargs)
