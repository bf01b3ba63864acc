"""The transaction every writer runs in, and the statements writers share.

`write_transaction` opens one transaction under the write budgets (statement and lock
timeouts: a stuck writer must not hold a head, or stretch the stamp-to-commit lag that
incremental reads allow for, for longer than that), measures stamp-to-commit lag, and after
the commit announces the stored events (`artifacts.signals.events_committed`). Services nest
freely: a service called inside another's write transaction joins it instead of opening a
savepoint, so an ingest with several effects stays one transaction.

Stamps come from the database clock: `statement_timestamp()` (what Django's `Now()` compiles
to), never the application's clock. A stamp is never earlier than its transaction's
`xact_start`, which the read fence relies on.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from functools import partial
from uuid import UUID

from django.conf import settings
from django.db import connection, transaction

from artifacts.models import Event as EventRow
from artifacts.services.stamp_lag import flush_lag_samples, note_lag
from artifacts.services.write_steps import Rows, Statement
from artifacts.signals import AccessChange, StoredEvent, access_changed, events_committed
from nostr.events import Event
from nostr.kinds import HINT_KINDS

WRITE_STATEMENT_TIMEOUT = "5s"
# Waiting for a competing writer of the same head or channel normally takes milliseconds;
# three seconds of queueing means something holds a lock it should not.
WRITE_LOCK_TIMEOUT = "3s"


@dataclass(slots=True)
class WriteContext:
    community_id: int
    # Monotonic time when the transaction's budgets were set, just after BEGIN: every stamp
    # of the transaction is taken later, so "now - started" at commit bounds the
    # stamp-to-commit lag from above without asking the database for the time again.
    started: float
    stored: list[StoredEvent] = field(default_factory=list)
    # Channels whose readability changed; `access_everywhere` for community-wide changes.
    access_channels: set[str] = field(default_factory=set)
    access_everywhere: bool = False
    # What each channel change was (`artifacts.signals.AccessChange`), for live hints.
    changes: list[AccessChange] = field(default_factory=list)

    def access_changed(
        self, channel_id: UUID | None, what: str | None = None, *, pubkey: str | None = None
    ) -> None:
        """Note a readability change of one channel (None: the whole community); `what` says
        which change it was (`artifacts.signals`), `pubkey` the member whose access changed."""
        if channel_id is None:
            self.access_everywhere = True
            return
        self.access_channels.add(str(channel_id))
        if what is not None:
            self.changes.append(AccessChange(str(channel_id), what, pubkey))

    def announce(self, *, event: Event, channel_id: UUID | None) -> None:
        self.stored.append(
            StoredEvent(event=event, channel_id=str(channel_id) if channel_id is not None else None)
        )


_current: ContextVar[WriteContext | None] = ContextVar("buzz_write_context", default=None)


@contextmanager
def write_transaction(*, community_id: int) -> Iterator[WriteContext]:
    """One write transaction for `community_id` (or the enclosing one, when nested)."""
    outer = _current.get()
    if outer is not None:
        if outer.community_id != community_id:
            raise RuntimeError("a write transaction spans one community")
        yield outer
        return
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute(*budget_statement())
        ctx = WriteContext(community_id=community_id, started=time.monotonic())
        token = _current.set(ctx)
        try:
            yield ctx
        finally:
            _current.reset(token)
        # robust: a failing receiver is logged; the write is committed whatever it does.
        transaction.on_commit(partial(_after_commit, ctx), robust=True)


def budget_statement() -> Statement:
    """The write budgets, local to the transaction (safe behind a transaction pooler)."""
    return (
        "SELECT set_config('statement_timeout', %s, true), set_config('lock_timeout', %s, true)",
        [WRITE_STATEMENT_TIMEOUT, WRITE_LOCK_TIMEOUT],
    )


def _after_commit(ctx: WriteContext) -> None:
    if announce_commit(ctx):
        flush_lag_samples()


def announce_commit(ctx: WriteContext) -> bool:
    """After the commit: note the stamp-to-commit lag, and announce what the transaction stored
    and changed (`artifacts.signals`). True when the lag samples are due to be flushed
    (`stamp_lag`): the caller flushes them on its connection."""
    due = note_lag((time.monotonic() - ctx.started) * 1000.0)
    if ctx.stored:
        events_committed.send(sender=EventRow, community_id=ctx.community_id, events=ctx.stored)
    if ctx.access_everywhere or ctx.access_channels:
        channel_ids = None if ctx.access_everywhere else sorted(ctx.access_channels)
        access_changed.send(
            sender=EventRow, community_id=ctx.community_id, channel_ids=channel_ids,
            changes=_with_events(ctx.changes, ctx.stored),
        )
    return due


def _with_events(changes: list[AccessChange], stored: list[StoredEvent]) -> list[AccessChange]:
    """`changes`, each with the stored event that made it (a 9000/9001/9002/9008: an
    event-driven write makes its changes in its event's channel; a creation, 9007, is told
    without its event)."""
    made_by = {
        item.channel_id: item.event for item in stored
        if item.event.kind in HINT_KINDS and item.channel_id is not None
    }
    return [
        replace(change, event=made_by.get(change.channel_id)) if change.event is None else change
        for change in changes
    ]


def lock_community_statement(community_id: int) -> Statement:
    """The statement that takes the community's row lock (every writer runs it as a statement:
    the kinds' steps, the operators' services through them, `communities.community_update`).

    Lock order for every writer that takes it: community row first, then channel rows, then
    member rows. Artifact writers never take it, so channel listing changes do not queue
    behind artifact traffic.
    """
    return "SELECT 1 FROM communities WHERE id = %s FOR UPDATE", [community_id]


# How the channel of a listing change was readable before it, from its row after the change
# (the statement runs after the change, in its transaction): it did not exist or was restored
# from deletion (`absent`); it was deleted just now (`live`: its visibility as it is); its
# visibility flipped (`flipped`); or its readability did not change (`same`: archive, unarchive).
LISTING_ABSENT, LISTING_LIVE, LISTING_FLIPPED, LISTING_SAME = "absent", "live", "flipped", "same"
# Old log rows a listing change collects, at most: each change adds one row, so the log stays
# at the changes of the last ARTIFACT_SYNC_TOKEN_MAX_AGE (plus a day) without a periodic job.
LISTING_COLLECT_BATCH = 16


def bump_listing_statement(
    community_id: int,
    *,
    stamp: bool,
    channel_id: UUID | None = None,
    before: str = LISTING_SAME,
) -> Statement:
    """Count a listing or policy change (and stamp it when `stamp`); the caller holds the
    community's row lock (`lock_community_statement`).

    `listing_version` lets a read tell "nothing changed" without comparing stamps, which are
    not unique (PROTOCOL.md section 5). The same statement logs the change in
    `artifact_listing_changes` under the new version (the channel, when the change is a
    channel's, and how it was readable before: `before`, one of the LISTING_* modes), so a
    snapshot sees a version exactly when it sees its row, and collects up to
    LISTING_COLLECT_BATCH of the community's rows older than any live token (tokens older than
    ARTIFACT_SYNC_TOKEN_MAX_AGE reset; a day of margin for the writers' stamp-to-commit lag).
    """
    assignment = _BUMP_STAMPED if stamp else _BUMP
    keep = settings.ARTIFACT_SYNC_TOKEN_MAX_AGE + 86400
    return _BUMP_SQL.format(assignment=assignment), [
        community_id, community_id, community_id, LISTING_COLLECT_BATCH, keep,
        channel_id, before, channel_id,
    ]


_BUMP = "listing_version = listing_version + 1"
_BUMP_STAMPED = _BUMP + ", artifact_policy_modified_at = statement_timestamp()"
_BUMP_SQL = """
WITH bumped AS (
    UPDATE communities SET {assignment} WHERE id = %s RETURNING id, listing_version),
collected AS (
    DELETE FROM artifact_listing_changes
     WHERE community_id = %s AND listing_version IN (
           SELECT listing_version FROM artifact_listing_changes WHERE community_id = %s
            ORDER BY listing_version LIMIT %s)
       AND changed_at < statement_timestamp() - make_interval(secs => %s))
INSERT INTO artifact_listing_changes
       (community_id, listing_version, channel_id, readable_before, changed_at)
SELECT b.id, b.listing_version, %s::uuid,
       (SELECT CASE WHEN m.mode = 'absent' THEN 0
                    WHEN m.mode = 'same' AND ch.deleted_at IS NOT NULL THEN 0
                    WHEN (ch.visibility = 'open') = (m.mode <> 'flipped') THEN 1
                    ELSE 2 END
          FROM (SELECT %s::text AS mode) m
          LEFT JOIN channels ch ON ch.community_id = b.id AND ch.channel_id = %s::uuid),
       statement_timestamp()
  FROM bumped b"""


def store_statement(ctx: WriteContext, *, event: Event, channel_id: UUID | None) -> Statement:
    """The INSERT that stores `event`; it returns a row only when the event is new.

    ON CONFLICT makes a concurrent identical submission wait for the first to commit, then
    find it: exactly one of them stores the event.
    """
    return (
        "INSERT INTO events (community_id, event_id, pubkey, kind, created_at, channel_id,"
        " raw, received_at) VALUES (%s, %s, %s, %s, %s, %s, %s, statement_timestamp())"
        " ON CONFLICT (community_id, event_id) DO NOTHING RETURNING id",
        [
            ctx.community_id,
            event.id,
            event.pubkey,
            event.kind,
            event.created_at,
            channel_id,
            event.raw,
        ],
    )


def note_stored(
    ctx: WriteContext, rows: Rows, *, event: Event, channel_id: UUID | None
) -> bool:
    """Whether `store_statement`'s `rows` say the event was stored; a stored one is announced
    after the commit."""
    stored = bool(rows)
    if stored:
        ctx.announce(event=event, channel_id=channel_id)
    return stored
