"""Direct PostgreSQL sessions for buzz-admin, beside Django's own connection.

Concurrent index builds must run outside any transaction, their progress is read from a second
session, and the migration lock is held by a third that stays idle: so these are plain psycopg
connections in autocommit mode, opened with the deployment's settings.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TextIO, cast

import psycopg

from buzzrelay import VERSION

# One advisory lock for everything that changes the schema (migrate, build-indexes): two runs
# never interleave. The key spells "buzzmigr"; advisory locks are per database.
MIGRATION_LOCK_KEY = 0x62757A7A6D696772


def connection_kwargs() -> dict[str, Any]:
    """Connection parameters of the deployment's database, from Django's settings."""
    from relaycore.db import psycopg_connect_kwargs

    return psycopg_connect_kwargs()


def database_label() -> str:
    kwargs = connection_kwargs()
    return f"{kwargs['dbname']} on {kwargs.get('host', 'localhost')}:{kwargs.get('port', 5432)}"


def application_name(purpose: str) -> str:
    """How buzz-admin names its sessions in pg_stat_activity: never `buzzrelay/...`.

    buzz-admin writes no artifact data, and an operator may run it without the fleet's relay key:
    announcing `buzzrelay/... key=<another key>` would fail readiness item 4 (one key) for the
    whole deployment while it runs.
    """
    return f"buzz-admin/{VERSION} {purpose}"


def connect(purpose: str) -> psycopg.Connection[Any]:
    """A new autocommit session, named for `purpose` (see application_name)."""
    kwargs = connection_kwargs()
    kwargs["application_name"] = application_name(purpose)
    return psycopg.connect(autocommit=True, **kwargs)


@contextmanager
def django_connection_named(purpose: str) -> Iterator[None]:
    """Django's default connection, named for `purpose` within the block (see application_name).

    The name is part of the connection parameters, so the connection, and the pool its
    connections come from (built with the parameters of its first use), are closed on the way in
    and out: the quickstart serves from the same process afterwards, and the test suite runs in
    the process that migrated its database, both under the relay's name.
    """
    from django.db import connection

    options = connection.settings_dict.setdefault("OPTIONS", {})
    previous = options.get("application_name")
    close_with_pool(connection)
    options["application_name"] = application_name(purpose)
    try:
        yield
    finally:
        close_with_pool(connection)
        if previous is None:
            options.pop("application_name", None)
        else:
            options["application_name"] = previous


def close_with_pool(connection: Any) -> None:
    from django.db import connections

    wrapper: Any = connections[connection.alias]  # `django.db.connection` is a proxy
    wrapper.close()
    # Only a pool that exists: `close_pool()` asks `wrapper.pool`, which would build one.
    if wrapper.alias in getattr(type(wrapper), "_connection_pools", {}):
        wrapper.close_pool()


def describe_error(exc: BaseException) -> str:
    """One line for an operator: the server's message without psycopg's context lines."""
    cause = exc.__cause__ if isinstance(exc.__cause__, psycopg.Error) else exc
    text = str(cause).strip().splitlines()
    first = text[0] if text else type(cause).__name__
    if isinstance(cause, psycopg.OperationalError) and getattr(cause, "sqlstate", None) is None:
        return f"cannot connect to PostgreSQL ({database_label()}): {first}"
    return first


def sqlstate(exc: BaseException) -> str | None:
    """The SQLSTATE of a psycopg error, also when Django wrapped it."""
    for candidate in (exc, exc.__cause__):
        if isinstance(candidate, psycopg.Error) and candidate.sqlstate:
            return candidate.sqlstate
    return None


def _lock_holders(session: psycopg.Connection[Any]) -> list[int]:
    rows = session.execute(
        """
        SELECT pid FROM pg_locks
        WHERE locktype = 'advisory' AND granted AND objsubid = 1
          AND classid = %s AND objid = %s
          AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
        """,
        [MIGRATION_LOCK_KEY >> 32, MIGRATION_LOCK_KEY & 0xFFFFFFFF],
    ).fetchall()
    return [int(row[0]) for row in rows]


# The parts of a DATABASES entry that say where the database is (OPTIONS are merged: the
# relay's own options, the application_name above all, stay).
_WHERE = ("NAME", "USER", "PASSWORD", "HOST", "PORT")


@contextmanager
def direct_database() -> Iterator[None]:
    """Within the block, Django's default connection and `connect()` reach PostgreSQL itself
    (DATABASE_DIRECT_URL) when DATABASE_URL is a transaction-mode pooler; else as they are.

    Behind transaction pooling a session-level advisory lock is taken on whichever server
    connection ran that statement and stays there, held for nobody (and released by nobody)
    once the pooler hands the connection to another client; the migrations' and index builds'
    session settings would leak the same way. So the schema's work runs on a direct session.
    """
    from django.conf import settings
    from django.db import connection

    config = settings.CONFIG
    if config.database_pooler != "transaction":
        yield
        return
    # relaycore.config refuses DATABASE_POOLER=transaction without DATABASE_DIRECT_URL.
    assert config.database_direct is not None
    direct = config.database_direct.django_settings()
    entry = connection.settings_dict
    saved = {key: entry.get(key) for key in _WHERE}
    saved_options = dict(entry.get("OPTIONS") or {})
    close_with_pool(connection)
    entry.update({key: direct[key] for key in _WHERE})
    entry["OPTIONS"] = {**saved_options, **cast(dict[str, Any], direct["OPTIONS"])}
    try:
        yield
    finally:
        close_with_pool(connection)
        entry.update(saved)
        entry["OPTIONS"] = saved_options


@contextmanager
def migration_lock(out: TextIO) -> Iterator[None]:
    """Hold the schema advisory lock for the block; waits (saying so) while another run has it.

    The session holding it stays idle outside any transaction, so it never delays the
    concurrent index builds (which wait for every transaction older than themselves). The lock,
    and everything the block does, is on PostgreSQL itself (see direct_database).
    """
    with direct_database():
        session = connect("migration lock")
        try:
            _take_lock(session, out)
            yield
        finally:
            # Closing the session releases the lock, also when the block failed.
            session.close()


def _take_lock(session: psycopg.Connection[Any], out: TextIO) -> None:
    acquired = session.execute("SELECT pg_try_advisory_lock(%s)", [MIGRATION_LOCK_KEY])
    row = acquired.fetchone()
    if not (row and row[0]):
        holders = ", ".join(str(pid) for pid in _lock_holders(session)) or "?"
        out.write(
            f"waiting for the migration lock: another buzz-admin migrate or build-indexes "
            f"holds it (backend pid {holders})\n"
        )
        out.flush()
        started = time.monotonic()
        session.execute("SELECT pg_advisory_lock(%s)", [MIGRATION_LOCK_KEY])
        out.write(f"got the migration lock after {time.monotonic() - started:.1f} s\n")
        out.flush()
