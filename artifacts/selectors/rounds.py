"""Incremental reads: one page of a round (PROTOCOL.md section 5).

A page, in order:

1. decodes the client's token (before touching the database: a bad token is a 400);
2. reads the fence T afresh, before any snapshot (artifacts.selectors.fence; never a cached
   value, so a round started after a write's `OK` includes the write);
3. opens one REPEATABLE READ, read-only transaction under the 2 s budget; its first statement
   takes the snapshot every decision of the page is made by;
4. decides whether the token continues or the reader resets (another epoch or database, a token
   past its maximum age, a continuation while the deployment is not ready, a changed view that
   the request did not opt in to receive incrementally, or whose enablement or types changed);
   a retired key or an older token version reset too, decided in step 1. A view change applied
   incrementally names the channels lost (`removed_channels`) and adds those gained to the
   round's catch-up; the view is recovered from the token's reference, for the channels that
   changed only (artifacts.selectors.reader_view);
5. walks the round's own phases (FULL, or HEADS then MOVES), then its catch-up (the heads of the
   channels gained, `_catch_up`), each in bounded steps, until the page holds `limit` entries,
   about 1 MiB of events, or the scan budget is spent;
6. seals the next token; a channel set too large for it is named by digest, and the driver
   stores it after the page's transaction (`Page.store`), before handing the token out.

A round's T is fixed by its first page and carried in the token; the T read in step 2 is used by
a page that starts a round (or resets), and as the new view fence when the view is recomputed.

Steps 3-6 are `page_steps`, a generator that yields each statement and receives its rows, so
the page is written once for two drivers: `read_page` runs it on Django's connection (the view),
`artifacts.selectors.async_reads.read_page_async` on an asyncio connection (the HTTP fast path).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Generator
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple

from django.conf import settings
from django.db import connections, transaction
from django.db.backends.utils import CursorWrapper

from artifacts.selectors.budget import execute_prepared, read_transaction
from artifacts.selectors.fence import read_fence
from artifacts.selectors.filters import QueryFilter
from artifacts.selectors.reader_view import (
    PROBE_COLUMNS,
    PROBE_FROM,
    UNRECOVERABLE,
    ViewProbe,
    derive_change,
    load_sets,
    private_channels,
    probe_from_row,
    seal_sets,
    summary_digest,
    view_unchanged,
)
from artifacts.selectors.round_sql import (
    CatchupTrailer,
    WindowTrailer,
    catchup_sql,
    split_trailer,
    window_sql,
)
from artifacts.selectors.sync_epoch import EPOCH_SQL, database_identity
from artifacts.tokens import (
    MAX_CATCHUP_CHANNELS,
    Phase,
    ProgressToken,
    RetiredToken,
    database_tag,
    decode_progress,
    encode_progress,
    token_binding,
)
from relaycore.steps import Rows, Statement, drive

# Candidate rows one page may examine, across its phases: the bounded work of a page.
SCAN_BUDGET = 4000
# A page stops adding events once it holds about this much stored JSON.
PAGE_BYTES = 1 << 20
_ORIGIN = datetime(1970, 1, 1, tzinfo=UTC)
# A page's first statement: its snapshot, the epoch, the policy and the view probe.
# The two EXISTS ask whether the continuation a finished round's token would start has any
# candidate at all, in [pending_low, pending_t): in a quiet community it has none, and the page
# then skips both windows (the same indexes, an index probe each). The last two columns are the
# snapshot's xmin and xmax (xid8): a round's first page keeps its xmin in the token, for the next
# round's "re-read, not re-sent" (round_sql._unseen); `pg_current_snapshot()` is the
# transaction's snapshot here (REPEATABLE READ), so the one the page classifies by. A quiet page
# needs nothing else (`may_be_quiet`).
_FIRST_STATEMENT = (
    f"SELECT now(), {EPOCH_SQL}, co.artifacts_enabled, co.artifact_types, {PROBE_COLUMNS},"
    " EXISTS (SELECT 1 FROM artifact_heads h WHERE h.community_id = co.id"
    "         AND h.modified_at >= %(pending_low)s AND h.modified_at < %(pending_t)s),"
    " EXISTS (SELECT 1 FROM artifact_revisions r WHERE r.community_id = co.id"
    "         AND r.source_channel_id IS NOT NULL"
    "         AND r.modified_at >= %(pending_low)s AND r.modified_at < %(pending_t)s),"
    # The listing change log and the channel set store (migration 0081): without them, views
    # (and catch-up sets too large for a token) are not recovered.
    " to_regclass('artifact_listing_changes') IS NOT NULL,"
    " to_regclass('artifact_sync_channel_sets') IS NOT NULL,"
    " pg_snapshot_xmin(pg_current_snapshot())::text::bigint,"
    " pg_snapshot_xmax(pg_current_snapshot())::text::bigint"
    f" FROM {PROBE_FROM}"
)
# Its parameters, in the order the asyncio driver prepares it in each session of its pool
# (`async_reads.QUIET_PAGE_STATEMENT`).
FIRST_STATEMENT_PARAMS = ("community", "reader", "pending_low", "pending_t")
# Below this distance between the previous round's first snapshot xmin and this page's xmax, the
# 32-bit comparison of row xmins against it is exact (round_sql._unseen).
_XID_HALF_RANGE = 1 << 31


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
    # The page belongs to a full round (else a continuation round): the metrics' round kind.
    full_round: bool = True
    # How far the round's T lags the page's now() (open transactions hold it back).
    fence_lag: timedelta = timedelta(0)
    # Channels that left the reader's view (an incremental view change): the client deletes
    # every item whose stored head's `h` is one of them before applying the page.
    removed_channels: list[str] = field(default_factory=list)
    # What the driver must run, in a transaction of its own after the page's, before handing
    # out `progress`: the store of the channel sets the token names by digest (None: nothing).
    store: Statement | None = None


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


class CommunityGone(Exception):
    """The request's community was deleted after the request was routed to it (404)."""


@dataclass(frozen=True, slots=True)
class RoundRequest:
    """An incremental request whose token was decoded (before any rate limit or budget)."""

    community_id: int
    reader: str
    query: QueryFilter
    binding: bytes
    decoded: ProgressToken | RetiredToken | None


def prepare_round(*, community_id: int, reader: str, query: QueryFilter) -> RoundRequest:
    """Decode the request's token; raises `InvalidProgress` (a 400 about the request's shape)
    for a token that is not this reader's, community's and filter's."""
    binding = token_binding(
        community_id=community_id, reader=reader, filter_digest=query.canonical_digest()
    )
    decoded = (
        None if query.progress is None else decode_progress(query.progress, binding=binding)
    )
    return RoundRequest(community_id, reader, query, binding, decoded)


PageSteps = Generator[Statement, Rows, "Page"]


def read_page(
    request: RoundRequest,
    *,
    ready: bool,
    overlap: timedelta | None = None,
    token_max_age: timedelta | None = None,
    scan_budget: int = SCAN_BUDGET,
    before_snapshot: Callable[[], None] | None = None,
    alias: str = "default",
) -> Page:
    """Serve one page of an incremental read.

    `ready`: the deployment's readiness verdict (relayinfo.readiness); when False every round
    is a full round. `scan_budget`: candidate rows the page may examine. `before_snapshot` runs
    between the fence read and the page's snapshot (tests inject a commit there).
    """
    fence = read_fence(alias=alias)
    if before_snapshot is not None:
        before_snapshot()
    with read_transaction(alias=alias, repeatable_read=True) as cursor:
        steps = page_steps(
            request,
            fence=fence,
            identity=database_identity(cursor, alias=alias),
            ready=ready,
            overlap=overlap,
            token_max_age=token_max_age,
            scan_budget=scan_budget,
        )
        page = run_steps(cursor, steps)
    if page.store is not None:
        with transaction.atomic(using=alias), connections[alias].cursor() as cursor:
            execute_prepared(cursor, *page.store)
    return page


def first_statement() -> str:
    """The SQL of every page's first statement (its parameters: FIRST_STATEMENT_PARAMS)."""
    return _FIRST_STATEMENT


def may_be_quiet(request: RoundRequest) -> bool:
    """Whether the request's page could be answered by its first statement alone: a page that
    starts the next continuation round of a finished one and names no stored set. It is quiet
    when the round's range holds no candidate and the view is unchanged, which only that
    statement's rows tell (`async_reads.read_page_async` may end the snapshot with it)."""
    decoded = request.decoded
    return (
        isinstance(decoded, ProgressToken) and _finished(decoded)
        and not decoded.private_ref and not decoded.catchup_ref
    )


def finds_pending(rows: Rows) -> bool:
    """Whether a page's first statement, answering with `rows`, found a candidate in the
    pending continuation's range (either phase); no row finds none."""
    if not rows:
        return False
    first = _FirstRow._make(rows[0])
    return first.heads_pending or first.moves_pending


def run_steps(cursor: CursorWrapper, steps: PageSteps) -> Page:
    """Drive a page's statements through a Django cursor (the page's transaction)."""
    return drive(steps, lambda statement: execute_prepared(cursor, *statement))


def page_steps(
    request: RoundRequest,
    *,
    fence: datetime,
    identity: str,
    ready: bool,
    overlap: timedelta | None = None,
    token_max_age: timedelta | None = None,
    scan_budget: int = SCAN_BUDGET,
) -> PageSteps:
    """One page, as the statements it runs in its snapshot (steps 3-6 above).

    The caller read the fence T before the snapshot, opened the page's REPEATABLE READ, read-only
    transaction under the read budget, and runs each statement yielded here in it, sending the
    rows back: the first one takes the snapshot. Written once for both drivers, the synchronous
    one (`run_steps`, Django's connection) and the HTTP fast path's asynchronous one.
    `identity`: the database's identity (artifacts.selectors.sync_epoch.database_identity).
    """
    if overlap is None:
        overlap = timedelta(seconds=settings.ARTIFACT_SYNC_OVERLAP_SECONDS)
    if token_max_age is None:
        token_max_age = timedelta(seconds=settings.ARTIFACT_SYNC_TOKEN_MAX_AGE)
    pending = _pending_range(request.decoded, fence=fence, overlap=overlap)
    first = yield from _first_read(request, pending)
    state = _page_state(first, request.query, fence=fence, identity=identity)
    request, state, loaded = yield from _expand_sets(request, state)
    reset_reason, resumed, lost = yield from _resume(
        request, state, ready=ready, overlap=overlap, token_max_age=token_max_age
    )
    token, quiet = yield from _round_token(
        request, state, first, resumed, pending=pending, overlap=overlap
    )
    walk, catchup = yield from _fill(
        request, first, token, quiet=quiet, overlap=overlap, scan_budget=scan_budget
    )
    next_token, store = seal_sets(token._replace(
        phase=walk.phase,
        epoch=state.epoch,
        database=state.database,
        cursor_at=walk.cursor_at,
        cursor_key=_key_bytes(walk.phase, walk.cursor_key),
        issued_at=state.now,
        catchup_pending=catchup.pending,
        catchup_cursor=catchup.cursor if catchup.pending else b"",
    ), community_id=request.community_id, now=state.now, has_store=state.has_store,
        loaded=loaded, token_max_age=token_max_age)
    return Page(
        events=walk.events,
        removed=walk.removed,
        progress=encode_progress(next_token, binding=request.binding),
        more=not _finished(next_token),
        reset=reset_reason is not None,
        reset_reason=reset_reason,
        full_round=token.watermark == _ORIGIN,
        fence_lag=state.now - token.round_t,
        removed_channels=[str(uuid.UUID(bytes=channel)) for channel in lost],
        store=store,
    )


@dataclass(frozen=True, slots=True)
class _Pending:
    """The continuation a finished round's token would start: [low, t), asked of the first
    statement (an empty range, from the origin to the origin, when the token's round is not
    done: the page then continues that round, or starts one)."""

    continues: bool
    low: datetime
    t: datetime


def _pending_range(
    decoded: ProgressToken | RetiredToken | None, *, fence: datetime, overlap: timedelta
) -> _Pending:
    if isinstance(decoded, ProgressToken) and _finished(decoded):
        return _Pending(True, decoded.round_t - overlap, max(fence, decoded.round_t))
    return _Pending(False, _ORIGIN, _ORIGIN)


class _FirstRow(NamedTuple):
    """`_FIRST_STATEMENT`'s row, by name (its columns in order)."""

    now: datetime
    epoch: int
    enabled: bool
    allowed_types: list[str] | None
    listing: int  # the view probe's three (PROBE_COLUMNS)
    members: int
    latest_member: datetime | None
    heads_pending: bool  # the pending continuation's HEADS phase has a candidate
    moves_pending: bool  # ... and its MOVES phase
    has_log: bool
    has_store: bool
    snapshot_xmin: int
    snapshot_xmax: int


def _first_read(request: RoundRequest, pending: _Pending) -> Generator[Statement, Rows, _FirstRow]:
    """The page's first statement: its snapshot, and what the rest of the page decides by."""
    rows = yield _FIRST_STATEMENT, {
        "community": request.community_id,
        "reader": request.reader,
        "pending_low": pending.low,
        "pending_t": pending.t,
    }
    if not rows:
        raise CommunityGone(request.community_id)
    return _FirstRow._make(rows[0])


def _page_state(
    first: _FirstRow, query: QueryFilter, *, fence: datetime, identity: str
) -> _PageState:
    return _PageState(
        now=first.now,
        epoch=first.epoch,
        database=database_tag(identity),
        probe=probe_from_row(first.listing, first.members, first.latest_member),
        fence=fence,
        summary=summary_digest(first.enabled, first.allowed_types, query.values("type")),
        has_log=first.has_log,
        has_store=first.has_store,
    )


def _expand_sets(
    request: RoundRequest, state: _PageState
) -> Generator[Statement, Rows, tuple[RoundRequest, _PageState, frozenset[bytes]]]:
    """The token's channel sets stored by digest, loaded into it: (the request with the
    expanded token, the state knowing whether every set was found, the digests loaded)."""
    if not isinstance(request.decoded, ProgressToken):
        return request, state, frozenset()
    expanded, loaded, complete = yield from load_sets(
        request.decoded, community_id=request.community_id, has_store=state.has_store)
    if expanded is request.decoded and complete:
        return request, state, loaded  # nothing stored by digest (a round's usual token)
    return replace(request, decoded=expanded), replace(state, sets_complete=complete), loaded


def _round_token(
    request: RoundRequest,
    state: _PageState,
    first: _FirstRow,
    resumed: ProgressToken | None,
    *,
    pending: _Pending,
    overlap: timedelta,
) -> Generator[Statement, Rows, tuple[ProgressToken, bool]]:
    """(the token this page works under, whether the round's range is quiet): a new full round
    when nothing is resumed, the next continuation round when the resumed one is done, else the
    resumed token as it is."""
    if resumed is None:
        # A new full round, T = this page's fence; its view is referenced, not listed.
        return ProgressToken(
            phase=Phase.FULL, epoch=state.epoch, database=state.database, round_t=state.fence,
            watermark=_ORIGIN, cursor_at=_ORIGIN, cursor_key=b"",
            view_digest=state.summary, view_t=state.fence,
            view_fingerprint=state.probe.fingerprint, issued_at=state.now,
            listing_version=state.probe.listing,
            view_private=(yield from private_channels(
                community_id=request.community_id, reader=request.reader,
                channels=request.query.values("h"))),
            round_xmin=first.snapshot_xmin,
        ), False
    if not pending.continues:
        return resumed, False
    # A continuation round: W = the previous round's T. A fence below W (a clock step) would
    # make the range run backwards; the round then covers up to W.
    token = resumed._replace(
        phase=Phase.HEADS, watermark=resumed.round_t,
        round_t=max(state.fence, resumed.round_t), cursor_at=_ORIGIN, cursor_key=b"",
        previous_xmin=resumed.round_xmin, round_xmin=first.snapshot_xmin,
    )
    # Nothing in the round's range, in this snapshot: both phases would come back empty.
    quiet = (
        not first.heads_pending and not first.moves_pending
        and (token.watermark - overlap, token.round_t) == (pending.low, pending.t)
    )
    return token, quiet


def _fill(
    request: RoundRequest,
    first: _FirstRow,
    token: ProgressToken,
    *,
    quiet: bool,
    overlap: timedelta,
    scan_budget: int,
) -> Generator[Statement, Rows, tuple[_Walk, _CatchUp]]:
    """The page's entries: the round's own scan from the token's position, then its catch-up
    while the page has room."""
    query = request.query
    walk = _Walk(token.phase, token.cursor_at, _key_text(token), query.limit, budget=scan_budget)
    scans = first.enabled and not quiet
    catchup = _CatchUp(sorted(token.catchup), token.catchup_pending and first.enabled,
                       token.catchup_cursor)
    if not scans:
        # Nothing is readable, and under this view (constant since the last reset) nothing
        # ever was; or the round's range holds no candidate: the round's own scan is done.
        walk.phase = Phase.DONE
        if not catchup.pending:
            return walk, catchup  # no statement to run: a quiet round builds no parameters
    params: dict[str, Any] = {
        "community": request.community_id,
        "reader": request.reader,
        "round_t": token.round_t,
        "low": token.watermark - overlap,
        **_resend_rule(token, overlap=overlap, snapshot_xmax=first.snapshot_xmax),
    }
    if query.values("h") is not None:
        params["filter_h"] = list(query.values("h") or ())
    types = _types_within(first.allowed_types, query.values("type"))
    if types is not None:
        params["types"] = types
    if scans:
        yield from _walk(walk, params)
    if catchup.pending and not walk.full():
        yield from _catch_up(walk, catchup, params)
    return walk, catchup


def _resend_rule(
    token: ProgressToken, *, overlap: timedelta, snapshot_xmax: int
) -> dict[str, Any]:
    """Re-read, not re-sent (PROTOCOL.md section 5): the continuation's candidates stamped below
    `resend_from` travel only if their row version is not older than `seen_xmin`, the low 32
    bits of the previous round's first snapshot xmin (round_sql._unseen).

    The rule applies only where the page can show it: a continuation round whose token knows the
    previous round's first snapshot, with this page's xmax at or after it and less than 2^31
    xids on (the 32-bit comparison is exact there; a restored or wrapped counter fails this).
    Otherwise `resend_from` is W - overlap, below which there are no candidates: every candidate
    travels, as before the rule.
    """
    previous = token.previous_xmin
    low = token.watermark - overlap
    if (
        token.watermark != _ORIGIN
        and 0 < previous <= snapshot_xmax
        and snapshot_xmax - previous < _XID_HALF_RANGE
    ):
        return {"resend_from": token.watermark, "seen_xmin": previous & 0xFFFFFFFF}
    return {"resend_from": low, "seen_xmin": 0}


def _finished(token: ProgressToken) -> bool:
    """The token's round is done: both its own scan and its catch-up."""
    return token.phase is Phase.DONE and not token.catchup_pending


@dataclass(frozen=True, slots=True)
class _PageState:
    """What the page's first statement read, and the fence read before it."""

    now: datetime
    epoch: int
    database: bytes
    probe: ViewProbe
    fence: datetime
    # The digest of the view's summary (enablement, allowed types within the filter).
    summary: bytes
    # The listing change log and the channel set store exist (migration 0081).
    has_log: bool
    has_store: bool
    # Every stored set the token names was found.
    sets_complete: bool = True


def _resume(
    request: RoundRequest,
    state: _PageState,
    *,
    ready: bool,
    overlap: timedelta,
    token_max_age: timedelta,
) -> Generator[Statement, Rows, tuple[str | None, ProgressToken | None, list[bytes]]]:
    """(reset reason, token to continue, the channels lost by an incremental view change);
    exactly one of the first two is None."""
    decoded = request.decoded
    if decoded is None:
        return "start", None, []
    if isinstance(decoded, RetiredToken):
        return "retired", None, []
    if decoded.epoch != state.epoch or decoded.database != state.database:
        return "epoch", None, []
    if state.now - decoded.issued_at > token_max_age:
        return "expired", None, []
    if not ready and decoded.phase is not Phase.FULL:
        # A full round under way stays correct; a continuation needs a ready deployment.
        return "not_ready", None, []
    if not state.sets_complete:
        return "view", None, []  # the round's catch-up set cannot be recovered
    if _finished(decoded) and (decoded.catchup or decoded.catchup_pending
                               or decoded.catchup_cursor):
        # A new round's catch-up starts empty.
        decoded = decoded._replace(catchup=frozenset(), catchup_pending=False, catchup_cursor=b"")
    if view_unchanged(
        state.probe,
        fingerprint=decoded.view_fingerprint,
        computed_under=decoded.view_t,
        overlap=overlap,
    ):
        return None, decoded, []
    if state.summary != decoded.view_digest:
        return "view", None, []  # enablement or allowed types differ
    if state.has_log:
        change = yield from derive_change(
            decoded, community_id=request.community_id, reader=request.reader,
            channels=request.query.values("h"), listing=state.probe.listing, overlap=overlap)
    else:
        change = UNRECOVERABLE
    if not change.recoverable:
        return "view", None, []
    private = change.private
    if private is None:
        private = yield from private_channels(
            community_id=request.community_id, reader=request.reader,
            channels=request.query.values("h"))
    # Checked in this snapshot: any later change carries a stamp >= this page's fence.
    checked = decoded._replace(view_t=state.fence, view_fingerprint=state.probe.fingerprint,
                               listing_version=state.probe.listing, view_private=private)
    lost, gained = change.lost, change.gained
    if not lost and not gained:
        return None, checked, []
    if not request.query.view_changes_incremental:
        return "view", None, []
    # An incremental view change (PROTOCOL.md section 5): L = lost, A = gained.
    catchup = (decoded.catchup - set(lost)) | set(gained)
    if len(catchup) > MAX_CATCHUP_CHANNELS and not state.has_store:
        return "view", None, []  # more than a token carries, and nowhere to store it
    return None, checked._replace(
        catchup=frozenset(catchup),
        # A channel joining restarts the cursor: its heads lie anywhere in the order.
        catchup_pending=bool(catchup) and (decoded.catchup_pending or bool(gained)),
        catchup_cursor=b"" if gained else decoded.catchup_cursor,
    ), lost


@dataclass(slots=True)
class _CatchUp:
    """The round's catch-up as one page walks it: the heads whose home is in C, channel by
    channel in `artifact_heads_channel` order, each channel's from its start."""

    channels: list[bytes]  # C, sorted
    pending: bool
    # The channel (16 bytes) being walked, and the last artifact passed in it (16 more); empty:
    # from the first channel's start.
    cursor: bytes

    def position(self) -> tuple[bytes, bytes | None] | None:
        """(channel, last artifact passed in it or None) to continue from; None when done."""
        channel, after = self.cursor[:16], self.cursor[16:] or None
        for candidate in self.channels:
            if candidate == channel:
                return candidate, after
            if candidate > channel:
                return candidate, None  # the cursor's channel left C: the next one, whole
        return None


def _catch_up(walk: _Walk, catchup: _CatchUp, params: dict[str, Any]) -> Generator[
    Statement, Rows, None
]:
    """Fill the rest of the page from the round's catch-up: readable heads whose home is in C
    with `modified_at` < T, as events (the catch-up never names removals). One statement per
    window of one channel's heads (`artifact_heads_channel`), bounded like the own scan's."""
    window = 0
    while not walk.full():
        position = catchup.position()
        if position is None:
            catchup.pending = False
            return
        channel, after = position
        want = walk.limit - walk.entries
        window = _next_window(window, want=want, budget=walk.budget)
        step = {
            **params,
            "window": window,
            "want": want,
            "cu_channel": uuid.UUID(bytes=channel),
            "cu_key": None if after is None else uuid.UUID(bytes=after),
        }
        rows = yield catchup_sql(
            with_cursor=after is not None, has_types="types" in params
        ), step
        trailer = split_trailer(rows, CatchupTrailer)
        scanned = 0 if trailer is None else int(trailer.scanned)
        walk.budget -= scanned
        for _is_trailer, artifact, raw, _scanned in rows:
            if walk.events and walk.size + len(raw) > PAGE_BYTES:
                walk.size = PAGE_BYTES  # this one waits for the next page
                return
            catchup.cursor = channel + artifact.bytes
            if str(artifact) in walk.seen:
                continue  # emitted by the own scan of this page, classified alike
            walk.seen.add(str(artifact))
            walk.events.append(raw)
            walk.size += len(raw)
        if len(rows) == want:
            continue  # heads may follow the last hit in this window
        if scanned < window:
            # The channel is done: the next one from its start, or the catch-up is done.
            following = [candidate for candidate in catchup.channels if candidate > channel]
            if not following:
                catchup.pending, catchup.cursor = False, b""
                return
            catchup.cursor = following[0]
        else:
            assert trailer is not None
            catchup.cursor = channel + trailer.artifact_id.bytes


def _next_window(previous: int, *, want: int, budget: int) -> int:
    """How many stream rows the next window reads (the own scan's and the catch-up's alike).

    A window starts a little larger than the entries still wanted (most candidates of a reader
    who reads most of the community come out) and doubles while windows come back short, until
    the page's scan budget is spent.
    """
    return min(budget, max(previous * 2, want + want // 4 + 16))


def _walk(walk: _Walk, params: dict[str, Any]) -> Generator[Statement, Rows, None]:
    """Fill the page from the walk's phase onwards, one window of candidates per statement
    (sized by `_next_window`)."""
    window = 0
    while walk.phase is not Phase.DONE and not walk.full():
        want = walk.limit - walk.entries
        window = _next_window(window, want=want, budget=walk.budget)
        statement = window_sql(
            walk.phase,
            with_cursor=walk.cursor_key is not None,
            has_channels="filter_h" in params,
            has_types="types" in params,
        )
        step = {
            **params,
            "window": window,
            "want": want,
            "cursor_at": walk.cursor_at,
            "cursor_key": walk.cursor_key,
        }
        rows = yield statement, step
        trailer = split_trailer(rows, WindowTrailer)
        scanned = 0 if trailer is None else int(trailer.scanned)
        walk.budget -= scanned
        for _is_trailer, at, _pos, key, artifact, raw, reason, _scanned in rows:
            if raw is not None and walk.events and walk.size + len(raw) > PAGE_BYTES:
                # This one waits for the next page: its position stays unconsumed.
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
        if len(rows) == want:
            # The window may hold candidates after the last hit: continue from that hit.
            continue
        # Every row of the window was classified.
        if scanned < window:
            walk.next_phase()
        else:
            assert trailer is not None
            walk.cursor_at, walk.cursor_key = trailer.at, trailer.key


def _types_within(allowed: list[str] | None, wanted: tuple[str, ...] | None) -> list[str] | None:
    """The types both the community's policy and the filter allow (None: every type)."""
    if allowed is None:
        return None if wanted is None else list(wanted)
    return sorted(set(allowed) & set(wanted)) if wanted is not None else sorted(allowed)


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
