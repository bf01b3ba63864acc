"""The sync epoch's item-4 episodes: bumped when a non-stamping writer appears, and again once it
has left (PROTOCOL.md section 7, "Sync epoch").

Only the fleet refresher (relayinfo.fleet, every RELAY_FLEET_REFRESH_SECONDS) reconciles, through
`reconcile_readiness`; request handlers only read the verdict, so no GET ever writes. Until the
refresher pays a closing bump, item 4 fails in every process's verdict (the open episode row
says so), so nobody reports ready early.
"""

from __future__ import annotations

import logging
from typing import Any

from django.db import connection as django_connection
from django.db import transaction

from artifacts.services.sync_epoch import bump_epoch
from relayinfo.readiness.inspection import inspect_deployment, inspect_fleet
from relayinfo.readiness.report import FleetReport, ReadinessReport
from relayinfo.readiness.verdict import (
    evaluate_afresh,
    restore_unrecorded_episode,
    take_unrecorded_episode,
)

logger = logging.getLogger(__name__)


def reconcile_readiness() -> ReadinessReport:
    """The fleet refresher's evaluation: a fresh verdict with the episode reconciled, kept as
    this process's cached verdict."""
    return evaluate_afresh(reconcile_episode)


def reconcile_episode(report: ReadinessReport, local_generated: bool) -> ReadinessReport:
    """Bump the sync epoch when item 4 starts failing, and again once it stops.

    Why twice. A writer that does not stamp makes changes no round can find by stamps. Opening
    the episode bumps while that writer is still live, so every token issued before (some from
    rounds that ran after its first unstamped write, before anyone noticed) resets. While it is
    live the deployment is not ready, so every round is a full round; but the tokens those full
    rounds hand out carry the new epoch, and that writer may still change data after their T.
    Closing the episode therefore bumps again, after it has left (its connection is gone, so
    every transaction it ran has ended) and before any process reports ready: no token from
    before its last write can continue. The open episode row is what makes the closing bump owed
    across processes and restarts; until it is paid, item 4 fails in every process's verdict.
    One bump on each edge, never one per evaluation: transitions take the sync_state row lock
    and re-read the episode under it.
    """
    fleet = report.fleet
    if fleet is None or not fleet.episodes_present:
        return report
    failing_now = bool(fleet.problems)
    # What a request's verdict saw since the last refresh (verdict.py): if that writer has
    # already left, no edge below is seen, but its one bump is still owed.
    seen = take_unrecorded_episode()
    if seen is not None and not failing_now and fleet.open_episode is None:
        try:
            _bump_for_episode_seen_by_a_request(seen)
        except Exception as exc:
            restore_unrecorded_episode(seen)
            logger.warning("readiness: could not record the item 4 episode: %s", exc)
            return report
        return inspect_deployment(django_connection, local_key_generated=local_generated)
    if failing_now == (fleet.open_episode is not None):
        return report
    try:
        changed = _open_episode(fleet) if failing_now else _close_episode()
    except Exception as exc:
        if seen is not None:
            restore_unrecorded_episode(seen)
        logger.warning("readiness: could not record the item 4 episode: %s", exc)
        return report
    if not changed:
        return report
    return inspect_deployment(django_connection, local_key_generated=local_generated)


def _bump_for_episode_seen_by_a_request(seen: str) -> None:
    """A writer that does not stamp came and went between two refreshes: one bump now resets
    every token issued before it (both edges' bumps at once), recorded as a closed episode."""
    reason = f"readiness item 4 failed (seen by a request; gone by the refresh): {seen}"
    with transaction.atomic(), django_connection.cursor() as cursor:
        _lock_sync_state(cursor)
        epoch = bump_epoch(reason=reason)
        cursor.execute(
            "INSERT INTO fleet_episodes (opened_at, opened_epoch, reason, closed_at, closed_epoch)"
            " VALUES (now(), %s, %s, now(), %s)",
            [epoch, reason[:2000], epoch],
        )
    logger.warning("sync epoch bumped to %s: %s", epoch, reason)


def _lock_sync_state(cursor: Any) -> None:
    # Every transition holds this row lock: two processes never both open (or close) an episode.
    cursor.execute("SELECT epoch FROM sync_state WHERE id = 1 FOR UPDATE")


def _open_episode(fleet: FleetReport) -> bool:
    reason = "readiness item 4 failed: " + "; ".join(fleet.problems)
    with transaction.atomic(), django_connection.cursor() as cursor:
        _lock_sync_state(cursor)
        cursor.execute("SELECT 1 FROM fleet_episodes WHERE closed_at IS NULL LIMIT 1")
        if cursor.fetchone() is not None:
            return False
        epoch = bump_epoch(reason=reason)
        cursor.execute(
            "INSERT INTO fleet_episodes (opened_at, opened_epoch, reason) VALUES (now(), %s, %s)",
            [epoch, reason[:2000]],
        )
    logger.warning("sync epoch bumped to %s: %s", epoch, reason)
    return True


def _close_episode() -> bool:
    with transaction.atomic(), django_connection.cursor() as cursor:
        _lock_sync_state(cursor)
        cursor.execute(
            "SELECT id FROM fleet_episodes WHERE closed_at IS NULL ORDER BY id FOR UPDATE"
        )
        open_ids = [row[0] for row in cursor.fetchall()]
        if not open_ids:
            return False
        # Read the writers again inside the lock (pg_stat_activity is read afresh by the first
        # access in a transaction): close only if the offending writer is really gone.
        if inspect_fleet(django_connection).problems:
            return False
        epoch = bump_epoch(reason="readiness item 4 passes again: non-stamping writer left")
        cursor.execute(
            "UPDATE fleet_episodes SET closed_at = now(), closed_epoch = %s WHERE id = ANY(%s)",
            [epoch, open_ids],
        )
    logger.warning("sync epoch bumped to %s: readiness item 4 passes again", epoch)
    return True
