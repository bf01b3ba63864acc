"""The event loop's database threads (relaycore/dbthreads.py)."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from django.db import connection, connections
from django.db.backends.postgresql.base import DatabaseWrapper

from relaycore.dbthreads import DB_THREADS, run_db, stop_threads

pytestmark = pytest.mark.django_db(transaction=True)


def _backends(pids: set[int]) -> set[int]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pid FROM pg_stat_activity WHERE pid = ANY(%s)", [list(pids)])
        return {pid for (pid,) in cursor.fetchall()}


def test_stopping_the_threads_closes_every_threads_connection() -> None:
    """Each thread keeps its own connection; stopping them gives every one back to the pool,
    not only the connection of whichever thread ran the stop (one left checked out outlives
    the pool's close, and dropping the database is refused)."""
    stop_threads()  # a pool of threads of this test's own
    at_once = threading.Barrier(DB_THREADS)

    def backend_pid() -> int:
        at_once.wait(timeout=30)  # every call on a thread of its own, each thread connected
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            (pid,) = cursor.fetchone()
        return int(pid)

    async def connect_every_thread() -> set[int]:
        return set(await asyncio.gather(*(run_db(backend_pid) for _ in range(DB_THREADS))))

    pids = asyncio.run(connect_every_thread())
    assert len(pids) == DB_THREADS
    assert _backends(pids) == pids

    stop_threads()
    # What dropping the test database does first: close the pool (it closes the connections
    # given back to it; one still checked out by a thread would stay open).
    database = connections["default"]
    assert isinstance(database, DatabaseWrapper)
    database.close()
    database.close_pool()

    deadline = time.monotonic() + 5  # a closed backend leaves pg_stat_activity a moment later
    while _backends(pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _backends(pids) == set()
