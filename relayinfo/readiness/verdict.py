"""The serving process's readiness verdict about its own database, cached a few seconds.

One verdict feeds NIP-11, rounds, /metrics and the staff page. Evaluating it never writes: the
epoch reconciliation (relayinfo.readiness.episodes) runs in the fleet refresher only.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

import psycopg
from django.conf import settings
from django.db import connection as django_connection

from relaycore.db import psycopg_connect_kwargs
from relayinfo.readiness.inspection import inspect_deployment, unreachable_report
from relayinfo.readiness.report import CHECK_IDS, TITLES, Check, ReadinessReport

logger = logging.getLogger(__name__)

# Reentrant: evaluate_readiness holds it across its cache test and evaluate_afresh.
_cache_lock = threading.RLock()
_cached: ReadinessReport | None = None
# An item-4 failure a request's verdict saw while no episode was recorded: requests never write,
# so the fleet refresher records it (`episodes.reconcile_episode`: it opens the episode, or, if
# the writer has left by then, bumps the epoch once), woken at once through `_wake_refresher`.
# Until it has, this process's verdict keeps item 4 failing: a writer that comes and goes
# between two refreshes still costs its bump, and no continuation resumes across it here.
_unrecorded: str | None = None
_wake_refresher: Callable[[], None] | None = None


def on_unrecorded_episode(wake: Callable[[], None] | None) -> None:
    """Let the fleet refresher be woken when a request's verdict sees an unrecorded episode."""
    global _wake_refresher
    _wake_refresher = wake


def take_unrecorded_episode() -> str | None:
    """The failure a request saw and nobody recorded yet (the refresher takes it to record)."""
    global _unrecorded
    with _cache_lock:
        found, _unrecorded = _unrecorded, None
        return found


def restore_unrecorded_episode(found: str) -> None:
    """Give back what `take_unrecorded_episode` took when recording it failed."""
    global _unrecorded
    with _cache_lock:
        _unrecorded = _unrecorded or found


def evaluate_readiness(*, use_cache: bool = True) -> ReadinessReport:
    """This deployment's verdict, as the serving process sees it; cached per process.

    Read-only: request handlers (NIP-11, rounds, /metrics, the staff page) call it, and no
    request writes to the database. The sync epoch's episodes are reconciled by the fleet
    refresher (`relayinfo.readiness.episodes.reconcile_readiness`), whose verdict this cache
    also holds.

    Evaluations are serialized per process, so when the cache expires under load one request
    evaluates and the others wait for its answer rather than all querying the catalogs.
    """
    ttl = float(settings.RELAY_READINESS_CACHE_SECONDS)
    with _cache_lock:
        cached = _cached
        if use_cache and cached is not None and time.time() - cached.evaluated_at < ttl:
            return cached
        return evaluate_afresh()


def evaluate_afresh(
    then: Callable[[ReadinessReport, bool], ReadinessReport] | None = None,
) -> ReadinessReport:
    """A new verdict, remembered as this process's cached one.

    `then(report, local_key_generated)` runs on it while the evaluation lock is held, and only
    when the report was read on this thread's own Django connection (outside any caller's
    transaction and event loop): the epoch reconciliation writes there, never on the separate
    connection a caller's transaction forces.
    """
    global _cached
    with _cache_lock:
        local_generated = bool(settings.RELAY_KEY_GENERATED)
        own = _own_connection_is_usable()
        report = _inspect_local(own=own, local_generated=local_generated)
        if then is not None and own and report.error is None:
            report = then(report, local_generated)
        report = _holding_unrecorded(report)
        _cached = report
        return report


def _holding_unrecorded(report: ReadinessReport) -> ReadinessReport:
    """Note an item-4 failure no episode records (for the refresher), and keep item 4 failing
    while one is owed."""
    global _unrecorded
    fleet = report.fleet
    noticed = False
    if fleet is not None and fleet.episodes_present and fleet.problems and (
        fleet.open_episode is None
    ):
        noticed = _unrecorded is None
        _unrecorded = "; ".join(fleet.problems)
    if noticed and _wake_refresher is not None:
        _wake_refresher()
    if _unrecorded is None or not report.checks or not report.item(4).passed:
        return report
    owed = Check(
        4, CHECK_IDS[4], TITLES[4], False,
        f"a writer that does not stamp was seen ({_unrecorded}); the sync epoch bump it needs "
        f"is not recorded yet",
        "this relay's fleet refresher records it within one refresh interval",
    )
    checks = tuple(owed if check.item == 4 else check for check in report.checks)
    return replace(report, checks=checks)


# The most one evaluation may wait on the database, in milliseconds.
EVALUATION_BUDGET_MS = 3000


def deployment_ready() -> bool:
    """Whether continuation rounds may be served and `artifacts.incremental` advertised.

    Cached a few seconds per process (RELAY_READINESS_CACHE_SECONDS). Safe to call inside a
    transaction or from async code: the evaluation then runs on a connection of its own, so it
    never takes a snapshot in the caller's transaction (the fence must be read first there).
    """
    return evaluate_readiness().ready


def cached_readiness() -> bool | None:
    """The verdict while this process's cached one is fresh, else None (never evaluates)."""
    cached, ttl = _cached, float(settings.RELAY_READINESS_CACHE_SECONDS)
    if cached is None or time.time() - cached.evaluated_at >= ttl:
        return None
    return cached.ready


def forget_cached_readiness() -> None:
    """Drop this process's cached verdict (the next call evaluates again)."""
    global _cached
    with _cache_lock:
        _cached = None


def _in_event_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def _own_connection_is_usable() -> bool:
    """Django's connection of this thread can be used: no caller transaction, no event loop,
    and a session of its own (behind a transaction-mode pooler the evaluation's session
    settings would land on whichever server connection ran them, and stay there for other
    clients)."""
    return (
        not _in_event_loop() and not django_connection.in_atomic_block
        and settings.CONFIG.database_pooler != "transaction"
    )


@contextmanager
def separate_connection() -> Iterator[psycopg.Connection[Any]]:
    """A short-lived autocommit connection to this deployment, named like every relay one.

    On PostgreSQL itself (DATABASE_DIRECT_URL) behind a transaction-mode pooler: its timeouts
    are startup options, which PgBouncer refuses ("unsupported startup parameter: options"),
    and session settings would not stay with this client there.
    """
    direct = settings.CONFIG.database_direct
    if settings.CONFIG.database_pooler == "transaction" and direct is not None:
        kwargs = psycopg_connect_kwargs({
            **direct.django_settings(),
            "OPTIONS": {**django_connection.settings_dict.get("OPTIONS", {}),
                        **direct.options},
        })
    else:
        kwargs = psycopg_connect_kwargs(django_connection.settings_dict)
    kwargs["application_name"] = settings.RELAY_APPLICATION_NAME
    kwargs.setdefault("connect_timeout", 5)
    budget = (
        f"-c statement_timeout={EVALUATION_BUDGET_MS} -c lock_timeout={EVALUATION_BUDGET_MS // 2}"
    )
    kwargs["options"] = f"{kwargs.get('options', '')} {budget}".strip()
    conn = psycopg.connect(autocommit=True, **kwargs)
    try:
        yield conn
    finally:
        conn.close()


def _inspect_local(*, own: bool, local_generated: bool) -> ReadinessReport:
    try:
        if own:
            # Bounded like every read: a verdict must never hang NIP-11 or /query behind a lock
            # (a migration's, an operator's LOCK TABLE); timing out reads as "unreachable".
            # Session settings, each statement in autocommit, rather than one transaction: the
            # fleet refresher evaluates every few seconds, and a transaction open across all
            # the catalog reads would hold every round's fence below its start meanwhile, so a
            # round started right after a write could miss it (PROTOCOL.md section 5).
            with django_connection.cursor() as cursor:
                cursor.execute(
                    f"SET statement_timeout = {EVALUATION_BUDGET_MS};"
                    f" SET lock_timeout = {EVALUATION_BUDGET_MS // 2}"
                )
                try:
                    return inspect_deployment(
                        django_connection, local_key_generated=local_generated
                    )
                finally:
                    cursor.execute("RESET statement_timeout; RESET lock_timeout")
        with separate_connection() as conn:
            return inspect_deployment(conn, local_key_generated=local_generated)
    except Exception as exc:
        logger.warning("readiness: database unreachable: %s", exc)
        return unreachable_report(f"{type(exc).__name__}: {exc}")
