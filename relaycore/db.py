"""Database helpers shared by models, migrations, writers, reads and the operators' tools."""

from __future__ import annotations

import select
from collections.abc import Mapping
from typing import Any, cast

import psycopg
from django.db import models
from psycopg import errors as pg_errors

# The primary's alias: models, migrations, writes and rounds stay on it (buzzrelay.db_router);
# the reads that may lag name the replica themselves (artifacts.selectors.standby).
PRIMARY = "default"
# A connection idle this long is checked (a round trip) before its next use; one in steady use
# is not (the database threads' and the server loop's pool alike).
RECENT_SECONDS = 2.0

# Keys of DATABASES[...]["OPTIONS"] that Django's PostgreSQL backend consumes itself: libpq
# would reject them as connection parameters. Every other key (application_name,
# connect_timeout, sslmode, ...) is libpq's and is passed through.
DJANGO_ONLY_OPTIONS = frozenset(
    {"pool", "isolation_level", "server_side_binding", "assume_role", "context", "cursor_factory",
     "prepare_threshold"}
)


def psycopg_connect_kwargs(database: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Keyword arguments for `psycopg.connect` (or a psycopg pool) reaching the database that
    Django's settings `database` (default: DATABASES["default"]) name, as Django connects.

    The libpq parameters (NAME, USER, PASSWORD, HOST, PORT when set, and OPTIONS without
    Django's own keys) plus psycopg's `prepare_threshold` as Django applies it: None (nothing
    prepared) unless OPTIONS sets one. The caller adds what its session needs (autocommit,
    its application_name, timeouts).
    """
    if database is None:
        from django.conf import settings

        database = cast(Mapping[str, Any], settings.DATABASES["default"])
    options: Mapping[str, Any] = database.get("OPTIONS") or {}
    kwargs = {key: value for key, value in options.items() if key not in DJANGO_ONLY_OPTIONS}
    kwargs["dbname"] = database["NAME"]
    for setting, key in (("USER", "user"), ("PASSWORD", "password"), ("HOST", "host"),
                         ("PORT", "port")):
        if database.get(setting):
            kwargs[key] = str(database[setting])
    kwargs["prepare_threshold"] = options.get("prepare_threshold")
    return kwargs


def pool_options(database: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The psycopg_pool parameters of Django's pool for `database` (default:
    DATABASES["default"]), for another pool of the same process to use: sizes, timeouts and the
    reconnection bound (buzzrelay/settings.py defines them once). Without the `check`, which is
    a sync function: an asyncio pool brings its own."""
    if database is None:
        from django.conf import settings

        database = cast(Mapping[str, Any], settings.DATABASES["default"])
    options: Mapping[str, Any] = database.get("OPTIONS") or {}
    return {key: value for key, value in (options.get("pool") or {}).items() if key != "check"}


def server_spoke_while_idle(connection: Any) -> bool:
    """An idle connection (no statement in flight) whose socket has something to read: the
    server ended the session (a shutdown or restart sends FATAL 57P01, a crash closes the
    socket), so the connection is broken even though nothing has failed on it yet.

    A poll of the socket, no round trip: the pools skip their round-trip check for connections
    in steady use, and this catches the restart they would otherwise meet at their next page.
    `connection` is a psycopg (sync or asyncio) connection, or anything with `fileno()`.
    """
    try:
        readable, _, _ = select.select([connection.fileno()], [], [], 0)
    except (OSError, ValueError, psycopg.Error):  # closed or lost already: not usable
        return True
    return bool(readable)


async def prepare_in_session(
    conn: psycopg.AsyncConnection[Any], name: str, definition: str, *,
    unless_prepared: bool = False,
) -> None:
    """`PREPARE name definition` in `conn`'s session (outside any transaction; `definition` is
    what follows the name: its parameter types, if any, and `AS` the statement); with
    `unless_prepared`, only when the session holds no statement of that name already."""
    if unless_prepared:
        cursor = await conn.execute(
            "SELECT 1 FROM pg_prepared_statements WHERE name = %s", (name,)
        )
        if await cursor.fetchone() is not None:
            return
    await conn.execute(f"PREPARE {name} {definition}")


class TransactionNow(models.Func):
    """PostgreSQL's `now()`: the transaction's start on the database clock.

    The sync columns' defaults must read back exactly as `now()` (readiness item 2), which
    Django's own `Now()` (compiled to STATEMENT_TIMESTAMP()) would not.
    """

    template = "now()"
    output_field = models.DateTimeField()


def is_statement_timeout(exc: BaseException) -> bool:
    """`exc` (or the psycopg error Django wrapped in it) is a statement or lock timeout: the
    budget of the work ran out, which callers answer as "busy, try again", never as a bug."""
    cause = exc.__cause__ or exc
    return isinstance(cause, pg_errors.QueryCanceled | pg_errors.LockNotAvailable)
