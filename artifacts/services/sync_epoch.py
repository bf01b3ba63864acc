"""Bumping the sync epoch: every progress token of an older epoch resets (PROTOCOL.md section 7).

Run by the fleet refresher's readiness reconciliation (relayinfo.readiness.episodes) and by
`buzz-admin bump-epoch`; rounds read the epoch through artifacts.selectors.sync_epoch.
"""

from __future__ import annotations

from django.db import connections, transaction


def bump_epoch(*, reason: str, alias: str = "default", past_any_restore: bool = False) -> int:
    """Move the sync epoch on; every client's next page resets. Returns the new epoch.

    Run by readiness when a non-stamping writer is seen (and when it has left) and by
    `buzz-admin bump-epoch`. The row lock of the upsert serializes concurrent bumps; each one
    counts.

    `past_any_restore` (the operator's command, run after a restore): the epoch also jumps to at
    least the database clock in microseconds since 1970. A restored database's epoch is the one
    of its backup, and clients may hold tokens of later epochs: counting on by one could land
    exactly on an epoch they hold (backup at 5, bumped to 6 later, restored to 5, bumped to 6)
    and let their tokens continue past writes the restore undid. Every epoch ever handed out
    before the bump is below the clock of the bump (readiness bumps count up by one from values
    taken earlier), so the jump cannot land on any of them.
    """
    floor = "(extract(epoch FROM clock_timestamp()) * 1000000)::bigint" if past_any_restore else "0"
    with transaction.atomic(using=alias), connections[alias].cursor() as cursor:
        cursor.execute(
            "INSERT INTO sync_state AS s (id, epoch, bumped_at, reason)"
            f" VALUES (1, greatest(1, {floor}), now(), %(reason)s)"
            " ON CONFLICT (id) DO UPDATE"
            f" SET epoch = greatest(s.epoch + 1, {floor}), bumped_at = now(),"
            " reason = EXCLUDED.reason"
            " RETURNING epoch",
            {"reason": reason[:500]},
        )
        return int(cursor.fetchone()[0])
