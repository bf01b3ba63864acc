"""The database's sync epoch and identity: what every progress token is bound to.

A token continues only against the database and epoch it was issued under (PROTOCOL.md sections
5 and 7). The identity is the cluster's system identifier (pg_control_system()) plus the
database's oid, so neither a restored copy on another cluster nor a sibling database on the same
cluster continues a token; a restore of the same cluster keeps both, which is why restores and
manual data fixes bump the epoch (artifacts.services.sync_epoch.bump_epoch).

The sync_state table belongs to relayinfo's models; rounds read it here, in their own layer.
"""

from __future__ import annotations

import threading
from typing import Any

from django.db import connections
from django.db.backends.utils import CursorWrapper

# Per process and per database settings: the identity of a database never changes while a
# process is connected to it, and reading pg_control_system() on every page would be wasted work.
_identity_cache: dict[tuple[str, str, str, str], str] = {}
_identity_lock = threading.Lock()


def _cache_key(alias: str) -> tuple[str, str, str, str]:
    params = connections[alias].settings_dict
    return (str(params["HOST"]), str(params["PORT"]), str(params["NAME"]), alias)


def cached_database_identity(alias: str = "default") -> str | None:
    """The identity once this process has read it, else None."""
    return _identity_cache.get(_cache_key(alias))


def database_identity(cursor: CursorWrapper | None = None, *, alias: str = "default") -> str:
    """`"<system identifier>/<database oid>"`, read once per process."""
    key = _cache_key(alias)
    cached = _identity_cache.get(key)
    if cached is not None:
        return cached
    sql = (
        "SELECT (SELECT system_identifier FROM pg_control_system())::text || '/' || "
        "(SELECT oid FROM pg_database WHERE datname = current_database())::text"
    )
    identity = str(_scalar(sql, cursor, alias))
    with _identity_lock:
        _identity_cache[key] = identity
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
