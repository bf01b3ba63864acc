"""Rounds: fetch pages from ``POST /query`` and apply each one to the local collection.

A round starts from the collection's stored state:

- the relay advertises ``artifacts.incremental`` and the last round finished under it: a
  **continuation** round from the stored token;
- a round was interrupted (crash, kill, network) while the capability is advertised: it resumes
  from the token of its last applied page;
- otherwise (first run, capability absent, the token was refused): a **full** round from
  ``progress: null``. Without the capability a finished round's token is never continued, and an
  interrupted round starts again from null: a relay that is not ready serves only full rounds,
  which are always correct.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson

from buzzclient.backoff import RetryPolicy
from buzzclient.errors import ProtocolViolation, RelayRejected
from buzzclient.page import parse_page
from buzzclient.store import Changes, CollectionKey, CollectionStore, PageApplied
from buzzclient.transport import RelayAddress, RelayHttp, RelayInfo
from nostr.events import Event, is_canonical_uuid
from nostr.schnorr import pubkey_from_secret

logger = logging.getLogger("buzzclient")


@dataclass(frozen=True)
class SyncFilter:
    """The predicates incremental mode allows: home channels (``#h``) and types (``#type``)."""

    channels: tuple[str, ...] = ()
    types: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for channel in self.channels:
            if not is_canonical_uuid(channel):
                raise ValueError(f"channel {channel!r} is not a lowercase canonical UUID")
        for type_ in self.types:
            if not type_ or not isinstance(type_, str):
                raise ValueError("an artifact type must be a non-empty string")

    def predicates(self) -> dict[str, list[str]]:
        """Sorted and de-duplicated, as the relay canonicalizes them (tokens bind this)."""
        found: dict[str, list[str]] = {}
        if self.channels:
            found["#h"] = sorted(set(self.channels))
        if self.types:
            found["#type"] = sorted(set(self.types))
        return found

    def canonical(self) -> str:
        """The collection key's filter part: equal for filters the relay treats as equal."""
        return orjson.dumps(self.predicates(), option=orjson.OPT_SORT_KEYS).decode()


@dataclass
class RoundSummary:
    kind: str  # "full" or "continuation"
    incremental: bool  # the relay advertised artifacts.incremental when the round started
    pages: int = 0
    items: int = 0  # events + removals received
    changes: Changes = field(default_factory=Changes)
    resets: int = 0  # pages that reset a round the client did not start as a full round
    # The round was begun by an earlier run (interrupted) and finished by this one: its T was
    # fixed by its first page, so writes made since may be left to the next round.
    resumed: bool = False
    seconds: float = 0.0
    waited: float = 0.0  # seconds spent honouring 429 / backing off from 503
    # Of `seconds`, waiting for /query answers (retries included); pages fetched while the
    # previous one was applied count only the time still left to wait.
    relay_seconds: float = 0.0

    @property
    def added(self) -> int:
        return self.changes.added

    @property
    def updated(self) -> int:
        return self.changes.updated

    @property
    def removed(self) -> int:
        return self.changes.removed

    def line(self) -> str:
        """The one-line summary buzz-sync prints per round."""
        if self.added or self.updated or self.removed:
            changes = f"+{self.added:,} added, ~{self.updated:,} updated, -{self.removed:,} removed"
        else:
            changes = "no changes"
        resets = f", {plural(self.resets, 'reset')}" if self.resets else ""
        rate = ""
        if self.kind == "full" and self.seconds > 0 and self.items:
            rate = f" ({self.items / self.seconds:,.0f} items/s)"
        waited = f", waited {self.waited:.1f} s" if self.waited else ""
        return (
            f"{self.kind} round: {changes}{resets}; {plural(self.items, 'item')} in "
            f"{plural(self.pages, 'page')}, {self.seconds:.2f} s{rate}{waited}"
        )

    def as_dict(self) -> dict[str, Any]:
        """The summary for scripts (``buzz-sync --json``)."""
        return {
            "round": self.kind, "incremental": self.incremental, "added": self.added,
            "updated": self.updated, "removed": self.removed, "items": self.items,
            "pages": self.pages, "resets": self.resets, "resumed": self.resumed,
            "seconds": round(self.seconds, 3), "waited": round(self.waited, 3),
        }


def plural(count: int, noun: str) -> str:
    """``1 item``, ``2 items``, ``0 items``."""
    return f"{count:,} {noun}" + ("" if count == 1 else "s")


class Round:
    """One round in progress; ``step()`` fetches and applies one page."""

    def __init__(self, syncer: Syncer, info: RelayInfo) -> None:
        self.syncer = syncer
        self.info = info
        state = syncer.store.state(syncer.collection_id)
        self.version = state.version
        # Only tokens obtained while the capability was advertised are ever sent again, be
        # they a finished round's (continuation) or an interrupted round's (resumption).
        resumable = state.continuable and (state.round_open or state.complete)
        if info.incremental and resumable and state.progress is not None:
            self.progress: str | None = state.progress
            staged = state.round_open and state.target_slot != state.live_slot
            kind = "full" if staged else "continuation"
        else:
            self.progress = None
            kind = "full"
        self.summary = RoundSummary(
            kind=kind, incremental=info.incremental,
            resumed=self.progress is not None and state.round_open,
        )
        self.done = False
        self._started = time.monotonic()
        self._waited_before = syncer.http.stats.waited
        self._token_refused = False
        # The next page, requested while this one is parsed and applied: its token arrived
        # with this page, so the relay's work and ours overlap. Applying stays strictly in
        # order, so crash safety is untouched (a prefetched page is only ever data in memory).
        self._ahead: tuple[str, Future[bytes]] | None = None

    def _fetch(self, progress: str | None) -> bytes:
        syncer = self.syncer
        request: dict[str, Any] = {"artifact": "current", **syncer.filter.predicates()}
        request["limit"] = min(syncer.page_limit or self.info.max_limit, self.info.max_limit)
        request["progress"] = progress
        if self.info.incremental_view_changes:
            # Grants and removals then cost the channels they touch, not a full round.
            request["view_changes"] = "incremental"
        return syncer.http.query(request, endpoint=self.info.query_endpoint)

    def step(self) -> PageApplied:
        if self.done:
            raise RuntimeError("this round is finished")
        syncer = self.syncer
        ahead, self._ahead = self._ahead, None
        asked = time.monotonic()
        try:
            if ahead is not None and ahead[0] == self.progress:
                body = ahead[1].result()
            else:
                body = self._fetch(self.progress)
        except RelayRejected as exc:
            self.summary.relay_seconds += time.monotonic() - asked
            if exc.code != "invalid_progress" or self.progress is None or self._token_refused:
                raise
            # The relay cannot read our token (its key changed beyond rotation, or the file
            # was edited): start over with a full round rather than give up.
            logger.warning("relay refused the stored progress token; starting a full round")
            self._token_refused = True
            self.progress = None
            self.summary.kind = "full"
            self.summary.resets += 1
            return self.step()
        self.summary.relay_seconds += time.monotonic() - asked
        page = parse_page(body, verify=syncer.verify)
        logger.info(
            "relay answered: %s, %s%s, more: %s, reset: %s",
            plural(len(page.events), "event"), plural(len(page.removed), "removal"),
            f", {plural(len(page.removed_channels), 'channel')} left the view"
            if page.removed_channels else "",
            str(page.more).lower(), str(page.reset).lower(),
        )
        if page.more and syncer.prefetch:
            self._ahead = (page.progress, syncer.background().submit(self._fetch, page.progress))
        applied = syncer.store.apply_page(
            syncer.collection_id,
            expected_version=self.version,
            sent_progress=self.progress,
            page=page,
            continuable=self.info.incremental,
        )
        if page.reset and self.progress is not None:
            self.summary.resets += 1
            self.summary.kind = "full"
        self.version = applied.state.version
        self.progress = page.progress
        self.summary.pages += 1
        self.summary.items += page.items
        self.summary.changes += applied.changes
        self.summary.seconds = time.monotonic() - self._started
        self.summary.waited = syncer.http.stats.waited - self._waited_before
        if not page.more:
            self.done = True
        return applied


class Syncer:
    """Keeps one collection (relay, community, reader, filter) of a SQLite file current."""

    def __init__(
        self,
        *,
        relay_url: str,
        secret_hex: str,
        db: str | Path | CollectionStore,
        channels: Sequence[str] = (),
        types: Sequence[str] = (),
        page_limit: int | None = None,
        verify: bool = True,
        prefetch: bool = True,
        http_client: httpx.Client | None = None,
        retry: RetryPolicy | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.address = RelayAddress.parse(relay_url)
        self.pubkey = pubkey_from_secret(secret_hex)
        self.filter = SyncFilter(tuple(channels), tuple(types))
        if page_limit is not None and not 1 <= page_limit <= 1000:
            raise ValueError("page limit must be between 1 and 1000")
        self.page_limit = page_limit
        self.verify = verify
        self.prefetch = prefetch
        self._background: ThreadPoolExecutor | None = None
        self._own_store = not isinstance(db, CollectionStore)
        self.store = db if isinstance(db, CollectionStore) else CollectionStore(db)
        self.http = RelayHttp(
            self.address, secret_hex, client=http_client, retry=retry, sleep=sleep
        )
        self.key = CollectionKey(
            relay=self.address.base_url,
            community=self.address.host,
            pubkey=self.pubkey,
            filter=self.filter.canonical(),
        )
        self.collection_id = self.store.open_collection(self.key).id

    def background(self) -> ThreadPoolExecutor:
        """The one thread that fetches pages ahead."""
        if self._background is None:
            self._background = ThreadPoolExecutor(1, thread_name_prefix="buzz-prefetch")
        return self._background

    def close(self) -> None:
        if self._background is not None:
            # A page fetched ahead for a round that stopped (an error, a kill of the loop) is
            # simply dropped; waiting lets the request finish before its client closes.
            self._background.shutdown(wait=True, cancel_futures=True)
        self.http.close()
        if self._own_store:
            self.store.close()

    def __enter__(self) -> Syncer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def relay_info(self) -> RelayInfo:
        return self.http.relay_info()

    def start_round(self, info: RelayInfo | None = None) -> Round:
        """A round from the stored state; NIP-11 is read unless ``info`` is given."""
        return Round(self, info or self.relay_info())

    def run_round(
        self,
        *,
        info: RelayInfo | None = None,
        on_page: Callable[[Round], None] | None = None,
        max_pages: int = 1_000_000,
    ) -> RoundSummary:
        """Fetch and apply pages until the relay says ``more: false``."""
        current = self.start_round(info)
        for _ in range(max_pages):
            current.step()
            if on_page is not None:
                on_page(current)
            if current.done:
                return current.summary
        raise ProtocolViolation(f"round did not finish within {max_pages} pages")

    def artifacts(self) -> dict[str, Event]:
        """The live collection: ``d`` -> stored event."""
        return self.store.artifacts(self.collection_id)

    def heads(self) -> dict[str, str]:
        """The live collection: ``d`` -> head event id."""
        return self.store.heads(self.collection_id)


@dataclass(frozen=True)
class HeadChanges:
    """What changed between two ``Syncer.heads()`` snapshots, by artifact ``d``."""

    added: frozenset[str]
    updated: frozenset[str]
    removed: frozenset[str]

    def __bool__(self) -> bool:
        return bool(self.added or self.updated or self.removed)


def diff_heads(before: dict[str, str], after: dict[str, str]) -> HeadChanges:
    """Which artifacts a round added, updated (another head event) and removed: compare the
    ``heads()`` taken before it with those after, to react to exactly what changed."""
    return HeadChanges(
        added=frozenset(after.keys() - before.keys()),
        updated=frozenset(d for d in after.keys() & before.keys() if after[d] != before[d]),
        removed=frozenset(before.keys() - after.keys()),
    )


def sync_once(
    *,
    relay_url: str,
    secret_hex: str,
    db: str | Path | CollectionStore,
    channels: Sequence[str] = (),
    types: Sequence[str] = (),
    page_limit: int | None = None,
    verify: bool = True,
    http_client: httpx.Client | None = None,
) -> tuple[RoundSummary, dict[str, Event]]:
    """Run one complete round for a reader and return its summary and the live collection.

    The reader driver for tests: ``http_client`` may be an ``httpx.Client`` with
    ``transport=httpx.WSGITransport(app=...)`` to reach an in-process relay, ``db`` an
    existing ``CollectionStore`` (one SQLite file can hold many readers' collections).
    """
    with Syncer(
        relay_url=relay_url,
        secret_hex=secret_hex,
        db=db,
        channels=channels,
        types=types,
        page_limit=page_limit,
        verify=verify,
        http_client=http_client,
    ) as syncer:
        summary = syncer.run_round()
        return summary, syncer.artifacts()
