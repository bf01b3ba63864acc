"""Reads a hot standby may serve: plain reads, history and WebSocket replay.

With DATABASE_REPLICA_URL set (the "replica" database of buzzrelay.settings), these reads go to
the standby while it is fresh enough, and to the primary otherwise. Rounds, the fence, access
checks and every write stay on the primary (PROTOCOL.md section 5: rounds run on the primary):
a round's T and read-your-writes need the primary's clock and its open transactions.

"Fresh enough" is decided on the standby, by one short statement before the read's own
transaction (replay only moves forward, so the read's snapshot is at least as new):

- a plain read accepts a standby whose replay lags by at most RELAY_REPLICA_MAX_LAG_MS: zero
  when it has applied all the WAL it received while streaming, else the time since the last
  transaction it applied committed on the primary (an overestimate when the primary is quiet,
  which only sends more reads to the primary). A standby not streaming (cut off from the
  primary) has no measurable lag and is not used. (pg_stat_wal_receiver shows its status only
  to roles with pg_read_all_stats, which the serving role has: readiness item 6);
- a WebSocket replay must miss nothing its live subscription does not cover: the subscription
  is registered first, then the primary's WAL position is read (`primary_position`), and the
  standby serves the replay only once it has replayed up to that position (briefly waited for),
  so every event committed before the subscription is in the replay and every later one
  arrives live. Otherwise the replay runs on the primary.

A standby that fails is skipped for a few seconds, and the reads go to the primary meanwhile.
The routing is hand-written: Django's routers choose a database per model, not per read and
its freshness, and no maintained package measures a PostgreSQL standby's lag.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from django.conf import settings
from django.db import DatabaseError, connections
from django.db.backends.utils import CursorWrapper

from artifacts.selectors.budget import read_transaction
from relaycore.db import PRIMARY

__all__ = ["REPLICA", "primary_position", "standby_read"]

logger = logging.getLogger(__name__)

REPLICA = "replica"
# A standby that failed is not asked again for this long.
SKIP_FAILED_SECONDS = 5.0
# How long a replay waits for the standby to reach the subscription's position (it streams
# within milliseconds when healthy) before it runs on the primary instead.
CATCH_UP_WAIT_SECONDS = 0.05
_POLL_SECONDS = 0.005

# (lag in ms, or NULL when unknown; whether the standby has replayed up to %(after)s). A server
# that is not in recovery is no standby any more (promoted by a failover, perhaps apart from the
# primary the relay writes to): it is not used, and the reads go to DATABASE_URL's server.
_FRESHNESS = """
SELECT CASE WHEN NOT pg_is_in_recovery() THEN NULL
            WHEN NOT EXISTS (SELECT 1 FROM pg_stat_wal_receiver WHERE status = 'streaming')
                 THEN NULL
            WHEN pg_last_wal_receive_lsn() = pg_last_wal_replay_lsn() THEN 0
            ELSE extract(epoch FROM clock_timestamp() - pg_last_xact_replay_timestamp()) * 1000
       END,
       pg_is_in_recovery() AND %(after)s::pg_lsn IS NOT NULL
           AND pg_last_wal_replay_lsn() >= %(after)s::pg_lsn
"""

_failed_until = 0.0
_failed_lock = threading.Lock()


def standby_configured() -> bool:
    return REPLICA in settings.DATABASES and time.monotonic() >= _failed_until


def primary_position() -> str | None:
    """The primary's WAL insert position now, when a standby may serve replays (else None):
    every transaction committed before this call ends below it."""
    if not standby_configured():
        return None
    with connections[PRIMARY].cursor() as cursor:
        cursor.execute("SELECT pg_current_wal_lsn()::text")
        return str(cursor.fetchone()[0])


@contextmanager
def standby_read(
    *, beside_live: bool = False, caught_up_to: str | None = None
) -> Iterator[CursorWrapper]:
    """A read transaction under the read budget (budget.read_transaction), on the standby when
    it is fresh enough for this read, else on the primary.

    A plain read (the default) takes a standby within the lag bound. A replay `beside_live` a
    subscription takes it only once it has replayed `caught_up_to` (`primary_position`, read
    after the subscription was registered); without a position, on the primary.
    """
    usable = standby_configured() and (caught_up_to is not None or not beside_live)
    alias = REPLICA if usable and _fresh(caught_up_to) else PRIMARY
    with read_transaction(alias=alias) as cursor:
        yield cursor


def _fresh(caught_up_to: str | None) -> bool:
    """Whether the standby may serve the read; False also when it cannot be asked."""
    max_lag = settings.RELAY_REPLICA_MAX_LAG_MS
    deadline = time.monotonic() + CATCH_UP_WAIT_SECONDS
    try:
        with connections[REPLICA].cursor() as cursor:
            while True:
                cursor.execute(_FRESHNESS, {"after": caught_up_to})
                lag, caught_up = cursor.fetchone()
                if caught_up_to is None:
                    return lag is not None and float(lag) <= max_lag
                if caught_up or time.monotonic() >= deadline:
                    return bool(caught_up)
                time.sleep(_POLL_SECONDS)
    except DatabaseError as exc:
        _skip_for_a_while(exc)
        return False


def _skip_for_a_while(exc: DatabaseError) -> None:
    global _failed_until
    with _failed_lock:
        _failed_until = time.monotonic() + SKIP_FAILED_SECONDS
    logger.warning("standby unavailable, reading from the primary for %s s: %s",
                   SKIP_FAILED_SECONDS, exc)
