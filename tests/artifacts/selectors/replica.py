"""A client's local collection, kept by rounds the way PROTOCOL.md section 5 asks clients to.

Pages are applied idempotently: a reset empties the collection first, `removed_channels` (a
replica made with `view_changes="incremental"`) deletes every item whose stored head's `h` is
listed, then events upsert by `d` and removals delete by `d`. Used by the selector tests to check
what a reader ends up holding.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import orjson

from artifacts.models import Community
from artifacts.selectors import async_reads
from artifacts.selectors.filters import parse_filter
from artifacts.selectors.rounds import Page, RoundRequest, prepare_round, read_page
from artifacts.selectors.sync_epoch import connection_identity
from relaycore.db import psycopg_connect_kwargs


def tag(event: dict[str, Any], name: str) -> str | None:
    return next((t[1] for t in event["tags"] if len(t) > 1 and t[0] == name), None)


class Replica:
    def __init__(
        self,
        community: Community,
        reader: str,
        *,
        channels: list[str] | None = None,
        types: list[str] | None = None,
        overlap: timedelta = timedelta(0),
        view_changes: str | None = None,
        driver: str = "sync",
    ) -> None:
        """`driver`: "sync" reads pages with `rounds.read_page` (Django's connection), "async"
        as the HTTP edge does (`async_reads.begin_read` and `read_page_async` on a connection
        of the read pool's class, kept for the replica's pages on a loop of its own), "guess"
        as the edge does with its guess of a quiet page in the first message
        (`async_reads.guess_round`, taken as the view's `parse` takes it)."""
        assert driver in ("sync", "async", "guess"), driver
        self.driver = driver
        self._loop: asyncio.AbstractEventLoop | None = None
        self._conn: async_reads.ReadConnection | None = None
        self.community = community
        self.reader = reader
        self.filter: dict[str, Any] = {"artifact": "current"}
        if channels is not None:
            self.filter["#h"] = channels
        if types is not None:
            self.filter["#type"] = types
        self.view_changes = view_changes
        self.overlap = overlap
        self.items: dict[str, dict[str, Any]] = {}
        self.token: str | None = None
        self.pages: list[Page] = []

    def page(
        self,
        limit: int = 100,
        *,
        ready: bool = True,
        before_snapshot: Callable[[], None] | None = None,
        **options: Any,
    ) -> Page:
        wanted: dict[str, Any] = {**self.filter, "progress": self.token, "limit": limit}
        if self.view_changes is not None:
            wanted["view_changes"] = self.view_changes
        query = parse_filter(wanted)
        request = prepare_round(
            community_id=self.community.pk, reader=self.reader, query=query
        )
        if self.driver != "sync":
            assert before_snapshot is None and not options, "the async driver takes neither"
            page = self._async_page(request, orjson.dumps([wanted]), ready=ready)
        else:
            page = read_page(
                request,
                ready=ready,
                overlap=self.overlap,
                before_snapshot=before_snapshot,
                **options,
            )
        self.apply(page)
        return page

    def _async_page(self, request: RoundRequest, body: bytes, *, ready: bool) -> Page:
        if self._loop is None:
            self._loop = asyncio.new_event_loop()

        async def page() -> Page:
            if self._conn is None:
                self._conn = await async_reads.ReadConnection.connect(
                    **psycopg_connect_kwargs(), autocommit=True)
                await async_reads.configure_connection(self._conn)
            guess = None
            if self.driver == "guess":
                guess = async_reads.guess_round(self.community.host, body, self.reader)
            read, found = await async_reads.begin_read(
                self._conn, self.community.host, guess=guess, ready=ready, overlap=self.overlap)
            assert found is not None and found.pk == self.community.pk
            identity = await connection_identity(self._conn)
            guessed = read.guess
            if guessed is not None and (guessed.community_id, guessed.reader) == (
                    found.pk, self.reader):
                assert guessed.query == request.query and guessed.binding == request.binding
                return await async_reads.read_page_async(
                    read, guessed, ready=ready, identity=identity, overlap=self.overlap)
            return await async_reads.read_page_async(
                read, request, ready=ready, identity=identity, overlap=self.overlap)

        return self._loop.run_until_complete(page())

    def close(self) -> None:
        """Close the async driver's connection and loop (nothing for the sync driver)."""
        if self._loop is not None:
            if self._conn is not None:
                self._loop.run_until_complete(self._conn.close())
                self._conn = None
            self._loop.close()
            self._loop = None

    def apply(self, page: Page) -> None:
        if page.reset:
            self.items.clear()
        if page.removed_channels:
            assert self.view_changes == "incremental", "removed_channels without opting in"
            lost = set(page.removed_channels)
            for gone in [d for d, event in self.items.items() if tag(event, "h") in lost]:
                del self.items[gone]
        for raw in page.events:
            event = orjson.loads(raw)
            d = tag(event, "d")
            assert d is not None
            self.items[d] = event
        for d, _reason in page.removed:
            self.items.pop(d, None)
        self.token = page.progress
        self.pages.append(page)

    def round(
        self, limit: int = 100, *, ready: bool = True, max_pages: int = 10_000, **options: Any
    ) -> list[Page]:
        """Pages until `more: false`; returns this round's pages."""
        pages = []
        for _ in range(max_pages):
            page = self.page(limit, ready=ready, **options)
            pages.append(page)
            if not page.more:
                return pages
        raise AssertionError("round did not finish")

    def heads(self) -> dict[str, str]:
        """d -> head event id."""
        return {d: event["id"] for d, event in self.items.items()}

    def fresh(self, limit: int = 1000) -> dict[str, str]:
        """What a brand-new full round would deliver now."""
        other = Replica(
            self.community, self.reader, overlap=self.overlap,
            channels=self.filter.get("#h"), types=self.filter.get("#type"),
        )
        other.round(limit)
        return other.heads()
