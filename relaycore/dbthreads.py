"""Running the synchronous ORM, selectors and services from the event loop (HTTP and WebSocket).

Channels' `database_sync_to_async` is thread-sensitive: every call of every connection in the
process would queue on ONE thread. Pages, replays, ingests and access loads are independent, so
they run on a small pool of threads of their own instead. Each thread keeps its Django
connection from one call to the next, so at most `DB_THREADS` connections per process serve
the event loop, and a call pays no pool checkout (whose health check is a round trip: 10% of a
round's time in a profile). A connection that failed, sat idle for RECENT_SECONDS, or was
spoken to by the server while idle (a restart ends every session with a message) is checked
before its thread's next call and replaced when it is broken.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import wraps

from asgiref.sync import sync_to_async
from django.db import connections

from relaycore.db import RECENT_SECONDS, server_spoke_while_idle

__all__ = ["DB_THREADS", "run_db", "stop_threads"]

DB_THREADS = 8

_executor: ThreadPoolExecutor | None = None


def _pool() -> ThreadPoolExecutor:
    global _executor
    if _executor is None:
        _executor = ThreadPoolExecutor(max_workers=DB_THREADS, thread_name_prefix="buzz-db")
    return _executor


def _with_connection[**P, R](fn: Callable[P, R]) -> Callable[P, R]:
    @wraps(fn)
    def call(*args: P.args, **kwargs: P.kwargs) -> R:
        _replace_broken_connections()
        return fn(*args, **kwargs)

    return call


_last_call = threading.local()


def _replace_broken_connections() -> None:
    # Django's close_old_connections() would close (return to the pool) every connection, as
    # CONN_MAX_AGE is 0 for the threads Django's handler makes per request; these threads are
    # few and long-lived, so theirs stay open unless a failure, or a check after an idle spell
    # (a restarted or restored PostgreSQL), finds them unusable.
    now = time.monotonic()
    idle = now - getattr(_last_call, "at", now) >= RECENT_SECONDS
    _last_call.at = now
    for connection in connections.all(initialized_only=True):
        if connection.connection is not None and (
            connection.errors_occurred or idle or server_spoke_while_idle(connection.connection)
        ):
            if connection.is_usable():
                connection.errors_occurred = False
            else:
                connection.close()


async def run_db[**P, R](fn: Callable[P, R], /, *args: P.args, **kwargs: P.kwargs) -> R:
    """`fn(*args, **kwargs)` on the database threads: the event loop's way to the synchronous
    ORM (the HTTP edge, NIP-98 claims, the WebSocket)."""
    call = sync_to_async(_with_connection(fn), thread_sensitive=False, executor=_pool())
    return await call(*args, **kwargs)


def stop_threads() -> None:
    """Close the threads' connections and stop the threads; the next call starts new ones."""
    global _executor
    executor, _executor = _executor, None
    if executor is None:
        return
    # Django's connections are per thread, so each thread closes its own (back to the pool,
    # which then closes them). A thread's connection does not close when the thread ends: a
    # pooled one stays checked out, and dropping the database behind it is refused. The
    # barrier keeps every task on a thread of its own, so the close runs on each of them.
    everyone = threading.Barrier(DB_THREADS)

    def close_own() -> None:
        connections.close_all()
        everyone.wait(timeout=30)

    for closing in [executor.submit(close_own) for _ in range(DB_THREADS)]:
        closing.result()
    executor.shutdown(wait=True)
