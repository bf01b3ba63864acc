"""Incremental reads: one page of a round (PROTOCOL.md section 5).

A page, in order:

1. decodes the client's token (before touching the database: a bad token is a 400);
2. reads the fence T in a statement of its own, before any snapshot (artifacts.selectors.fence);
3. opens one REPEATABLE READ, read-only transaction under the 2 s budget; its first statement
   takes the snapshot every decision of the page is made by;
4. decides whether the token continues or the reader resets (another epoch or database, a token
   past its maximum age, a continuation while the deployment is not ready, a changed view); a
   retired key or an older token version reset too, decided in step 1;
5. walks the round's phases (FULL, or HEADS then MOVES), each in bounded steps, until the page
   holds `limit` entries, about 1 MiB of events, or the scan budget is spent;
6. seals the next token.

A round's T is fixed by its first page and carried in the token; the T read in step 2 is used by
a page that starts a round (or resets), and as the new view fence when the view is recomputed.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.db.backends.utils import CursorWrapper

from artifacts.selectors.budget import read_transaction
from artifacts.selectors.fence import CACHE_SECONDS, read_fence
from artifacts.selectors.filters import QueryFilter
from artifacts.selectors.round_sql import phase_sql
from artifacts.selectors.view import compute_view_digest, probe_view, view_unchanged
from artifacts.tokens import (
    Phase,
    ProgressToken,
    RetiredToken,
    database_tag,
    decode_progress,
    encode_progress,
    token_binding,
)
from relayinfo.sync_epoch import current_sync_state

# Candidate rows one page may examine, across its phases: the bounded work of a page.
SCAN_BUDGET = 4000
# A page stops adding events once it holds about this much stored JSON.
PAGE_BYTES = 1 << 20
_ORIGIN = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(slots=True)
class Page:
    # Stored event JSON, as stored.
    events: list[str]
    # (artifact id, reason): deleted | redacted | moved | access.
    removed: list[tuple[str, str]]
    progress: str
    more: bool
    reset: bool
    # Why the page reset (None when it did not): start, retired, epoch, expired, not_ready, view.
    reset_reason: str | None = None
    scanned: int = field(default=0)


@dataclass(slots=True)
class _Walk:
    """The state of one page's walk through the phases of its round."""

    phase: Phase
    cursor_at: datetime
    cursor_key: str | None
    limit: int
    events: list[str] = field(default_factory=list)
    removed: list[tuple[str, str]] = field(default_factory=list)
    seen: set[str] = field(default_factory=set)
    size: int = 0
    budget: int = SCAN_BUDGET

    @property
    def entries(self) -> int:
        return len(self.events) + len(self.removed)

    def full(self) -> bool:
        return self.entries >= self.limit or self.size >= PAGE_BYTES or self.budget <= 0

    def next_phase(self) -> None:
        self.phase = Phase.MOVES if self.phase is Phase.HEADS else Phase.DONE
        self.cursor_at, self.cursor_key = _ORIGIN, None


def read_page(
    *,
    community_id: int,
    reader: str,
    query: QueryFilter,
    ready: bool,
    overlap: timedelta | None = None,
    token_max_age: timedelta | None = None,
    fence_max_age: float = CACHE_SECONDS,
    before_snapshot: Callable[[], None] | None = None,
    alias: str = "default",
) -> Page:
    """Serve one page of an incremental read for `reader` in community `community_id`.

    `ready`: the deployment's readiness verdict (relayinfo.readiness); when False every round
    is a full round. `before_snapshot` runs between the fence read and the page's snapshot
    (tests inject a commit there). Raises `InvalidProgress` for a token that is not this
    reader's, community's and filter's.
    """
    if overlap is None:
        overlap = timedelta(seconds=settings.ARTIFACT_SYNC_OVERLAP_SECONDS)
    if token_max_age is None:
        token_max_age = timedelta(seconds=settings.ARTIFACT_SYNC_TOKEN_MAX_AGE)
    binding = token_binding(
        community_id=community_id, reader=reader, filter_digest=query.canonical_digest()
    )
    decoded = (
        None if query.progress is None else decode_progress(query.progress, binding=binding)
    )
    fence = read_fence(alias=alias, max_age=fence_max_age)
    if before_snapshot is not None:
        before_snapshot()
    with read_transaction(alias=alias, repeatable_read=True) as cursor:
        # The first statement takes the page's snapshot.
        epoch, identity = current_sync_state(cursor, alias=alias)
        cursor.execute("SELECT now()")
        now: datetime = cursor.fetchone()[0]
        probe = probe_view(cursor, community_id=community_id, reader=reader)
        database = database_tag(identity)

        def fresh_view() -> bytes:
            return compute_view_digest(
                cursor,
                community_id=community_id,
                reader=reader,
                channels=query.values("h"),
                types=query.values("type"),
            )

        reset_reason: str | None = None
        token: ProgressToken | None = None
        digest = b""
        if decoded is None:
            reset_reason = "start"
        elif isinstance(decoded, RetiredToken):
            reset_reason = "retired"
        elif decoded.epoch != epoch or decoded.database != database:
            reset_reason = "epoch"
        elif now - decoded.issued_at > token_max_age:
            reset_reason = "expired"
        elif not ready and decoded.phase is not Phase.FULL:
            reset_reason = "not_ready"
        elif view_unchanged(
            probe,
            fingerprint=decoded.view_fingerprint,
            computed_under=decoded.view_t,
            overlap=overlap,
        ):
            token = decoded
        else:
            digest = fresh_view()
            if digest != decoded.view_digest:
                reset_reason = "view"
            else:
                # Same view, checked in this snapshot: later changes carry stamps >= this fence.
                token = replace(
                    decoded, view_digest=digest, view_t=fence,
                    view_fingerprint=probe.fingerprint,
                )

        if token is None:
            view_digest = digest or fresh_view()
            round_t, watermark = fence, _ORIGIN
            walk = _Walk(Phase.FULL, _ORIGIN, None, query.limit)
            view = (view_digest, fence, probe.fingerprint)
        else:
            view = (token.view_digest, token.view_t, token.view_fingerprint)
            if token.phase is Phase.DONE:
                # A continuation round: W = the previous round's T. A cached or skewed fence
                # below W would make the range run backwards; the round then covers up to W.
                watermark = token.round_t
                round_t = max(fence, watermark)
                walk = _Walk(Phase.HEADS, _ORIGIN, None, query.limit)
            else:
                round_t, watermark = token.round_t, token.watermark
                walk = _Walk(token.phase, token.cursor_at, _key_text(token), query.limit)

        params: dict[str, Any] = {
            "community": community_id,
            "reader": reader,
            "round_t": round_t,
            "low": watermark - overlap,
        }
        if query.values("h") is not None:
            params["filter_h"] = list(query.values("h") or ())
        if query.values("type") is not None:
            params["filter_type"] = list(query.values("type") or ())
        _walk(cursor, walk, params)

    next_token = ProgressToken(
        phase=walk.phase,
        epoch=epoch,
        database=database,
        round_t=round_t,
        watermark=watermark,
        cursor_at=walk.cursor_at,
        cursor_key=_key_bytes(walk.phase, walk.cursor_key),
        view_digest=view[0],
        view_t=view[1],
        view_fingerprint=view[2],
        issued_at=now,
    )
    return Page(
        events=walk.events,
        removed=walk.removed,
        progress=encode_progress(next_token, binding=binding),
        more=walk.phase is not Phase.DONE,
        reset=reset_reason is not None,
        reset_reason=reset_reason,
        scanned=SCAN_BUDGET - walk.budget,
    )


def _walk(cursor: CursorWrapper, walk: _Walk, params: dict[str, Any]) -> None:
    """Fill the page from the walk's phase onwards, in bounded steps."""
    while walk.phase is not Phase.DONE and not walk.full():
        statements = phase_sql(
            walk.phase,
            with_cursor=walk.cursor_key is not None,
            has_channels="filter_h" in params,
            has_types="filter_type" in params,
        )
        step = {
            **params,
            "budget": walk.budget,
            "want": walk.limit - walk.entries,
            "cursor_at": walk.cursor_at,
            "cursor_key": walk.cursor_key,
        }
        cursor.execute(statements.hits, step)
        rows = cursor.fetchall()
        for at, key, artifact, raw, reason in rows:
            if raw is not None and walk.events and walk.size + len(raw) > PAGE_BYTES:
                # Leave this one for the next page; its position is not consumed.
                walk.size = PAGE_BYTES
                return
            walk.cursor_at, walk.cursor_key = at, key
            if artifact in walk.seen:
                continue
            walk.seen.add(artifact)
            if raw is not None:
                walk.events.append(raw)
                walk.size += len(raw)
            else:
                walk.removed.append((artifact, reason))
        if len(rows) == step["want"]:
            # The statement stopped at `want` hits: how far it scanned is not known, only
            # that it is within the budget; the page is done.
            walk.budget = 0
            return
        cursor.execute(statements.boundary, step)
        boundary = cursor.fetchone()
        scanned = 0 if boundary is None else int(boundary[0])
        walk.budget -= scanned
        if scanned < step["budget"]:
            walk.next_phase()
        else:
            walk.cursor_at, walk.cursor_key = boundary[1], boundary[2]


def _key_text(token: ProgressToken) -> str | None:
    if not token.cursor_key:
        return None
    if token.phase is Phase.MOVES:
        return token.cursor_key.hex()
    return str(uuid.UUID(bytes=token.cursor_key))


def _key_bytes(phase: Phase, key: str | None) -> bytes:
    if key is None or phase is Phase.DONE:
        return b""
    if phase is Phase.MOVES:
        return bytes.fromhex(key)
    return uuid.UUID(key).bytes
