"""buzz-admin's direct sessions (buzzrelay/admin_commands/_pg.py): where the schema's lock is held.

Behind PgBouncer: tests/faults/test_pgbouncer.py."""

from __future__ import annotations

import io
from dataclasses import replace

import pytest
from django.conf import settings
from django.db import connection
from django.test import override_settings

from buzzrelay.admin_commands._pg import (
    MIGRATION_LOCK_KEY,
    connection_kwargs,
    direct_database,
    migration_lock,
)
from relaycore.config import parse_database_url


def _where() -> tuple[object, ...]:
    entry = connection.settings_dict
    return tuple(entry[key] for key in ("NAME", "USER", "HOST", "PORT"))


@pytest.mark.django_db(transaction=True)
def test_without_transaction_pooling_nothing_moves() -> None:
    before = _where()
    with direct_database():
        assert _where() == before
    assert _where() == before


@pytest.mark.django_db(transaction=True)
def test_behind_transaction_pooling_the_lock_is_held_on_the_direct_database() -> None:
    entry = connection.settings_dict
    # The direct URL: the same server under another spelling of its host, so it can be told
    # apart from DATABASE_URL and still reached.
    direct_url = f"postgres://{entry['USER']}@localhost:{entry['PORT'] or 5432}/{entry['NAME']}"
    config = replace(settings.CONFIG, database_pooler="transaction",
                     database_direct=parse_database_url(direct_url))
    before, options = _where(), dict(entry["OPTIONS"])
    with override_settings(CONFIG=config), migration_lock(io.StringIO()):
        # Django's connection and buzz-admin's own sessions (the lock's, the index builds')
        assert entry["HOST"] == "localhost" and connection_kwargs()["host"] == "localhost"
        assert entry["OPTIONS"]["application_name"] == options["application_name"]
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted"
                " AND classid = %s AND objid = %s",
                [MIGRATION_LOCK_KEY >> 32, MIGRATION_LOCK_KEY & 0xFFFFFFFF],
            )
            assert cursor.fetchone()[0] == 1
    assert _where() == before and entry["OPTIONS"] == options
