"""The database router: models, migrations and ORM queries stay on the primary ("default").

A standby (DATABASES["replica"], from DATABASE_REPLICA_URL) is read-only and may lag, so nothing
is routed to it implicitly: Django's textbook primary/replica router sends every ORM read to the
replica, and a writer that reads a row before it updates it would then decide on stale data.
The reads that may lag name the replica themselves (artifacts.selectors.standby).
"""

from __future__ import annotations

from typing import Any

from relaycore.db import PRIMARY


class PrimaryRouter:
    def db_for_read(self, model: type[Any], **hints: Any) -> str | None:
        return None  # the default database (or the one an instance was read from)

    def db_for_write(self, model: type[Any], **hints: Any) -> str | None:
        return None

    def allow_relation(self, obj1: Any, obj2: Any, **hints: Any) -> bool | None:
        return None

    def allow_migrate(self, db: str, app_label: str, **hints: Any) -> bool:
        # A standby replays the primary's schema; migrating it would fail (read-only).
        return db == PRIMARY
