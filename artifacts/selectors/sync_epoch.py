"""The database's sync epoch and identity: what every progress token is bound to.

A token continues only against the database and epoch it was issued under (PROTOCOL.md sections
5 and 7). The identity is the cluster's system identifier (pg_control_system()), the database's
oid and the server's **timeline**, so neither a restored copy on another cluster nor a sibling
database on the same cluster continues a token; a restore of the same cluster keeps all three,
which is why restores and manual data fixes bump the epoch
(artifacts.services.sync_epoch.bump_epoch).

Why the timeline: a promoted standby keeps its old primary's system identifier and database oid,
but may lack the primary's last asynchronously committed writes, which clients may already hold.
Promotion always starts a new timeline, before the server accepts its first write, so a token
issued on the old timeline resets on the new one: no round continues past writes that no longer
exist. An epoch bump on noticing the new timeline could not do this alone: pages would be served
on the promoted server between its promotion and the bump, and its epoch is the standby's copy,
which may predate bumps the old primary made (and clients hold).

The identity is read once per connection (a connection is to one server for its life; a pooled
connection to a dead primary fails and is replaced by one to the promoted server), never once
per process: after a failover the same DATABASE_URL reaches another server.

The sync_state table belongs to relayinfo's models; rounds read it here, in their own layer.
"""

from __future__ import annotations

import logging
import threading
from typing import Any
from weakref import WeakKeyDictionary

import psycopg
from django.db import connections
from django.db.backends.utils import CursorWrapper

# The server's current timeline: the first 8 hex digits of the WAL file it writes now. Not
# pg_control_checkpoint().timeline_id, which names the last checkpoint's timeline and stays on
# the old one after a promotion until the checkpoint that follows it completes, while the server
# already accepts writes. A standby (in recovery) cannot name its insert position; its timeline
# is then the one it replays (only a misconfigured relay runs rounds there).
TIMELINE_SQL = (
    "CASE WHEN pg_is_in_recovery() THEN (SELECT timeline_id FROM pg_control_checkpoint())"
    " ELSE ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::int END"
)
# Timeline 1 (a cluster never promoted nor recovered to a point in time) is spelled as before
# timelines were bound, "<system identifier>/<oid>": tokens issued by earlier versions continue,
# so a rolling upgrade resets nobody, and no client alternating between old and new instances
# resets on every page. Every later timeline is appended, and differs from every other.
IDENTITY_SQL = (
    "SELECT s.system_identifier::text || '/' || d.oid::text"
    " || CASE WHEN t.timeline = 1 THEN '' ELSE '/' || t.timeline::text END"
    " FROM pg_control_system() s, pg_database d,"
    f" (SELECT ({TIMELINE_SQL}) AS timeline) t"
    " WHERE d.datname = current_database()"
)

logger = logging.getLogger(__name__)

# Per psycopg connection (Django's and the asyncio pool's): read on its first page.
_identities: WeakKeyDictionary[Any, str] = WeakKeyDictionary()
_identity_lock = threading.Lock()
# The identity this process saw last, to say so when a new connection finds another one.
_last_seen: list[str] = []


def _remember(conn: Any, identity: str) -> None:
    with _identity_lock:
        _identities[conn] = identity
        previous = _last_seen[0] if _last_seen else None
        _last_seen[:] = [identity]
    if previous is not None and previous != identity:
        logger.warning(
            "database identity changed from %s to %s (system identifier/database oid/"
            "timeline: a failover, a restore or another database): every progress token of "
            "the old one resets", previous, identity,
        )


def database_identity(cursor: CursorWrapper | None = None, *, alias: str = "default") -> str:
    """`"<system identifier>/<database oid>[/<timeline>]"` (the timeline when it is not 1) of
    the server `cursor` (or a cursor of `alias`) is connected to, read once per connection."""
    if cursor is None:
        with connections[alias].cursor() as own:
            return database_identity(own, alias=alias)
    raw = cursor.db.connection
    identity = _identities.get(raw)
    if identity is None:
        cursor.execute(IDENTITY_SQL)
        identity = str(cursor.fetchone()[0])
        _remember(raw, identity)
    return identity


async def connection_identity(conn: psycopg.AsyncConnection[Any]) -> str:
    """The same identity for a connection of the asyncio read pool
    (artifacts.selectors.async_reads), read once per connection."""
    identity = _identities.get(conn)
    if identity is None:
        async with conn.cursor() as cursor:
            await cursor.execute(IDENTITY_SQL)
            row = await cursor.fetchone()
        assert row is not None
        identity = str(row[0])
        _remember(conn, identity)
    return identity


# The epoch as an SQL expression, for callers that read it within a larger first statement.
EPOCH_SQL = "coalesce((SELECT epoch FROM sync_state WHERE id = 1), 0)"


def current_sync_state(
    cursor: CursorWrapper | None = None, *, alias: str = "default"
) -> tuple[int, str]:
    """(epoch, database identity); the epoch is read in the caller's snapshot when a cursor is
    given, so a page checks the epoch of the snapshot it classifies by.

    A database without the row (it was deleted, or a test flush emptied the table) is epoch 0;
    `bump_epoch` recreates it at 1 or more, so tokens issued meanwhile reset after a bump too.
    """
    epoch = int(_scalar(f"SELECT {EPOCH_SQL}", cursor, alias))
    return epoch, database_identity(cursor, alias=alias)


def _scalar(sql: str, cursor: CursorWrapper | None, alias: str) -> Any:
    """The one value `sql` selects, on `cursor` (its snapshot) or a cursor of `alias`."""
    if cursor is None:
        with connections[alias].cursor() as own:
            own.execute(sql)
            return own.fetchone()[0]
    cursor.execute(sql)
    return cursor.fetchone()[0]
