"""A client's local collection, kept by rounds the way PROTOCOL.md section 5 asks clients to.

Pages are applied idempotently: a reset empties the collection first, `removed_channels` (a
replica made with `view_changes="incremental"`) deletes every item whose stored head's `h` is
listed, then events upsert by `d` and removals delete by `d`. Used by the selector tests to check
what a reader ends up holding.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import orjson

from artifacts.models import Community
from artifacts.selectors.filters import parse_filter
from artifacts.selectors.rounds import Page, prepare_round, read_page


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
    ) -> None:
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
        page = read_page(
            request,
            ready=ready,
            overlap=self.overlap,
            before_snapshot=before_snapshot,
            **options,
        )
        self.apply(page)
        return page

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
