"""The fence: the database time below which every stamp is already committed.

T = the smaller of `now()` and the oldest `xact_start` among client backends of this database
with an open transaction (PROTOCOL.md section 5), as pg_stat_activity shows them. A writer
stamps with the time of a statement after its `BEGIN`, so a stamp below T belongs to a
transaction that committed before T was read.
The fence must be read *before* the snapshot a page classifies by: read inside that snapshot, a
writer could commit between the snapshot and the read, be invisible to the page and already gone
from pg_stat_activity. So it runs in a transaction of its own, before the page's transaction
begins; pg_stat_activity also keeps a per-transaction copy, which a transaction of its own never
reuses.

It is read afresh for every page, never reused: a value read before a write's `OK` was sent
would leave that write out of a round started after it (read-your-writes). A round keeps the T
of its first page (in its token); a later page's fresh fence serves only a reset (a new round
starts there) and the view's recomputation fence.

Both drivers of a page read it with `FENCE_SQL`: the synchronous one with `read_fence` (Django's
connection), a statement of its own; the asyncio one in a transaction of its own at the head of
its page's first batch (`fence_then`), so the fence costs no round trip of its own.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import psycopg
from django.db import connections

from relaycore.db import prepare_in_session

# pg_stat_activity's own definition, read through the per-backend accessor functions it is built
# on: the view builds all 30 of its columns for every backend and joins pg_database and
# pg_authid, which took 4.6x the server time of this form (0.41 vs 0.09 ms; the whole first
# round trip 0.89x). A client connection is a backend with a client port (-1 over a Unix socket;
# NULL marks the server's own processes: autovacuum, which also opens transactions, and
# background workers), the same set as `backend_type = 'client backend'` but for walsenders,
# whose transactions are short and can only hold T back, never past a write.
FENCE_SQL = """
SELECT least(
    now(),
    (SELECT min(pg_stat_get_backend_xact_start(backend))
       FROM pg_stat_get_backend_idset() AS backend
      WHERE pg_stat_get_backend_dbid(backend)
            = (SELECT oid FROM pg_database WHERE datname = current_database())
        AND pg_stat_get_backend_client_port(backend) IS NOT NULL
        AND pg_stat_get_backend_pid(backend) <> pg_backend_pid())
)
"""


def read_fence(*, alias: str = "default") -> datetime:
    """A fence T, read now, before the caller's snapshot.

    Must be called outside any transaction (the page opens its own afterwards).
    """
    connection = connections[alias]
    if connection.in_atomic_block:
        raise RuntimeError("the fence must be read before the page's transaction begins")
    with connection.cursor() as cursor:
        cursor.execute(FENCE_SQL)
        fence: datetime = cursor.fetchone()[0]
    return fence


# The fence as a statement prepared by name in each session of the asyncio pool (`prepare_fence`),
# so that a simple-protocol batch can run it without planning it: planned inline in the batch it
# cost the server about 60 us of planning a round (EXPLAIN: planning 0.05 ms, execution 0.02).
FENCE_STATEMENT = "buzz_fence"


def fence_then(batch: str, *, prepared: bool) -> str:
    """`batch` (which begins the page's transaction) preceded by the fence in a transaction of
    its own: one simple-protocol message, whose first row is the fence.

    The server runs the statements of a message in order, so the fence is read, and its
    transaction committed, before `batch` takes the page's snapshot: the same order as a
    statement of its own, without its round trip (which cost the relay about 60 us of CPU a
    page and a separate message to the server). `BEGIN ... COMMIT` keeps the fence out of the
    page's transaction: before an explicit `BEGIN`, statements of one message would otherwise
    join that transaction, and its snapshot would be the fence's, taken before the fence read
    `pg_stat_activity`. `prepared`: run the session's prepared `FENCE_STATEMENT`; otherwise the
    SQL itself (behind a transaction pooler, where a name prepared on one server connection is
    unknown on the next).
    """
    fence = f"EXECUTE {FENCE_STATEMENT}" if prepared else FENCE_SQL.strip()
    return f"BEGIN; {fence}; COMMIT; {batch}"


async def prepare_fence(
    conn: psycopg.AsyncConnection[Any], *, unless_prepared: bool = False
) -> None:
    """Prepare `FENCE_STATEMENT` in `conn`'s session (outside any transaction); with
    `unless_prepared`, only when the session does not hold it already."""
    await prepare_in_session(conn, FENCE_STATEMENT, f"AS {FENCE_SQL}",
                             unless_prepared=unless_prepared)
